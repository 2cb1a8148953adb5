"""The built-in symbolic bounds in exact rational arithmetic: the tests' oracle for the float64 ones.

`qverify.invariants.symbolic` computes the same DeepPoly-style relations in float64 with every
rounding charged (what the pipeline uses); this module computes them with Python integers, exactly,
so that tests can check that the float64 bounds contain these and stay within rounding of them. The
relations (the same as there):

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
  an unstable ReLU has relu(v) <= s (v - lo') with s >= hi / (hi - lo) rounded up and lo' <= lo,
  and relu(v) >= v if hi >= -lo, else >= 0; tables (sigmoid, tanh) give a free value in their
  interval.

Arithmetic is exact: coefficients are Python integers over 2^P (P = 64 + the bits that make the
input box's ends integers). Products are floored back to that grid and the error (< 2^-P times the
variable's largest magnitude, per coefficient) is charged to the constant, outward. Each layer's
bounds are intersected with the interval analysis' (both sound) before the next layer starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from qverify.errors import InternalError
from qverify.invariants.symbolic import SLOPE_BITS, symbolic_applies
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

GRID_BITS = 64  # fractional bits of the coefficient grid beyond the input scaling


@dataclass(frozen=True, slots=True, eq=False)
class _Affine:
    """acc = (weights @ h + bias) / 2^q_bits + e for the neurons in `exact`, e in [error_lo, error_hi]
    (numerators over 2^q_bits, rounded outward); the other neurons are free in [lo, hi]."""

    weights: np.ndarray  # object ints (n_out, n_in)
    bias: np.ndarray  # object ints (n_out,)
    error_lo: np.ndarray  # object ints, floor(e_lo * 2^q)
    error_hi: np.ndarray  # object ints, ceil(e_hi * 2^q)
    q_bits: int
    exact: np.ndarray  # bool (n_out,)
    lo: np.ndarray  # object ints: floor(acc_lo * 2^P)
    hi: np.ndarray  # object ints: ceil(acc_hi * 2^P)
    magnitude: np.ndarray  # object ints: ceil(max |acc|), the grid slack per coefficient


@dataclass(frozen=True, slots=True, eq=False)
class _Relaxation:
    """lo_mul * acc + lo_add <= h <= hi_mul * acc + hi_add (mul over 2^SLOPE_BITS, add over 2^P)."""

    lo_mul: np.ndarray  # object ints
    lo_add: np.ndarray
    hi_mul: np.ndarray
    hi_add: np.ndarray
    magnitude: np.ndarray  # object ints: ceil(max |h|)


def _dyadic_bits(values: list[Fraction]) -> int:
    """The smallest R >= 0 such that every value * 2^R is an integer (values are dyadic)."""
    return max((value.denominator.bit_length() - 1 for value in values), default=0)


def _exact(values: np.ndarray) -> list[Fraction]:
    """Exact rationals of words (int64) or floats."""
    if np.issubdtype(np.asarray(values).dtype, np.integer):
        return [Fraction(int(v)) for v in values]
    return [Fraction(float(v)) for v in values]


def _floor_shift(values: np.ndarray, shift: int) -> np.ndarray:
    return values >> shift  # Python integers: >> floors


INT64_BITS = 63  # magnitude bits of an int64


def _limb_bits(inner: int) -> int:
    """The limb width of `_exact_dot` for sums of `inner` products (see there)."""
    return max(1, (INT64_BITS - 2 * max(1, inner).bit_length() - 4) // 2)


def _limbs(values: np.ndarray, bits: int) -> list[np.ndarray]:
    """int64 arrays l_0..l_m with values = sum_i l_i 2^(bits i) exactly: the low limbs in [0, 2^bits),
    the top one signed, |l_m| <= 2^(bits-1) (Python's >> floors: negative values need no care)."""
    largest = max(abs(int(values.max())), abs(int(values.min()))) if values.size else 0
    width = largest.bit_length() + 1
    count = max(1, -(-width // bits))
    mask = (1 << bits) - 1
    limbs, rest = [], values
    for _ in range(count - 1):
        limbs.append((rest & mask).astype(np.int64))
        rest = rest >> bits
    limbs.append(rest.astype(np.int64))
    return limbs


def _exact_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b for arrays of Python integers (dtype object), exactly, through int64 products of limbs.

    numpy's object `dot` multiplies big integers one pair at a time, which was most of the cost of
    these bounds (benchmarks/bench_overhead.py); with limbs the Python-integer work is only the
    splitting and the recombination (~3x faster on ACAS Xu). Every limb is below 2^bits in magnitude,
    so one limb product sums to less than inner * 2^(2 bits), and the at most min(#limbs) products
    added at the same shift stay below 2^63: else (numbers too large on both sides) the plain dot."""
    inner = a.shape[-1]
    bits = _limb_bits(inner)
    a_limbs, b_limbs = _limbs(a, bits), _limbs(b, bits)
    if min(len(a_limbs), len(b_limbs)) * inner >= 1 << (INT64_BITS - 2 * bits):
        return a.dot(b)
    groups: dict[int, np.ndarray] = {}
    for i, a_limb in enumerate(a_limbs):
        for j, b_limb in enumerate(b_limbs):
            product = a_limb @ b_limb
            groups[i + j] = groups[i + j] + product if i + j in groups else product
    top = len(a_limbs) + len(b_limbs) - 2
    result = groups[top].astype(object)
    for shift in range(top - 1, -1, -1):  # Horner: every shift from 0 to top has a group
        result = (result << bits) + groups[shift].astype(object)
    return result


def _ceil_magnitude(lo: list[Fraction], hi: list[Fraction]) -> np.ndarray:
    return np.array([math.ceil(max(abs(a), abs(b))) for a, b in zip(lo, hi)], dtype=object)


def _weights_and_bias(layer: QuantizedLayer, qnet: QuantizedNetwork) -> tuple[np.ndarray, np.ndarray, int]:
    """Integer numerators over 2^q of the weights and the bias, so that acc ~ (W h + b) / 2^q."""
    if qnet.is_fixed:
        fmt: FixedFormat = qnet.number  # type: ignore[assignment]
        weights = layer.weights.astype(object)
        bias = np.array([int(b) << fmt.frac_bits for b in layer.bias], dtype=object)
        return weights, bias, fmt.frac_bits
    # float.as_integer_ratio is exact with a power-of-two denominator: the same numbers as through
    # Fraction(float), at a tenth of the cost (Fractions were most of the float invariants' time)
    weight_ratios = [float(w).as_integer_ratio() for w in layer.weights.ravel()]
    bias_ratios = [float(b).as_integer_ratio() for b in layer.bias]
    # GRID_BITS finer than the constants need: the rounding errors (not dyadic with few bits) are
    # rounded outward to this grid, which must stay far below float64 resolution for the oracle
    q_bits = max((d.bit_length() - 1 for _, d in weight_ratios + bias_ratios), default=0) + GRID_BITS
    weights = np.array([n << (q_bits - d.bit_length() + 1) for n, d in weight_ratios], dtype=object)
    bias = np.array([n << (q_bits - d.bit_length() + 1) for n, d in bias_ratios], dtype=object)
    return weights.reshape(layer.weights.shape), bias, q_bits


def _errors(layer: QuantizedLayer, qnet: QuantizedNetwork, h_lo, h_hi, weights, bias, q_bits: int):
    """Per neuron [e_lo, e_hi]: what the C's roundings add to the exact affine value (`weights`,
    `bias`: the layer's numerators over 2^q_bits, from `_weights_and_bias`)."""
    if qnet.is_fixed:
        fmt: FixedFormat = qnet.number  # type: ignore[assignment]
        if fmt.frac_bits == 0:
            step = (Fraction(0), Fraction(0))
        elif fmt.rounding is Rounding.NEAREST:
            step = (Fraction(-1, 2), Fraction(1, 2))
        else:
            step = (Fraction(1, fmt.scale) - 1, Fraction(0))
        if qnet.options.accumulation is Accumulation.WIDE:
            counts = [1] * layer.n_out
        else:
            counts = [int(np.count_nonzero(row)) for row in layer.weights]
        return [c * step[0] for c in counts], [c * step[1] for c in counts]
    number: FloatFormat = qnet.number  # type: ignore[assignment]
    unit = Fraction(1, 1 << (24 if number.word_bits == 32 else 53))
    eta = Fraction(1, 1 << (150 if number.word_bits == 32 else 1075))
    terms = layer.n_in + 1
    gamma = terms * unit / (1 - terms * unit)
    # |b| + sum |w_i| max|h_i|, exactly, in integers: numerators over 2^(q_bits + s_bits)
    magnitude = [max(abs(a), abs(b)) for a, b in zip(h_lo, h_hi)]
    s_bits = _dyadic_bits(magnitude)
    scaled = np.array([int(m * (1 << s_bits)) for m in magnitude], dtype=object)
    totals = np.abs(weights).dot(scaled) + np.abs(bias) * (1 << s_bits)
    scale = 1 << (q_bits + s_bits)
    bounds = [gamma * Fraction(int(total), scale) + 2 * layer.n_in * eta for total in totals]
    return [-e for e in bounds], bounds


def _affine(layer, qnet, h_lo, h_hi, exact, acc_lo, acc_hi, p_bits) -> _Affine:
    weights, bias, q_bits = _weights_and_bias(layer, qnet)
    error_lo, error_hi = _errors(layer, qnet, h_lo, h_hi, weights, bias, q_bits)
    scale = 1 << q_bits
    affine = _Affine(
        weights=weights,
        bias=bias,
        error_lo=np.array([math.floor(e * scale) for e in error_lo], dtype=object),
        error_hi=np.array([math.ceil(e * scale) for e in error_hi], dtype=object),
        q_bits=q_bits,
        exact=exact,
        lo=np.zeros(0, dtype=object),
        hi=np.zeros(0, dtype=object),
        magnitude=np.zeros(0, dtype=object),
    )
    return _with_bounds(affine, acc_lo, acc_hi, p_bits)


def _with_bounds(affine: _Affine, acc_lo: list[Fraction], acc_hi: list[Fraction], p_bits: int) -> _Affine:
    """The same relation with new bounds [acc_lo, acc_hi] of the accumulated values (its weights,
    bias and rounding errors do not depend on them: they are not computed again)."""
    grid = 1 << p_bits
    return replace(
        affine,
        lo=np.array([math.floor(v * grid) for v in acc_lo], dtype=object),
        hi=np.array([math.ceil(v * grid) for v in acc_hi], dtype=object),
        magnitude=_ceil_magnitude(acc_lo, acc_hi),
    )


def _relaxation(activation: Activation, lo, hi, post_lo, post_hi, p_bits: int) -> _Relaxation:
    """The linear relaxation of h = activation(acc) for acc in [lo, hi] (exact rationals)."""
    one, grid = 1 << SLOPE_BITS, 1 << p_bits
    n = len(lo)
    lo_mul, hi_mul = [0] * n, [0] * n
    lo_add = [math.floor(v * grid) for v in post_lo]  # tables: a free value in [post_lo, post_hi]
    hi_add = [math.ceil(v * grid) for v in post_hi]
    for j in range(n):
        if activation is Activation.IDENTITY or (activation is Activation.RELU and lo[j] >= 0):
            lo_mul[j], hi_mul[j], lo_add[j], hi_add[j] = one, one, 0, 0
        elif activation is Activation.RELU and hi[j] <= 0:
            lo_mul[j], hi_mul[j], lo_add[j], hi_add[j] = 0, 0, 0, 0
        elif activation is Activation.RELU:
            slope = Fraction(math.ceil(hi[j] / (hi[j] - lo[j]) * one), one)  # >= hi / (hi - lo)
            hi_mul[j] = slope.numerator * (one // slope.denominator)
            hi_add[j] = math.ceil(-slope * Fraction(math.floor(lo[j] * grid), grid) * grid)
            lo_mul[j], lo_add[j] = (one if hi[j] >= -lo[j] else 0), 0
    arrays = [np.array(values, dtype=object) for values in (lo_mul, lo_add, hi_mul, hi_add)]
    return _Relaxation(*arrays, magnitude=_ceil_magnitude(post_lo, post_hi))


def _through_affine(coef, const, affine: _Affine, h_magnitude: np.ndarray, p_bits: int):
    """Lower bound of coef @ acc + const (numerators over 2^P) as coef' @ h + const'."""
    free = ~affine.exact
    if free.any():
        kept = coef[:, free]
        extreme = np.where(kept > 0, kept * affine.lo[free], kept * affine.hi[free])
        const = const + _floor_shift(extreme.sum(axis=1), p_bits)
        coef = np.where(free[None, :], 0, coef)
    scaled = const * (1 << affine.q_bits)
    scaled = (
        scaled
        + _exact_dot(coef, affine.bias)
        + np.where(coef > 0, coef * affine.error_lo, coef * affine.error_hi).sum(axis=1)
    )
    new_coef = _exact_dot(coef, affine.weights)
    new_coef = _floor_shift(new_coef, affine.q_bits)
    slack = int(h_magnitude.sum()) if affine.q_bits else 0
    return new_coef, _floor_shift(scaled, affine.q_bits) - slack


def _through_relaxation(coef, const, relaxation: _Relaxation, acc_magnitude: np.ndarray, p_bits: int):
    """Lower bound of coef @ h + const as coef' @ acc + const' (h = activation(acc))."""
    positive = coef > 0
    mul = np.where(positive, relaxation.lo_mul, relaxation.hi_mul)
    add = np.where(positive, relaxation.lo_add, relaxation.hi_add)
    const = const + _floor_shift((coef * add).sum(axis=1), p_bits)
    new_coef = _floor_shift(coef * mul, SLOPE_BITS)
    return new_coef, const - int(acc_magnitude.sum())


def _back_substitute(k, affines, relaxations, z_lo, z_hi, x_magnitude, r_bits, p_bits):
    """[lower, upper] of layer k's accumulated values (exact rationals), back-substituted to the inputs."""
    n = affines[k].weights.shape[0]
    identity = np.zeros((2 * n, n), dtype=object)
    for j in range(n):
        identity[j, j], identity[n + j, j] = 1 << p_bits, -(1 << p_bits)
    coef, const = identity, np.zeros(2 * n, dtype=object)
    for m in range(k, -1, -1):
        if m == 0:
            coef, const = _through_affine(coef, const, affines[0], x_magnitude, p_bits)
            break
        coef, const = _through_affine(coef, const, affines[m], relaxations[m - 1].magnitude, p_bits)
        coef, const = _through_relaxation(coef, const, relaxations[m - 1], affines[m - 1].magnitude, p_bits)
    # coef @ x + const, x = z / 2^R: the extreme over the box, exactly
    low = const * (1 << r_bits) + np.where(coef > 0, coef * z_lo, coef * z_hi).sum(axis=1)
    scale = 1 << (p_bits + r_bits)
    return [Fraction(int(v), scale) for v in low[:n]], [-Fraction(int(v), scale) for v in low[n:]]


def _nearest_float(value: Fraction, dtype: type[np.floating]) -> np.floating:
    try:
        return dtype(float(value))
    except OverflowError:  # beyond double's range
        return dtype(np.inf if value > 0 else -np.inf)


def _float_ceil(value: Fraction, dtype: type[np.floating]) -> float:
    """The smallest value of the C type >= value (inf beyond the type's range)."""
    candidate = _nearest_float(value, dtype)
    while np.isfinite(candidate) and Fraction(float(candidate)) < value:
        candidate = np.nextafter(candidate, dtype(np.inf))
    return float(candidate)


def _float_floor(value: Fraction, dtype: type[np.floating]) -> float:
    """The largest value of the C type <= value (-inf beyond the type's range)."""
    candidate = _nearest_float(value, dtype)
    while np.isfinite(candidate) and Fraction(float(candidate)) > value:
        candidate = np.nextafter(candidate, dtype(-np.inf))
    return float(candidate)


def _tighten(qnet: QuantizedNetwork, lo: list[Fraction], hi: list[Fraction], base_lo, base_hi):
    """The intersection of symbolic bounds (exact rationals) with interval bounds, in the C's units:
    a word is an integer, a float value a value of the C type."""
    if qnet.is_fixed:
        sym_lo = np.array([math.ceil(v) for v in lo], dtype=np.int64)
        sym_hi = np.array([math.floor(v) for v in hi], dtype=np.int64)
        return np.maximum(base_lo, sym_lo), np.minimum(base_hi, sym_hi)
    dtype = qnet.number.dtype  # type: ignore[union-attr]
    sym_lo = np.array([_float_ceil(v, dtype) for v in lo], dtype=dtype)
    sym_hi = np.array([_float_floor(v, dtype) for v in hi], dtype=dtype)
    return np.maximum(base_lo, sym_lo).astype(dtype), np.minimum(base_hi, sym_hi).astype(dtype)


def exact_symbolic_bounds(qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray) -> tuple[LayerBounds, ...]:
    """Bounds of every neuron over the input box [lo, hi] (words or C-type values): the interval
    bounds of `implementation_bounds`, layer by layer, intersected with back-substituted linear bounds.

    Never looser than `implementation_bounds(qnet, lo, hi)`. Costs about `symbolic_cost(qnet)`
    exact multiply-adds. Networks with convolutions or pools, int8 and half-precision networks get
    the interval bounds only (the linear relations are written for dense layers in fixed point,
    float and double).
    """
    if not symbolic_applies(qnet):
        return implementation_bounds(qnet, lo, hi)
    x_lo, x_hi = _exact(lo), _exact(hi)
    r_bits = _dyadic_bits(x_lo + x_hi)
    p_bits = r_bits + GRID_BITS
    z_lo = np.array([int(v * (1 << r_bits)) for v in x_lo], dtype=object)
    z_hi = np.array([int(v * (1 << r_bits)) for v in x_hi], dtype=object)
    x_magnitude = _ceil_magnitude(x_lo, x_hi)
    affines: list[_Affine] = []
    relaxations: list[_Relaxation] = []
    post_lo, post_hi = lo, hi
    result = []
    symbolic = True
    for index, layer in enumerate(qnet.layers):
        interval = node_interval(qnet, layer, post_lo, post_hi)
        pre_lo, pre_hi = interval.pre_lo, interval.pre_hi
        finite = np.isfinite(pre_lo.astype(np.float64)) & np.isfinite(pre_hi.astype(np.float64))
        symbolic = symbolic and bool(finite.all())
        if not symbolic:
            result.append(interval)
            post_lo, post_hi = interval.post_lo, interval.post_hi
            continue
        h_lo, h_hi = _exact(post_lo), _exact(post_hi)
        exact = ~interval.may_overflow
        affines.append(_affine(layer, qnet, h_lo, h_hi, exact, _exact(pre_lo), _exact(pre_hi), p_bits))
        sym_lo, sym_hi = _back_substitute(
            index, affines, relaxations, z_lo, z_hi, x_magnitude, r_bits, p_bits
        )
        pre_lo, pre_hi = _tighten(qnet, sym_lo, sym_hi, pre_lo, pre_hi)
        if np.any(pre_lo > pre_hi):
            raise InternalError(f"symbolic bounds of layer {index + 1} contradict the interval bounds")
        affines[-1] = _with_bounds(affines[-1], _exact(pre_lo), _exact(pre_hi), p_bits)
        activated = activate_bounds(qnet, layer.activation, pre_lo, pre_hi)
        post_lo = np.maximum(activated[0], interval.post_lo).astype(activated[0].dtype)
        post_hi = np.minimum(activated[1], interval.post_hi).astype(activated[1].dtype)
        relaxations.append(
            _relaxation(
                layer.activation, _exact(pre_lo), _exact(pre_hi), _exact(post_lo), _exact(post_hi), p_bits
            )
        )
        result.append(LayerBounds(pre_lo, pre_hi, post_lo, post_hi, interval.may_overflow))
    return tuple(result)
