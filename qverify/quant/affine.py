"""int8 affine quantization as runtimes compute it: requantization, thresholds, the number format.

A MAC layer of an int8 model accumulates acc = bias + sum w_i (x_i - z_in) exactly in int32 and maps
acc to an output code by *requantization*, a function of acc alone that runtimes compute in one of
two ways (both offered, as `RequantMode`):

- `onnxruntime` (default; onnxruntime's CPU kernels QLinearConv, QGemm, QLinearMatMul and the QDQ
  groups it fuses into them): the multiplier M = float32(float32(s_in * s_w) / s_out); then
  code = clamp(z_out + round_half_even(float32(float32(acc) * M)), lo, hi).
- `tflite` (TFLite reference kernels, CMSIS-NN, gemmlowp): M = s_in * s_w / s_out in double,
  written as a Q31 integer multiplier m and a shift (`frexp`, m rounded half away from zero);
  code = clamp(z_out + RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc * 2^left, m),
  right), lo, hi) (`qverify.quant.tflite8`, which also holds TFLite's pools and ADD).

lo is the code range's minimum, or the output zero point when a ReLU is fused (the runtimes' clamp);
a TFLite layer's fused activation clamps to its own range (`MacQuant.act_range`: RELU6's top).
A layer followed by a table on its codes (`MacQuant.lookup`: QLinearSigmoid) maps the code through
onnxruntime's table (`qverify.quant.code_tables`) after the clamp; a monotone table keeps the whole
map monotone, and the thresholds below are those of the composition.
Both functions are monotone (non-decreasing) in acc, so each is exactly a step function with at most
255 steps: `thresholds` gives, per output channel, t[k] = the smallest acc with code >= qmin + k + 1,
found by binary search over every accumulator the layer can produce. The generated C (integer only)
and the simulator both use the tables; the tests compare them with the formulas above on every
accumulator near every threshold, and with onnxruntime on many inputs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from qverify.errors import RangeError
from qverify.network.qparams import MacQuant, TensorQuant
from qverify.quant.code_tables import apply_lookup
from qverify.quant.pool8 import pool_codes
from qverify.quant.tflite8 import (
    average_codes,
    double_requantize,
    mean_codes,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    xnnpack_activation_range,
)

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
LEVELS = 255  # thresholds per table: one per code above the minimum


class RequantMode(enum.Enum):
    ONNXRUNTIME = "onnxruntime"
    TFLITE = "tflite"
    # the LiteRT interpreter's default CPU delegate (XNNPACK) on a TFLite model: MAC layers requantize
    # as onnxruntime does (f32(acc) * f32(f32(s_in s_w) / s_out), half to even), ADD is XNNPACK's
    # integer formula (`quant.tflite8.xnnpack_add_codes`)
    XNNPACK = "xnnpack"


class Int8Kernel(enum.Enum):
    """How a MAC layer's products are summed: exactly in int32 (the ONNX semantics: VNNI and ARM
    kernels, TFLite, CMSIS-NN), or as onnxruntime's x86 u8 x s8 kernels without AVX-VNNI do, with
    neighbouring product pairs saturated at int16 (`qverify.quant.x86`)."""

    EXACT = "exact"
    X86 = "x86"


@dataclass(frozen=True, slots=True)
class Int8Format:
    """The int8 affine number format: codes and scales come from the model, rounding from the mode,
    the sum of the products from the kernel."""

    requant: RequantMode = RequantMode.ONNXRUNTIME
    kernel: Int8Kernel = Int8Kernel.EXACT
    # the label this format was resolved from ("int8-ort": the kernel this machine's onnxruntime runs,
    # `quant.ort_kernel`), "" when named directly; the same arithmetic either way
    resolved_from: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.kernel is Int8Kernel.X86 and self.requant is not RequantMode.ONNXRUNTIME:
            raise ValueError("the x86 kernel variant is onnxruntime's: it has onnxruntime's requantization")

    @property
    def label(self) -> str:
        if self.kernel is Int8Kernel.X86:
            return "int8-x86"
        return {RequantMode.ONNXRUNTIME: "int8", RequantMode.TFLITE: "int8-tflite"}.get(
            self.requant, "int8-xnnpack"
        )

    @property
    def word_bits(self) -> int:
        return 8

    def __str__(self) -> str:
        return self.label

    def describe(self) -> str:
        """The label, and the one it was resolved from: `int8-x86 (int8-ort on this machine)`."""
        return f"{self.label} ({self.resolved_from} on this machine)" if self.resolved_from else self.label

    @classmethod
    def parse(cls, text: str) -> Int8Format | None:
        """`int8` / `int8-tflite` / `int8-xnnpack` / `int8-x86`, else None (`int8-ort` needs the machine's onnxruntime:
        `quant.labels.named_format`)."""
        key = text.strip().lower()
        if key in ("int8-x86", "int8-onnxruntime-x86"):
            return cls(RequantMode.ONNXRUNTIME, Int8Kernel.X86)
        if key == "int8":
            return cls(RequantMode.ONNXRUNTIME)
        if key == "int8-tflite":
            return cls(RequantMode.TFLITE)
        if key == "int8-xnnpack":
            return cls(RequantMode.XNNPACK)
        return None


def ort_multiplier(input_scale: float, weight_scales: np.ndarray, output_scale: float) -> np.ndarray:
    """onnxruntime's float32 requantization multipliers: (s_in * s_w) / s_out, each step in float32."""
    product = np.float32(input_scale) * np.asarray(weight_scales, dtype=np.float32)
    return (product.astype(np.float32) / np.float32(output_scale)).astype(np.float32)


def clamp_codes(quant: MacQuant, mode: RequantMode = RequantMode.TFLITE) -> tuple[int, int]:
    """The codes a MAC layer's requantization clamps to: its fused activation's range (TFLite's, or
    as XNNPACK quantizes it), else from the output zero point under a ReLU (or the code minimum) to
    the code maximum."""
    out = quant.requantized
    if quant.act_range is not None:
        if mode is RequantMode.XNNPACK and quant.fused:
            return xnnpack_activation_range(quant.fused, out)
        return quant.act_range
    return (out.zero_point if quant.relu else out.code.qmin), out.code.qmax


def requantize(acc: np.ndarray, quant: MacQuant, mode: RequantMode, channel: np.ndarray | int) -> np.ndarray:
    """The requantized codes of int64 accumulators `acc` whose output channels are `channel`.

    The runtime's formula itself (not the tables): the reference the tables are checked against.
    """
    acc = np.asarray(acc, dtype=np.int64)
    if quant.pool_divisor:  # an int8 average pool: the code of the window's mean
        if mode is RequantMode.TFLITE:
            return (mean_codes if quant.pool_mean else average_codes)(acc, quant)
        return pool_codes(acc, quant)
    channels = np.broadcast_to(np.asarray(channel), acc.shape)
    out = quant.requantized
    low, high = clamp_codes(quant, mode)
    if mode is not RequantMode.TFLITE:  # onnxruntime's formula, and XNNPACK's (the same float32 steps)
        multipliers = ort_multiplier(quant.input.scale, quant.channel_scales(), out.scale)
        with np.errstate(over="ignore"):
            scaled = (acc.astype(np.float32) * multipliers[channels]).astype(np.float32)
        # beyond the code range the clamp below decides: keep the cast to int64 defined (inf, 1e30)
        scaled = np.clip(np.rint(scaled), -(1 << 40), 1 << 40)
        codes = scaled.astype(np.int64) + out.zero_point
    else:
        codes = np.empty(acc.shape, dtype=np.int64)
        scales = quant.channel_scales()
        for c in np.unique(channels):
            where = channels == c
            real = float(np.float32(quant.input.scale)) * float(scales[c]) / float(np.float32(out.scale))
            if quant.double_requant:
                codes[where] = double_requantize(acc[where], real) + out.zero_point
                continue
            multiplier, shift = quantize_multiplier(real)
            scaled = multiply_by_quantized_multiplier(acc[where], multiplier, shift, quant.what)
            codes[where] = scaled + out.zero_point
    codes = np.clip(codes, low, high)
    if quant.lookup is not None:  # a table on the requantized codes (sigmoid): still monotone in acc
        codes = apply_lookup(codes, quant.lookup, quant.output)
    return codes


def accumulator_bounds(quant: MacQuant, taps_abs_weight_sum: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel, bounds of acc over every input code: bias +- sum|w| * max|x - z_in|.

    `taps_abs_weight_sum[c]`: the largest sum of |w| over the products of one neuron of channel c.
    :raises RangeError: the int32 accumulator could overflow (the C would then wrap).
    """
    x_quant: TensorQuant = quant.input
    spread = max(x_quant.zero_point - x_quant.code.qmin, x_quant.code.qmax - x_quant.zero_point)
    reach = np.asarray(taps_abs_weight_sum, dtype=np.int64) * spread
    lo, hi = quant.bias - reach, quant.bias + reach
    if np.any(lo < INT32_MIN + 1) or np.any(hi > INT32_MAX - 1):
        channel = int(np.argmax(np.maximum(-lo, hi)))
        raise RangeError(
            f"{quant.what}, output channel {channel}: the int32 accumulator can overflow "
            f"(|bias| + sum|w| * {spread} reaches {int(max(-lo[channel], hi[channel]))})"
        )
    return lo, hi


def thresholds(quant: MacQuant, mode: RequantMode, acc_lo: np.ndarray, acc_hi: np.ndarray) -> np.ndarray:
    """int64 (channels, 255): t[c, k] = the smallest acc in [acc_lo[c], acc_hi[c]] whose code is at
    least qmin + k + 1; INT32_MIN when every such acc reaches it, INT32_MAX when none does.

    Exact: a vectorised binary search over the integers of the range, valid because requantization
    is non-decreasing in acc.
    """
    channels = quant.weights.shape[0]
    qmin = quant.output.code.qmin
    targets = qmin + 1 + np.arange(LEVELS)[None, :]
    lo = np.broadcast_to(np.asarray(acc_lo, dtype=np.int64)[:, None], (channels, LEVELS)).copy()
    hi = np.broadcast_to(np.asarray(acc_hi, dtype=np.int64)[:, None], (channels, LEVELS)).copy()
    channel = np.broadcast_to(np.arange(channels)[:, None], (channels, LEVELS))
    reached_at_lo = requantize(lo, quant, mode, channel) >= targets
    reached_at_hi = requantize(hi, quant, mode, channel) >= targets
    # invariant: code(hi) >= target where searched; find the smallest such acc in (lo, hi]
    search = ~reached_at_lo & reached_at_hi
    while True:
        open_ = search & (hi - lo > 1)
        if not open_.any():
            break
        middle = lo + (hi - lo) // 2
        above = requantize(middle, quant, mode, channel) >= targets
        hi = np.where(open_ & above, middle, hi)
        lo = np.where(open_ & ~above, middle, lo)
    table = np.where(reached_at_lo, INT32_MIN, np.where(reached_at_hi, hi, INT32_MAX))
    return table.astype(np.int64)


_ROW_SPAN = 1 << 33  # wider than the int32 range plus one on each side


def thresholds_reached(acc: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Per neuron j, how many entries of its sorted row table[j] (int32 values) are <= acc[..., j]:
    one `searchsorted` over the rows laid end to end, row j shifted by j * 2^33 so that the rows
    stay apart and sorted (acc is first clipped to one past the int32 range, which keeps every
    count)."""
    acc = np.clip(np.asarray(acc, dtype=np.int64), INT32_MIN - 1, INT32_MAX + 1)
    n, width = table.shape
    offsets = np.arange(n, dtype=np.int64) * _ROW_SPAN
    flat = (np.asarray(table, dtype=np.int64) + offsets[:, None]).ravel()
    return np.searchsorted(flat, acc + offsets, side="right") - np.arange(n, dtype=np.int64) * width


def apply_thresholds(acc: np.ndarray, table: np.ndarray, qmin: int) -> np.ndarray:
    """Codes of accumulators acc (batch, n) through per-neuron rows of `table` (n, 255) or one row."""
    acc = np.asarray(acc, dtype=np.int64)
    if table.shape[0] == 1:
        return qmin + np.searchsorted(table[0], acc, side="right")
    return qmin + thresholds_reached(acc, table)
