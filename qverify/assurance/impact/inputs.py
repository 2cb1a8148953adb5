"""What an impact study perturbs: the labelled data set checked against the pair, the canvas it lives
on (clip range and image shape, each from the most specific source that knows it) and the grid of
intensities per family."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qverify.assurance.impact.records import FamilyGridInfo
from qverify.data import Dataset
from qverify.data.transforms import Canvas, Family, family
from qverify.errors import InputError
from qverify.network import Network
from qverify.network.input_layout import same_image_shape


@dataclass(frozen=True, slots=True)
class FamilyGrid:
    """One family and the intensities the study runs it at (in the family's own units)."""

    family: Family
    values: tuple[float, ...]

    def info(self) -> FamilyGridInfo:
        f = self.family
        return FamilyGridInfo(f.name, f.parameter, f.unit, f.neutral, self.values)


def check_dataset(data: Dataset, n_inputs: int, n_classes: int) -> None:
    """A clear error unless every sample fits the network and every label names one of its outputs."""
    data.check_inputs(n_inputs)
    data.check_labels(n_classes)


def _network_domain(net: Network) -> tuple[float, float] | None:
    """The NNet input minimum/maximum when they are finite and the same for every input."""
    norm = net.input_norm
    if norm is None or not (np.all(np.isfinite(norm.minimum)) and np.all(np.isfinite(norm.maximum))):
        return None
    if np.ptp(norm.minimum) or np.ptp(norm.maximum):
        return None
    return float(norm.minimum[0]), float(norm.maximum[0])


def resolve_canvas(
    data: Dataset, net: Network, domain: tuple[float, float] | None, image_shape: tuple[int, ...] | None
) -> tuple[Canvas, str]:
    """The canvas and where its range came from: the given domain, else the data set's own, else
    the network's NNet input range, else the data's observed minimum and maximum. The data must lie
    in the range (else the domain is in other units than the data: a clear error)."""
    if domain is not None:
        source = "given"
    elif data.domain is not None:
        domain, source = data.domain, f"the data set {data.name}"
    elif (found := _network_domain(net)) is not None:
        domain, source = found, "the network's input minimum/maximum"
    else:
        domain = (float(data.x.min()), float(data.x.max()))
        source = "the data's own minimum and maximum (give --domain for the true range)"
        if domain[0] == domain[1]:
            raise InputError(f"data set {data.name}: every value is {domain[0]:g}; give --domain LO,HI")
    lo, hi = float(domain[0]), float(domain[1])
    _check_image_layouts(data, net)
    shape = image_shape or data.image_shape or net.image_shape
    if shape is not None and int(np.prod(shape)) != data.n_features:
        raise InputError(f"image shape {shape} does not hold the data's {data.n_features} values per sample")
    canvas = Canvas(lo, hi, tuple(int(v) for v in shape) if shape else None)
    low, high = float(data.x.min()), float(data.x.max())
    if low < lo or high > hi:
        raise InputError(
            f"data set {data.name}: values span [{low:g}, {high:g}], outside the input domain [{lo:g}, {hi:g}] "
            f"(from {source}): give --domain in the data set's units"
        )
    return canvas, source


def _check_image_layouts(data: Dataset, net: Network) -> None:
    """A data set of images in one layout and a network that takes another (CIFAR-10's NCHW arrays
    into a TFLite file's NHWC input) would be read pixel for pixel in the wrong order: refused."""
    if data.image_shape is None or net.image_shape is None:
        return
    if not same_image_shape(data.image_shape, net.image_shape):
        raise InputError(
            f"data set {data.name} holds images of shape {list(data.image_shape)}, the network {net.name} "
            f"takes {list(net.image_shape)}: store the images in the network's layout (or make the model "
            f"whose layout the data has the reference: a TFLite candidate is paired with it)"
        )


def family_grids(
    names: Sequence[str], overrides: Mapping[str, Sequence[float]], canvas: Canvas
) -> tuple[FamilyGrid, ...]:
    """The grid of each named family: its default grid, or the values given for it (checked against
    the family's range; duplicates dropped, order kept). Image families need an image shape."""
    unknown = [name for name in overrides if name not in names]
    if unknown:
        raise InputError(f"a grid is given for {', '.join(unknown)}, which is not among the families studied")
    grids = []
    for name in dict.fromkeys(names):
        found = family(name)
        if found.spatial and canvas.shape is None:
            raise InputError(f"{name} needs an image shape (the data set has none: give --image-shape)")
        values = tuple(dict.fromkeys(found.check(v) for v in overrides.get(name, found.default_grid)))
        if not values:
            raise InputError(f"{name}: an empty grid")
        if found.spatial:  # limits that depend on the image (stripes that fit): fail before the study
            blank = np.full((1, int(np.prod(canvas.shape))), canvas.background)
            for value in values:
                found(blank, value, np.random.default_rng(0), canvas)
        grids.append(FamilyGrid(found, values))
    if not grids:
        raise InputError("no perturbation family to study")
    return tuple(grids)
