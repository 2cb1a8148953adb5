"""Input transformations: how a batch of inputs is perturbed or distorted, one pure function a family.

One module for every command that changes inputs on purpose: `qverify impact` (accuracy, F1 and KL
divergence under perturbation, docs/impact.md) and the distortion search of `qverify diff`. A
transform is a function `(x, value, rng, canvas) -> x'`:

- `x` is a batch in the data set's raw units, `(n, features)` or `(n, *shape)`; the result has the
  same shape, float64, clipped to the canvas' range `[lo, hi]` (what a sensor or a file can hold);
- `value` is the family's one parameter (sigma, a count, a fraction, degrees, a factor);
- `rng` (a numpy Generator) is the only source of randomness, so a seed fixes the result; families
  that draw nothing ignore it;
- `canvas` gives the image shape ((H, W) or (C, H, W)) and the range. Its background is `lo`: what
  occlusions paint and what geometric transforms bring in from outside the frame (a dead pixel, an
  empty page around a digit).

Everything is vectorised over the batch (numpy, scipy.ndimage, numpy's FFT): one call per batch,
no loop over images. Amplitudes (noise sigma, brightness) are fractions of the range width
`hi - lo`, so one grid means the same on [0, 1] and [0, 16] data; geometric parameters are in pixels,
degrees or factors. `FAMILIES` is the registry: name -> `Family` (parameter, unit, default grid for
`qverify impact`, valid range, the neutral value, and whether the result is affine in the parameter
before the clip -- brightness and contrast -- which a proof over a parameter box needs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qverify.errors import InputError, InternalError
from qverify.vocabulary import FAMILY_NAMES, IMPACT_DEFAULT, PAPER_FAMILIES

__all__ = [
    "FAMILIES",
    "IMPACT_DEFAULT",
    "PAPER_FAMILIES",
    "Canvas",
    "Family",
    "Transform",
    "brownian_field",
    "family",
    "stripe_width",
]

GEOMETRIC_ORDER = 1  # bilinear: no overshoot beyond the input's own range (order 3 rings at edges)


@dataclass(frozen=True, slots=True)
class Canvas:
    """Where inputs live: the clip range `[lo, hi]` in raw units and, for images, their shape
    ((H, W) or (C, H, W), C-order flattening of the features). The background is `lo`."""

    lo: float
    hi: float
    shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.lo < self.hi):
            raise InputError(f"input domain [{self.lo}, {self.hi}]: needs finite bounds with lo < hi")
        if self.shape is not None and (len(self.shape) not in (2, 3) or min(self.shape) < 1):
            raise InputError(f"image shape {self.shape}: expected (H, W) or (C, H, W) with positive sizes")

    @property
    def width(self) -> float:
        return self.hi - self.lo

    @property
    def middle(self) -> float:
        return 0.5 * (self.lo + self.hi)

    @property
    def background(self) -> float:
        return self.lo

    def clip(self, x: np.ndarray) -> np.ndarray:
        return np.clip(x, self.lo, self.hi)

    def image_dims(self, x: np.ndarray, what: str = "this transformation") -> tuple[int, int, int]:
        """(C, H, W) of the images `x` holds, or an `InputError` when there is no shape or it does
        not fit the inputs."""
        if self.shape is None:
            raise InputError(f"{what} needs an image shape (the data set has none: give --image-shape)")
        c, h, w = self.shape if len(self.shape) == 3 else (1, *self.shape)
        if np.ndim(x) == 0 or int(np.prod(np.shape(x)[1:])) != c * h * w:
            raise InputError(f"inputs of shape {np.shape(x)[1:]} do not fill images of shape {self.shape}")
        return c, h, w

    def images(self, x: np.ndarray) -> np.ndarray:
        """`x` as (n, C, H, W) (a reshaped copy in float64)."""
        c, h, w = self.image_dims(x)
        return np.array(x, dtype=np.float64).reshape(len(x), c, h, w)


Transform = Callable[[np.ndarray, float, np.random.Generator, Canvas], np.ndarray]


@dataclass(frozen=True, slots=True)
class Family:
    """One kind of perturbation or distortion and what a caller needs to know to grid or search it."""

    name: str
    parameter: str  # its one parameter
    unit: str  # what the parameter counts
    apply: Transform
    default_grid: tuple[float, ...]  # `qverify impact`'s intensities
    bounds: tuple[float, float]  # valid parameter values (inclusive)
    neutral: float  # the value that leaves inputs unchanged
    linear: bool  # affine in the parameter before the clip (brightness, contrast)
    random: bool  # draws from the generator
    spatial: bool  # needs an image shape
    integer: bool  # the parameter is a count
    summary: str

    def check(self, value: float) -> float:
        """`value` as a float, or an `InputError` naming the family and the valid range."""
        value = float(value)
        low, high = self.bounds
        if not (math.isfinite(value) and low <= value <= high):
            raise InputError(f"{self.name}: {self.parameter} {value:g} outside [{low:g}, {high:g}]")
        if self.integer and value != round(value):
            raise InputError(f"{self.name}: {self.parameter} must be a whole number (got {value:g})")
        return value

    def __call__(self, x: np.ndarray, value: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
        """The transformed batch (checked parameter, same shape as `x`, clipped to the range)."""
        x = np.asarray(x, dtype=np.float64)
        value = self.check(value)
        if self.spatial:
            canvas.image_dims(x, self.name)  # a clear error naming the family before any work
        return canvas.clip(self.apply(x, value, rng, canvas)).reshape(x.shape)


# --- noise -----------------------------------------------------------------------------------------


def _awgn(x: np.ndarray, sigma: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Additive white Gaussian noise: every value plus an independent N(0, (sigma * width)^2)."""
    return x + rng.standard_normal(x.shape) * (sigma * canvas.width)


FIELD_BLOCK = 512  # Brownian fields are made this many images at a time (bounded FFT temporaries)


def brownian_field(
    shape: tuple[int, int, int, int], rng: np.random.Generator, block: int = FIELD_BLOCK
) -> np.ndarray:
    """Brownian (red) noise fields of shape (n, C, H, W): white noise filtered in the Fourier domain
    by the amplitude gain 1/f (f the radial spatial frequency), so its power spectrum falls as 1/f^2;
    the zero-frequency term is removed (no offset: that would be brightness) and every image scaled
    to a standard deviation of exactly 1 over its pixels and channels (channels are independent
    fields). A 1x1 image has no non-zero frequency: its field is 0.

    Made `block` images at a time: the FFT's complex temporaries are several times the field's size
    (the family on the 10,000 CIFAR-10 test images at once peaked at 2.2 GB of numpy allocations, in
    blocks at 0.6 GB). Every image's transform, spectrum and standard deviation are its own and the
    generator draws the same values in the same order, so the fields are bit for bit those of one
    block (tested)."""
    n, c, h, w = shape
    frequency = np.hypot(np.fft.fftfreq(h)[:, None], np.fft.fftfreq(w)[None, :])
    gain = np.divide(1.0, frequency, out=np.zeros_like(frequency), where=frequency > 0)
    fields, step = np.zeros(shape), max(1, block)
    for first in range(0, n, step):
        count = min(step, n - first)
        spectrum = np.fft.fft2(rng.standard_normal((count, c, h, w)), axes=(-2, -1))
        field = np.fft.ifft2(spectrum * gain, axes=(-2, -1)).real
        std = field.reshape(count, -1).std(axis=1).reshape(count, 1, 1, 1)
        np.divide(field, std, out=fields[first : first + count], where=std > 0)
    return fields


def _brownian(x: np.ndarray, sigma: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Spatially correlated noise with a 1/f^2 power spectrum, sigma * width its standard deviation
    (scaled and added in place: the same operations as images + sigma * width * field)."""
    images = canvas.images(x)
    noise = brownian_field(images.shape, rng)
    noise *= sigma * canvas.width
    images += noise
    return images


def _salt_pepper(x: np.ndarray, fraction: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Each pixel (all its channels) independently replaced with probability `fraction`, by hi (salt)
    or lo (pepper) with equal odds. Without an image shape, each value is a pixel."""
    pixels = canvas.images(x) if canvas.shape is not None else np.asarray(x, dtype=np.float64)[:, None]
    mask_shape = (pixels.shape[0], 1, *pixels.shape[2:])
    hit = rng.random(mask_shape) < fraction
    salt = rng.random(mask_shape) < 0.5
    out = np.where(hit & salt, canvas.hi, pixels)
    return np.where(hit & ~salt, canvas.lo, out)


# --- occlusions ------------------------------------------------------------------------------------


def stripe_width(extent: int) -> int:
    """Width in pixels of one occlusion stripe across an image `extent` pixels wide: constant for a
    given image size, 1 pixel up to 31 pixels, then extent // 16 (2 at 32, 14 at 224)."""
    return max(1, extent // 16)


def _occlusion(
    x: np.ndarray, count: float, rng: np.random.Generator, canvas: Canvas, axis: int
) -> np.ndarray:
    """`count` stripes set to the background, as the study's black-out streaks: stripes of constant
    width (`stripe_width`) on the pixel grid, spanning the target's bounding box across and chosen
    at random among the distinct slots that meet it. The target's box is the smallest box holding
    every pixel that differs from the background (the whole image when none does); when it meets
    fewer than `count` slots, the remaining stripes go to random slots outside it.
    axis -1: vertical stripes (columns); axis -2: horizontal stripes (rows)."""
    images = canvas.images(x)
    n, _, h, w = images.shape
    across, along = (w, h) if axis == -1 else (h, w)
    width = stripe_width(across)
    slots = across // width
    count = int(count)
    if count > slots:
        raise InputError(f"{count} stripes of {width} pixel(s) do not fit in an image {across} pixels across")
    if count == 0:
        return images
    ink = np.any(images != canvas.background, axis=1)  # (n, H, W)
    ink_across = ink.any(axis=1 if axis == -1 else 2)  # (n, across)
    ink_along = ink.any(axis=2 if axis == -1 else 1)  # (n, along)
    empty = ~ink_across.any(axis=1)
    ink_across[empty], ink_along[empty] = True, True
    first = np.argmax(ink_across, axis=1)
    last = across - 1 - np.argmax(ink_across[:, ::-1], axis=1)
    slot_start = np.arange(slots) * width
    meets_box = (slot_start[None, :] <= last[:, None]) & (slot_start[None, :] + width - 1 >= first[:, None])
    keys = rng.random((n, slots)) + np.where(meets_box, 0.0, 1.0)  # slots in the box first
    chosen = np.argsort(keys, axis=1, kind="stable")[:, :count]
    covered = np.zeros((n, slots), dtype=bool)
    np.put_along_axis(covered, chosen, True, axis=1)
    across_mask = np.zeros((n, across), dtype=bool)
    across_mask[:, : slots * width] = np.repeat(covered, width, axis=1)
    top = np.argmax(ink_along, axis=1)
    bottom = along - 1 - np.argmax(ink_along[:, ::-1], axis=1)
    position = np.arange(along)[None, :]
    along_mask = (position >= top[:, None]) & (position <= bottom[:, None])
    if axis == -1:
        mask = along_mask[:, :, None] & across_mask[:, None, :]  # (n, H, W)
    else:
        mask = across_mask[:, :, None] & along_mask[:, None, :]
    return np.where(mask[:, None], canvas.background, images)


def _vertical(x: np.ndarray, count: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    return _occlusion(x, count, rng, canvas, axis=-1)


def _horizontal(x: np.ndarray, count: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    return _occlusion(x, count, rng, canvas, axis=-2)


# --- photometric -----------------------------------------------------------------------------------


def _blur(x: np.ndarray, sigma: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Gaussian blur of each channel, sigma in pixels (scipy.ndimage.gaussian_filter, truncated at 4
    sigma); outside the frame is background (mode 'constant')."""
    from scipy import ndimage  # here, not at the top: every `qverify` start-up reads the registry

    images = canvas.images(x)
    if sigma == 0:
        return images
    return ndimage.gaussian_filter(
        images, sigma=(0, 0, sigma, sigma), mode="constant", cval=canvas.background
    )


def _brightness(x: np.ndarray, delta: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """x + delta * width: affine in delta (before the clip)."""
    return x + delta * canvas.width


def _contrast(x: np.ndarray, factor: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """middle + factor * (x - middle), around the middle of the range, not the image's mean: the same
    affine map of every pixel of every image (affine in the factor), so a proof can range over it."""
    return canvas.middle + factor * (x - canvas.middle)


# --- geometric (scipy.ndimage.affine_transform, bilinear, background outside) -----------------------


def _warp(x: np.ndarray, canvas: Canvas, matrix: np.ndarray) -> np.ndarray:
    """Resample every channel of every image at input = matrix @ (output - centre) + centre, in
    (row, column) pixel coordinates around the image centre; one scipy call for the whole batch."""
    from scipy import ndimage

    images = canvas.images(x)
    h, w = images.shape[2:]
    centre = np.array([(h - 1) / 2, (w - 1) / 2])
    full = np.eye(5)
    full[2:4, 2:4] = matrix
    full[2:4, 4] = centre - matrix @ centre
    return ndimage.affine_transform(
        images, full, order=GEOMETRIC_ORDER, mode="constant", cval=canvas.background, prefilter=False
    )


def _rotation(x: np.ndarray, degrees: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Rotation about the centre, counter-clockwise as displayed (row 0 at the top) for degrees > 0."""
    a = math.radians(degrees)
    return _warp(x, canvas, np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]]))


def _shift(x: np.ndarray, canvas: Canvas, rows: float, columns: float) -> np.ndarray:
    from scipy import ndimage

    images = canvas.images(x)
    if rows == 0 and columns == 0:
        return images
    return ndimage.shift(
        images, (0, 0, rows, columns), order=GEOMETRIC_ORDER, mode="constant", cval=canvas.background,
        prefilter=False,
    )  # fmt: skip


def _translate_x(x: np.ndarray, pixels: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Content moved right by `pixels` (fractional: bilinear); background comes in on the left."""
    return _shift(x, canvas, 0.0, pixels)


def _translate_y(x: np.ndarray, pixels: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Content moved down by `pixels`."""
    return _shift(x, canvas, pixels, 0.0)


def _zoom(x: np.ndarray, factor: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Content scaled by `factor` about the centre, in a frame of the same size (> 1 crops, < 1 pads)."""
    return _warp(x, canvas, np.eye(2) / factor)


def _shear(x: np.ndarray, factor: float, rng: np.random.Generator, canvas: Canvas) -> np.ndarray:
    """Horizontal shear about the centre: a pixel `d` rows below the centre moves `factor * d`
    columns right."""
    return _warp(x, canvas, np.array([[1.0, 0.0], [-factor, 1.0]]))


INF = math.inf
BROWNIAN_LEVELS = tuple(round(level / 255, 3) for level in range(10, 81, 10))  # paper: 10..80 of 255

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("awgn", "sigma", "fraction of the range", _awgn, (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
               (0, INF), 0.0, False, True, False, False, "additive white Gaussian noise"),
        Family("brownian", "sigma", "fraction of the range", _brownian, BROWNIAN_LEVELS,
               (0, INF), 0.0, False, True, True, False, "spatially correlated noise, 1/f^2 power spectrum"),
        Family("vertical-occlusion", "count", "stripes", _vertical, (1, 2, 3, 4, 5, 6),
               (0, INF), 0.0, False, True, True, True, "vertical black-out stripes in the target's box"),
        Family("horizontal-occlusion", "count", "stripes", _horizontal, (1, 2, 3, 4, 5, 6),
               (0, INF), 0.0, False, True, True, True, "horizontal black-out stripes in the target's box"),
        Family("salt-pepper", "fraction", "of the pixels", _salt_pepper, (0.02, 0.05, 0.1, 0.15, 0.2, 0.3),
               (0, 1), 0.0, False, True, False, False, "pixels set to lo or hi at random"),
        Family("blur", "sigma", "pixels", _blur, (0.25, 0.5, 0.75, 1.0, 1.5, 2.0),
               (0, INF), 0.0, False, False, True, False, "Gaussian blur"),
        Family("brightness", "delta", "fraction of the range", _brightness, (0.1, 0.2, 0.3, 0.4, 0.5, 0.6),
               (-1, 1), 0.0, True, False, False, False, "additive offset"),
        Family("contrast", "factor", "around the range's middle", _contrast,
               (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2),
               (0, INF), 1.0, True, False, False, False, "scaling around the middle of the range"),
        Family("rotation", "angle", "degrees", _rotation, (5, 10, 15, 20, 30, 45),
               (-360, 360), 0.0, False, False, True, False, "rotation about the centre"),
        Family("translate-x", "shift", "pixels", _translate_x, (0.5, 1, 1.5, 2, 3),
               (-INF, INF), 0.0, False, False, True, False, "horizontal translation"),
        Family("translate-y", "shift", "pixels", _translate_y, (0.5, 1, 1.5, 2, 3),
               (-INF, INF), 0.0, False, False, True, False, "vertical translation"),
        Family("zoom", "factor", "scale", _zoom, (0.7, 0.8, 0.9, 1.1, 1.2, 1.3),
               (0.05, 20), 1.0, False, False, True, False, "scaling about the centre"),
        Family("shear", "factor", "columns per row", _shear, (0.1, 0.2, 0.3, 0.4, 0.5),
               (-5, 5), 0.0, False, False, True, False, "horizontal shear about the centre"),
    )
}  # fmt: skip

if tuple(FAMILIES) != FAMILY_NAMES:  # the command line lists the names from qverify.vocabulary
    raise InternalError(
        f"qverify.vocabulary.FAMILY_NAMES {FAMILY_NAMES} is not the registry's {tuple(FAMILIES)}"
    )


def family(name: str) -> Family:
    """The registered family `name`, or an `InputError` listing them."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise InputError(f"unknown perturbation family '{name}' (known: {', '.join(FAMILIES)})") from None
