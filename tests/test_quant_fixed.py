"""FixedFormat arithmetic against an independent exact reference (Python ints and Fractions)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from qverify.errors import InputError, RangeError
from qverify.quant import FixedFormat, Overflow, Rounding, add, mult, quantize_constants, quantize_real


def reference_round(value: Fraction, rounding: Rounding) -> int:
    if rounding is Rounding.FLOOR:
        return value.__floor__()
    magnitude = int(abs(value) + Fraction(1, 2))  # ties away from zero
    return magnitude if value >= 0 else -magnitude


def reference_overflow(value: int, fmt: FixedFormat) -> tuple[int, bool]:
    overflowed = not fmt.min_q <= value <= fmt.max_q
    if fmt.overflow is Overflow.WRAP:
        span = 1 << fmt.word_bits
        return (value - fmt.min_q) % span + fmt.min_q, overflowed
    return min(max(value, fmt.min_q), fmt.max_q), overflowed


def words(fmt: FixedFormat) -> st.SearchStrategy[int]:
    return st.integers(fmt.min_q, fmt.max_q)


@st.composite
def format_and_two_words(draw):
    k = draw(st.integers(1, 20))
    l = draw(st.integers(max(0, 2 - k), 32 - k))
    fmt = FixedFormat(k, l, draw(st.sampled_from(list(Rounding))), draw(st.sampled_from(list(Overflow))))
    return fmt, draw(words(fmt)), draw(words(fmt))


@given(format_and_two_words())
@example((FixedFormat(4, 4, Rounding.NEAREST, Overflow.SATURATE), 24, -11))
@example((FixedFormat(4, 4, Rounding.FLOOR, Overflow.SATURATE), 24, 11))
@example((FixedFormat(1, 31, Rounding.NEAREST, Overflow.WRAP), -(1 << 31), -(1 << 31)))
def test_mult_matches_reference(case):
    fmt, a, b = case
    got, overflowed = mult(np.array([a]), np.array([b]), fmt)
    expected, expected_overflow = reference_overflow(
        reference_round(Fraction(a * b, fmt.scale), fmt.rounding), fmt
    )
    assert int(got[0]) == expected
    assert bool(overflowed[0]) == expected_overflow


@given(format_and_two_words())
def test_add_matches_reference(case):
    fmt, a, b = case
    got, overflowed = add(np.array([a]), np.array([b]), fmt)
    assert (int(got[0]), bool(overflowed[0])) == reference_overflow(a + b, fmt)


@given(format_and_two_words(), st.floats(-1e6, 1e6, allow_nan=False))
def test_quantize_matches_reference(case, value):
    fmt = case[0]
    got, overflowed = quantize_real(np.array([value]), fmt)
    expected = reference_overflow(reference_round(Fraction(value) * fmt.scale, fmt.rounding), fmt)
    assert (int(got[0]), bool(overflowed[0])) == expected


def test_worked_examples_of_the_architecture():
    nearest = FixedFormat(4, 4, Rounding.NEAREST, Overflow.SATURATE)
    floor = FixedFormat(4, 4, Rounding.FLOOR, Overflow.SATURATE)
    assert quantize_real(np.array([-0.53125]), nearest)[0][0] == -9  # round(-8.5): ties away from zero
    assert mult(np.array([24]), np.array([-11]), nearest)[0][0] == -17
    assert mult(np.array([24]), np.array([-11]), floor)[0][0] == -17
    assert mult(np.array([24]), np.array([11]), floor)[0][0] == 16
    assert mult(np.array([24]), np.array([11]), nearest)[0][0] == 17
    assert add(np.array([120]), np.array([10]), nearest)[0][0] == 127
    wrap = FixedFormat(4, 4, overflow=Overflow.WRAP)
    assert add(np.array([120]), np.array([10]), wrap)[0][0] == -126
    detect = FixedFormat(4, 4, overflow=Overflow.DETECT)
    assert add(np.array([120]), np.array([10]), detect)[1][0]


@pytest.mark.parametrize(
    "value, nearest, floor",
    [
        (0.5 / 16, 1, 0),
        (-0.5 / 16, -1, -1),
        (1.5 / 16, 2, 1),
        (-1.5 / 16, -2, -2),
        (0.49999999 / 16, 0, 0),
        (-0.49999999 / 16, 0, -1),
        (7.999, 127, 127),
        (-8.0, -128, -128),
        (-8.01, -128, -128),
    ],
)
def test_quantize_ties_and_saturation_edges(value, nearest, floor):
    assert quantize_real(np.array([value]), FixedFormat(4, 4, Rounding.NEAREST))[0][0] == nearest
    assert quantize_real(np.array([value]), FixedFormat(4, 4, Rounding.FLOOR))[0][0] == floor


def test_wrap_edges():
    fmt = FixedFormat(4, 4, overflow=Overflow.WRAP)
    assert add(np.array([127]), np.array([1]), fmt)[0][0] == -128
    assert add(np.array([-128]), np.array([-1]), fmt)[0][0] == 127
    assert quantize_real(np.array([8.0]), fmt)[0][0] == -128
    assert quantize_real(np.array([1e300]), fmt)[0][0] == 0  # 1e300 * 16 is a multiple of 256


@pytest.mark.parametrize("text", ["0.8", "40.0", "a.b", "8", "8.-1", "", "16.17", "1.0"])
def test_bad_format_strings(text):
    with pytest.raises(InputError):
        FixedFormat.parse(text)


def test_format_parse_and_properties():
    fmt = FixedFormat.parse("28.4")
    assert (fmt.int_bits, fmt.frac_bits, fmt.word_bits) == (28, 4, 32)
    assert (fmt.min_q, fmt.max_q, fmt.scale) == (-(1 << 31), (1 << 31) - 1, 16)
    assert str(FixedFormat.parse(" 8 . 8 ")) == "<8,8>"


def test_detect_rejects_out_of_range_constants():
    with pytest.raises(RangeError, match="does not fit <2,2>"):
        quantize_constants(np.array([0.5, 3.0]), FixedFormat(2, 2, overflow=Overflow.DETECT), "weight")
    saturated = quantize_constants(np.array([3.0]), FixedFormat(2, 2, overflow=Overflow.SATURATE), "weight")
    assert saturated[0] == 7
