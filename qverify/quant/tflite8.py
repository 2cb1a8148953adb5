"""TensorFlow Lite's int8 arithmetic (its reference kernels, what TensorFlow Lite Micro runs), exactly.

Every TFLite int8 kernel computes with integers only, from multipliers fixed when the model is
prepared (`QuantizeMultiplier`: a real multiplier in double as a Q31 integer m and a power of two,
m rounded half away from zero) and gemmlowp's fixed-point primitives, double rounding (the
desktop build's `MultiplyByQuantizedMultiplier`: `SaturatingRoundingDoublingHighMul`, then
`RoundingDivideByPOT`). What qverify states from them (`requantize` of `qverify.quant.affine`
does the MAC layers' requantization, m = QuantizeMultiplier(s_in * s_w / s_out); the desktop
reference FULLY_CONNECTED alone requantizes in double instead, (int32) round(acc * s_in * s_w /
s_out): `double_requantize`):

- ADD (`reference_integer_ops::AddFunc`): each input code less its zero point, shifted left by 20,
  scaled by its own multiplier (s_i / (2 max(s_a, s_b))), the two summed, scaled by the output
  multiplier (2 max(s_a, s_b) / (2^20 s_out)), plus the output zero point, clamped to the fused
  activation's range: `add_codes`. A function of the two codes, stated as an exact integer
  staircase like onnxruntime's QLinearAdd (`qverify.quant.join8`, certified on all 65,536 pairs);
- MEAN over the image (`reference_ops::QuantizedMeanOrSum`): S = the sum of (x - z_in) over the
  n positions; m, e = QuantizeMultiplier(s_in / s_out); shift = min(floor(log2 n), 32, 31 + e);
  code = MultiplyByQuantizedMultiplier(S, (m << shift) // n, e - shift) + z_out, clamped:
  `mean_codes`;
- AVERAGE_POOL_2D (`reference_integer_ops::AveragePool`): the window's raw codes summed, divided by
  the count of positions inside the image rounding half away from zero (C's integer division
  after adding half the count), clamped to the fused activation's range; the input and output
  quantization are not used (TFLite requires them equal): `average_codes`;
- fused activations (`CalculateActivationRangeQuantized`, read with the model:
  `qverify.io.tflite_reader.activation_range`) clamp the codes to `act_range`; XNNPACK quantizes
  the same float range its own way (`xnnpack_activation_range`).

All are non-decreasing functions of one integer (the accumulator, the window's sum), so each is a
threshold table of the kind every int8 layer has: the simulator, the C, the lifter and the network
level need nothing of their own.
"""

from __future__ import annotations

import math

import numpy as np

from qverify.errors import RangeError, UnsupportedError
from qverify.network.qparams import JoinQuant, MacQuant, TensorQuant

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
ADD_LEFT_SHIFT = 20  # TFLite's 8-bit ADD: 255 << 20 and the sum of two stay inside int32

FUSED_ACTIVATIONS = ("NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT")


def round_half_away(value: float) -> int:
    """TfLiteRound / std::round on a double or float value: half away from zero."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real = m * 2^(shift - 31), m in [2^30, 2^31) (0, 0 for 0 and for
    multipliers below 2^-31, which TFLite flushes to zero)."""
    if real < 0 or not math.isfinite(real):
        raise RangeError(f"requantization multiplier {real!r} is not a non-negative finite number")
    if real == 0:
        return 0, 0
    fraction, shift = math.frexp(real)
    multiplier = round_half_away(fraction * (1 << 31))
    if multiplier == 1 << 31:
        multiplier //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return multiplier, shift


def srdhm(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int64 arrays holding int32 values."""
    product = np.asarray(a, dtype=np.int64) * np.int64(b)
    nudged = product + np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    quotient = np.where(nudged >= 0, nudged >> 31, -((-nudged) >> 31))  # C division: towards zero
    saturated = (np.asarray(a) == INT32_MIN) & (b == INT32_MIN)
    return np.where(saturated, INT32_MAX, quotient).astype(np.int64)


def rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: x / 2^exponent rounded half away from zero."""
    x = np.asarray(x, dtype=np.int64)
    if exponent == 0:
        return x
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int, what: str) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier (int32 x, double rounding). `x * 2^shift` must stay in
    int32 for a left shift (TFLite's C would overflow): RangeError naming `what`."""
    x = np.asarray(x, dtype=np.int64)
    left, right = max(shift, 0), max(-shift, 0)
    shifted = x * (1 << left)
    if shifted.size and (shifted.min() < INT32_MIN or shifted.max() > INT32_MAX):
        raise RangeError(f"{what}: a value shifted left by {left} leaves int32 in TFLite's requantization")
    return rounding_divide_by_pot(srdhm(shifted, multiplier), right)


def double_requantize(acc: np.ndarray, real: float) -> np.ndarray:
    """The reference FULLY_CONNECTED's requantization: (int32) std::round(double(acc) * real), the
    product rounded to double, then half away from zero (exactly: no `floor(x + 0.5)` rounding)."""
    product = np.asarray(acc, dtype=np.int64).astype(np.float64) * np.float64(real)
    whole = np.trunc(product)
    rounded = whole + np.sign(product) * (np.abs(product - whole) >= 0.5)
    return np.clip(rounded, INT32_MIN, INT32_MAX).astype(np.int64)


def _f32(value: float) -> float:
    return float(np.float32(value))


def add_multipliers(quant: JoinQuant, where: str) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """ADD's three (multiplier, shift) pairs as TFLite's Prepare computes them (add.cc)."""
    (qa, qb), out = quant.inputs, quant.output
    twice_max = 2.0 * _f32(max(np.float32(qa.scale), np.float32(qb.scale)))
    real_a = _f32(qa.scale) / twice_max
    real_b = _f32(qb.scale) / twice_max
    real_out = twice_max / _f32(np.float32(1 << ADD_LEFT_SHIFT) * np.float32(out.scale))
    pairs = []
    for real, name in ((real_a, "first input"), (real_b, "second input"), (real_out, "output")):
        if not 0 < real < 1:
            raise UnsupportedError(
                f"{where}: TFLite's int8 ADD needs its {name} multiplier in (0, 1), got {real!r} (scales "
                f"{qa.scale!r}, {qb.scale!r} -> {out.scale!r}): the interpreter aborts on it"
            )
        pairs.append(quantize_multiplier(real))
    return pairs[0], pairs[1], pairs[2]


def add_codes(a: np.ndarray, b: np.ndarray, quant: JoinQuant, where: str = "ADD") -> np.ndarray:
    """reference_integer_ops::AddFunc on codes a, b (int64 arrays), clamped to `quant.act_range`."""
    (qa, qb), out = quant.inputs, quant.output
    (ma, sa), (mb, sb), (mo, so) = add_multipliers(quant, where)
    shifted_a = (np.asarray(a, dtype=np.int64) - qa.zero_point) << ADD_LEFT_SHIFT
    shifted_b = (np.asarray(b, dtype=np.int64) - qb.zero_point) << ADD_LEFT_SHIFT
    scaled = multiply_by_quantized_multiplier(shifted_a, ma, sa, where) + multiply_by_quantized_multiplier(
        shifted_b, mb, sb, where
    )
    raw = multiply_by_quantized_multiplier(scaled, mo, so, where) + out.zero_point
    low, high = quant.act_range if quant.act_range is not None else (out.code.qmin, out.code.qmax)
    return np.clip(raw, low, high).astype(np.int64)


def mean_codes(acc: np.ndarray, quant: MacQuant) -> np.ndarray:
    """QuantizedMeanOrSum (mean) of windows whose codes sum to acc above the input zero point."""
    out, n = quant.output, quant.pool_divisor
    multiplier, exponent = quantize_multiplier(_f32(quant.input.scale) / _f32(out.scale))
    shift = min(n.bit_length() - 1, 32, 31 + exponent)
    scaled = multiply_by_quantized_multiplier(acc, (multiplier << shift) // n, exponent - shift, quant.what)
    return np.clip(scaled + out.zero_point, out.code.qmin, out.code.qmax).astype(np.int64)


def average_codes(acc: np.ndarray, quant: MacQuant) -> np.ndarray:
    """reference_integer_ops::AveragePool of windows of n positions whose codes sum to acc above the
    input zero point: the raw sum acc + n z_in divided by n, half away from zero, clamped."""
    n = quant.pool_divisor
    total = np.asarray(acc, dtype=np.int64) + n * quant.input.zero_point
    half = n // 2
    quotient = np.where(total > 0, (total + half) // n, -((-(total - half)) // n))  # C: towards zero
    low, high = (
        quant.act_range if quant.act_range is not None else (quant.output.code.qmin, quant.output.code.qmax)
    )
    return np.clip(quotient, low, high).astype(np.int64)


def xnnpack_quantize(real: float, out: TensorQuant) -> int:
    """XNNPACK's xnn_qs8_quantize: lrintf(min(max(real / s + z, qmin), qmax)), float32 steps."""
    with np.errstate(over="ignore"):
        value = np.float32(np.float32(real) / np.float32(out.scale)) + np.float32(out.zero_point)
    value = min(max(float(np.float32(value)), out.code.qmin), out.code.qmax)
    return int(np.rint(value))


def xnnpack_activation_range(fused: str, out: TensorQuant) -> tuple[int, int]:
    """The codes XNNPACK clamps a fused activation to (its float range quantized by
    `xnnpack_quantize`; an unbounded side is the code range's)."""
    low, high = {
        "NONE": (None, None),
        "RELU": (0.0, None),
        "RELU6": (0.0, 6.0),
        "RELU_N1_TO_1": (-1.0, 1.0),
    }.get(fused, (None, None))
    return (
        out.code.qmin if low is None else xnnpack_quantize(low, out),
        out.code.qmax if high is None else xnnpack_quantize(high, out),
    )


def xnnpack_add_parameters(quant: JoinQuant, where: str) -> tuple[int, int, int, int]:
    """XNNPACK's qs8 ADD parameters (xnn_init_qs8_add_minmax_scalar_params): multipliers of the
    two codes (21 bits at most), the bias (rounding less the zero points' products) and the shift."""
    (qa, qb), out = quant.inputs, quant.output
    f32 = np.float32
    ratio_a, ratio_b = f32(f32(qa.scale) / f32(out.scale)), f32(f32(qb.scale) / f32(out.scale))
    largest = max(ratio_a, ratio_b)
    if not (2.0**-10 <= min(ratio_a, ratio_b) and largest < 2.0**8):
        raise UnsupportedError(
            f"{where}: XNNPACK's int8 ADD needs scale ratios in [2^-10, 2^8), got {float(ratio_a)!r}, "
            f"{float(ratio_b)!r} (the delegate leaves such an ADD to TFLite's kernel, which qverify does not model here)"
        )
    exponent = int(np.array(largest, dtype=np.float32).view(np.uint32) >> 23) - 127
    shift = 20 - exponent

    def multiplier(ratio) -> int:  # lrintf of the ratio with `shift` added to its exponent: ratio * 2^shift
        return int(np.rint(np.float32(ratio) * np.float32(2.0**shift)))

    mult_a, mult_b = multiplier(ratio_a), multiplier(ratio_b)
    bias = (1 << (shift - 1)) - mult_a * qa.zero_point - mult_b * qb.zero_point
    return mult_a, mult_b, bias, shift


def xnnpack_add_codes(a: np.ndarray, b: np.ndarray, quant: JoinQuant, where: str = "ADD") -> np.ndarray:
    """XNNPACK's qs8 ADD of codes a, b: (bias + MA a + MB b) >> shift, plus the output zero point,
    clamped to the code range and the fused activation's (XNNPACK's quantization of it)."""
    mult_a, mult_b, bias, shift = xnnpack_add_parameters(quant, where)
    acc = bias + mult_a * np.asarray(a, dtype=np.int64) + mult_b * np.asarray(b, dtype=np.int64)
    out = quant.output
    low, high = out.code.qmin, out.code.qmax
    if quant.act_range is not None and quant.fused:
        low, high = xnnpack_activation_range(quant.fused, out)
    return np.clip((acc >> shift) + out.zero_point, low, high).astype(np.int64)
