"""int8 joins as onnxruntime computes them, each stated as an integer staircase.

**Add** (com.microsoft QLinearAdd, and the QDQ `DequantizeLinear x2 -> Add -> QuantizeLinear` that
onnxruntime's optimiser fuses into it). Its x86 kernel (AVX2 with FMA: what both an AVX2-only and an
AVX-512/VNNI machine run) computes each output from the two input codes a, b in float32:

    rA = f32(sA / sC),  rB = f32(sB / sC)
    fixed = f32(zC - fma(rA, zA, f32(rB * zB)))       (a constant; the compiler fuses it too)
    t = fma(a, rA, fma(b, rB, fixed))                  (two fused multiply-adds, b's first)
    code = saturate(round half to even(t))             (int32, then int16, then the code type;
                                                        a t beyond int32 converts to INT32_MIN)

An Add that onnxruntime leaves unfused (`qverify.io.onnx_fusion`) is QuantizeLinear of the float32
sum of the two DequantizeLinear values, also a function of the two codes.

Measured against onnxruntime 1.32 on all 65,536 code pairs of 60 random parameter sets, int8 and
uint8, on an AVX-512 VNNI machine and under `qemu-x86_64 -cpu Haswell` (AVX2): equal on every pair;
the unfused orders and the other operand order differ on 5-15 % of the parameter sets
(`tests/test_int8_joins.py` checks the formula against onnxruntime exhaustively).

The code is a function of the pair (a, b), which no single accumulator of the int8 layers carries.
But the pairs are few: `add_staircase` looks for small integer weights (MA, MB) proportional to
(rA, rB) such that the code is a non-decreasing function of acc = MA a + MB b over all 65,536 pairs
(the weights of growing precision, 2 to 21 bits, until the enumeration confirms it). The Add is then
an int8 layer like the others -- an exact integer accumulator and a threshold table -- for the
simulator, the C, the lifter and the network level alike, and it is *exactly* onnxruntime's
function on every input, not an approximation of it. A parameter set with no such weights (none
met in the quantized models tried) is refused, naming the layer.

**Concat** (QLinearConcat, and the QDQ `DequantizeLinear -> Concat -> QuantizeLinear`): an input
quantized as the output is copied; another is requantized code by code, QuantizeLinear(out,
DequantizeLinear(in, c)) in float32 -- QLinearConcat's lookup table, and the QDQ graph's own
arithmetic -- a non-decreasing table of the code, stated as a threshold table on acc = c.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.errors import UnsupportedError
from qverify.network.qparams import JoinQuant, TensorQuant
from qverify.quant.affine import INT32_MAX, INT32_MIN, LEVELS

_F32 = np.float32
MAX_WEIGHT_BITS = 21  # |MA|, |MB| < 2^21: |acc| <= 2 * 2^21 * 255 < 2^31 (int32 in the C)


def add_codes(a: np.ndarray, b: np.ndarray, quant: JoinQuant) -> np.ndarray:
    """onnxruntime's QLinearAdd of codes a, b (int64 arrays) as int64 codes (the formula above),
    or its unfused float path: QuantizeLinear(f32(DequantizeLinear(a) + DequantizeLinear(b)))."""
    (qa, qb), out = quant.inputs, quant.output
    if quant.float_path:
        total = (qa.dequantize(a) + qb.dequantize(b)).astype(np.float32)
        return out.quantize(total)
    ratio_a = _F32(_F32(qa.scale) / _F32(out.scale))
    ratio_b = _F32(_F32(qb.scale) / _F32(out.scale))
    # float64 holds each product of a float32 and a small integer exactly: one rounding to float32
    # after the exact sum is a fused multiply-add
    zb_part = _F32(np.float64(ratio_b) * qb.zero_point)
    fixed = _F32(np.float64(out.zero_point) - _F32(np.float64(ratio_a) * qa.zero_point + np.float64(zb_part)))
    inner = (np.asarray(b, dtype=np.float64) * np.float64(ratio_b) + np.float64(fixed)).astype(np.float32)
    total = (np.asarray(a, dtype=np.float64) * np.float64(ratio_a) + inner.astype(np.float64)).astype(
        np.float32
    )
    total = total.astype(np.float64)
    rounded = np.rint(total)
    overflow = (rounded >= 2.0**31) | (rounded < -(2.0**31))  # cvtps2dq's "integer indefinite"
    rounded = np.where(overflow, -(2.0**31), rounded)
    code = out.code
    return np.clip(rounded, code.qmin, code.qmax).astype(np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class JoinStaircase:
    """A join as int8 layers state it: acc = sum_i weights[i] * (code of input i), exact, and
    code = qmin + #{k : table[row, k] <= acc} (`affine.apply_thresholds`), one row per input
    (`rows[i]`; an Add has one row for its one output)."""

    weights: np.ndarray  # int64 per input
    table: np.ndarray  # int64 (rows, 255)
    acc_lo: np.ndarray  # int64 per row: the accumulators the inputs' code ranges reach
    acc_hi: np.ndarray


def _table_of(acc: np.ndarray, codes: np.ndarray, qmin: int) -> np.ndarray:
    """Thresholds of a non-decreasing map acc -> codes: t[k] = the smallest acc whose code is at
    least qmin + k + 1; INT32_MIN where every acc reaches it, INT32_MAX where none does."""
    levels = qmin + 1 + np.arange(LEVELS)
    reached = codes[None, :] >= levels[:, None]
    smallest = np.where(reached, acc[None, :], INT32_MAX).min(axis=1)
    return np.where(reached.all(axis=1), INT32_MIN, smallest).astype(np.int64)


def _non_decreasing(acc: np.ndarray, codes: np.ndarray) -> bool:
    """Is codes a function of acc that never falls as acc grows (equal acc, equal code)?"""
    order = np.argsort(acc, kind="stable")
    acc, codes = acc[order], codes[order]
    steps = np.diff(codes)
    return bool(np.all(steps >= 0) and not np.any(steps[np.diff(acc) == 0] != 0))


def all_pairs(first: TensorQuant, second: TensorQuant) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(first.code.qmin, first.code.qmax + 1, dtype=np.int64)
    b = np.arange(second.code.qmin, second.code.qmax + 1, dtype=np.int64)
    grid_a, grid_b = np.meshgrid(a, b, indexing="ij")
    return grid_a.ravel(), grid_b.ravel()


def add_staircase(quant: JoinQuant, where: str) -> JoinStaircase:
    """The Add as an exact integer staircase (the module docstring), or UnsupportedError."""
    if len(quant.inputs) != 2:
        raise UnsupportedError(f"{where}: an int8 Add of {len(quant.inputs)} tensors (QLinearAdd adds two)")
    first, second = quant.inputs
    if first.code is not quant.output.code or second.code is not quant.output.code:
        raise UnsupportedError(
            f"{where}: an int8 Add of {first.code.value} and {second.code.value} codes into "
            f"{quant.output.code.value} codes (QLinearAdd's three tensors have one type)"
        )
    a, b = all_pairs(first, second)
    return pairs_staircase(quant, a, b, add_codes(a, b, quant), where, "onnxruntime's float32 arithmetic")


def pairs_staircase(
    quant: JoinQuant,
    a: np.ndarray,
    b: np.ndarray,
    codes: np.ndarray,
    where: str,
    arithmetic: str,
    stated: tuple[int, int] | None = None,
) -> JoinStaircase:
    """The staircase of a two-input Add whose output code on every pair (a, b) of the input code
    ranges is `codes` (computed by a runtime's formula, `arithmetic`): small integer weights
    (MA, MB) proportional to the scale ratios (or the runtime's own, `stated`) under which the codes
    are a non-decreasing function of acc = MA a + MB b on every pair (enumerated), or UnsupportedError."""
    first, second = quant.inputs
    ratio_a = float(_F32(_F32(first.scale) / _F32(quant.output.scale)))
    ratio_b = float(_F32(_F32(second.scale) / _F32(quant.output.scale)))
    larger = max(ratio_a, ratio_b)
    candidates = [
        np.array([round(ratio_a / larger * 2**bits), round(ratio_b / larger * 2**bits)], dtype=np.int64)
        for bits in range(2, MAX_WEIGHT_BITS + 1)
    ]
    if stated is not None and max(abs(v) for v in stated) < 1 << MAX_WEIGHT_BITS:
        candidates.insert(0, np.array(stated, dtype=np.int64))  # the runtime's own integer weights first
    for weights in candidates:
        if np.any(weights == 0):
            continue
        acc = weights[0] * a + weights[1] * b
        if _non_decreasing(acc, codes):
            table = _table_of(acc, codes, quant.output.code.qmin)[None, :]
            return JoinStaircase(weights, table, np.array([acc.min()]), np.array([acc.max()]))
    raise UnsupportedError(
        f"{where}: the int8 Add's codes ({arithmetic}) are not a non-decreasing "
        f"function of any integer combination of its inputs with weights below 2^{MAX_WEIGHT_BITS} "
        f"(scale ratios {ratio_a!r}, {ratio_b!r}); not supported"
    )


def requantize_codes(codes: np.ndarray, source: TensorQuant, target: TensorQuant) -> np.ndarray:
    """QuantizeLinear(target, DequantizeLinear(source, codes)) in float32 (QLinearConcat's table)."""
    return target.quantize(source.dequantize(codes))


def concat_staircase(quant: JoinQuant) -> JoinStaircase:
    """A Concat whose inputs are requantized: one threshold row per input on acc = its code (an
    input quantized as the output gets the identity's row)."""
    rows, lows, highs = [], [], []
    for source in quant.inputs:
        codes = np.arange(source.code.qmin, source.code.qmax + 1, dtype=np.int64)
        rows.append(_table_of(codes, requantize_codes(codes, source, quant.output), quant.output.code.qmin))
        lows.append(source.code.qmin)
        highs.append(source.code.qmax)
    count = len(quant.inputs)
    return JoinStaircase(
        np.ones(count, dtype=np.int64),
        np.array(rows, dtype=np.int64),
        np.array(lows, dtype=np.int64),
        np.array(highs, dtype=np.int64),
    )
