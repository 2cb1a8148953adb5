"""Network level: monotone step functions as the network level reads them (int8's requantization, the
lookup tables of sigmoid and tanh), and their sound linear relaxation on an interval.

A staircase maps z to a value that only grows with z: value(z) = levels[#{k : t[k] <= z}] for
sorted thresholds t (several equal thresholds make one step over several levels). Two kinds:

- int8: an int8 layer computes acc = bias + sum w (x - z_in) exactly (int32 by construction, see
  `qverify.quant.affine.accumulator_bounds`) and maps it to a code through its threshold table:
  code = qmin + #{k : t[k] <= acc} (`apply_thresholds`; the table already holds the
  requantization's rounding, the clamp to the code range and a fused ReLU's clamp at the zero
  point), one table per neuron (its channel's), the domain the integers.
- a lookup table (`lookup.lut_staircase`): sigmoid or tanh as the C computes it, one table for
  every neuron, over the implementation's words (a grid of spacing 2^-l), its float values, or
  the reals (`--semantics real`: the C's index formula read in exact arithmetic, whose thresholds
  are rationals: `lower_table` holds them rounded up and `upper_table` rounded down, so the
  staircase read through `lower_table` lies below the function and through `upper_table` above).

The relaxation is the one of a ReLU, two linear inequalities valid at every z of [L, U] the domain
holds:

    a z + c <= value(z) <= s z + t

with slopes a, s >= 0 and c, t the smallest and largest deviation of the steps from the line of
that slope. The deviations come from the table itself, never from a nominal scale: on a step
(constant value) value - m z falls as z grows (m >= 0), so its maximum over [L, U] is at the left
end of a step (L, or a threshold in (L, U]) and its minimum at a right end (U, or a threshold less
one grid step: the last domain point before it; over the reals the threshold itself, as a limit);
every threshold of the interval is a candidate, found exactly. Each side's slope is the best of a
few candidates -- the chord's, 0, the neuron's nominal slope (int8: its steps per accumulator unit
between the first and last threshold) or the tabulated function's own derivative at the ends and
the middle (lookup tables) -- by the line's distance from the steps at the two ends (for a
ReLU-like clamp at the zero point that is DeepPoly's choice of lower slope; measured on ACAS Xu
int8 4_2 phi2: 2,623 boxes with the chord alone, 1,407). The slope only has to be >= 0 for the
candidates to be complete: soundness does not depend on the choice. The float64 evaluation of the
deviations is charged (8 u of the magnitudes: the product, the difference and the final addition
each round once), so the inequalities hold exactly for the stored a, c, s, t. A neuron whose value
is constant on [L, U] gets a = s = 0 and c = t = the value.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.roundoff import TINY, U64
from qverify.quant.affine import INT32_MAX, INT32_MIN, thresholds_reached

RELAXATION_CHUNK_VALUES = 1 << 21  # (neurons x thresholds) entries of one block of `relaxation`


@dataclass(frozen=True, slots=True)
class StepWindow:
    """Per neuron, the steps of each side's table inside its interval (`Staircase._window`):
    thresholds (..., n, width), the values from each threshold on (upper side) or just below it
    (lower side), and which columns hold one of the neuron's own (`*_held`; the others repeat a
    threshold and must not be read: their values are -inf on the upper side and +inf on the
    lower, so that no maximum or minimum picks them)."""

    upper_table: np.ndarray
    after: np.ndarray
    upper_held: np.ndarray
    lower_table: np.ndarray
    before: np.ndarray
    lower_held: np.ndarray
    width: int

    def neurons(self, block: slice) -> StepWindow:
        """The window of neurons `block`."""
        return StepWindow(
            self.upper_table[..., block, :],
            self.after[..., block, :],
            self.upper_held[..., block, :],
            self.lower_table[..., block, :],
            self.before[..., block, :],
            self.lower_held[..., block, :],
            self.width,
        )


@dataclass(frozen=True, slots=True, eq=False)
class Staircase:
    """Sorted thresholds per row (rows: one per neuron, or one for every neuron), the value from
    each threshold on (`after[j, k]` = value(t[j, k])) and just below it (`before[j, k]`: at
    t - grid, or the limit from the left over the reals), and `levels[j, c]`: the value with c
    thresholds at or below z."""

    lower_table: np.ndarray  # (rows, T) float64: the lower side's thresholds (at or after the true ones)
    upper_table: np.ndarray  # (rows, T): the upper side's (at or before the true ones)
    after: np.ndarray
    before: np.ndarray
    levels: np.ndarray  # (rows, T + 1)
    grid: float  # z is a multiple of it (1: accumulators; 2^-l: fixed-point words in real units); 0: real
    magnitude: float  # the largest |value|
    nominal: np.ndarray  # per row: int8's steps per accumulator unit between the first and last threshold
    first: np.ndarray  # per row: the first and last threshold an accumulator can reach
    last: np.ndarray
    thresholds: np.ndarray | None = None  # int8: the table as int64 (per-neuron rows are integers)
    qmin: int = 0  # int8: the code range
    qmax: int = 0
    derivative: Callable[[np.ndarray], np.ndarray] | None = None  # a lookup table's function's slope

    @classmethod
    def of(cls, rows: np.ndarray, neuron_rows: np.ndarray, qmin: int, qmax: int) -> Staircase:
        """int8: the staircases of neurons whose table rows are rows[neuron_rows] (per-tensor: one
        row): code(acc) = qmin + #{k : t[k] <= acc}."""
        rows = np.asarray(rows, dtype=np.int64)
        # code(t) = qmin + #{j : t_j <= t}; code(t - 1) = qmin + #{j : t_j < t}
        after = qmin + (rows[:, None, :] <= rows[:, :, None]).sum(axis=2)
        before = qmin + (rows[:, None, :] < rows[:, :, None]).sum(axis=2)
        table = rows[neuron_rows]
        finite = (table > INT32_MIN) & (table < INT32_MAX)
        first = np.where(finite, table, INT32_MAX).min(axis=-1).astype(np.float64)
        last = np.where(finite, table, INT32_MIN).max(axis=-1).astype(np.float64)
        steps = finite.sum(axis=-1)
        nominal = np.where(steps > 0, steps / np.maximum(last - first + 1.0, 1.0), 0.0)
        levels = np.broadcast_to(
            qmin + np.arange(table.shape[1] + 1, dtype=np.float64), (len(table), table.shape[1] + 1)
        )
        exact = table.astype(np.float64)  # below 2^31: exact
        return cls(
            exact,
            exact,
            after[neuron_rows].astype(np.float64),
            before[neuron_rows].astype(np.float64),
            levels,
            1.0,
            float(max(abs(qmin), abs(qmax))),
            nominal,
            first,
            last,
            table,
            qmin,
            qmax,
        )

    @property
    def table(self) -> np.ndarray:
        """The thresholds (exact ones: both sides agree)."""
        return self.upper_table

    def _on_grid(self, z: np.ndarray, down: bool) -> np.ndarray:
        """z moved to the domain's grid (down: the last point at or below; else the first at or above)."""
        z = np.asarray(z, dtype=np.float64)
        if not self.grid:
            return z
        if self.grid == 1.0:
            return np.floor(z) if down else np.ceil(z)
        return (np.floor(z / self.grid) if down else np.ceil(z / self.grid)) * self.grid

    def grid_ends(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[lo, hi]'s first and last domain points (high at least low: an interval between two
        grid points reads as its lower end's point)."""
        low = self._on_grid(lo, down=False)
        return low, np.maximum(self._on_grid(hi, down=True), low)

    def _chord(self, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(least, most, chord): the values at the two ends of [low, high] (on the grid) and the
        slope between them (0 where the value does not change)."""
        least, most = self.values(low, "lower"), self.values(high, "upper")
        span = high - low
        return least, most, np.where(most > least, (most - least) / np.where(span > 0, span, 1.0), 0.0)

    def _count(self, z: np.ndarray, table: np.ndarray) -> np.ndarray:
        """#{k : table[j, k] <= z[..., j]} per neuron (z on the grid)."""
        if self.thresholds is not None:  # int8: integer rows per neuron
            acc = np.clip(z, INT32_MIN - 1, INT32_MAX + 1)
            return thresholds_reached(acc.astype(np.int64), self.thresholds)
        return np.searchsorted(table[0], z, side="right")

    def _value(self, count: np.ndarray) -> np.ndarray:
        if self.thresholds is not None:
            return self.qmin + count.astype(np.float64)
        return self.levels[0][count]

    def values(self, z: np.ndarray, side: str = "upper") -> np.ndarray:
        """value(z) per neuron at domain points z (..., n) (a real z reads as the grid point below
        it); the lower or upper staircase where the thresholds are rounded (`side`)."""
        z = self._on_grid(z, down=True)
        table = self.upper_table if side == "upper" else self.lower_table
        return self._value(self._count(z, table))

    def codes(self, acc: np.ndarray) -> np.ndarray:
        """int8: code(floor(acc)) per neuron, as float64 (the float64 surrogate reads a real
        accumulator as the integer below it); a lookup table's value the same way."""
        return self.values(acc)

    def split_points(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """int8, per neuron (lo, hi of shape (n,)): where to split its accumulator's interval and
        what the split saves, (at, saving). `at` is t - 1/2 for a threshold t in (lo, hi], so that
        the children (z <= t - 1/2 and z >= t - 1/2 on the integers) leave the step at t to neither;
        the middle where no threshold lies inside (a neuron whose code is constant: never chosen).
        t is the best of three candidates -- the first and last threshold inside and the one
        nearest the middle -- by the worse child's relaxation gap (`gaps`), and `saving` is the
        parent's gap less that child's (where none saves anything: the one nearest the middle,
        saving 0; halving the steps leads to one step in each child in the end). A staircase's two
        lines stand about a code apart however many steps they span, so a split at the middle saves
        little until a child holds one step; a split at the first threshold of a fused ReLU's
        staircase (the kink: constant below, steps above) saves most of it at once
        (digits32rgb-conv's dense layer)."""
        low, high = self.grid_ends(lo, hi)
        middle = (low + high) / 2
        table = self.thresholds.astype(np.float64)  # (int8: one row per neuron)
        inside = (table > low[:, None]) & (table <= high[:, None])
        found = inside.any(axis=-1)
        nearest = np.take_along_axis(
            table, np.where(inside, np.abs(table - middle[:, None]), np.inf).argmin(axis=-1)[:, None], axis=-1
        )[:, 0]
        candidates = [
            np.where(inside, table, np.inf).min(axis=-1),
            np.where(inside, table, -np.inf).max(axis=-1),
            nearest,
        ]
        thresholds = [np.where(found, threshold, middle) for threshold in candidates]
        # the parent's gap and each candidate's two children's, as one batch of intervals
        starts = np.stack([low, *(low for _ in thresholds), *(np.minimum(t, high) for t in thresholds)])
        ends = np.stack([high, *(np.maximum(t - 1, low) for t in thresholds), *(high for _ in thresholds)])
        gaps = self.gaps(starts, ends)
        parent = gaps[0]
        best_at, best_worse = np.where(found, nearest - 0.5, middle), parent
        for index, threshold in enumerate(thresholds):
            worse = np.maximum(gaps[1 + index], gaps[1 + len(thresholds) + index])
            better = found & (worse < best_worse)
            best_at = np.where(better, threshold - 0.5, best_at)
            best_worse = np.where(better, worse, best_worse)
        return best_at, np.where(found, np.maximum(parent - best_worse, 0.0), 0.0)

    def gaps(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per neuron, how far apart the relaxation's two lines stand on [lo, hi] at its wider end
        (arrays (..., n): a batch of intervals per neuron)."""
        return line_gap(*self.relaxation(lo, hi), lo, hi)

    def code_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The exact value range over the domain's points of [lo, hi] (monotone: its two ends)."""
        return self.values(self._on_grid(lo, down=False), "lower"), self.values(hi, "upper")

    def open(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Neurons whose value is not constant on [lo, hi]: the relaxation is not exact there."""
        code_lo, code_hi = self.code_bounds(lo, hi)
        return code_lo < code_hi

    def _candidates(self, low, high, chord) -> list[np.ndarray]:
        """Slopes to try: the chord, 0, and the nominal slope (int8) or the function's derivative at
        the ends, the middle and the smaller end (lookup tables)."""
        zero = np.zeros_like(chord)
        if self.derivative is None:
            return [chord, zero, np.broadcast_to(self.nominal, chord.shape)]
        ends = [self.derivative(low), self.derivative(high), self.derivative((low + high) / 2)]
        return [chord, zero, *ends, np.minimum(ends[0], ends[1])]

    def relaxation(
        self, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(a, c, s, t): a z + c <= value(z) <= s z + t at every domain point z of [lo, hi] (module
        docstring); arrays (..., n). Each side's slope is the best of `_candidates`, all >= 0, by
        the line's vertical distance from the steps at the interval's two ends, which for a ReLU
        is DeepPoly's choice of lower slope. Only each neuron's thresholds inside its interval
        are read (`_window`), a block of neurons at a time (each neuron's lines are its own), so
        that the (..., block, thresholds) temporaries stay below `RELAXATION_CHUNK_VALUES`
        (digits28-maxpool int8: 23,328 neurons x 255 thresholds, 48 MB an array, were most of the
        peak after the attack's)."""
        low, high = self.grid_ends(lo, hi)
        window = self._window(low, high)
        n = low.shape[-1]
        per_neuron = int(np.prod(low.shape[:-1], dtype=np.int64)) * window.width
        block = max(1, RELAXATION_CHUNK_VALUES // max(per_neuron, 1))
        parts = [
            self._neurons(slice(i, i + block), n)._relaxation(
                low[..., i : i + block], high[..., i : i + block], window.neurons(slice(i, i + block))
            )
            for i in range(0, n, block)
        ]
        return _joined(parts)

    def _window(self, low: np.ndarray, high: np.ndarray) -> StepWindow:
        """Per neuron, the thresholds in (low, high] of each side's table with their values (low,
        high on the grid, (..., n)): the only steps the deviations read. The tables are sorted, so
        they are one run of columns per neuron, at most `width` long. A requantization's 255
        thresholds shrink to the 2-6 a hidden neuron's interval spans on cifar10-resnet2b int8 (eps
        0.002), and the per-row work with them. The runs are found a block of neurons at a time
        (`RELAXATION_CHUNK_VALUES`: a batch of 64 boxes of digits28-maxpool int8 would compare 380
        million thresholds at once)."""
        n, thresholds = low.shape[-1], self.upper_table.shape[-1]
        shape = (*low.shape, thresholds)
        block = max(
            1, RELAXATION_CHUNK_VALUES // max(int(np.prod(shape[:-2], dtype=np.int64)) * thresholds, 1)
        )
        sides = []
        for table, values in ((self.upper_table, self.after), (self.lower_table, self.before)):
            first = np.empty(low.shape, dtype=np.int64)
            count = np.empty(low.shape, dtype=np.int64)
            for i in range(0, n, block):
                rows = table if table.shape[0] == 1 else table[i : i + block]
                first[..., i : i + block] = (rows <= low[..., i : i + block, None]).sum(axis=-1)
                count[..., i : i + block] = (rows <= high[..., i : i + block, None]).sum(axis=-1)
            sides.append(
                (np.broadcast_to(table, shape), np.broadcast_to(values, shape), first, count - first)
            )
        width = max(1, max(int(count.max(initial=0)) for _, _, _, count in sides))
        columns = np.arange(width)
        windowed = []
        for (table, values, first, count), absent in zip(sides, (-np.inf, np.inf)):
            index = np.minimum(first[..., None] + columns, thresholds - 1)
            held = columns < count[..., None]
            windowed.append(np.take_along_axis(table, index, axis=-1))
            windowed.append(np.where(held, np.take_along_axis(values, index, axis=-1), absent))
            windowed.append(held)
        return StepWindow(*windowed, width)

    def _neurons(self, block: slice, n: int) -> Staircase:
        """The staircases of neurons `block` of n (per-neuron rows sliced; one shared row kept)."""
        changes = {}
        for name in (
            "lower_table",
            "upper_table",
            "after",
            "before",
            "levels",
            "nominal",
            "first",
            "last",
            "thresholds",
        ):
            value = getattr(self, name)
            if value is not None and np.ndim(value) > 0 and value.shape[0] == n:
                changes[name] = value[block]
        return dataclasses.replace(self, **changes)

    def _relaxation(
        self, low: np.ndarray, high: np.ndarray, window: StepWindow
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`relaxation` on one block of neurons (low, high on the grid)."""
        code_lo, code_hi = self.values(low, "upper"), self.values(high, "lower")
        least, most, chord = self._chord(low, high)
        lower_side = upper_side = None
        for slope in self._candidates(low, high, chord):
            slope = np.maximum(slope, 0.0)
            lower, upper = self._deviations(slope, low, high, code_lo, code_hi, window)
            lower_gap = least + most - slope * (low + high) - 2 * lower
            upper_gap = slope * (low + high) + 2 * upper - least - most
            if lower_side is None or upper_side is None:
                lower_side, upper_side = (slope, lower, lower_gap), (slope, upper, upper_gap)
                continue
            better = lower_gap < lower_side[2]
            lower_side = tuple(
                np.where(better, new, old) for new, old in zip((slope, lower, lower_gap), lower_side)
            )
            better = upper_gap < upper_side[2]
            upper_side = tuple(
                np.where(better, new, old) for new, old in zip((slope, upper, upper_gap), upper_side)
            )
        assert lower_side is not None and upper_side is not None
        a, lower, _ = lower_side
        s, upper, _ = upper_side
        reach = np.maximum(np.abs(low), np.abs(high) + self.grid)
        flat = least == most
        c = np.where(flat, least, lower - (8 * U64 * (self.magnitude + a * reach) + TINY))
        t = np.where(flat, most, upper + (8 * U64 * (self.magnitude + s * reach) + TINY))
        return np.where(flat, 0.0, a), c, np.where(flat, 0.0, s), t

    def _deviations(
        self, slope, low, high, code_lo, code_hi, window: StepWindow
    ) -> tuple[np.ndarray, np.ndarray]:
        """min and max of value(z) - slope z over the domain points of [low, high] (slope >= 0, in
        float64: the caller charges the rounding): the right and left ends of the steps inside
        (`window`) and the interval's ends (`code_lo`: the upper staircase's value at low,
        `code_hi`: the lower one's at high)."""
        m = slope[..., None]
        upper = (window.after - m * window.upper_table).max(axis=-1, where=window.upper_held, initial=-np.inf)
        upper = np.maximum(upper, code_lo - slope * low)
        ends = window.lower_table - self.grid
        lower = (window.before - m * ends).min(axis=-1, where=window.lower_held, initial=np.inf)
        lower = np.minimum(lower, code_hi - slope * high)
        return lower, upper

    def slope_scale(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per neuron, the unit of `sides`' optimised slopes on [lo, hi] (..., n): the largest of the
        chord's slope and the nominal one (int8) or the function's derivative at the ends and the
        middle (lookup tables), so that slopes from 0 to twice it cover every useful line."""
        low, high = self.grid_ends(lo, hi)
        _, _, chord = self._chord(low, high)
        return np.maximum.reduce([np.maximum(c, 0.0) for c in self._candidates(low, high, chord)])

    def sides(
        self, lower: np.ndarray, upper: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Lines of given slopes per row: (c, t, zeta, xi) with lower z + c <= value(z) <= upper z + t
        at every domain point z of [lo, hi], for slopes (..., R, n) >= 0 and bounds (..., n) (one set
        of slopes per row of a back-substitution: alpha-CROWN's, for staircases). c and t are the
        steps' exact extreme deviations from the lines (`_deviations`), their float64 evaluation
        charged as in `relaxation` (so the lines hold for the stored numbers whatever the slope);
        zeta and xi are the points where the deviation is least and largest (the intercepts'
        derivatives in the slope are -zeta and -xi: the optimiser's gradient). `on(lo, hi)` holds
        what does not depend on the slopes, for many calls on one interval."""
        return self.on(lo, hi).sides(lower, upper)

    def on(self, lo: np.ndarray, hi: np.ndarray) -> SidesOn:
        """What `sides` reads on [lo, hi] whatever the slopes: the interval's grid ends, the values
        there and the thresholds inside (`_window`). An optimisation of the slopes on one node
        reads them at every step: found once, they are most of a step's work (digits32rgb-conv
        int8, a node split at a requantization's threshold: 25 of the 40 s spent on lines were
        these, at every step)."""
        low, high = self.grid_ends(lo, hi)
        return SidesOn(
            self, low, high, self.values(low, "upper"), self.values(high, "lower"), self._window(low, high)
        )

    def _sides(self, lower, upper, low, high, code_lo, code_hi, window: StepWindow):
        """`sides` on one block of neurons (low, high on the grid, the values at the ends given)."""
        # per row: insert the rows' axis into the neurons' arrays
        low_r, high_r = low[..., None, :], high[..., None, :]
        tops, ends = window.upper_table[..., None, :, :], window.lower_table[..., None, :, :] - self.grid
        # (a column the neuron does not hold has the value -inf, +inf below: never the extreme)
        above = window.after[..., None, :, :] - upper[..., None] * tops
        best = np.argmax(above, axis=-1)[..., None]
        top = np.take_along_axis(above, best, axis=-1)[..., 0]
        start = code_lo[..., None, :] - upper * low_r
        xi = np.where(
            start >= top, low_r, np.take_along_axis(np.broadcast_to(tops, above.shape), best, -1)[..., 0]
        )
        top = np.maximum(top, start)
        below = window.before[..., None, :, :] - lower[..., None] * ends
        worst = np.argmin(below, axis=-1)[..., None]
        bottom = np.take_along_axis(below, worst, axis=-1)[..., 0]
        finish = code_hi[..., None, :] - lower * high_r
        zeta = np.where(
            finish <= bottom,
            high_r,
            np.take_along_axis(np.broadcast_to(ends, below.shape), worst, -1)[..., 0],
        )
        bottom = np.minimum(bottom, finish)
        reach = np.maximum(np.abs(low_r), np.abs(high_r) + self.grid)
        c = bottom - (8 * U64 * (self.magnitude + lower * reach) + TINY)
        t = top + (8 * U64 * (self.magnitude + upper * reach) + TINY)
        return c, t, zeta, xi

    def hull_lines(self, lo: np.ndarray, hi: np.ndarray, neurons: np.ndarray):
        """int8, for the LP: more lines of each listed neuron's staircase on [lo, hi] (one node's
        arrays (n,)) than `relaxation`'s two, the edges of its convex hull there, as rows
        (neuron, slope, c, t) with slope z + c <= value(z) on the lower side's rows and
        value(z) <= slope z + t on the upper side's (`upper`). The hull's points are the steps'
        left ends (upper side) and right ends (lower side) with the interval's two ends; its edges'
        slopes are only candidates: each intercept is the exact extreme deviation of the steps from
        the line of that slope (`_deviations`, rounding charged as in `relaxation`), so every line
        is sound whatever its slope (>= 0). Where the range spans a few steps the hull is much
        tighter than two lines (img00 eps 0.004 of digits32rgb-conv: the LP's bound -0.114 with the
        two lines, -0.035 with the hull). Returns arrays (owner, slope, offset, upper)."""
        low, high = self.grid_ends(lo, hi)
        code_lo, code_hi = self.values(low), self.values(high)
        owners, slopes, uppers = [], [], []
        for j in neurons:
            inside = (self.upper_table[j] > low[j]) & (self.upper_table[j] <= high[j])
            steps = self.upper_table[j][inside]
            for upper, xs, ys in (
                (True, [low[j], *steps, high[j]], [code_lo[j], *self.after[j][inside], code_hi[j]]),
                (
                    False,
                    [low[j], *(steps - self.grid), high[j]],
                    [code_lo[j], *self.before[j][inside], code_hi[j]],
                ),
            ):
                for slope in _hull_slopes(np.array(xs), np.array(ys), upper):
                    owners.append(j)
                    slopes.append(max(slope, 0.0))
                    uppers.append(upper)
        owner = np.array(owners, dtype=np.int64)
        slope = np.array(slopes, dtype=np.float64)
        upper = np.array(uppers, dtype=bool)
        if not len(owner):
            return owner, slope, np.zeros(0), upper
        table = self.upper_table[owner]
        l, h = low[owner], high[owner]
        inside = (table > l[:, None]) & (table <= h[:, None])
        m = slope[:, None]
        above = np.where(inside, self.after[owner] - m * table, -np.inf).max(axis=-1)
        above = np.maximum(above, code_lo[owner] - slope * l)
        below = np.where(inside, self.before[owner] - m * (table - self.grid), np.inf).min(axis=-1)
        below = np.minimum(below, code_hi[owner] - slope * h)
        reach = np.maximum(np.abs(l), np.abs(h) + self.grid)
        charge = 8 * U64 * (self.magnitude + slope * reach) + TINY
        offset = np.where(upper, above + charge, below - charge)
        return owner, slope, offset, upper

    def gradient(self, acc: np.ndarray) -> np.ndarray:
        """A straight-through slope for the float64 surrogate's gradient (attack only, not sound):
        the tabulated function's derivative, or int8's nominal slope between the first and last
        threshold (0 where the code is clamped)."""
        if self.derivative is not None:
            return self.derivative(acc)
        return np.where((acc >= self.first - 1) & (acc <= self.last), self.nominal, 0.0)


def line_gap(a, c, s, t, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How far apart the lines a z + c and s z + t stand on [lo, hi], at its wider end."""
    return np.maximum((s - a) * lo + (t - c), (s - a) * hi + (t - c))


def _joined(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Four arrays per block of neurons, joined along the neurons' axis (`relaxation`, `sides`)."""
    if len(parts) == 1:
        return parts[0]  # type: ignore[return-value]
    return tuple(np.concatenate([part[i] for part in parts], axis=-1) for i in range(4))  # type: ignore[return-value]


@dataclass(frozen=True, slots=True, eq=False)
class SidesOn:
    """A staircase on fixed intervals (`Staircase.on`): its lines for any slopes, `sides`. Only the
    thresholds inside each neuron's interval are read (`_window`: rows x neurons x 255 thresholds
    was 41 of the 49 s cifar10-resnet2b int8's root spent in alpha-CROWN), a block of neurons at a
    time within `RELAXATION_CHUNK_VALUES`."""

    stairs: Staircase
    low: np.ndarray  # the intervals' ends on the grid (..., n)
    high: np.ndarray
    code_lo: np.ndarray  # the upper staircase's value at low, the lower one's at high
    code_hi: np.ndarray
    window: StepWindow

    def sides(
        self, lower: np.ndarray, upper: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`Staircase.sides` for slopes (..., R, n) on these intervals."""
        n = self.low.shape[-1]
        rows = int(np.prod(lower.shape[:-1], dtype=np.int64))
        block = max(1, RELAXATION_CHUNK_VALUES // max(rows * self.window.width, 1))
        parts = [
            self.stairs._sides(
                lower[..., i : i + block],
                upper[..., i : i + block],
                self.low[..., i : i + block],
                self.high[..., i : i + block],
                self.code_lo[..., i : i + block],
                self.code_hi[..., i : i + block],
                self.window.neurons(slice(i, i + block)),
            )
            for i in range(0, n, block)
        ]
        return _joined(parts)


def _hull_slopes(xs: np.ndarray, ys: np.ndarray, upper: bool) -> list[float]:
    """The slopes of the upper (concave) or lower (convex) hull's edges of the points (xs sorted
    ascending; a monotone chain)."""
    hull: list[tuple[float, float]] = []
    for x, y in zip(xs.tolist(), ys.tolist()):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            cross = (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1)
            if (cross >= 0) if upper else (cross <= 0):
                hull.pop()
            else:
                break
        hull.append((x, y))
    return [(b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(hull) if b[0] > a[0]]
