"""A PNG comparing an image-shaped input with its adversarial counterpart (Pillow only).

Three panels side by side, separated by 1-px lines, each under a caption:

    +-----------+-+-------------+-+------------------------------+
    | centre    | | adversarial | | difference (max |d| = 0.05)  |   CAPTION_PX high
    | (grey)    | | (grey)      | | (white 0, red +, blue -)     |   h * scale high
    +-----------+-+-------------+-+------------------------------+

(with a title line above when a title is given; title and captions on a light grey band). Pixels are scaled up by an integer factor (nearest
neighbour) so that a panel is at least MIN_PANEL_PX wide: 5x5 -> 48x, 28x28 -> 9x. Grey levels map
`value_range` (default: min and max over both images) to black..white. The difference
`adversarial - centre` is white where it is exactly zero; otherwise red (positive) or blue
(negative), saturating at the largest |d|, and never fainter than MIN_TINT so that a change of one
pixel by the smallest step is still visible.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from qverify.errors import InputError

__all__ = [
    "CAPTION_PX",
    "MIN_PANEL_PX",
    "NEUTRAL",
    "SEPARATOR_PX",
    "TITLE_PX",
    "open_image",
    "panel_scale",
    "write_comparison_png",
]

MIN_PANEL_PX = 240  # a panel is at least this wide (pixels are scaled by an integer factor)
MAX_PANEL_PX = 1200  # ... unless its longer side would then exceed this
CAPTION_PX = 16  # caption band above the panels
TITLE_PX = 16  # title band above the captions (only with a title)
SEPARATOR_PX = 1
NEUTRAL = (255, 255, 255)  # zero difference
BAND = (232, 232, 232)  # title and caption background, so that a white panel still shows its edge
POSITIVE = (200, 0, 0)  # adversarial > centre
NEGATIVE = (0, 60, 200)  # adversarial < centre
SEPARATOR = (96, 96, 96)
TEXT = (0, 0, 0)
MIN_TINT = 0.15  # the weakest colour of a nonzero difference: 15% of the way to red or blue


def panel_scale(shape: tuple[int, int]) -> int:
    """The integer factor each pixel is scaled by: at least MIN_PANEL_PX / width, capped so the
    longer side stays within MAX_PANEL_PX (but never below 1)."""
    height, width = shape
    wanted = math.ceil(MIN_PANEL_PX / width)
    cap = max(1, MAX_PANEL_PX // max(height, width))
    return max(1, min(wanted, cap))


def _check_shape(shape: tuple[int, int]) -> tuple[int, int]:
    try:
        height, width = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise InputError(f"image shape {shape!r}: expected (height, width)") from None
    if height <= 0 or width <= 0:
        raise InputError(f"image shape {shape!r}: height and width must be positive")
    return height, width


def _as_image(values: np.ndarray, shape: tuple[int, int], what: str) -> np.ndarray:
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if flat.size != shape[0] * shape[1]:
        raise InputError(
            f"{what} has {flat.size} values, but an image of shape {shape[0]}x{shape[1]} needs {shape[0] * shape[1]}"
        )
    if not np.all(np.isfinite(flat)):
        raise InputError(f"{what} holds values that are not finite")
    return flat.reshape(shape)  # C order: row by row


def _grey(image: np.ndarray, lo: float, hi: float) -> np.ndarray:
    if hi > lo:
        level = np.clip((image - lo) / (hi - lo), 0.0, 1.0) * 255.0
    else:
        level = np.full(image.shape, 128.0)
    grey = np.rint(level).astype(np.uint8)
    return np.stack([grey, grey, grey], axis=-1)


def _difference_colours(diff: np.ndarray) -> np.ndarray:
    """Exactly NEUTRAL where diff == 0; towards POSITIVE / NEGATIVE with |diff| / max |diff|."""
    largest = float(np.max(np.abs(diff)))
    rgb = np.empty(diff.shape + (3,), dtype=np.float64)
    rgb[...] = NEUTRAL
    if largest > 0.0:
        strength = MIN_TINT + (1.0 - MIN_TINT) * np.abs(diff) / largest
        for mask, colour in ((diff > 0, POSITIVE), (diff < 0, NEGATIVE)):
            tint = strength[mask][:, None]
            rgb[mask] = (1.0 - tint) * np.array(NEUTRAL) + tint * np.array(colour)
    out = np.rint(rgb).astype(np.uint8)
    out[diff == 0] = NEUTRAL
    return out


def _fit(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:
    """`text`, cut with an ellipsis to fit `width` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."


def write_comparison_png(
    center: np.ndarray,
    adversarial: np.ndarray,
    shape: tuple[int, int],
    path: Path,
    value_range: tuple[float, float] | None = None,
    title: str = "",
) -> Path:
    """Write the three-panel PNG (centre, adversarial, difference) to `path` and return `path`.

    `center` and `adversarial` are flat vectors (or arrays of any shape) holding `height * width`
    values, read row by row (C order). Grey levels map `value_range` (lo -> black, hi -> white;
    default: min and max over both images) and clip outside it.

    :raises InputError: a shape that is not two positive sizes, a vector of the wrong size, a
        value that is not finite, or a value range that is not lo < hi.
    """
    shape = _check_shape(shape)
    centre = _as_image(center, shape, "the centre image")
    other = _as_image(adversarial, shape, "the adversarial image")
    if value_range is None:
        lo, hi = float(min(centre.min(), other.min())), float(max(centre.max(), other.max()))
    else:
        lo, hi = (float(v) for v in value_range)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise InputError(f"value range {value_range!r}: expected finite lo < hi")
    diff = other - centre
    scale = panel_scale(shape)
    panel_w, panel_h = shape[1] * scale, shape[0] * scale
    top = (TITLE_PX if title else 0) + CAPTION_PX
    width = 3 * panel_w + 2 * SEPARATOR_PX
    canvas = Image.new("RGB", (width, top + panel_h), BAND)
    panels = (_grey(centre, lo, hi), _grey(other, lo, hi), _difference_colours(diff))
    largest = float(np.max(np.abs(diff)))
    captions = ("centre", "adversarial", f"difference (max |d| = {largest:.4g})")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    if title:
        draw.text((2, 2), _fit(draw, title, font, width - 4), fill=TEXT, font=font)
    for index, (pixels, caption) in enumerate(zip(panels, captions, strict=True)):
        left = index * (panel_w + SEPARATOR_PX)
        enlarged = np.repeat(np.repeat(pixels, scale, axis=0), scale, axis=1)  # nearest neighbour
        canvas.paste(Image.fromarray(enlarged, "RGB"), (left, top))
        draw.text(
            (left + 2, top - CAPTION_PX + 2), _fit(draw, caption, font, panel_w - 4), fill=TEXT, font=font
        )
        if index < 2:
            separator = left + panel_w
            draw.rectangle([separator, 0, separator + SEPARATOR_PX - 1, top + panel_h - 1], fill=SEPARATOR)
    path = Path(path)
    canvas.save(path, format="PNG")
    return path


def open_image(path: Path) -> bool:
    """Open `path` in the desktop's viewer (`open` on macOS, `xdg-open` under X11/Wayland).

    :returns: True if a viewer was started; False, doing nothing, when there is no display or no
        viewer command (a server, CI, an ssh session).
    """
    if sys.platform == "darwin":
        command = shutil.which("open")
    elif os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        command = shutil.which("xdg-open")
    else:
        command = None
    if command is None:
        return False
    try:
        subprocess.Popen(
            [command, str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return False
    return True
