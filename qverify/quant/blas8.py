"""Exact int8 MAC layers on a batch through float BLAS: convolutions as im2col + one matrix product
per group, dense layers as one matrix product, requantization per output channel.

Why: the simulator's general path gathers every product slot of every neuron, a (batch, n_out,
products) int64 array: for a CIFAR-10 ResNet-20 that is 19 MB per image in the widest layer and ran
at 1-20 images/s. An int8 accumulator is an exact integer sum, so any order gives it; the products
w * (x - z_in) are integers below 2^15 in magnitude, exact in float32 and float64, and a float
matrix product of them is exact -- whatever order, blocking or fused multiply-add the BLAS uses --
as long as every partial sum is an integer the type represents exactly. Every partial sum of a
neuron lies within sum |w| * max |x - z_in| over its kernel (`exactness_bound`): below 2^24 the
layer runs in float32 (twice BLAS's float64 speed), below 2^53 in float64; int8 layers always meet
the latter (their accumulators are proven to fit int32, `affine.accumulator_bounds`), and anything
else keeps the gathered int64 path (`use_blas` says None).

The accumulators then go through the layer's threshold table per output channel (one
`searchsorted` on one 255-entry row per channel), the same table and the same counts as
`affine.apply_thresholds`: the codes are bit for bit the general path's (tests/test_simulate_blas8.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qverify.network.im2col import conv_sums
from qverify.network.operators import operator_of
from qverify.quant.buckets import BucketTable, made_once

if TYPE_CHECKING:
    from qverify.quant.network import QuantizedLayer

FLOAT32_EXACT = 1 << 24  # every integer of magnitude up to 2^24 is a float32
FLOAT64_EXACT = 1 << 53
# im2col values per matrix product (16 MB of float32, 32 MB of float64): a block of images at a time,
# so the columns stay small whatever the batch (the simulator's memory is the codes, not these)
BLOCK_VALUES = 1 << 22


def exactness_bound(weights: np.ndarray, input_zero: int, qmin: int, qmax: int) -> int:
    """The largest |partial sum| of products w * (x - z_in) of any output channel over every input
    code in [qmin, qmax]: sum |w| over the channel's kernel times the widest |x - z_in|."""
    spread = max(input_zero - qmin, qmax - input_zero)
    per_channel = np.abs(np.asarray(weights, dtype=np.int64)).reshape(weights.shape[0], -1).sum(axis=1)
    return int(per_channel.max(initial=0)) * spread


def blas_dtype(layer: QuantizedLayer) -> type[np.floating] | None:
    """The float type in which the layer's products sum exactly (float32 or float64), or None when
    the layer is not a plain int8 MAC (a join, a max pool, x86's pair-saturating dense sums) or no
    float type is wide enough."""
    tables = layer.int8
    if tables is None or tables.table is None or tables.paired is not None:
        return None
    if not layer.is_mac:
        return None
    code = tables.quant.input.code
    bound = exactness_bound(layer.weights, tables.input_zero, code.qmin, code.qmax)
    if bound < FLOAT32_EXACT:
        return np.float32
    if bound < FLOAT64_EXACT:
        return np.float64
    return None


def requantized(acc: np.ndarray, table: np.ndarray, qmin: int) -> np.ndarray:
    """Codes of accumulators through a threshold table: acc (batch, channels, positions) with one
    row per channel, or any acc with one row, or (batch, n) with one row per neuron -- the number
    of thresholds <= acc, as `affine.apply_thresholds` counts them (`BucketTable`, else a search)."""
    buckets = made_once(table, "buckets", BucketTable.of)
    if buckets is not None:
        codes = buckets.counts(acc)
    elif table.shape[0] == 1:
        codes = np.searchsorted(table[0], acc, side="right")
    else:
        codes = np.empty(acc.shape, dtype=np.int64)
        for row in range(table.shape[0]):
            codes[:, row] = np.searchsorted(table[row], acc[:, row], side="right")
    codes += qmin
    return codes


def blas_layer_codes(layer: QuantizedLayer, codes: np.ndarray, dtype: type[np.floating]) -> np.ndarray:
    """The output codes (batch, n_out) int64 of an int8 convolution or dense layer on input codes
    (batch, n_in): acc = bias + sum w (x - z_in) summed exactly in `dtype` (`blas_dtype`), then the
    threshold table. Images go in blocks of at most BLOCK_VALUES im2col values."""
    tables = layer.int8
    source = layer.source
    bias = np.asarray(layer.bias, dtype=np.int64)
    out = np.empty((len(codes), layer.n_out), dtype=np.int64)
    per_image, channels, positions = operator_of(source).blas_geometry(source)
    block = max(1, BLOCK_VALUES // max(per_image, 1))
    kernel_t = np.asarray(layer.weights).astype(dtype).T if layer.is_dense else None
    buckets = made_once(tables.table, "sums", lambda table: _sum_buckets(layer, channels))
    for start in range(0, len(codes), block):
        part = codes[start : start + block]
        centred = (part - tables.input_zero).astype(dtype)
        if kernel_t is not None:
            sums = (centred @ kernel_t)[:, :, None]  # (one row per neuron: positions 1)
        else:
            sums = conv_sums(source, layer.weights, centred.reshape(len(part), *source.input_shape), dtype)
        acc = sums.astype(np.int64)
        into = out[start : start + len(part)].reshape(len(part), channels, positions)
        if buckets is not None:  # the table shifted by the bias reads the sums themselves
            buckets.counts(acc, out=into)
        else:
            acc += bias[None, :, None]
            into[...] = requantized(acc, tables.table, tables.code.qmin)
    return out


def _sum_buckets(layer: QuantizedLayer, channels: int) -> BucketTable | None:
    """The layer's threshold table as buckets over its sums without the bias, one row per output
    channel (a per-tensor row repeated: the biases differ), counting from the code minimum."""
    tables = layer.int8
    table = np.broadcast_to(tables.table, (channels, tables.table.shape[1]))
    return BucketTable.of(table, less=np.asarray(layer.bias, dtype=np.int64), base=tables.code.qmin)
