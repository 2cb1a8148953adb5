"""A float ONNX graph read into the IR's nodes and wiring (`qverify.network.Network`).

The graph is walked in its (topological) node order. Every dynamic tensor has a `_Tensor` state:
which IR node holds its values, and what is still pending on it -- a linear layer whose bias `Add`,
BatchNormalization and activation may follow (`_OpenLayer`), a `Pad` the next Conv or pool
absorbs, a `Transpose`'s reordering the next dense layer absorbs, or constant elementwise operators
that become the input normalisation (before any layer) or the output normalisation (on the way to
the graph's output). A tensor read by several nodes has nothing pending: it is *materialised* into
an IR node first (`_GraphBuilder.materialise`), so no consumer folds anything into what another
consumer reads. On a chain this is exactly the sequential reader the project always had (the same
layers from the same files); on a graph it adds:

- `Add` of two (or more) dynamic tensors of one shape: a residual join (`qverify.network.Add`), whose
  ReLU may follow; `Concat` on the channel axis of NCHW tensors (or the feature axis of vectors);
- an activation, BatchNormalization or constant Mul/Add that no layer before it can absorb (its
  input is read elsewhere too, or follows a join): an activation node (`Add` of one tensor), or a
  per-channel scale and shift as a depthwise 1x1 convolution (Keras exports BatchNormalization as
  Mul and Add); constant Mul/Add/Sub/Div right after a layer (not on the way to the output) folded
  into its weights and bias; `Clip(0, 6)` as ReLU6 anywhere a ReLU may stand;
- a `Transpose` that no dense layer absorbs (tf2onnx's NHWC -> NCHW at a Keras model's input) as a
  `Permute` node;
- a final `Softmax` on the way to the graph's output: dropped, and said (`Network.notes`): it is
  monotone and keeps the order of the outputs, so properties comparing outputs with each other
  (`Y_i - Y_j`) mean the same on the logits; a property that compares a probability with a constant
  is refused when verified (`qverify.verification`).

Dead nodes (whose outputs never reach the graph output) are skipped; a node reading a tensor that no
earlier node produces (a cycle, or an input that does not exist) and a tensor defined twice are
errors naming them, as onnxruntime refuses such files.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from qverify.errors import InputError, UnsupportedError
from qverify.io.onnx_layout import PendingPad, flat_order, pad_amounts, transpose_permutation
from qverify.network.joins import Add, Concat, Permute
from qverify.network.model import NETWORK_INPUT, Activation, Dense, OutputNormalisation
from qverify.network.spatial import AveragePool2D, Conv2D, MaxPool2D

_ACTIVATIONS = {
    "Relu": Activation.RELU,
    "Sigmoid": Activation.SIGMOID,
    "Tanh": Activation.TANH,
}
_ELEMENTWISE = ("Add", "Sub", "Mul", "Div")
_SHAPE_ONLY = ("Flatten", "Reshape", "Identity", "Dropout")


@dataclass(frozen=True, slots=True)
class Step:
    """A non-Constant node of the graph, with the label used in messages."""

    node: onnx.NodeProto
    label: str

    def describe(self) -> str:
        return f"ONNX node '{self.label}' ({self.node.op_type})"


class _Stage(enum.Enum):
    """Which normalisation a constant elementwise operator on the tensor folds into."""

    INPUT = "before the first linear layer"
    LAYERS = "between linear layers"
    OUTPUT = "after the last linear layer"


@dataclass(slots=True)
class _OpenLayer:
    """A layer not yet made a node: a linear layer whose bias `Add`, BatchNormalization and
    activation may still follow, or a join (`add`) whose activation may.

    Dense: `weights` (n_out, n_in). Convolution: `weights` (out_channels, in/groups, kh, kw) and the
    geometry in `conv` (keyword arguments of `Conv2D`); `bias` has one entry per output channel.
    """

    step: Step
    weights: np.ndarray
    bias: np.ndarray
    takes_bias: bool
    producers: tuple[int, ...]
    activation: Activation | None = None
    conv: dict | None = None
    add: Add | None = None  # a join: the weights and bias are unused


@dataclass(slots=True)
class _Tensor:
    """What the reader knows of one dynamic tensor (module docstring). `mean`/`scale` are the
    pending affine map in the tensor's current (flat) order: at the INPUT stage the normalisation
    x_tensor = (x_graph_input - mean) / scale, at the OUTPUT stage tensor = node * scale + mean."""

    shape: tuple[int, ...]
    node: int = NETWORK_INPUT
    stage: _Stage = _Stage.INPUT
    open_layer: _OpenLayer | None = None
    pending_pad: PendingPad | None = None
    order: np.ndarray | None = None  # value i of the tensor is the node's value order[i]
    order_step: Step | None = None
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale: np.ndarray = field(default_factory=lambda: np.ones(0))
    first_output_step: Step | None = None

    def copy(self) -> _Tensor:
        return replace(self)


@dataclass(slots=True)
class GraphResult:
    """The nodes, their wiring and what the graph says about the network's edges."""

    layers: list
    wiring: list[tuple[int, ...]]
    names: list[str]  # the ONNX tensor each node's output is
    in_mean: np.ndarray | None  # the input normalisation (None: the identity)
    in_range: np.ndarray | None
    output_norm: OutputNormalisation | None
    notes: list[str]
    softmax_dropped: bool


class _GraphBuilder:
    """Turns the graph's nodes into IR nodes and normalisations; lives for one read."""

    def __init__(
        self,
        where: str,
        constants: dict[str, np.ndarray],
        input_name: str,
        shape: tuple[int, ...],
        readers: dict[str, int],
        tail: set[str],
        output_name: str,
    ) -> None:
        self.where = where
        self.constants = constants
        self.readers = readers  # how many live nodes read each tensor (the graph output counts once)
        self.tail = tail  # tensors from which only constant/shape operators lead to the output
        self.output_name = output_name
        size = math.prod(shape)
        self.tensors: dict[str, _Tensor] = {
            input_name: _Tensor(shape, mean=np.zeros(size), scale=np.ones(size))
        }
        self.layers: list = []
        self.wiring: list[tuple[int, ...]] = []
        self.names: list[str] = []
        self.in_mean: np.ndarray | None = None
        self.in_range: np.ndarray | None = None
        self.notes: list[str] = []
        self.softmax_dropped = False

    # -- helpers ---------------------------------------------------------------------------------

    def fail(self, step: Step, what: str) -> InputError:
        return InputError(f"{self.where}: {step.describe()} {what}")

    def unsupported(self, step: Step, what: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where}: {step.describe()} {what}")

    def constant(self, name: str) -> np.ndarray:
        return np.asarray(self.constants[name], dtype=np.float64)

    def inputs(self, step: Step, low: int, high: int) -> Sequence[str]:
        names = step.node.input
        if not low <= len(names) <= high:
            raise self.fail(step, f"has {len(names)} inputs, expected {low} to {high}")
        return names

    def attribute(self, step: Step, name: str, default: float) -> float:
        """A numeric attribute (int or float), or `default` when the node does not set it."""
        for attribute in step.node.attribute:
            if attribute.name == name:
                value = onnx.helper.get_attribute_value(attribute)
                if not isinstance(value, (int, float)):
                    raise self.fail(step, f"has a non-numeric attribute {name}={value!r}")
                return value
        return default

    def ints(self, step: Step, name: str, default: Sequence[int]) -> tuple[int, ...]:
        """An integer-list attribute, or `default`."""
        for attribute in step.node.attribute:
            if attribute.name == name:
                value = onnx.helper.get_attribute_value(attribute)
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
                    raise self.fail(step, f"has a malformed attribute {name}={value!r}")
                return tuple(int(v) for v in value)
        return tuple(default)

    def text(self, step: Step, name: str, default: str) -> str:
        for attribute in step.node.attribute:
            if attribute.name == name:
                value = onnx.helper.get_attribute_value(attribute)
                return value.decode() if isinstance(value, bytes) else str(value)
        return default

    def has_attribute(self, step: Step, name: str) -> bool:
        return any(attribute.name == name for attribute in step.node.attribute)

    @staticmethod
    def vector_size(tensor: _Tensor) -> int | None:
        """The feature count of a vector tensor (leading dims 1), else None."""
        if not tensor.shape or any(dim != 1 for dim in tensor.shape[:-1]):
            return None
        return tensor.shape[-1]

    def need_vector(self, step: Step, tensor: _Tensor) -> int:
        size = self.vector_size(tensor)
        if size is None:
            raise self.unsupported(
                step,
                f"needs a vector input (all dimensions but the last equal to 1), got shape {tensor.shape}",
            )
        return size

    def image(self, step: Step, tensor: _Tensor) -> tuple[int, int, int]:
        """The tensor as (channels, height, width): it must be (1, C, H, W)."""
        if len(tensor.shape) != 4 or tensor.shape[0] != 1:
            raise self.unsupported(step, f"needs an NCHW input of batch 1, got shape {tensor.shape}")
        return tensor.shape[1], tensor.shape[2], tensor.shape[3]

    def append(self, layer, producers: tuple[int, ...], name: str, step: Step | None = None) -> int:
        """A node of the IR; its index."""
        self.layers.append(layer)
        self.wiring.append(producers)
        self.names.append(name)
        return len(self.layers) - 1

    # -- pending state -----------------------------------------------------------------------------

    def close(self, tensor: _Tensor, name: str) -> None:
        """Make the tensor's open layer a node (its activation, if none came, the identity)."""
        layer = tensor.open_layer
        if layer is None:
            return
        tensor.open_layer = None
        activation = layer.activation or Activation.IDENTITY
        try:
            if layer.add is not None:
                made = Add(layer.add.shape, layer.add.count, activation)
            elif layer.conv is None:
                made = Dense(layer.weights, layer.bias, activation)
            else:
                made = Conv2D(layer.weights, layer.bias, activation, **layer.conv)
        except InputError as error:
            raise self.fail(layer.step, f"has invalid parameters: {error}") from None
        tensor.node = self.append(made, layer.producers, name)

    def register_input_normalisation(self, tensor: _Tensor, step: Step) -> None:
        """The INPUT stage's affine map becomes the network's input normalisation, in the graph
        input's order (a pending transpose has reordered it); every node reading the input must
        see the same one."""
        mean, scale = tensor.mean, tensor.scale
        if tensor.order is not None:
            inverse = np.argsort(tensor.order)
            mean, scale = mean[inverse], scale[inverse]
        if self.in_mean is None:
            self.in_mean, self.in_range = mean, scale
        elif not (np.array_equal(self.in_mean, mean) and np.array_equal(self.in_range, scale)):
            raise self.unsupported(
                step, "reads the graph input through another normalisation than an earlier node does"
            )

    def materialise(self, tensor: _Tensor, name: str, step: Step) -> int:
        """An IR node (or the input) holding exactly the tensor's values in its order, nothing left
        pending; the tensor is updated to say so."""
        if tensor.pending_pad is not None:
            raise UnsupportedError(
                f"{self.where}: ONNX node '{tensor.pending_pad.label}' (Pad) is supported only right before a "
                f"Conv, AveragePool or MaxPool (its zeros become their padding), not before {step.describe()}"
            )
        self.close(tensor, name)
        if tensor.stage is _Stage.INPUT:  # from now on the tensor is the normalised input itself
            self.register_input_normalisation(tensor, step)
            tensor.mean, tensor.scale = tensor.mean[:0], tensor.scale[:0]
        elif tensor.stage is _Stage.OUTPUT:
            tensor.node = self.affine_node(tensor, name, step, Activation.IDENTITY)
        tensor.stage = _Stage.LAYERS
        if tensor.order is not None:
            permute = Permute(tensor.order, (tensor.order.size,), self.permuted_shape(tensor))
            tensor.node = self.append(permute, (tensor.node,), name)
            tensor.order, tensor.order_step = None, None
        return tensor.node

    @staticmethod
    def permuted_shape(tensor: _Tensor) -> tuple[int, ...]:
        """The tensor's shape without its batch axis, as a node's output shape."""
        shape = tensor.shape[1:] if len(tensor.shape) > 1 and tensor.shape[0] == 1 else tensor.shape
        return tuple(shape) if len(shape) == 3 else (math.prod(tensor.shape),)

    def affine_node(self, tensor: _Tensor, name: str, step: Step, activation: Activation) -> int:
        """A pending per-element scale and shift (OUTPUT stage, not on the way to the output) as a
        depthwise 1x1 convolution: per channel on an image, per value on a vector."""
        scale, mean = tensor.scale, tensor.mean
        first = tensor.first_output_step or step
        if len(tensor.shape) == 4 and tensor.shape[0] == 1:
            channels = tensor.shape[1]
            per_channel_scale = scale.reshape(channels, -1)
            per_channel_mean = mean.reshape(channels, -1)
            if np.any(per_channel_scale != per_channel_scale[:, :1]) or np.any(
                per_channel_mean != per_channel_mean[:, :1]
            ):
                raise self.unsupported(first, "applies a constant that is not constant within each channel")
            image = (channels, tensor.shape[2], tensor.shape[3])
            weights, bias = per_channel_scale[:, 0], per_channel_mean[:, 0]
        else:
            image = (scale.size, 1, 1)
            weights, bias = scale, mean
        layer = Conv2D(weights.reshape(-1, 1, 1, 1), bias, activation, image, groups=image[0])
        node = self.append(layer, (tensor.node,), name)
        tensor.stage, tensor.mean, tensor.scale, tensor.first_output_step = (
            _Stage.LAYERS,
            mean[:0],
            scale[:0],
            None,
        )
        return node

    # -- dispatch ----------------------------------------------------------------------------------

    def feed(self, step: Step, dynamic: list[str]) -> None:
        op_type = step.node.op_type
        if step.node.domain not in ("", "ai.onnx"):
            raise self.unsupported(step, f"from domain '{step.node.domain}' is not supported")
        if op_type in ("Add", "Sum") and len(dynamic) >= 2:
            self.join_add(step, dynamic)
            return
        if op_type == "Concat":
            self.concat(step, dynamic)
            return
        if len(dynamic) != 1:
            raise self.unsupported(
                step, f"reads {len(dynamic)} dynamic tensors ({dynamic}); it is supported on one"
            )
        (name,) = dynamic
        tensor = self.tensors[name]
        if self.readers.get(name, 0) > 1:  # read elsewhere too: nothing may be folded into it
            self.materialise(tensor, name, step)
        tensor = tensor.copy()
        handlers = {
            "Pad": self.pad,
            "Transpose": self.transpose,
            "Gather": self.gather,
            "MatMul": self.matmul,
            "Gemm": self.gemm,
            "Conv": self.conv,
            "BatchNormalization": self.batch_norm,
            "MaxPool": self.pool,
            "AveragePool": self.pool,
            "GlobalAveragePool": self.pool,
            "Flatten": self.flatten,
            "Reshape": self.reshape,
            "Identity": self.passthrough,
            "Dropout": self.dropout,
            "Clip": self.clip,
            "Softmax": self.softmax,
        }
        if tensor.pending_pad is not None and op_type not in ("Pad", "Conv", "AveragePool", "MaxPool"):
            self.materialise(tensor, name, step)  # raises: a Pad must be absorbed
        if op_type in handlers:
            result = handlers[op_type](step, tensor, name)
        elif op_type in _ACTIVATIONS:
            result = self.activation(step, tensor, name, _ACTIVATIONS[op_type])
        elif op_type in _ELEMENTWISE:
            result = self.elementwise(step, tensor, name)
        else:
            raise self.unsupported(step, "is not supported")
        self.tensors[step.node.output[0]] = result

    # -- joins -------------------------------------------------------------------------------------

    def join_inputs(self, step: Step, dynamic: list[str]) -> tuple[list[int], list[_Tensor]]:
        nodes, tensors = [], []
        for name in dynamic:
            tensor = self.tensors[name]
            nodes.append(self.materialise(tensor, name, step))
            tensors.append(tensor)
        return nodes, tensors

    def join_add(self, step: Step, dynamic: list[str]) -> None:
        """A residual join: the elementwise sum of tensors of one shape (a constant operand too is
        not supported: a bias belongs to the layer before)."""
        if any(name in self.constants for name in step.node.input):
            raise self.unsupported(step, "adds a constant to a sum of tensors, which is not supported")
        nodes, tensors = self.join_inputs(step, dynamic)
        shapes = [tensor.shape for tensor in tensors]
        if len(set(shapes)) != 1:
            raise self.fail(step, f"shape mismatch: adds tensors of different shapes {shapes}")
        shape = self.permuted_shape(tensors[0])
        add = Add(shape, len(nodes))
        layer = _OpenLayer(step, np.zeros((0, 0)), np.zeros(0), False, tuple(nodes), add=add)
        self.tensors[step.node.output[0]] = _Tensor(shapes[0], stage=_Stage.LAYERS, open_layer=layer)

    def concat(self, step: Step, dynamic: list[str]) -> None:
        """Tensors one after the other along the channel axis of NCHW images (or the feature axis of
        vectors): their flat concatenation (`qverify.network.Concat`)."""
        if len(dynamic) != len(step.node.input) or not dynamic:
            raise self.unsupported(step, "concatenates constants with tensors, which is not supported")
        nodes, tensors = self.join_inputs(step, dynamic)
        if len(nodes) == 1:
            self.tensors[step.node.output[0]] = tensors[0].copy()
            return
        rank = len(tensors[0].shape)
        axis = int(self.attribute(step, "axis", 1))
        axis = axis + rank if axis < 0 else axis
        shapes = [tensor.shape for tensor in tensors]
        images = rank == 4 and all(shape[0] == 1 for shape in shapes)
        vectors = all(self.vector_size(tensor) is not None for tensor in tensors) and axis == rank - 1
        if not ((images and axis == 1) or vectors) or any(len(shape) != rank for shape in shapes):
            raise self.unsupported(
                step,
                f"concatenates along axis {axis} of shapes {shapes}; only the channel axis of NCHW "
                "images or the feature axis of vectors is supported",
            )
        try:
            join = Concat(tuple(self.permuted_shape(tensor) for tensor in tensors))
        except InputError as error:
            raise self.fail(step, str(error)) from None
        node = self.append(join, tuple(nodes), step.node.output[0])
        shape = list(shapes[0])
        shape[axis] = sum(s[axis] for s in shapes)
        self.tensors[step.node.output[0]] = _Tensor(tuple(shape), node=node, stage=_Stage.LAYERS)

    # -- layout operators --------------------------------------------------------------------------

    def pad(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        """Constant zero padding of an NCHW image, held for the next Conv or pool (onnx_layout)."""
        pads = pad_amounts(step.node, self.constants, tensor.shape, f"{self.where}: {step.describe()}")
        if tensor.pending_pad is None:
            self.materialise(tensor, name, step)
        image = (tensor.shape[1], tensor.shape[2], tensor.shape[3])
        if tensor.pending_pad is not None:  # Pad after Pad: one padding
            image, pads = tensor.pending_pad.image, tensor.pending_pad.around(pads)
        tensor.pending_pad = PendingPad(step.label, image, pads)
        tensor.shape = (1, *tensor.pending_pad.padded)
        return tensor

    def take_pad(self, tensor: _Tensor, pads: tuple[int, int, int, int]):
        """The image before a pending Pad and the pads of a layer reading the padded image with its
        own `pads` (unchanged without a pending Pad)."""
        pending, tensor.pending_pad = tensor.pending_pad, None
        if pending is None:
            return (tensor.shape[1], tensor.shape[2], tensor.shape[3]), pads
        return pending.image, pending.around(pads)

    def transpose(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        """A reordering of the values: the identity when only size-1 axes move, else held for the
        next dense layer, whose columns it permutes (onnx_layout.flat_order), or a Permute node."""
        self.inputs(step, 1, 1)
        perm = transpose_permutation(step.node, len(tensor.shape), f"{self.where}: {step.describe()}")
        order = flat_order(tensor.shape, perm)
        tensor.shape = tuple(tensor.shape[axis] for axis in perm)
        if order is None:
            return tensor
        if tensor.stage is _Stage.OUTPUT:
            self.materialise(tensor, name, step)
        self.close(tensor, name)
        if tensor.stage is _Stage.INPUT:  # the normalisation is kept in the current order
            tensor.mean, tensor.scale = tensor.mean[order], tensor.scale[order]
        tensor.order = order if tensor.order is None else tensor.order[order]
        tensor.order_step = step
        return tensor

    def gather(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        """A Gather of every value of a vector in another order (a permutation, as `qverify.io`
        writes a `Permute`): held like a Transpose's reordering."""
        names = self.inputs(step, 2, 2)
        size = self.vector_size(tensor)
        axis = int(self.attribute(step, "axis", 0))
        if names[1] not in self.constants or size is None or axis not in (-1, len(tensor.shape) - 1):
            raise self.unsupported(
                step, "is supported only as a permutation of a vector's values (constant indices, last axis)"
            )
        order = np.asarray(self.constants[names[1]]).reshape(-1).astype(np.int64)
        if order.size != size or not np.array_equal(np.sort(order), np.arange(size)):
            raise self.unsupported(step, f"gathers {order.size} values of {size} that are not a permutation")
        if tensor.stage is _Stage.OUTPUT:
            self.materialise(tensor, name, step)
        self.close(tensor, name)
        if tensor.stage is _Stage.INPUT:
            tensor.mean, tensor.scale = tensor.mean[order], tensor.scale[order]
        tensor.order = order if tensor.order is None else tensor.order[order]
        tensor.order_step = step
        return tensor

    # -- linear layers -----------------------------------------------------------------------------

    def start_layer(
        self, step: Step, tensor: _Tensor, name: str, weights: np.ndarray, shape, takes_bias: bool
    ) -> _Tensor:
        """An open dense layer reading the tensor. A pending Transpose goes into its columns (the
        value at position i of the tensor is the node's value order[i], so weight column i applies
        to node value order[i]), and an input normalisation back to the graph's order."""
        order, tensor.order, tensor.order_step = tensor.order, None, None
        if order is not None and tensor.stage is _Stage.INPUT:
            inverse = np.argsort(order)
            tensor.mean, tensor.scale = tensor.mean[inverse], tensor.scale[inverse]
        node = self.materialise(tensor, name, step)
        if order is not None:
            weights = weights[:, np.argsort(order)]
        layer = _OpenLayer(
            step, np.array(weights, dtype=np.float64), np.zeros(weights.shape[0]), takes_bias, (node,)
        )
        return _Tensor(tuple(shape), stage=_Stage.LAYERS, open_layer=layer)

    def matmul(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        left, right = self.inputs(step, 2, 2)
        if right in self.constants:
            matrix = self.constant(right)  # (n_in, n_out): X @ W
            self.check_matrix(step, tensor, matrix, self.need_vector(step, tensor), rows=True)
            shape = (*tensor.shape[:-1], matrix.shape[1])
            return self.start_layer(step, tensor, name, matrix.T, shape, takes_bias=True)
        matrix = self.constant(left)  # (n_out, n_in): W @ x, x of shape (n,) or (n, 1)
        if len(tensor.shape) == 1:
            n_in, rest = tensor.shape[0], ()
        elif len(tensor.shape) == 2 and tensor.shape[1] == 1:
            n_in, rest = tensor.shape[0], (1,)
        else:
            raise self.unsupported(step, f"W @ x needs x of shape (n,) or (n, 1), got {tensor.shape}")
        self.check_matrix(step, tensor, matrix, n_in, rows=False)
        return self.start_layer(step, tensor, name, matrix, (matrix.shape[0], *rest), takes_bias=True)

    def gemm(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        names = self.inputs(step, 2, 3)
        if names[0] in self.constants:
            raise self.unsupported(step, "with a constant first operand is not supported")
        if self.attribute(step, "transA", 0) != 0:
            raise self.unsupported(step, "with transA=1 is not supported")
        if len(tensor.shape) != 2:  # ONNX defines Gemm on matrices only (its checker rejects the rest)
            raise self.fail(
                step, f"takes a rank-{len(tensor.shape)} input {list(tensor.shape)}; Gemm needs a matrix"
            )
        matrix = self.constant(names[1])
        trans_b = self.attribute(step, "transB", 0)
        weights = matrix if trans_b else matrix.T  # (n_out, n_in)
        self.check_matrix(step, tensor, weights, self.need_vector(step, tensor), rows=False)
        n_out = weights.shape[0]
        alpha = float(self.attribute(step, "alpha", 1.0))
        beta = float(self.attribute(step, "beta", 1.0))
        has_c = len(names) == 3 and names[2] != ""
        if alpha != 1.0:
            weights = alpha * weights
        result = self.start_layer(step, tensor, name, weights, (*tensor.shape[:-1], n_out), not has_c)
        if has_c:
            bias = self.broadcast(step, self.constant(names[2]), (n_out,))
            result.open_layer.bias = beta * bias if beta != 1.0 else bias  # type: ignore[union-attr]
        return result

    def check_matrix(self, step: Step, tensor: _Tensor, matrix: np.ndarray, n_in: int, rows: bool) -> None:
        """The weight matrix is 2-D and its input side (rows of W in X@W, else columns) is n_in."""
        if matrix.ndim != 2:
            raise self.fail(step, f"has a weight tensor of shape {matrix.shape}, expected a matrix")
        side = matrix.shape[0] if rows else matrix.shape[1]
        if side != n_in:
            raise self.fail(
                step,
                f"shape mismatch: weight matrix {matrix.shape} expects {side} inputs, "
                f"but the incoming tensor has {n_in} (shape {tensor.shape})",
            )

    def geometry(self, step: Step, kernel: tuple[int, int], image: tuple[int, int, int]) -> tuple:
        """Strides and pads (top, left, bottom, right) from the attributes, auto_pad resolved."""
        strides = self.ints(step, "strides", (1, 1))
        dilations = self.ints(step, "dilations", (1, 1))
        if len(strides) != 2 or any(v < 1 for v in strides):
            raise self.fail(step, f"has strides {list(strides)}; two positive integers expected")
        if any(v != 1 for v in dilations):
            raise self.unsupported(step, f"with dilations {list(dilations)} is not supported")
        auto_pad = self.text(step, "auto_pad", "NOTSET")
        if auto_pad != "NOTSET" and self.has_attribute(step, "pads"):
            raise self.fail(
                step,
                f"has both auto_pad {auto_pad} and a pads attribute: ONNX allows one or the other "
                "(onnxruntime refuses the file)",
            )
        if auto_pad in ("NOTSET", "VALID"):
            pads = self.ints(step, "pads", (0, 0, 0, 0)) if auto_pad == "NOTSET" else (0, 0, 0, 0)
            if len(pads) != 4 or any(v < 0 for v in pads):
                raise self.fail(step, f"has pads {list(pads)}; four non-negative integers expected")
            return strides, (pads[0], pads[1], pads[2], pads[3])
        if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
            raise self.fail(step, f"has an unknown auto_pad '{auto_pad}'")
        pads = []
        for size, k, stride in zip(image[1:], kernel, strides):
            total = max((-(-size // stride) - 1) * stride + k - size, 0)
            small, large = total // 2, total - total // 2
            pads.append((small, large) if auto_pad == "SAME_UPPER" else (large, small))
        return strides, (pads[0][0], pads[1][0], pads[0][1], pads[1][1])

    def conv(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        names = self.inputs(step, 2, 3)
        if names[1] not in self.constants:
            raise self.unsupported(step, "with a non-constant kernel is not supported")
        image = self.image(step, tensor)
        kernel = self.constant(names[1])
        if kernel.ndim != 4:
            raise self.unsupported(
                step, f"has a kernel of shape {kernel.shape}; only 2-D convolutions are supported"
            )
        declared = self.ints(step, "kernel_shape", kernel.shape[2:])
        if tuple(declared) != tuple(kernel.shape[2:]):
            raise self.fail(step, f"shape mismatch: kernel_shape {list(declared)} but kernel {kernel.shape}")
        strides, pads = self.geometry(step, (kernel.shape[2], kernel.shape[3]), image)
        pending, tensor.pending_pad = tensor.pending_pad, None
        node = self.materialise(tensor, name, step)
        tensor.pending_pad = pending
        image, pads = self.take_pad(tensor, pads)
        groups = int(self.attribute(step, "group", 1))
        has_b = len(names) == 3 and names[2] != ""
        bias = self.constant(names[2]).reshape(-1) if has_b else np.zeros(kernel.shape[0])
        geometry = {"input_shape": image, "strides": strides, "pads": pads, "groups": groups}
        try:
            probe = Conv2D(kernel, bias, Activation.IDENTITY, **geometry)
        except InputError as error:
            raise self.fail(step, f"has invalid parameters: {error}") from None
        layer = _OpenLayer(step, kernel, bias, not has_b, (node,), conv=geometry)
        return _Tensor((1, *probe.output_shape), stage=_Stage.LAYERS, open_layer=layer)

    # -- what follows a layer ----------------------------------------------------------------------

    def foldable(self, tensor: _Tensor) -> _OpenLayer | None:
        """The open linear layer a bias, BatchNormalization or activation may fold into."""
        layer = tensor.open_layer
        if layer is None or layer.activation is not None:
            return None
        return layer

    def batch_norm(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        """Inference-mode BatchNormalization: folded into the open Conv, Gemm or MatMul before it,
        else a per-channel scale and shift of its own (a depthwise 1x1 convolution)."""
        names = self.inputs(step, 5, 5)
        if any(n not in self.constants for n in names[1:]):
            raise self.unsupported(step, "with non-constant parameters is not supported")
        if int(self.attribute(step, "training_mode", 0)):
            raise self.unsupported(step, "in training mode is not supported")
        epsilon = float(self.attribute(step, "epsilon", 1e-5))
        scale, shift, mean, variance = (self.constant(n).reshape(-1) for n in names[1:])
        if np.any(variance + epsilon <= 0):
            raise self.fail(step, "has a non-positive variance + epsilon")
        factor = scale / np.sqrt(variance + epsilon)
        layer = self.foldable(tensor)
        if layer is not None and layer.add is None:
            channels = layer.weights.shape[0]
            if not all(v.size == channels for v in (scale, shift, mean, variance)):
                raise self.fail(
                    step, f"shape mismatch: parameters for {scale.size} channels, the layer has {channels}"
                )
            layer.weights = layer.weights * factor.reshape((-1,) + (1,) * (layer.weights.ndim - 1))
            layer.bias = (layer.bias - mean) * factor + shift
            layer.takes_bias = False
            return tensor
        channels = self.channels(step, tensor)
        if not all(v.size == channels for v in (scale, shift, mean, variance)):
            raise self.fail(
                step, f"shape mismatch: parameters for {scale.size} channels, the input has {channels}"
            )
        return self.scale_shift(step, tensor, name, factor, shift - mean * factor)

    def channels(self, step: Step, tensor: _Tensor) -> int:
        if len(tensor.shape) == 4 and tensor.shape[0] == 1:
            return tensor.shape[1]
        size = self.vector_size(tensor)
        if size is None:
            raise self.unsupported(step, f"needs an NCHW image or a vector, got shape {tensor.shape}")
        return size

    def scale_shift(
        self, step: Step, tensor: _Tensor, name: str, scale: np.ndarray, shift: np.ndarray
    ) -> _Tensor:
        """x * scale + shift per channel, a node of its own (a depthwise 1x1 convolution) whose
        activation may follow."""
        node = self.materialise(tensor, name, step)
        channels = scale.size
        if len(tensor.shape) == 4:
            image = (channels, tensor.shape[2], tensor.shape[3])
        else:
            image = (channels, 1, 1)
        geometry = {"input_shape": image, "strides": (1, 1), "pads": (0, 0, 0, 0), "groups": channels}
        layer = _OpenLayer(step, scale.reshape(-1, 1, 1, 1), shift.copy(), False, (node,), conv=geometry)
        return _Tensor(tensor.shape, stage=_Stage.LAYERS, open_layer=layer)

    def clip(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        """Clip(0, 6) is ReLU6 (opset 11+: bounds as constant inputs; opset 6: attributes); any other
        bounds are refused, naming them."""
        names = self.inputs(step, 1, 3)
        bounds = []
        for index, (key, default) in enumerate((("min", -np.inf), ("max", np.inf)), start=1):
            if index < len(names) and names[index]:
                if names[index] not in self.constants:
                    raise self.unsupported(step, f"has a non-constant {key} bound '{names[index]}'")
                value = self.constant(names[index]).reshape(-1)
                if value.size != 1:
                    raise self.fail(step, f"has a {key} bound of {value.size} values (one expected)")
                bounds.append(float(value[0]))
            else:
                bounds.append(float(self.attribute(step, key, default)))
        if bounds != [0.0, 6.0]:
            raise self.unsupported(
                step, f"clips to [{bounds[0]:g}, {bounds[1]:g}]; only Clip(0, 6) (ReLU6) is supported"
            )
        return self.activation(step, tensor, name, Activation.RELU6, max_inputs=3)

    def activation(
        self, step: Step, tensor: _Tensor, name: str, activation: Activation, max_inputs: int = 1
    ) -> _Tensor:
        """The activation of the open layer or join before it; after a max pool of an identity
        layer, moved before the pool (they commute); else an activation node of its own."""
        self.inputs(step, 1, max_inputs)
        layer = self.foldable(tensor)
        if layer is not None:
            layer.activation = activation
            self.close(tensor, step.node.output[0])
            return tensor
        if (
            activation is Activation.RELU
            and tensor.open_layer is None
            and self.relu_through_max_pool(tensor, name)
        ):
            return tensor
        node = self.materialise(tensor, name, step)
        shape = self.permuted_shape(tensor)
        made = self.append(Add(shape, 1, activation), (node,), step.node.output[0])
        return _Tensor(tensor.shape, node=made, stage=_Stage.LAYERS)

    def relu_through_max_pool(self, tensor: _Tensor, name: str) -> bool:
        """Layer -> MaxPool -> Relu is Layer -> Relu -> MaxPool (ReLU and max commute) when the
        layer's identity output is read by the pool alone: move it."""
        if tensor.stage is not _Stage.LAYERS or tensor.order is not None or tensor.node < 0:
            return False
        pool = tensor.node
        if not isinstance(self.layers[pool], MaxPool2D) or self.readers.get(name, 0) != 1:
            return False
        (before,) = self.wiring[pool]
        if before < 0 or not isinstance(self.layers[before], (Conv2D, Dense)):
            return False
        if self.layers[before].activation is not Activation.IDENTITY:
            return False
        if sum(before in producers for producers in self.wiring) != 1:
            return False
        previous = self.layers[before]
        if isinstance(previous, Conv2D):
            moved = Conv2D(
                previous.weights,
                previous.bias,
                Activation.RELU,
                previous.input_shape,
                previous.strides,
                previous.pads,
                previous.groups,
            )
        else:
            moved = Dense(previous.weights, previous.bias, Activation.RELU)
        self.layers[before] = moved
        return True

    def softmax(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        """A final Softmax (module docstring): dropped on the way to the graph's output."""
        self.inputs(step, 1, 1)
        output = step.node.output[0]
        size = self.vector_size(tensor)
        axis = int(self.attribute(step, "axis", -1))
        if output not in self.tail or size is None or axis not in (-1, len(tensor.shape) - 1):
            raise self.unsupported(
                step,
                "is supported only as the last operator of the graph, over the output vector "
                "(it is dropped: monotone, it keeps the order of the outputs)",
            )
        self.softmax_dropped = True
        self.notes.append(
            f"{step.describe()} at the output is dropped: the property is stated over its input (the "
            "logits), which Softmax maps monotonically (every Y_i - Y_j comparison keeps its truth)"
        )
        return tensor

    # -- pools ---------------------------------------------------------------------------------------

    def pool(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        self.inputs(step, 1, 1)
        image = self.image(step, tensor)
        op_type = step.node.op_type
        if op_type == "GlobalAveragePool":
            kernel, strides, pads = (image[1], image[2]), (1, 1), (0, 0, 0, 0)
        else:
            kernel = self.ints(step, "kernel_shape", ())
            if len(kernel) != 2:
                raise self.fail(step, f"has kernel_shape {list(kernel)}; two sizes expected")
            strides, pads = self.geometry(step, (kernel[0], kernel[1]), image)
            if int(self.attribute(step, "ceil_mode", 0)):
                raise self.unsupported(step, "with ceil_mode=1 is not supported")
            if op_type == "MaxPool" and (len(step.node.output) > 1 and step.node.output[1]):
                raise self.unsupported(step, "with an Indices output is not supported")
        include = bool(self.attribute(step, "count_include_pad", 0))
        pending, tensor.pending_pad = tensor.pending_pad, None
        node = self.materialise(tensor, name, step)
        tensor.pending_pad = pending
        if pending is not None:
            include = self.absorb_pad_into_pool(step, node, pending.label, pads, include)
        image, pads = self.take_pad(tensor, pads)
        try:
            if op_type == "MaxPool":
                layer = MaxPool2D(image, kernel, strides, pads)
            else:
                layer = AveragePool2D(image, kernel, strides, pads, include)
        except InputError as error:
            raise self.fail(step, f"has invalid parameters: {error}") from None
        made = self.append(layer, (node,), step.node.output[0])
        return _Tensor((1, *layer.output_shape), node=made, stage=_Stage.LAYERS)

    def absorb_pad_into_pool(
        self, step: Step, node: int, label: str, own_pads: tuple[int, ...], include: bool
    ) -> bool:
        """Can the pool take the pending Pad's zeros as its padding? Returns its count_include_pad.

        Average: the zeros are counted in every window, which is `count_include_pad` when the pool
        has no pads of its own or counts those too; a pool with its own uncounted pads would count
        the Pad's zeros but not its own padding, which the IR cannot state. Max: a zero changes no
        window maximum of non-negative values (the output of a ReLU).
        """
        if step.node.op_type == "MaxPool":
            before = self.layers[node] if node >= 0 else None
            if before is None or before.activation is not Activation.RELU:
                raise self.unsupported(
                    step,
                    f"after the zero padding of '{label}' is supported only on the output of a ReLU "
                    "(where a zero never changes the maximum)",
                )
            return False
        if any(own_pads) and not include:
            raise self.unsupported(
                step,
                f"with pads of its own and count_include_pad=0 after the zero padding of '{label}' is not "
                "supported (it would count the Pad's zeros but not its own padding)",
            )
        return True

    # -- shape-only operators ----------------------------------------------------------------------

    def passthrough(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        self.inputs(step, 1, 1)
        return tensor

    def dropout(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        names = self.inputs(step, 1, 3)
        if len(names) == 3 and names[2] and bool(np.any(self.constants[names[2]])):
            raise self.unsupported(step, "in training mode is not supported")
        return tensor

    def flatten(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        self.inputs(step, 1, 1)
        rank = len(tensor.shape)
        axis = int(self.attribute(step, "axis", 1))
        if axis < 0:
            axis += rank
        if not 0 <= axis <= rank:
            raise self.fail(step, f"has axis {axis} outside 0..{rank} for shape {tensor.shape}")
        tensor.shape = (math.prod(tensor.shape[:axis]), math.prod(tensor.shape[axis:]))
        return tensor

    def reshape(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        _, shape_name = self.inputs(step, 2, 2)
        if shape_name not in self.constants:
            raise self.unsupported(step, f"with a non-constant shape '{shape_name}' is not supported")
        requested = [int(dim) for dim in np.asarray(self.constants[shape_name]).reshape(-1)]
        allow_zero = int(self.attribute(step, "allowzero", 0))
        dims = [
            tensor.shape[i] if dim == 0 and not allow_zero and i < len(tensor.shape) else dim
            for i, dim in enumerate(requested)
        ]
        size = math.prod(tensor.shape)
        known = math.prod(dim for dim in dims if dim != -1)
        if dims.count(-1) == 1 and known > 0 and size % known == 0:
            dims = [size // known if dim == -1 else dim for dim in dims]
        if any(dim < 0 for dim in dims) or math.prod(dims) != size:
            raise self.fail(step, f"shape mismatch: cannot reshape {tensor.shape} to {tuple(requested)}")
        tensor.shape = tuple(dims)
        return tensor

    # -- constant elementwise operators ------------------------------------------------------------

    def broadcast(self, step: Step, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """`value` broadcast against a tensor of `shape`, flat; the tensor's size must not change."""
        try:
            joint = np.broadcast_shapes(shape, value.shape)
        except ValueError:
            joint = None
        if joint is None or math.prod(joint) != math.prod(shape):
            raise self.fail(
                step,
                f"shape mismatch: constant of shape {value.shape} does not fit a tensor of shape {shape}",
            )
        return np.broadcast_to(value, joint).reshape(-1).copy()

    def elementwise(self, step: Step, tensor: _Tensor, name: str) -> _Tensor:
        left, right = self.inputs(step, 2, 2)
        constant_first = left in self.constants
        if not constant_first and right not in self.constants:
            raise self.unsupported(step, "on two tensors is not supported")
        value = self.constant(left if constant_first else right)
        if constant_first and step.node.op_type == "Div":
            raise self.unsupported(step, "divides a constant by the input, which is not affine")
        flat = self.broadcast(step, value, tensor.shape)
        tensor.shape = tuple(np.broadcast_shapes(tensor.shape, value.shape))
        op_type = step.node.op_type
        output = step.node.output[0]
        if tensor.stage is _Stage.INPUT and tensor.open_layer is None:
            self.fold_input(step, tensor, flat, constant_first)
            return tensor
        layer = tensor.open_layer
        if layer is not None and layer.add is None and layer.takes_bias and op_type == "Add":
            layer.bias = layer.bias + self.per_channel(step, layer, flat)
            layer.takes_bias = False
            return tensor
        if output not in self.tail and self.foldable(tensor) is not None and tensor.open_layer.add is None:  # type: ignore[union-attr]
            self.fold_into_layer(step, tensor.open_layer, flat, constant_first)  # type: ignore[arg-type]
            return tensor
        self.close(tensor, name)
        if tensor.stage is not _Stage.OUTPUT:
            tensor.stage, tensor.first_output_step = _Stage.OUTPUT, step
            tensor.mean, tensor.scale = np.zeros(flat.size), np.ones(flat.size)
        self.fold_output(step, tensor, flat, constant_first)
        return tensor

    def per_channel(self, step: Step, layer: _OpenLayer, flat: np.ndarray) -> np.ndarray:
        """A constant applied to a layer's output: per neuron (dense) or per output channel
        (convolution)."""
        if layer.conv is None:
            return flat
        channels = flat.reshape(layer.weights.shape[0], -1)
        if np.any(channels != channels[:, :1]):
            raise self.unsupported(step, "applies a constant that is not constant within each output channel")
        return channels[:, 0]

    def fold_into_layer(self, step: Step, layer: _OpenLayer, flat: np.ndarray, constant_first: bool) -> None:
        """y = W x + b followed by a constant: y + k, y - k, k - y, y * k, y / k as W', b'."""
        k = self.per_channel(step, layer, flat)
        shape = (-1,) + (1,) * (layer.weights.ndim - 1)
        op_type = step.node.op_type
        if op_type == "Add":
            layer.bias = layer.bias + k
        elif op_type == "Sub":
            if constant_first:
                layer.weights, layer.bias = -layer.weights, k - layer.bias
            else:
                layer.bias = layer.bias - k
        elif op_type == "Mul":
            layer.weights, layer.bias = layer.weights * k.reshape(shape), layer.bias * k
        else:
            if np.any(k == 0):
                raise self.fail(step, "divides by zero")
            layer.weights, layer.bias = layer.weights / k.reshape(shape), layer.bias / k
        layer.takes_bias = False

    def fold_input(self, step: Step, tensor: _Tensor, k: np.ndarray, constant_first: bool) -> None:
        """Compose f(x) = (x - m) / r with one operator, keeping the (m, r) form exact for Sub, Div."""
        op_type, m, r = step.node.op_type, tensor.mean, tensor.scale
        if op_type in ("Mul", "Div") and np.any(k == 0):
            raise self.fail(step, "scales the input by zero")
        if op_type == "Sub":  # f - k = (x - (m + k r)) / r;  k - f = (x - (m + k r)) / -r
            m, r = m + k * r, (-r if constant_first else r)
        elif op_type == "Add":  # f + k = (x - (m - k r)) / r
            m = m - k * r
        elif op_type == "Mul":  # f * k = (x - m) / (r / k)
            r = r / k
        else:  # f / k = (x - m) / (r k)
            r = r * k
        if not (np.all(np.isfinite(m)) and np.all(np.isfinite(r)) and np.all(r != 0)):
            raise self.fail(step, "makes the input normalisation non-finite or zero")
        tensor.mean, tensor.scale = m, r

    def fold_output(self, step: Step, tensor: _Tensor, k: np.ndarray, constant_first: bool) -> None:
        """Compose g(y) = y R + M with one operator."""
        op_type, mean, scale = step.node.op_type, tensor.mean, tensor.scale
        if op_type == "Add":
            mean = mean + k
        elif op_type == "Sub":  # g - k, or k - g = y (-R) + (k - M)
            mean, scale = (k - mean, -scale) if constant_first else (mean - k, scale)
        elif op_type == "Mul":
            mean, scale = mean * k, scale * k
        else:
            if np.any(k == 0):
                raise self.fail(step, "divides the output by zero")
            mean, scale = mean / k, scale / k
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(scale)) and np.all(scale != 0)):
            raise self.fail(step, "makes the output normalisation non-finite or zero")
        tensor.mean, tensor.scale = mean, scale

    # -- result ------------------------------------------------------------------------------------

    def finish(self) -> GraphResult:
        tensor = self.tensors[self.output_name]
        if tensor.pending_pad is not None:
            raise UnsupportedError(
                f"{self.where}: ONNX node '{tensor.pending_pad.label}' (Pad) pads the graph's output, "
                "which is not supported"
            )
        norm = None
        if tensor.stage is _Stage.OUTPUT:  # the output normalisation, in the tensor's order
            mean, scale = tensor.mean, tensor.scale
            tensor.stage = _Stage.LAYERS
            if not (np.all(mean == 0) and np.all(scale == 1)):
                norm = OutputNormalisation(mean, scale)
        if tensor.stage is _Stage.INPUT and tensor.open_layer is None:
            raise InputError(f"{self.where}: ONNX graph has no linear layer (MatMul, Gemm or Conv)")
        self.materialise(tensor, self.output_name, Step(onnx.NodeProto(), "graph output"))
        if tensor.node != len(self.layers) - 1:  # (every live node leads to the output)
            raise InputError(f"{self.where}: the graph's output is not computed by its last node")
        in_mean, in_range = self.in_mean, self.in_range
        if in_mean is not None and np.all(in_mean == 0) and np.all(in_range == 1):
            in_mean = in_range = None
        return GraphResult(
            self.layers, self.wiring, self.names, in_mean, in_range, norm, self.notes, self.softmax_dropped
        )
