"""The float64 reference semantics of a `Network` (ideal arithmetic up to float64 rounding)."""

from __future__ import annotations

import numpy as np

from qverify.network.im2col import conv_values
from qverify.network.joins import Add, Concat, Permute
from qverify.network.model import Activation, Network, gather_inputs
from qverify.network.spatial import AveragePool2D, Conv2D, MaxPool2D

# A convolution whose dense matrix would be larger than this runs as im2col (`qverify.network.im2col`):
# a CIFAR-10 ResNet's 16x32x32 layer is a 2 GB matrix. Smaller ones keep the matrix product.
DENSE_MATRIX_BYTES = 1 << 26


def apply_activation(activation: Activation, values: np.ndarray) -> np.ndarray:
    """The real activation functions, as the float reference (and the LUT design) use them."""
    if activation is Activation.RELU:
        return np.maximum(values, 0.0)
    if activation is Activation.RELU6:
        return np.minimum(np.maximum(values, 0.0), 6.0)
    if activation is Activation.SIGMOID:
        return 0.5 * (1.0 + np.tanh(0.5 * values))  # = 1/(1+e^-x), without overflow warnings
    if activation is Activation.TANH:
        return np.tanh(values)
    return values


def pool_values(layer: MaxPool2D | AveragePool2D, values: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """Max or mean of each window of a batch (batch, n_in) -> (batch, n_out), in `dtype`.

    The mean is the exact sum divided by the divisor (the real semantics; implementations multiply
    by a rounded reciprocal, see `qverify.quant.simulate`)."""
    windows = layer.windows()
    gathered = values[:, windows.inputs]  # (batch, n_out, width)
    valid = windows.valid[None]
    if isinstance(layer, MaxPool2D):
        return np.where(valid, gathered, -np.inf).max(axis=2).astype(dtype)
    total = np.where(valid, gathered, 0).sum(axis=2)
    return (total / layer.divisors()).astype(dtype)


def apply_layer(layer, values: np.ndarray) -> np.ndarray:
    """One node of the float64 reference on a batch (batch, n_in): its producers' outputs
    concatenated."""
    if isinstance(layer, (MaxPool2D, AveragePool2D)):
        return pool_values(layer, values)
    if isinstance(layer, Concat):
        return values
    if isinstance(layer, Permute):
        return values[:, layer.order]
    if isinstance(layer, Add):
        return apply_activation(layer.activation, values.reshape(len(values), layer.count, -1).sum(axis=1))
    if isinstance(layer, Conv2D) and layer.n_out * layer.n_in * 8 > DENSE_MATRIX_BYTES:
        return apply_activation(layer.activation, conv_values(layer, values) + layer.expanded_bias())
    return apply_activation(layer.activation, values @ layer.matrix.T + layer.expanded_bias())


def evaluate_core(net: Network, x_norm: np.ndarray) -> np.ndarray:
    """Normalised inputs (n_in,) or (batch, n_in) to normalised outputs, float64."""
    values = np.asarray(x_norm, dtype=np.float64)
    single = values.ndim == 1
    x = np.atleast_2d(values)
    outputs: list[np.ndarray] = []
    for index, layer in enumerate(net.layers):
        outputs.append(apply_layer(layer, gather_inputs(net.wiring, index, x, outputs)))
    return outputs[-1][0] if single else outputs[-1]


def evaluate(net: Network, x: np.ndarray) -> np.ndarray:
    """Raw inputs to raw outputs, as the NNet reference does: clip, normalise, layers, scale back."""
    x = np.asarray(x, dtype=np.float64)
    if net.input_norm is not None:
        x = net.input_norm.apply(x)
    y = evaluate_core(net, x)
    if net.output_norm is not None:
        y = net.output_norm.apply(y)
    return y
