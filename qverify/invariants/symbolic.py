"""Symbolic (linear) bounds per neuron, sound for the implemented arithmetic (DeepPoly-style).

Each neuron's accumulated value is bounded by back-substituting linear relations, layer by layer,
down to the inputs, and only then taking the extreme over the input box; correlations between
neurons that intervals lose are kept. The relations hold for the C's arithmetic, not for the real
network:

- fixed point, a neuron that provably never overflows in the box (interval analysis of
  `qverify.quant.implementation_bounds` on the already-tightened bounds of the previous layer): the
  C computes acc = b + sum R(w_i h_i) with every partial sum in range, so
      acc = b + sum (w_i / 2^l) h_i + e,   e in n * [d_lo, d_hi]
  with n the number of non-zero weights and [d_lo, d_hi] the error of one rounding: [-1/2, 1/2]
  for `nearest`, [-(1 - 2^-l), 0] for `floor` (one rounding for wide accumulation). Saturation
  and wrap-around cannot happen there, so all overflow modes agree. A neuron that may overflow has
  no linear relation: it is a free value in its interval.
- float, when the interval bounds of the layer are finite (no overflow, so no inf and no NaN): in
  any summation order, |acc - (b + sum w_i h_i)| <= gamma_(n+1) (|b| + sum |w_i| max|h_i|) + 2 n eta,
  gamma_k = k u / (1 - k u), u the unit roundoff (2^-24 float, 2^-53 double), eta half the smallest
  subnormal (an underflowing product's absolute error; additions that underflow are exact).
  From the first layer whose interval bounds are not finite on, only intervals are used.
- activations, from the tightened bounds [lo, hi] of acc: identity and stable ReLUs are exact;
  an unstable ReLU has relu(v) <= s (v - lo) with s >= hi / (hi - lo) (rounded up to 2^-32),
  and relu(v) >= v if hi >= -lo, else >= 0; tables (sigmoid, tanh) give a free value in their
  interval.

Arithmetic is float64 with every rounding charged (the network level's accounting,
`qverify.engine.netlevel.bounds`): a lower bound is kept as coef @ v + const - slack, the constant
is rounded down after each addition (`nextafter`), and `slack` (rounded up) collects gamma_n times the
magnitudes of every float64 dot product: the coefficients' own error as gamma_n |coef| @ (|W| max|h|),
the constants' as gamma_n of their magnitudes. Words and C values of the formats covered here are
float64 numbers exactly (the few words beyond 2^53 are rounded outward). The bounds are then rounded
outward to the C's units (words: ceil/floor; float: the nearest value of the C type inside) and
intersected with the interval analysis' (both sound) before the next layer starts. The same relations
in exact rational arithmetic (`qverify.invariants.symbolic_exact`, ~50x slower on ACAS Xu) are the
tests' oracle: the float64 bounds contain them and are within rounding of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from qverify.errors import InternalError
from qverify.network import Activation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    LayerBounds,
    QuantizedLayer,
    QuantizedNetwork,
    Rounding,
    implementation_bounds,
)
from qverify.quant.intervals import activate_bounds, node_interval
from qverify.quant.roundoff import TINY, U64, gamma

SLOPE_BITS = 32  # fractional bits of the relaxation slopes (rounded up)
COST_BUDGET = 60_000_000  # multiply-adds of back-substitution allowed per input box
EXACT_WORD = 2.0**53  # words below this magnitude are float64 numbers exactly


def symbolic_applies(qnet: QuantizedNetwork) -> bool:
    """Dense layers in fixed point, float or double: what the linear relations below cover."""
    if qnet.is_int8 or (qnet.is_float and qnet.number.is_half):  # type: ignore[union-attr]
        return False
    return qnet.source.is_chain and all(layer.is_dense for layer in qnet.layers)


def symbolic_cost(qnet: QuantizedNetwork) -> int:
    """Multiply-adds of one back-substitution pass over the network (both bounds)."""
    sizes = [qnet.n_inputs] + [layer.n_out for layer in qnet.layers]
    total = 0
    for k in range(1, len(sizes)):
        total += sum(2 * sizes[k] * sizes[m] * sizes[m - 1] for m in range(1, k + 1))
    return total


def _up(values):
    """A float64 >= the exact result of the one rounded-to-nearest operation that gave `values`."""
    return np.nextafter(values, np.inf)


def _down(values):
    return np.nextafter(values, -np.inf)


def _magnitude_dot(a_abs: np.ndarray, v_abs: np.ndarray) -> np.ndarray:
    """An upper bound of a @ v for non-negative a and v: the float64 product is within gamma_n of it
    (relative: all terms are >= 0), underflowing products within TINY."""
    n = a_abs.shape[-1]
    return _up((a_abs @ v_abs) * (1.0 + 2.0 * gamma(n + 3))) + TINY


def _magnitude_sum(terms_abs: np.ndarray) -> np.ndarray:
    """An upper bound of the row sums of a non-negative matrix (as `_magnitude_dot`)."""
    n = terms_abs.shape[-1]
    return _up(terms_abs.sum(axis=-1) * (1.0 + 2.0 * gamma(n + 3))) + TINY


def _outward(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Words or C values as float64, rounded outward (exact below 2^53)."""
    f_lo, f_hi = lo.astype(np.float64), hi.astype(np.float64)
    f_lo = np.where(np.abs(f_lo) >= EXACT_WORD, _down(f_lo), f_lo)
    f_hi = np.where(np.abs(f_hi) >= EXACT_WORD, _up(f_hi), f_hi)
    return f_lo, f_hi


@dataclass(frozen=True, slots=True, eq=False)
class _Affine:
    """acc = weights @ h + bias + e for the neurons in `exact`, e in [error_lo, error_hi] (float64
    numbers, the relation holds exactly with them); the other neurons are free in [lo, hi]."""

    weights: np.ndarray  # (n_out, n_in)
    bias: np.ndarray
    error_lo: np.ndarray
    error_hi: np.ndarray
    weights_h: np.ndarray  # an upper bound of |weights| @ max|h| (the coefficients' rounding charge)
    exact: np.ndarray  # bool (n_out,)
    lo: np.ndarray  # bounds of acc (outward float64)
    hi: np.ndarray
    magnitude: np.ndarray  # max |acc|


@dataclass(frozen=True, slots=True, eq=False)
class _Relaxation:
    """lo_mul * acc + lo_add <= h <= hi_mul * acc + hi_add (float64 numbers, exactly)."""

    lo_mul: np.ndarray
    lo_add: np.ndarray
    hi_mul: np.ndarray
    hi_add: np.ndarray


def _weights_and_bias(layer: QuantizedLayer, qnet: QuantizedNetwork) -> tuple[np.ndarray, np.ndarray]:
    """The weights and bias as float64 numbers (exactly), so that acc ~ W h + b in the C's units."""
    if qnet.is_fixed:
        fmt: FixedFormat = qnet.number  # type: ignore[assignment]
        return layer.weights.astype(np.float64) / fmt.scale, layer.bias.astype(np.float64)
    return layer.weights.astype(np.float64), layer.bias.astype(np.float64)


def _errors(layer: QuantizedLayer, qnet: QuantizedNetwork, weights_h: np.ndarray, bias: np.ndarray):
    """Per neuron [e_lo, e_hi] (float64, outward): what the C's roundings add to W h + b."""
    if qnet.is_fixed:
        fmt: FixedFormat = qnet.number  # type: ignore[assignment]
        if fmt.frac_bits == 0:
            step = (0.0, 0.0)
        elif fmt.rounding is Rounding.NEAREST:
            step = (-0.5, 0.5)
        else:
            step = (1.0 / fmt.scale - 1.0, 0.0)
        if qnet.options.accumulation is Accumulation.WIDE:
            counts = np.ones(layer.n_out)
        else:
            counts = np.count_nonzero(layer.weights, axis=1).astype(np.float64)
        return counts * step[0], counts * step[1]  # exact: small integers times dyadic steps
    number: FloatFormat = qnet.number  # type: ignore[assignment]
    unit = 2.0**-24 if number.word_bits == 32 else U64
    eta = 2.0**-150 if number.word_bits == 32 else 2.0**-1074  # >= half the smallest subnormal
    terms = layer.n_in + 1
    total = _up(weights_h + np.abs(bias))
    bound = _up(_up(gamma(terms, unit) * total) + 2 * layer.n_in * eta) + TINY
    return -bound, bound


def _affine(layer, qnet, h_lo, h_hi, exact, acc_lo, acc_hi) -> _Affine:
    weights, bias = _weights_and_bias(layer, qnet)
    weights_h = _magnitude_dot(np.abs(weights), np.maximum(np.abs(h_lo), np.abs(h_hi)))
    error_lo, error_hi = _errors(layer, qnet, weights_h, bias)
    empty = np.zeros(0)
    affine = _Affine(weights, bias, error_lo, error_hi, weights_h, exact, empty, empty, empty)
    return _with_bounds(affine, acc_lo, acc_hi)


def _with_bounds(affine: _Affine, acc_lo: np.ndarray, acc_hi: np.ndarray) -> _Affine:
    """The same relation with new bounds [acc_lo, acc_hi] (C units) of the accumulated values."""
    lo, hi = _outward(acc_lo, acc_hi)
    return replace(affine, lo=lo, hi=hi, magnitude=np.maximum(np.abs(lo), np.abs(hi)))


def _relaxation(activation: Activation, pre_lo, pre_hi, post_lo, post_hi) -> _Relaxation:
    """The linear relaxation of h = activation(acc) for acc in [pre_lo, pre_hi] (C units)."""
    lo, hi = _outward(pre_lo, pre_hi)
    h_lo, h_hi = _outward(post_lo, post_hi)
    zero, one = np.zeros(len(lo)), np.ones(len(lo))
    if activation is Activation.IDENTITY:
        return _Relaxation(one, zero, one, zero)
    if activation is not Activation.RELU:  # tables: a free value in [post_lo, post_hi]
        return _Relaxation(zero, h_lo, zero, h_hi)
    active, unstable = lo >= 0, (lo < 0) & (hi > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = _up(hi / _down(hi - lo))  # >= hi / (hi - lo)
    grid = 2.0**SLOPE_BITS
    slope = np.ceil(slope * grid) / grid  # exact scalings: the same slopes as the exact analysis
    hi_mul = np.where(active, 1.0, np.where(unstable, slope, 0.0))
    hi_add = np.where(unstable, _up(-slope * lo), 0.0)  # >= -s lo
    lo_mul = np.where(active | (unstable & (hi >= -lo)), 1.0, 0.0)
    return _Relaxation(lo_mul, zero, hi_mul, hi_add)


def _charged(const, slack, value, charge):
    """const + value pushed down (value's rounding error is within `charge`, added to the slack)."""
    return _down(const + value), _up(slack + charge)


def _through_affine(coef, const, slack, affine: _Affine):
    """A lower bound coef @ acc + const - slack as coef' @ h + const' - slack'."""
    free = ~affine.exact
    if free.any():
        kept = coef[:, free]
        extreme = np.where(kept > 0, kept * affine.lo[free], kept * affine.hi[free]).sum(axis=1)
        charge = gamma(int(free.sum()) + 1) * _magnitude_dot(np.abs(kept), affine.magnitude[free])
        const, slack = _charged(const, slack, extreme, charge)
        coef = np.where(free[None, :], 0.0, coef)
    magnitude = np.abs(coef)
    n = coef.shape[1]
    error = np.where(coef > 0, affine.error_lo, affine.error_hi)
    value = coef @ affine.bias + (coef * error).sum(axis=1)
    extent = _up(np.abs(affine.bias) + np.maximum(np.abs(affine.error_lo), np.abs(affine.error_hi)))
    charge = gamma(n + 2) * _magnitude_dot(magnitude, extent)
    # coef @ W in float64: each coefficient within gamma_n (|coef| @ |W|), times max|h| at most
    charge = _up(charge + gamma(n) * _magnitude_dot(magnitude, affine.weights_h))
    const, slack = _charged(const, slack, value, charge)
    return coef @ affine.weights, const, slack


def _through_relaxation(coef, const, slack, relaxation: _Relaxation, acc_magnitude: np.ndarray):
    """A lower bound coef @ h + const - slack as coef' @ acc + const' - slack' (h = activation(acc))."""
    positive = coef > 0
    mul = np.where(positive, relaxation.lo_mul, relaxation.hi_mul)
    add = np.where(positive, relaxation.lo_add, relaxation.hi_add)
    terms = coef * add
    value = terms.sum(axis=1)
    new_coef = coef * mul  # each product within u of itself: 2u |coef'| @ max|acc| covers it
    charge = gamma(coef.shape[1] + 1) * _magnitude_sum(np.abs(terms))
    charge = _up(charge + 2 * U64 * _magnitude_dot(np.abs(new_coef), acc_magnitude))
    const, slack = _charged(const, slack, value, charge)
    return new_coef, const, slack


def _back_substitute(k, affines, relaxations, x_lo, x_hi):
    """[lower, upper] of layer k's accumulated values (float64, outward; NaN where it overflowed).

    A walk of its own, not the network level's (`engine.netlevel.bounds.backsubstitute`, generic
    over the graph and its operators): the invariants come before the engine in the pipeline (the
    C's injected assumes, which the engine reads back), so this package cannot use the engine's
    statements, and it covers dense chains in fixed point and float only (`symbolic_applies`),
    with the C's per-operation error of each neuron charged layer by layer as above."""
    n = affines[k].weights.shape[0]
    coef = np.vstack([np.eye(n), -np.eye(n)])
    const, slack = np.zeros(2 * n), np.zeros(2 * n)
    for m in range(k, 0, -1):
        coef, const, slack = _through_affine(coef, const, slack, affines[m])
        coef, const, slack = _through_relaxation(
            coef, const, slack, relaxations[m - 1], affines[m - 1].magnitude
        )
    coef, const, slack = _through_affine(coef, const, slack, affines[0])
    # coef @ x + const - slack: the extreme over the box
    extreme = np.where(coef > 0, coef * x_lo, coef * x_hi).sum(axis=1)
    x_magnitude = np.maximum(np.abs(x_lo), np.abs(x_hi))
    charge = gamma(coef.shape[1] + 1) * _magnitude_dot(np.abs(coef), x_magnitude)
    const, slack = _charged(const, slack, extreme, charge)
    low = _down(const - slack)
    return low[:n], -low[n:]


def _float_ceil(values: np.ndarray, dtype) -> np.ndarray:
    """The smallest value of the C type >= each float64 value (inf beyond the type's range)."""
    candidate = values.astype(dtype)
    below = candidate.astype(np.float64) < values
    return np.where(below, np.nextafter(candidate, dtype(np.inf)), candidate).astype(dtype)


def _tighten(qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray, base_lo, base_hi):
    """The intersection of symbolic bounds (float64; NaN: none) with interval bounds, in the C's
    units: a word is an integer, a float value a value of the C type."""
    lo = np.where(np.isnan(lo), -np.inf, lo)
    hi = np.where(np.isnan(hi), np.inf, hi)
    if qnet.is_fixed:
        limit = 2.0**62  # clipping a lower bound down or an upper bound up stays sound
        sym_lo = np.ceil(np.clip(lo, -limit, limit)).astype(np.int64)
        sym_hi = np.floor(np.clip(hi, -limit, limit)).astype(np.int64)
        return np.maximum(base_lo, sym_lo), np.minimum(base_hi, sym_hi)
    dtype = qnet.number.dtype  # type: ignore[union-attr]
    with np.errstate(over="ignore"):
        sym_lo = _float_ceil(lo, dtype)
        sym_hi = -_float_ceil(-hi, dtype)
    return np.maximum(base_lo, sym_lo).astype(dtype), np.minimum(base_hi, sym_hi).astype(dtype)


def symbolic_bounds(qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray) -> tuple[LayerBounds, ...]:
    """Bounds of every neuron over the input box [lo, hi] (words or C-type values): the interval
    bounds of `implementation_bounds`, layer by layer, intersected with back-substituted linear bounds.

    Never looser than `implementation_bounds(qnet, lo, hi)`. Costs about `symbolic_cost(qnet)`
    float64 multiply-adds. Networks with convolutions or pools, int8 and half-precision networks get
    the interval bounds only (the linear relations are written for dense layers in fixed point,
    float and double).
    """
    if not symbolic_applies(qnet):
        return implementation_bounds(qnet, lo, hi)
    x_lo, x_hi = _outward(np.asarray(lo), np.asarray(hi))
    affines: list[_Affine] = []
    relaxations: list[_Relaxation] = []
    post_lo, post_hi = lo, hi
    result = []
    symbolic = True
    with np.errstate(over="ignore", invalid="ignore"):
        for index, layer in enumerate(qnet.layers):
            interval = node_interval(qnet, layer, post_lo, post_hi)
            pre_lo, pre_hi = interval.pre_lo, interval.pre_hi
            finite = np.isfinite(pre_lo.astype(np.float64)) & np.isfinite(pre_hi.astype(np.float64))
            symbolic = symbolic and bool(finite.all())
            if not symbolic:
                result.append(interval)
                post_lo, post_hi = interval.post_lo, interval.post_hi
                continue
            h_lo, h_hi = _outward(np.asarray(post_lo), np.asarray(post_hi))
            exact = ~interval.may_overflow
            affines.append(_affine(layer, qnet, h_lo, h_hi, exact, pre_lo, pre_hi))
            sym_lo, sym_hi = _back_substitute(index, affines, relaxations, x_lo, x_hi)
            pre_lo, pre_hi = _tighten(qnet, sym_lo, sym_hi, pre_lo, pre_hi)
            if np.any(pre_lo > pre_hi):
                raise InternalError(f"symbolic bounds of layer {index + 1} contradict the interval bounds")
            affines[-1] = _with_bounds(affines[-1], pre_lo, pre_hi)
            activated = activate_bounds(qnet, layer.activation, pre_lo, pre_hi)
            post_lo = np.maximum(activated[0], interval.post_lo).astype(activated[0].dtype)
            post_hi = np.minimum(activated[1], interval.post_hi).astype(activated[1].dtype)
            relaxations.append(_relaxation(layer.activation, pre_lo, pre_hi, post_lo, post_hi))
            result.append(LayerBounds(pre_lo, pre_hi, post_lo, post_hi, interval.may_overflow))
    return tuple(result)
