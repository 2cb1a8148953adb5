"""The float64 reference semantics of a `Network` (ideal arithmetic up to float64 rounding)."""

from __future__ import annotations

import numpy as np

from qverify.network.model import Activation, Network


def apply_activation(activation: Activation, values: np.ndarray) -> np.ndarray:
    """The real activation functions, as the float reference (and the LUT design) use them."""
    if activation is Activation.RELU:
        return np.maximum(values, 0.0)
    if activation is Activation.SIGMOID:
        return 0.5 * (1.0 + np.tanh(0.5 * values))  # = 1/(1+e^-x), without overflow warnings
    if activation is Activation.TANH:
        return np.tanh(values)
    return values


def evaluate_core(net: Network, x_norm: np.ndarray) -> np.ndarray:
    """Normalised inputs (n_in,) or (batch, n_in) to normalised outputs, float64."""
    values = np.asarray(x_norm, dtype=np.float64)
    for layer in net.layers:
        values = apply_activation(layer.activation, values @ layer.weights.T + layer.bias)
    return values


def evaluate(net: Network, x: np.ndarray) -> np.ndarray:
    """Raw inputs to raw outputs, as the NNet reference does: clip, normalise, layers, scale back."""
    x = np.asarray(x, dtype=np.float64)
    if net.input_norm is not None:
        x = net.input_norm.apply(x)
    y = evaluate_core(net, x)
    if net.output_norm is not None:
        y = net.output_norm.apply(y)
    return y
