"""The input stage: what an implementation makes of a real input value.

A device receives a real measurement and converts it before the network runs: a float or double
implementation rounds it to nearest (ties to even) in its C type, as onnxruntime's cast and every C
conversion do; a fixed-point `<k,l>` implementation rounds it to a word with the format's rounding
(`nearest`: ties away from zero; `floor`), as the C harness's `fxp_from_double` does; an int8 model
receives the float32 value and quantizes it (ONNX QuantizeLinear). Every conversion here is monotone,
so the image of a real interval [lo, hi] is every input value between the images of its two ends:
never empty for lo <= hi, whatever the bounds' decimal digits (a point `X_0 = -0.4328822419884990`
has no float equal to it; its image is the float nearest to it).

Values beyond the type's range saturate to its largest finite value (fixed point: to the word
range), and the caller is told (`clipped`): an input the device would see as infinity is outside
what the network is verified for, and qverify says so rather than reasoning about it.

The conversions are exact: bounds are `Fraction`s (VNN-LIB decimals read exactly), and the rounding
is decided by exact comparison, so no double rounding through float64 changes a half-way case.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from qverify.quant.fixed import FixedFormat, Rounding
from qverify.quant.floatfmt import FloatFormat

__all__ = ["fixed_word", "nearest_float"]


def _largest(dtype: type[np.floating]) -> Fraction:
    return Fraction(float(np.finfo(dtype).max))


def nearest_float(value: Fraction, number: FloatFormat) -> tuple[float, bool]:
    """The value of `number`'s type nearest to `value` (ties to even), and whether it saturated
    (|value| beyond the largest finite value of the type, where IEEE rounding would give infinity).

    The candidate float64 conversion is at most one step of the type away from the answer; its two
    neighbours are compared exactly."""
    dtype = number.dtype
    largest = _largest(dtype)
    if value > largest:
        return float(largest), True
    if value < -largest:
        return float(-largest), True
    with np.errstate(over="ignore"):
        candidate = dtype(float(value))
    if not np.isfinite(candidate):  # float64 rounding past the type's largest value
        candidate = dtype(np.copysign(float(largest), float(value)))
    options = {
        float(candidate),
        float(np.nextafter(candidate, dtype(np.inf))),
        float(np.nextafter(candidate, dtype(-np.inf))),
    }
    finite = [option for option in options if math.isfinite(option)]

    def key(option: float) -> tuple[Fraction, int]:
        # distance first, then ties to even: an even significand has a 0 as its lowest bit
        ordinal = int(np.array(option, dtype=dtype).view(f"u{np.dtype(dtype).itemsize}"))
        return abs(Fraction(option) - value), ordinal & 1

    return min(finite, key=key), False


def fixed_word(value: Fraction, fmt: FixedFormat) -> tuple[int, bool]:
    """The word of `fmt` the harness's input conversion gives for `value` (the format's rounding of
    value * 2^l, exactly), saturated to the word range, and whether it saturated."""
    scaled = value * fmt.scale
    if fmt.rounding is Rounding.FLOOR:
        word = math.floor(scaled)
    else:  # nearest, ties away from zero (C's round())
        word = math.floor(abs(scaled) + Fraction(1, 2))
        word = word if scaled >= 0 else -word
    if word < fmt.min_q:
        return fmt.min_q, True
    if word > fmt.max_q:
        return fmt.max_q, True
    return word, False
