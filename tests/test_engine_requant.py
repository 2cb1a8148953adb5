"""int8 requantization as a threshold-table step function, against the evaluator and gcc.

Requantization maps an int32 accumulator to an output code with a monotone step function stored as
255 sorted int32 thresholds (code = QMIN + number of thresholds <= acc), found by the 8-step binary
search `qv_requant` of qverify's int8 model. The simplifier tabulates each call into one `Step` of
the accumulator, reading the breakpoints off the comparisons with table entries.

(a) The tabulated Step equals the evaluator of the original program on every accumulator of a
    range, for tables from a real requantization formula and random sorted tables with INT32_MIN /
    INT32_MAX sentinels and repeated thresholds.
(b) An oracle: tiny random int8/uint8 networks (2 inputs -> dense 2->4, requantized with a fused
    ReLU -> dense 4->2, requantized) in the C shape qverify generates, properties on the output
    codes, input boxes whose every point goes through the compiled C (gcc): the engine's verdict
    must equal the enumeration, and every UNSAFE counterexample must replay.
"""

from __future__ import annotations

import itertools
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from qverify.engine import EngineOptions, EngineStatus, cfront, check_file
from qverify.engine.scalar import ssa, symex
from qverify.engine.scalar.evaluate import evaluate_nodes
from qverify.engine.scalar.passes.simplify import _Simplifier
from tests.conftest import budgeted
from tests.test_engine_half import build_replay, log_outcome, replay

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

REQUANT_C = """#include <stdint.h>
int nondet_int(void);
void __ESBMC_assume(_Bool condition);
void __ESBMC_assert(_Bool condition, const char *message);
static inline int32_t qv_requant(int32_t acc, const int32_t t[255])
{
    int32_t q = 0;
    if (acc >= t[127]) { q = 128; }
    if (acc >= t[q + 63]) { q += 64; }
    if (acc >= t[q + 31]) { q += 32; }
    if (acc >= t[q + 15]) { q += 16; }
    if (acc >= t[q + 7]) { q += 8; }
    if (acc >= t[q + 3]) { q += 4; }
    if (acc >= t[q + 1]) { q += 2; }
    if (acc >= t[q]) { q += 1; }
    return q;
}
"""


def requant_codes(acc: np.ndarray, multiplier: np.float32, zero: int, low: int, high: int) -> np.ndarray:
    """clamp(zero + round_half_even(float32(float32(acc) * M)), low, high) for int64 accumulators."""
    scaled = (acc.astype(np.float32) * np.float32(multiplier)).astype(np.float32)
    return np.clip(zero + np.rint(scaled).astype(np.int64), low, high)


def requant_thresholds(multiplier: float, zero: int, qmin: int, qmax: int, relu: bool) -> np.ndarray:
    """The 255 thresholds of the formula, exactly: t[k] is the least int32 accumulator whose code is
    at least qmin + k + 1 (binary search over int32); INT32_MIN where every accumulator reaches it
    (below a fused ReLU's clamp at the zero point), INT32_MAX where none below INT32_MAX does."""
    low = max(qmin, zero) if relu else qmin
    targets = qmin + 1 + np.arange(255, dtype=np.int64)

    def reaches(acc: np.ndarray) -> np.ndarray:
        return requant_codes(acc, np.float32(multiplier), zero, low, qmax) >= targets

    lo = np.full(255, INT32_MIN, dtype=np.int64)  # does not reach (unless everything does)
    hi = np.full(255, INT32_MAX - 1, dtype=np.int64)  # reaches (unless nothing does)
    always, never = reaches(lo), ~reaches(hi)
    while np.any(hi - lo > 1):
        middle = (lo + hi) // 2
        up = reaches(middle)
        lo, hi = np.where(up, lo, middle), np.where(up, middle, hi)
    return np.where(always, INT32_MIN, np.where(never, INT32_MAX, hi))


def c_int32(value: int) -> str:
    return "(-2147483647 - 1)" if value == INT32_MIN else str(int(value))


def c_table(rows: list[np.ndarray]) -> str:
    return "{ " + ", ".join("{ " + ", ".join(c_int32(v) for v in row) + " }" for row in rows) + " }"


# ------------------------------------------------------------------------------ (a) the Step


def _random_table(rng: np.random.Generator) -> np.ndarray:
    """Sorted thresholds: from the formula, or random with repeats and sentinels."""
    if rng.random() < 0.5:
        multiplier = float(np.float32(10.0 ** rng.uniform(-5, -2)))
        return requant_thresholds(multiplier, int(rng.integers(-30, 30)), -128, 127, bool(rng.random() < 0.5))
    values = rng.integers(-200_000, 200_000, size=int(rng.integers(5, 60)))
    table = np.sort(rng.choice(values, size=255))  # many repeats
    low, high = int(rng.integers(0, 80)), int(rng.integers(0, 80))
    table[:low] = INT32_MIN
    if high:
        table[-high:] = INT32_MAX
    return table


def requant_program(tables: list[np.ndarray], lo: int, hi: int) -> str:
    """acc in [lo, hi]; out[k] = qv_requant(acc + k, table k); assert out[k] != an input."""
    lines = [REQUANT_C, f"static const int32_t qv_t[{len(tables)}][255] = {c_table(tables)};"]
    lines.append(f"static int32_t out[{len(tables)}];")
    lines += ["int main(void)", "{", "    int32_t acc = nondet_int();", "    int k;"]
    lines.append(f"    __ESBMC_assume({lo} <= acc && acc <= {hi});")
    lines.append(f"    for (k = 0; k < {len(tables)}; k++) {{")
    lines.append("        out[k] = qv_requant(acc + k, qv_t[k]);")
    lines.append('        __ESBMC_assert(out[k] != nondet_int(), "out");')
    lines += ["    }", "    return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(12))
def test_tabulated_step_equals_the_program(tmp_path, monkeypatch, seed):
    def bisection(*args):
        raise AssertionError("tabulated by bisection: the breakpoints were not read off the comparisons")

    monkeypatch.setattr(_Simplifier, "_constant_on", bisection)
    rng = np.random.default_rng(300 + seed)
    tables = [_random_table(rng) for _ in range(3)]
    lo = int(rng.integers(-300_000, 0))
    hi = lo + int(rng.integers(1_000, 400_000))
    source = tmp_path / "requant.c"
    source.write_text(requant_program(tables, lo, hi))
    executor = symex.Executor(cfront.parse_file(source), ssa.NodeManager())
    program = executor.run()
    simplifier = _Simplifier(program, None)
    simplifier.run()  # the breakpoints come from the comparisons: no bisection (see above)
    acc = program.inputs[0]
    outs = executor.globals["out"].elems
    results = [simplifier.memo[node.id] for node in outs]  # each call as the simplifier left it
    assert all(isinstance(node, (ssa.Step, ssa.Const)) for node in results)
    assert all(node.a is acc for node in results if isinstance(node, ssa.Step))
    xs = np.arange(lo, hi + 1, dtype=np.int64)
    original = evaluate_nodes(outs, {acc.id: xs}, len(xs), leaves=[acc])
    tabulated = evaluate_nodes(results, {acc.id: xs}, len(xs), leaves=[acc])
    for k, table in enumerate(tables):
        truth = np.searchsorted(table, xs + k, side="right")  # the number of thresholds <= acc + k
        assert np.array_equal(original[k], truth)
        assert np.array_equal(np.broadcast_to(tabulated[k], truth.shape), truth), k


def test_tabulation_falls_back_beyond_the_breakpoint_budget(tmp_path, monkeypatch):
    """More table breakpoints than the budget: the tabulation bisects with intervals instead, and
    the step is still exact."""
    from qverify.engine.scalar.passes import simplify as simplify_module

    monkeypatch.setattr(simplify_module, "BREAKPOINT_BUDGET", 16)
    tables = [requant_thresholds(float(np.float32(1e-3)), 0, -128, 127, False)]
    lo, hi = -60_000, 60_000
    source = tmp_path / "requant.c"
    source.write_text(requant_program(tables, lo, hi))
    executor = symex.Executor(cfront.parse_file(source), ssa.NodeManager())
    program = executor.run()
    simplifier = _Simplifier(program, None)
    simplifier.run()
    (out,) = executor.globals["out"].elems
    result = simplifier.memo[out.id]
    assert isinstance(result, ssa.Step) and len(result.starts) > 16
    acc = program.inputs[0]
    xs = np.arange(lo, hi + 1, dtype=np.int64)
    (values,) = evaluate_nodes([result], {acc.id: xs}, len(xs), leaves=[acc])
    assert np.array_equal(values, np.searchsorted(tables[0], xs, side="right"))


# ------------------------------------------------------------------------------ (b) oracle


@dataclass
class Layer:
    weights: np.ndarray  # int8 (n_out, n_in)
    biases: np.ndarray  # int32
    tables: list[np.ndarray]  # one per output channel, or one for the tensor
    zero_in: int
    relu: bool


@dataclass
class RequantInstance:
    seed: int
    unsigned: bool
    layers: list[Layer]
    lo: list[int]
    hi: list[int]
    points: np.ndarray
    y: np.ndarray  # output codes of the compiled C on every point


def _codes(unsigned: bool) -> tuple[int, int]:
    return (0, 255) if unsigned else (-128, 127)


def network_source(instance: RequantInstance, condition: str) -> str:
    qmin, _ = _codes(instance.unsigned)
    code_type = "uint8_t" if instance.unsigned else "int8_t"
    lines = [REQUANT_C, f"typedef {code_type} qv_num;"]
    for index, layer in enumerate(instance.layers, start=1):
        n_out, n_in = layer.weights.shape
        rows = (
            "{ "
            + ", ".join("{ " + ", ".join(str(int(w)) for w in row) + " }" for row in layer.weights)
            + " }"
        )
        lines.append(f"static const int8_t qv_w{index}[{n_out}][{n_in}] = {rows};")
        lines.append(
            f"static const int32_t qv_b{index}[{n_out}] = {{ {', '.join(map(str, layer.biases))} }};"
        )
        lines.append(f"static const int32_t qv_t{index}[{len(layer.tables)}][255] = {c_table(layer.tables)};")
    lines += [
        "static void qv_network(const qv_num x[2], qv_num y[2])",
        "{",
        "    qv_num h1[4];",
        "    int oc, k;",
    ]
    previous = "x"
    for index, layer in enumerate(instance.layers, start=1):
        n_out, n_in = layer.weights.shape
        target = "y" if index == len(instance.layers) else f"h{index}"
        row = "oc" if len(layer.tables) > 1 else "0"
        lines += [
            f"    for (oc = 0; oc < {n_out}; oc++) {{",
            f"        int32_t acc = qv_b{index}[oc];",
            f"        for (k = 0; k < {n_in}; k++) {{",
            f"            acc += (int32_t)qv_w{index}[oc][k] * ((int32_t){previous}[k] - ({layer.zero_in}));",
            "        }",
            f"        {target}[oc] = (qv_num)({qmin} + qv_requant(acc, qv_t{index}[{row}]));",
            "    }",
        ]
        previous = target
    lines += ["}", "int main(void)", "{", "    qv_num x[2], y[2];"]
    for i in range(2):
        lines.append(f"    x[{i}] = nondet_int();")
        qmin, qmax = _codes(instance.unsigned)  # a bound at the type's limit is left out (-Wtype-limits)
        bounds = [f"{instance.lo[i]} <= x[{i}]"] if instance.lo[i] > qmin else []
        bounds += [f"x[{i}] <= {instance.hi[i]}"] if instance.hi[i] < qmax else []
        if bounds:
            lines.append(f"    __ESBMC_assume({' && '.join(bounds)});")
    lines += [
        "    qv_network(x, y);",
        "#ifdef QV_PRINT",
        '    printf("Y %d %d\\n", (int)y[0], (int)y[1]);',
        "#endif",
        f'    __ESBMC_assert(!({condition}), "property");',
        "    return 0;",
        "}",
    ]
    return "#ifdef QV_PRINT\n#include <stdio.h>\n#endif\n" + "\n".join(lines) + "\n"


def _layer(
    rng: np.random.Generator, codes_in: np.ndarray, zero_in: int, n_out: int, unsigned: bool, relu: bool
):
    """A layer fitted to its inputs (codes, one row per point): biases centre the accumulators,
    multipliers spread them over 8-120 output codes; returns the layer and its output codes."""
    qmin, qmax = _codes(unsigned)
    weights = rng.integers(-127, 128, size=(n_out, codes_in.shape[1]))
    products = (codes_in - zero_in) @ weights.T  # (points, n_out): the accumulators less the bias
    spread = np.maximum(products.max(axis=0) - products.min(axis=0), 1)
    centre = (products.max(axis=0) + products.min(axis=0)) // 2
    biases = -centre + rng.integers(-1, 2, size=n_out) * (spread // 4)
    zero_out = int(rng.integers(qmin + 60, qmax - 59))
    per_channel = rng.random() < 0.6
    tables = []
    for channel in range(n_out if per_channel else 1):
        width = float(spread[channel] if per_channel else spread.max())
        multiplier = float(np.float32(rng.uniform(8.0, 120.0) / width))
        tables.append(requant_thresholds(multiplier, zero_out, qmin, qmax, relu))
    acc = products + biases
    codes = np.column_stack(
        [
            qmin + np.searchsorted(tables[j if per_channel else 0], acc[:, j], side="right")
            for j in range(n_out)
        ]
    )
    return Layer(weights, biases, tables, zero_in, relu), codes, zero_out


def make_requant_instance(seed: int, directory: Path, max_points: int) -> RequantInstance:
    """A network fitted to a random box; its outputs on every point from the compiled C (checked
    against numpy's twin of the layers)."""
    rng = np.random.default_rng(4000 + seed)
    unsigned = bool(rng.random() < 0.4)
    qmin, qmax = _codes(unsigned)
    per_input = int(max_points**0.5)
    lo, hi = [], []
    for _ in range(2):
        width = int(rng.integers(max(per_input // 4, 1), per_input + 1))
        start = int(rng.integers(qmin, qmax - width + 2))
        lo.append(start)
        hi.append(start + width - 1)
    points = np.array(list(itertools.product(*[range(a, b + 1) for a, b in zip(lo, hi)])), dtype=np.int64)
    zero_in = int(rng.integers(qmin + 100, qmin + 156))
    first, hidden, zero_hidden = _layer(rng, points, zero_in, 4, unsigned, relu=True)
    second, outputs, _ = _layer(rng, hidden, zero_hidden, 2, unsigned, relu=False)
    instance = RequantInstance(seed, unsigned, [first, second], lo, hi, points, outputs)
    printing = directory / f"int8_{seed}_print.c"
    printing.write_text("#define QV_PRINT 1\n" + network_source(instance, "0"))
    lines = replay(build_replay(printing), [" ".join(map(str, row)) for row in points])
    compiled = np.array([[int(t) for t in line.split()[1:]] for line in lines if line.startswith("Y ")])
    assert np.array_equal(compiled, outputs)  # the C computes what the thresholds say
    return instance


def requant_properties(instance: RequantInstance, more: bool) -> list[tuple[str, np.ndarray]]:
    """(condition on the output codes y, where it holds on the enumerated points): y[0] at its
    maximum (UNSAFE), above it (SAFE), y[0] > y[1]; with `more` also y[0] at a random upper
    quantile (UNSAFE). Thresholds the code type decides alone are left out (-Wtype-limits)."""
    y0, y1 = instance.y[:, 0], instance.y[:, 1]
    top = int(y0.max())
    thresholds = [top, top + 1]
    if more:
        rng = np.random.default_rng(instance.seed)
        thresholds.append(int(np.sort(y0)[int(rng.integers(len(y0) // 2, len(y0)))]))
    qmin, qmax = _codes(instance.unsigned)
    properties = [(f"y[0] >= {c}", y0 >= c) for c in thresholds if qmin < c <= qmax]
    return properties + [("y[0] > y[1]", y0 > y1)]


def check_requant(
    instance: RequantInstance,
    directory: Path,
    options: EngineOptions,
    more: bool = False,
    through_harness: bool = False,
) -> list[tuple[str, float, str]]:
    """Each property: the engine's verdict against the enumeration (the compiled C's output codes
    on every point; with `through_harness`, every point run through the property's own compiled
    harness); an UNSAFE counterexample is replayed by the compiled harness, which must report the
    violation. Returns (verdict, seconds, decided_by) per property."""
    outcomes = []
    for k, (condition, holds) in enumerate(requant_properties(instance, more)):
        truth = "UNSAFE" if holds.any() else "SAFE"
        harness = directory / f"int8_{instance.seed}_{k}.c"
        harness.write_text(network_source(instance, condition))
        executable = build_replay(harness) if through_harness else None
        if executable is not None:
            lines = replay(executable, [" ".join(map(str, row)) for row in instance.points])
            assert truth == ("UNSAFE" if any(line.startswith("VIOLATED") for line in lines) else "SAFE")
        start = time.monotonic()
        result = check_file(harness, [], options)
        elapsed = time.monotonic() - start
        context = (instance.seed, condition, instance.lo, instance.hi, result.to_json())
        assert result.status.value == truth, context
        if result.status is EngineStatus.UNSAFE:
            executable = executable or build_replay(harness)
            (line,) = replay(executable, [" ".join(str(int(v)) for v in result.counterexample)])
            assert line == "VIOLATED property", (context, line)
        outcomes.append((result.status.value, elapsed, result.decided_by))
        log_outcome(instance.seed, condition, result, elapsed)
    return outcomes


FAST_REQUANT_SEEDS = range(30)
SLOW_REQUANT_SEEDS = range(30, 230)
# the exact procedures alone on some instances: MILP (a binary per reachable piece boundary of each step)
# and SMT (ite chains over the reachable pieces)
MILP_ONLY = budgeted(disable=("attack", "bounds", "split", "smt"))
SMT_ONLY = budgeted(solver="bitwuzla", disable=("attack", "bounds", "split", "milp"))


@pytest.fixture(scope="module")
def requant_directory(tmp_path_factory):
    return tmp_path_factory.mktemp("requant")


@pytest.mark.parametrize("seed", FAST_REQUANT_SEEDS)
def test_requant_oracle(requant_directory, seed):
    instance = make_requant_instance(seed, requant_directory, max_points=1024)
    check_requant(instance, requant_directory, budgeted())


@pytest.mark.parametrize("mode", ["milp", "smt"])
def test_requant_oracle_exact_procedures(requant_directory, mode):
    instance = make_requant_instance(0, requant_directory, max_points=4096)
    check_requant(instance, requant_directory, MILP_ONLY if mode == "milp" else SMT_ONLY)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_REQUANT_SEEDS)
def test_requant_oracle_slow(requant_directory, seed):
    instance = make_requant_instance(seed, requant_directory, max_points=65536)
    check_requant(instance, requant_directory, budgeted(), more=True, through_harness=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_REQUANT_SEEDS[:40])
@pytest.mark.parametrize("mode", ["milp", "smt"])
def test_requant_oracle_exact_procedures_slow(requant_directory, seed, mode):
    instance = make_requant_instance(seed, requant_directory, max_points=65536)
    check_requant(instance, requant_directory, MILP_ONLY if mode == "milp" else SMT_ONLY, more=True)
