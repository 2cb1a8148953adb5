"""Tiny C programs with known verdicts, decided by each decision procedure (pySMT's table of examples
run on every solver); the MILP's trust rule; deadlines of isolated solver processes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from qverify.engine import EngineOptions, EngineStatus, check_file
from qverify.engine.solvers.base import CheckResult, CheckStatus, isolated
from qverify.engine.solvers.highs import TRUSTED_MAGNITUDE, HighsSolver, OptimumStatus
from qverify.engine.solvers.milp import MilpModel
from tests.conftest import budgeted

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc (the preprocessor) not installed")

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"

PRELUDE = '#include <stdint.h>\n#include "verifier.h"\n'

# (name, body of main, expected status, a counterexample that must be found when UNSAFE)
EXAMPLES = [
    (
        "linear-safe",
        (
            "int x = nondet_int(); int y = nondet_int(); __ESBMC_assume(0 <= x && x <= 100 && 0 <= y && y <= 100);"
            '__ESBMC_assert(3 * x - 2 * y <= 300, "bound");'
        ),
        "SAFE",
    ),
    (
        "linear-unsafe-one-point",
        (
            "int x = nondet_int(); int y = nondet_int(); __ESBMC_assume(0 <= x && x <= 100 && 0 <= y && y <= 100);"
            '__ESBMC_assert(3 * x - 2 * y < 300, "bound");'
        ),
        "UNSAFE",
    ),
    (
        "floor-shift-safe",
        (
            "int x = nondet_int(); __ESBMC_assume(-1000 <= x && x <= 1000);"
            '__ESBMC_assert((x >> 3) * 8 <= x, "floor");'
        ),
        "SAFE",
    ),
    (
        "trunc-division-unsafe",
        (
            "int x = nondet_int(); __ESBMC_assume(-1000 <= x && x <= 1000);"
            '__ESBMC_assert((x / 8) * 8 <= x, "truncation toward zero");'
        ),
        "UNSAFE",
    ),
    (
        "relu-safe",
        (
            "int x = nondet_int(); int r; __ESBMC_assume(-50 <= x && x <= 50); r = x < 0 ? 0 : x;"
            '__ESBMC_assert(r >= 0 && r <= 50 && (r == x || x < 0), "relu");'
        ),
        "SAFE",
    ),
    (
        "wrap-unsafe",
        (
            "int x = nondet_int(); int8_t w; __ESBMC_assume(0 <= x && x <= 200); w = (int8_t)x;"
            '__ESBMC_assert(w >= 0, "no wrap");'
        ),
        "UNSAFE",
    ),
    (
        "remainder-safe",
        (
            "int x = nondet_int(); __ESBMC_assume(-77 <= x && x <= 77);"
            '__ESBMC_assert(x % 5 > -5 && x % 5 < 5 && (x - x % 5) % 5 == 0, "remainder");'
        ),
        "SAFE",
    ),
    (
        "product-unsafe",
        (
            "int x = nondet_int(); int y = nondet_int(); __ESBMC_assume(1 <= x && x <= 20 && 1 <= y && y <= 20);"
            '__ESBMC_assert(x * y != 221, "13 * 17");'
        ),
        "UNSAFE",
    ),
    (
        "disjunctive-region-safe",
        (
            "int x = nondet_int(); __ESBMC_assume((0 <= x && x <= 10) || (20 <= x && x <= 30));"
            '__ESBMC_assert(x < 15 || x > 19, "gap");'
        ),
        "SAFE",
    ),
    (
        "earlier-assert-first",
        (
            "int x = nondet_int(); __ESBMC_assume(0 <= x && x <= 10);"
            '__ESBMC_assert(x != 7, "first"); __ESBMC_assert(x != 7 && x != 8, "second");'
        ),
        "UNSAFE",
    ),
]


def write(tmp_path: Path, name: str, body: str) -> Path:
    shutil.copy(MODELS_C / "verifier.h", tmp_path / "verifier.h")
    path = tmp_path / f"{name}.c"
    path.write_text(PRELUDE + "int main(void)\n{\n    " + body + "\n    return 0;\n}\n")
    return path


@pytest.mark.parametrize("solver", ["milp", "bitwuzla", "z3"])
@pytest.mark.parametrize(("name", "body", "expected"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_known_verdicts_per_solver(tmp_path, solver, name, body, expected):
    path = write(tmp_path, name, body)
    disable = ("attack", "bounds", "split") if solver != "milp" else ("attack", "bounds", "split", "smt")
    result = check_file(path, [tmp_path], budgeted(solver=solver, disable=disable))
    if result.status is EngineStatus.UNKNOWN and solver == "milp" and "expressible" in result.reason:
        pytest.skip(f"not a MILP query: {result.reason}")
    assert result.status.value == expected, result.to_json()
    if name == "earlier-assert-first":
        assert result.counterexample == (7,) and result.violated == "first"


def test_certify_reports_its_time(tmp_path):
    path = write(tmp_path, "certify", EXAMPLES[8][1])
    result = check_file(path, [tmp_path], budgeted(certify=True))
    assert result.status is EngineStatus.SAFE
    assert result.reason.startswith("certified by bitwuzla"), result.reason
    assert "certify" in result.times_s


def test_milp_infeasible_is_not_trusted_with_huge_rows():
    """x in [0, 1e12] integer, 2x = 1: infeasible, but rows of magnitude 2e12 make HiGHS's
    tolerances matter, so the answer is UNKNOWN, not UNSAT."""
    model = MilpModel()
    model.col_lo, model.col_hi, model.integer = [0.0], [1e12], [True]
    model.row_lo, model.row_hi = [0.5], [1.5]
    model.row_start, model.row_index, model.row_value = [0, 1], [0], [2.0]
    model.inputs = {0: 0}
    answer = HighsSolver().check(model, time.monotonic() + 10)
    assert answer.status is CheckStatus.UNKNOWN and "not trusted" in answer.reason
    model.col_hi = [TRUSTED_MAGNITUDE / 4]
    answer = HighsSolver().check(model, time.monotonic() + 10)
    assert answer.status is CheckStatus.UNSAT


def test_isolated_solver_respects_its_deadline():
    def slow() -> CheckResult:
        time.sleep(30)
        return CheckResult(CheckStatus.SAT)

    start = time.monotonic()
    answer = isolated(slow, time.monotonic() + 1.0)
    assert answer.status is CheckStatus.UNKNOWN and answer.reason == "timeout"
    assert time.monotonic() - start < 5
    assert (
        isolated(lambda: CheckResult(CheckStatus.UNSAT, "done"), time.monotonic() + 10).status
        is CheckStatus.UNSAT
    )


def test_the_run_stops_within_its_budget(tmp_path):
    """A query no step can decide quickly: the run must end in time with UNKNOWN and a reason."""
    body = (
        "int64_t x = nondet_longlong(); int64_t y = nondet_longlong();"
        "__ESBMC_assume(2 <= x && x <= 3037000500LL && 2 <= y && y <= 3037000500LL);"
        '__ESBMC_assert(x * y != 9223371873002223329LL, "factor");'
    )
    path = write(tmp_path, "hard", body)
    start = time.monotonic()
    result = check_file(path, [tmp_path], EngineOptions(timeout_s=8, attack_samples=64))
    # it stops itself at its deadline; the slack covers the steps between two deadline checks on a
    # busy machine (0.5 s of slack failed there), far below what a run that ignored it would take
    assert time.monotonic() - start < 8 + 4
    assert result.status in (EngineStatus.UNKNOWN, EngineStatus.SAFE, EngineStatus.UNSAFE)
    if result.status is EngineStatus.UNKNOWN:
        assert result.reason


def test_counterexample_values_round_trip_through_json(tmp_path):
    body = (
        "float x = nondet_float(); __ESBMC_assume(x >= 0.1f && x <= 0.2f);"
        '__ESBMC_assert(x * 3.0f != 0.45000002f, "exact float");'
    )
    path = write(tmp_path, "float", body)
    result = check_file(path, [tmp_path], budgeted())
    assert result.status is EngineStatus.UNSAFE, result.to_json()
    (value,) = result.counterexample
    assert isinstance(value, float)
    assert np.float32(value) * np.float32(3.0) == np.float32(0.45000002)
    import json

    assert json.loads(json.dumps(result.to_json()))["counterexample"][0] == value


def test_highs_minimize_finds_the_optimum_and_says_when_there_is_none(capfd):
    """min x + 2y, x + y >= 3.5 over integers in [-10, 10]: x = 10, y = -6 (objective -2); with
    x <= -11 as well nothing is feasible. HiGHS's banner stays off stdout."""
    model = MilpModel()
    x = model.add_column(-10, 10, True, 1.0)
    y = model.add_column(-10, 10, True, 2.0)
    model.add_row({x: 1.0, y: 1.0}, 3.5, float("inf"))
    best = HighsSolver().minimize(model, 10)
    assert best.status is OptimumStatus.OPTIMAL and best.has_solution
    assert best.objective == -2.0 and list(best.values) == [10.0, -6.0]
    model.add_row({x: 1.0}, float("-inf"), -11)
    assert HighsSolver().minimize(model, 10).status is OptimumStatus.INFEASIBLE
    assert "HiGHS" not in capfd.readouterr().out


def _random_lp(rng: np.random.Generator, n: int, m: int) -> dict[str, np.ndarray]:
    """A feasible LP in row form: random rows around a known point, boxes around it, a random cost."""
    point = rng.uniform(-1, 1, n)
    dense = rng.normal(0, 1, (m, n)) * (rng.random((m, n)) < 0.6)
    values = dense @ point
    row_lo = np.where(rng.random(m) < 0.3, -np.inf, values - rng.uniform(0, 1, m))
    row_hi = np.where(rng.random(m) < 0.3, np.inf, values + rng.uniform(0, 1, m))
    keep = dense != 0
    return {
        "cost": rng.normal(0, 1, n),
        "col_lo": point - rng.uniform(0.1, 2, n),
        "col_hi": point + rng.uniform(0.1, 2, n),
        "integer": np.zeros(n, dtype=bool),
        "row_lo": row_lo,
        "row_hi": row_hi,
        "start": np.concatenate(([0], np.cumsum(keep.sum(axis=1)))).astype(np.int64),
        "index": np.nonzero(keep)[1].astype(np.int64),
        "value": dense[keep],
    }


def test_lp_lower_bound_is_safe_for_any_multipliers():
    """`HighsSolver.lower_bound` matches scipy's optimum (from below, within 1e-7), and the safe
    bound of any multipliers -- HiGHS's duals perturbed, or random -- is below every feasible
    point's cost (weak duality with outward rounding)."""
    from scipy.optimize import linprog

    from qverify.engine.solvers.highs import safe_lower_bound

    rng = np.random.default_rng(7)
    for _ in range(20):
        arrays = _random_lp(rng, 6, 8)
        n, m = len(arrays["col_lo"]), len(arrays["row_lo"])
        dense = np.zeros((m, n))
        rows = np.repeat(np.arange(m), np.diff(arrays["start"]))
        dense[rows, arrays["index"]] = arrays["value"]
        finite_hi, finite_lo = np.isfinite(arrays["row_hi"]), np.isfinite(arrays["row_lo"])
        exact = linprog(
            arrays["cost"],
            A_ub=np.vstack([dense[finite_hi], -dense[finite_lo]]),
            b_ub=np.concatenate([arrays["row_hi"][finite_hi], -arrays["row_lo"][finite_lo]]),
            bounds=list(zip(arrays["col_lo"], arrays["col_hi"])),
            method="highs",
        )
        found = HighsSolver().lower_bound(arrays, time.monotonic() + 10)
        assert found.bound <= exact.fun + 1e-9
        assert found.bound >= exact.fun - 1e-7 * (1 + abs(exact.fun))
        for trial in range(5):
            duals = rng.normal(0, 3, m) if trial else np.zeros(m)
            bound = safe_lower_bound(arrays, duals)
            assert bound <= exact.fun + 1e-12 * (1 + abs(exact.fun))


def _market_split(rng: np.random.Generator, rows: int, columns: int) -> MilpModel:
    """Cornuejols and Dahl's market split: sum_j a_ij x_j = floor(sum_j a_ij / 2) over binaries,
    a_ij uniform in 0..99. Branch and bound needs minutes for 4 x 30 (no LP bound prunes)."""
    weights = rng.integers(0, 100, (rows, columns)).astype(float)
    model = MilpModel()
    columns_of = [model.add_column(0, 1, True, 0.0) for _ in range(columns)]
    for row in weights:
        target = float(np.floor(row.sum() / 2))
        model.add_row(dict(zip(columns_of, row, strict=True)), target, target)
    return model


def test_a_highs_run_ends_at_its_deadline_whatever_highs_does():
    """HiGHS's own time limit is not checked everywhere (its MIP's root cut separation): a MILP
    given time goes to a child process that is killed at the deadline. Here HiGHS's own limit is
    set far past the deadline, as if it ignored it, on a MILP it cannot finish in a few seconds."""
    from qverify.engine.solvers.base import NoAnswer
    from qverify.engine.solvers.highs import _lp, run_until

    model = _market_split(np.random.default_rng(7), 4, 30)
    solver = HighsSolver()
    highs = solver._solver(600.0)
    highs.passModel(_lp(model.arrays()))
    start = time.monotonic()
    answer = run_until(highs, time.monotonic() + 1.0)
    assert isinstance(answer, NoAnswer) and answer.timed_out
    assert time.monotonic() - start < 10  # far below HiGHS's own 600 s
    # through `solve`: the same stop, reported as a time limit
    result = solver.solve(model.arrays(), model.inputs, True, time.monotonic() + 1.0)
    assert result.status is CheckStatus.UNKNOWN and "time limit" in result.reason


def test_a_highs_run_in_a_child_process_answers_as_in_process():
    """The child's answer (status, solution) is the in-process run's: x + y = 7, x - y = 1 over
    integers gives x = 4, y = 3; x + y = 7.5 has no integer solution."""
    model = MilpModel()
    x = model.add_column(-10, 10, True, 0.0)
    y = model.add_column(-10, 10, True, 0.0)
    model.add_row({x: 1.0, y: 1.0}, 7, 7)
    model.add_row({x: 1.0, y: -1.0}, 1, 1)
    model.inputs = {0: x, 1: y}
    for seconds in (0.2, 30.0):  # in process, in a child
        answer = HighsSolver().check(model, time.monotonic() + seconds)
        assert answer.status is CheckStatus.SAT and answer.inputs == {0: 4.0, 1: 3.0}
    model.row_lo[0] = model.row_hi[0] = 7.5
    for seconds in (0.2, 30.0):
        assert HighsSolver().check(model, time.monotonic() + seconds).status is CheckStatus.UNSAT
