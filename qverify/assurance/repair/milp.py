"""The repair MILP: integer weight changes of the chosen neurons that meet every hard goal and
violate the soft goals as little as possible, with little total change (HiGHS, through
`qverify.engine`'s MILP layer).

Variables (one set per chosen neuron j; i runs over the layer's inputs):

    d_ji, d_j        integer changes of weight w_ji and bias b_j, within bounds that keep the new
                     values representable in the format (fixed-point words, int8 / int32)
    a_ji, a_j        |d_ji|, |d_j| (a >= d, a >= -d): the objective's total change
    c_ji             binary, d_ji != 0 allowed only when c_ji = 1 (fixed point per-op only)
    p_tj (p_lo, p_hi) the neuron's linear quantity on test t (`readout`), one equality row each:
                       P = P0_tj + sum_i x_ti d_ji + beta d_j          (int8, fixed point wide)
                       P_lo/hi = P0_tj + sum_i x_ti d_ji + beta d_j + sum_i c_ji (e_lo/hi [x_ti != 0] - err_tji)
                     (per-op: a changed product's rounding error is only known to lie in
                     [e_lo, e_hi]; err_tji is the unchanged product's exact error, known from the
                     simulator's inputs, taken out when the weight changes)
    s_g              continuous >= 0 per soft goal: its violation (added to each of its rows)
    v                integer level per pair of changed outputs (o_loser <= v, o_winner >= v + n)

Goals (`Goal`): rows o_j >= t (p_lo >= at_least(t)), o_j <= t (p_hi <= at_most(t)), and
o_w - o_l >= n (p_hi_l <= s_l v + down_l, p_lo_w >= s_w (v + n) + up_w). Hard goals are the
passing tests: they hold at d = 0 by construction (the thresholds are exact), except a pair row of
two changed outputs whose level rows do not fit the unchanged network (a table's thresholds off
their line by a unit); such a pair is kept by the monotone rows p_lo_w >= P0_w, p_hi_l <= P0_l
instead (sufficient: o_w cannot fall nor o_l rise) and counted. A soft goal's rows read
row + s_g >= rhs; a goal is met when s_g = 0. Per-op tests in `prefix_tests` also keep every partial
sum of the C's loop a word (`repair` adds the tests on which a solution saturated).

Objective: minimise sum(s_g) / step + CHANGE_WEIGHT * sum(cost * a) (step: the readouts' mean
distance of two output values in P, so violations count in output steps): a hinge, not a count of
met goals. QNNRepair asks every failing test to be fixed, which is infeasible as soon as two of them
conflict; one binary per soft goal (maximise the number met) was tried first and left HiGHS with
weak relaxations: 1 of 29 failing digits tests met after 60 s (docs/repair.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qverify.assurance.repair.readout import Readout
from qverify.engine.solvers.highs import HighsSolver, Optimum, OptimumStatus
from qverify.engine.solvers.milp import MilpModel
from qverify.errors import InternalError

INF = math.inf
CHANGE_WEIGHT = 0.05  # objective cost of one weight step, against one output step of a soft goal's violation


@dataclass(frozen=True, slots=True, eq=False)
class LayerData:
    """The repaired layer, restricted to its chosen neurons, on the encoded tests.

    `inputs` (tests, n_in): the coefficient of d_ji in P (fixed point: the input words; int8: the
    input codes minus the input zero point). `base` (tests, chosen): P at d = 0. `bias_coef`: the
    coefficient of d_j (2^l for fixed point, whose exact sums carry 2l fractional bits; 1 for int8).
    `product_error` (per-op only; tests, chosen, n_in): 2^l mult(w, x) - w x, and `error_range` a
    changed product's possible [min, max] of the same quantity; `base_partials` the C loop's partial
    sums at d = 0 (2^l x words: the bias, then after each product). Bounds and costs per change."""

    inputs: np.ndarray
    base: np.ndarray
    bias_coef: int
    readouts: tuple[Readout, ...]
    weight_lo: np.ndarray
    weight_hi: np.ndarray
    bias_lo: np.ndarray
    bias_hi: np.ndarray
    weight_cost: np.ndarray
    bias_cost: np.ndarray
    product_error: np.ndarray | None = None
    error_range: tuple[int, int] = (0, 0)
    base_partials: np.ndarray | None = None  # per-op (tests, chosen, n_in + 1): 2^l x the partial sums
    word_range: tuple[int, int] = (0, 0)  # per-op: the accumulator's word range [min_q, max_q]
    prefix_tests: frozenset[int] = frozenset()  # per-op: tests whose partial sums must stay in range

    @property
    def n_tests(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def n_chosen(self) -> int:
        return len(self.readouts)

    @property
    def per_op(self) -> bool:
        return self.product_error is not None


@dataclass(frozen=True, slots=True)
class Goal:
    """What one test (or one test and neuron) must satisfy; positions index the chosen neurons."""

    test: int
    soft: bool
    at_least: tuple[tuple[int, int], ...] = ()  # (neuron, t): o >= t
    at_most: tuple[tuple[int, int], ...] = ()  # (neuron, t): o <= t
    pairs: tuple[tuple[int, int, int], ...] = ()  # (winner, loser, n): o_winner - o_loser >= n


@dataclass(frozen=True, slots=True, eq=False)
class MilpSolution:
    """The solver's answer in the layer's terms."""

    optimum: Optimum
    weight_delta: np.ndarray  # (chosen, n_in) int64 (zeros without a solution)
    bias_delta: np.ndarray  # (chosen,) int64
    met: np.ndarray  # bool per goal: hard goals, and soft goals with r = 1
    n_rows: int
    n_cols: int
    n_integer: int
    fallback_pairs: int  # hard pairs kept by the monotone rows (module docstring)

    @property
    def status(self) -> OptimumStatus:
        return self.optimum.status


class _Builder:
    """Fills one MilpModel; rows are written as `expr >= rhs`, hard or relaxed by a binary."""

    def __init__(self, data: LayerData, change_weight: float) -> None:
        self.data = data
        self.change_weight = change_weight
        self.unreachable: set[int] = set()  # slacks of soft goals with a row that can never hold
        self.need: dict[int, float] = {}  # slack -> its value at the start point (the worst row)
        self.model = MilpModel()
        self.start: list[float] = []  # the unchanged network: a feasible point (hard goals hold at d = 0)
        self.fallback_pairs = 0
        chosen, n_in = data.n_chosen, data.inputs.shape[1]
        self.weight = np.empty((chosen, n_in), dtype=np.int64)
        self.bias = np.empty(chosen, dtype=np.int64)
        self.changed = np.full((chosen, n_in), -1, dtype=np.int64)
        for j in range(chosen):
            for i in range(n_in):
                self.weight[j, i] = self._change(
                    data.weight_lo[j, i], data.weight_hi[j, i], data.weight_cost[j, i]
                )
                if data.per_op:
                    self._may_change(j, i)
            self.bias[j] = self._change(data.bias_lo[j], data.bias_hi[j], data.bias_cost[j])
        self.p_lo: dict[tuple[int, int], int] = {}
        self.p_hi: dict[tuple[int, int], int] = {}

    def _col(self, lo: float, hi: float, integer: bool, cost: float = 0.0, start: float = 0.0) -> int:
        """A column, and its value in the unchanged network (the start point handed to HiGHS)."""
        self.start.append(float(start))
        return self.model.add_column(lo, hi, integer, cost)

    def _change(self, lo: int, hi: int, cost: float) -> int:
        """An integer change in [lo, hi] and its absolute value (with the objective's cost)."""
        model = self.model
        delta = self._col(int(lo), int(hi), True)
        bound = max(abs(int(lo)), abs(int(hi)))
        magnitude = self._col(0, bound, False, self.change_weight * float(cost))
        model.add_row({magnitude: 1.0, delta: -1.0}, 0.0, INF)
        model.add_row({magnitude: 1.0, delta: 1.0}, 0.0, INF)
        return delta

    def _may_change(self, j: int, i: int) -> None:
        model, delta = self.model, int(self.weight[j, i])
        bound = max(abs(model.col_lo[delta]), abs(model.col_hi[delta]))
        flag = self._col(0, 1, True)
        model.add_row({delta: 1.0, flag: -bound}, -INF, 0.0)
        model.add_row({delta: -1.0, flag: -bound}, -INF, 0.0)
        self.changed[j, i] = flag

    # ------------------------------------------------------------------------------ P columns

    def _p_terms(
        self, t: int, j: int, side: int, upto: int | None = None
    ) -> tuple[dict[int, float], float, float]:
        """The linear part of P_tj (side -1: P_lo, +1: P_hi, 0: exact) and its interval bounds;
        `upto`: only the bias and the products of inputs 0..upto (a partial sum of the C's loop)."""
        data, model = self.data, self.model
        terms: dict[int, float] = {}
        lo = hi = 0.0
        for i, x in enumerate(data.inputs[t]):
            if x == 0 or (upto is not None and i > upto):
                continue
            column = int(self.weight[j, i])
            terms[column] = float(x)
            a, b = x * model.col_lo[column], x * model.col_hi[column]
            lo, hi = lo + min(a, b), hi + max(a, b)
        column = int(self.bias[j])
        terms[column] = float(data.bias_coef)
        a, b = data.bias_coef * model.col_lo[column], data.bias_coef * model.col_hi[column]
        lo, hi = lo + min(a, b), hi + max(a, b)
        if side != 0:
            e_lo, e_hi = data.error_range
            for i, x in enumerate(data.inputs[t]):
                if x == 0 or (upto is not None and i > upto):
                    continue
                coef = float((e_lo if side < 0 else e_hi) - data.product_error[t, j, i])  # type: ignore[index]
                terms[int(self.changed[j, i])] = coef
                lo, hi = lo + min(coef, 0.0), hi + max(coef, 0.0)
        return terms, lo, hi

    def _p(self, t: int, j: int, side: int) -> int:
        """The column of P_lo (side -1) or P_hi (+1) of neuron j on test t (one column if exact)."""
        if not self.data.per_op:
            side = 0
        cache = self.p_hi if side > 0 else self.p_lo
        if (t, j) in cache:
            return cache[(t, j)]
        terms, lo, hi = self._p_terms(t, j, side)
        base = float(self.data.base[t, j])
        column = self._col(base + lo, base + hi, False, start=base)
        terms[column] = -1.0
        self.model.add_row(terms, -base, -base)  # sum(terms) - P = -P0
        cache[(t, j)] = column
        if side == 0:
            self.p_hi[(t, j)] = column
        if self.data.per_op and t in self.data.prefix_tests:
            self._partial_sums_in_range(t, j, side)
        if self.data.per_op:  # the final word in range (no saturation at the end)
            readout = self.data.readouts[j]
            if side < 0:
                self.model.add_row({column: 1.0}, readout.low * readout.scale, INF)
            else:
                self.model.add_row({column: 1.0}, -INF, readout.high * readout.scale)
        return column

    def _partial_sums_in_range(self, t: int, j: int, side: int) -> None:
        """Per-op: every partial sum of the C's loop stays a word (no saturation on the way), so the
        final word is the sum the rows describe. Added for the tests where a first solution
        saturated (`repair` re-solves with them; the data's own partial sums are in range)."""
        data = self.data
        scale = float(data.bias_coef)
        low, high = data.word_range
        for i in np.flatnonzero(data.inputs[t]):
            terms, _, _ = self._p_terms(t, j, side, upto=int(i))
            constant = float(data.base_partials[t, j, i + 1])  # type: ignore[index]
            if side < 0:
                self.model.add_row(terms, low * scale - constant, INF)
            else:
                self.model.add_row(terms, -INF, high * scale - constant)

    # ------------------------------------------------------------------------------ rows

    def _minimum(self, terms: dict[int, float]) -> float:
        model = self.model
        total = 0.0
        for column, coef in terms.items():
            total += coef * (model.col_lo[column] if coef > 0 else model.col_hi[column])
        return total

    def _at_least(self, terms: dict[int, float], rhs: float, slack: int | None) -> None:
        """sum(terms) >= rhs; for a soft goal, sum(terms) + slack >= rhs (its violation, paid for in
        the objective). A row that can never hold makes a soft goal unreachable."""
        if rhs == -INF:
            return
        if rhs == INF:
            if slack is None:
                raise InternalError("repair MILP: a hard goal that cannot hold")
            self.unreachable.add(slack)
            return
        if slack is None:
            self.model.add_row(terms, rhs, INF)
            return
        self.model.add_row({**terms, slack: 1.0}, rhs, INF)
        at_start = sum(coef * self.start[column] for column, coef in terms.items())
        self.need[slack] = max(self.need.get(slack, 0.0), rhs - at_start)

    def goal(self, goal: Goal, slack: int | None) -> None:
        data = self.data
        for j, t in goal.at_least:
            self._at_least({self._p(goal.test, j, -1): 1.0}, data.readouts[j].at_least(t), slack)
        for j, t in goal.at_most:
            self._at_least({self._p(goal.test, j, +1): -1.0}, -data.readouts[j].at_most(t), slack)
        for winner, loser, n in goal.pairs:
            self._pair(goal.test, winner, loser, n, slack)

    def _pair(self, t: int, winner: int, loser: int, n: int, slack: int | None) -> None:
        """o_winner - o_loser >= n for two changed outputs (module docstring)."""
        rw, rl = self.data.readouts[winner], self.data.readouts[loser]
        v_lo, v_hi = rl.low, rw.high - n
        p_w, p_l = self._p(t, winner, -1), self._p(t, loser, +1)
        fit = self._level_at_zero(t, winner, loser, n)
        if slack is None and fit is None:
            self.fallback_pairs += 1
            self.model.add_row({p_w: 1.0}, float(self.data.base[t, winner]), INF)
            self.model.add_row({p_l: 1.0}, -INF, float(self.data.base[t, loser]))
            return
        if v_lo > v_hi:
            self._at_least({}, INF, slack)
            return
        level = self._col(v_lo, v_hi, True, start=v_lo if fit is None else fit)
        self._at_least({level: rl.scale, p_l: -1.0}, -rl.down, slack)
        self._at_least({p_w: 1.0, level: -rw.scale}, rw.scale * n + rw.up, slack)

    def _level_at_zero(self, t: int, winner: int, loser: int, n: int) -> int | None:
        """A level v meeting both pair rows in the unchanged network, if there is one."""
        rw, rl = self.data.readouts[winner], self.data.readouts[loser]
        pw, pl = float(self.data.base[t, winner]), float(self.data.base[t, loser])
        v_lo = max(rl.low, math.ceil((pl - rl.down) / rl.scale - 1e-9))
        v_hi = min(rw.high - n, math.floor((pw - rw.up) / rw.scale - n + 1e-9))
        return v_lo if v_lo <= v_hi else None


def solve_repair(
    data: LayerData, goals: Sequence[Goal], time_limit_s: float, change_weight: float = CHANGE_WEIGHT
) -> MilpSolution:
    """Build and solve the repair MILP for `goals` (module docstring)."""
    builder = _Builder(data, change_weight)
    violation_cost = 1.0 / float(np.mean([r.scale for r in data.readouts]))
    slacks: list[int | None] = []
    for goal in goals:
        slack = builder._col(0, INF, False, violation_cost) if goal.soft else None
        slacks.append(slack)
        builder.goal(goal, slack)
    for slack, need in builder.need.items():
        builder.start[slack] = max(need, 0.0)
    model = builder.model
    optimum = HighsSolver().minimize(model, time_limit_s, start=np.array(builder.start))
    chosen, n_in = builder.weight.shape
    weight_delta = np.zeros((chosen, n_in), dtype=np.int64)
    bias_delta = np.zeros(chosen, dtype=np.int64)
    met = np.array([not goal.soft for goal in goals], dtype=bool)
    if optimum.has_solution:
        values = optimum.values
        weight_delta = np.rint(values[builder.weight]).astype(np.int64)
        bias_delta = np.rint(values[builder.bias]).astype(np.int64)
        met = np.array(
            [s is None or (values[s] < 0.5 and s not in builder.unreachable) for s in slacks], dtype=bool
        )
    return MilpSolution(
        optimum=optimum,
        weight_delta=weight_delta,
        bias_delta=bias_delta,
        met=met,
        n_rows=model.n_rows,
        n_cols=model.n_cols,
        n_integer=int(sum(model.integer)),
        fallback_pairs=builder.fallback_pairs,
    )
