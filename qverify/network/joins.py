"""The nodes of the IR that join or move tensors: a residual `Add`, a channel `Concat`, a `Permute`.

A node of a `Network` reads the outputs of its producers (`Network.wiring`) *concatenated*, in
order, as one flat vector: a dense or convolutional layer reads one producer; a join reads several.
So every stage sees a join as a map from one flat vector to another, as it sees a layer:

- `Add` of k tensors of one shape is z = h_1 + ... + h_k, elementwise (a ResNet's shortcut, a
  MobileNetV2 block's residual), then an activation (the ReLU after a ResNet's addition). In fixed
  point the C adds words (`fxp_add`: exact unless the sum leaves the word range, then the overflow
  mode), in float each addition rounds once in the C type; nothing is multiplied.
- `Concat` of tensors (C_i, H, W) along the channel axis is their flat concatenation: NCHW stores
  a tensor channel after channel, so the channels of the second tensor follow those of the first
  (SqueezeNet's fire module). On vectors, the features follow each other. No arithmetic at all.

- `Permute` moves values without computing: z[i] = h[order[i]] (a Transpose that no layer can
  absorb, such as tf2onnx's NHWC -> NCHW at a Keras model's input).

An `Add` of one tensor is the identity followed by its activation: how an activation that cannot be
fused into the layer before it (its input is read elsewhere too) stands alone.

Shapes are (channels, height, width) for images and (n,) for vectors, batch 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qverify.errors import InputError
from qverify.network.activation import Activation
from qverify.network.arrays import frozen_array

Shape = tuple[int, ...]


def _shape(values, what: str) -> Shape:
    items = tuple(int(v) for v in values)
    if len(items) not in (1, 3) or any(v < 1 for v in items):
        raise InputError(
            f"{what} must be (n,) or (channels, height, width) of positive sizes, got {tuple(values)}"
        )
    return items


@dataclass(frozen=True, slots=True, eq=False)
class Add:
    """z = the elementwise sum of `count` tensors of `shape`, then `activation`."""

    shape: Shape
    count: int = 2
    activation: Activation = Activation.IDENTITY

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, "an addition's shape"))
        if self.count < 1:
            raise InputError(f"an addition reads at least one tensor, got {self.count}")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def n_in(self) -> int:
        """The concatenated input: `count` tensors of `size` values."""
        return self.count * self.size

    @property
    def n_out(self) -> int:
        return self.size

    @property
    def input_sizes(self) -> tuple[int, ...]:
        return (self.size,) * self.count

    @property
    def input_shapes(self) -> tuple[Shape, ...]:
        return (self.shape,) * self.count

    @property
    def output_shape(self) -> Shape:
        return self.shape

    def describe(self) -> str:
        shape = "x".join(map(str, self.shape))
        return f"add of {self.count} tensors {shape}" if self.count > 1 else f"activation of {shape}"


@dataclass(frozen=True, slots=True, eq=False)
class Concat:
    """The tensors of `input_shapes` one after the other (module docstring): images of one height
    and width along their channels, or vectors."""

    input_shapes: tuple[Shape, ...]
    output_shape: Shape = field(init=False)

    def __post_init__(self) -> None:
        shapes = tuple(_shape(shape, "a concatenated tensor's shape") for shape in self.input_shapes)
        if len(shapes) < 2:
            raise InputError(f"a concatenation joins at least two tensors, got {len(shapes)}")
        if len({len(shape) for shape in shapes}) != 1:
            raise InputError(f"shape mismatch: cannot concatenate tensors of shapes {list(shapes)}")
        if len(shapes[0]) == 3:
            if len({shape[1:] for shape in shapes}) != 1:
                raise InputError(
                    f"shape mismatch: concatenated images differ in height or width: {list(shapes)}"
                )
            output = (sum(shape[0] for shape in shapes), *shapes[0][1:])
        else:
            output = (sum(shape[0] for shape in shapes),)
        object.__setattr__(self, "input_shapes", shapes)
        object.__setattr__(self, "output_shape", output)

    @property
    def activation(self) -> Activation:
        return Activation.IDENTITY

    @property
    def input_sizes(self) -> tuple[int, ...]:
        return tuple(math.prod(shape) for shape in self.input_shapes)

    @property
    def n_in(self) -> int:
        return sum(self.input_sizes)

    @property
    def n_out(self) -> int:
        return self.n_in

    def describe(self) -> str:
        parts = " + ".join("x".join(map(str, shape)) for shape in self.input_shapes)
        return f"concat {parts} -> {'x'.join(map(str, self.output_shape))}"


@dataclass(frozen=True, slots=True, eq=False)
class Permute:
    """z[i] = h[order[i]] for a tensor of `input_shape` read as `output_shape` (module docstring)."""

    order: np.ndarray
    input_shape: Shape
    output_shape: Shape

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", frozen_array(self.order, dtype=np.int64, ndim=1))
        object.__setattr__(self, "input_shape", tuple(int(v) for v in self.input_shape))
        object.__setattr__(self, "output_shape", tuple(int(v) for v in self.output_shape))
        size = math.prod(self.input_shape)
        if math.prod(self.output_shape) != size or not np.array_equal(np.sort(self.order), np.arange(size)):
            raise InputError(
                f"a permutation of {size} values must list each of them once, read as {self.output_shape}"
            )

    @property
    def activation(self) -> Activation:
        return Activation.IDENTITY

    @property
    def n_in(self) -> int:
        return int(self.order.size)

    @property
    def n_out(self) -> int:
        return int(self.order.size)

    @property
    def input_sizes(self) -> tuple[int, ...]:
        return (self.n_in,)

    def describe(self) -> str:
        before, after = ("x".join(map(str, shape)) for shape in (self.input_shape, self.output_shape))
        return f"permute {before} -> {after}"


Join = Add | Concat | Permute
