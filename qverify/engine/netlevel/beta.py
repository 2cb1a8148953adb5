"""Network level: the output bounds of a ReLU-split node optimised over its relaxation's lower slopes and
its split constraints' multipliers together (alpha-beta-CROWN), warm-started from the parent.

A node of ReLU splitting fixes some phases (active: z >= 0, inactive: z <= 0). Its bounds used to
read them only through the split neurons' own bounds and the layers after them (bounded again); the
layers before a split never saw it. `bounds.SplitTerms` adds each fixed phase to the
back-substitution as a Lagrangian term beta s z (s z <= 0 on the node, beta >= 0), so every bound
below the split reads it too; for any slopes in [0, 1] and multipliers >= 0 the result is a sound
lower bound (the float64 rounding charged as everywhere in `bounds`), and the optimisation only
chooses them: projected gradient ascent with Adam's step (the gradient of the bound with the
relaxation choices held, `bounds.relaxed_gradients`), the best bound per row kept with the slopes
and multipliers that gave it, which the node's children start from (a child's new split starts at
beta = 0, so its first bound is at least its parent's relaxation).

Departures from beta-CROWN (Wang et al. 2021): the intermediate layers' bounds are not optimised
per node (the root's are, by `bounds.tighten_intermediate`; a child bounds the layers after its
split again by DeepPoly and keeps its parent's otherwise); the multipliers are per row, as the
slopes; the step is Adam's on float64 numpy, no autograd.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.bounds import (
    STAIR_SLOPE_RANGE,
    Bounds,
    BoundTerms,
    LinearBound,
    backsubstitute,
    best_rows,
    relaxed_gradients,
    stair_layers,
    stair_relaxation,
    stair_setup,
    stair_start,
)
from qverify.engine.netlevel.model import NetModel

ALPHA_RATE = 0.1  # Adam's step on the lower slopes (in [0, 1])
BETA_RATE = 0.05  # Adam's step on the multipliers, relative to the row's coefficients at that layer
RATE_DECAY = 0.9  # per step
BOUND_TERMS_EVERYWHERE = True


@dataclass(slots=True, eq=False)
class Optimised:
    """The best bound per row, and the slopes and multipliers per row that gave it (a child's
    warm start): alphas[k] (rows, n_k) for layers with open ReLUs, betas[k] (rows, n_k) for layers
    with fixed phases."""

    bound: LinearBound
    alphas: dict[int, np.ndarray]
    betas: dict[int, np.ndarray]


class _Adam:
    """Adam's ascent direction per parameter (Kingma and Ba), numpy arrays of any shape."""

    def __init__(self) -> None:
        self.first: dict = {}
        self.second: dict = {}
        self.steps = 0

    def direction(self, key, gradient: np.ndarray) -> np.ndarray:
        first = 0.9 * self.first.get(key, 0.0) + 0.1 * gradient
        second = 0.999 * self.second.get(key, 0.0) + 0.001 * gradient * gradient
        self.first[key], self.second[key] = first, second
        t = self.steps + 1
        return (first / (1 - 0.9**t)) / (np.sqrt(second / (1 - 0.999**t)) + 1e-12)


def optimise_output_bounds(
    model: NetModel,
    bounds: Bounds,
    coefficients: np.ndarray,
    xl: np.ndarray,
    xu: np.ndarray,
    phases: list[np.ndarray],
    steps: int,
    alphas: dict[int, np.ndarray] | None = None,
    betas: dict[int, np.ndarray] | None = None,
    input_statement: bool = False,
) -> Optimised:
    """Lower bounds of coefficients @ (the outputs) over the node, optimised over the lower slopes
    of its open ReLUs and the multipliers of its fixed phases (module docstring), starting from
    `alphas` / `betas` (a parent's; default: DeepPoly's slopes and zero multipliers).

    A batch of ReLU-split nodes (`batch.split_batch_bounds`: bounds (B, n_k), xl (B, n)) is
    optimised as one: every parameter and bound carries the leading batch axis ((B, rows, n_k)),
    each step is one back-substitution of all the boxes' rows, and since every step is elementwise
    per row, each box's result is the one it would get alone (ReLU layers; staircases one node at
    a time).

    `input_statement`: the bounds keep the input layer's rows (`bounds.backsubstitute`), which the
    search reads jointly with the input (`operand_rounding.SpanReader`)."""
    last = len(model.layers) - 1
    rows = np.atleast_2d(coefficients).shape[0]
    batch = np.shape(xl)[:-1]
    current_alphas: dict[int, np.ndarray] = {}
    for k in range(last):
        if not (model.layers[k].relu and bounds.unstable(model, k).any()):
            continue
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        given = None if alphas is None else alphas.get(k)
        if given is None:
            current_alphas[k] = np.repeat(np.where(hi >= -lo, 1.0, 0.0)[..., None, :], rows, axis=-2)
        else:
            current_alphas[k] = np.clip(given, 0.0, 1.0)
    # staircases (lookup tables, int8 requantizations): both slopes per row, `stair_relaxation`'s
    # parameters (a parent's, when it has them for the layer)
    stairs = stair_layers(model, bounds, last + 1)
    setups = {k: stair_setup(model, bounds, k) for k in stairs}
    for k in stairs:
        given = None if alphas is None else alphas.get(k)
        usable = given is not None and np.shape(given) == (rows, 2 * model.layers[k].n_out)
        start = np.asarray(given, dtype=np.float64) if usable else stair_start(model, bounds, k, rows)
        current_alphas[k] = np.clip(start, 0.0, STAIR_SLOPE_RANGE)
    layers = [k for k in range(last) if (BOUND_TERMS_EVERYWHERE or phases[k].any()) and model.layers[k].relu]
    splits = BoundTerms.of(layers, rows, [layer.n_out for layer in model.layers], betas, batch)
    if not BOUND_TERMS_EVERYWHERE:
        for k in layers:
            splits.nus[k] = np.where(phases[k] != 0, splits.nus[k], 0.0)
    output_rows = np.atleast_2d(coefficients)

    def substituted() -> tuple[LinearBound, dict]:
        lines = {k: stair_relaxation(model, bounds, k, current_alphas[k], setups[k]) for k in stairs}
        slopes = {**current_alphas, **lines}
        linear = backsubstitute(
            model,
            bounds,
            coefficients,
            last,
            True,
            xl,
            xu,
            slopes,
            True,
            splits,
            input_statement=input_statement,
        )
        return linear, slopes

    current, slopes = substituted()
    best = Optimised(current, dict(current_alphas), dict(splits.nus))
    if not current_alphas and not splits.nus:
        return best
    adam = _Adam()
    rate = 1.0
    for _ in range(steps):
        alpha_gradients, beta_gradients = relaxed_gradients(
            model, bounds, current, slopes, xl, xu, None, splits, output_rows
        )
        for k, gradient in alpha_gradients.items():
            top = STAIR_SLOPE_RANGE if k in stairs else 1.0
            moved = current_alphas[k] + rate * ALPHA_RATE * top * adam.direction(("alpha", k), gradient)
            current_alphas[k] = np.clip(moved, 0.0, top)
        for k, gradient in beta_gradients.items():
            scale = np.abs(current.lam_post[k]).mean(axis=-1, keepdims=True) if k in current.lam_post else 1.0
            if not BOUND_TERMS_EVERYWHERE:
                gradient = np.where(phases[k] != 0, gradient, 0.0)
            splits.nus[k] = splits.nus[k] + rate * BETA_RATE * scale * adam.direction(("beta", k), gradient)
        adam.steps += 1
        rate *= RATE_DECAY
        current, slopes = substituted()
        better = current.lower > best.bound.lower
        if better.any():
            best = _better(best, current, current_alphas, splits.nus, better)
    return best


def _better(
    best: Optimised,
    current: LinearBound,
    alphas: dict[int, np.ndarray],
    betas: dict[int, np.ndarray],
    better: np.ndarray,
) -> Optimised:
    """Per row (of each box), `current` (and the parameters that gave it) where `better`, else `best`."""
    column = better[..., None]
    bound = best_rows(best.bound, current, better)
    return Optimised(
        bound,
        {k: np.where(column, alphas[k], best.alphas[k]) for k in best.alphas},
        {k: np.where(column, betas[k], best.betas[k]) for k in best.betas},
    )
