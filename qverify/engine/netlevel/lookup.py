"""Network level: the lookup tables of sigmoid and tanh as the monotone staircases the network level
relaxes (`staircase.Staircase`, int8's code path), with the table's own values.

The C never computes sigmoid or tanh: it indexes a table (`qverify.quant.lut`, the `lut` block of
the templates). In every arithmetic that function of z is a monotone step function -- the index
formula is monotone in z, the table's samples of an increasing function are rounded monotonically,
and the saturation values lie beyond the ends -- so its thresholds are where its value rises:

- fixed point: over the words, `lut_fixed` (the simulator's twin of the C); each threshold is the
  first word whose value reaches the next level, found by bisection over the word range with
  `lut_fixed` itself, so the staircase is the C's function exactly (domain grid: one word);
- IEEE float: over the values of the C type, `lut_float`, bisected over the type's ordinals
  (`engine.floatgrid`); between two values of the type the staircase keeps the lower one's value;
- real arithmetic (`--semantics real`): the C's formula read in exact arithmetic, index =
  floor((z + a) scale + 1/2) inside [-a, a] (a and scale the C's constants, exact rationals; for
  a fixed-point table scale = (N - 1) / (2 a), which its integer formula computes), sat_lo below
  -a, sat_hi above a. The thresholds are rationals: the lower side reads them rounded up to
  float64, the upper side rounded down (`Staircase.lower_table`, `upper_table`).

`derivative` gives the relaxation's slope candidates (and the attack's gradient): the tabulated
function's own derivative (sigmoid: f (1 - f), tanh: 1 - f^2) in the network's units. Slopes only
steer the choice of lines; the intercepts come from the table, so no error bound of the table
against the function enters (qverify's departure from relaxing sigmoid itself: the C computes the
table, and a relaxation of the function would need the table's error on top).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from qverify.engine import floatgrid
from qverify.engine.netlevel.staircase import Staircase
from qverify.network import Activation
from qverify.quant import FixedFormat, FloatFormat, QuantizedNetwork
from qverify.quant.lut import Lut, lut_fixed, lut_float

_BITS = {np.float16: 16, np.float32: 32, np.float64: 64}


def monotone(lut: Lut) -> bool:
    """Is the table non-decreasing, with its saturation values beyond its ends? (Tables of sigmoid
    and tanh are; a staircase needs it.)"""
    table = np.asarray(lut.table, dtype=np.float64)
    return bool(np.all(np.diff(table) >= 0) and lut.sat_lo <= table[0] and table[-1] <= lut.sat_hi)


def lut_staircase(qnet: QuantizedNetwork, activation: Activation, real: bool) -> Staircase:
    """The staircase of the network's table for `activation`, in normalised real units: the
    implementation's (`real` False) or the C's formula in exact arithmetic (module docstring)."""
    lut = qnet.lut_for(activation)
    number = qnet.number
    if real:
        lower, upper, levels = _real_thresholds(lut, number)
        return _staircase(lower, upper, levels, 0.0, _derivative(activation))
    if isinstance(number, FixedFormat):
        # outside [-qa, qa] the table saturates: the rises lie in [-qa - 1, qa + 1]
        first, last = max(number.min_q, -lut.half_range_q - 1), min(number.max_q, lut.half_range_q + 1)
        candidates = np.concatenate([np.asarray(lut.table, dtype=np.int64), [lut.sat_lo, lut.sat_hi]])
        found, levels = _bisected(lambda words: lut_fixed(lut, words), first, last, candidates)
        unit = 1.0 / number.scale
        thresholds = found * unit
        return _staircase(thresholds, thresholds, levels * unit, unit, _derivative(activation))
    assert isinstance(number, FloatFormat)
    dtype = number.dtype
    bits = _BITS[dtype]
    reach = np.array([-(lut.half_range + 1.0), lut.half_range + 1.0], dtype=dtype).astype(np.float64)
    first, last = (int(v) for v in floatgrid.ordinal(reach, bits))

    def by_ordinal(ordinals: np.ndarray) -> np.ndarray:
        return lut_float(lut, floatgrid.from_ordinal(ordinals, bits), number).astype(np.float64)

    candidates = np.concatenate(
        [np.asarray(lut.table, dtype=dtype), np.array([lut.sat_lo, lut.sat_hi], dtype=dtype)]
    )
    found, levels = _bisected(by_ordinal, first, last, candidates.astype(np.float64))
    thresholds = floatgrid.from_ordinal(found, bits)
    return _staircase(thresholds, thresholds, levels, 0.0, _derivative(activation))


def _bisected(function, first: int, last: int, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds (int64), levels) of a non-decreasing function over the integers [first, last] (words or
    ordinals) whose values lie among `candidates`: levels[0] = function(first), thresholds[k] the
    first point whose value reaches levels[k + 1] (each value the function takes after the first),
    by bisection for the first point at or above each candidate."""
    start = float(function(np.array([first], dtype=np.int64))[0])
    top = float(function(np.array([last], dtype=np.int64))[0])
    wanted = np.unique(np.asarray(candidates, dtype=np.float64))
    wanted = wanted[(wanted > start) & (wanted <= top)]
    lo = np.full(len(wanted), first, dtype=np.int64)  # function(lo) < wanted <= function(hi)
    hi = np.full(len(wanted), last, dtype=np.int64)
    # (double ordinals span more than int64: hi - lo overflowed on [-9, 9] and wrapped, and the
    # staircase of a double table came out flat -- a wrong SAFE; no difference is formed here)
    while np.any(hi - 1 > lo):
        middle = lo // 2 + hi // 2 + ((lo & 1) + (hi & 1)) // 2
        above = function(middle) >= wanted
        hi = np.where(above, middle, hi)
        lo = np.where(above, lo, middle)
    at = np.unique(hi)  # several candidates the function jumps over share their point
    values = function(at)
    # the points stay int64: a double's ordinal is not exact in float64 (thresholds moved by ~1,000 ulps)
    return at, np.concatenate([[start], values]).astype(np.float64)


def _real_thresholds(lut: Lut, number) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The C's table function in exact arithmetic: (thresholds rounded up, rounded down, levels)."""
    if isinstance(number, FixedFormat):
        unit = Fraction(1, number.scale)
        a = lut.half_range_q * unit
        scale = Fraction(lut.n_entries - 1) / (2 * a)
        table = [int(v) * unit for v in lut.table]
        sat_lo, sat_hi = int(lut.sat_lo) * unit, int(lut.sat_hi) * unit
    else:
        dtype = number.dtype
        a = Fraction(float(dtype(lut.half_range)))
        scale = Fraction(float(dtype(lut.float_scale)))
        table = [Fraction(float(v)) for v in np.asarray(lut.table, dtype=dtype)]
        sat_lo, sat_hi = Fraction(float(dtype(lut.sat_lo))), Fraction(float(dtype(lut.sat_hi)))
    # (threshold, level from it on, strict: reached just after the threshold)
    steps = [(-a, table[0], False)]
    for index in range(1, lut.n_entries):
        at = (index - Fraction(1, 2)) / scale - a
        if at > a:
            break
        steps.append((at, table[index], False))
    steps.append((a, sat_hi, True))
    thresholds_up, thresholds_down, levels = [], [], [sat_lo]
    for at, level, strict in steps:
        if level <= levels[-1]:
            continue
        down, up = _outward(at)
        if strict:  # z > a: the lower side starts after a
            up = float(np.nextafter(up, np.inf))
        thresholds_up.append(up)
        thresholds_down.append(down)
        levels.append(level)
    return (
        np.array(thresholds_up),
        np.array(thresholds_down),
        np.array([_nearest_exact(v) for v in levels]),
    )


def _outward(value: Fraction) -> tuple[float, float]:
    """float64 values at or below and at or above a rational."""
    nearest = float(value)
    down = nearest if Fraction(nearest) <= value else float(np.nextafter(nearest, -np.inf))
    up = nearest if Fraction(nearest) >= value else float(np.nextafter(nearest, np.inf))
    return down, up


def _nearest_exact(value: Fraction) -> float:
    """A table value as float64 (words * 2^-l and values of a float type are exact)."""
    converted = float(value)
    assert Fraction(converted) == value
    return converted


def _staircase(
    lower: np.ndarray, upper: np.ndarray, levels: np.ndarray, grid: float, derivative
) -> Staircase:
    """One row shared by every neuron (broadcast over the layer)."""
    after = levels[1:]
    before = levels[:-1]
    empty = np.zeros(1)
    return Staircase(
        lower[None, :],
        upper[None, :],
        after[None, :],
        before[None, :],
        levels[None, :],
        grid,
        float(np.max(np.abs(levels))),
        empty,
        empty,
        empty,
        derivative=derivative,
    )


def _derivative(activation: Activation):
    """The tabulated function's slope at z (normalised units: a fixed-point table's inputs and
    values share the scale, so the slope is the function's)."""
    if activation is Activation.SIGMOID:

        def sigmoid_slope(z: np.ndarray) -> np.ndarray:
            f = 1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))
            return f * (1.0 - f)

        return sigmoid_slope

    def tanh_slope(z: np.ndarray) -> np.ndarray:
        return 1.0 - np.tanh(z) ** 2

    return tanh_slope
