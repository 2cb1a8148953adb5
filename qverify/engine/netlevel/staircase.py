"""Network level: int8 requantization as the network level reads it: a monotone staircase per neuron, and its
sound linear relaxation on an accumulator interval.

An int8 layer computes acc = bias + sum w (x - z_in) exactly (int32 by construction, see
`qverify.quant.affine.accumulator_bounds`) and maps it to a code through its threshold table:
code = qmin + #{k : t[k] <= acc} (`apply_thresholds`; the table already holds the requantization's
rounding, the clamp to the code range and a fused ReLU's clamp at the zero point). The network
level relaxes that function the way it relaxes a ReLU, as two linear inequalities valid at every
integer accumulator of the neuron's interval [L, U]:

    a acc + c <= code(acc) <= s acc + t

with slopes a, s >= 0 and c, t the smallest and largest deviation of the steps from the line of
that slope. The deviations come from the table itself, never from the nominal scale: on a step
(constant code) code - m acc falls as acc grows (m >= 0), so its maximum over [L, U] is at the left
end of a step (L, or a threshold in (L, U]) and its minimum at a right end (U, or a threshold minus
one); every threshold of the interval is a candidate, found exactly. Each side's slope is the best
of the chord's ((code(U) - code(L)) / (U - L)), 0 and the neuron's nominal slope, by the line's
distance from the steps at the two ends (for a ReLU-like clamp at the zero point that is DeepPoly's
choice of lower slope; measured on ACAS Xu int8 4_2 phi2: 2,623 boxes with the chord alone, 1,407).
The slope only has to be >= 0 for the candidates to be complete: soundness does not depend on the
choice. The float64 evaluation of the deviations is charged (8 u of the magnitudes: the product,
the difference and the final addition each round once), so the inequalities hold exactly for the
stored a, c, s, t. A neuron whose code is constant on [L, U] gets a = s = 0 and c = t = the code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.roundoff import TINY, U64
from qverify.quant.affine import INT32_MAX, INT32_MIN, thresholds_reached


@dataclass(frozen=True, slots=True, eq=False)
class Staircase:
    """Per neuron, the requantization table (n, 255) of int64 thresholds, sorted along each row,
    and the codes at the thresholds: `after[j, k]` = code(t[j, k]), `before[j, k]` =
    code(t[j, k] - 1) (several equal thresholds make one step of several codes)."""

    table: np.ndarray  # float64 (exact: int32 values)
    thresholds: np.ndarray  # the same, int64
    after: np.ndarray
    before: np.ndarray
    qmin: int
    qmax: int
    nominal: np.ndarray  # per neuron: steps per accumulator unit between the first and last threshold
    first: np.ndarray  # per neuron: the first and last threshold an accumulator can reach
    last: np.ndarray

    @classmethod
    def of(cls, rows: np.ndarray, neuron_rows: np.ndarray, qmin: int, qmax: int) -> Staircase:
        """The staircases of neurons whose table rows are rows[neuron_rows] (per-tensor: one row)."""
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
        return cls(
            table.astype(np.float64),  # below 2^31: exact
            table,
            after[neuron_rows].astype(np.float64),
            before[neuron_rows].astype(np.float64),
            qmin,
            qmax,
            nominal,
            first,
            last,
        )

    def codes(self, acc: np.ndarray) -> np.ndarray:
        """code(floor(acc)) per neuron, as float64 (acc (..., n): integers, or reals for the
        float64 surrogate, where a real value reads as the integer below it)."""
        acc = np.clip(np.floor(np.asarray(acc, dtype=np.float64)), INT32_MIN - 1, INT32_MAX + 1)
        return self.qmin + thresholds_reached(acc.astype(np.int64), self.thresholds).astype(np.float64)

    def code_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The exact code range of integer accumulators in [lo, hi] (monotone: its two ends)."""
        return self.codes(np.ceil(lo)), self.codes(hi)

    def open(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Neurons whose code is not constant on [lo, hi]: the relaxation is not exact there."""
        code_lo, code_hi = self.code_bounds(lo, hi)
        return code_lo < code_hi

    def relaxation(
        self, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(a, c, s, t): a acc + c <= code(acc) <= s acc + t at every integer acc in [lo, hi]
        (module docstring); arrays (..., n). Each side's slope is the best of three, all >= 0: the
        chord's, 0 (the clamped code's) and the neuron's nominal slope (its steps per accumulator
        unit between the first and last threshold) -- best by the line's vertical distance from the
        steps at the interval's two ends, which for a ReLU is DeepPoly's choice of lower slope."""
        low = np.ceil(np.asarray(lo, dtype=np.float64))
        high = np.maximum(np.floor(np.asarray(hi, dtype=np.float64)), low)
        code_lo, code_hi = self.codes(low), self.codes(high)
        span = high - low
        chord = np.where(code_hi > code_lo, (code_hi - code_lo) / np.where(span > 0, span, 1.0), 0.0)
        inside = (self.table > low[..., None]) & (self.table <= high[..., None])
        lower_side = upper_side = None
        for slope in (chord, np.zeros_like(chord), np.broadcast_to(self.nominal, chord.shape)):
            lower, upper = self._deviations(slope, low, high, code_lo, code_hi, inside)
            lower_gap = code_lo + code_hi - slope * (low + high) - 2 * lower
            upper_gap = slope * (low + high) + 2 * upper - code_lo - code_hi
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
        reach = np.maximum(np.abs(low), np.abs(high) + 1.0)
        base = max(abs(self.qmin), abs(self.qmax))
        flat = code_lo == code_hi
        c = np.where(flat, code_lo, lower - (8 * U64 * (base + a * reach) + TINY))
        t = np.where(flat, code_lo, upper + (8 * U64 * (base + s * reach) + TINY))
        return np.where(flat, 0.0, a), c, np.where(flat, 0.0, s), t

    def _deviations(self, slope, low, high, code_lo, code_hi, inside) -> tuple[np.ndarray, np.ndarray]:
        """min and max of code(acc) - slope acc over the integers of [low, high] (slope >= 0, in
        float64: the caller charges the rounding): the right and left ends of the steps."""
        m = slope[..., None]
        upper = np.where(inside, self.after - m * self.table, -np.inf).max(axis=-1)
        upper = np.maximum(upper, code_lo - slope * low)
        lower = np.where(inside, self.before - m * (self.table - 1.0), np.inf).min(axis=-1)
        lower = np.minimum(lower, code_hi - slope * high)
        return lower, upper

    def gradient(self, acc: np.ndarray) -> np.ndarray:
        """A straight-through slope for the float64 surrogate's gradient (attack only, not sound):
        the nominal slope between the first and last threshold, 0 where the code is clamped."""
        return np.where((acc >= self.first - 1) & (acc <= self.last), self.nominal, 0.0)
