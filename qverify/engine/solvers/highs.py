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

from qverify.engine.solvers.base import CheckResult, CheckStatus, DecisionProcedure
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
        h.run()
        status = h.getModelStatus()
        elapsed = time.monotonic() - start
        info = h.getInfo()
        stats = {"mip_nodes": int(getattr(info, "mip_node_count", 0) or 0)}
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
            values = list(h.getSolution().col_value)
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
        h.run()
        status = h.getModelStatus()
        elapsed = time.monotonic() - begin
        info = h.getInfo()
        nodes = int(getattr(info, "mip_node_count", 0) or 0)
        words = h.modelStatusToString(status)
        values = np.asarray(h.getSolution().col_value, dtype=np.float64)
        has_values = values.size == model.n_cols and int(getattr(info, "primal_solution_status", 0)) == 2
        objective = float(info.objective_function_value) if has_values else math.inf
        bound = float(getattr(info, "mip_dual_bound", -math.inf))
        if status == highspy.HighsModelStatus.kOptimal:
            return Optimum(OptimumStatus.OPTIMAL, words, objective, bound, values, elapsed, nodes)
        if status == highspy.HighsModelStatus.kInfeasible:
            return Optimum(OptimumStatus.INFEASIBLE, words, math.inf, math.inf, np.zeros(0), elapsed, nodes)
        if has_values:
            return Optimum(OptimumStatus.FEASIBLE, words, objective, bound, values, elapsed, nodes)
        return Optimum(OptimumStatus.NO_SOLUTION, words, math.inf, bound, np.zeros(0), elapsed, nodes)

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


def finite(value: float) -> bool:
    return math.isfinite(value)
