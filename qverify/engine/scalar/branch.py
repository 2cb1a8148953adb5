"""Scalar path: branch and bound on the input box with symbolic bounds: `split(...) -> SplitResult`.

A query is a conjunction of literals `e >= 0` (or `e == 0`) over a lowered program. A box of inputs
is *refuted* when the symbolic upper bound of some literal is negative there (for `==`: the bounds
exclude 0). Boxes that are not refuted are probed at the points that maximise the literals' linear
upper bounds and at their centres (every probe goes through the exact evaluator), and otherwise
bisected along the input with the largest gain for the undecided literals' upper bounds: what it
moves them across the box (coefficient times width; for a tabulated input, its table's spread)
plus its share of the relaxation error they paid at unstable units (`BoundResult.row_spread`). Integer
boxes shrink to single points, which the probe decides exactly: for integer inputs the search is
complete, given time. So are float inputs (`grid`): their boxes have ends of the input's type and
are bisected at one of its values (`floatgrid`: the type's values as consecutive integers), so
that no value is lost between the halves or in both, and the boxes end as points (the probe of a
point at zero covers both zeros, see `Strategy._signed_zeros`). A box of at most ENUMERATE_POINTS
points, integers and float values counted exactly, is decided by probing all of them at once.
The boxes of a batch are bounded together (numpy over the batch). With a `BoxMilp`, open boxes
with few unstable ReLUs are also asked to the exact-ReLU MILP (`boxmilp`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from qverify.engine import c_types, floatgrid
from qverify.engine.scalar.boxmilp import MAX_UNSTABLE, MILP_RETRY_AFTER, MILP_TRIAL, TIME_LIMIT_S, BoxMilp
from qverify.engine.scalar.combine import fixed_weights, refuted_by_fixed, tightest_literals
from qverify.engine.scalar.linear import Conjunction, Literal, Lowering
from qverify.engine.scalar.relax import RelaxedModel, Row, bounds
from qverify.engine.scalar.semantics import float_dtype
from qverify.engine.solvers.base import CheckStatus

BATCH = 128
ENUMERATE_POINTS = 512  # a box with at most this many points (integers, float values) is enumerated
ENUMERATE_CHUNK = 1 << 16  # points handed to the probe at once


@dataclass
class SplitResult:
    status: str  # "refuted" | "found" | "unknown"
    counterexample: np.ndarray | None = None
    boxes: int = 0
    reason: str = ""
    stalled: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    milps: int = 0  # boxes asked to the box MILP
    milp_refuted: int = 0

    def end(self, status: str, boxes: int, reason: str = "") -> SplitResult:
        self.status, self.boxes, self.reason = status, boxes, reason
        return self


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


def _decide_by_milp(
    box_milp: BoxMilp,
    result,
    refuted: np.ndarray,
    eligible: np.ndarray,
    deadline: float,
    outcome: SplitResult,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Ask the box MILP about the eligible open boxes with at most MAX_UNSTABLE unstable ReLUs
    (unless, after MILP_TRIAL boxes, it refuted fewer than a quarter); mark the infeasible ones
    refuted. Returns the solutions' inputs (model input order) as probes,
    and which boxes it failed on (a solution, or no answer in time)."""
    if outcome.milps >= MILP_TRIAL and outcome.milp_refuted * 4 < outcome.milps:
        return [], np.zeros(len(refuted), dtype=bool)  # it rarely refutes on this query: stop asking
    few = (box_milp.unstable(result) <= MAX_UNSTABLE) & ~refuted & eligible
    order = sorted(box_milp.model.input_kept)
    candidates = []
    failed = np.zeros(len(refuted), dtype=bool)
    for box in np.flatnonzero(few):
        if time.monotonic() > deadline:
            break
        # per box: TIME_LIMIT_S, or the split's deadline when the box MILP has a node limit instead
        limit = (
            deadline if box_milp.node_limit is not None else min(deadline, time.monotonic() + TIME_LIMIT_S)
        )
        answer = box_milp.check(result, int(box), limit)
        outcome.milps += 1
        if answer.status is CheckStatus.UNSAT:
            refuted[box] = True
            outcome.milp_refuted += 1
            continue
        failed[box] = True
        if answer.status is CheckStatus.SAT:
            candidates.append(np.array([[answer.inputs[i] for i in order]], dtype=np.float64))
    return candidates, failed


def _take_batch(stack: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Pop up to BATCH boxes (the most recently pushed first: depth first) as one batch of arrays."""
    parts, taken = [], 0
    while stack and taken < BATCH:
        chunk = stack.pop()
        room = BATCH - taken
        if len(chunk[0]) > room:
            stack.append(tuple(array[:-room] for array in chunk))
            chunk = tuple(array[-room:] for array in chunk)
        parts.append(chunk)
        taken += len(chunk[0])
    return tuple(np.concatenate(arrays) for arrays in zip(*parts))


def to_grid(values: np.ndarray, bits: int, up: bool) -> np.ndarray:
    """Each value rounded up (down) to the float type of `bits` bits (float64 arrays)."""
    dtype = float_dtype(c_types.Type("float", bits))
    with np.errstate(over="ignore"):
        nearest = values.astype(dtype)
        wrong = nearest < values if up else nearest > values
        step = np.nextafter(nearest, dtype(np.inf if up else -np.inf))
    return np.where(wrong, step, nearest).astype(np.float64)


def snap_to_grid(lo: np.ndarray, hi: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Box ends moved inward to values of each float input's type (grid[i] bits; 0: unchanged):
    the box keeps every input value it had."""
    lo, hi = lo.astype(np.float64).copy(), hi.astype(np.float64).copy()
    for column in np.flatnonzero(grid):
        lo[..., column] = to_grid(lo[..., column], int(grid[column]), True)
        hi[..., column] = to_grid(hi[..., column], int(grid[column]), False)
    return lo, hi


def _split_boxes(lo: np.ndarray, hi: np.ndarray, gain: np.ndarray, integer: np.ndarray, grid: np.ndarray):
    """Bisect each box along the input with the largest gain (ties and zero gains: the widest).
    Integers split at m and m + 1, grid floats at a value of their type m and the next one
    (`floatgrid.split_point`): the halves hold every value of the box, none twice, and are
    strictly smaller (the box ends are values)."""
    widths = hi - lo
    score = np.where(widths > 0, gain + 1e-12 * widths, -1.0)
    dim = score.argmax(axis=1)
    rows = np.arange(len(lo))
    low_mid = (lo[rows, dim] + hi[rows, dim]) / 2
    low_mid = np.where(integer[dim], np.floor(low_mid), low_mid)
    high_start = np.where(integer[dim], low_mid + 1, low_mid)
    for bits in np.unique(grid[dim]):
        if bits:
            on = grid[dim] == bits
            low_mid[on], high_start[on] = floatgrid.split_point(
                lo[rows, dim][on], hi[rows, dim][on], int(bits)
            )
    left_hi = hi.copy()
    left_hi[rows, dim] = low_mid
    right_lo = lo.copy()
    right_lo[rows, dim] = high_start
    return (lo, left_hi), (right_lo, hi)


def box_points(lo: np.ndarray, hi: np.ndarray, grid: np.ndarray | None = None) -> np.ndarray:
    """Every point of the box [lo, hi] (one row per point; the first input varies slowest): the
    integers of each integer input, the values of its type of each float input (grid[i] bits;
    `floatgrid`: the two zeros are one value, the probe runs both).

    Built one input at a time: numpy's meshgrid takes at most 32 arrays, and a box of a few hundred
    points can have 64 inputs (most of them a single value)."""
    points = np.zeros((1, 0), dtype=np.float64)
    for column, (a, b) in enumerate(zip(lo, hi)):
        bits = 0 if grid is None else int(grid[column])
        values = floatgrid.values(a, b, bits) if bits else np.arange(a, b + 1, dtype=np.float64)
        points = np.hstack([np.repeat(points, len(values), axis=0), np.tile(values, len(points))[:, None]])
    return points


def box_counts(lo: np.ndarray, hi: np.ndarray, integer: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Per box (rows of lo, hi), how many points it holds (float64: it can be astronomical), or
    inf when an input is neither an integer nor a float of a known type (a real: uncountable)."""
    per_input = np.where(integer[None, :], hi - lo + 1, np.inf)
    for column in np.flatnonzero(grid):
        per_input[:, column] = floatgrid.count(lo[:, column], hi[:, column], int(grid[column]))
    return np.prod(np.maximum(per_input, 0), axis=1, dtype=np.float64)


def enumerate_small_boxes(
    lo: np.ndarray,
    hi: np.ndarray,
    integer: np.ndarray,
    probe: Callable[[np.ndarray], np.ndarray | None],
    grid: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Decide the boxes with at most ENUMERATE_POINTS points by probing every point (integers,
    and the values of their type for float inputs: `grid`).

    The probe is exact on each point (it is what decides single-point boxes), so a box none of whose
    points violates is refuted: complete, and for boxes of a few hundred points cheaper than
    bounding and bisecting them down to points (int8 programs: their step functions keep the
    bounds loose until the boxes are tiny; ACAS Xu at int8, phi3 on 2_1: 38,720 code points that
    splitting did not finish in 116 s; float programs: their rounding errors keep the bounds
    from deciding half-ulp margins until the boxes are points). Returns (which boxes were
    decided, a counterexample)."""
    decided = np.zeros(len(lo), dtype=bool)
    grid = np.zeros(len(integer), dtype=np.int64) if grid is None else grid
    if len(lo) == 0 or not np.all(integer | (grid > 0)):
        return decided, None
    small = np.flatnonzero(box_counts(lo, hi, integer, grid) <= ENUMERATE_POINTS)
    pending: list[np.ndarray] = []
    size = 0
    for index in small:
        pending.append(box_points(lo[index], hi[index], grid))
        size += len(pending[-1])
        if size >= ENUMERATE_CHUNK or index == small[-1]:
            found = probe(np.concatenate(pending))
            if found is not None:
                return decided, found
            pending, size = [], 0
    decided[small] = True
    return decided, None


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
    box_milp: BoxMilp | None = None,
    grid: np.ndarray | None = None,
) -> SplitResult:
    """Refute the literals on every sub-box of [lo, hi], or find a point that violates (`probe`
    returns a confirmed counterexample row or None). With `box_milp`, boxes the bounds leave open
    but with few unstable ReLUs are decided by the exact-ReLU MILP (`boxmilp`). `grid` gives per
    input the bits of its float type (0: an integer or a real input)."""
    grid = np.zeros(len(lo), dtype=np.int64) if grid is None else np.asarray(grid, dtype=np.int64)
    lo, hi = snap_to_grid(lo, hi, grid)
    n_checks = len(checks[0]) if checks else 0
    # per box: lower and upper corners, the checks not yet proved on it, and how many more
    # generations wait before its descendants ask the box MILP again (after a failed MILP)
    stack = [(lo[None, :], hi[None, :], np.ones((1, n_checks), dtype=bool), np.zeros(1, dtype=np.int8))]
    processed = 0
    eq = np.array([sense == "eq" for sense in senses], dtype=bool)
    ge = ~eq
    weights: np.ndarray | None = None  # chosen on the first box, from its bounds
    outcome = SplitResult("refuted")
    while stack:
        if time.monotonic() > deadline:
            return outcome.end("unknown", processed, "timeout during input splitting")
        current_lo, current_hi, current_open, current_wait = _take_batch(stack)
        empty = np.any(current_lo > current_hi, axis=1)
        current_lo, current_hi = current_lo[~empty], current_hi[~empty]
        current_open, current_wait = current_open[~empty], current_wait[~empty]
        if len(current_lo) == 0:
            continue
        processed += len(current_lo)
        if processed > max_boxes:
            return outcome.end("unknown", processed, f"more than {max_boxes} boxes")
        if rows:
            wanted = np.flatnonzero(current_open.any(axis=0)) if n_checks else np.zeros(0, dtype=np.int64)
            many = [checks[0][i] for i in wanted] if len(wanted) else None
            result = bounds(model, current_lo, current_hi, rows, many=many)
            refuted_by = (result.row_ub < 0) | (eq[None, :] & (result.row_lb > 0))
            refuted = refuted_by.any(axis=1)
            if weights is None:
                weights = fixed_weights(int(ge.sum()), tightest_literals(result.row_ub[0, ge]))
            if len(weights) and not refuted.all():
                refuted |= refuted_by_fixed(result, ge, current_lo, current_hi, weights)
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
        candidates = []
        if box_milp is not None and rows:
            # the model is exact only where every saturation check holds
            eligible = ~current_open.any(axis=1) & (current_wait == 0)
            candidates, failed = _decide_by_milp(box_milp, result, refuted, eligible, deadline, outcome)
            current_wait = np.where(failed, MILP_RETRY_AFTER, np.maximum(current_wait - 1, 0)).astype(np.int8)
        enumerated, found = enumerate_small_boxes(current_lo, current_hi, integer, probe, grid)
        if found is not None:
            outcome.counterexample = found
            return outcome.end("found", processed)
        open_rows = np.flatnonzero(~refuted & ~enumerated)
        if len(open_rows) == 0:
            continue
        # probes: the maximisers of the literals' upper bounds, the centres, the MILPs' solutions
        probes = [(current_lo[open_rows] + current_hi[open_rows]) / 2, *candidates]
        if rows:
            # the maximiser of the literal furthest from holding (all must hold for a violation)
            hardest = np.argmin(result.row_ub[open_rows], axis=1)
            probes.append(result.row_argmax[open_rows][np.arange(len(open_rows)), hardest])
        points = np.concatenate(probes)
        points = np.where(integer[None, :], np.floor(points), points)
        found = probe(points)
        if found is not None:
            outcome.counterexample = found
            return outcome.end("found", processed)
        open_lo, open_hi = current_lo[open_rows], current_hi[open_rows]
        open_checks, open_wait = current_open[open_rows], current_wait[open_rows]
        single = np.all(open_lo == open_hi, axis=1)
        open_lo, open_hi = open_lo[~single], open_hi[~single]
        open_checks, open_wait = open_checks[~single], open_wait[~single]
        if len(open_lo) == 0:
            continue
        if rows:
            # how much each input moves the undecided literals' upper bounds across the box
            undecided = ~refuted_by[open_rows][~single]
            spread = result.row_spread[open_rows][~single]  # (B, R, n)
            gain = (spread * undecided[:, :, None]).sum(axis=1)
        else:
            gain = open_hi - open_lo
        (a_lo, a_hi), (b_lo, b_hi) = _split_boxes(open_lo, open_hi, gain, integer, grid)
        stack.append((b_lo, b_hi, open_checks.copy(), open_wait))
        stack.append((a_lo, a_hi, open_checks.copy(), open_wait))
    return outcome.end("refuted", processed)
