"""Where the searches look: an L-inf ball around a seed (DiffChaser's chromosomes are images within
distance d of the seed) and a box of distortion parameters (DiverGet's transformation vectors).

A distortion vector holds one parameter per family, applied in a fixed order (geometry, blur,
photometry, noise, occlusion) through the one registry `qverify.data.transforms`; a family at its
neutral value leaves the image as it is. Families that draw random numbers (noise, salt-and-pepper,
occlusion slots) get a generator keyed by (run seed, seed index, query index), so a vector and its key
regenerate the distorted input exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qverify.data.transforms import Canvas, Family, family
from qverify.errors import InputError

# The search range of each family (label-preserving magnitudes: small rotations, shifts of a pixel,
# a little noise); amplitudes are fractions of the canvas range as in the registry.
SEARCH_RANGES: dict[str, tuple[float, float]] = {
    "rotation": (-15.0, 15.0),
    "translate-x": (-1.0, 1.0),
    "translate-y": (-1.0, 1.0),
    "zoom": (0.9, 1.1),
    "shear": (-0.2, 0.2),
    "blur": (0.0, 0.6),
    "contrast": (0.7, 1.3),
    "brightness": (-0.2, 0.2),
    "awgn": (0.0, 0.05),
    "brownian": (0.0, 0.05),
    "salt-pepper": (0.0, 0.03),
    "vertical-occlusion": (0.0, 1.0),
    "horizontal-occlusion": (0.0, 1.0),
}
ORDER = tuple(SEARCH_RANGES)  # the order distortions are applied in
DEFAULT_FAMILIES = ("brightness", "contrast", "rotation", "translate-x", "translate-y", "zoom", "shear",
                    "blur", "awgn", "salt-pepper", "vertical-occlusion", "horizontal-occlusion")  # fmt: skip


@dataclass(frozen=True, slots=True)
class LinfBall:
    """Inputs within `radius` (raw units) of a seed in every coordinate, inside the canvas."""

    canvas: Canvas
    radius: float

    def bounds(self, seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.maximum(seed - self.radius, self.canvas.lo), np.minimum(seed + self.radius, self.canvas.hi)

    def sample(self, seed: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        lo, hi = self.bounds(seed)
        return lo + rng.random((count, seed.size)) * (hi - lo)


@dataclass(frozen=True, slots=True)
class DistortionSpace:
    """A box of distortion parameters, one dimension per family, and how to apply a vector."""

    canvas: Canvas
    families: tuple[Family, ...]
    low: np.ndarray
    high: np.ndarray

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.families)

    @property
    def neutral(self) -> np.ndarray:
        return np.array([f.neutral for f in self.families])

    def clip(self, params: np.ndarray) -> np.ndarray:
        return np.clip(params, self.low, self.high)

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """Random vectors that distort little: each family is active with probability 2 / families (at
        least one per vector) at a uniform value of its range; the others stay neutral (clipped into
        the range). Drawing every family at once would stack a dozen distortions on each input and
        leave almost no input valid."""
        dims = len(self.families)
        active = rng.random((count, dims)) < min(1.0, 2.0 / dims)
        active[np.arange(count), rng.integers(0, dims, size=count)] = True
        values = self.low + rng.random((count, dims)) * (self.high - self.low)
        return np.where(active, values, self.clip(np.broadcast_to(self.neutral, (count, dims))))

    def valid(self, params: np.ndarray) -> np.ndarray:
        """A vector the registry accepts: counts rounded to whole numbers."""
        out = self.clip(np.asarray(params, dtype=np.float64))
        for index, f in enumerate(self.families):
            if f.integer:
                out[..., index] = np.round(out[..., index])
        return out

    def apply(self, seed: np.ndarray, params: np.ndarray, rngs: Sequence[np.random.Generator]) -> np.ndarray:
        """The seed (features,) distorted by each parameter vector (count, families) -> (count, features)."""
        params = self.valid(params)
        out = np.empty((len(params), seed.size))
        for row, (vector, rng) in enumerate(zip(params, rngs)):
            x = seed[None, :].astype(np.float64)
            for f, value in zip(self.families, vector):
                if value != f.neutral:
                    x = f(x, float(value), rng, self.canvas)
            out[row] = x.reshape(-1)
        return out


def distortion_space(
    canvas: Canvas, names: Sequence[str], overrides: Mapping[str, tuple[float, float]]
) -> DistortionSpace:
    """The space of the named families (in the application order), each over its search range or the
    range given for it (checked against the family's valid range). Image families need a shape."""
    unknown = [name for name in overrides if name not in names]
    if unknown:
        raise InputError(
            f"a range is given for {', '.join(unknown)}, which is not among the distortions searched"
        )
    chosen = []
    for name in sorted(dict.fromkeys(names), key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        found = family(name)
        if found.spatial and canvas.shape is None:
            raise InputError(f"distortion {name} needs an image shape (give --image-shape)")
        low, high = overrides.get(name, SEARCH_RANGES.get(name, found.bounds))
        low, high = found.check(low), found.check(high)
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise InputError(f"distortion {name}: search range [{low:g}, {high:g}] is empty or unbounded")
        chosen.append((found, low, high))
    if not chosen:
        raise InputError("no distortion to search")
    return DistortionSpace(
        canvas,
        tuple(f for f, _, _ in chosen),
        np.array([low for _, low, _ in chosen]),
        np.array([high for _, _, high in chosen]),
    )
