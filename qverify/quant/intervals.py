"""Sound interval bounds of every neuron: of the real network, and of the implemented one.

- `real_bounds`: interval bound propagation over float64 with a rigorous margin for the float64
  rounding of the bound computation itself, so the bounds hold for the exact real network.
- `implementation_bounds`: the same propagation over the implemented arithmetic. Every operation
  of the C is monotone in each operand once the overflow mode is applied (rounding, saturation,
  ReLU, the tables, IEEE round-to-nearest), so applying the operation to interval endpoints gives
  sound (and per-operation exact) bounds; a wrap that may happen widens to the whole word range.
  Partial sums follow the layout's order through `reduce_terms`, as in the C.
  `implementation_bounds_batch` does it for many boxes at once (a leading batch axis: the boxes of
  a VNN-LIB property of cases, `qverify.cases`); one box is a batch of one, the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.errors import InputError
from qverify.network import Activation, Network, apply_activation, gather_inputs
from qverify.network.operators import operator_of
from qverify.quant.fixed import FixedFormat, Overflow, round_shift
from qverify.quant.lut import lut_fixed, lut_float
from qverify.quant.mac import reduce_terms
from qverify.quant.network import Accumulation, Layout, QuantizedLayer, QuantizedNetwork

EPS64 = 2.0**-52


@dataclass(frozen=True, slots=True, eq=False)
class LayerBounds:
    """Inclusive bounds of one layer's neurons: `pre` (accumulated) and `post` (activated).

    `may_overflow[j]` (implementation bounds of fixed formats only) says that some operation of
    neuron j can leave the word range for an input in the box.
    """

    pre_lo: np.ndarray
    pre_hi: np.ndarray
    post_lo: np.ndarray
    post_hi: np.ndarray
    may_overflow: np.ndarray


def _outward(lo: np.ndarray, hi: np.ndarray, ulps: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Widen float64 bounds by a few ulps (for library functions such as tanh)."""
    return lo - ulps * np.spacing(np.abs(lo)) - 1e-300, hi + ulps * np.spacing(np.abs(hi)) + 1e-300


def real_bounds(net: Network, lo: np.ndarray, hi: np.ndarray) -> tuple[LayerBounds, ...]:
    """Bounds of the exact real network's neurons over the normalised input box [lo, hi]."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if lo.shape != (net.n_inputs,) or hi.shape != (net.n_inputs,) or np.any(lo > hi):
        raise InputError(f"input box must give {net.n_inputs} intervals with lo <= hi")
    result: list[LayerBounds] = []
    for index, layer in enumerate(net.layers):
        h_lo = gather_inputs(net.wiring, index, lo, [bounds.post_lo for bounds in result])
        h_hi = gather_inputs(net.wiring, index, hi, [bounds.post_hi for bounds in result])
        none = np.zeros(layer.n_out, dtype=bool)
        pre_lo, pre_hi = operator_of(layer).real_bounds(layer, h_lo, h_hi)
        if layer.activation is Activation.IDENTITY:  # (pools, concatenations, permutations: exact)
            result.append(LayerBounds(pre_lo, pre_hi, pre_lo, pre_hi, none))
            continue
        post_lo, post_hi = _outward(
            apply_activation(layer.activation, pre_lo), apply_activation(layer.activation, pre_hi)
        )
        if layer.activation in (Activation.RELU, Activation.RELU6, Activation.IDENTITY):
            post_lo, post_hi = (
                apply_activation(layer.activation, pre_lo),
                apply_activation(layer.activation, pre_hi),
            )
        result.append(LayerBounds(pre_lo, pre_hi, post_lo, post_hi, none))
    return tuple(result)


class _FixedIntervalArithmetic:
    """Interval versions of fxp_mult / fxp_add / the overflow mode, recording possible overflows
    (per box of the batch and neuron)."""

    def __init__(self, fmt: FixedFormat, shape: tuple[int, int]) -> None:
        self.fmt = fmt
        self.may_overflow = np.zeros(shape, dtype=bool)

    def overflow(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The overflow mode applied to neuron intervals (one per row)."""
        (lo, hi), outside = self._in_range(lo, hi)
        self.may_overflow |= outside
        return lo, hi

    def products(
        self, weights: np.ndarray, lo: np.ndarray, hi: np.ndarray, valid: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every fxp_mult(w, h) of the layer at once, from its products' operands in C order
        (`weights` (n_out, width), `lo`/`hi` (batch, n_out, width)): (batch, n_out, width) bounds,
        the overflow mode applied per product (a neuron may overflow when any of its products
        may); a slot past a neuron's products (`valid` False) is an exact 0."""
        a = round_shift(weights[None] * lo, self.fmt.frac_bits, self.fmt.rounding)
        b = round_shift(weights[None] * hi, self.fmt.frac_bits, self.fmt.rounding)
        (low, high), outside = self._in_range(np.minimum(a, b), np.maximum(a, b))
        self.may_overflow |= (outside & valid[None]).any(axis=2)
        return np.where(valid[None], low, 0), np.where(valid[None], high, 0)

    def _in_range(self, lo: np.ndarray, hi: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        fmt = self.fmt
        outside = (lo < fmt.min_q) | (hi > fmt.max_q)
        if fmt.overflow is Overflow.WRAP:
            return (np.where(outside, fmt.min_q, lo), np.where(outside, fmt.max_q, hi)), outside
        # saturate clamps; under detect, executions that overflow stop, the others are in range
        # (minimum/maximum: np.clip's dtype checks cost more than the clamp on these small arrays)
        low, high = np.int64(fmt.min_q), np.int64(fmt.max_q)
        return (np.minimum(np.maximum(lo, low), high), np.minimum(np.maximum(hi, low), high)), outside

    def add(self, x: tuple, y: tuple) -> tuple[np.ndarray, np.ndarray]:
        return self.overflow(x[0] + y[0], x[1] + y[1])


def _tap_bounds(layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray):
    """A MAC layer's products' operand bounds in C order: (batch, n_out, width) each, with the
    slots' validity (n_out, width). Only the products the C forms: a convolution's structural
    zeros are no products, and its sums cost its taps, not its dense matrix."""
    from qverify.quant.simulate import tap_inputs

    inputs_lo, valid = tap_inputs(lo, layer)
    inputs_hi, _ = tap_inputs(hi, layer)
    return inputs_lo, inputs_hi, valid


def fixed_mac_interval(layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray, qnet: QuantizedNetwork):
    """A MAC layer: the C's products and partial sums on the bounds, in the C's order."""
    fmt: FixedFormat = qnet.number  # type: ignore[assignment]
    arith = _FixedIntervalArithmetic(fmt, (lo.shape[0], layer.n_out))
    bias = layer.expanded_bias().astype(np.int64)
    if qnet.options.layout is Layout.BALANCED and qnet.options.accumulation is not Accumulation.WIDE:
        # dense layers only (quantize_network checks): the C's pairwise tree over the inputs
        weights = layer.weights.astype(np.int64)
        product_lo, product_hi = arith.products(
            weights,
            np.asarray(lo, np.int64)[:, None, :],
            np.asarray(hi, np.int64)[:, None, :],
            np.ones(weights.shape, dtype=bool),
        )
        start = np.broadcast_to(bias, (lo.shape[0], layer.n_out))
        pre = reduce_terms(
            layer.n_in, (start, start), lambda i: (product_lo[:, :, i], product_hi[:, :, i]), arith.add, True
        )
        return pre, arith.may_overflow
    inputs_lo, inputs_hi, valid = _tap_bounds(layer, np.asarray(lo, np.int64), np.asarray(hi, np.int64))
    weights = layer.tap_weights().astype(np.int64)
    if qnet.options.accumulation is Accumulation.WIDE:
        exact_lo = bias * fmt.scale + np.minimum(weights * inputs_lo, weights * inputs_hi).sum(axis=2)
        exact_hi = bias * fmt.scale + np.maximum(weights * inputs_lo, weights * inputs_hi).sum(axis=2)
        pre = arith.overflow(
            round_shift(exact_lo, fmt.frac_bits, fmt.rounding),
            round_shift(exact_hi, fmt.frac_bits, fmt.rounding),
        )
        return pre, arith.may_overflow
    product_lo, product_hi = arith.products(weights, inputs_lo, inputs_hi, valid)
    sums_lo = np.cumsum(product_lo, axis=2) + bias[None, :, None]
    sums_hi = np.cumsum(product_hi, axis=2) + bias[None, :, None]
    if sums_lo.min(initial=fmt.min_q) >= fmt.min_q and sums_hi.max(initial=fmt.max_q) <= fmt.max_q:
        return (sums_lo[:, :, -1], sums_hi[:, :, -1]), arith.may_overflow  # no partial sum leaves the range
    start = np.broadcast_to(bias, (lo.shape[0], layer.n_out))
    pre = reduce_terms(
        weights.shape[1],
        (start, start),
        lambda t: (product_lo[:, :, t], product_hi[:, :, t]),
        arith.add,
        False,
    )  # (a slot past a neuron's products adds [0, 0] to a partial sum in range: no change)
    return pre, arith.may_overflow


def float_mac_interval(layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray, qnet: QuantizedNetwork):
    """A MAC layer in the float type: each product's bounds rounded to the type, the partial sums
    rounded per addition in the C's order (rounding is monotone, so the endpoints' sums bound
    every execution's). A NaN partial sum (inf - inf) widens to the whole line, and an infinite
    bound stays infinite from there on: still sound."""
    dtype = qnet.number.dtype  # type: ignore[union-attr]
    bias = layer.expanded_bias().astype(dtype)
    start = np.broadcast_to(bias, (lo.shape[0], layer.n_out))
    with np.errstate(over="ignore", invalid="ignore"):
        if qnet.options.layout is Layout.BALANCED:  # dense layers only
            weights = layer.weights.astype(dtype)

            def product(i: int) -> tuple[np.ndarray, np.ndarray]:
                a = (weights[:, i] * lo[:, i, None]).astype(dtype)
                b = (weights[:, i] * hi[:, i, None]).astype(dtype)
                return np.minimum(a, b), np.maximum(a, b)

            def plus(x: tuple, y: tuple) -> tuple[np.ndarray, np.ndarray]:
                low, high = (x[0] + y[0]).astype(dtype), (x[1] + y[1]).astype(dtype)
                unknown = np.isnan(low) | np.isnan(high)
                return np.where(unknown, -np.inf, low).astype(dtype), np.where(unknown, np.inf, high).astype(
                    dtype
                )

            pre = reduce_terms(layer.n_in, (start, start), product, plus, True)
            return pre, np.zeros((lo.shape[0], layer.n_out), dtype=bool)
        inputs_lo, inputs_hi, valid = _tap_bounds(layer, lo, hi)
        weights = layer.tap_weights().astype(dtype)
        a, b = (weights[None] * inputs_lo).astype(dtype), (weights[None] * inputs_hi).astype(dtype)
        nothing = dtype(-0.0)  # a slot past a neuron's products adds -0.0: no change, NaN included
        low, high = (
            np.add.accumulate(
                np.concatenate([start[:, :, None], np.where(valid[None], terms, nothing)], axis=2),
                axis=2,
                dtype=dtype,
            )[:, :, -1]
            for terms in (np.minimum(a, b), np.maximum(a, b))
        )
        unknown = np.isnan(low) | np.isnan(high)
        pre = np.where(unknown, -np.inf, low).astype(dtype), np.where(unknown, np.inf, high).astype(dtype)
    return pre, np.zeros((lo.shape[0], layer.n_out), dtype=bool)


def activate_bounds(qnet: QuantizedNetwork, activation: Activation, lo, hi):
    """Post-activation bounds of [lo, hi]: every activation of the C is monotone."""
    if activation is Activation.RELU:
        return np.maximum(lo, 0), np.maximum(hi, 0)
    if activation is Activation.RELU6:
        six = qnet.relu6_top
        return np.minimum(np.maximum(lo, 0), six), np.minimum(np.maximum(hi, 0), six)
    if activation is Activation.IDENTITY:
        return lo, hi
    lut = qnet.lut_for(activation)
    if qnet.is_fixed:
        return lut_fixed(lut, lo), lut_fixed(lut, hi)
    return lut_float(lut, lo, qnet.number), lut_float(lut, hi, qnet.number)  # type: ignore[arg-type]


def pool_interval(layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray, qnet: QuantizedNetwork):
    """Pools: the C's loop on the bounds (max and the rounded sum and product are monotone)."""
    operator = operator_of(layer.source)
    pre_lo, overflow_lo = operator.implemented_values(layer, lo, qnet)
    pre_hi, overflow_hi = operator.implemented_values(layer, hi, qnet)
    may = overflow_lo | overflow_hi
    if qnet.is_fixed and qnet.number.overflow is Overflow.WRAP:  # type: ignore[union-attr]
        fmt: FixedFormat = qnet.number  # type: ignore[assignment]
        pre_lo, pre_hi = np.where(may, fmt.min_q, pre_lo), np.where(may, fmt.max_q, pre_hi)
        return (pre_lo, pre_hi), may
    return (pre_lo, pre_hi), may


def int8_mac_interval(layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray) -> tuple:
    """An int8 MAC layer: the exact accumulator's bounds, and the codes through the (monotone) table."""
    from qverify.quant.affine import apply_thresholds

    tables = layer.int8
    zero = tables.input_zero  # type: ignore[union-attr]
    bias = layer.expanded_bias().astype(np.int64)
    if tables.paired is not None:  # int8-x86: pair sums saturated at int16, box by box
        weights = layer.matrix.astype(np.int64)
        pairs = [tables.paired.bounds(weights, low, high) for low, high in zip(lo, hi)]
        acc_lo, acc_hi = np.array([pair[0] for pair in pairs]), np.array([pair[1] for pair in pairs])
    else:  # exact integer sums over the products the C forms (a convolution's taps)
        inputs_lo, inputs_hi, _ = _tap_bounds(
            layer, np.asarray(lo, np.int64) - zero, np.asarray(hi, np.int64) - zero
        )
        weights = layer.tap_weights().astype(np.int64)[None]
        acc_lo = bias + np.minimum(weights * inputs_lo, weights * inputs_hi).sum(axis=2)
        acc_hi = bias + np.maximum(weights * inputs_lo, weights * inputs_hi).sum(axis=2)
    table = tables.table  # type: ignore[union-attr]
    if table.shape[0] > 1:
        table = table[layer.source.channel_of()]
    qmin = tables.code.qmin  # type: ignore[union-attr]
    return (acc_lo, acc_hi), (apply_thresholds(acc_lo, table, qmin), apply_thresholds(acc_hi, table, qmin))


def join_interval(layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray, qnet: QuantizedNetwork):
    """Joins: the C's additions on the bounds (monotone once the overflow mode is applied; a wrap
    that may happen, or a float NaN, widens to the whole range), values moved otherwise."""
    boxes = len(lo)
    values, overflow = operator_of(layer.source).implemented_values(layer, np.concatenate([lo, hi]), qnet)
    low, high = values[:boxes], values[boxes:]
    may = overflow[:boxes] | overflow[boxes:]
    if qnet.is_fixed and qnet.number.overflow is Overflow.WRAP:  # type: ignore[union-attr]
        fmt: FixedFormat = qnet.number  # type: ignore[assignment]
        low, high = np.where(may, fmt.min_q, low), np.where(may, fmt.max_q, high)
    elif qnet.is_float:
        unknown = np.isnan(low) | np.isnan(high)
        low = np.where(unknown, -np.inf, low).astype(low.dtype)
        high = np.where(unknown, np.inf, high).astype(high.dtype)
    return (low, high), may


def node_interval(
    qnet: QuantizedNetwork, layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray
) -> LayerBounds:
    """Bounds of one node's values for its input (its producers' values concatenated) in [lo, hi],
    box by box: `lo`, `hi` of shape (boxes, n_in), every bound of shape (boxes, n_out); one box
    (n_in,) gives bounds of shape (n_out,)."""
    if np.ndim(lo) == 1:
        one = node_interval(qnet, layer, np.asarray(lo)[None], np.asarray(hi)[None])
        return LayerBounds(one.pre_lo[0], one.pre_hi[0], one.post_lo[0], one.post_hi[0], one.may_overflow[0])
    operator = operator_of(layer.source)
    if qnet.is_int8:
        (pre_lo, pre_hi), (post_lo, post_hi) = operator.interval_int8(layer, lo, hi)
        return LayerBounds(pre_lo, pre_hi, post_lo, post_hi, np.zeros(pre_lo.shape, dtype=bool))
    (pre_lo, pre_hi), may_overflow = operator.interval(layer, lo, hi, qnet)
    post_lo, post_hi = activate_bounds(qnet, layer.activation, pre_lo, pre_hi)
    return LayerBounds(pre_lo, pre_hi, post_lo, post_hi, may_overflow)


def implementation_bounds(qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray) -> tuple[LayerBounds, ...]:
    """Bounds of the C's neuron values for inputs in [lo, hi] (words for fixed, values for float,
    codes for int8; for int8 `pre` is the int32 accumulator), node by node in the wiring's order."""
    if np.shape(lo) != (qnet.n_inputs,) or np.shape(hi) != (qnet.n_inputs,):
        raise InputError(f"input box must give {qnet.n_inputs} intervals with lo <= hi")
    batch = implementation_bounds_batch(qnet, np.asarray(lo)[None], np.asarray(hi)[None])
    return tuple(
        LayerBounds(b.pre_lo[0], b.pre_hi[0], b.post_lo[0], b.post_hi[0], b.may_overflow[0]) for b in batch
    )


def implementation_bounds_batch(
    qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray
) -> tuple[LayerBounds, ...]:
    """`implementation_bounds` of many boxes at once: `lo`, `hi` of shape (boxes, n_inputs), every
    bound of the result of shape (boxes, n_out). The fixed-point per-operation layers hold
    (boxes, n_out, n_in) products: callers bound the batch (`qverify.cases` takes a few thousand
    products per box a batch)."""
    if qnet.is_integer:
        lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    else:
        dtype = qnet.number.dtype  # type: ignore[union-attr]
        lo, hi = np.asarray(lo, dtype=dtype), np.asarray(hi, dtype=dtype)
    if lo.ndim != 2 or lo.shape != hi.shape or lo.shape[1] != qnet.n_inputs or np.any(lo > hi):
        raise InputError(f"input boxes must give {qnet.n_inputs} intervals each with lo <= hi")
    result: list[LayerBounds] = []
    for index, layer in enumerate(qnet.layers):
        h_lo = qnet.node_inputs(index, lo, [bounds.post_lo for bounds in result])
        h_hi = qnet.node_inputs(index, hi, [bounds.post_hi for bounds in result])
        result.append(node_interval(qnet, layer, h_lo, h_hi))
    return tuple(result)
