"""Shared by both paths: hiGHS (highspy) as a MILP feasibility oracle and optimiser; the only module that
imports highspy.

The engine asks feasibility problems (zero objective): HiGHS stops at the first integer-feasible
point. Tolerances are tightened (1e-9) well below the 0.5 margin every execution has on every row
of an integer encoding (see `qverify.engine.scalar.milp` and docs/engine.md). `minimize` solves a
model with an objective (`MilpModel.cost`) to optimality or to its time limit, for callers that
want the best solution rather than any (weight repair, `qverify.assurance.repair`); its result says
which of the two it got.
"""

from __future__ import annotations

import enum
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from qverify.engine.solvers.base import CheckResult, CheckStatus, DecisionProcedure, NoAnswer, run_isolated
from qverify.engine.solvers.milp import MilpModel
from qverify.errors import ToolMissingError

try:
    import highspy
except ImportError as error:  # pragma: no cover - highspy is a dependency
    highspy = None
    _IMPORT_ERROR = error
else:
    _IMPORT_ERROR = None

TOLERANCE = 1e-9
# An "infeasible" is trusted only when every row's magnitude (sum of |coefficient| * |bound| of its
# columns) is at most this: then the solver's tolerances (1e-9, relative after its scaling) amount
# to at most 1e-2, far below the 0.5 margin every execution has (docs/engine.md).
TRUSTED_MAGNITUDE = 1e7
# MILPs given at least this long run in a child process killed at their deadline (`run_until`); a
# fork costs a few ms, and HiGHS's overrun of a shorter limit is short too
ISOLATE_MIN_S = 0.5


class OptimumStatus(enum.Enum):
    OPTIMAL = "optimal"  # proved optimal (within the gaps asked for)
    FEASIBLE = "feasible"  # the time limit came first: the best solution found, not proved optimal
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no solution"  # time limit (or another stop) before any solution


@dataclass(frozen=True, slots=True)
class Optimum:
    """What `HighsSolver.minimize` found: the status, HiGHS's own words for it, the objective of the
    best solution and the proved lower bound, the column values (empty without a solution)."""

    status: OptimumStatus
    highs_status: str
    objective: float
    bound: float
    values: np.ndarray
    time_s: float
    nodes: int = 0

    @property
    def has_solution(self) -> bool:
        return self.status in (OptimumStatus.OPTIMAL, OptimumStatus.FEASIBLE)


@dataclass(frozen=True, slots=True)
class LpBound:
    """What `HighsSolver.lower_bound` found: a lower bound of the LP's minimum that holds whatever
    errors HiGHS made (`safe_lower_bound`; -inf when its answer gave none), the solution HiGHS
    reported (empty without one) and its objective there, and HiGHS's words for its status."""

    bound: float
    values: np.ndarray
    objective: float
    highs_status: str
    time_s: float


class HighsSolver(DecisionProcedure):
    name = "highs"

    def __init__(self, threads: int = 1) -> None:
        if highspy is None:
            raise ToolMissingError(f"highspy is not installed ({_IMPORT_ERROR})")
        self.threads = threads

    def check(self, model: MilpModel, deadline: float) -> CheckResult:
        return self.solve(model.arrays(), model.inputs, model.trust_infeasible, deadline)

    def solve(
        self,
        arrays: dict[str, np.ndarray],
        inputs: dict[int, int],
        trust_infeasible: bool,
        deadline: float,
        max_nodes: int | None = None,
    ) -> CheckResult:
        """Feasibility of the rows `row_lo <= A x <= row_hi` (row-wise arrays, see `MilpModel.arrays`)
        over the columns' bounds; `inputs` maps program input indices to columns (for a solution).
        `max_nodes`: a branch-and-bound node limit as well (a limit of work, not of time)."""
        start = time.monotonic()
        remaining = deadline - start
        if remaining <= 0.05:
            return CheckResult(CheckStatus.UNKNOWN, "timeout before the MILP query")
        if np.any(arrays["col_lo"] > arrays["col_hi"]):
            return CheckResult(CheckStatus.UNSAT, "empty variable bounds", time_s=0.0)
        h = self._solver(remaining)
        if max_nodes is not None:
            h.setOptionValue("mip_max_nodes", int(max_nodes))
        h.passModel(_lp(arrays))
        answer = run_until(h, deadline)
        elapsed = time.monotonic() - start
        if isinstance(answer, NoAnswer):
            return CheckResult(CheckStatus.UNKNOWN, _no_answer_words(answer, elapsed), time_s=elapsed)
        status = highspy.HighsModelStatus(answer.status)
        stats = {"mip_nodes": answer.mip_node_count}
        if status == highspy.HighsModelStatus.kInfeasible:
            magnitude = row_magnitude(arrays)
            stats["row_magnitude"] = int(min(magnitude, 2**62))
            if not trust_infeasible or magnitude > TRUSTED_MAGNITUDE:
                return CheckResult(
                    CheckStatus.UNKNOWN,
                    f"HiGHS reports infeasible, but rows of magnitude {magnitude:.3g} make its tolerances "
                    "matter: not trusted",
                    time_s=elapsed,
                    stats=stats,
                )
            return CheckResult(CheckStatus.UNSAT, "infeasible", time_s=elapsed, stats=stats)
        if status == highspy.HighsModelStatus.kOptimal:
            values = answer.col_value.tolist()
            found = {index: values[column] for index, column in inputs.items()}
            return CheckResult(CheckStatus.SAT, "", found, elapsed, stats)
        if status == highspy.HighsModelStatus.kTimeLimit:
            return CheckResult(
                CheckStatus.UNKNOWN, f"MILP time limit after {elapsed:.1f} s", time_s=elapsed, stats=stats
            )
        return CheckResult(
            CheckStatus.UNKNOWN, f"HiGHS: {h.modelStatusToString(status)}", time_s=elapsed, stats=stats
        )

    def minimize(
        self,
        model: MilpModel,
        time_limit_s: float,
        rel_gap: float = 0.0,
        abs_gap: float = 1e-6,
        start: np.ndarray | None = None,
    ) -> Optimum:
        """Minimise `model.cost` over the model's rows and columns within `time_limit_s` seconds.

        The gaps default to (nearly) exact optimality: HiGHS's own default relative gap (1e-4) would
        stop early on objectives that combine terms of very different weights. `start`, a feasible
        point (one value per column), is handed to HiGHS as its first incumbent: a model with a known
        trivial solution then never ends without one."""
        begin = time.monotonic()
        arrays = model.arrays()
        if np.any(arrays["col_lo"] > arrays["col_hi"]):
            return Optimum(
                OptimumStatus.INFEASIBLE, "empty variable bounds", math.inf, math.inf, np.zeros(0), 0.0
            )
        h = self._solver(time_limit_s)
        h.setOptionValue("mip_rel_gap", float(rel_gap))
        h.setOptionValue("mip_abs_gap", float(abs_gap))
        h.passModel(_lp(arrays))
        if start is not None:
            solution = highspy.HighsSolution()
            solution.col_value = list(np.asarray(start, dtype=np.float64))
            solution.value_valid = True
            h.setSolution(solution)
        answer = run_until(h, begin + time_limit_s)
        elapsed = time.monotonic() - begin
        if isinstance(answer, NoAnswer):
            words = _no_answer_words(answer, elapsed)
            return Optimum(OptimumStatus.NO_SOLUTION, words, math.inf, -math.inf, np.zeros(0), elapsed)
        status = highspy.HighsModelStatus(answer.status)
        nodes = answer.mip_node_count
        words = h.modelStatusToString(status)
        values = answer.col_value
        has_values = values.size == model.n_cols and answer.primal_solution_status == 2
        objective = answer.objective_function_value if has_values else math.inf
        bound = answer.mip_dual_bound
        if status == highspy.HighsModelStatus.kOptimal:
            return Optimum(OptimumStatus.OPTIMAL, words, objective, bound, values, elapsed, nodes)
        if status == highspy.HighsModelStatus.kInfeasible:
            return Optimum(OptimumStatus.INFEASIBLE, words, math.inf, math.inf, np.zeros(0), elapsed, nodes)
        if has_values:
            return Optimum(OptimumStatus.FEASIBLE, words, objective, bound, values, elapsed, nodes)
        return Optimum(OptimumStatus.NO_SOLUTION, words, math.inf, bound, np.zeros(0), elapsed, nodes)

    def lower_bound(self, arrays: dict[str, np.ndarray], deadline: float) -> LpBound:
        """Minimise `cost` over the LP (integrality ignored) and return a rigorous lower bound of
        its minimum: HiGHS's row duals turned into a bound by `safe_lower_bound` (weak duality,
        evaluated with outward rounding), so that neither its tolerances nor its mistakes can make
        the bound too high. (HiGHS's presolve has answered "infeasible" for feasible LPs of the
        network level -- a 784-256x6 ReLU node whose centre execution satisfies every row to
        1e-14 -- and a refutation read from that status was unsound.)"""
        start = time.monotonic()
        remaining = deadline - start
        empty = np.zeros(0)
        if remaining <= 0.05:
            return LpBound(-math.inf, empty, math.inf, "timeout before the LP", 0.0)
        if np.any(arrays["col_lo"] > arrays["col_hi"]):
            return LpBound(math.inf, empty, math.inf, "empty variable bounds", 0.0)
        h = self._solver(remaining)
        model = _lp({**arrays, "integer": np.zeros(len(arrays["col_lo"]), dtype=bool)})
        h.passModel(model)
        h.run()
        status = h.getModelStatus()
        words = h.modelStatusToString(status)
        solution = h.getSolution()
        bound, values, objective = -math.inf, empty, math.inf
        if status == highspy.HighsModelStatus.kOptimal:
            values = np.asarray(solution.col_value, dtype=np.float64)
            objective = float(np.asarray(arrays["cost"]) @ values)
            if solution.dual_valid:
                bound = safe_lower_bound(arrays, np.asarray(solution.row_dual, dtype=np.float64))
        return LpBound(bound, values, objective, words, time.monotonic() - start)

    def _solver(self, seconds: float):
        h = _quiet_highs()
        h.silent()
        for option, value in (
            ("time_limit", float(max(seconds, 0.05))),
            ("primal_feasibility_tolerance", TOLERANCE),
            ("dual_feasibility_tolerance", TOLERANCE),
            ("mip_feasibility_tolerance", TOLERANCE),
            ("threads", self.threads),
            ("random_seed", 0),
        ):
            h.setOptionValue(option, value)
        return h


@dataclass(frozen=True, slots=True)
class HighsAnswer:
    """What a finished HiGHS run left: its model status (the enum's value), the solution's column
    values, and the numbers the callers read from `getInfo`."""

    status: int
    col_value: np.ndarray
    mip_node_count: int
    primal_solution_status: int
    objective_function_value: float
    mip_dual_bound: float


def _answer(h) -> HighsAnswer:
    info = h.getInfo()
    return HighsAnswer(
        status=int(h.getModelStatus()),
        col_value=np.asarray(h.getSolution().col_value, dtype=np.float64),
        mip_node_count=int(getattr(info, "mip_node_count", 0) or 0),
        primal_solution_status=int(getattr(info, "primal_solution_status", 0) or 0),
        objective_function_value=float(getattr(info, "objective_function_value", math.nan)),
        mip_dual_bound=float(getattr(info, "mip_dual_bound", -math.inf)),
    )


def run_until(h, deadline: float) -> HighsAnswer | NoAnswer:
    """Run the MILP `h` (options and model set) and return its answer. HiGHS's `time_limit` is not
    checked everywhere: its MIP does not stop for an LP time-out in the root's cut separation
    (HiGHS issues #885, #2214), and its interrupt callbacks are not called there either. On a
    scalar-path MILP of digits img19 eps 2 at <5,11> (2,105 columns, 1,975 integer) a 20 s limit
    ended after 34-39 s, with or without an interrupt callback, and the engine overran its task.
    So a run given `ISOLATE_MIN_S` or more goes to a child process killed at the deadline
    (`run_isolated`): an overrun costs at most its grace."""
    if deadline - time.monotonic() < ISOLATE_MIN_S:
        h.run()
        return _answer(h)

    def work() -> HighsAnswer:
        h.run()
        return _answer(h)

    return run_isolated(work, deadline)


def _no_answer_words(answer: NoAnswer, elapsed: float) -> str:
    if answer.timed_out:
        return f"MILP time limit after {elapsed:.1f} s (HiGHS overran it and was stopped)"
    return f"MILP: {answer.reason}"


def _quiet_highs():
    """A Highs object, without the banner HiGHS prints on the process's stdout (file descriptor 1)
    when the first one is made: commands that solve in process (`qverify repair`) keep stdout for
    their own output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 1)
            return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _lp(arrays: dict[str, np.ndarray]):
    """The arrays as a HighsLp (objective `cost`, zero when absent; infinite bounds as HiGHS's infinity)."""
    n_cols, n_rows = len(arrays["col_lo"]), len(arrays["row_lo"])
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    inf = highspy.kHighsInf
    lp.col_cost_ = np.asarray(arrays.get("cost", np.zeros(n_cols)), dtype=np.float64)
    lp.col_lower_ = np.where(np.isfinite(arrays["col_lo"]), arrays["col_lo"], -inf)
    lp.col_upper_ = np.where(np.isfinite(arrays["col_hi"]), arrays["col_hi"], inf)
    lp.row_lower_ = np.where(np.isfinite(arrays["row_lo"]), arrays["row_lo"], -inf)
    lp.row_upper_ = np.where(np.isfinite(arrays["row_hi"]), arrays["row_hi"], inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = arrays["start"]
    lp.a_matrix_.index_ = arrays["index"]
    lp.a_matrix_.value_ = arrays["value"]
    if arrays["integer"].any():
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if flag else highspy.HighsVarType.kContinuous
            for flag in arrays["integer"]
        ]
    return lp


def row_magnitude(arrays: dict[str, np.ndarray]) -> float:
    """max over rows of sum |a_ij| * max(|lo_j|, |hi_j|) + the row's finite bound."""
    scale = np.maximum(np.abs(arrays["col_lo"]), np.abs(arrays["col_hi"]))
    scale = np.where(np.isfinite(scale), scale, 1e30)
    start, index, value = arrays["start"], arrays["index"], arrays["value"]
    if len(value) == 0:
        return 0.0
    contributions = np.abs(value) * scale[index]
    sums = np.add.reduceat(contributions, start[:-1]) if len(start) > 1 else np.zeros(0)
    empty = start[:-1] == start[1:]
    sums = np.where(empty, 0.0, sums)
    bounds = np.maximum(
        np.where(np.isfinite(arrays["row_lo"]), np.abs(arrays["row_lo"]), 0.0),
        np.where(np.isfinite(arrays["row_hi"]), np.abs(arrays["row_hi"]), 0.0),
    )
    return float(np.max(sums + bounds)) if len(sums) else 0.0


def safe_lower_bound(arrays: dict[str, np.ndarray], row_dual: np.ndarray) -> float:
    """A lower bound of min cost . x over row_lo <= A x <= row_hi, col_lo <= x <= col_hi that holds
    for any multipliers y (weak duality; Neumaier and Shcherbina's safe bound):

        cost . x = (cost - A^T y) . x + y . (A x) >= sum_j min over [col_lo_j, col_hi_j] of d_j x_j
                                                    + sum_r min(y_r row_lo_r, y_r row_hi_r),

    d = cost - A^T y. Multipliers that would read an infinite row bound are set to 0 first; d's
    float64 error (gamma_k of |cost| + |A|^T |y|, k the terms of a column's sum) and the final sum's
    are charged. A column with an infinite bound that d needs makes the bound -inf."""
    row_lo, row_hi = arrays["row_lo"], arrays["row_hi"]
    y = np.where(
        ((row_dual > 0) & ~np.isfinite(row_lo)) | ((row_dual < 0) & ~np.isfinite(row_hi)), 0.0, row_dual
    )
    y = np.where(np.isfinite(y), y, 0.0)
    n_cols, n_rows = len(arrays["col_lo"]), len(row_lo)
    start, index, value = arrays["start"], arrays["index"], arrays["value"]
    rows = np.repeat(np.arange(n_rows), np.diff(start))
    cost = np.asarray(arrays.get("cost", np.zeros(n_cols)), dtype=np.float64)
    transposed = np.zeros(n_cols)
    np.add.at(transposed, index, value * y[rows])
    magnitude = np.zeros(n_cols)
    np.add.at(magnitude, index, np.abs(value * y[rows]))
    terms_per_column = np.bincount(index, minlength=n_cols).max(initial=0)
    d = cost - transposed
    error = gamma(int(terms_per_column) + 3) * (np.abs(cost) + magnitude)
    col_lo, col_hi = arrays["col_lo"], arrays["col_hi"]
    with np.errstate(invalid="ignore"):  # 0 * inf: the column's term is 0 when d and its error are
        at_lo, at_hi = d * col_lo, d * col_hi
    reach = np.maximum(np.abs(col_lo), np.abs(col_hi))
    needed = (d != 0) | (error > 0)
    if np.any(needed & ~np.isfinite(reach)):
        return -math.inf
    column_terms = np.where(needed, np.minimum(at_lo, at_hi) - error * reach, 0.0)
    row_terms = np.where(y > 0, y * np.where(np.isfinite(row_lo), row_lo, 0.0), 0.0) + np.where(
        y < 0, y * np.where(np.isfinite(row_hi), row_hi, 0.0), 0.0
    )
    total = float(column_terms.sum() + row_terms.sum())
    slack = gamma(n_cols + n_rows + 2) * float(np.abs(column_terms).sum() + np.abs(row_terms).sum())
    return total - slack * (1 + 1e-9) - 1e-300


def gamma(n: int) -> float:
    """gamma_n = n u / (1 - n u), u the float64 unit roundoff: the relative error of n-term sums."""
    nu = n * 2.0**-53
    return math.inf if nu >= 0.5 else nu / (1 - nu) * (1 + 1e-12)


def finite(value: float) -> bool:
    return math.isfinite(value)
