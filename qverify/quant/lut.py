"""Lookup tables for sigmoid and tanh, and their error bounds.

A table samples f at N uniform points x_i = -a + i*h, h = 2a/(N-1), over [-a, a]; an input is
mapped to the nearest sample (index by rounding) and inputs outside [-a, a] saturate to
f(-inf) / f(+inf). By the Lipschitz bound, |f(x) - f(x_i)| <= lambda*h/2 inside (lambda = 1/4 for
sigmoid, 1 for tanh); choosing N >= 1 + 2a*lambda/eps (ARCHITECTURE.md) keeps it below eps/2, and
a is chosen so the saturation error |f(+-a) - f(+-inf)| is below eps too.

The C twin is the `lut` block of `templates/network.c.j2`: the integer index formula
idx = ((q + qa)*(N-1) + qa) / (2*qa) is round-half-up of (x + a)/h computed exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qverify.errors import InputError
from qverify.network import Activation, apply_activation
from qverify.quant.fixed import FixedFormat, quantize_constants
from qverify.quant.floatfmt import FloatFormat

LIPSCHITZ = {Activation.SIGMOID: 0.25, Activation.TANH: 1.0}
LIMITS = {Activation.SIGMOID: (0.0, 1.0), Activation.TANH: (-1.0, 1.0)}
RESOLUTION_HALF_RANGE = 6.0  # the thesis' Res1/Res2/Res3 tables cover [-6, 6]
MAX_ENTRIES = 1 << 20
FLOAT_RANGE_GRID = 256  # float tables use a half-range that is a multiple of 2^-8 (exact in float)


@dataclass(frozen=True, slots=True)
class LutDesign:
    """How to size a table: a target error `eps`, or a step of 10^-resolution (thesis Res1..3)."""

    eps: float | None = None
    resolution: int | None = 2
    half_range: float | None = None

    def __post_init__(self) -> None:
        if (self.eps is None) == (self.resolution is None):
            raise InputError("give exactly one of --lut-eps and --lut-res")
        if self.eps is not None and not 0 < self.eps < 1:
            raise InputError(f"--lut-eps {self.eps}: must be in (0, 1)")
        if self.resolution is not None and not 0 <= self.resolution <= 5:
            raise InputError(f"--lut-res {self.resolution}: must be 0..5 decimal places")
        if self.half_range is not None and not 0 < self.half_range <= 64:
            raise InputError(f"--lut-range {self.half_range}: must be in (0, 64]")

    def describe(self) -> str:
        if self.eps is not None:
            return f"eps={self.eps}"
        return f"res={self.resolution}"


@dataclass(frozen=True, slots=True, eq=False)
class Lut:
    """A designed table for one activation in one number format."""

    activation: Activation
    half_range: float  # a, exactly representable in the format
    half_range_q: int  # a * 2^l for fixed formats, 0 for float
    n_entries: int
    table: np.ndarray  # int64 words (fixed) or values of the float type
    sat_lo: float | int
    sat_hi: float | int
    error_bound: float  # analytic max |LUT(x) - f(x)| over every representable x

    @property
    def step(self) -> float:
        return 2.0 * self.half_range / (self.n_entries - 1)

    @property
    def float_scale(self) -> float:
        """(N-1)/(2a): the multiplier of the float index formula."""
        return (self.n_entries - 1) / (2.0 * self.half_range)


def tail_error(activation: Activation, half_range: float) -> float:
    """|f(+-a) - f(+-inf)|: the error of saturating outside [-a, a] (both tails are equal)."""
    return float(LIMITS[activation][1] - apply_activation(activation, np.array(half_range)))


def _half_range_for(design: LutDesign, activation: Activation) -> float:
    """The table's half-range a: given, or the smallest whose saturation error is <= eps."""
    if design.half_range is not None:
        return design.half_range
    if design.eps is None:
        return RESOLUTION_HALF_RANGE
    if activation is Activation.SIGMOID:
        return math.log(1.0 / design.eps - 1.0) if design.eps < 0.5 else 1.0
    return math.atanh(1.0 - design.eps)


def _entry_count(design: LutDesign, activation: Activation, half_range: float) -> int:
    if design.eps is not None:
        count = math.ceil(1 + 2 * half_range * LIPSCHITZ[activation] / design.eps)
    else:
        count = round(2 * half_range * 10**design.resolution) + 1
    if count > MAX_ENTRIES:
        raise InputError(f"LUT for {activation.value} would need {count} entries (max {MAX_ENTRIES})")
    return max(count, 2)


def design_lut(activation: Activation, design: LutDesign, number: FixedFormat | FloatFormat) -> Lut:
    """Size, sample and quantise the table of `activation` for the number format."""
    if activation not in LIPSCHITZ:
        raise InputError(f"no lookup table for {activation.value}")
    wanted = _half_range_for(design, activation)
    if isinstance(number, FixedFormat):
        half_range_q = max(1, math.ceil(wanted * number.scale))
        half_range = half_range_q / number.scale
    else:
        half_range_q = 0
        half_range = math.ceil(wanted * FLOAT_RANGE_GRID) / FLOAT_RANGE_GRID
    count = _entry_count(design, activation, half_range)
    samples = -half_range + np.arange(count) * (2.0 * half_range / (count - 1))
    exact = apply_activation(activation, samples)
    low, high = LIMITS[activation]
    if isinstance(number, FixedFormat):
        table = quantize_constants(exact, number, f"{activation.value} table entry")
        sat = quantize_constants(np.array([low, high]), number, f"{activation.value} saturation value")
        sat_lo, sat_hi = int(sat[0]), int(sat[1])
    else:
        table = number.round(exact)
        sat_lo, sat_hi = float(number.round(np.array(low))), float(number.round(np.array(high)))
    return table_lut(activation, number, half_range, half_range_q, table, sat_lo, sat_hi)


def table_lut(
    activation: Activation,
    number: FixedFormat | FloatFormat,
    half_range: float,
    half_range_q: int,
    table: np.ndarray,
    sat_lo: float,
    sat_hi: float,
) -> Lut:
    """The `Lut` of a table over [-a, a] (a = `half_range`, in words `half_range_q` for fixed point)
    with its analytic error bound: what `design_lut` designs, and what the lifter reads back from C."""
    count = len(table)
    samples = -half_range + np.arange(count) * (2.0 * half_range / (count - 1))
    exact = apply_activation(activation, samples)
    low, high = LIMITS[activation]
    if isinstance(number, FixedFormat):
        entries_real = np.asarray(table) / number.scale
        sat_real = np.array([sat_lo, sat_hi]) / number.scale
        index_slack = 0.0
    else:
        entries_real = np.asarray(table).astype(np.float64)
        sat_real = np.array([sat_lo, sat_hi], dtype=np.float64)
        index_slack = 2 * half_range * (2.0**-20 if number.dtype is np.float32 else 2.0**-48)
    step = 2.0 * half_range / (count - 1)
    interior = LIPSCHITZ[activation] * (step / 2 + index_slack) + float(np.max(np.abs(entries_real - exact)))
    tail = tail_error(activation, half_range) + float(np.max(np.abs(sat_real - np.array([low, high]))))
    return Lut(
        activation=activation,
        half_range=half_range,
        half_range_q=half_range_q,
        n_entries=count,
        table=table,
        sat_lo=sat_lo,
        sat_hi=sat_hi,
        error_bound=max(interior, tail),
    )


def lut_fixed(lut: Lut, words: np.ndarray) -> np.ndarray:
    """The table applied to int64 words (C: `qv_<act>_lut`)."""
    words = np.asarray(words, dtype=np.int64)
    qa = lut.half_range_q
    inside = np.clip(words, -qa, qa)
    index = ((inside + qa) * (lut.n_entries - 1) + qa) // (2 * qa)
    values = np.asarray(lut.table, dtype=np.int64)[index]
    values = np.where(words < -qa, lut.sat_lo, values)
    return np.where(words > qa, lut.sat_hi, values)


def lut_float(lut: Lut, values: np.ndarray, number: FloatFormat) -> np.ndarray:
    """The table applied to float values, with the C's operation order and types."""
    dtype = number.dtype
    values = np.asarray(values, dtype=dtype)
    a = dtype(lut.half_range)
    position = (values + a) * dtype(lut.float_scale) + dtype(0.5)
    position = np.where((values < -a) | (values > a), dtype(0), position)
    index = np.minimum(position.astype(np.int64), lut.n_entries - 1)
    result = np.asarray(lut.table, dtype=dtype)[index]
    result = np.where(values < -a, dtype(lut.sat_lo), result)
    return np.where(values > a, dtype(lut.sat_hi), result).astype(dtype)


def measure_lut_error(lut: Lut, number: FixedFormat | FloatFormat, samples: int = 1 << 20) -> float:
    """The largest |LUT(x) - f(x)| found on a dense sample of representable x around [-a, a]."""
    span = lut.half_range + 2.0
    if isinstance(number, FixedFormat):
        lo = max(number.min_q, -math.ceil(span * number.scale))
        hi = min(number.max_q, math.ceil(span * number.scale))
        words = np.arange(lo, hi + 1, max(1, (hi - lo) // samples), dtype=np.int64)
        x = words / number.scale
        got = lut_fixed(lut, words) / number.scale
    else:
        x = number.round(np.linspace(-span, span, samples)).astype(np.float64)
        got = lut_float(lut, x, number).astype(np.float64)
    return float(np.max(np.abs(got - apply_activation(lut.activation, x))))
