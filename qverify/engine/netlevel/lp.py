"""One node of the branch and bound as an LP or MILP over HiGHS (`qverify.engine.solvers.highs`).

Columns: the inputs x, every layer's pre-activation z and, for ReLU layers, post-activation h.
Rows: z - W h_prev in [b + err_lo, b + err_hi] for neurons with the linear statement of
`NetModel` (free neurons keep only their column bounds); ReLU exact where the node fixes the phase
or the bounds make it stable; elsewhere the triangle (LP) or the big-M encoding with one binary
(MILP), both with the node's bounds; one unsafe clause's atoms on the outputs.

The MILP is exact for REAL arithmetic; for the implementation it is the same sound relaxation as the
bounds (rounding as bounded terms, not as integer quotients: the scalar path's
`qverify.engine.encode.milp` encodes the words exactly, but it needs the per-scalar node graph this
strategy exists to avoid), so a solution is only a candidate that `NetworkQuery.violation` must
confirm, and a relaxation "infeasible" proves the node safe.

Tolerances: HiGHS runs with primal/MIP feasibility tolerance 1e-9 (`solvers.highs.TOLERANCE`). An
"infeasible" is trusted only when the rows' magnitude keeps those tolerances small
(`trust_infeasible`, `TRUSTED_MAGNITUDE`), and the unsafe atoms are relaxed by `ATOM_SLACK`
(relative) before solving, so an answer near the tolerance still errs on the side of "feasible".
It remains a floating-point solver: a SAFE that rests on an LP/MILP "infeasible" is subject to
HiGHS's arithmetic; `--certify` re-checks SAFE verdicts with exact SMT on the scalar path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.attack import AtomForm
from qverify.engine.netlevel.bounds import Bounds, relu_relaxation
from qverify.engine.netlevel.model import NetModel
from qverify.engine.solvers.base import CheckStatus
from qverify.engine.solvers.highs import HighsSolver

ATOM_SLACK = 1e-7


@dataclass(frozen=True, slots=True)
class NodeSolution:
    status: CheckStatus
    x: np.ndarray | None  # real inputs of a solution
    reason: str = ""


class _Rows:
    def __init__(self) -> None:
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.start = [0]
        self.index: list[np.ndarray] = []
        self.value: list[np.ndarray] = []
        self.size = 0

    def add(self, columns: np.ndarray, values: np.ndarray, lo: float, hi: float) -> None:
        keep = values != 0
        self.index.append(np.asarray(columns)[keep])
        self.value.append(np.asarray(values, dtype=np.float64)[keep])
        self.size += int(keep.sum())
        self.start.append(self.size)
        self.lo.append(lo)
        self.hi.append(hi)


def solve_node(
    model: NetModel,
    bounds: Bounds,
    xl: np.ndarray,
    xu: np.ndarray,
    clause_forms: list[AtomForm],
    integer: bool,
    deadline: float,
) -> NodeSolution:
    """Is some execution of the node in the clause? (LP relaxation, or exact MILP with `integer`)."""
    col_lo: list[np.ndarray] = [xl]
    col_hi: list[np.ndarray] = [xu]
    kinds: list[np.ndarray] = [np.zeros(len(xl), dtype=bool)]
    n_cols = len(xl)
    previous = np.arange(len(xl))
    rows = _Rows()
    for k, layer in enumerate(model.layers):
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        z = n_cols + np.arange(layer.n_out)
        n_cols += layer.n_out
        col_lo.append(lo)
        col_hi.append(hi)
        kinds.append(np.zeros(layer.n_out, dtype=bool))
        free = bounds.free[k]
        for j in np.flatnonzero(~free):
            columns = np.concatenate(([z[j]], previous))
            values = np.concatenate(([1.0], -layer.weights[j]))
            rows.add(
                columns, values, layer.bias[j] + bounds.err_lo[k][j], layer.bias[j] + bounds.err_hi[k][j]
            )
        if not layer.relu:
            previous = z
            continue
        h = n_cols + np.arange(layer.n_out)
        n_cols += layer.n_out
        post_lo, post_hi = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        col_lo.append(post_lo)
        col_hi.append(post_hi)
        kinds.append(np.zeros(layer.n_out, dtype=bool))
        _, s, t = relu_relaxation(lo, hi)
        unstable = (lo < 0) & (hi > 0)
        for j in range(layer.n_out):
            if lo[j] >= 0:
                rows.add(np.array([h[j], z[j]]), np.array([1.0, -1.0]), 0.0, 0.0)
            elif unstable[j]:
                rows.add(np.array([h[j], z[j]]), np.array([1.0, -1.0]), 0.0, np.inf)
                if integer:
                    d = n_cols
                    n_cols += 1
                    col_lo.append(np.zeros(1))
                    col_hi.append(np.ones(1))
                    kinds.append(np.ones(1, dtype=bool))
                    rows.add(np.array([h[j], z[j], d]), np.array([1.0, -1.0, -lo[j]]), -np.inf, -lo[j])
                    rows.add(np.array([h[j], d]), np.array([1.0, -hi[j]]), -np.inf, 0.0)
                else:
                    rows.add(np.array([h[j], z[j]]), np.array([1.0, -s[j]]), -np.inf, t[j])
        previous = h
    for form in clause_forms:
        magnitude = 1.0 + abs(form.constant) + np.abs(form.coefficients).sum()
        rows.add(previous, form.coefficients, -np.inf, -form.constant + ATOM_SLACK * magnitude)
    arrays = {
        "cost": np.zeros(n_cols),
        "col_lo": np.concatenate(col_lo),
        "col_hi": np.concatenate(col_hi),
        "integer": np.concatenate(kinds),
        "row_lo": np.array(rows.lo, dtype=np.float64),
        "row_hi": np.array(rows.hi, dtype=np.float64),
        "start": np.array(rows.start, dtype=np.int64),
        "index": np.concatenate(rows.index).astype(np.int64) if rows.index else np.zeros(0, np.int64),
        "value": np.concatenate(rows.value) if rows.value else np.zeros(0),
    }
    inputs = {i: i for i in range(len(xl))}
    result = HighsSolver().solve(arrays, inputs, True, deadline)
    if result.status is CheckStatus.SAT:
        x = np.array([result.inputs[i] for i in range(len(xl))], dtype=np.float64)
        return NodeSolution(CheckStatus.SAT, np.clip(x, xl, xu))
    return NodeSolution(result.status, None, result.reason)
