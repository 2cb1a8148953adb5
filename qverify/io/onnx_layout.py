"""Layout operators of float ONNX graphs that have no layer of their own: `Pad` and `Transpose`.

Both are read into state that the next layer absorbs exactly (`qverify.io.onnx_reader` decides
where that is allowed):

- `Pad` (constant mode, value 0, on the two spatial axes of an NCHW tensor) becomes a `PendingPad`:
  zeros around the image. A convolution adds nothing for a padded position, so the zeros are its
  own `pads`; an average pool counts them in its divisor, which is `count_include_pad` (PyTorch
  exports `AvgPool2d(padding=p)`, whose default counts the padding, as `Pad` + `AveragePool`); a
  max pool over non-negative values (after a ReLU) takes a zero only where a larger value exists,
  so the zeros are ignored padding. Anything else (another mode, a non-zero value, padding of the
  batch or channel axis, negative pads that crop) is unsupported.
- `Transpose` reorders the values of the tensor; `flat_order` says how (the value at flat position
  i after the transpose is the value at flat position `order[i]` before it). A transpose that only
  moves axes of size 1 keeps the order and is the identity on the stored values; any other is
  folded into the columns of the next dense layer (Keras-style NHWC flattening: Transpose then
  Flatten/Reshape then MatMul).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from qverify.errors import InputError, UnsupportedError

__all__ = ["PendingPad", "flat_order", "pad_amounts", "transpose_permutation"]

Pads = tuple[int, int, int, int]  # top, left, bottom, right (as qverify.network.spatial)


@dataclass(frozen=True, slots=True)
class PendingPad:
    """Zero padding around a (C, H, W) image that the next layer must absorb."""

    label: str  # the Pad node, as messages name it
    image: tuple[int, int, int]  # the image before padding
    pads: Pads

    @property
    def padded(self) -> tuple[int, int, int]:
        channels, height, width = self.image
        top, left, bottom, right = self.pads
        return channels, height + top + bottom, width + left + right

    def around(self, pads: Pads) -> Pads:
        """These pads added to a layer's own (the layer reads the padded image)."""
        return tuple(a + b for a, b in zip(self.pads, pads))  # type: ignore[return-value]


def _attribute(node: onnx.NodeProto, name: str):
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return None


def _pad_parameters(
    node: onnx.NodeProto, constants: dict[str, np.ndarray], rank: int, what: str
) -> tuple[list[int], float]:
    """The pads per axis ([begin_0 .. begin_r, end_0 .. end_r]) and the constant value, from the
    attributes (opset < 11) or the inputs (opset >= 11, with `axes` from opset 18)."""
    inputs = list(node.input)
    if len(inputs) == 1:  # opset 2..10: attributes pads and value
        pads = _attribute(node, "pads")
        if pads is None:
            raise InputError(f"{what} has neither a pads input nor a pads attribute")
        value = _attribute(node, "value")
        return [int(v) for v in pads], float(value or 0.0)
    if len(inputs) > 4:
        raise InputError(f"{what} has {len(inputs)} inputs, expected 1 to 4")
    for name in inputs[1:]:
        if name and name not in constants:
            raise UnsupportedError(f"{what} with a non-constant input '{name}' is not supported")
    amounts = [int(v) for v in np.asarray(constants[inputs[1]]).reshape(-1)]
    value = 0.0
    if len(inputs) > 2 and inputs[2]:
        given = np.asarray(constants[inputs[2]]).reshape(-1)
        if given.size != 1:
            raise InputError(f"{what} has a constant_value of {given.size} elements, expected 1")
        value = float(given[0])
    if len(inputs) > 3 and inputs[3]:
        axes = [int(v) + (rank if int(v) < 0 else 0) for v in np.asarray(constants[inputs[3]]).reshape(-1)]
        if (
            len(amounts) != 2 * len(axes)
            or len(set(axes)) != len(axes)
            or any(not 0 <= a < rank for a in axes)
        ):
            raise InputError(
                f"{what} has axes {axes} that do not fit its {len(amounts)} pads and rank {rank}"
            )
        full = [0] * (2 * rank)
        for position, axis in enumerate(axes):
            full[axis], full[rank + axis] = amounts[position], amounts[len(axes) + position]
        amounts = full
    return amounts, value


def pad_amounts(
    node: onnx.NodeProto, constants: dict[str, np.ndarray], shape: tuple[int, ...], what: str
) -> Pads:
    """The spatial pads (top, left, bottom, right) of a constant-zero `Pad` of an NCHW tensor.

    :raises UnsupportedError: another mode, a non-zero value, padding of the batch or channel axis,
        negative pads (cropping), a tensor that is not NCHW.
    :raises InputError: malformed pads or axes.
    """
    mode = _attribute(node, "mode")
    mode = mode.decode() if isinstance(mode, bytes) else (mode or "constant")
    if mode != "constant":
        raise UnsupportedError(f"{what} in mode '{mode}' is not supported (only constant zero padding)")
    if len(shape) != 4 or shape[0] != 1:
        raise UnsupportedError(f"{what} needs an NCHW input of batch 1, got shape {shape}")
    amounts, value = _pad_parameters(node, constants, len(shape), what)
    if len(amounts) != 8:
        raise InputError(f"{what} has {len(amounts)} pads for a rank-4 tensor, expected 8")
    if value != 0.0:
        raise UnsupportedError(f"{what} pads with {value!r}; only zero padding is supported")
    if any(v < 0 for v in amounts):
        raise UnsupportedError(f"{what} has negative pads {amounts} (cropping), which are not supported")
    if amounts[0] or amounts[1] or amounts[4] or amounts[5]:
        raise UnsupportedError(
            f"{what} pads the batch or channel axis ({amounts}); only H and W may be padded"
        )
    return amounts[2], amounts[3], amounts[6], amounts[7]


def transpose_permutation(node: onnx.NodeProto, rank: int, what: str) -> tuple[int, ...]:
    """The `perm` attribute (default: the axes reversed), checked to permute 0..rank-1."""
    perm = _attribute(node, "perm")
    order = tuple(range(rank))[::-1] if perm is None else tuple(int(v) for v in perm)
    if sorted(order) != list(range(rank)):
        raise InputError(f"{what} has perm {list(order)}, not a permutation of the {rank} axes")
    return order


def flat_order(shape: tuple[int, ...], perm: tuple[int, ...]) -> np.ndarray | None:
    """For a transpose of a row-major tensor of `shape`: the flat source index of each flat output
    position, or None when the transpose keeps every value in place (it moves size-1 axes only)."""
    if math.prod(shape) == 0:
        return None
    order = np.arange(math.prod(shape)).reshape(shape).transpose(perm).reshape(-1)
    return None if np.array_equal(order, np.arange(order.size)) else order
