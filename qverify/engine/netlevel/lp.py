"""Network level: one node of the branch and bound as an LP or MILP over HiGHS
(`qverify.engine.solvers.highs`).

Columns: the inputs x; per neuron with the linear statement of `NetModel` one row
z - W h_prev in [b + err_lo, b + err_hi] (free neurons keep only their column bounds), with the
node's bounds [lo, hi] on z. The ReLU is exact where the node fixes the phase or the bounds make it
stable, and stable neurons are folded into the rows rather than given columns of their own (what
HiGHS's presolve would otherwise spend most of a small MILP's time on, measured on ACAS Xu: 18 of
32 ms): an active neuron's h is its z (one column), an inactive one has no column (h = 0) and its
row bounds W h_prev alone, in [lo - b - err_hi, hi - b - err_lo] (widened by the float64 rounding
of those differences). An unstable neuron has z and h columns with the triangle (LP) or the big-M
encoding with one binary (MILP), both with the node's bounds; one unsafe clause's atoms on the
outputs. Each activation kind writes its own rows (`activations`: `lp_post` of `Relu`, `Stairs`,
`Clamp`, `MaxPool`, `Identity`; the node's statement rows here, `_statement_rows`). The rows are
built as whole blocks (numpy; a layer's weights as the sparse rows of its operation, so a
convolution's rows hold its taps only), not row by row. A max pool's open window has an output
column above each of its inputs and below the relaxation's upper side (LP), or below each input plus
a big-M term of one binary per input (MILP: exact); see `activations.MaxPool.lp_post`. A lookup
table's outputs lie between the lines of its staircase relaxation (`_table`). An int8 staircase's
also between the edges of its convex hull on the node's interval (`activations.Stairs`), and in the
MILP the first layer's costliest open neurons and the outputs the clause reads are exact, a binary
per threshold their accumulators' range crosses (`Stairs._lp_exact_steps`, `_first_layer_choice`):
the int8 accumulator's row is exact (no rounding term), so every execution satisfies the encoding
with its own binaries and an infeasible MILP has none.

The MILP is exact for REAL arithmetic; for the implementation it is the same sound relaxation as the
bounds (rounding as bounded terms, not as integer quotients: the scalar path's
`qverify.engine.scalar.milp` encodes the words exactly, but it needs the per-scalar node graph this
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
from typing import TYPE_CHECKING

import numpy as np

from qverify.engine.netlevel.attack import AtomForm
from qverify.engine.netlevel.bounds import Bounds, backsubstitute
from qverify.engine.netlevel.model import NetModel
from qverify.engine.netlevel.roundoff import U64
from qverify.engine.solvers.base import CheckStatus

if TYPE_CHECKING:  # scipy.sparse and HiGHS are imported where the LP runs: a node that the bounds
    from scipy import sparse  # decide needs neither (~0.1 s of a small query's start)

ATOM_SLACK = 1e-7  # (the MILP's feasibility rows)
# MILP: staircase thresholds (int8 requantizations, lookup tables) encoded exactly (binaries), at
# most; the neurons whose relaxation costs the clause's bound most first (`_exact_choice`)
EXACT_STEP_BINARIES = 4000


@dataclass(frozen=True, slots=True)
class NodeSolution:
    status: CheckStatus
    x: np.ndarray | None  # real inputs of a solution
    reason: str = ""


class _Rows:
    """Rows in compressed row form, appended as blocks: row r of a block holds columns[r, i] with
    values[r, i] where keep[r, i]."""

    def __init__(self) -> None:
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.index: list[np.ndarray] = []
        self.value: list[np.ndarray] = []

    def add(self, columns: np.ndarray, values: np.ndarray, lo, hi) -> None:
        """Rows values[r] . (columns[r] or columns) in [lo, hi] (arrays, or one bound for all)."""
        keep = values != 0
        self.index.append(columns[keep] if columns.ndim == 2 else np.tile(columns, len(values))[keep.ravel()])
        self.value.append(values[keep])
        self.counts.append(np.count_nonzero(keep, axis=1))
        self.lo.append(lo if isinstance(lo, np.ndarray) else np.full(len(values), lo))
        self.hi.append(hi if isinstance(hi, np.ndarray) else np.full(len(values), hi))

    def add_sparse(self, block: sparse.csr_array, columns: np.ndarray, lo, hi) -> None:
        """Rows of a CSR block whose column c is the model's column columns[c], in [lo, hi]."""
        from scipy import sparse

        block = sparse.csr_array(block)
        block.eliminate_zeros()
        block.sort_indices()
        self.index.append(columns[block.indices])
        self.value.append(block.data)
        self.counts.append(np.diff(block.indptr))
        self.lo.append(lo if isinstance(lo, np.ndarray) else np.full(block.shape[0], lo))
        self.hi.append(hi if isinstance(hi, np.ndarray) else np.full(block.shape[0], hi))

    def arrays(self) -> dict[str, np.ndarray]:
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        return {
            "row_lo": np.concatenate(self.lo) if self.lo else np.zeros(0),
            "row_hi": np.concatenate(self.hi) if self.hi else np.zeros(0),
            "start": np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            "index": np.concatenate(self.index).astype(np.int64) if self.index else np.zeros(0, np.int64),
            "value": np.concatenate(self.value).astype(np.float64) if self.value else np.zeros(0),
        }


class _Columns:
    def __init__(self) -> None:
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.integer: list[np.ndarray] = []
        self.count = 0

    def add(self, lo: np.ndarray, hi: np.ndarray, integer: bool = False) -> np.ndarray:
        """New columns with these bounds; their indices."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        self.lo.append(lo)
        self.hi.append(hi)
        self.integer.append(np.full(len(lo), integer))
        indices = self.count + np.arange(len(lo))
        self.count += len(lo)
        return indices


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

    columns = _Columns()
    rows = _Rows()
    exact = _exact_choice(model, bounds, clause_forms, xl, xu) if integer else {}
    x_columns = columns.add(xl, xu)
    posts: list[np.ndarray] = []  # per node, the columns of its values; -1: the value is 0
    for k, layer in enumerate(model.layers):
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        previous = _distinct(columns, rows, model.gather(k, x_columns, posts), bounds, model, k, xl, xu)
        own = (
            _statement_rows(columns, rows, layer, bounds, k, previous)
            if layer.activation.elementwise
            else None
        )
        node = LpNode(columns, rows, integer, lo, hi, previous, own, model.stepped, exact.get(k))
        node.relaxation = lambda k=k: bounds.relaxation(model, k)  # (built when an activation asks)
        posts.append(layer.activation.lp_post(node))
    previous = posts[-1]
    live = previous >= 0
    if not integer:
        return _worst_atom_bound(model, bounds, xl, xu, clause_forms, columns, rows, previous, deadline)
    for form in clause_forms:
        magnitude = 1.0 + abs(form.constant) + np.abs(form.coefficients).sum()
        rows.add(
            previous[live][None, :],
            form.coefficients[live][None, :],
            -np.inf,
            -form.constant + ATOM_SLACK * magnitude,
        )
    arrays = {
        "cost": np.zeros(columns.count),
        "col_lo": np.concatenate(columns.lo),
        "col_hi": np.concatenate(columns.hi),
        "integer": np.concatenate(columns.integer),
        **rows.arrays(),
    }
    inputs = {i: i for i in range(len(xl))}
    from qverify.engine.solvers.highs import HighsSolver

    result = HighsSolver().solve(arrays, inputs, True, deadline)
    if result.status is CheckStatus.SAT:
        x = np.array([result.inputs[i] for i in range(len(xl))], dtype=np.float64)
        return NodeSolution(CheckStatus.SAT, np.clip(x, xl, xu))
    return NodeSolution(result.status, None, result.reason)


def _worst_atom_bound(model, bounds, xl, xu, clause_forms, columns, rows, outputs, deadline) -> NodeSolution:
    """The LP: min t subject to the node's relaxation and t >= g_i for every atom of the clause, so
    min t = min over the relaxation of max_i g_i; the clause is refuted when a rigorous lower bound
    of it (`HighsSolver.lower_bound`: from HiGHS's duals, with outward rounding) is positive, and
    the solution's input is a candidate when HiGHS's minimum is <= 0. t lives in [-T, T], T twice
    the largest |g_i| the output columns' bounds allow (the optimum lies well inside)."""
    live = outputs >= 0
    last = len(model.layers) - 1
    y_max = np.maximum(np.abs(bounds.pre_lo[last]), np.abs(bounds.pre_hi[last]))
    reach = max(float(np.abs(f.coefficients) @ y_max + abs(f.constant)) for f in clause_forms)
    t = columns.add(np.array([-2 * reach - 1.0]), np.array([2 * reach + 1.0]))[0]
    for form in clause_forms:  # g_i - t = coefficients . y + constant - t <= 0
        rows.add(
            np.append(outputs[live], t)[None, :],
            np.append(form.coefficients[live], -1.0)[None, :],
            -np.inf,
            -form.constant,
        )
    cost = np.zeros(columns.count)
    cost[t] = 1.0
    arrays = {
        "cost": cost,
        "col_lo": np.concatenate(columns.lo),
        "col_hi": np.concatenate(columns.hi),
        "integer": np.zeros(columns.count, dtype=bool),
        **rows.arrays(),
    }
    from qverify.engine.solvers.highs import HighsSolver

    found = HighsSolver().lower_bound(arrays, deadline)
    strict = all(form.strict for form in clause_forms)
    if found.bound > 0 or (strict and found.bound >= 0):
        return NodeSolution(CheckStatus.UNSAT, None, f"LP bound {found.bound:.6g}")
    if len(found.values) and found.objective <= 0:
        return NodeSolution(CheckStatus.SAT, np.clip(found.values[: len(xl)], xl, xu))
    return NodeSolution(CheckStatus.UNKNOWN, None, f"LP: {found.highs_status}, bound {found.bound:.6g}")


def _statement_rows(columns: _Columns, rows: _Rows, layer, bounds: Bounds, k: int, previous: np.ndarray):
    """Node k's z columns (one per neuron the activation keeps: -1 where it folds the neuron, a
    surely inactive ReLU's) and its statement's rows z - W h in [b + err_lo, b + err_hi]; a folded
    neuron's row bounds W h alone (module docstring)."""
    from scipy import sparse

    lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
    live = previous >= 0
    weights, inputs = layer.op.rows()[:, live], previous[live]
    related = ~bounds.free[k]
    base_lo, base_hi = layer.bias + bounds.err_lo[k], layer.bias + bounds.err_hi[k]
    rounding = 2 * U64 * (np.abs(base_lo) + np.abs(base_hi))  # (the two sums, outward)
    base_lo, base_hi = base_lo - rounding, base_hi + rounding
    inactive = layer.activation.lp_folded(lo, hi)
    own = np.full(layer.n_out, -1)
    kept = ~inactive  # neurons with a z column (h itself where stable)
    own[kept] = columns.add(lo[kept], hi[kept])
    linear = kept & related
    if linear.any():
        # z - W h in [b + err_lo, b + err_hi]: the neuron's own column first, then W's row
        block = sparse.hstack([sparse.identity(int(linear.sum()), format="csr"), -weights[linear]])
        rows.add_sparse(
            sparse.csr_array(block),
            np.concatenate([own[linear], inputs]),
            base_lo[linear],
            base_hi[linear],
        )
    folded = inactive & related
    if folded.any():
        low = lo[folded] - base_hi[folded]
        high = hi[folded] - base_lo[folded]
        widen = (
            4
            * U64
            * (np.abs(lo[folded]) + np.abs(hi[folded]) + np.abs(base_lo[folded]) + np.abs(base_hi[folded]))
        )
        rows.add_sparse(weights[folded], inputs, low - widen, high + widen)
    return own


class LpNode:
    """One node of the network in the LP being built, as its activation's `lp_post` reads it
    (`activations`: each activation kind writes its own rows): the builders, the node's bounds
    [lo, hi], its input columns (`previous`), its z columns (`own`; None for a max pool, which
    reads its inputs), and what the MILP encodes exactly (`touched`: a staircase's neurons)."""

    def __init__(self, columns, rows, integer, lo, hi, previous, own, stepped, touched) -> None:
        self.columns, self.rows, self.integer = columns, rows, integer
        self.lo, self.hi, self.previous, self.own = lo, hi, previous, own
        self.stepped, self.touched = stepped, touched
        self.relaxation = None  # (set by `solve_node`: the node's relaxation, built on request)

    def pair_rows(self, y: np.ndarray, x: np.ndarray, slope: np.ndarray, lo, hi) -> None:
        _pair_rows(self.rows, y, x, slope, lo, hi)

    def table(self, post: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """A lookup table's (or a clamp's) outputs over the z columns (`_table`)."""
        return _table(self.columns, self.rows, self.relaxation(), post, self.own)


def _distinct(
    columns: _Columns, rows: _Rows, gathered: np.ndarray, bounds: Bounds, model: NetModel, k: int, xl, xu
) -> np.ndarray:
    """A node's input columns with each column once: a join reading one tensor twice (or values a
    max pool repeats) would give a row the same column twice, which HiGHS refuses; every repeat
    gets a column of its own, equal to the first (its bounds: the input's)."""
    present = gathered >= 0
    _, first = np.unique(gathered[present], return_index=True)
    repeats = np.setdiff1d(np.flatnonzero(present), np.flatnonzero(present)[first])
    if not len(repeats):
        return gathered
    h_lo, h_hi = bounds.inputs(model, k, xl, xu)
    result = gathered.copy()
    source = gathered[repeats]
    result[repeats] = columns.add(h_lo[repeats], h_hi[repeats])
    _pair_rows(rows, result[repeats], source, np.ones(len(repeats)), 0.0, 0.0)
    return result


def _pair_rows(rows: _Rows, y: np.ndarray, x: np.ndarray, slope: np.ndarray, lo, hi) -> None:
    """Rows y - slope x in [lo, hi], one per entry; x = -1 stands for the constant 0."""
    present = x >= 0
    cols = np.column_stack([y, np.where(present, x, y)])
    values = np.column_stack([np.ones(len(y)), np.where(present, -slope, 0.0)])
    rows.add(cols, values, lo, hi)


def _table(columns: _Columns, rows: _Rows, relaxation, post: tuple[np.ndarray, np.ndarray], z: np.ndarray):
    """A lookup table's (or a clamp's) outputs h over the layer's z columns: its range as column
    bounds and the relaxation's two lines as rows, a z + c <= h <= s z + t (the LP and the MILP
    alike: no exact encoding here, so a MILP solution is only a candidate, as a relaxation's is)."""
    h = columns.add(*post)
    pair = np.column_stack([h, z])
    rows.add(pair, np.column_stack([np.ones(len(h)), -relaxation.a]), relaxation.c, np.inf)
    rows.add(pair, np.column_stack([np.ones(len(h)), -relaxation.s]), -np.inf, relaxation.t)
    return h


def _exact_choice(
    model: NetModel, bounds: Bounds, clause_forms: list[AtomForm], xl, xu
) -> dict[int, np.ndarray]:
    """MILP: the open staircase neurons to encode exactly (`Stairs._lp_exact_steps`), per layer: the outputs
    the clause reads (int8), then the others by what their relaxation costs the clause's atoms'
    bounds (|the atoms' coefficient on the neuron's value| x the gap between its relaxation's two
    lines, the wider end), largest first, within EXACT_STEP_BINARIES binaries (one per threshold a
    neuron's interval crosses). Only a choice: every neuron left out keeps its relaxation (and
    int8's hull), and the MILP stays sound."""
    last = len(model.layers) - 1
    layers = [
        k
        for k, layer in enumerate(model.layers)
        if layer.stairs is not None and layer.open_neurons(bounds.pre_lo[k], bounds.pre_hi[k]).any()
    ]
    if not layers:
        return {}
    matrix = np.array([form.coefficients for form in clause_forms])
    chosen = {k: np.zeros(model.layers[k].n_out, dtype=bool) for k in layers}
    budget = EXACT_STEP_BINARIES
    candidates = []  # (score, layer, neuron, binaries)
    linear = None
    for k in layers:
        stairs = model.layers[k].stairs
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        opened = stairs.open(lo, hi)
        low, high = stairs.grid_ends(lo, hi)
        crossed = ((stairs.lower_table > low[:, None]) & (stairs.upper_table <= high[:, None])).sum(axis=1)
        crossed = np.broadcast_to(crossed, lo.shape)
        if k == last:  # the outputs the clause reads: always exact
            read = opened & np.any(matrix != 0, axis=0)
            chosen[k] |= read
            budget -= int(crossed[read].sum())
            continue
        if linear is None:
            linear = backsubstitute(model, bounds, matrix, last, True, xl, xu, keep=True)
        relaxation = bounds.relaxation(model, k)
        slope, offset = relaxation.s - relaxation.a, relaxation.t - relaxation.c
        gap = np.maximum(slope * lo + offset, slope * hi + offset)
        score = np.abs(linear.lam_post[k]).sum(axis=0) * gap
        for j in np.flatnonzero(opened):
            candidates.append((float(score[j]), k, int(j), int(crossed[j])))
    candidates.sort(key=lambda item: -item[0])
    for _, k, j, binaries in candidates:
        if binaries <= budget:
            chosen[k][j] = True
            budget -= binaries
    return {k: mask for k, mask in chosen.items() if mask.any()}
