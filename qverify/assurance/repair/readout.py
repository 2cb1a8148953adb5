"""How a repaired neuron's output follows from a quantity that is linear in its weight changes.

The MILP of `milp` cannot hold rounding or requantization tables, but every output this repair
changes is a non-decreasing function of one integer quantity P that *is* linear in the integer
weight changes (or lies between two such quantities):

    int8           P = acc = bias + sum w (x - z_in)             o = requant(acc): the threshold table
    fixed, wide    P = 2^l b + sum w x (the exact int64 sum)     o = sat(round(P / 2^l))
    fixed, per-op  P_lo <= 2^l o <= P_hi, P_lo/P_hi the exact sum with every changed product's
                   rounding error bounded (its unchanged products' errors are known exactly)

A `Readout` answers the two questions the constraints ask, exactly, with thresholds on P:
`at_least(t)`: P_lo >= at_least(t) guarantees o >= t; `at_most(t)`: P_hi <= at_most(t)
guarantees o <= t (for the exact readouts both are the table's thresholds; for per-op they follow
from 2^l o lying between the bounds and o being an integer). Comparing two changed outputs needs a
line under and over the thresholds (`slope`, `up`, `down`): at_least(t) <= slope t + up and
at_most(t) >= slope t + down over the output range, so that "o_k <= v and o_y >= v + n" is linear
in a free integer level v (`milp` uses it for pairs of repaired outputs). For fixed point per-op
the lines are the thresholds themselves; for the tables they lose at most the thresholds' distance
from a straight line (a unit or two of the accumulator, measured per table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qverify.network import MacQuant
from qverify.quant.affine import INT32_MAX, INT32_MIN, RequantMode, thresholds
from qverify.quant.fixed import FixedFormat, Rounding, round_shift

INF = math.inf


@dataclass(frozen=True, slots=True)
class Readout:
    """Thresholds on P for one neuron's output o in [low, high] (words or codes), in one of three
    forms: `steps` (a table: steps[i] = the smallest P with o >= low + 1 + i), `wide` (fixed point,
    one rounding: the threshold of t is wide[1] + 2^l t for t >= 1 and wide[0] + 2^l t for t <= 0),
    or neither (fixed point per-op: P_lo <= 2^l o <= P_hi, `is_bounds`)."""

    low: int
    high: int
    scale: float  # 2^l for fixed point; the mean distance of two thresholds for a table
    up: float
    down: float
    steps: tuple[int, ...] = ()
    wide: tuple[int, int] | None = None

    @property
    def is_bounds(self) -> bool:
        """P comes as two bounds (fixed point per-op) rather than one exact value."""
        return not self.steps and self.wide is None

    def _threshold(self, t: int) -> int:
        """The smallest P with o >= t, for low < t <= high."""
        if self.wide is not None:
            return self.wide[1 if t >= 1 else 0] + int(self.scale) * t
        return self.steps[t - self.low - 1]

    def at_least(self, t: int) -> float:
        """P_lo >= at_least(t) guarantees o >= t (-inf: always; +inf: never)."""
        if t <= self.low:
            return -INF
        if t > self.high:
            return INF
        if self.is_bounds:
            return (t - 1) * self.scale + 1
        return float(self._threshold(t))

    def at_most(self, t: int) -> float:
        """P_hi <= at_most(t) guarantees o <= t (+inf: always; -inf: never)."""
        if t >= self.high:
            return INF
        if t < self.low:
            return -INF
        if self.is_bounds:
            return (t + 1) * self.scale - 1
        return float(self._threshold(t + 1) - 1)


def per_op_readout(fmt: FixedFormat) -> Readout:
    """Fixed point, per-operation rounding: o is the accumulator word, 2^l o between P_lo and P_hi;
    the thresholds are linear already (up = 1 - 2^l, down = 2^l - 1)."""
    scale = float(fmt.scale)
    return Readout(fmt.min_q, fmt.max_q, scale, 1 - scale, scale - 1)


def _first_reaching(t: int, fmt: FixedFormat) -> int:
    """The smallest exact sum S with round(S / 2^l) >= t (before saturation)."""
    shift, scale = fmt.frac_bits, fmt.scale
    guess = t * scale - (scale // 2 if fmt.rounding is Rounding.NEAREST else 0)

    def reaches(s: int) -> bool:
        return int(round_shift(np.array([s], dtype=np.int64), shift, fmt.rounding)[0]) >= t

    while reaches(guess - 1):
        guess -= 1
    while not reaches(guess):
        guess += 1
    return guess


def wide_readout(fmt: FixedFormat) -> Readout:
    """Fixed point, wide accumulation: o = saturate(round(S / 2^l)) of the exact sum S.

    round(S / 2^l) >= t from S = T(t) on, and T(t) - 2^l t takes one value for t >= 1 and one for
    t <= 0 (nearest rounds ties away from zero: up for positive, down for negative sums)."""
    scale = fmt.scale
    positive = _first_reaching(1, fmt) - scale
    negative = _first_reaching(0, fmt)
    up = float(max(positive, negative))
    down = float(min(positive, negative) + scale - 1)
    return Readout(fmt.min_q, fmt.max_q, float(scale), up, down, wide=(negative, positive))


def int8_readout(quant: MacQuant, mode: RequantMode, channel: int, acc_lo: int, acc_hi: int) -> Readout:
    """int8: o = requant(acc) of output channel `channel` (the runtime's formula, as exact thresholds
    searched over [acc_lo, acc_hi]: the accumulators the repair can reach, within int32)."""
    acc_lo, acc_hi = max(int(acc_lo), INT32_MIN + 1), min(int(acc_hi), INT32_MAX - 1)
    channels = quant.weights.shape[0]
    table = thresholds(quant, mode, np.full(channels, acc_lo), np.full(channels, acc_hi))[channel]
    qmin = quant.output.code.qmin
    reached = int(np.count_nonzero(table <= acc_lo))  # codes that every reachable acc gives or exceeds
    low = qmin + reached
    high = qmin + int(np.count_nonzero(table <= acc_hi))
    steps = tuple(int(s) for s in table[reached : high - qmin])
    scale = (steps[-1] - steps[0]) / (len(steps) - 1) if len(steps) >= 2 else 1.0
    partial = Readout(low, high, scale, 0.0, 0.0, steps)
    up = max((partial.at_least(t) - scale * t for t in range(low + 1, high + 1)), default=0.0)
    down = min((partial.at_most(t) - scale * t for t in range(low, high)), default=0.0)
    return Readout(low, high, scale, float(up), float(down), steps)
