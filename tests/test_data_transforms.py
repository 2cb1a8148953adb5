"""Input transformations: each family's statistics (AWGN sigma, the Brownian 1/f^2 spectrum, stripe
counts, salt-and-pepper fraction), determinism under a seed, the neutral value, the clip range, the
geometric conventions, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from qverify.data.transforms import (
    FAMILIES,
    IMPACT_DEFAULT,
    PAPER_FAMILIES,
    Canvas,
    brownian_field,
    family,
    stripe_width,
)
from qverify.errors import InputError

WIDE = Canvas(-1000.0, 1000.0, (8, 8))  # nothing is clipped: the raw statistics show
UNIT = Canvas(0.0, 1.0, (8, 8))


def digits_like(n: int = 40) -> np.ndarray:
    """Images with ink (0.5..1) in columns 2..5 and rows 1..6 of an 8x8 frame, background 0."""
    images = np.zeros((n, 8, 8))
    images[:, 1:7, 2:6] = np.random.default_rng(3).uniform(0.5, 1.0, size=(n, 6, 4))
    return images.reshape(n, 64)


def test_registry_lists_the_papers_families_and_the_issues():
    assert set(PAPER_FAMILIES) <= set(IMPACT_DEFAULT) <= set(FAMILIES)
    assert set(IMPACT_DEFAULT) == {
        "awgn", "brownian", "vertical-occlusion", "horizontal-occlusion", "salt-pepper", "blur", "brightness",
        "contrast",
    }  # fmt: skip
    assert {"rotation", "translate-x", "translate-y", "zoom", "shear"} <= set(FAMILIES)
    assert {name for name, f in FAMILIES.items() if f.linear} == {"brightness", "contrast"}
    for f in FAMILIES.values():
        assert f.default_grid and all(f.check(v) == v for v in f.default_grid)
        assert f.check(f.neutral) == f.neutral
    assert FAMILIES["awgn"].default_grid == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)  # the paper's sigmas
    assert FAMILIES["vertical-occlusion"].default_grid == (1, 2, 3, 4, 5, 6)


def test_awgn_has_the_asked_standard_deviation_in_units_of_the_range():
    x = np.zeros((400, 64))
    out = family("awgn")(x, 0.1, np.random.default_rng(0), WIDE)  # sigma = 0.1 * 2000 = 200
    assert abs(out.std() / 200 - 1) < 0.01 and abs(out.mean()) < 2
    assert abs(np.corrcoef(out[:, 0], out[:, 1])[0, 1]) < 0.05  # independent pixels


def _radial_power(fields: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean power per radial frequency bin of (n, H, W) fields (the zero frequency left out)."""
    h, w = fields.shape[-2:]
    power = np.mean(np.abs(np.fft.fft2(fields)) ** 2, axis=0)
    radius = np.hypot(np.fft.fftfreq(h)[:, None], np.fft.fftfreq(w)[None, :])
    edges = np.linspace(1.5 / h, 0.5, 20)
    which = np.digitize(radius, edges)
    centres = np.array([radius[which == k].mean() for k in range(1, len(edges))])
    means = np.array([power[which == k].mean() for k in range(1, len(edges))])
    return centres, means


def test_brownian_noise_has_a_power_spectrum_of_slope_minus_two():
    fields = brownian_field((64, 1, 64, 64), np.random.default_rng(1))[:, 0]
    slope = np.polyfit(*np.log(_radial_power(fields)), 1)[0]
    assert -2.15 < slope < -1.85, slope
    white = np.random.default_rng(1).standard_normal((64, 64, 64))
    assert abs(np.polyfit(*np.log(_radial_power(white)), 1)[0]) < 0.15  # AWGN: flat
    # through the family: every image's noise has exactly the asked sigma, no offset
    out = family("brownian")(np.zeros((50, 64)), 0.05, np.random.default_rng(2), WIDE)
    assert np.allclose(out.std(axis=1), 100.0) and np.allclose(out.mean(axis=1), 0.0, atol=1e-9)


def test_brownian_fields_made_in_blocks_are_bit_for_bit_those_made_at_once():
    """The fields are made a block of images at a time (bounded memory at 10,000 CIFAR-10 images);
    the block size changes no bit, and the family adds them in place as images + sigma * width * field."""
    shape = (23, 3, 8, 8)
    whole = brownian_field(shape, np.random.default_rng(5), block=shape[0])
    for block in (1, 4, 7, 22, 64):
        assert np.array_equal(brownian_field(shape, np.random.default_rng(5), block=block), whole)
    x = np.random.default_rng(6).uniform(0.0, 1.0, size=(23, 192))
    canvas = Canvas(0.0, 1.0, (3, 8, 8))
    expected = np.clip(x.reshape(shape) + 0.2 * canvas.width * whole, 0.0, 1.0).reshape(23, 192)
    assert np.array_equal(family("brownian")(x, 0.2, np.random.default_rng(5), canvas), expected)


@pytest.mark.parametrize("name, axis", [("vertical-occlusion", 1), ("horizontal-occlusion", 2)])
def test_occlusions_black_out_exactly_the_asked_number_of_stripes(name, axis):
    full = np.ones((30, 64))
    for count in range(9):
        out = family(name)(full, count, np.random.default_rng(count), UNIT).reshape(30, 8, 8)
        blacked = np.all(out == 0.0, axis=axis)  # whole columns (vertical) or rows (horizontal)
        assert np.all(blacked.sum(axis=1) == count)
        assert np.all((out == 0.0) == np.broadcast_to(np.expand_dims(blacked, axis), out.shape))
    with pytest.raises(InputError, match="9 stripes of 1 pixel"):
        family(name)(full, 9, np.random.default_rng(0), UNIT)
    with pytest.raises(InputError, match="whole number"):
        family(name)(full, 1.5, np.random.default_rng(0), UNIT)


def test_occlusions_go_into_the_targets_bounding_box_first():
    x = digits_like()
    out = family("vertical-occlusion")(x, 3, np.random.default_rng(0), UNIT).reshape(-1, 8, 8)
    changed = out != x.reshape(-1, 8, 8)
    assert not changed[:, :, [0, 1, 6, 7]].any()  # the ink spans columns 2..5: stripes stay there
    assert not changed[:, [0, 7], :].any()  # and span the box's rows 1..6 only
    assert np.all(np.sum(np.all(out[:, 1:7, 2:6] == 0, axis=1), axis=1) == 3)
    six = family("vertical-occlusion")(x, 6, np.random.default_rng(0), UNIT).reshape(-1, 8, 8)
    assert np.all(six[:, 1:7, 2:6] == 0)  # the 4 box columns, then 2 outside
    assert stripe_width(8) == 1 and stripe_width(32) == 2 and stripe_width(224) == 14
    wide = family("horizontal-occlusion")(
        np.ones((5, 32 * 32)), 3, np.random.default_rng(0), Canvas(0, 1, (32, 32))
    )
    assert np.all(np.sum(np.all(wide.reshape(5, 32, 32) == 0, axis=2), axis=1) == 6)  # 3 stripes of 2 rows


def test_salt_and_pepper_replaces_the_asked_fraction_half_each_way():
    x = np.full((200, 64), 0.5)
    out = family("salt-pepper")(x, 0.2, np.random.default_rng(0), UNIT)
    salt, pepper = np.mean(out == 1.0), np.mean(out == 0.0)
    assert abs(salt + pepper - 0.2) < 0.01 and abs(salt - pepper) < 0.01
    assert np.all((out == 0.5) | (out == 0.0) | (out == 1.0))
    colour = Canvas(0.0, 1.0, (3, 4, 4))  # a pixel's channels go together
    out = family("salt-pepper")(np.full((100, 48), 0.5), 0.3, np.random.default_rng(0), colour).reshape(
        100, 3, 16
    )
    assert np.all(out.min(axis=1) == out.max(axis=1))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_is_deterministic_under_the_seed_neutral_and_clipped(name):
    f = FAMILIES[name]
    x = digits_like(20)
    strongest = max(f.default_grid, key=lambda v: abs(v - f.neutral))
    first = f(x, strongest, np.random.default_rng(7), UNIT)
    assert np.array_equal(first, f(x, strongest, np.random.default_rng(7), UNIT))
    if f.random:
        one, other = (f(x, f.default_grid[1], np.random.default_rng(seed), UNIT) for seed in (7, 8))
        assert not np.array_equal(one, other)
    assert first.shape == x.shape and first.min() >= 0.0 and first.max() <= 1.0
    assert not np.array_equal(first, x)
    assert np.allclose(f(x, f.neutral, np.random.default_rng(7), UNIT), x)
    images = x.reshape(20, 8, 8)  # (n, H, W) in, the same shape out
    assert f(images, strongest, np.random.default_rng(7), UNIT).shape == images.shape


def test_brightness_and_contrast_are_affine_in_their_parameter():
    x = digits_like(5)
    for name, a, b in (("brightness", 0.1, 0.3), ("contrast", 0.4, 0.8)):
        f = family(name)
        rng = np.random.default_rng(0)
        mid = f(x, (a + b) / 2, rng, WIDE)
        assert np.allclose(mid, (f(x, a, rng, WIDE) + f(x, b, rng, WIDE)) / 2)
    assert np.allclose(family("contrast")(x, 0.0, None, UNIT), 0.5)  # around the range's middle
    assert np.allclose(family("brightness")(np.zeros((1, 64)), 0.25, None, Canvas(0, 16, (8, 8))), 4.0)


def test_geometric_conventions():
    image = np.random.default_rng(1).random((1, 8, 8))
    rotated = family("rotation")(image, 90, None, UNIT)
    assert np.allclose(rotated[0], np.rot90(image[0]))  # counter-clockwise as displayed
    right = family("translate-x")(image, 2, None, UNIT)[0]
    assert np.allclose(right[:, 2:], image[0][:, :-2]) and np.all(right[:, :2] == 0)
    down = family("translate-y")(image, 1, None, UNIT)[0]
    assert np.allclose(down[1:], image[0][:-1]) and np.all(down[0] == 0)
    half = family("translate-x")(image, 0.5, None, UNIT)[0]
    assert np.allclose(half[:, 1:], (image[0][:, 1:] + image[0][:, :-1]) / 2)  # bilinear
    nine = Canvas(0, 1, (9, 9))
    line = np.zeros((1, 9, 9))
    line[0, :, 4] = 1.0  # a vertical line through the centre (4, 4)
    sheared = family("shear")(line, 0.5, None, nine)[0]
    assert sheared[8, 6] == 1.0 and sheared[0, 2] == 1.0 and sheared[4, 4] == 1.0  # 4 rows down: 2 right
    dot = np.zeros((1, 9, 9))
    dot[0, 4, 6] = 1.0
    assert family("zoom")(dot, 2.0, None, nine)[0, 4, 8] == 1.0  # twice as far from the centre
    blurred = family("blur")(image, 1.0, None, UNIT)
    assert blurred.std() < image.std()


def test_clear_errors():
    with pytest.raises(InputError, match="unknown perturbation family 'fog'"):
        family("fog")
    with pytest.raises(InputError, match=r"salt-pepper: fraction 1.5 outside \[0, 1\]"):
        family("salt-pepper")(np.zeros((1, 64)), 1.5, np.random.default_rng(0), UNIT)
    with pytest.raises(InputError, match="blur needs an image shape"):
        family("blur")(np.zeros((1, 64)), 1.0, np.random.default_rng(0), Canvas(0, 1))
    with pytest.raises(InputError, match="do not fill images"):
        family("blur")(np.zeros((1, 63)), 1.0, np.random.default_rng(0), UNIT)
    with pytest.raises(InputError, match="lo < hi"):
        Canvas(1.0, 1.0)
    assert family("awgn")(np.zeros((2, 5)), 0.1, np.random.default_rng(0), Canvas(0, 1)).shape == (2, 5)
