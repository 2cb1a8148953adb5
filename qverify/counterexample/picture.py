"""The picture of an adversarial example: centre, adversarial input and their difference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qverify.counterexample.example import AdversarialExample
from qverify.counterexample.image import write_comparison_png
from qverify.errors import InputError


def write_example_png(example: AdversarialExample, path: Path, title: str = "") -> Path:
    """PNG of an image-shaped counterexample, in raw units (pixel levels) when the network has them.

    Without a centre (a VNN-LIB property), the adversarial image is compared with itself (zero
    difference) so the picture still shows it.
    """
    if example.image_shape is None:
        raise InputError("this counterexample has no image shape (give --image-shape or a suite image_shape)")
    raw = example.inputs_raw is not None
    adversarial = np.array(example.inputs_raw if raw else example.inputs_real, dtype=np.float64)
    center = example.center_raw if raw else example.center
    reference = np.array(center, dtype=np.float64) if center is not None else adversarial
    value_range = example.raw_range if raw else None
    shape = tuple(example.image_shape)
    if len(shape) == 1:
        shape = (1, shape[0])
    if len(shape) == 3:  # a colour image: its channels' mean, grey (CHW, or HWC as TFLite files hold it)
        reference, adversarial, shape = _grey(reference, shape), _grey(adversarial, shape), _plane(shape)
    return write_comparison_png(
        reference,
        adversarial,
        shape,
        Path(path),
        value_range=value_range,
        title=title,
    )


def _plane(shape: tuple[int, ...]) -> tuple[int, int]:
    """(height, width) of a CHW image, or of an HWC one (a last axis of at most 4 channels after a
    larger first one)."""
    return (shape[0], shape[1]) if _channels_last(shape) else (shape[1], shape[2])


def _channels_last(shape: tuple[int, ...]) -> bool:
    return shape[2] <= 4 < shape[0]


def _grey(values, shape: tuple[int, ...]) -> np.ndarray:
    image = np.asarray(values, dtype=np.float64).reshape(shape)
    return image.mean(axis=2 if _channels_last(shape) else 0)
