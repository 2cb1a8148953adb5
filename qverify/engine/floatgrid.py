"""Shared by both paths: the values of an IEEE type as consecutive integers: counting, enumerating and
bisecting float boxes (shared: the scalar path's splitting and the network level's `points` number float
boxes alike).

A float input box [lo, hi] holds finitely many values of the input's type. Reading the bit pattern
of a value as a sign-magnitude integer and negating it for negative values gives its *ordinal*:
a strictly increasing map from the type's values (finite and infinite, NaN excluded) to int64
with consecutive values at consecutive integers. -0.0 and +0.0 share the ordinal 0: they compare
equal and a box cannot separate them, so a box holds one "zero" (the engine's probe runs both, see
`Strategy._signed_zeros`). So [lo, hi] holds ordinal(hi) - ordinal(lo) + 1 values, the value after
v is from_ordinal(ordinal(v) + 1), and a box splits into [lo, m] and [next(m), hi] with no value
lost or shared -- the way an integer box splits into [lo, m] and [m + 1, hi].
"""

from __future__ import annotations

import numpy as np

# per width in bits: the unsigned integer type of the same width (the bit pattern) and the float
_TYPES = {16: (np.uint16, np.float16), 32: (np.uint32, np.float32), 64: (np.uint64, np.float64)}


def ordinal(values: np.ndarray, bits: int) -> np.ndarray:
    """The ordinals (int64) of values of the float type with `bits` bits (given as float64 arrays
    holding values of that type; NaN is not allowed)."""
    unsigned, floating = _TYPES[bits]
    pattern = np.asarray(values, dtype=np.float64).astype(floating).view(unsigned).astype(np.uint64)
    sign = np.uint64(1) << np.uint64(bits - 1)
    magnitude = (pattern & (sign - np.uint64(1))).astype(np.int64)
    return np.where((pattern & sign) != 0, -magnitude, magnitude)


def from_ordinal(ordinals: np.ndarray, bits: int) -> np.ndarray:
    """The values (as float64) at the given ordinals; ordinal 0 is +0.0."""
    unsigned, floating = _TYPES[bits]
    ordinals = np.asarray(ordinals, dtype=np.int64)
    sign = np.uint64(1) << np.uint64(bits - 1)
    magnitude = np.abs(ordinals).astype(np.uint64)
    pattern = np.where(ordinals < 0, magnitude | sign, magnitude).astype(unsigned)
    return pattern.view(floating).astype(np.float64)


def count(lo: np.ndarray, hi: np.ndarray, bits: int) -> np.ndarray:
    """How many values of the type lie in [lo, hi] (both ends values of the type; 0 if lo > hi),
    the two zeros counted once. float64 (exact up to 2^53, where it decides whether a box is small):
    a double box such as [-2, 2] spans 2^63 ordinals, which an int64 difference overflows."""
    first, last = ordinal(lo, bits), ordinal(hi, bits)
    spread = (last.view(np.uint64) - first.view(np.uint64)).astype(np.float64)  # exact modulo 2^64
    return np.where(last >= first, spread + 1.0, 0.0)


def values(lo: float, hi: float, bits: int) -> np.ndarray:
    """Every value of the type in [lo, hi], ascending (float64)."""
    return from_ordinal(np.arange(ordinal(lo, bits), ordinal(hi, bits) + 1, dtype=np.int64), bits)


def split_point(lo: np.ndarray, hi: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Per box [lo, hi] holding at least two values: m, the last value of the lower half, and the
    first value of the upper half (the value after m). m is the value of the type at or below the
    middle of the interval (the bounds shrink with the width in value, not in count), moved into
    [lo, the value before hi] so that both halves are non-empty: a double box of two neighbours has
    its rounded middle at hi, which once split into the box itself and an empty one, forever."""
    _, floating = _TYPES[bits]
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    middle = lo / 2 + hi / 2  # no overflow at the ends of double's range
    with np.errstate(over="ignore"):
        nearest = middle.astype(floating)
        below = np.where(nearest > middle, np.nextafter(nearest, floating(-np.inf)), nearest)
    first, last = ordinal(lo, bits), ordinal(hi, bits)
    m = np.clip(ordinal(below.astype(np.float64), bits), first, last - 1)
    return from_ordinal(m, bits), from_ordinal(m + 1, bits)
