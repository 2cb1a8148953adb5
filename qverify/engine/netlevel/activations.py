"""Network level: what follows a layer's linear part, and how the bounds relax it.

Each activation h = f(z) of the network level is read through one interface: its exact range on
pre-activation bounds (`post_bounds`), which neurons it does not make linear there
(`open_neurons`), its value and a slope for the float64 surrogate (`forward`, `derivative`: the
attack), and a sound linear relaxation on [lo, hi] (`relaxation`):

    a z + c <= f(z) <= s z + t    for every z in [lo, hi] the implementation can produce,

elementwise, as exact inequalities on the stored float64 numbers (rounded outward where computed).
The back-substitution uses the lower side for positive coefficients and the upper side for
negative ones (`bounds`).

- `Identity`: no relaxation (the layer's z is its output).
- `Relu`: the triangle (s, t the chord, a in [0, 1]: DeepPoly's choice by default, alpha-CROWN's
  optimised slopes otherwise, c = 0); phases to split on.
- `Stairs`: int8's requantization per neuron (`staircase.Staircase`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from qverify.engine.netlevel.roundoff import U64
from qverify.engine.netlevel.staircase import Staircase

SLOPE_UP = 1.0 + 8 * U64  # rounds a computed slope or intercept past two roundings


class Relaxation(NamedTuple):
    """a z + c <= h <= s z + t on the neuron's interval; z_max = max |z| there (for the charge of
    the elementwise products); arrays (..., n)."""

    a: np.ndarray
    c: np.ndarray
    s: np.ndarray
    t: np.ndarray
    z_max: np.ndarray

    def select(self, index) -> Relaxation:
        """The relaxation of one box of a batch (or any index on the leading axes)."""
        return Relaxation(*(part[index] for part in self))


def relu_relaxation(
    lo: np.ndarray, hi: np.ndarray, alpha: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, s, t): a z <= relu(z) <= s z + t on [lo, hi], exact on stable neurons. `alpha` chooses
    the lower slopes of unstable neurons (default DeepPoly's: 1 when hi >= -lo, else 0). The upper
    side is the chord, s rounded up past hi / (hi - lo) and t past -s lo: it lies above relu at both
    ends of [lo, hi], so everywhere between (a convex function lies below such a line)."""
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


class Identity:
    """h = z."""

    relaxed = False  # is the activation relaxed by linear bounds (not the identity)?
    splittable = False  # has it phases a branch and bound can fix (ReLU)?

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lo, hi

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(lo), dtype=bool)

    def forward(self, z: np.ndarray) -> np.ndarray:
        return z

    def derivative(self, z: np.ndarray) -> np.ndarray:
        return np.ones_like(z)

    def relaxation(self, lo: np.ndarray, hi: np.ndarray) -> Relaxation:
        one = np.ones(np.shape(lo))
        zero = np.zeros(np.shape(lo))
        return Relaxation(one, zero, one, zero, np.maximum(np.abs(lo), np.abs(hi)))


class Relu:
    """h = max(z, 0), relaxed by the triangle; its phases (z > 0, z <= 0) are split on."""

    relaxed = True
    splittable = True

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.maximum(lo, 0.0), np.maximum(hi, 0.0)

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return (lo < 0) & (hi > 0)

    def forward(self, z: np.ndarray) -> np.ndarray:
        return np.maximum(z, 0.0)

    def derivative(self, z: np.ndarray) -> np.ndarray:
        return (z > 0).astype(np.float64)

    def relaxation(self, lo: np.ndarray, hi: np.ndarray) -> Relaxation:
        a, s, t = relu_relaxation(lo, hi)
        return Relaxation(a, np.zeros_like(t), s, t, np.maximum(np.abs(lo), np.abs(hi)))


class Stairs:
    """A monotone staircase per neuron (int8's requantization: `staircase.Staircase`)."""

    relaxed = True
    splittable = False

    def __init__(self, stairs: Staircase) -> None:
        self.stairs = stairs

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.stairs.code_bounds(lo, hi)

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return self.stairs.open(lo, hi)

    def forward(self, z: np.ndarray) -> np.ndarray:
        return self.stairs.codes(z)

    def derivative(self, z: np.ndarray) -> np.ndarray:
        return self.stairs.gradient(z)

    def relaxation(self, lo: np.ndarray, hi: np.ndarray) -> Relaxation:
        return Relaxation(*self.stairs.relaxation(lo, hi), np.maximum(np.abs(lo), np.abs(hi)))


NetActivation = Identity | Relu | Stairs
