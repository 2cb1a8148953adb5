"""HiGHS (highspy) as a MILP feasibility oracle; the only module that imports highspy.

A query is asked as a feasibility problem (zero objective): HiGHS stops at the first integer-feasible
point. Tolerances are tightened (1e-9) well below the 0.5 margin every execution has on every row
of an integer encoding (see `qverify.engine.encode.milp` and docs/engine.md).
"""

from __future__ import annotations

import math
import time

import numpy as np

from qverify.engine.encode.milp import MilpModel
from qverify.engine.solvers.base import CheckResult, CheckStatus, DecisionProcedure
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


class HighsSolver(DecisionProcedure):
    name = "highs"

    def __init__(self, threads: int = 1) -> None:
        if highspy is None:
            raise ToolMissingError(f"highspy is not installed ({_IMPORT_ERROR})")
        self.threads = threads

    def check(self, model: MilpModel, deadline: float) -> CheckResult:
        return self.solve(model.arrays(), model.inputs, model.trust_infeasible, deadline)

    def solve(
        self, arrays: dict[str, np.ndarray], inputs: dict[int, int], trust_infeasible: bool, deadline: float
    ) -> CheckResult:
        """Feasibility of the rows `row_lo <= A x <= row_hi` (row-wise arrays, see `MilpModel.arrays`)
        over the columns' bounds; `inputs` maps program input indices to columns (for a solution)."""
        start = time.monotonic()
        remaining = deadline - start
        if remaining <= 0.05:
            return CheckResult(CheckStatus.UNKNOWN, "timeout before the MILP query")
        if np.any(arrays["col_lo"] > arrays["col_hi"]):
            return CheckResult(CheckStatus.UNSAT, "empty variable bounds", time_s=0.0)
        h = self._solver(remaining)
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

    def _solver(self, seconds: float):
        h = highspy.Highs()
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


def _lp(arrays: dict[str, np.ndarray]):
    """The arrays as a HighsLp with a zero objective (infinite bounds as HiGHS's infinity)."""
    n_cols, n_rows = len(arrays["col_lo"]), len(arrays["row_lo"])
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    inf = highspy.kHighsInf
    lp.col_cost_ = np.zeros(n_cols)
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
