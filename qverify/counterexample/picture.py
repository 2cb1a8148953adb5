"""The picture of an adversarial example: centre, adversarial input and their difference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qverify.counterexample.example import AdversarialExample
from qverify.counterexample.image import write_comparison_png
from qverify.errors import InputError


def _planar(values: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, int]]:
    """A flat input of `shape` as one 2-D picture: (H, W) as it is; an image with channels, (C, H, W)
    (NCHW files) or (H, W, C) (NHWC files: a last axis of at most 4 where the first is longer), as
    its channels side by side, each H x W, so every value of a CIFAR input is drawn."""
    if len(shape) == 1:
        return values, (1, shape[0])
    if len(shape) == 2:
        return values, (shape[0], shape[1])
    if len(shape) != 3:
        raise InputError(f"image shape {shape}: expected (height, width) or an image with channels")
    channels_last = shape[-1] <= 4 < shape[0]
    planes = np.asarray(values, dtype=np.float64).reshape(shape)
    if channels_last:
        planes = planes.transpose(2, 0, 1)
    count, height, width = planes.shape
    return planes.transpose(1, 0, 2).reshape(height, count * width), (height, count * width)


def write_example_png(example: AdversarialExample, path: Path, title: str = "") -> Path:
    """PNG of an image-shaped counterexample, in raw units (pixel levels) when the network has them.

    Without a centre (a VNN-LIB property), the adversarial image is compared with itself (zero
    difference) so the picture still shows it. An image with channels shows them side by side
    (`_planar`).
    """
    if example.image_shape is None:
        raise InputError("this counterexample has no image shape (give --image-shape or a suite image_shape)")
    raw = example.inputs_raw is not None
    adversarial = np.array(example.inputs_raw if raw else example.inputs_real, dtype=np.float64)
    center = example.center_raw if raw else example.center
    reference = np.array(center, dtype=np.float64) if center is not None else adversarial
    value_range = example.raw_range if raw else None
    shape = tuple(int(v) for v in example.image_shape)
    if reference.size != adversarial.size or adversarial.size != int(np.prod(shape)):
        raise InputError(
            f"the counterexample has {adversarial.size} values, an image of shape {'x'.join(map(str, shape))} "
            f"{int(np.prod(shape))}"
        )
    reference, size = _planar(reference, shape)
    adversarial, _ = _planar(adversarial, shape)
    return write_comparison_png(
        reference, adversarial, size, Path(path), value_range=value_range, title=title
    )
