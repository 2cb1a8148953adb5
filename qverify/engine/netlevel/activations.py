"""Network level: what follows a layer's linear part, and how the bounds relax it.

Each activation h = f(z) of the network level is read through one interface: its exact range on
pre-activation bounds (`post_bounds`), which neurons it does not make linear there
(`open_neurons`), its value and a slope for the float64 surrogate (`forward`, `derivative`: the
attack), and a sound linear relaxation on [lo, hi] (`relaxation`):

    a z + c <= f(z) <= s z + t    for every z in [lo, hi] the implementation can produce,

elementwise, as exact inequalities on the stored float64 numbers (rounded outward where computed).
The back-substitution uses the lower side for positive coefficients and the upper side for
negative ones (`bounds`).

- `Identity`: no relaxation (the layer's z is its output).
- `Relu`: the triangle (s, t the chord, a in [0, 1]: DeepPoly's choice by default, alpha-CROWN's
  optimised slopes otherwise, c = 0); phases to split on.
- `Stairs`: int8's requantization per neuron (`staircase.Staircase`).
- `Clamp`: ReLU6, min(max(z, 0), 6), relaxed from its two kinks.
- `MaxPool`: the largest input of each window (not elementwise: each side reads one input of the
  window), with its own split.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from qverify.engine.netlevel.roundoff import TINY, U64
from qverify.engine.netlevel.staircase import Staircase

SLOPE_UP = 1.0 + 8 * U64  # rounds a computed slope or intercept past two roundings


class Relaxation(NamedTuple):
    """a z + c <= h <= s z + t on the neuron's interval; z_max = max |z| there (for the charge of
    the elementwise products); arrays (..., n). A pool's output o reads one input on each side:
    a z[lower_index[o]] + c <= h[o] <= s z[upper_index[o]] + t (arrays (..., n_out), z_max over
    its inputs (..., n_in)); `sharing`: the most terms the back-substitution adds into one input's
    coefficient (overlapping windows, both sides)."""

    a: np.ndarray
    c: np.ndarray
    s: np.ndarray
    t: np.ndarray
    z_max: np.ndarray
    lower_index: np.ndarray | None = None
    upper_index: np.ndarray | None = None
    sharing: int = 1

    def select(self, index) -> Relaxation:
        """The relaxation of one box of a batch (or any index on the leading axes)."""
        return Relaxation(
            *(None if part is None else part[index] for part in self[:7]),  # type: ignore[arg-type]
            self.sharing,
        )


def relu_relaxation(
    lo: np.ndarray, hi: np.ndarray, alpha: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, s, t): a z <= relu(z) <= s z + t on [lo, hi], exact on stable neurons. `alpha` chooses
    the lower slopes of unstable neurons (default DeepPoly's: 1 when hi >= -lo, else 0). The upper
    side is the chord, s rounded up past hi / (hi - lo) and t past -s lo: it lies above relu at both
    ends of [lo, hi], so everywhere between (a convex function lies below such a line)."""
    active = lo >= 0
    unstable = (lo < 0) & (hi > 0)
    width = np.where(unstable, hi - lo, 1.0)
    s = np.where(unstable, hi / width * SLOPE_UP, np.where(active, 1.0, 0.0))
    t = np.where(unstable, -(s * lo) * SLOPE_UP, 0.0)
    if alpha is None:
        lower = np.where(hi >= -lo, 1.0, 0.0)
    else:
        lower = np.clip(alpha, 0.0, 1.0)
    a = np.where(unstable, lower, np.where(active, 1.0, 0.0))
    return a, s, t


def relu_lower_slopes(lo: np.ndarray, hi: np.ndarray, deeppoly: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """`relu_relaxation`'s lower slopes `a` with the unstable neurons' slopes `alpha` (clipped to
    [0, 1]), from the cached DeepPoly slopes `deeppoly` (exact on stable neurons): the same array
    without recomputing the upper side, which the alpha steps never change (a few numpy calls on
    the rows instead of a dozen, per layer and step)."""
    return np.where((lo < 0) & (hi > 0), np.clip(alpha, 0.0, 1.0), deeppoly)


class Elementwise:
    """An activation applied neuron by neuron: h has z's shape, a gradient is a product."""

    elementwise = True  # (a pool's output reads a window of its inputs)
    stairs: Staircase | None = None  # a lookup table's or an int8 requantization's steps (`Stairs`)

    def derivative(self, z: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def pullback(self, grad: np.ndarray, z: np.ndarray) -> np.ndarray:
        """The surrogate's gradient in z from its gradient in h (the attack)."""
        return grad * self.derivative(z)

    def outputs(self, n: int) -> int:
        """How many values h has for n values of z."""
        return n

    def lp_folded(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Neurons whose h is the constant 0 on [lo, hi]: the LP gives them no z column (`lp`)."""
        return np.zeros(np.shape(lo), dtype=bool)

    def lp_post(self, node) -> np.ndarray:
        """The LP's columns of h for the node's z columns (`lp.LpNode`): rows of its own kind; -1
        where h is the constant 0."""
        raise NotImplementedError


class Identity(Elementwise):
    """h = z."""

    relaxed = False  # is the activation relaxed by linear bounds (not the identity)?
    splittable = False  # has it phases a branch and bound can fix (ReLU)?
    repeat_splits = False  # are its neurons split at values, possibly again (tables, clamps)?

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lo, hi

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(lo), dtype=bool)

    def forward(self, z: np.ndarray) -> np.ndarray:
        return z

    def derivative(self, z: np.ndarray) -> np.ndarray:
        return np.ones_like(z)

    def pullback(self, grad: np.ndarray, z: np.ndarray) -> np.ndarray:
        return grad

    def relaxation(self, lo: np.ndarray, hi: np.ndarray) -> Relaxation:
        one = np.ones(np.shape(lo))
        zero = np.zeros(np.shape(lo))
        return Relaxation(one, zero, one, zero, np.maximum(np.abs(lo), np.abs(hi)))

    def lp_post(self, node) -> np.ndarray:
        return node.own


class Relu(Elementwise):
    """h = max(z, 0), relaxed by the triangle; its phases (z > 0, z <= 0) are split on."""

    relaxed = True
    splittable = True
    repeat_splits = False

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.maximum(lo, 0.0), np.maximum(hi, 0.0)

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return (lo < 0) & (hi > 0)

    def forward(self, z: np.ndarray) -> np.ndarray:
        return np.maximum(z, 0.0)

    def derivative(self, z: np.ndarray) -> np.ndarray:
        return (z > 0).astype(np.float64)

    def pullback(self, grad: np.ndarray, z: np.ndarray) -> np.ndarray:
        return grad * (z > 0)

    def relaxation(self, lo: np.ndarray, hi: np.ndarray) -> Relaxation:
        a, s, t = relu_relaxation(lo, hi)
        return Relaxation(a, np.zeros_like(t), s, t, np.maximum(np.abs(lo), np.abs(hi)))

    def lp_folded(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Surely inactive (h = 0): the statement's row alone bounds W h (`lp` module docstring)."""
        return (hi <= 0) & (lo < 0)

    def lp_post(self, node) -> np.ndarray:
        """Stable active: h = z; inactive: -1 (h = 0); unstable: an h column with h >= 0, h >= z and
        the triangle's upper side (LP), or the big-M encoding with one binary (MILP)."""
        own, lo, hi, columns, rows = node.own, node.lo, node.hi, node.columns, node.rows
        unstable = (lo < 0) & (hi > 0)
        post = own.copy()
        if unstable.any():
            z = own[unstable]
            u_lo, u_hi = lo[unstable], hi[unstable]
            h = columns.add(np.zeros(len(z)), u_hi)
            post[unstable] = h
            pair = np.column_stack([h, z])
            rows.add(pair, np.column_stack([np.ones(len(z)), -np.ones(len(z))]), 0.0, np.inf)
            if node.integer:
                d = columns.add(np.zeros(len(z)), np.ones(len(z)), integer=True)
                rows.add(
                    np.column_stack([h, z, d]),
                    np.column_stack([np.ones(len(z)), -np.ones(len(z)), -u_lo]),
                    -np.inf,
                    -u_lo,
                )
                rows.add(np.column_stack([h, d]), np.column_stack([np.ones(len(z)), -u_hi]), -np.inf, 0.0)
            else:
                _, s, t = relu_relaxation(u_lo, u_hi)
                rows.add(pair, np.column_stack([np.ones(len(z)), -s]), -np.inf, t)
        return post


class Stairs(Elementwise):
    """A monotone staircase per neuron (int8's requantization: `staircase.Staircase`)."""

    relaxed = True
    splittable = False
    repeat_splits = True

    def __init__(self, stairs: Staircase) -> None:
        self.stairs = stairs

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.stairs.code_bounds(lo, hi)

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return self.stairs.open(lo, hi)

    def forward(self, z: np.ndarray) -> np.ndarray:
        return self.stairs.codes(z)

    def derivative(self, z: np.ndarray) -> np.ndarray:
        return self.stairs.gradient(z)

    def relaxation(self, lo: np.ndarray, hi: np.ndarray) -> Relaxation:
        return Relaxation(*self.stairs.relaxation(lo, hi), np.maximum(np.abs(lo), np.abs(hi)))

    def split_value(self, lo: np.ndarray, hi: np.ndarray, grid: float) -> np.ndarray:
        """Where to split each neuron's z: int8, half an accumulator unit below a threshold in its
        interval (`Staircase.split_points`: each child's interval then holds whole steps); a lookup
        table, the middle of its interval (on the grid)."""
        if self.stairs.thresholds is not None:
            return self.stairs.split_points(lo, hi)[0]
        middle = (lo + hi) / 2
        return np.floor(middle / grid) * grid if grid else middle

    def lp_post(self, node) -> np.ndarray:
        """h between the relaxation's two lines; int8 (`node.stepped`): also between the edges of
        its convex hull on [lo, hi]; the MILP's chosen neurons (`node.touched`) exact."""
        h = node.table(self.post_bounds(node.lo, node.hi))
        if node.stepped:
            self._lp_hull_rows(node.rows, node.lo, node.hi, node.own, h)
        if node.touched is not None:
            self._lp_exact_steps(node.columns, node.rows, node.lo, node.hi, node.own, h, node.touched)
        return h

    def _lp_hull_rows(self, rows, lo: np.ndarray, hi: np.ndarray, z: np.ndarray, h: np.ndarray) -> None:
        """int8: each open staircase neuron's convex hull on [lo, hi] (`Staircase.hull_lines`) as rows
        h - slope z >= c (lower side) or <= t (upper side), beside the relaxation's two lines."""
        owner, slope, offset, upper = self.stairs.hull_lines(lo, hi, np.flatnonzero(self.stairs.open(lo, hi)))
        if not len(owner):
            return
        pair = np.column_stack([h[owner], z[owner]])
        values = np.column_stack([np.ones(len(owner)), -slope])
        rows.add(pair, values, np.where(upper, -np.inf, offset), np.where(upper, offset, np.inf))

    def _lp_exact_steps(
        self,
        columns,
        rows,
        lo: np.ndarray,
        hi: np.ndarray,
        z: np.ndarray,
        h: np.ndarray,
        touched: np.ndarray,
    ) -> None:
        """MILP: the open staircase neurons marked `touched` encoded exactly (int8's requantization on
        its integer accumulators, a lookup table on the words of a fixed-point format or, over the
        reals, on its thresholds rounded outward): one binary d_k per threshold t_k in (lo, hi]
        (d_k = [z >= t_k]) with z >= lo + (t_k - lo) d_k, z <= t_k - g + (hi - t_k + g) d_k (g the
        grid: the last domain point below t_k; over the reals g = 0 and the thresholds rounded
        outward, `Staircase.lower_table` / `upper_table`), d_k >= d_(k+1), and the value
        h = value(lo) + sum_k d_k (the value's rise at t_k). Every execution (z on the domain in [lo, hi])
        satisfies these with its own d, so an infeasible MILP has no execution."""
        from scipy import sparse

        stairs = self.stairs
        neurons = np.flatnonzero(touched & stairs.open(lo, hi))
        if not len(neurons):
            return
        low = stairs._on_grid(lo[neurons], down=False)
        high = np.maximum(stairs._on_grid(hi[neurons], down=True), low)
        table_rows = neurons if stairs.upper_table.shape[0] > 1 else np.zeros(len(neurons), dtype=np.int64)
        upper_table = stairs.upper_table[table_rows]  # reached from here on (d = 1): z >= this
        lower_table = stairs.lower_table[table_rows]  # not reached (d = 0): z below this
        jumps = np.diff(stairs.levels, axis=-1)[table_rows]  # the value's rise at each threshold
        # thresholds that may be unreached at lo and reached at hi (over the reals, those whose
        # rounded ends straddle lo count too: the value at lo below counts only the surely reached)
        inside = (lower_table > low[:, None]) & (upper_table <= high[:, None]) & (jumps != 0)
        owner, slot = np.nonzero(inside)  # row-major: each neuron's thresholds in ascending order
        reach = upper_table[owner, slot]
        below = lower_table[owner, slot] - stairs.grid
        d = columns.add(np.zeros(len(reach)), np.ones(len(reach)), integer=True)
        ones = np.ones(len(reach))
        zs = z[neurons][owner]
        rows.add(np.column_stack([zs, d]), np.column_stack([ones, -(reach - low[owner])]), low[owner], np.inf)
        rows.add(np.column_stack([zs, d]), np.column_stack([ones, -(high[owner] - below)]), -np.inf, below)
        same = owner[:-1] == owner[1:]  # d_k >= d_(k+1) within a neuron
        if same.any():
            pairs = np.column_stack([d[:-1][same], d[1:][same]])
            rows.add(pairs, np.column_stack([ones[1:][same], -ones[1:][same]]), 0.0, np.inf)
        value_low = stairs.values(_spread(low, neurons, len(lo)), "lower")[neurons]
        # h - sum of the neuron's jumps d = value(lo): one row per neuron, its h column first
        counts = np.bincount(owner, minlength=len(neurons))
        start = np.concatenate(([0], np.cumsum(counts + 1)))
        entries = np.empty(start[-1], dtype=np.int64)
        values = np.empty(start[-1])
        entries[start[:-1]] = np.arange(len(neurons))  # local column r: h of neuron r
        values[start[:-1]] = 1.0
        rest = np.ones(start[-1], dtype=bool)
        rest[start[:-1]] = False
        entries[rest] = len(neurons) + np.arange(len(reach))  # then the neuron's d columns
        values[rest] = -jumps[owner, slot]
        block = sparse.csr_array((values, entries, start), shape=(len(neurons), len(neurons) + len(reach)))
        rows.add_sparse(block, np.concatenate([h[neurons], d]), value_low, value_low)


class Clamp(Elementwise):
    """h = min(max(z, 0), top): ReLU6 (top 6 in real units, the C's comparison with 6 exact in
    every format). Piecewise linear with kinks at 0 and top, so for any slope m, f(z) - m z over
    [lo, hi] is extreme at lo, hi or a kink inside: each side's intercept is that extreme (rounded
    outward), for the slope of the best of a few candidates (0, 1, the chord, and the lines through
    a kink and an end) by the line's distance from f at the two ends, as `Staircase.relaxation`
    chooses. Not split by phase: a search splits its z at a kink (`split_value`) and may split the
    same neuron again at the other."""

    relaxed = True
    splittable = False
    repeat_splits = True  # (its neurons are split at values, possibly more than once)

    def __init__(self, top: float) -> None:
        self.top = float(top)

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.forward(lo), self.forward(hi)

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return ((lo < 0) & (hi > 0)) | ((lo < self.top) & (hi > self.top))

    def forward(self, z: np.ndarray) -> np.ndarray:
        return np.clip(z, 0.0, self.top)

    def derivative(self, z: np.ndarray) -> np.ndarray:
        return ((z > 0) & (z < self.top)).astype(np.float64)

    def split_value(self, lo: np.ndarray, hi: np.ndarray, grid: float) -> np.ndarray:
        """Where to split each neuron's z: the kink inside (lo, hi) (0 first), else the middle."""
        middle = (lo + hi) / 2
        if grid:
            middle = np.floor(middle / grid) * grid
        return np.where(
            (lo < 0) & (hi > 0), 0.0, np.where((lo < self.top) & (hi > self.top), self.top, middle)
        )

    def relaxation(self, lo: np.ndarray, hi: np.ndarray) -> Relaxation:
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        top = self.top
        points = np.stack(
            [lo, hi, np.clip(np.zeros_like(lo), lo, hi), np.clip(np.full_like(lo, top), lo, hi)]
        )
        values = self.forward(points)
        f_lo, f_hi = values[0], values[1]
        width = np.where(hi > lo, hi - lo, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            chord = np.where(hi > lo, (f_hi - f_lo) / width, 0.0)
            to_top = np.where(top > lo, (top - f_lo) / np.maximum(top - lo, 1e-300), 0.0)
            from_zero = np.where(hi > 0, f_hi / np.maximum(hi, 1e-300), 0.0)
        candidates = np.stack(
            [np.zeros_like(lo), np.ones_like(lo), chord, np.clip(to_top, 0, 1), np.clip(from_zero, 0, 1)]
        )

        def intercepts(slopes: np.ndarray, upper: bool) -> np.ndarray:
            products = slopes[:, None] * points[None]
            deviation = values[None] - products
            error = 8 * U64 * (np.abs(values[None]) + np.abs(products)) + TINY
            if upper:
                return (deviation + error).max(axis=1)
            return (deviation - error).min(axis=1)

        ups, downs = intercepts(candidates, True), intercepts(candidates, False)
        ends = np.stack([lo, hi])
        up_gap = (candidates[:, None] * ends[None] + ups[:, None] - values[None, :2]).sum(axis=1)
        down_gap = (values[None, :2] - candidates[:, None] * ends[None] - downs[:, None]).sum(axis=1)
        pick_up, pick_down = np.argmin(up_gap, axis=0), np.argmin(down_gap, axis=0)
        s = np.take_along_axis(candidates, pick_up[None], 0)[0]
        t = np.take_along_axis(ups, pick_up[None], 0)[0]
        a = np.take_along_axis(candidates, pick_down[None], 0)[0]
        c = np.take_along_axis(downs, pick_down[None], 0)[0]
        return Relaxation(a, c, s, t, np.maximum(np.abs(lo), np.abs(hi)))

    def lp_post(self, node) -> np.ndarray:
        """h between the relaxation's two lines (the LP and the MILP alike)."""
        return node.table(self.post_bounds(node.lo, node.hi))


class MaxPool:
    """h[o] = the largest z of window o (`Taps` of the pool: inputs per output, padding skipped).

    Relaxation (DeepPoly's lower side, a chord on the upper side): with l, u the inputs' bounds,
    k the input of the largest lower bound and m the one of the largest upper bound,
    - h >= z_k (any input of the window is a lower bound);
    - h <= max(z_m, U') with U' the largest upper bound of the other inputs, and max(z_m, U') is
      convex in z_m, so below its chord over [l_m, u_m]: h <= U' + s (z_m - l_m),
      s = (u_m - U') / (u_m - l_m) (rounded up; the intercept rounded up), which is at most
      max u everywhere on the interval (auto_LiRPA's and DeepPoly's upper bound is that constant);
    - a window whose input k has l_k >= every other input's u is stable: h = z_k.
    The split a branch and bound makes on an unstable window is z_m >= U' (stable: h = z_m) or
    z_m <= U' (`split_value`; ties of the largest upper bounds are split halfway)."""

    elementwise = False
    stairs = None
    relaxed = True
    splittable = False  # (its splits are on the window's inputs: `split_value`)
    repeat_splits = False

    def __init__(self, inputs: np.ndarray, valid: np.ndarray) -> None:
        self.inputs = inputs  # (n_out, width): input index of each window position
        self.valid = valid
        counts = np.bincount(inputs[valid].ravel(), minlength=int(inputs.max(initial=0)) + 1)
        self.sharing = 2 * int(counts.max(initial=1)) + 1

    def outputs(self, n: int) -> int:
        return int(self.inputs.shape[0])

    def _windows(self, values: np.ndarray) -> np.ndarray:
        """values (..., n_in) gathered per window (..., n_out, width), -inf at padding."""
        return np.where(self.valid, values[..., self.inputs], -np.inf)

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._windows(lo).max(axis=-1), self._windows(hi).max(axis=-1)

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Windows whose maximum is not one input on [lo, hi]."""
        return ~self._stable(self._windows(lo), self._windows(hi))[0]

    @staticmethod
    def _stable(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(stable windows, k: the input of the largest lower bound)."""
        k = np.argmax(low, axis=-1)
        best = np.take_along_axis(low, k[..., None], axis=-1)[..., 0]
        others = high.copy()
        np.put_along_axis(others, k[..., None], -np.inf, axis=-1)
        return best >= others.max(axis=-1), k

    def forward(self, z: np.ndarray) -> np.ndarray:
        return self._windows(z).max(axis=-1)

    def pullback(self, grad: np.ndarray, z: np.ndarray) -> np.ndarray:
        """The gradient flows to each window's largest input."""
        chosen = np.take_along_axis(
            np.broadcast_to(self.inputs, (*z.shape[:-1], *self.inputs.shape)),
            np.argmax(self._windows(z), axis=-1)[..., None],
            axis=-1,
        )[..., 0]
        return scatter(grad, chosen, z.shape[-1])

    def split_value(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per window (one node's bounds): the input m of the largest upper bound, the value to
        split it at, and a weight for the branching score (how loose the relaxation is there).
        With U' (the others' largest upper bound) inside (l_m, u_m): at U' (z_m >= U' makes the
        window stable), weight the chord's gap over max(z_m, U'), (u_m - U') (U' - l_m) / (u_m -
        l_m). With U' = u_m (ties: the upper side is the constant u_m): halfway between the
        window's best lower bound L and u_m, weight (u_m - L) / 4. 0 for stable windows."""
        low, high = self._windows(lo), self._windows(hi)
        m = np.argmax(high, axis=-1)
        u_m = np.take_along_axis(high, m[..., None], axis=-1)[..., 0]
        l_m = np.take_along_axis(low, m[..., None], axis=-1)[..., 0]
        others = high.copy()
        np.put_along_axis(others, m[..., None], -np.inf, axis=-1)
        second = others.max(axis=-1)
        best_low = low.max(axis=-1)
        open_ = ~self._stable(low, high)[0]
        chord = open_ & (second > l_m) & (u_m > second)
        width = np.where(chord, u_m - l_m, 1.0)
        gap = np.where(chord, (u_m - second) * (second - l_m) / width, 0.0)
        tied = open_ & ~chord & (u_m > best_low)
        at = np.where(chord, second, (np.maximum(best_low, l_m) + u_m) / 2)
        gap = np.where(tied, (u_m - best_low) / 4, gap)
        return np.take_along_axis(self.inputs, m[..., None], axis=-1)[..., 0], at, gap

    def relaxation(self, lo: np.ndarray, hi: np.ndarray) -> Relaxation:
        low, high = self._windows(lo), self._windows(hi)
        stable, k = self._stable(low, high)
        m = np.argmax(high, axis=-1)
        u_m = np.take_along_axis(high, m[..., None], axis=-1)[..., 0]
        l_m = np.take_along_axis(low, m[..., None], axis=-1)[..., 0]
        others = high.copy()
        np.put_along_axis(others, m[..., None], -np.inf, axis=-1)
        second = np.minimum(others.max(axis=-1), u_m)  # U' (-inf: a window of one input, stable)
        # U' <= l_m (ties): h = z_m after all (s = 1, t = 0 below); else the chord
        chord = ~stable & (second > l_m) & (u_m > l_m)
        width = np.where(chord, u_m - l_m, 1.0)
        s = np.where(chord, np.clip((u_m - second) / width * SLOPE_UP, 0.0, 1.0), 1.0)
        base = np.where(chord, second, 0.0)
        lift = np.where(chord, s * l_m, 0.0)
        t = np.where(chord, base - lift + 8 * U64 * (np.abs(base) + np.abs(lift)) + TINY, 0.0)
        # a stable window reads input k on both sides
        upper = np.where(stable, k, m)
        one = np.ones(k.shape)
        return Relaxation(
            one,
            np.zeros(k.shape),
            np.where(stable, 1.0, s),
            t,
            np.maximum(np.abs(lo), np.abs(hi)),
            np.take_along_axis(
                np.broadcast_to(self.inputs, (*k.shape, self.inputs.shape[1])), k[..., None], -1
            )[..., 0],
            np.take_along_axis(
                np.broadcast_to(self.inputs, (*k.shape, self.inputs.shape[1])), upper[..., None], -1
            )[..., 0],
            self.sharing,
        )

    def lp_post(self, node) -> np.ndarray:
        """A max pool over the previous layer's columns (its inputs, bounded by [lo, hi]: the node's
        bounds, splits included): a stable window's output is its input's column; an open window's
        output y has a column with y >= x_i for every input of the window, and y <= s x_m + t (the
        relaxation's upper side: LP) or, with binaries d_i (one per input, sum 1), y <= x_i + (U -
        l_i) (1 - d_i), U the window's largest upper bound (MILP: exact). An input whose column is -1
        (the value 0) enters as the constant 0."""
        from scipy import sparse

        columns, rows, lo, hi, previous, pool = node.columns, node.rows, node.lo, node.hi, node.previous, self
        inputs_live = previous >= 0
        if inputs_live.any():  # the node's bounds on the pool's inputs (a split may have narrowed them)
            live = np.flatnonzero(inputs_live)
            rows.add(previous[live][:, None], np.ones((len(live), 1)), lo[live], hi[live])
        relaxation = pool.relaxation(lo, hi)
        post_lo, post_hi = pool.post_bounds(lo, hi)
        unstable = pool.open_neurons(lo, hi)
        post = previous[relaxation.lower_index].copy()  # stable: the output is its input
        # stable windows that share their largest input would give the next layer's rows that column
        # twice (HiGHS rejects a row with duplicate entries, and summing them would round): each
        # repeat gets a column of its own, equal to the input's
        stable = np.flatnonzero(~unstable & (post >= 0))
        _, first = np.unique(post[stable], return_index=True)
        repeats = np.setdiff1d(stable, stable[first])
        if len(repeats):
            source = post[repeats]
            post[repeats] = columns.add(
                lo[relaxation.lower_index[repeats]], hi[relaxation.lower_index[repeats]]
            )
            node.pair_rows(post[repeats], source, np.ones(len(repeats)), 0.0, 0.0)
        windows = np.flatnonzero(unstable)
        if not len(windows):
            return post
        y = columns.add(post_lo[windows], post_hi[windows])
        post[windows] = y
        owner, slot = np.nonzero(pool.valid[windows])
        members = pool.inputs[windows][owner, slot]
        x = previous[members]
        node.pair_rows(y[owner], x, np.ones(len(x)), 0.0, np.inf)  # y - x_i >= 0
        m = relaxation.upper_index[windows]
        node.pair_rows(y, previous[m], relaxation.s[windows], -np.inf, relaxation.t[windows])
        if node.integer:
            d = columns.add(np.zeros(len(x)), np.ones(len(x)), integer=True)
            groups = sparse.csr_array(
                (np.ones(len(x)), (owner, np.arange(len(x)))), shape=(len(windows), len(x))
            )
            rows.add_sparse(groups, d, 1.0, 1.0)  # one input of each window is its max
            member_lo = np.where(x >= 0, lo[members], 0.0)
            big = np.maximum(post_hi[windows][owner] - member_lo, 0.0)
            # y - x_i + big d_i <= big
            block = np.column_stack([np.ones(len(x)), -np.ones(len(x)), big])
            cols = np.column_stack([y[owner], np.where(x >= 0, x, y[owner]), d])
            block[:, 1] = np.where(x >= 0, -1.0, 0.0)
            rows.add(cols, block, -np.inf, big)
        return post


def scatter(values: np.ndarray, index: np.ndarray, n: int) -> np.ndarray:
    """out[..., i] = the sum of values[..., o] over o with index[..., o] = i (index per box:
    (..., n_out) broadcast over values' rows (..., R, n_out), or values (..., n_out) itself)."""
    index = np.broadcast_to(index[..., None, :] if index.ndim < values.ndim else index, values.shape)
    lead = int(np.prod(values.shape[:-1], dtype=np.int64))
    offsets = (np.arange(lead) * n).reshape(*values.shape[:-1], 1)
    flat = np.bincount((index + offsets).ravel(), weights=values.ravel(), minlength=lead * n)
    return flat.reshape(*values.shape[:-1], n)


NetActivation = Identity | Relu | Stairs | MaxPool | Clamp


def _spread(values: np.ndarray, neurons: np.ndarray, n: int) -> np.ndarray:
    """values of `neurons` placed in an array of the layer's n neurons (the others 0)."""
    full = np.zeros(n)
    full[neurons] = values
    return full
