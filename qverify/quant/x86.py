"""onnxruntime's x86 u8 x s8 kernels without AVX-VNNI: the `int8-x86` variant of the int8 format.

On x86 CPUs without AVX-VNNI (AVX2 only: Haswell to Comet Lake, Zen 1-3), onnxruntime's MLAS
multiplies uint8 activations by int8 weights with `vpmaddubsw`, which adds two neighbouring
products into an int16 *with saturation*; `vpmaddwd` by ones then adds those int16 pair sums into
int32. Its packing of the weights (`MlasGemmU8S8CopyPackBAvx2`) lays K out in groups of four, so
the pairs are the products of inputs (0, 1), (2, 3), ...; a K that is not a multiple of 4 is padded
with zero weights (an odd last product is alone in its pair). The zero points are applied outside
the pair sums, exactly in int32: with uint8 operands u_k,

    acc = bias - (z_in + offset) * sum_k w_k + sum_pairs sat16(w_a u_a + w_b u_b)

which equals the exact `bias + sum_k w_k (x_k - z_in)` whenever no pair sum leaves [-32768, 32767].
Which layers take this path (measured under qemu's Haswell model with onnxruntime 1.32: the
simulator below reproduces onnxruntime on every point of a 101 x 101 grid of 21 2-8-8-3 models):

- uint8 activations (QDQ or QOperator): u = x (offset 0);
- int8 activations in a QDQ model: onnxruntime converts them to uint8 on x86 (u = x + 128);
- int8 activations in a QOperator model: int8 x int8 kernels, whose pair sums cannot saturate
  (2 * 128 * 127 < 2^15): exact.

A pair can saturate only when |w_a| + |w_b| > 128 with both weights of one sign (255 * 129 >
32767); `--reduce-range` (7-bit weights) rules it out. Dense layers are modelled pair by pair.
Convolutions run MLAS's symmetric convolution kernels, whose pairing is not modelled: a convolution
whose weights could saturate some pair (two same-signed weights of magnitude sum > 128 anywhere in
its kernel) is refused under `int8-x86`; one whose weights cannot is exact in both variants.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.network import CodeType, MacQuant, QuantForm
from qverify.network.operators import operator_of

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
U8_MAX = 255


def operand_offset(quant: MacQuant) -> int | None:
    """What onnxruntime's x86 kernels add to the layer's input codes to get the uint8 operand of
    `vpmaddubsw`; None when the layer runs int8 x int8 kernels (no saturation)."""
    if quant.input.code is CodeType.UINT8:
        return 0
    return 128 if quant.form is QuantForm.QDQ else None


def _pair_extremes(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per neuron and pair, the smallest and largest pair sum over uint8 operands in [0, 255]:
    weights (n_out, n_in) -> two (n_out, ceil(n_in / 2)) arrays."""
    padded = _paired(np.asarray(weights, dtype=np.int64))
    low = U8_MAX * np.minimum(padded, 0).sum(axis=2)
    high = U8_MAX * np.maximum(padded, 0).sum(axis=2)
    return low, high


def _paired(values: np.ndarray) -> np.ndarray:
    """(..., n) -> (..., ceil(n / 2), 2): neighbouring entries as pairs, an odd last one with 0."""
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros_like(values[..., :1])], axis=-1)
    return values.reshape(*values.shape[:-1], -1, 2)


def dense_can_saturate(weights: np.ndarray) -> bool:
    """Can some pair sum of a dense layer's int8 weights leave int16 for some uint8 operands?"""
    low, high = _pair_extremes(weights)
    return bool(np.any(low < INT16_MIN) or np.any(high > INT16_MAX))


def conv_can_saturate(weights: np.ndarray) -> bool:
    """Can two weights of one output channel's kernel, paired in any order, leave int16?"""
    flat = np.asarray(weights, dtype=np.int64).reshape(weights.shape[0], -1)
    if flat.shape[1] < 2:
        return False
    ordered = np.sort(flat, axis=1)
    high = U8_MAX * np.maximum(ordered[:, -2:], 0).sum(axis=1)
    low = U8_MAX * np.minimum(ordered[:, :2], 0).sum(axis=1)
    return bool(np.any(low < INT16_MIN) or np.any(high > INT16_MAX))


@dataclass(frozen=True, slots=True, eq=False)
class PairedSums:
    """A dense layer as onnxruntime's AVX2 u8 x s8 kernel computes it: `offset` turns input codes
    into the uint8 operands, `bias` holds bias - (z_in + offset) * sum_k w_k per neuron (exact
    int32), and the products of inputs (2i, 2i + 1) are summed with int16 saturation."""

    offset: int
    bias: np.ndarray  # int64 (n_out,)

    def accumulate(self, weights: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """int64 accumulators (batch, n_out) of input codes (batch, n_in)."""
        operands = _paired(np.asarray(codes, dtype=np.int64) + self.offset)  # (batch, pairs, 2)
        paired = _paired(np.asarray(weights, dtype=np.int64))  # (n_out, pairs, 2)
        sums = np.einsum("bpk,jpk->bjp", operands, paired)
        return self.bias[None, :] + np.clip(sums, INT16_MIN, INT16_MAX).sum(axis=2)

    def bounds(self, weights: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Accumulator bounds for input codes in [lo, hi] (saturation is monotone in the pair sum)."""
        paired = _paired(np.asarray(weights, dtype=np.int64))  # (n_out, pairs, 2)
        low = paired * _paired(np.asarray(lo, dtype=np.int64) + self.offset)[None]
        high = paired * _paired(np.asarray(hi, dtype=np.int64) + self.offset)[None]
        pair_lo = np.minimum(low, high).sum(axis=2)
        pair_hi = np.maximum(low, high).sum(axis=2)
        return (
            self.bias + np.clip(pair_lo, INT16_MIN, INT16_MAX).sum(axis=1),
            self.bias + np.clip(pair_hi, INT16_MIN, INT16_MAX).sum(axis=1),
        )


def saturation_risks(layers, quants) -> list[str]:
    """One line per layer whose int8 x86 execution can saturate a pair sum (empty: the x86 variant
    and the exact int8 semantics compute the same function)."""
    lines = []
    for index, (layer, quant) in enumerate(zip(layers, quants), start=1):
        if not isinstance(quant, MacQuant) or operand_offset(quant) is None:
            continue
        weights = quant.weights
        if operator_of(layer).can_saturate_pairs(weights):
            lines.append(
                f"layer {index} ({layer.describe()}): weight pairs can saturate an int16 pair sum in onnxruntime's "
                "x86 kernels without AVX-VNNI (uint8 x int8)"
            )
    return lines
