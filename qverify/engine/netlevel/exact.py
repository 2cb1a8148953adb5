"""Network level: exact rational evaluation of a network with the C's constants read as reals (`--semantics
real`).

Every constant of a fixed-point or float implementation is dyadic (words * 2^-l, or a float value
m * 2^e), and so is every input the harness accepts. The real network's outputs are then dyadic too
(affine maps, pools, ReLU and the lookup tables of sigmoid and tanh -- read as the C's index
formula in exact arithmetic, `lookup` -- keep the denominator a power of two), so the evaluation runs on
Python integers scaled by a common power of two: a dense layer is one object-array matrix-vector
product of integers, a convolution or an average pool its terms per neuron gathered and summed,
exact and fast (ACAS Xu: ~2 ms a point, against ~0.1 s with `Fraction` per operation).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from qverify.errors import UnsupportedError
from qverify.network import Activation
from qverify.network.operators import operator_of
from qverify.quant import QuantizedLayer, QuantizedNetwork


@dataclass(frozen=True, slots=True, eq=False)
class _Table:
    """A lookup table read in exact arithmetic (`lookup`'s real reading of the C): index =
    floor((z + a) scale + 1/2), at most n - 1, inside [-a, a]; sat_lo below, sat_hi above."""

    a: Fraction
    scale: Fraction
    entries: tuple[Fraction, ...]
    sat_lo: Fraction
    sat_hi: Fraction
    bits: int  # every value times 2^bits is an integer

    def apply(self, values: np.ndarray, shift: int) -> tuple[np.ndarray, int]:
        """The table on z = values / 2^shift: the numerators over 2^max(shift, bits)."""
        out_shift = max(shift, self.bits)
        result = []
        for value in values:
            z = Fraction(int(value), 1 << shift)
            if z < -self.a:
                level = self.sat_lo
            elif z > self.a:
                level = self.sat_hi
            else:
                position = (z + self.a) * self.scale + Fraction(1, 2)
                level = self.entries[min(position.numerator // position.denominator, len(self.entries) - 1)]
            result.append(level.numerator * ((1 << out_shift) // level.denominator))
        return np.array(result, dtype=object), out_shift


def _table(qnet: QuantizedNetwork, activation: Activation) -> _Table:
    lut = qnet.lut_for(activation)
    number = qnet.number
    if qnet.is_fixed:
        unit = Fraction(1, number.scale)  # type: ignore[union-attr]
        a = lut.half_range_q * unit
        scale = Fraction(lut.n_entries - 1) / (2 * a)
        entries = tuple(int(v) * unit for v in lut.table)
        sat_lo, sat_hi = int(lut.sat_lo) * unit, int(lut.sat_hi) * unit
    else:
        dtype = number.dtype  # type: ignore[union-attr]
        a = Fraction(float(dtype(lut.half_range)))
        scale = Fraction(float(dtype(lut.float_scale)))
        entries = tuple(Fraction(float(v)) for v in np.asarray(lut.table, dtype=dtype))
        sat_lo, sat_hi = Fraction(float(dtype(lut.sat_lo))), Fraction(float(dtype(lut.sat_hi)))
    bits = max((v.denominator.bit_length() - 1 for v in (*entries, sat_lo, sat_hi)), default=0)
    return _Table(a, scale, entries, sat_lo, sat_hi, bits)


@dataclass(frozen=True, slots=True, eq=False)
class _DyadicLayer:
    """weights = numerators / 2^shift, bias = numerators / 2^shift (Python ints in object arrays):
    a dense matrix (n_out, n_in), or per neuron its terms (`inputs`: the input index of each of
    its `width` terms; a convolution's taps or an average pool's window, padding weighted 0)."""

    weights: np.ndarray
    bias: np.ndarray
    shift: int
    relu: bool
    inputs: np.ndarray | None = None
    maximum: np.ndarray | None = None  # a max pool: which window positions are inputs
    table: _Table | None = None  # sigmoid / tanh: the C's lookup table
    join: object = None  # a join's node (qverify.network.joins): values added, joined or moved
    relu6: bool = False  # clamped to [0, 6] (ReLU6)

    def pre_activation(self, values: np.ndarray, shift: int) -> np.ndarray:
        """(W h + b 2^shift) for h = values / 2^shift: the numerators over 2^(self.shift + shift);
        a max pool's or a join's outputs over 2^shift (self.shift is 0)."""
        if self.join is not None:  # added, joined or moved: the join's operator
            return operator_of(self.join).exact_values(self.join, values)
        if self.maximum is not None:
            windows = values[self.inputs]
            return np.array([max(row[valid]) for row, valid in zip(windows, self.maximum)], dtype=object)
        if self.inputs is None:
            products = self.weights.dot(values)
        else:
            products = (self.weights * values[self.inputs]).sum(axis=1)
        return products + self.bias * (1 << shift)


def _dyadic_bits(values: np.ndarray) -> int:
    """The smallest R >= 0 with every value * 2^R an integer (values are words or finite floats)."""
    if values.size == 0 or np.issubdtype(values.dtype, np.integer):
        return 0
    values = values.astype(np.float64)
    nonzero = values[values != 0]
    if nonzero.size == 0:
        return 0
    mantissa, exponent = np.frexp(nonzero)  # value = mantissa * 2^exponent, 0.5 <= |mantissa| < 1
    # mantissa * 2^53 is an integer; strip its trailing zeros to find the value's last bit
    integers = (mantissa * 2.0**53).astype(np.int64)
    trailing = np.array([(int(v) & -int(v)).bit_length() - 1 for v in np.abs(integers)])
    return max(0, int(np.max(53 - exponent - trailing)))


def _numerators(values: np.ndarray, bits: int, words_scale: int) -> np.ndarray:
    """values * 2^bits as Python ints; integer words are first divided by `words_scale` (2^l)."""
    if np.issubdtype(values.dtype, np.integer):
        shift = bits - (words_scale.bit_length() - 1)
        return np.array([int(v) << shift for v in values.ravel()], dtype=object).reshape(values.shape)
    mantissa, exponent = np.frexp(values.astype(np.float64).ravel())
    integers = (mantissa * 2.0**53).astype(np.int64)  # exact: value = integer * 2^(exponent - 53)
    shifts = exponent.astype(np.int64) - 53 + bits  # >= -(trailing zeros of the integer), by `bits`
    flat = [int(i) << int(k) if k >= 0 else int(i) >> int(-k) for i, k in zip(integers, shifts)]
    return np.array(flat, dtype=object).reshape(values.shape)


_ACTIVATIONS = (Activation.RELU, Activation.RELU6, Activation.IDENTITY, Activation.SIGMOID, Activation.TANH)


def _dyadic_network(qnet: QuantizedNetwork) -> tuple[_DyadicLayer, ...]:
    if qnet.is_int8:
        raise UnsupportedError("exact real outputs: int8 networks have no real reading of their constants")
    scale = qnet.number.scale if qnet.is_fixed else 1  # type: ignore[union-attr]
    return tuple(operator_of(layer.source).exact_layer(qnet, layer, scale) for layer in qnet.layers)


def _lookup(qnet: QuantizedNetwork, activation: Activation) -> _Table | None:
    return _table(qnet, activation) if activation in (Activation.SIGMOID, Activation.TANH) else None


def join_layer(qnet: QuantizedNetwork, layer: QuantizedLayer) -> _DyadicLayer:
    """A join (`qverify.network.joins`): its values added, joined or moved, then its activation."""
    if layer.activation not in _ACTIVATIONS:
        raise UnsupportedError(f"exact real outputs: {layer.activation.value} is not supported")
    empty = np.zeros(0, dtype=object)
    return _DyadicLayer(
        empty,
        empty,
        0,
        layer.activation is Activation.RELU,
        table=_lookup(qnet, layer.activation),
        join=layer.source,
        relu6=layer.activation is Activation.RELU6,
    )


def max_pool_layer(layer: QuantizedLayer) -> _DyadicLayer:
    """A max pool: the largest of each window's values."""
    windows = layer.source.windows()  # type: ignore[union-attr]
    empty = np.zeros(0, dtype=object)
    return _DyadicLayer(empty, empty, 0, False, windows.inputs, windows.valid)


def affine_layer(
    qnet: QuantizedNetwork,
    layer: QuantizedLayer,
    scale: int,
    weights: np.ndarray,
    bias: np.ndarray,
    inputs: np.ndarray | None,
) -> _DyadicLayer:
    """A dense layer, a convolution or an average pool: (weights, bias, inputs) in the
    implementation's numbers (the operator's `exact_terms`: a matrix with inputs None, or per neuron
    its terms in C order, 0 past its count, and their inputs) as integers over 2^bits."""
    if layer.activation not in _ACTIVATIONS:
        raise UnsupportedError(
            f"exact real outputs: {layer.source.describe()} with {layer.activation.value} is not supported"  # type: ignore[union-attr]
        )
    if qnet.is_fixed:
        bits = scale.bit_length() - 1
    else:
        bits = max(_dyadic_bits(weights), _dyadic_bits(bias))
    return _DyadicLayer(
        _numerators(weights, bits, scale),
        _numerators(bias, bits, scale),
        bits,
        layer.activation is Activation.RELU,
        inputs,
        table=_lookup(qnet, layer.activation),
        relu6=layer.activation is Activation.RELU6,
    )


_CACHE: dict[int, tuple[QuantizedNetwork, tuple[_DyadicLayer, ...]]] = {}


def _cached(qnet: QuantizedNetwork) -> tuple[_DyadicLayer, ...]:
    entry = _CACHE.get(id(qnet))
    if entry is None or entry[0] is not qnet:
        if len(_CACHE) >= 8:
            _CACHE.clear()
        entry = (qnet, _dyadic_network(qnet))
        _CACHE[id(qnet)] = entry
    return entry[1]


def real_outputs(qnet: QuantizedNetwork, x: np.ndarray) -> list[Fraction]:
    """The exact outputs of the real network whose constants are the implementation's (words * 2^-l
    for fixed point, the float values for IEEE formats) on the implementation input x (words or
    float values), as normalised reals: what `--semantics real` means by the C's outputs."""
    layers = _cached(qnet)
    x = np.asarray(x)
    if qnet.is_fixed:
        x_shift = qnet.number.frac_bits  # type: ignore[union-attr]
        x_values = np.array([int(v) for v in x], dtype=object)
    else:
        x_shift = _dyadic_bits(x.astype(np.float64))
        x_values = _numerators(x.astype(np.float64), x_shift, 1)
    outputs: list[tuple[np.ndarray, int]] = []
    for index, layer in enumerate(layers):
        parts = [(x_values, x_shift) if p < 0 else outputs[p] for p in qnet.wiring[index]]
        shift = max(part_shift for _, part_shift in parts)  # one denominator for the joined input
        values = np.concatenate([part * (1 << (shift - part_shift)) for part, part_shift in parts])
        # z = (W / 2^s) (h / 2^shift) + b / 2^s  =  (W h + b 2^shift) / 2^(s + shift)
        values = layer.pre_activation(values, shift)
        shift += layer.shift
        if layer.relu:
            values = np.array([max(0, v) for v in values], dtype=object)
        if layer.relu6:  # min(max(z, 0), 6) with z = v / 2^shift
            six = 6 << shift
            values = np.array([min(max(0, v), six) for v in values], dtype=object)
        if layer.table is not None:
            values, shift = layer.table.apply(values, shift)
        outputs.append((values, shift))
    values, shift = outputs[-1]
    return [Fraction(int(v), 1 << shift) for v in values]
