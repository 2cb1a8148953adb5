"""Branch and bound on the input box with symbolic bounds: `split(...) -> SplitResult`.

A query is a conjunction of literals `e >= 0` (or `e == 0`) over a lowered program. A box of inputs
is *refuted* when the symbolic upper bound of some literal is negative there (for `==`: the bounds
exclude 0). Boxes that are not refuted are probed at the points that maximise the literals' linear
upper bounds and at their centres (every probe goes through the exact evaluator), and otherwise
bisected along the input with the largest gain for the undecided literals' upper bounds: what it
moves them across the box (coefficient times width; for a tabulated input, its table's spread)
plus its share of the relaxation error they paid at unstable units (`BoundResult.row_spread`). Integer
boxes shrink to single points, which the probe decides exactly: for integer inputs the search is
complete, given time. The boxes of a batch are bounded together (numpy over the batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from qverify.engine.linear import Conjunction, Literal, Lowering
from qverify.engine.relax import RelaxedModel, Row, bounds

BATCH = 128
MAX_COMBINED = 8  # literals whose bounds are combined pairwise (the tightest on the whole box)


def combination_weights(count: int, among: np.ndarray | None = None) -> np.ndarray:
    """Convex weights for combining literal bounds: pairs at 1/4, 1/2, 3/4 and the uniform one,
    over the literals `among` (default all); the others get weight 0."""
    among = np.arange(count) if among is None else among
    rows = []
    for position, i in enumerate(among):
        for j in among[position + 1 :]:
            for w in (0.25, 0.5, 0.75):
                row = np.zeros(count)
                row[i], row[j] = w, 1 - w
                rows.append(row)
    if len(among) > 2:
        row = np.zeros(count)
        row[among] = 1.0 / len(among)
        rows.append(row)
    return np.array(rows) if rows else np.zeros((0, count))


def tightest_literals(row_ub: np.ndarray, limit: int = MAX_COMBINED) -> np.ndarray:
    """The `limit` literals nearest to failing on a box (smallest upper bounds): those worth
    combining. The pair count grows quadratically, so a query with hundreds of literals (injected
    invariants) would otherwise build hundreds of thousands of combinations per box."""
    return np.sort(np.argsort(row_ub, kind="stable")[:limit])


def refuted_by_combination(
    result, ge: np.ndarray, lo: np.ndarray, hi: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """Boxes where some convex combination of the literals' linear upper bounds is negative on the
    whole box: no point can make every literal hold."""
    if len(weights) == 0:
        return np.zeros(len(lo), dtype=bool)
    coef = result.row_input_coef[:, ge, :]  # (B, R, n)
    const = result.row_const[:, ge]  # (B, R)
    combined = np.einsum("kr,brn->bkn", weights, coef)
    offset = const @ weights.T  # (B, K)
    top = offset + (np.maximum(combined, 0) * hi[:, None, :] + np.minimum(combined, 0) * lo[:, None, :]).sum(
        axis=2
    )
    return (top < 0).any(axis=1)


@dataclass
class SplitResult:
    status: str  # "refuted" | "found" | "unknown"
    counterexample: np.ndarray | None = None
    boxes: int = 0
    reason: str = ""
    stalled: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def literal_rows(
    model: RelaxedModel, lowering: Lowering, conjunction: Conjunction, lo: np.ndarray, hi: np.ndarray
) -> tuple[list[Row], list[str], np.ndarray, np.ndarray, list[Literal]]:
    """Rows for the literals that are not plain input bounds (and those literals); input bounds
    narrow [lo, hi] instead."""
    var_to_input = {var: index for index, var in lowering.inputs.items()}
    order = sorted(model.input_kept)
    column_of = {index: column for column, index in enumerate(order)}
    lo, hi = lo.astype(np.float64).copy(), hi.astype(np.float64).copy()
    rows, senses, literals = [], [], []
    for lit in conjunction.literals:
        expr = lit.expr
        if lit.sense == "ge" and len(expr.terms) == 1 and not lit.optimistic:
            ((var, coef),) = expr.terms.items()
            if var in var_to_input and var_to_input[var] in column_of and coef in (1, -1):
                column = column_of[var_to_input[var]]
                bound = -float(expr.const) / float(coef)
                if coef > 0:
                    lo[column] = max(lo[column], bound)
                else:
                    hi[column] = min(hi[column], bound)
                continue
        rows.append(model.row_of(expr))
        senses.append(lit.sense)
        literals.append(lit)
    return rows, senses, lo, hi, literals


def _split_boxes(lo: np.ndarray, hi: np.ndarray, gain: np.ndarray, integer: np.ndarray):
    """Bisect each box along the input with the largest gain (ties and zero gains: the widest)."""
    widths = hi - lo
    score = np.where(widths > 0, gain + 1e-12 * widths, -1.0)
    dim = score.argmax(axis=1)
    rows = np.arange(len(lo))
    low_mid = (lo[rows, dim] + hi[rows, dim]) / 2
    low_mid = np.where(integer[dim], np.floor(low_mid), low_mid)
    high_start = np.where(integer[dim], low_mid + 1, low_mid)
    left_hi = hi.copy()
    left_hi[rows, dim] = low_mid
    right_lo = lo.copy()
    right_lo[rows, dim] = high_start
    return (lo, left_hi), (right_lo, hi)


def split(
    model: RelaxedModel,
    rows: list[Row],
    senses: list[str],
    lo: np.ndarray,
    hi: np.ndarray,
    integer: np.ndarray,
    probe: Callable[[np.ndarray], np.ndarray | None],
    deadline: float,
    max_boxes: int = 10_000_000,
    checks: tuple | None = None,
) -> SplitResult:
    """Refute the literals on every sub-box of [lo, hi], or find a point that violates (`probe`
    returns a confirmed counterexample row or None)."""
    n_checks = len(checks[0]) if checks else 0
    stack_lo = [lo[None, :]]
    stack_hi = [hi[None, :]]
    stack_open = [np.ones((1, n_checks), dtype=bool)]  # per box: the checks not yet proved on it
    processed = 0
    eq = np.array([sense == "eq" for sense in senses], dtype=bool)
    ge = ~eq
    weights: np.ndarray | None = None  # chosen on the first box, from its bounds
    while stack_lo:
        if time.monotonic() > deadline:
            return SplitResult("unknown", None, processed, "timeout during input splitting")
        parts_lo, parts_hi, parts_open, taken = [], [], [], 0
        while stack_lo and taken < BATCH:
            chunk_lo, chunk_hi, chunk_open = stack_lo.pop(), stack_hi.pop(), stack_open.pop()
            room = BATCH - taken
            if len(chunk_lo) > room:
                stack_lo.append(chunk_lo[:-room])
                stack_hi.append(chunk_hi[:-room])
                stack_open.append(chunk_open[:-room])
                chunk_lo, chunk_hi, chunk_open = chunk_lo[-room:], chunk_hi[-room:], chunk_open[-room:]
            parts_lo.append(chunk_lo)
            parts_hi.append(chunk_hi)
            parts_open.append(chunk_open)
            taken += len(chunk_lo)
        current_lo, current_hi = np.concatenate(parts_lo), np.concatenate(parts_hi)
        current_open = np.concatenate(parts_open)
        empty = np.any(current_lo > current_hi, axis=1)
        current_lo, current_hi, current_open = current_lo[~empty], current_hi[~empty], current_open[~empty]
        if len(current_lo) == 0:
            continue
        processed += len(current_lo)
        if processed > max_boxes:
            return SplitResult("unknown", None, processed, f"more than {max_boxes} boxes")
        if rows:
            wanted = np.flatnonzero(current_open.any(axis=0)) if n_checks else np.zeros(0, dtype=np.int64)
            many = [checks[0][i] for i in wanted] if len(wanted) else None
            result = bounds(model, current_lo, current_hi, rows, many=many)
            refuted_by = (result.row_ub < 0) | (eq[None, :] & (result.row_lb > 0))
            refuted = refuted_by.any(axis=1)
            if weights is None:
                weights = combination_weights(int(ge.sum()), tightest_literals(result.row_ub[0, ge]))
            if len(weights) and not refuted.all():
                refuted |= refuted_by_combination(result, ge, current_lo, current_hi, weights)
            if len(wanted):
                # the model is exact on a box only where every saturation check holds
                proved = (result.many_lb >= checks[1][wanted][None, :]) & (
                    result.many_ub <= checks[2][wanted][None, :]
                )
                current_open[:, wanted] &= ~proved
            if n_checks:
                refuted &= ~current_open.any(axis=1)
        else:
            refuted = np.zeros(len(current_lo), dtype=bool)
        open_rows = np.flatnonzero(~refuted)
        if len(open_rows) == 0:
            continue
        # probes: the maximisers of the literals' upper bounds, and the centres
        probes = [(current_lo[open_rows] + current_hi[open_rows]) / 2]
        if rows:
            # the maximiser of the literal furthest from holding (all must hold for a violation)
            hardest = np.argmin(result.row_ub[open_rows], axis=1)
            probes.append(result.row_argmax[open_rows][np.arange(len(open_rows)), hardest])
        points = np.concatenate(probes)
        points = np.where(integer[None, :], np.floor(points), points)
        found = probe(points)
        if found is not None:
            return SplitResult("found", found, processed)
        open_lo, open_hi = current_lo[open_rows], current_hi[open_rows]
        open_checks = current_open[open_rows]
        single = np.all(open_lo == open_hi, axis=1)
        open_lo, open_hi, open_checks = open_lo[~single], open_hi[~single], open_checks[~single]
        if len(open_lo) == 0:
            continue
        if rows:
            # how much each input moves the undecided literals' upper bounds across the box
            undecided = ~refuted_by[open_rows][~single]
            spread = result.row_spread[open_rows][~single]  # (B, R, n)
            gain = (spread * undecided[:, :, None]).sum(axis=1)
        else:
            gain = open_hi - open_lo
        (a_lo, a_hi), (b_lo, b_hi) = _split_boxes(open_lo, open_hi, gain, integer)
        stack_lo.extend([b_lo, a_lo])
        stack_hi.extend([b_hi, a_hi])
        stack_open.extend([open_checks.copy(), open_checks.copy()])
    return SplitResult("refuted", None, processed)
