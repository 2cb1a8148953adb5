"""The float64 reference semantics of a `Network` (ideal arithmetic up to float64 rounding)."""

from __future__ import annotations

import numpy as np

from qverify.network.model import Activation, Network, gather_inputs
from qverify.network.operators import operator_of

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


def apply_layer(layer, values: np.ndarray) -> np.ndarray:
    """One node of the float64 reference on a batch (batch, n_in): its producers' outputs
    concatenated (the node's operator, `qverify.operators`, computes it)."""
    return apply_activation(layer.activation, operator_of(layer).forward(layer, values))


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
