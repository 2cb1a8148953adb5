"""int8 average pooling as onnxruntime computes it, and when that is an integer staircase.

onnxruntime's QLinearAveragePool (com.microsoft; also what its QDQ optimiser makes of
DequantizeLinear -> AveragePool -> QuantizeLinear) computes each output in float32:

    d_i = float32(s_in * (x_i - z_in))                  for the window's positions inside the image
    y   = float32 sum of the d_i (padded positions skipped), divided by n
          (n = kernel size with count_include_pad, else the count of valid positions)
    code = clamp(nearbyintf(y / s_out + z_out), qmin, qmax)

The exact value of that mean is a function of the window's integer sum S = sum (x_i - z_in) alone,
v(S) = s_in * S / (n * s_out) + z_out; the float32 roundings move the computed value by at most
E(S) (below: half an ulp per rounding, of the largest magnitude each can reach), and which of its
summands come first (the order of the window, or another runtime's) changes only that error. So
wherever [v(S) - E(S), v(S) + E(S)] holds no rounding boundary (a half-integer inside the code range),
every implementation of the formula above (any summation order; y / n a division or a
multiplication by a rounded reciprocal; rounding before or after adding z_out; onnxruntime's global
average path, taken when the kernel covers the unpadded image: the integer sum times a rounded scale) gives code(S) = clamp(round(v(S))) for
every window with that sum. A window covering the whole unpadded image (GlobalAveragePool,
QLinearGlobalAveragePool, and an AveragePool or QLinearAveragePool whose kernel is the image) is
computed exactly that way by onnxruntime in all four forms: the integer sum S times
M = f32(s_in / f32(s_out * f32(n))), rounded half to even after a clamp to the code range
(`global_codes`), so its code is a function of S with no ambiguity at all (measured: every window of
30 random parameter sets x 4,096 channels, and of 20 sets x 4,096 windows built to have the sums
nearest a rounding boundary, equal in all four forms). qverify then states the pool as a depthwise convolution with weights 1
and this staircase as its threshold table (`thresholds`), an int8 layer like any other: the C, the
simulator, the lifter and the network level need nothing of their own, and the C agrees with
onnxruntime bit for bit. Where some reachable S is *ambiguous* (v within E of a boundary), the code
depends on the float rounding of the particular window, which qverify does not model: such a pool is
refused, naming the layer and the sum (`ambiguous_sums`). The pools of onnxruntime's quantizer on
the digits suites have none (the bound is tight enough: measured margins ~1e-4 code units).
"""

from __future__ import annotations

import numpy as np

from qverify.network.qparams import MacQuant

_U = 2.0**-24  # float32's unit roundoff


def half_ulp(magnitude: np.ndarray | float) -> np.ndarray:
    """Half an ulp of float32 at magnitudes up to `magnitude` (>= 0): the largest rounding error of
    a round-to-nearest result of that size (normal range; subnormals get the smallest normal's)."""
    x = np.maximum(np.asarray(magnitude, dtype=np.float64), float(np.finfo(np.float32).tiny))
    exponent = np.floor(np.log2(x))
    exponent = np.where(2.0**exponent > x, exponent - 1, exponent)  # log2's rounding at powers of 2
    return 2.0 ** (exponent - 23) / 2


def exact_means(acc: np.ndarray, quant: MacQuant) -> np.ndarray:
    """v(S) in float64 (its error, ~1e-16 relative, is charged by `ambiguous_sums`)."""
    n = quant.pool_divisor
    return (
        np.asarray(acc, dtype=np.float64) * quant.input.scale / (n * quant.output.scale)
        + quant.output.zero_point
    )


def global_codes(acc: np.ndarray, quant: MacQuant) -> np.ndarray:
    """onnxruntime's global average of a window whose codes sum to S = acc above the zero point:
    clamp(z_out + round half even(f32(f32(S) * M))), M = f32(s_in / f32(s_out * f32(n)))."""
    out, f32 = quant.output, np.float32
    multiplier = f32(f32(quant.input.scale) / f32(f32(out.scale) * f32(quant.pool_divisor)))
    with np.errstate(over="ignore"):
        scaled = (np.asarray(acc, dtype=np.int64).astype(np.float32) * multiplier).astype(np.float32)
    scaled = np.clip(scaled, f32(out.code.qmin - out.zero_point), f32(out.code.qmax - out.zero_point))
    return np.rint(scaled).astype(np.int64) + out.zero_point


def pool_codes(acc: np.ndarray, quant: MacQuant) -> np.ndarray:
    """code(S) = clamp(round half even(v(S))), valid where S is not ambiguous; the global path's
    exact codes for a whole-image window."""
    if quant.pool_global:
        return global_codes(acc, quant)
    out = quant.output
    return np.clip(np.rint(exact_means(acc, quant)), out.code.qmin, out.code.qmax).astype(np.int64)


def rounding_error(acc: np.ndarray, quant: MacQuant, taps: int) -> np.ndarray:
    """E(S) in code units: a bound on |computed - v(S)| for a window of at most `taps` positions
    (not the whole image: `global_codes` computes that exactly)."""
    acc = np.asarray(acc, dtype=np.float64)
    inp, out, n = quant.input, quant.output, quant.pool_divisor
    k_max = max(inp.zero_point - inp.code.qmin, inp.code.qmax - inp.zero_point)
    # sum |x_i - z_in| over the window: S itself when every difference has one sign
    if inp.zero_point == inp.code.qmin:
        spread = np.abs(acc)
    else:
        spread = np.full(acc.shape, float(taps * k_max))
    grow = 1 + 2.0**-20  # room for the roundings themselves in the magnitudes below
    products = taps * half_ulp(inp.scale * k_max * grow)  # each d_i rounded once
    # the j-th partial sum (j >= 2 terms: the first is exact) is below j terms and the whole
    reach = inp.scale * k_max * grow * np.arange(2, taps + 1, dtype=np.float64)
    partial = half_ulp(np.minimum(reach[None, :], inp.scale * spread[:, None] * grow)).sum(axis=1)
    summed = (products + partial) / (n * out.scale)
    mean = inp.scale * spread / n * grow  # |y| bound
    exact_division = n & (n - 1) == 0
    division = 0.0 if exact_division else 3 * half_ulp(mean) / out.scale  # y / n, or y * (1 / n)
    quotient = np.abs(exact_means(acc, quant) - out.zero_point) * grow + summed + division
    # y / s_out (onnxruntime's pool kernels and MlasQuantizeLinear divide)
    scaled = half_ulp(quotient)
    shifted = half_ulp(quotient + abs(out.zero_point) + 1)  # + z_out before the rounding
    slack = 1e-9 * (quotient + abs(out.zero_point) + 1)  # float64 evaluation of v(S)
    return summed + division + scaled + shifted + slack


def ambiguous_sums(quant: MacQuant, acc_lo: int, acc_hi: int, taps: int) -> np.ndarray:
    """The sums S in [acc_lo, acc_hi] whose code the float32 rounding of a window can change."""
    acc = np.arange(acc_lo, acc_hi + 1, dtype=np.int64)
    v, error = exact_means(acc, quant), rounding_error(acc, quant, taps)
    code = quant.output.code
    low = np.clip(np.rint(v - error), code.qmin, code.qmax)
    high = np.clip(np.rint(v + error), code.qmin, code.qmax)
    return acc[low != high]
