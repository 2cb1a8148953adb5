"""Independent exact evaluation for the network-level tests: a layer's linear map as a dense matrix
(a pool's windows included), the C's lookup tables read in exact arithmetic, and a network's real
outputs computed operation by operation in `Fraction`s (what `netlevel.exact.real_outputs` must
reproduce with its own integer arithmetic)."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from qverify.network import Activation, AveragePool2D, MaxPool2D
from qverify.quant import QuantizedNetwork

TABLES = (Activation.SIGMOID, Activation.TANH)


def layer_matrix(layer) -> tuple[np.ndarray, np.ndarray]:
    """A layer's linear map as a dense matrix and bias, in the implementation's numbers (an average
    pool: each neuron's reciprocal on its window)."""
    if isinstance(layer.source, AveragePool2D):
        windows = layer.source.windows()
        matrix = np.zeros((layer.n_out, layer.n_in), dtype=layer.weights.dtype)
        rows = np.repeat(np.arange(layer.n_out), windows.count)
        matrix[rows, windows.inputs[windows.valid]] = layer.weights[rows]
        return matrix, np.zeros(layer.n_out, dtype=layer.weights.dtype)
    return layer.matrix, layer.expanded_bias()


@functools.cache
def table_constants(qnet: QuantizedNetwork, activation: Activation):
    """(a, scale, entries, sat_lo, sat_hi) of the C's table as exact rationals."""
    lut = qnet.lut_for(activation)
    if qnet.is_fixed:
        unit = Fraction(1, qnet.number.scale)
        a, table = lut.half_range_q * unit, [int(v) * unit for v in lut.table]
        return a, Fraction(lut.n_entries - 1) / (2 * a), table, int(lut.sat_lo) * unit, int(lut.sat_hi) * unit
    dtype = qnet.number.dtype
    a, scale = Fraction(float(dtype(lut.half_range))), Fraction(float(dtype(lut.float_scale)))
    table = [Fraction(float(v)) for v in np.asarray(lut.table, dtype=dtype)]
    return a, scale, table, Fraction(float(dtype(lut.sat_lo))), Fraction(float(dtype(lut.sat_hi)))


def exact_table(qnet: QuantizedNetwork, activation: Activation, z: Fraction) -> Fraction:
    """The C's table function at a real z, read in exact arithmetic: index floor((z + a) scale +
    1/2), at most n - 1, inside [-a, a]; the saturation values outside."""
    a, scale, table, low, high = table_constants(qnet, activation)
    if z < -a:
        return low
    if z > a:
        return high
    return table[min(math.floor((z + a) * scale + Fraction(1, 2)), len(table) - 1)]


def exact_point(qnet: QuantizedNetwork, rng: np.random.Generator) -> tuple[np.ndarray, list[Fraction]]:
    """A random implementation input in [-1, 1] (words of <K,8>, or float values) and its reals."""
    x = rng.uniform(-1, 1, qnet.n_inputs)
    if qnet.is_fixed:
        words = np.round(x * qnet.number.scale).astype(np.int64)
        return words, [Fraction(int(v), qnet.number.scale) for v in words]
    values = x.astype(np.float32).astype(np.float64)
    return values, [Fraction(float(v)) for v in values]


def reference_outputs(qnet: QuantizedNetwork, reals: list[Fraction]) -> list[Fraction]:
    """The real network (the C's constants as rationals) on exact inputs, one operation at a time."""
    scale = qnet.number.scale if qnet.is_fixed else None

    def constant(value) -> Fraction:
        return Fraction(int(value), scale) if scale is not None else Fraction(float(value))

    for layer in qnet.layers:
        if isinstance(layer.source, MaxPool2D):
            windows = layer.source.windows()
            reals = [max(reals[i] for i in windows.inputs[o, : windows.count[o]]) for o in range(layer.n_out)]
            continue
        matrix, bias = layer_matrix(layer)
        pre = [
            sum(
                (constant(matrix[j, i]) * reals[i] for i in range(len(reals)) if matrix[j, i]),
                constant(bias[j]),
            )
            for j in range(layer.n_out)
        ]
        if layer.activation is Activation.RELU:
            reals = [max(v, Fraction(0)) for v in pre]
        elif layer.activation in TABLES:
            reals = [exact_table(qnet, layer.activation, z) for z in pre]
        else:
            reals = pre
    return reals
