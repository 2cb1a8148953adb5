"""The counterexample picture: size from the layout, exact neutral colour where nothing changed,
red/blue where something did, grey levels from the value range, and input checks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from qverify.counterexample.image import (
    BAND,
    CAPTION_PX,
    MAX_PANEL_PX,
    NEUTRAL,
    SEPARATOR_PX,
    TITLE_PX,
    open_image,
    panel_scale,
    write_comparison_png,
)
from qverify.errors import InputError

# (shape, scale): a panel is at least 240 px wide, by an integer factor
SHAPES = [((5, 5), 48), ((8, 8), 30), ((28, 28), 9)]


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"))


def panel(array: np.ndarray, index: int, shape, scale: int, title: bool = False) -> np.ndarray:
    """Panel `index` (0 centre, 1 adversarial, 2 difference) of the picture, as its own array."""
    top = CAPTION_PX + (TITLE_PX if title else 0)
    left = index * (shape[1] * scale + SEPARATOR_PX)
    return array[top : top + shape[0] * scale, left : left + shape[1] * scale]


def blocks(region: np.ndarray, shape, scale: int) -> np.ndarray:
    """The colour of each input pixel's block, after checking that the block is uniform."""
    h, w = shape
    tiles = region.reshape(h, scale, w, scale, 3)
    assert (tiles == tiles[:, :1, :, :1, :]).all(), "a scaled-up pixel is not one colour"
    return tiles[:, 0, :, 0, :]


@pytest.mark.parametrize(("shape", "scale"), SHAPES, ids=lambda v: str(v))
def test_size_follows_the_layout(tmp_path, shape, scale):
    rng = np.random.default_rng(0)
    size = shape[0] * shape[1]
    assert panel_scale(shape) == scale
    path = write_comparison_png(rng.random(size), rng.random(size), shape, tmp_path / "a.png")
    assert path == tmp_path / "a.png"
    width = 3 * shape[1] * scale + 2 * SEPARATOR_PX
    assert pixels(path).shape == (CAPTION_PX + shape[0] * scale, width, 3)
    titled = write_comparison_png(rng.random(size), rng.random(size), shape, tmp_path / "b.png", title="t")
    assert pixels(titled).shape == (TITLE_PX + CAPTION_PX + shape[0] * scale, width, 3)


@pytest.mark.parametrize(("shape", "scale"), SHAPES, ids=lambda v: str(v))
def test_difference_is_neutral_exactly_where_the_images_agree(tmp_path, shape, scale):
    rng = np.random.default_rng(1)
    size = shape[0] * shape[1]
    centre = rng.random(size)
    adversarial = centre.copy()
    changed = rng.choice(size, size // 3, replace=False)
    adversarial[changed] += rng.choice([-1.0, 1.0], changed.size) * rng.uniform(1e-9, 0.3, changed.size)
    adversarial[changed[0]] = centre[changed[0]] + 1e-12  # a tiny change is still shown
    array = pixels(write_comparison_png(centre, adversarial, shape, tmp_path / "d.png", title="x"))
    colours = blocks(panel(array, 2, shape, scale, title=True), shape, scale).reshape(size, 3)
    diff = adversarial - centre
    neutral = np.all(colours == NEUTRAL, axis=1)
    assert np.array_equal(neutral, diff == 0)
    red, blue = colours[:, 0].astype(int), colours[:, 2].astype(int)
    assert np.all(red[diff > 0] > blue[diff > 0])
    assert np.all(blue[diff < 0] > red[diff < 0])


def test_grey_levels_follow_the_value_range(tmp_path):
    shape = (2, 3)
    centre = np.array([0.0, 0.5, 1.0, 2.0, -1.0, 0.25])
    array = pixels(write_comparison_png(centre, centre, shape, tmp_path / "g.png", value_range=(0.0, 1.0)))
    grey = blocks(panel(array, 0, shape, panel_scale(shape)), shape, panel_scale(shape))
    assert np.all(grey[..., 0] == grey[..., 1]) and np.all(grey[..., 1] == grey[..., 2])
    assert grey[..., 0].tolist() == [[0, 128, 255], [255, 0, 64]]  # clipped outside the range
    difference = blocks(panel(array, 2, shape, panel_scale(shape)), shape, panel_scale(shape))
    assert np.all(difference == NEUTRAL)


def test_default_range_spans_both_images(tmp_path):
    shape = (1, 2)
    array = pixels(
        write_comparison_png(np.array([2.0, 3.0]), np.array([4.0, 3.0]), shape, tmp_path / "r.png")
    )
    scale = panel_scale(shape)
    assert blocks(panel(array, 0, shape, scale), shape, scale)[0, :, 0].tolist() == [0, 128]
    assert blocks(panel(array, 1, shape, scale), shape, scale)[0, :, 0].tolist() == [255, 128]


def test_separators_and_caption_band(tmp_path):
    shape, scale = (5, 5), 48
    array = pixels(write_comparison_png(np.zeros(25), np.ones(25), shape, tmp_path / "s.png"))
    for index in (0, 1):
        column = (index + 1) * shape[1] * scale + index * SEPARATOR_PX
        assert np.all(array[:, column] != NEUTRAL)  # a line from top to bottom
        assert np.all(array[:, column] != BAND)
    band = array[:CAPTION_PX, : shape[1] * scale]
    assert np.any(np.all(band != BAND, axis=-1))  # the caption is drawn


def test_tall_images_are_capped(tmp_path):
    shape = (400, 2)
    array = pixels(write_comparison_png(np.zeros(800), np.zeros(800), shape, tmp_path / "t.png"))
    scale = panel_scale(shape)
    assert scale == MAX_PANEL_PX // 400
    assert array.shape[0] == CAPTION_PX + 400 * scale


@pytest.mark.parametrize(
    ("centre", "adversarial", "shape", "value_range", "message"),
    [
        (
            np.zeros(24),
            np.zeros(25),
            (5, 5),
            None,
            "the centre image has 24 values, but an image of shape 5x5 needs 25",
        ),
        (np.zeros(25), np.zeros(26), (5, 5), None, "the adversarial image has 26 values"),
        (np.zeros(25), np.zeros(25), (5, 0), None, "height and width must be positive"),
        (np.zeros(25), np.zeros(25), (25,), None, "expected \\(height, width\\)"),
        (np.zeros(4), np.full(4, np.nan), (2, 2), None, "not finite"),
        (np.zeros(4), np.ones(4), (2, 2), (1.0, 1.0), "expected finite lo < hi"),
    ],
)
def test_bad_input_is_an_input_error(tmp_path, centre, adversarial, shape, value_range, message):
    with pytest.raises(InputError, match=message):
        write_comparison_png(centre, adversarial, shape, tmp_path / "x.png", value_range=value_range)
    assert not (tmp_path / "x.png").exists()


def test_open_image_without_a_display_does_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert open_image(tmp_path / "a.png") is False
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("PATH", str(tmp_path))  # a display, but no xdg-open
    assert open_image(tmp_path / "a.png") is False


def test_open_image_starts_the_viewer(tmp_path, monkeypatch):
    marker = tmp_path / "opened"
    viewer = tmp_path / "xdg-open"
    viewer.write_text(f'#!/bin/sh\necho "$1" > {marker}\n')
    viewer.chmod(0o755)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert open_image(tmp_path / "a.png") is True
    # The viewer is a process: wait far above its start on a busy machine. The shell creates the
    # file before echo writes the line, so wait for the whole line, not for the file.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text().endswith("\n"):
            break
        time.sleep(0.02)
    assert marker.read_text().strip() == str(tmp_path / "a.png")


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_an_image_with_channels_shows_them_side_by_side(tmp_path, layout):
    """A CIFAR-shaped counterexample (3 channels, NCHW or a Keras model's NHWC) is drawn with its
    channels side by side, every value once, where it used to be refused after the verdict."""
    from qverify.counterexample.example import AdversarialExample
    from qverify.counterexample.picture import write_example_png

    planes = np.arange(3 * 6 * 5, dtype=np.float64).reshape(3, 6, 5)  # (C, H, W), distinct values
    changed = planes.copy()
    changed[1, 2, 3] += 7.0  # one value of the second channel
    shape, order = ((3, 6, 5), (0, 1, 2)) if layout == "nchw" else ((6, 5, 3), (1, 2, 0))
    flat = lambda a: tuple(a.transpose(order).reshape(-1))
    example = AdversarialExample(
        inputs_word=flat(changed), inputs_real=flat(changed), inputs_raw=None, outputs_c=(0.0,),
        outputs_c_word=(0,), outputs_float=(0.0,), violated="clause", float_violates=True,
        center=flat(planes), image_shape=shape,
    )  # fmt: skip
    path = write_example_png(example, tmp_path / "cex.png")
    side_by_side = (6, 15)
    scale = panel_scale(side_by_side)
    array = pixels(path)
    assert array.shape[1] == 3 * side_by_side[1] * scale + 2 * SEPARATOR_PX
    difference = blocks(panel(array, 2, side_by_side, scale), side_by_side, scale)
    changed_at = np.argwhere((difference != NEUTRAL).any(axis=2))
    assert changed_at.tolist() == [[2, 5 + 3]]  # row 2, second channel's column 3
    centre = blocks(panel(array, 0, side_by_side, scale), side_by_side, scale)[..., 0].astype(int)
    expected = np.concatenate(list(planes), axis=1)  # channels side by side
    assert (np.diff(centre[0, :5]) > 0).all() and (
        np.argsort(centre.reshape(-1)) == np.argsort(expected.reshape(-1))
    ).all()
