"""Network level: sound bounds by back-substitution over the whole network (DeepPoly / CROWN), in float64
numpy.

A linear bound is carried as an exact inequality `target >= lam . v + const` whose coefficients
`lam` are the float64 numbers actually stored; every step that computes new coefficients or
constants in float64 charges its rounding error, bounded a priori, to a non-negative `slack` that is
subtracted at the end:
- lam @ W (any summation order, BLAS included): |error| <= gamma_n |lam| |W| elementwise, charged
  as gamma_n |lam| (|W| max|h|), one matrix-vector product;
- elementwise products (ReLU slopes): one rounding, u |lam'| max|z|;
- the dot products that build the constant: gamma_n times the dot product of the magnitudes.
The ReLU relaxations are themselves exact inequalities on the stored floats: lower h >= a z with
a in [0, 1]; upper h <= s z + t with s rounded up past hi / (hi - lo) and t past -s lo, checked at
both ends of [lo, hi] (a convex function lies below a chord that lies above it at both ends).
int8's requantization staircases have the same two-sided form with an intercept on the lower side,
h >= a z + c (`staircase.Staircase.relaxation`); one code path carries both (c = 0 for a ReLU).

The arithmetic's rounding enters through `NetModel.error_terms` (the statement z = W h + b + e per
neuron, e in an interval); neurons without that statement (possible overflow) are free values in
their interval, from the implementation's own interval analysis (`qverify.quant.intervals`).
Each layer's bounds are the intersection of interval propagation, back-substitution, the parent
node's bounds (valid on a superset), the harness's invariants and the node's ReLU phase constraints.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.model import DenseLayer, NetModel
from qverify.engine.netlevel.roundoff import TINY, U64, gamma
from qverify.quant import LayerBounds, implementation_bounds

SLOPE_UP = 1.0 + 8 * U64  # rounds a computed slope or intercept past two roundings


class Undecidable(Exception):
    """The bounds cannot be made sound here (e.g. an IEEE overflow is possible): give up."""


@dataclass(slots=True, eq=False)
class Bounds:
    """One node's bounds per layer, real units: pre-activation bounds, free neurons, error terms."""

    pre_lo: list[np.ndarray]
    pre_hi: list[np.ndarray]
    free: list[np.ndarray]
    err_lo: list[np.ndarray]
    err_hi: list[np.ndarray]
    overflow_possible: bool = False
    relaxations: dict[int, tuple[np.ndarray, ...]] = dataclasses.field(default_factory=dict)
    affine: dict[int, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)

    def relaxation(self, layer: DenseLayer, index: int, alpha: np.ndarray | None = None):
        """(a, c, s, t, max |z|) of layer `index`'s activations (`activation_relaxation`; cached
        for the default lower slopes)."""
        if alpha is not None:
            return activation_relaxation(layer, self.pre_lo[index], self.pre_hi[index], alpha)
        cached = self.relaxations.get(index)
        if cached is None:
            cached = activation_relaxation(layer, self.pre_lo[index], self.pre_hi[index])
            self.relaxations[index] = cached
        return cached

    def affine_terms(
        self, model: NetModel, j: int, xl: np.ndarray, xu: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(center, charge) of layer j's statement z = W h + b + e for back-substitution:
        lam . (b + e) >= lam . center - |lam| . (radius of e), and `charge` also covers the float64
        rounding of center, of lam @ center and of lam @ W (gamma |lam| (|W| max|h|)), so that
        lam . z >= (lam @ W) . h + lam . center - |lam| . charge holds for the stored floats."""
        cached = self.affine.get(j)
        if cached is None:
            h_lo, h_hi = self.post(model, j - 1) if j > 0 else (xl, xu)
            cached = affine_charge(model.layers[j], self.err_lo[j], self.err_hi[j], h_lo, h_hi)
            self.affine[j] = cached
        return cached

    def post(self, model: NetModel, index: int) -> tuple[np.ndarray, np.ndarray]:
        return model.layers[index].post_bounds(self.pre_lo[index], self.pre_hi[index])

    def unstable(self, model: NetModel, index: int) -> np.ndarray:
        if not model.layers[index].relu:
            return np.zeros(len(self.pre_lo[index]), dtype=bool)
        return (self.pre_lo[index] < 0) & (self.pre_hi[index] > 0)


def affine_charge(
    layer: DenseLayer, err_lo: np.ndarray, err_hi: np.ndarray, h_lo: np.ndarray, h_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(center, charge) of `Bounds.affine_terms` from the layer's error terms and input bounds
    (elementwise: the arrays may carry a leading batch axis, one row per box)."""
    middle = (err_lo + err_hi) / 2
    center = layer.bias + middle
    h_max = np.maximum(np.abs(h_lo), np.abs(h_hi))
    magnitude = (
        np.abs(center)
        + np.abs(layer.bias)
        + np.maximum(np.abs(err_lo), np.abs(err_hi))
        + h_max @ layer.abs_weights.T
    )
    charge = (err_hi - err_lo) / 2 * (1 + 4 * U64) + 4 * U64 * (np.abs(center) + np.abs(middle))
    charge = (charge + gamma(layer.n_out + 3) * magnitude) * (1 + 1e-9) + TINY
    return center, charge


def matvec(lam: np.ndarray, v: np.ndarray) -> np.ndarray:
    """lam @ v row by row: (R, n) @ (n,) -> (R,), or per box (B, R, n) @ (B, n) -> (B, R)."""
    return (lam @ v[..., None])[..., 0]


@dataclass(slots=True, eq=False)
class BoundTerms:
    """The node's own bounds on hidden pre-activation values, z_j in [lo_j, hi_j], as Lagrangian
    terms of a back-substitution (the dual of the LP that has them as constraints). On the node,
    nu z <= nu+ hi - nu- lo for any nu (nu+ = max(nu, 0), nu- = max(-nu, 0)), so

        lam . z >= (lam + nu) . z - (nu+ . hi - nu- . lo):

    part of the coefficient on z is read through the bounds rather than substituted further down,
    where the relaxations below may be looser. A fixed ReLU phase is such a bound (active: lo >= 0,
    inactive: hi <= 0, settled into the node's bounds), so these terms are beta-CROWN's split
    constraints (beta = nu- on an active neuron, nu+ on an inactive one) and generalise them to
    every neuron: the relaxed network's value of a neuron can leave its bounds, and then a
    multiplier pays. Per layer `nus[k]` (rows, n_k), zero on free neurons (read through their
    interval anyway) and where nothing was chosen (then the terms change nothing, exactly)."""

    nus: dict[int, np.ndarray]

    @staticmethod
    def of(
        layers: list[int], rows: int, widths: list[int], start: dict[int, np.ndarray] | None = None
    ) -> BoundTerms:
        """Zero multipliers for `layers` (or `start`'s where it has them: a parent's)."""
        nus = {}
        for k in layers:
            given = None if start is None else start.get(k)
            nus[k] = np.zeros((rows, widths[k])) if given is None else np.array(given, dtype=np.float64)
        return BoundTerms(nus)

    def add(self, bounds: Bounds, j: int, lam, const, slack):
        """(lam + nu, const - (nu+ . hi - nu- . lo), slack): the float64 rounding of the new
        coefficients (one addition each: |lam' - (lam + nu)| <= u/(1-u) |lam'|, charged as
        2u |lam'| max |z|) and of the constant (gamma_n of its magnitudes) charged. (Elementwise,
        so that bounds and multipliers may carry a leading batch axis.)"""
        nu = np.where(bounds.free[j][..., None, :], 0.0, self.nus[j])
        moved = nu != 0
        if not moved.any():
            return lam, const, slack
        lo, hi = bounds.pre_lo[j][..., None, :], bounds.pre_hi[j][..., None, :]
        up, down = np.maximum(nu, 0.0), np.maximum(-nu, 0.0)
        value = (up * hi - down * lo).sum(axis=-1)
        magnitude = (up * np.abs(hi) + down * np.abs(lo)).sum(axis=-1)
        const = const - value - gamma(lo.shape[-1] + 2) * magnitude
        lam = lam + nu
        z_max = np.maximum(np.abs(lo), np.abs(hi))
        slack = slack + 2 * U64 * (np.where(moved, np.abs(lam), 0.0) * z_max).sum(axis=-1) + TINY
        return lam, const, slack


@dataclass(slots=True, eq=False)
class LinearBound:
    """lower[r] <= C[r] . (layer k's values) for every row r, and how the bound reads the input:
    the input coefficients `lam_input` and per hidden layer the coefficients on its post-activation
    values (for branching scores), when asked for."""

    lower: np.ndarray
    lam_input: np.ndarray
    lam_post: dict[int, np.ndarray]
    offset: np.ndarray  # C[r] . v >= lam_input[r] . x + offset[r] for every x of the node's box


def relu_relaxation(
    lo: np.ndarray, hi: np.ndarray, alpha: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, s, t): a z <= relu(z) <= s z + t on [lo, hi], exact on stable neurons. `alpha` chooses
    the lower slopes of unstable neurons (default DeepPoly's: 1 when hi >= -lo, else 0)."""
    active = lo >= 0
    unstable = (lo < 0) & (hi > 0)
    width = np.where(unstable, hi - lo, 1.0)
    s = np.where(unstable, hi / width * SLOPE_UP, np.where(active, 1.0, 0.0))
    t = np.where(unstable, -(s * lo) * SLOPE_UP, 0.0)
    if alpha is None:
        lower = np.where(hi >= -lo, 1.0, 0.0)
    else:
        lower = np.clip(alpha, 0.0, 1.0)
    a = np.where(unstable, lower, np.where(active, 1.0, 0.0))
    return a, s, t


def activation_relaxation(
    layer: DenseLayer, lo: np.ndarray, hi: np.ndarray, alpha: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """(a, c, s, t, max |z|): a z + c <= h <= s z + t on [lo, hi] for the layer's ReLUs (c = 0,
    `relu_relaxation`) or requantization staircases (`Staircase.relaxation`); per box with a
    leading batch axis."""
    z_max = np.maximum(np.abs(lo), np.abs(hi))
    if layer.stairs is not None:
        return (*layer.stairs.relaxation(lo, hi), z_max)
    a, s, t = relu_relaxation(lo, hi, alpha)
    return a, np.zeros_like(t), s, t, z_max


def relaxed_constant(positive, negative, c, t):
    """positive @ c + negative @ t pushed down past its float64 rounding (gamma_n of the
    magnitudes; for a ReLU, c = 0 and t >= 0, this is (negative @ t) (1 + gamma)); per box with
    a leading batch axis."""
    n = c.shape[-1]
    value = matvec(positive, c) + matvec(negative, t)
    magnitude = matvec(positive, np.abs(c)) - matvec(negative, np.abs(t))
    return value - gamma(n + 2) * magnitude


def backsubstitute(
    model: NetModel,
    bounds: Bounds,
    coefficients: np.ndarray,
    index: int,
    post: bool,
    xl: np.ndarray,
    xu: np.ndarray,
    alphas: dict[int, np.ndarray] | None = None,
    keep: bool = False,
    terms: BoundTerms | None = None,
) -> LinearBound:
    """Sound lower bounds of coefficients @ v over the node, v layer `index`'s pre-activation values
    (or post-activation with `post`), by substitution down to the input box [xl, xu]. `splits`: the
    node's bounds (and so its fixed ReLU phases) as Lagrangian terms (`BoundTerms`, beta-CROWN)."""
    lam = np.array(coefficients, dtype=np.float64, ndmin=2)
    rows = lam.shape[0]
    const = np.zeros(rows)
    slack = np.zeros(rows)
    lam_post: dict[int, np.ndarray] = {}
    layer_index = index
    relax_first = post and model.layers[index].relaxed
    if relax_first:
        lam, const, slack = _through_relu(model, bounds, layer_index, lam, const, slack, alphas)
    for j in range(index, -1, -1):
        layer = model.layers[j]
        if terms is not None and j in terms.nus:
            lam, const, slack = terms.add(bounds, j, lam, const, slack)
        free = bounds.free[j]
        if free.any():
            part = lam[:, free]
            lo, hi = bounds.pre_lo[j][free], bounds.pre_hi[j][free]
            const = const + np.minimum(part * lo, part * hi).sum(axis=1)
            slack += gamma(int(free.sum()) + 2) * (np.abs(part) @ np.maximum(np.abs(lo), np.abs(hi))) + TINY
            lam = lam.copy()
            lam[:, free] = 0.0
        center, charge = bounds.affine_terms(model, j, xl, xu)
        const = const + lam @ center
        slack += np.abs(lam) @ charge
        lam = lam @ layer.weights
        if j == 0:
            break
        if keep:
            lam_post[j - 1] = lam
        lam, const, slack = _through_relu(model, bounds, j - 1, lam, const, slack, alphas)
    offset = const - (slack + 4 * U64 * np.abs(const)) * (1 + 1e-6)  # the additions that built const
    return LinearBound(linear_minimum(lam, offset, xl, xu), lam, lam_post, offset)


def linear_minimum(lam: np.ndarray, offset: np.ndarray, xl: np.ndarray, xu: np.ndarray) -> np.ndarray:
    """Sound lower bounds of lam[r] . x + offset[r] over the box [xl, xu] (float64 error charged;
    with a leading batch axis on every argument, per box)."""
    positive, negative = np.maximum(lam, 0.0), np.minimum(lam, 0.0)
    value = matvec(positive, xl) + matvec(negative, xu) + offset
    x_max = np.maximum(np.abs(xl), np.abs(xu))
    slack = gamma(xl.shape[-1] + 3) * (matvec(np.abs(lam), x_max) + np.abs(offset)) + TINY
    return value - slack


def _through_relu(model, bounds, j, lam, const, slack, alphas):
    """Replace lam . h_j by a lower bound in z_j (h_j = relu(z_j), a staircase, or z_j)."""
    layer = model.layers[j]
    if not layer.relaxed:
        return lam, const, slack
    a, c, s, t, z_max = bounds.relaxation(layer, j, None if alphas is None else alphas.get(j))
    positive, negative = np.maximum(lam, 0.0), np.minimum(lam, 0.0)  # lower / upper relaxation
    const = const + relaxed_constant(positive, negative, c, t)
    lam = positive * a + negative * s
    slack += 2 * U64 * (np.abs(lam) @ z_max) + TINY
    return lam, const, slack


def interval_layer(model, index, h_lo, h_hi, err_lo, err_hi):
    """Interval propagation through layer `index` (per box with a leading batch axis)."""
    layer = model.layers[index]
    positive, negative = np.maximum(layer.weights, 0.0).T, np.minimum(layer.weights, 0.0).T
    lo = h_lo @ positive + h_hi @ negative + layer.bias + err_lo
    hi = h_hi @ positive + h_lo @ negative + layer.bias + err_hi
    h_max = np.maximum(np.abs(h_lo), np.abs(h_hi))
    margin = (
        gamma(layer.n_in + 3)
        * (h_max @ layer.abs_weights.T + np.abs(layer.bias) + np.maximum(np.abs(err_lo), np.abs(err_hi)))
        + TINY
    )
    return lo - margin, hi + margin


def _free_interval(model: NetModel, index: int, h_lo: np.ndarray, h_hi: np.ndarray, region_words):
    """The C's own interval bounds of layer `index` (words -> real units) for neurons that may
    overflow, and which of them may (fixed point only)."""
    qnet = model.qnet
    fmt = qnet.number
    if index == 0 and region_words is not None:
        lo_w, hi_w = region_words
    else:
        lo_w = np.clip(np.ceil(h_lo / model.unit), fmt.min_q, fmt.max_q).astype(np.int64)
        hi_w = np.clip(np.floor(h_hi / model.unit), fmt.min_q, fmt.max_q).astype(np.int64)
        hi_w = np.maximum(hi_w, lo_w)
    single = dataclasses.replace(qnet, layers=(qnet.layers[index],))
    layer_bounds: LayerBounds = implementation_bounds(single, lo_w, hi_w)[0]
    return (
        layer_bounds.pre_lo.astype(np.float64) * model.unit,
        layer_bounds.pre_hi.astype(np.float64) * model.unit,
        layer_bounds.may_overflow,
    )


def node_bounds(
    model: NetModel,
    xl: np.ndarray,
    xu: np.ndarray,
    phases: list[np.ndarray],
    parent: Bounds | None = None,
    start: int = 0,
    invariants: tuple[LayerBounds, ...] | None = None,
    region_words: tuple[np.ndarray, np.ndarray] | None = None,
    alphas: dict[int, np.ndarray] | None = None,
) -> Bounds | None:
    """Every layer's bounds over the node (input box [xl, xu] in reals, ReLU phases: +1 active,
    -1 inactive, 0 open), or None when the node holds no execution. Layers before `start` are the
    parent's (their constraints did not change)."""
    n_layers = len(model.layers)
    if parent is not None and start > 0:
        bounds = Bounds(
            parent.pre_lo[:start],
            parent.pre_hi[:start],
            parent.free[:start],
            parent.err_lo[:start],
            parent.err_hi[:start],
            parent.overflow_possible,
            {k: v for k, v in parent.relaxations.items() if k < start},
            {k: v for k, v in parent.affine.items() if k < start},
        )
    else:
        start = 0
        bounds = Bounds([], [], [], [], [])
    for k in range(start, n_layers):
        layer = model.layers[k]
        h_lo, h_hi = bounds.post(model, k - 1) if k > 0 else (xl, xu)
        h_max = np.maximum(np.abs(h_lo), np.abs(h_hi))
        err_lo, err_hi, related = model.error_terms(k, h_max)
        free = ~related
        if free.any() and not model.is_fixed:
            raise Undecidable(f"netlevel: float overflow possible in layer {k + 1}")
        err_lo, err_hi = np.where(free, 0.0, err_lo), np.where(free, 0.0, err_hi)
        lo, hi = interval_layer(model, k, h_lo, h_hi, err_lo, err_hi)
        if free.any():
            free_lo, free_hi, may_overflow = _free_interval(model, k, h_lo, h_hi, region_words)
            lo, hi = np.where(free, free_lo, lo), np.where(free, free_hi, hi)
            free = free & may_overflow  # the others have the relation after all (cancellations)
            if (~free & ~related).any():  # recompute their rounding terms: no overflow, so they hold
                count = model.rounding_count(k, h_max)
                fix = ~free & ~related
                err_lo = np.where(fix, count * model.round_lo, err_lo)
                err_hi = np.where(fix, count * model.round_hi, err_hi)
        bounds.pre_lo.append(lo)
        bounds.pre_hi.append(hi)
        bounds.free.append(free)
        bounds.err_lo.append(err_lo)
        bounds.err_hi.append(err_hi)
        if parent is not None and k < len(parent.pre_lo):
            lo, hi = np.maximum(lo, parent.pre_lo[k]), np.minimum(hi, parent.pre_hi[k])
        if k > 0 and layer.relaxed and (k < n_layers - 1 or layer.stairs is not None):
            bounds.pre_lo[k], bounds.pre_hi[k] = lo, hi
            refine = layer.open_neurons(lo, hi) & ~free & (phases[k] == 0)
            if refine.any():
                rows = np.flatnonzero(refine)
                eye = np.zeros((2 * len(rows), layer.n_out))
                eye[np.arange(len(rows)), rows] = 1.0
                eye[len(rows) + np.arange(len(rows)), rows] = -1.0
                found = backsubstitute(model, bounds, eye, k, False, xl, xu, alphas).lower
                lo = lo.copy()
                hi = hi.copy()
                lo[rows] = np.maximum(lo[rows], found[: len(rows)])
                hi[rows] = np.minimum(hi[rows], -found[len(rows) :])
        if invariants is not None and not model.real:
            scale = model.unit if model.is_fixed else 1.0
            lo = np.maximum(lo, invariants[k].pre_lo.astype(np.float64) * scale)
            hi = np.minimum(hi, invariants[k].pre_hi.astype(np.float64) * scale)
        lo, hi = settle(model, k, lo, hi, phases)
        if np.any(lo > hi):
            return None
        bounds.pre_lo[k], bounds.pre_hi[k] = lo, hi
    # under `--overflow detect` a possible overflow is itself a possible violation
    bounds.overflow_possible = model.detect and any(free.any() for free in bounds.free)
    return bounds


def settle(
    model: NetModel, k: int, lo: np.ndarray, hi: np.ndarray, phases: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Layer k's bounds moved inward to what the node allows: whole words in fixed point (the
    implementation's values are multiples of the unit), and the ReLU phases (active: z >= 0, one
    word in fixed point; inactive: z <= 0)."""
    integer_grid = model.is_fixed and not model.real
    if integer_grid:
        lo, hi = np.ceil(lo / model.unit) * model.unit, np.floor(hi / model.unit) * model.unit
    if model.layers[k].relu and k < len(phases):
        lo = np.where(phases[k] > 0, np.maximum(lo, model.unit if integer_grid else 0.0), lo)
        hi = np.where(phases[k] < 0, np.minimum(hi, 0.0), hi)
    return lo, hi


def tighten_intermediate(
    model: NetModel,
    bounds: Bounds,
    xl: np.ndarray,
    xu: np.ndarray,
    phases: list[np.ndarray],
    steps: int,
    deadline: float,
) -> Bounds | None:
    """alpha-CROWN on the hidden layers' own bounds, first layer to last: each open (unstable,
    unsplit, not free) neuron's pre-activation bounds by `optimised_bound` with its own slopes, so
    each layer's tighter relaxations serve the next. On image-size networks DeepPoly's fixed slopes
    leave most deep ReLUs open where the optimised ones close many (digits784, eps 0.015: a root
    margin of -1.1 becomes +1.4). The bounds shrink in place (intersected, settled to the node);
    None when they become empty (the node holds no execution). Stops between layers at `deadline`
    (what is done stays: every bound is sound on its own)."""
    for k in range(1, len(model.layers) - 1):
        if time.monotonic() > deadline:
            break
        if not model.layers[k].relu:
            continue
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        rows = np.flatnonzero((lo < 0) & (hi > 0) & ~bounds.free[k] & (phases[k] == 0))
        if not len(rows):
            continue
        eye = np.zeros((2 * len(rows), len(lo)))
        eye[np.arange(len(rows)), rows] = 1.0
        eye[len(rows) + np.arange(len(rows)), rows] = -1.0
        found = optimised_bound(model, bounds, eye, xl, xu, steps, index=k).lower
        lo, hi = lo.copy(), hi.copy()
        lo[rows] = np.maximum(lo[rows], found[: len(rows)])
        hi[rows] = np.minimum(hi[rows], -found[len(rows) :])
        lo, hi = settle(model, k, lo, hi, phases)
        if np.any(lo > hi):
            return None
        bounds.pre_lo[k], bounds.pre_hi[k] = lo, hi
        bounds.relaxations.pop(k, None)
        bounds.affine.pop(k + 1, None)  # its charge reads this layer's max |h|
        if model.is_fixed and not model.real:
            # neurons now inactive make the next layer's products by them exact: fewer roundings
            keep = bounds.free[k + 1]
            h_lo, h_hi = bounds.post(model, k)
            err_lo, err_hi, _ = model.error_terms(k + 1, np.maximum(np.abs(h_lo), np.abs(h_hi)))
            bounds.err_lo[k + 1] = np.where(
                keep, bounds.err_lo[k + 1], np.maximum(bounds.err_lo[k + 1], err_lo)
            )
            bounds.err_hi[k + 1] = np.where(
                keep, bounds.err_hi[k + 1], np.minimum(bounds.err_hi[k + 1], err_hi)
            )
    return bounds


def optimised_bound(
    model: NetModel,
    bounds: Bounds,
    coefficients: np.ndarray,
    xl: np.ndarray,
    xu: np.ndarray,
    steps: int,
    start: LinearBound | None = None,
    index: int | None = None,
) -> LinearBound:
    """alpha-CROWN on rows of the outputs (or, with `index`, of that layer's pre-activation
    values): the lower ReLU slopes of every hidden layer below, one set per row, improved by
    projected sign-gradient ascent on the row's bound. The gradient is that of the bound with the
    relaxation choices held (d bound / d alpha = coefficient x the relaxed network's value of the
    neuron at the minimising input vertex); it only steers the search: every bound returned is a
    back-substitution result, sound for any slopes in [0, 1]. Per row, the best bound seen wins."""
    last = len(model.layers) - 1
    post = index is None
    index = last if index is None else index
    rows = np.atleast_2d(coefficients).shape[0]
    hidden = [
        k for k in range(min(index + post, last)) if model.layers[k].relu and bounds.unstable(model, k).any()
    ]
    best = start or backsubstitute(model, bounds, coefficients, index, post, xl, xu, keep=True)
    if not hidden or steps <= 0:
        return best
    alphas = {}
    for k in hidden:
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        alphas[k] = np.tile(np.where(hi >= -lo, 1.0, 0.0), (rows, 1))
    current = best
    step_size = 0.5
    for _ in range(steps):
        gradients = alpha_gradients(model, bounds, current, alphas, xl, xu, index)
        for k in hidden:
            alphas[k] = np.clip(alphas[k] + step_size * np.sign(gradients[k]), 0.0, 1.0)
        step_size *= 0.7
        current = backsubstitute(model, bounds, coefficients, index, post, xl, xu, alphas, keep=True)
        better = current.lower > best.lower
        if better.any():
            best = LinearBound(
                np.where(better, current.lower, best.lower),
                np.where(better[:, None], current.lam_input, best.lam_input),
                {k: np.where(better[:, None], current.lam_post[k], best.lam_post[k]) for k in best.lam_post},
                np.where(better, current.offset, best.offset),
            )
    return best


def alpha_gradients(model, bounds, linear, alphas, xl, xu, stop: int | None = None):
    """d (row bound) / d alpha per hidden layer below `stop` (default: every one), with the
    relaxation choices of `linear` held (per box with a leading batch axis on the bounds,
    `linear`'s arrays, the alphas and the box)."""
    return relaxed_gradients(model, bounds, linear, alphas, xl, xu, stop)[0]


def relaxed_gradients(model, bounds, linear, alphas, xl, xu, stop: int | None = None, terms=None):
    """(d bound / d alpha, d bound / d nu) per layer below `stop`, the relaxation choices of
    `linear` held: the relaxed network (each open ReLU replaced by the side of its relaxation the
    row's coefficient chose) evaluated at the input vertex that minimises the row's bound. A
    row's bound moves by coefficient x z per unit of an open neuron's lower slope, and by z - hi
    (nu > 0) or z - lo (nu < 0) per unit of a bound multiplier (`BoundTerms`; at nu = 0 the side
    that pays, if z lies outside [lo, hi]). These only steer the optimisation; every bound is
    recomputed."""
    x = np.where(linear.lam_input > 0, xl[..., None, :], xu[..., None, :])
    values = x
    gradients, split_gradients = {}, {}
    for k in range(min(len(model.layers) - 1, len(model.layers) if stop is None else stop)):
        layer = model.layers[k]
        z = values @ layer.weights.T + layer.bias
        if terms is not None and k in terms.nus:
            lo_k, hi_k, nu = bounds.pre_lo[k], bounds.pre_hi[k], terms.nus[k]
            above, below = z - hi_k, z - lo_k
            split_gradients[k] = np.where(
                nu > 0, above, np.where(nu < 0, below, np.where(above > 0, above, np.minimum(below, 0.0)))
            )
        if not layer.relu:
            values = z
            continue
        lo, hi = bounds.pre_lo[k][..., None, :], bounds.pre_hi[k][..., None, :]
        lam = linear.lam_post.get(k)
        if lam is None:
            values = np.maximum(z, 0.0)
            continue
        unstable = (lo < 0) & (hi > 0)
        alpha = alphas.get(k)
        a, s, t = relu_relaxation(lo, hi, alpha)
        lower_used = lam >= 0
        relaxed = np.where(lower_used, a * z, s * z + t)
        values = np.where(unstable, relaxed, np.where(lo >= 0, z, 0.0))
        if k in alphas:
            gradients[k] = np.where(unstable & lower_used, lam * z, 0.0)
    return gradients, split_gradients


def with_phase(model: NetModel, bounds: Bounds, layer: int, neuron: int, phase: int) -> Bounds | None:
    """The parent's bounds with one ReLU's phase fixed (active: z >= 0, one word for fixed point;
    inactive: z <= 0), every other layer's bounds kept (the parent's bounds hold on the child's
    subset; the search then bounds the layers after the split again with `node_bounds`). None
    when the phase contradicts the bounds."""
    lo, hi = bounds.pre_lo[layer].copy(), bounds.pre_hi[layer].copy()
    if phase > 0:
        lo[neuron] = max(lo[neuron], model.unit if model.is_fixed and not model.real else 0.0)
    else:
        hi[neuron] = min(hi[neuron], 0.0)
    if lo[neuron] > hi[neuron]:
        return None
    pre_lo, pre_hi = list(bounds.pre_lo), list(bounds.pre_hi)
    pre_lo[layer], pre_hi[layer] = lo, hi
    relaxations = {k: v for k, v in bounds.relaxations.items() if k != layer}
    # the next layer's charge used max|h| of this layer, which can only have shrunk: still sound
    return Bounds(
        pre_lo,
        pre_hi,
        bounds.free,
        bounds.err_lo,
        bounds.err_hi,
        bounds.overflow_possible,
        relaxations,
        dict(bounds.affine),
    )
