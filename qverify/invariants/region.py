"""The property's input region in the implementation's units, and operations on per-neuron bounds.

A property's region is a union of real boxes. For the implementation it becomes, per box, what the
input stage makes of the box's reals (`qverify.quant.inputs`) -- the boxes of the harness's assumes,
taken from `qverify.codegen.conditions` so the two cannot disagree:
- fixed point `<k,l>`: the words `[Q(lo), Q(hi)]` (the format's rounding of x * 2^l), cut to the
  word range;
- float: `[R(lo), R(hi)]`, R rounding to nearest in the C type;
- int8: the codes of those float32 values.
A box that is not empty as real numbers never becomes empty.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.codegen.conditions import implementation_box
from qverify.errors import InputError
from qverify.network import Activation
from qverify.properties import Box, Property, Units
from qverify.quant import FixedFormat, LayerBounds, QuantizedNetwork


@dataclass(frozen=True, slots=True, eq=False)
class InputBox:
    """One non-empty input box of the implementation: int64 words (fixed), codes (int8) or values of
    the C type (float)."""

    lo: np.ndarray
    hi: np.ndarray


def _float_value(literal: str) -> float:
    """A hexadecimal C literal of `float_literal` back to its value, e.g. `0x1.8p-1f` -> 0.75."""
    return float.fromhex(literal.removesuffix("f"))


def input_boxes(qnet: QuantizedNetwork, prop: Property) -> list[InputBox]:
    """The boxes of the region, in the order of the property."""
    if prop.units is not Units.NORMALISED:
        raise InputError(f"property {prop.name} is in raw units: convert it with to_normalised first")
    prop.check_against(qnet.n_inputs, qnet.n_outputs)
    return [input_box(qnet, box)[0] for box in prop.boxes]


def input_box(qnet: QuantizedNetwork, box: Box) -> tuple[InputBox, int]:
    """One box as the implementation's input stage makes it, and how many of its bounds moved to a
    representable value (`qverify.codegen.conditions.implementation_box`)."""
    cbox = implementation_box(qnet, box)
    if qnet.is_integer:
        lo = np.array([int(v) for v in cbox.lo], dtype=np.int64)
        hi = np.array([int(v) for v in cbox.hi], dtype=np.int64)
    else:
        dtype = qnet.number.dtype  # type: ignore[union-attr]
        lo = np.array([_float_value(v) for v in cbox.lo], dtype=dtype)
        hi = np.array([_float_value(v) for v in cbox.hi], dtype=dtype)
    return InputBox(lo, hi), cbox.moved


def join(first: tuple[LayerBounds, ...], second: tuple[LayerBounds, ...]) -> tuple[LayerBounds, ...]:
    """Elementwise hull: bounds that hold on the union of the two regions."""
    return tuple(
        LayerBounds(
            np.minimum(a.pre_lo, b.pre_lo),
            np.maximum(a.pre_hi, b.pre_hi),
            np.minimum(a.post_lo, b.post_lo),
            np.maximum(a.post_hi, b.post_hi),
            a.may_overflow | b.may_overflow,
        )
        for a, b in zip(first, second, strict=True)
    )


def join_boxes(per_box: list[tuple[LayerBounds, ...]]) -> tuple[LayerBounds, ...] | None:
    """The hull of the per-box bounds; None for an empty region."""
    if not per_box:
        return None
    result = per_box[0]
    for bounds in per_box[1:]:
        result = join(result, bounds)
    return result


def real_scale(qnet: QuantizedNetwork) -> float:
    """How many implementation units make 1.0: 2^l for fixed point, 1 for float."""
    number = qnet.number
    return float(number.scale) if isinstance(number, FixedFormat) else 1.0


def stable_relus(qnet: QuantizedNetwork, bounds: tuple[LayerBounds, ...] | None) -> tuple[int, int]:
    """(ReLUs proved stable, ReLUs in the network): stable when pre_lo >= 0 or pre_hi <= 0."""
    total = sum(layer.n_out for layer in qnet.layers if layer.activation is Activation.RELU)
    if bounds is None:
        return 0, total
    stable = 0
    for layer, layer_bounds in zip(qnet.layers, bounds, strict=True):
        if layer.activation is Activation.RELU:
            stable += int(np.count_nonzero((layer_bounds.pre_lo >= 0) | (layer_bounds.pre_hi <= 0)))
    return stable, total


def mean_width(qnet: QuantizedNetwork, bounds: tuple[LayerBounds, ...] | None, layer: int = -2) -> float:
    """Mean of pre_hi - pre_lo of one layer (default: the last hidden layer), in real units."""
    if bounds is None:
        return 0.0
    index = layer if len(bounds) > 1 else -1
    chosen = bounds[index]
    widths = chosen.pre_hi.astype(np.float64) - chosen.pre_lo.astype(np.float64)
    return float(np.mean(widths)) / real_scale(qnet)


def first_non_finite(bounds: tuple[LayerBounds, ...]) -> tuple[int, int] | None:
    """(layer, neuron), 1-based layer, of the first neuron with a non-finite (or NaN) bound, if any."""
    for index, layer_bounds in enumerate(bounds, start=1):
        arrays = (layer_bounds.pre_lo, layer_bounds.pre_hi, layer_bounds.post_lo, layer_bounds.post_hi)
        bad = np.zeros(layer_bounds.pre_lo.shape, dtype=bool)
        for values in arrays:
            bad |= ~np.isfinite(np.asarray(values, dtype=np.float64))
        if bad.any():
            return index, int(np.flatnonzero(bad)[0])
    return None
