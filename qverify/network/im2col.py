"""A convolution as im2col and one matrix product per group: how large convolutions are run.

The dense (n_out, n_in) matrix of a CIFAR-10 convolution (16x32x32 -> 16x32x32: 16,384 x 16,384,
2 GB of float64) and the gathered products of every neuron (19 MB per image) are both too large
at that scale; the columns of a block of images (each output position's window, laid out as a row)
times the kernel is BLAS's work. Used by the int8 simulator's exact sums (`qverify.quant.blas8`)
and the float64 reference (`evaluate.apply_layer`) for convolutions whose dense matrix is large.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from qverify.network.spatial import Conv2D


def conv_sums(conv: Conv2D, weights: np.ndarray, inputs: np.ndarray, dtype: type[np.floating]) -> np.ndarray:
    """sum w * x of every output neuron of a block of images, no bias: x (batch, C, H, W) in
    `dtype` -> (batch, out channels, out positions) in `dtype`. Padding adds nothing (a zero
    product; the gathered paths skip those products). The columns are built from a channels-last
    copy, so that each window row copies contiguous channels."""
    batch, channels, height, width = inputs.shape
    top, left, bottom, right = conv.pads
    padded = np.zeros((batch, height + top + bottom, width + left + right, channels), dtype=dtype)
    padded[:, top : top + height, left : left + width, :] = inputs.transpose(0, 2, 3, 1)
    out_channels, out_h, out_w = conv.output_shape
    groups, (kh, kw), (sh, sw) = conv.groups, conv.kernel, conv.strides
    group_in, group_out = channels // groups, out_channels // groups
    # (batch, OH, OW, C, KH, KW) -> (G, batch * OH * OW, KH * KW * Cg)
    windows = sliding_window_view(padded, (kh, kw), axis=(1, 2))[:, ::sh, ::sw][:, :out_h, :out_w]
    windows = windows.reshape(batch, out_h, out_w, groups, group_in, kh, kw)
    columns = np.ascontiguousarray(windows.transpose(3, 0, 1, 2, 5, 6, 4)).reshape(
        groups, batch * out_h * out_w, kh * kw * group_in
    )
    kernel = weights.reshape(groups, group_out, group_in, kh, kw).transpose(0, 3, 4, 2, 1)
    kernel = kernel.astype(dtype).reshape(groups, kh * kw * group_in, group_out)
    sums = np.matmul(columns, kernel)  # (G, batch * OH * OW, Og)
    sums = sums.reshape(groups, batch, out_h * out_w, group_out).transpose(1, 0, 3, 2)
    return sums.reshape(batch, out_channels, out_h * out_w)


def conv_values(conv: Conv2D, values: np.ndarray, block_values: int = 1 << 22) -> np.ndarray:
    """The float64 sums (no bias) of a convolution on a batch (batch, n_in) -> (batch, n_out), a
    block of images at a time (at most `block_values` column values, 32 MB)."""
    _, out_h, out_w = conv.output_shape
    per_image = out_h * out_w * conv.group_in_channels * conv.kernel[0] * conv.kernel[1]
    block = max(1, block_values // per_image)
    sums = np.empty((len(values), conv.n_out))
    for start in range(0, len(values), block):
        part = np.asarray(values[start : start + block], dtype=np.float64)
        inputs = part.reshape(len(part), *conv.input_shape)
        sums[start : start + len(part)] = conv_sums(conv, conv.weights, inputs, np.float64).reshape(
            len(part), -1
        )
    return sums
