"""int8 requantization: the threshold tables equal the runtimes' formulas on every accumulator that
matters, and the TFLite integer pipeline equals an independent big-integer implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qverify.errors import RangeError
from qverify.network import CodeType, MacQuant, TensorQuant
from qverify.quant.affine import (
    INT32_MAX,
    INT32_MIN,
    RequantMode,
    apply_thresholds,
    ort_multiplier,
    quantize_multiplier,
    requantize,
    thresholds,
)


def make_quant(rng, channels: int, code: CodeType, relu: bool, per_channel: bool) -> MacQuant:
    input_quant = TensorQuant(
        float(np.float32(rng.uniform(0.002, 0.05))), int(rng.integers(code.qmin, code.qmax)), code
    )
    output = TensorQuant(
        float(np.float32(rng.uniform(0.01, 0.3))), int(rng.integers(code.qmin, code.qmax)), code
    )
    scales = np.float32(rng.uniform(0.001, 0.05, channels if per_channel else 1)).astype(np.float64)
    weights = rng.integers(-127, 128, size=(channels, 9))
    bias = rng.integers(-5000, 5000, size=channels)
    return MacQuant(input_quant, weights, scales, bias, output, relu)


CASES = [
    (mode, code, relu, per_channel)
    for mode in RequantMode
    for code in CodeType
    for relu in (False, True)
    for per_channel in (False, True)
]


@pytest.mark.parametrize("mode, code, relu, per_channel", CASES, ids=lambda v: str(getattr(v, "value", v)))
def test_thresholds_equal_the_formula_everywhere_that_matters(mode, code, relu, per_channel):
    rng = np.random.default_rng(hash((mode.value, code.value, relu, per_channel)) % 2**32)
    quant = make_quant(rng, 4, code, relu, per_channel)
    lo, hi = np.full(4, -400_000), np.full(4, 400_000)
    table = thresholds(quant, mode, lo, hi)
    assert table.shape == (4, 255)
    assert np.all(np.diff(table, axis=1) >= 0), "tables are sorted"
    for channel in range(4):
        finite = table[channel][(table[channel] > INT32_MIN) & (table[channel] < INT32_MAX)]
        near = (finite[:, None] + np.arange(-3, 4)[None, :]).ravel()
        probes = np.unique(np.concatenate([near, rng.integers(-400_000, 400_001, 5000), [-400_000, 400_000]]))
        probes = probes[(probes >= -400_000) & (probes <= 400_000)]
        expected = requantize(probes, quant, mode, channel)
        got = apply_thresholds(probes[None, :], table[channel][None, :], code.qmin)[0]
        assert np.array_equal(got, expected)
        if relu:
            assert got.min() >= quant.output.zero_point


def test_onnxruntime_multiplier_rounds_each_step_in_float32():
    m = ort_multiplier(0.1, np.array([0.3]), 0.7)
    step = np.float32(np.float32(0.1) * np.float32(0.3))
    assert m[0] == np.float32(step / np.float32(0.7))
    assert m.dtype == np.float32


def _reference_tflite(acc: int, real: float) -> int:
    """gemmlowp's MultiplyByQuantizedMultiplier, written out on Python integers."""
    fraction, shift = math.frexp(real)
    multiplier = round(fraction * 2**31)
    if multiplier == 2**31:
        multiplier, shift = multiplier // 2, shift + 1
    left, right = max(shift, 0), max(-shift, 0)
    a = acc * 2**left
    product = a * multiplier
    nudge = 2**30 if product >= 0 else 1 - 2**30
    total = product + nudge
    high = abs(total) // 2**31 * (1 if total >= 0 else -1)  # C division truncates towards zero
    if right == 0:
        return high
    mask = 2**right - 1
    remainder = high & mask
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if remainder > threshold else 0)


def test_tflite_pipeline_equals_big_integer_reference():
    rng = np.random.default_rng(11)
    for _ in range(20):
        quant = make_quant(rng, 1, CodeType.INT8, False, False)
        real = (
            float(np.float32(quant.input.scale))
            * float(quant.weight_scales[0])
            / float(np.float32(quant.output.scale))
        )
        acc = rng.integers(-300_000, 300_000, 400)
        got = requantize(acc, quant, RequantMode.TFLITE, 0)
        expected = np.clip(
            [_reference_tflite(int(a), real) + quant.output.zero_point for a in acc], -128, 127
        )
        assert np.array_equal(got, expected)


@pytest.mark.parametrize(
    "real, expected",
    [(0.5, (1 << 30, 0)), (0.75, (1610612736, 0)), (1.0, (1 << 30, 1)), (0.1, (1717986918, -3))],
)
def test_quantize_multiplier_known_values(real, expected):
    assert quantize_multiplier(real) == expected


def test_tflite_requantization_refuses_int32_overflow_of_the_shifted_accumulator():
    rng = np.random.default_rng(3)
    quant = make_quant(rng, 1, CodeType.INT8, False, False)
    big = MacQuant(
        TensorQuant(1.0, 0, CodeType.INT8),
        quant.weights,
        np.array([4.0]),
        quant.bias,
        TensorQuant(0.5, 0, CodeType.INT8),
        False,
    )  # multiplier 8: acc * 2^4 leaves int32 for |acc| >= 2^27
    with pytest.raises(RangeError, match="leaves int32"):
        requantize(np.array([1 << 28]), big, RequantMode.TFLITE, 0)
