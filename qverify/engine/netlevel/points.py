"""Network level: boxes of implementation inputs as finite sets: counting, enumerating and splitting them.

An integer box holds every word in [lo, hi]; a float box every value of the input type in [lo, hi].
Float values are numbered by their ordinals (`engine.floatgrid`, shared with the scalar path's
splitting), so a float box is an integer range of numbers too: splitting ends at single
values and a box with few values is enumerated, the way integer boxes end at single words.
"""

from __future__ import annotations

import numpy as np

from qverify.engine import floatgrid
from qverify.quant import QuantizedNetwork


def _bits(qnet: QuantizedNetwork) -> int:
    """The width of a float format's input type."""
    return 8 * np.dtype(qnet.number.dtype).itemsize  # type: ignore[union-attr]


def ordinals(qnet: QuantizedNetwork, values: np.ndarray) -> np.ndarray:
    """Integers that number the input values monotonically (the words themselves for integer
    formats; for floats the ordinals of `engine.floatgrid`, -0 and +0 both 0)."""
    if qnet.is_integer:
        return np.asarray(values, dtype=np.int64)
    return floatgrid.ordinal(values, _bits(qnet))


def values_of(qnet: QuantizedNetwork, numbers: np.ndarray) -> np.ndarray:
    """The inverse of `ordinals` (as float64 for float formats)."""
    if qnet.is_integer:
        return np.asarray(numbers, dtype=np.int64)
    return floatgrid.from_ordinal(numbers, _bits(qnet))


def count(qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray) -> int:
    """How many inputs the box holds (a Python int: it may exceed 2^63)."""
    total = 1
    for first, last in zip(ordinals(qnet, lo).tolist(), ordinals(qnet, hi).tolist()):
        total *= last - first + 1  # Python ints: a double's ordinals can be 2^64 apart (int64 overflows)
    return total


def enumerate_box(qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Every input of the box, one per row (call only for boxes `count` says are small). Only the
    inputs that take several values enter the grid (numpy's meshgrid takes at most 32 axes; an image
    box small enough to enumerate varies in a few of its hundreds of inputs)."""
    first, last = ordinals(qnet, lo), ordinals(qnet, hi)
    varying = np.flatnonzero(last > first)
    grid = np.tile(first, (count(qnet, lo, hi), 1))
    if varying.size:
        axes = [np.arange(first[i], last[i] + 1) for i in varying]
        grid[:, varying] = np.array(np.meshgrid(*axes, indexing="ij")).reshape(len(axes), -1).T
    return values_of(qnet, grid)


def split(
    qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray, dimension: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    """Halve the box along `dimension` by count of inputs (None when it holds a single value there)."""
    a, b = ordinals(qnet, lo[dimension : dimension + 1])[0], ordinals(qnet, hi[dimension : dimension + 1])[0]
    if a >= b:
        return None
    middle = (int(a) + int(b)) // 2
    left_hi, right_lo = hi.copy(), lo.copy()
    left_hi[dimension] = values_of(qnet, np.array([middle]))[0]
    right_lo[dimension] = values_of(qnet, np.array([middle + 1]))[0]
    return (lo.copy(), left_hi), (right_lo, hi.copy())


def split_at_value(
    qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray, dimension: int, real_middle: float
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    """Halve the box along `dimension` at the real value `real_middle` (the midpoint of the reals,
    which for floats differs from the midpoint by count)."""
    if qnet.is_integer:
        return split(qnet, lo, hi, dimension)
    a, b = ordinals(qnet, lo[dimension : dimension + 1])[0], ordinals(qnet, hi[dimension : dimension + 1])[0]
    if a >= b:
        return None
    middle = int(ordinals(qnet, np.array([real_middle]))[0])
    middle = min(max(middle, int(a)), int(b) - 1)
    left_hi, right_lo = hi.copy(), lo.copy()
    left_hi[dimension] = values_of(qnet, np.array([middle]))[0]
    right_lo[dimension] = values_of(qnet, np.array([middle + 1]))[0]
    return (lo.copy(), left_hi), (right_lo, hi.copy())
