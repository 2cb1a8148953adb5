"""Network level: bounds of many input boxes at once: `bounds.node_bounds` with a batch axis, for input
splitting.

At ACAS Xu size (6 layers of 50 ReLUs) one node's back-substitution is dozens of numpy calls on
50x50 matrices: Python's overhead per call, not arithmetic, is the cost (measured: ~6.5 ms per
node). Input splitting (low-dimensional inputs) makes nodes that differ only in their box, so B
boxes can share every call: each array gets a leading batch axis (relaxation slopes, intercepts,
error terms and bounds per box; lam (B, rows, n)).

The soundness accounting is exactly `bounds`' -- the same statements per box, the same charges:
every float64 product `lam @ W` or `lam @ v` is charged gamma_n of its magnitudes, which holds for
any summation order, so a batched (BLAS) product is covered by the same term; the elementwise steps
are the same operations on more elements. `affine_charge`, `relu_relaxation`, `interval_layer`,
`linear_minimum` and `NetModel.error_terms` are the per-node functions themselves (they accept the
batch axis).

Scope (the caller falls back to `node_bounds` per box elsewhere): nodes with no ReLU phase fixed and
no alpha slopes, and boxes whose neurons all have the linear statement (`NetModel.error_terms`'s
`related`; a possible fixed-point overflow needs the implementation's interval analysis per box,
an IEEE one makes the node undecidable). Such boxes are flagged in `BatchBounds.fallback`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.bounds import (
    Bounds,
    activation_relaxation,
    affine_charge,
    alpha_gradients,
    interval_layer,
    linear_minimum,
    matvec,
    relaxed_constant,
    relu_relaxation,
)
from qverify.engine.netlevel.model import NetModel
from qverify.engine.netlevel.roundoff import TINY, U64
from qverify.quant import LayerBounds


@dataclass(slots=True, eq=False)
class BatchBounds:
    """Every layer's bounds of B boxes, (B, n_k) per layer, and which boxes the batch could not
    bound (`fallback`: use `node_bounds`) or found empty (`empty`: no execution)."""

    pre_lo: list[np.ndarray]
    pre_hi: list[np.ndarray]
    err_lo: list[np.ndarray]
    err_hi: list[np.ndarray]
    affine: list[tuple[np.ndarray, np.ndarray]]
    relaxations: dict[int, tuple[np.ndarray, ...]]  # (a, c, s, t, max |z|) per layer
    fallback: np.ndarray
    empty: np.ndarray

    def box(self, b: int) -> Bounds:
        """Box b's bounds as the per-node record (no free neurons; caches carried over)."""
        n_layers = len(self.pre_lo)
        return Bounds(
            [self.pre_lo[k][b] for k in range(n_layers)],
            [self.pre_hi[k][b] for k in range(n_layers)],
            [np.zeros(self.pre_lo[k].shape[1], dtype=bool) for k in range(n_layers)],
            [self.err_lo[k][b] for k in range(n_layers)],
            [self.err_hi[k][b] for k in range(n_layers)],
            False,
            {k: tuple(part[b] for part in value) for k, value in self.relaxations.items()},
            {k: (center[b], charge[b]) for k, (center, charge) in enumerate(self.affine)},
        )

    def post(self, model: NetModel, index: int) -> tuple[np.ndarray, np.ndarray]:
        return model.layers[index].post_bounds(self.pre_lo[index], self.pre_hi[index])


@dataclass(slots=True, eq=False)
class BatchLinearBound:
    """`bounds.LinearBound` per box: lower (B, R), lam_input (B, R, n), lam_post k -> (B, R, n_k),
    offset (B, R)."""

    lower: np.ndarray
    lam_input: np.ndarray
    lam_post: dict[int, np.ndarray]
    offset: np.ndarray


def batch_bounds(
    model: NetModel,
    xl: np.ndarray,
    xu: np.ndarray,
    parent_lo: list[np.ndarray] | None,
    parent_hi: list[np.ndarray] | None,
    invariants: tuple[LayerBounds, ...] | None = None,
) -> BatchBounds:
    """`node_bounds` of B boxes [xl[b], xu[b]] (reals) with no phase fixed, each intersected with
    its parent's bounds (parent_lo[k][b], parent_hi[k][b]: valid on a superset; +-inf for none)."""
    n_layers = len(model.layers)
    batch = xl.shape[0]
    result = BatchBounds([], [], [], [], [], {}, np.zeros(batch, dtype=bool), np.zeros(batch, dtype=bool))
    integer_grid = model.is_fixed and not model.real
    for k in range(n_layers):
        layer = model.layers[k]
        h_lo, h_hi = result.post(model, k - 1) if k > 0 else (xl, xu)
        h_max = np.maximum(np.abs(h_lo), np.abs(h_hi))
        err_lo, err_hi, related = model.error_terms(k, h_max)
        # fixed point's rounding terms do not depend on the box: one row per box all the same
        err_lo, err_hi = (
            np.broadcast_to(err_lo, (batch, layer.n_out)),
            np.broadcast_to(err_hi, (batch, layer.n_out)),
        )
        free = ~np.broadcast_to(related, (batch, layer.n_out))
        if free.any():  # these boxes need the implementation's own intervals: per node
            result.fallback |= free.any(axis=1)
            err_lo, err_hi = np.where(free, 0.0, err_lo), np.where(free, 0.0, err_hi)
        lo, hi = interval_layer(model, k, h_lo, h_hi, err_lo, err_hi)
        result.err_lo.append(err_lo)
        result.err_hi.append(err_hi)
        result.affine.append(affine_charge(layer, err_lo, err_hi, h_lo, h_hi))
        if parent_lo is not None and parent_hi is not None:
            lo, hi = np.maximum(lo, parent_lo[k]), np.minimum(hi, parent_hi[k])
        result.pre_lo.append(lo)
        result.pre_hi.append(hi)
        if k > 0 and layer.relaxed and (k < n_layers - 1 or layer.stairs is not None):
            lo, hi = _refine(model, result, k, lo, hi, xl, xu)
        if invariants is not None and not model.real:
            scale = model.unit if model.is_fixed else 1.0
            lo = np.maximum(lo, invariants[k].pre_lo.astype(np.float64) * scale)
            hi = np.minimum(hi, invariants[k].pre_hi.astype(np.float64) * scale)
        if integer_grid:
            lo, hi = np.ceil(lo / model.unit) * model.unit, np.floor(hi / model.unit) * model.unit
        result.empty |= np.any(lo > hi, axis=1)
        result.pre_lo[k], result.pre_hi[k] = lo, hi
        if layer.relaxed:
            result.relaxations[k] = activation_relaxation(layer, lo, hi)
    return result


def _refine(model, bounds: BatchBounds, k, lo, hi, xl, xu) -> tuple[np.ndarray, np.ndarray]:
    """Layer k's open neurons re-bounded by back-substitution: each box's own open neurons, as
    rows e_j and -e_j (boxes with fewer open neurons than the most are padded with zero rows)."""
    refine = model.layers[k].open_neurons(lo, hi)
    counts = refine.sum(axis=1)
    width = int(counts.max(initial=0))
    if width == 0:
        return lo, hi
    boxes, neurons = np.nonzero(refine)  # row-major: each box's neurons in order
    slots = np.arange(len(boxes)) - np.repeat(np.cumsum(counts) - counts, counts)
    coefficients = np.zeros((len(lo), 2 * width, lo.shape[1]))
    coefficients[boxes, slots, neurons] = 1.0
    coefficients[boxes, width + slots, neurons] = -1.0
    found = batch_backsubstitute(model, bounds, coefficients, k, False, xl, xu).lower
    lo, hi = lo.copy(), hi.copy()
    lo[boxes, neurons] = np.maximum(lo[boxes, neurons], found[boxes, slots])
    hi[boxes, neurons] = np.minimum(hi[boxes, neurons], -found[boxes, width + slots])
    return lo, hi


def batch_backsubstitute(
    model: NetModel,
    bounds: BatchBounds,
    coefficients: np.ndarray,
    index: int,
    post: bool,
    xl: np.ndarray,
    xu: np.ndarray,
    keep: bool = False,
    alphas: dict[int, np.ndarray] | None = None,
) -> BatchLinearBound:
    """`bounds.backsubstitute` per box: sound lower bounds of coefficients (R, n), or (B, R, n) one
    set per box, @ v over every box, v layer `index`'s pre-activation (or post-activation with
    `post`) values."""
    batch = xl.shape[0]
    lam = np.asarray(coefficients, dtype=np.float64)
    if lam.ndim == 2:
        lam = np.broadcast_to(lam, (batch, *lam.shape))
    rows = lam.shape[1]
    const = np.zeros((batch, rows))
    slack = np.zeros((batch, rows))
    lam_post: dict[int, np.ndarray] = {}
    if post and model.layers[index].relaxed:
        lam, const, slack = _through_relu(model, bounds, index, lam, const, slack, alphas)
    for j in range(index, -1, -1):
        center, charge = bounds.affine[j]
        const = const + matvec(lam, center)
        slack = slack + matvec(np.abs(lam), charge)
        lam = lam @ model.layers[j].weights
        if j == 0:
            break
        if keep:
            lam_post[j - 1] = lam
        lam, const, slack = _through_relu(model, bounds, j - 1, lam, const, slack, alphas)
    offset = const - (slack + 4 * U64 * np.abs(const)) * (1 + 1e-6)  # the additions that built const
    return BatchLinearBound(linear_minimum(lam, offset, xl, xu), lam, lam_post, offset)


def _through_relu(model, bounds: BatchBounds, j, lam, const, slack, alphas=None):
    """`bounds._through_relu` per box (slopes and intercepts of box b apply to lam[b]; `alphas`:
    lower slopes per box and row, (B, R, n_j))."""
    if not model.layers[j].relaxed:
        return lam, const, slack
    a, c, s, t, z_max = bounds.relaxations[j]
    a = a[:, None, :]
    if alphas is not None and j in alphas:
        a = relu_relaxation(bounds.pre_lo[j][:, None, :], bounds.pre_hi[j][:, None, :], alphas[j])[0]
    positive, negative = np.maximum(lam, 0.0), np.minimum(lam, 0.0)
    const = const + relaxed_constant(positive, negative, c, t)
    lam = positive * a + negative * s[:, None, :]
    slack = slack + 2 * U64 * matvec(np.abs(lam), z_max) + TINY
    return lam, const, slack


def batch_optimised_bound(
    model: NetModel,
    bounds: BatchBounds,
    coefficients: np.ndarray,
    xl: np.ndarray,
    xu: np.ndarray,
    steps: int,
    start: BatchLinearBound,
) -> BatchLinearBound:
    """`bounds.optimised_bound` per box: alpha-CROWN on the rows (lower ReLU slopes per box and
    row, projected sign-gradient ascent, `bounds.alpha_gradients`); every bound returned is a
    back-substitution result, sound for any slopes in [0, 1], and per box and row the best seen
    wins. Intermediate bounds stay DeepPoly's."""
    last = len(model.layers) - 1
    rows = start.lower.shape[1]
    alphas = {}
    for k in range(last):
        if model.layers[k].relu and k in bounds.relaxations:
            default = bounds.relaxations[k][0]  # DeepPoly's slopes (exact on stable neurons)
            alphas[k] = np.repeat(default[:, None, :], rows, axis=1)
    best = current = start
    step_size = 0.5
    for _ in range(steps):
        gradients = alpha_gradients(model, bounds, current, alphas, xl, xu)
        for k, gradient in gradients.items():
            alphas[k] = np.clip(alphas[k] + step_size * np.sign(gradient), 0.0, 1.0)
        step_size *= 0.7
        current = batch_backsubstitute(model, bounds, coefficients, last, True, xl, xu, True, alphas)
        better = current.lower > best.lower
        if better.any():
            best = BatchLinearBound(
                np.where(better, current.lower, best.lower),
                np.where(better[..., None], current.lam_input, best.lam_input),
                {k: np.where(better[..., None], current.lam_post[k], v) for k, v in best.lam_post.items()},
                np.where(better, current.offset, best.offset),
            )
    return best
