"""An .npz data set may store integer pixel levels with a `scale` to the network's units and the
input `domain` (benchmarks/cifar10/data.py writes CIFAR-10 so: uint8 levels, scale 1/255, [0, 1])."""

from __future__ import annotations

import numpy as np
import pytest

from qverify.data import load_dataset
from qverify.errors import InputError


def test_uint8_levels_are_scaled_and_the_domain_is_read(tmp_path):
    levels = np.arange(2 * 3 * 2 * 2, dtype=np.uint8).reshape(2, 3, 2, 2) * 10
    path = tmp_path / "images.npz"
    np.savez(path, x=levels, y=np.array([3, 1]), scale=np.float64(1 / 255), domain=np.array([0.0, 1.0]))
    data = load_dataset(str(path))
    assert data.x.shape == (2, 12) and data.image_shape == (3, 2, 2)
    assert np.array_equal(data.x, levels.reshape(2, -1).astype(np.float64) * (1 / 255))
    assert data.domain == (0.0, 1.0) and list(data.y) == [3, 1]


def test_without_scale_the_values_are_as_stored(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, x=np.array([[0, 255]], dtype=np.uint8))
    data = load_dataset(str(path))
    assert np.array_equal(data.x, [[0.0, 255.0]]) and data.domain is None


@pytest.mark.parametrize(
    ("extra", "phrase"),
    [
        ({"scale": np.float64(-1.0)}, "'scale' must be one positive finite number"),
        ({"scale": np.array([1.0, 2.0])}, "'scale' must be one positive finite number"),
        ({"scale": np.float64(np.nan)}, "'scale' must be one positive finite number"),
        ({"domain": np.array([1.0, 0.0])}, "'domain' must be two finite numbers lo < hi"),
        ({"domain": np.array([0.0, np.inf])}, "'domain' must be two finite numbers lo < hi"),
        ({"domain": np.array([0.0, 1.0, 2.0])}, "'domain' must be two finite numbers lo < hi"),
    ],
)
def test_a_bad_scale_or_domain_is_a_clear_error(tmp_path, extra, phrase):
    path = tmp_path / "bad.npz"
    np.savez(path, x=np.zeros((2, 4), dtype=np.uint8), **extra)
    with pytest.raises(InputError, match=phrase):
        load_dataset(str(path))
