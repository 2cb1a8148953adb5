"""Read a sequential float ONNX graph into a `Network` (using the `onnx` package only).

What is understood, in graph order (one dynamic tensor flows from the single graph input to the single
graph output; constants are initializers or `Constant` nodes):

    [Sub|Div|Add|Mul with a constant]*        -> input normalisation x_norm = (x - mean) / range
    ( MatMul [Add bias] | Gemm | Conv [Add bias] ) [BatchNormalization] [Relu|Sigmoid|Tanh]
                                              one `Dense` / `Conv2D` per linear node, repeated;
    MaxPool | AveragePool | GlobalAveragePool   a pooling layer (2-D, NCHW, batch 1)
    [Sub|Div|Add|Mul with a constant]*        -> output normalisation y = y_norm * range + mean

BatchNormalization (inference mode) is folded into the layer before it; a Relu right after a
MaxPool that follows a linear layer without activation moves before the pool (they commute).
Quantized graphs (QuantizeLinear/DequantizeLinear, QLinearConv, ...) are read by
`qverify.io.onnx_quant`, which `read_onnx` hands them to.

Flatten, Reshape, Identity and inference-mode Dropout may appear anywhere: they change the tensor's
shape, never the row-major order of its values. Two layout operators are folded into the layer
after them (`qverify.io.onnx_layout`): a constant zero `Pad` right before a Conv (its padding), an
AveragePool (`count_include_pad`: PyTorch's export of `AvgPool2d(padding=p)`) or a MaxPool of ReLU
outputs; a `Transpose` that reorders values (NHWC flattening) into the columns of the next dense
layer, with only shape operators between. Shape computations on the dynamic tensor (PyTorch's
`x.view(x.size(0), -1)`: Shape, Gather, Unsqueeze, Concat into a Reshape) are folded into
constants first (`qverify.io.onnx_static`). A linear layer needs its input to be a vector (all
dimensions but the feature one equal to 1). `MatMul(X, W)` takes W as (n_in, n_out) (VNN-COMP files),
`MatMul(W, X)` takes W as (n_out, n_in) (sisl's TestNetwork2.onnx). Anything else raises
`UnsupportedError` naming the node; broken files raise `InputError` naming the file and node.
Weights become float64 exactly (float32 files included). An input with two or more non-unit
dimensions (e.g. [1, 1, 28, 28]) sets `Network.image_shape` (the shape without the batch dimension).

Input clip bounds have no ONNX operator; `qverify.io.onnx_writer` stores them in the model's
`metadata_props` under `METADATA_INPUT_MIN`/`METADATA_INPUT_MAX` and this reader restores them.
Identity normalisations are read as `None`, as in `qverify.io.nnet` (change both together).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from qverify.errors import InputError, UnsupportedError
from qverify.input_limits import check_file, check_tensor
from qverify.io.files import file_stem, read_bytes
from qverify.io.onnx_layout import PendingPad, flat_order, pad_amounts, transpose_permutation
from qverify.io.onnx_quant import fold_dequantized_constants, is_quantized, read_quantized
from qverify.io.onnx_static import fold_shape_computations
from qverify.network.model import (
    Activation,
    Dense,
    InputNormalisation,
    Network,
    OutputNormalisation,
)
from qverify.network.spatial import AveragePool2D, Conv2D, MaxPool2D

__all__ = [
    "METADATA_INPUT_MAX",
    "METADATA_INPUT_MIN",
    "decode_bounds",
    "encode_bounds",
    "load_model",
    "read_onnx",
]

# Keys of `ModelProto.metadata_props` holding the input clip bounds as JSON lists; non-finite entries
# are the strings "inf"/"-inf" (strict JSON has no infinity). Written by qverify.io.onnx_writer.
METADATA_INPUT_MIN = "qverify.input_min"
METADATA_INPUT_MAX = "qverify.input_max"

_ACTIVATIONS = {
    "Relu": Activation.RELU,
    "Sigmoid": Activation.SIGMOID,
    "Tanh": Activation.TANH,
}
_ELEMENTWISE = ("Add", "Sub", "Mul", "Div")


def encode_bounds(values: np.ndarray) -> str:
    """A JSON list of floats (repr-exact), with "inf"/"-inf" for infinite entries."""
    items = [value if math.isfinite(value) else repr(value) for value in np.asarray(values).tolist()]
    return json.dumps(items)


def decode_bounds(text: str, size: int, what: str) -> np.ndarray:
    """The inverse of `encode_bounds`; raises InputError (mentioning `what`) on anything else."""
    try:
        items = json.loads(text)
        values = np.array([float(item) for item in items], dtype=np.float64)
    except (ValueError, TypeError):
        raise InputError(f"{what} is not a JSON list of numbers: {text[:80]!r}") from None
    if values.shape != (size,) or np.any(np.isnan(values)):
        raise InputError(f"{what} should hold {size} numbers, got {text[:80]!r}")
    return values


@dataclass(frozen=True, slots=True)
class _Step:
    """A non-Constant node of the chain, with the label used in messages."""

    node: onnx.NodeProto
    label: str

    def describe(self) -> str:
        return f"ONNX node '{self.label}' ({self.node.op_type})"


def _label(index: int, node: onnx.NodeProto) -> str:
    return node.name or f"#{index} {node.op_type}"


def load_model(path: str | Path) -> onnx.ModelProto:
    """The ONNX model of a `.onnx` or `.onnx.gz` file, checked to be one (a graph, a known opset).

    :raises InputError / UnsupportedError: naming the file and what is wrong.
    """
    check_file(path)
    try:
        model = onnx.load_model_from_string(read_bytes(path))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except DecodeError:
        raise InputError(f"{path}: not an ONNX model (protobuf decoding failed)") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    except (onnx.checker.ValidationError, ValueError) as error:  # e.g. broken external-data fields
        raise InputError(f"{path}: not a valid ONNX model: {error!s}") from None
    if not model.HasField("graph"):
        raise InputError(f"{path}: not an ONNX model (no graph)")
    _check_opset(model, path)
    return model


def _check_opset(model: onnx.ModelProto, path: str | Path) -> None:
    """An operator's meaning comes from its opset: one newer than the installed onnx package
    defines is refused (opset 99 was read as if its Gemm were today's)."""
    newest = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > newest:
            raise UnsupportedError(
                f"{path}: ONNX opset {entry.version} is newer than the {newest} this onnx package defines: "
                f"its operators' meaning is unknown (export the model with opset {newest} or older)"
            )


def _tensor_to_array(tensor: onnx.TensorProto, where: str) -> np.ndarray:
    try:
        return np.array(numpy_helper.to_array(tensor))
    except (ValueError, TypeError, KeyError, OSError, onnx.checker.ValidationError) as error:
        # KeyError: an unknown data type code; ValidationError: broken external-data fields
        raise InputError(f"{where}: cannot decode tensor '{tensor.name}': {error!s}") from None


def _constant_node_value(index: int, node: onnx.NodeProto, where: str) -> np.ndarray:
    """The value of a `Constant` node (attribute value, value_float(s) or value_int(s))."""
    for attribute in node.attribute:
        if attribute.name == "value":
            return _tensor_to_array(attribute.t, where)
        if attribute.name in ("value_float", "value_floats", "value_int", "value_ints"):
            return np.array(onnx.helper.get_attribute_value(attribute))
    raise UnsupportedError(
        f"{where}: ONNX node '{_label(index, node)}' (Constant) has no numeric value attribute"
    )


def _constants(graph: onnx.GraphProto, where: str) -> dict[str, np.ndarray]:
    """Every tensor whose value is known before the input arrives: initializers and Constant nodes."""
    values = {tensor.name: _tensor_to_array(tensor, where) for tensor in graph.initializer}
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.output:
            values[node.output[0]] = _constant_node_value(index, node, where)
    return values


def _graph_input(graph: onnx.GraphProto, where: str) -> onnx.ValueInfoProto:
    """The one graph input that is not an initializer (old IR versions list initializers as inputs)."""
    initialised = {tensor.name for tensor in graph.initializer}
    inputs = [value for value in graph.input if value.name not in initialised]
    if not inputs:
        raise InputError(f"{where}: ONNX graph has no input")
    if len(inputs) > 1:
        names = ", ".join(f"'{value.name}'" for value in inputs)
        raise UnsupportedError(
            f"{where}: ONNX graph has {len(inputs)} inputs ({names}); only one is supported"
        )
    if len(graph.output) != 1:
        names = ", ".join(f"'{value.name}'" for value in graph.output)
        raise UnsupportedError(
            f"{where}: ONNX graph has {len(graph.output)} outputs ({names}); exactly one is supported"
        )
    elem_type = inputs[0].type.tensor_type.elem_type
    if elem_type not in _FLOAT_INPUTS:
        type_name = (
            onnx.TensorProto.DataType.Name(elem_type)
            if elem_type in onnx.TensorProto.DataType.values()
            else elem_type
        )
        raise InputError(
            f"{where}: graph input '{inputs[0].name}' has element type {type_name}; qverify reads networks "
            "whose input is a real-valued tensor (float, double, float16)"
        )
    return inputs[0]


_FLOAT_INPUTS = {
    onnx.TensorProto.UNDEFINED,  # hand-built graphs without a declared type: the operators decide
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16,
}


def _check_names(graph: onnx.GraphProto, where: str) -> None:
    """Every tensor name defined once: a node output that repeats a graph input, an initializer or an
    earlier node's output (`Relu c -> c`) is refused, as onnxruntime refuses it ("Duplicate definition
    of name"); read as a chain it would silently mean something else."""
    defined = {value.name: "a graph input" for value in graph.input}
    defined.update((tensor.name, "an initializer") for tensor in graph.initializer)
    for index, node in enumerate(graph.node):
        for name in node.output:
            if not name:
                continue
            if name in defined:
                raise InputError(
                    f"{where}: ONNX node '{_label(index, node)}' ({node.op_type}) defines '{name}', "
                    f"already defined by {defined[name]}: every tensor name must be defined once"
                )
            defined[name] = f"node '{_label(index, node)}'"


def _chain(graph: onnx.GraphProto, start: str, constants: dict[str, np.ndarray], where: str) -> list[_Step]:
    """The non-Constant nodes, checked to form one chain from the graph input to the graph output."""
    produced = {start} | {name for node in graph.node for name in node.output}
    current = start
    steps = []
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            continue
        if node.output and all(
            name in constants for name in node.output
        ):  # folded (DequantizeLinear of weights)
            continue
        step = _Step(node, _label(index, node))
        dynamic = [name for name in node.input if name and name not in constants]
        for name in dynamic:
            if name not in produced:
                raise InputError(
                    f"{where}: {step.describe()} reads '{name}', which is neither an initializer, "
                    "a Constant nor a node output (missing initializer?)"
                )
        if dynamic != [current] or not node.output:
            raise UnsupportedError(
                f"{where}: {step.describe()} is not part of a sequential chain: its dynamic inputs are "
                f"{dynamic}, expected only '{current}' (the previous node's output)"
            )
        steps.append(step)
        current = node.output[0]
    if not steps:
        raise InputError(f"{where}: ONNX graph has no nodes")
    if graph.output[0].name != current:
        raise UnsupportedError(
            f"{where}: graph output '{graph.output[0].name}' is not the output of the last node "
            f"{steps[-1].describe()}; only sequential graphs are supported"
        )
    return steps


def _static_shape(value: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    """The declared shape; a symbolic or unknown first (batch) dimension counts as 1.

    :returns: None if no shape is declared or a later dimension is unknown.
    """
    tensor_type = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    dims = []
    for position, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            dims.append(int(dim.dim_value))
        elif position == 0:
            dims.append(1)
        else:
            return None
    return tuple(dims)


def _image_shape(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The input's shape without its batch dimension, if it has two or more non-unit dimensions."""
    if sum(1 for dim in shape if dim > 1) < 2:
        return None
    return shape[1:] if len(shape) >= 3 and shape[0] == 1 else shape


class _Stage(enum.Enum):
    """Where the chain is: which normalisation a constant elementwise operator folds into."""

    INPUT = "before the first linear layer"
    LAYERS = "between linear layers"
    OUTPUT = "after the last linear layer"


@dataclass(slots=True)
class _OpenLayer:
    """A linear layer whose bias `Add`, BatchNormalization and activation may still follow.

    Dense: `weights` (n_out, n_in). Convolution: `weights` (out_channels, in/groups, kh, kw) and the
    geometry in `conv` (keyword arguments of `Conv2D`); `bias` has one entry per output channel.
    """

    step: _Step
    weights: np.ndarray
    bias: np.ndarray
    takes_bias: bool
    activation: Activation | None = None
    conv: dict | None = None


@dataclass(slots=True)
class _Builder:
    """Turns the chain into layers and normalisations; lives for one `read_onnx` call.

    The affine state is kept flat, in row-major order of the current tensor, so that Flatten and
    Reshape never touch it: input side x_norm = (x - in_mean) / in_range, output side
    y = y_core * out_range + out_mean.
    """

    where: str
    constants: dict[str, np.ndarray]
    shape: tuple[int, ...]
    stage: _Stage = _Stage.INPUT
    in_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    in_range: np.ndarray = field(default_factory=lambda: np.ones(0))
    out_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    out_range: np.ndarray = field(default_factory=lambda: np.ones(0))
    layers: list[Dense | Conv2D | MaxPool2D | AveragePool2D] = field(default_factory=list)
    open_layer: _OpenLayer | None = None
    first_output_step: _Step | None = None
    pending_pad: PendingPad | None = None  # a Pad the next Conv or pool absorbs
    order: np.ndarray | None = None  # a Transpose's reordering the next dense layer absorbs
    order_step: _Step | None = None

    def __post_init__(self) -> None:
        size = math.prod(self.shape)
        self.in_mean, self.in_range = np.zeros(size), np.ones(size)

    # -- helpers ---------------------------------------------------------------------------------

    def fail(self, step: _Step, what: str) -> InputError:
        return InputError(f"{self.where}: {step.describe()} {what}")

    def unsupported(self, step: _Step, what: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where}: {step.describe()} {what}")

    def constant(self, step: _Step, name: str) -> np.ndarray:
        return np.asarray(self.constants[name], dtype=np.float64)

    def inputs(self, step: _Step, low: int, high: int) -> Sequence[str]:
        names = step.node.input
        if not low <= len(names) <= high:
            raise self.fail(step, f"has {len(names)} inputs, expected {low} to {high}")
        return names

    def attribute(self, step: _Step, name: str, default: float) -> float:
        """A numeric attribute (int or float), or `default` when the node does not set it."""
        for attribute in step.node.attribute:
            if attribute.name == name:
                value = onnx.helper.get_attribute_value(attribute)
                if not isinstance(value, (int, float)):
                    raise self.fail(step, f"has a non-numeric attribute {name}={value!r}")
                return value
        return default

    def vector_size(self, step: _Step) -> int:
        """The feature count of the current tensor, which must be a vector (leading dims 1)."""
        if not self.shape or any(dim != 1 for dim in self.shape[:-1]):
            raise self.unsupported(
                step, f"needs a vector input (all dimensions but the last equal to 1), got shape {self.shape}"
            )
        return self.shape[-1]

    # -- dispatch ----------------------------------------------------------------------------------

    def feed(self, step: _Step) -> None:
        op_type = step.node.op_type
        if step.node.domain not in ("", "ai.onnx"):
            raise self.unsupported(step, f"from domain '{step.node.domain}' is not supported")
        self.check_pending(step)
        handlers = {
            "Pad": self.pad,
            "Transpose": self.transpose,
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
        }
        if op_type in handlers:
            handlers[op_type](step)
        elif op_type in _ACTIVATIONS:
            self.activation(step, _ACTIVATIONS[op_type])
        elif op_type in _ELEMENTWISE:
            self.elementwise(step)
        else:
            raise self.unsupported(step, "is not supported")

    def check_pending(self, step: _Step) -> None:
        """A Pad must be absorbed by the very next node (a Conv or a pool reading the padded image),
        a Transpose by the next dense layer, with only shape operators between."""
        op_type = step.node.op_type
        if self.pending_pad is not None and op_type not in ("Pad", "Conv", "AveragePool", "MaxPool"):
            raise UnsupportedError(
                f"{self.where}: ONNX node '{self.pending_pad.label}' (Pad) is supported only right before a "
                f"Conv, AveragePool or MaxPool (its zeros become their padding), not before {step.describe()}"
            )
        passing = ("Transpose", "Flatten", "Reshape", "Identity", "Dropout", "MatMul", "Gemm")
        if (
            self.order is not None
            and op_type not in passing
            and not (self.stage is _Stage.INPUT and op_type in _ELEMENTWISE)
        ):
            raise self.unsupported(
                self.order_step,  # type: ignore[arg-type]
                f"reorders values; it is supported only before a dense layer (MatMul or Gemm, "
                f"with Flatten or Reshape between), not before {step.describe()}",
            )

    def pad(self, step: _Step) -> None:
        """Constant zero padding of an NCHW image, held for the next Conv or pool (onnx_layout)."""
        pads = pad_amounts(step.node, self.constants, self.shape, f"{self.where}: {step.describe()}")
        if self.stage is _Stage.OUTPUT:
            raise self.unsupported(step, "follows an output normalisation")
        self.close_layer()
        image = (self.shape[1], self.shape[2], self.shape[3])
        if self.pending_pad is not None:  # Pad after Pad: one padding
            image, pads = self.pending_pad.image, self.pending_pad.around(pads)
        self.pending_pad = PendingPad(step.label, image, pads)
        self.shape = (1, *self.pending_pad.padded)

    def take_pad(
        self, pads: tuple[int, int, int, int]
    ) -> tuple[tuple[int, int, int], tuple[int, int, int, int]]:
        """The image before a pending Pad and the pads of a layer reading the padded image with its
        own `pads` (unchanged without a pending Pad)."""
        pending, self.pending_pad = self.pending_pad, None
        if pending is None:
            return (self.shape[1], self.shape[2], self.shape[3]), pads
        return pending.image, pending.around(pads)

    def transpose(self, step: _Step) -> None:
        """A reordering of the values: the identity when only size-1 axes move, else held for the
        next dense layer, whose columns it permutes (onnx_layout.flat_order)."""
        self.inputs(step, 1, 1)
        perm = transpose_permutation(step.node, len(self.shape), f"{self.where}: {step.describe()}")
        order = flat_order(self.shape, perm)
        self.shape = tuple(self.shape[axis] for axis in perm)
        if order is None:
            return
        if self.stage is _Stage.OUTPUT:
            raise self.unsupported(step, "reorders the outputs, which is not supported")
        self.close_layer()
        if self.stage is _Stage.INPUT:  # the normalisation is kept in the current order
            self.in_mean, self.in_range = self.in_mean[order], self.in_range[order]
        self.order = order if self.order is None else self.order[order]
        self.order_step = step

    def take_order(self, weights: np.ndarray) -> np.ndarray:
        """A dense layer's (n_out, n_in) weights on the values before a pending Transpose: column
        order[i] is the given column i (and the input normalisation goes back to the graph's order)."""
        if self.order is None:
            return weights
        inverse = np.argsort(self.order)
        if self.stage is _Stage.INPUT:
            self.in_mean, self.in_range = self.in_mean[inverse], self.in_range[inverse]
        self.order, self.order_step = None, None
        return weights[:, inverse]

    # -- linear layers -----------------------------------------------------------------------------

    def matmul(self, step: _Step) -> None:
        left, right = self.inputs(step, 2, 2)
        if right in self.constants:
            matrix = self.constant(step, right)  # (n_in, n_out): X @ W
            self.check_matrix(step, matrix, self.vector_size(step), rows=True)
            self.start_layer(step, matrix.T, (*self.shape[:-1], matrix.shape[1]), takes_bias=True)
            return
        matrix = self.constant(step, left)  # (n_out, n_in): W @ x, x of shape (n,) or (n, 1)
        if len(self.shape) == 1:
            n_in, tail = self.shape[0], ()
        elif len(self.shape) == 2 and self.shape[1] == 1:
            n_in, tail = self.shape[0], (1,)
        else:
            raise self.unsupported(step, f"W @ x needs x of shape (n,) or (n, 1), got {self.shape}")
        self.check_matrix(step, matrix, n_in, rows=False)
        self.start_layer(step, matrix, (matrix.shape[0], *tail), takes_bias=True)

    def gemm(self, step: _Step) -> None:
        names = self.inputs(step, 2, 3)
        if names[0] in self.constants:
            raise self.unsupported(step, "with a constant first operand is not supported")
        if self.attribute(step, "transA", 0) != 0:
            raise self.unsupported(step, "with transA=1 is not supported")
        if len(self.shape) != 2:  # ONNX defines Gemm on matrices only (its checker rejects the rest)
            raise self.fail(
                step, f"takes a rank-{len(self.shape)} input {list(self.shape)}; Gemm needs a matrix"
            )
        matrix = self.constant(step, names[1])
        trans_b = self.attribute(step, "transB", 0)
        weights = matrix if trans_b else matrix.T  # (n_out, n_in)
        self.check_matrix(step, weights, self.vector_size(step), rows=False)
        n_out = weights.shape[0]
        alpha = float(self.attribute(step, "alpha", 1.0))
        beta = float(self.attribute(step, "beta", 1.0))
        has_c = len(names) == 3 and names[2] != ""
        if alpha != 1.0:
            weights = alpha * weights
        self.start_layer(step, weights, (*self.shape[:-1], n_out), takes_bias=not has_c)
        if has_c:
            bias = self.broadcast(step, self.constant(step, names[2]), (n_out,))
            self.open_layer.bias = beta * bias if beta != 1.0 else bias

    def check_matrix(self, step: _Step, matrix: np.ndarray, n_in: int, rows: bool) -> None:
        """The weight matrix is 2-D and its input side (rows of W in X@W, else columns) is n_in."""
        if matrix.ndim != 2:
            raise self.fail(step, f"has a weight tensor of shape {matrix.shape}, expected a matrix")
        side = matrix.shape[0] if rows else matrix.shape[1]
        if side != n_in:
            raise self.fail(
                step,
                f"shape mismatch: weight matrix {matrix.shape} expects {side} inputs, "
                f"but the incoming tensor has {n_in} (shape {self.shape})",
            )

    def start_layer(self, step: _Step, weights: np.ndarray, shape: tuple[int, ...], takes_bias: bool) -> None:
        if self.stage is _Stage.OUTPUT:
            first = self.first_output_step
            raise UnsupportedError(
                f"{self.where}: {first.describe()} is not supported between linear layers: constant "
                "elementwise operators are folded only before the first or after the last linear layer"
            )
        self.close_layer()
        weights = self.take_order(weights)
        self.stage = _Stage.LAYERS
        bias = np.zeros(weights.shape[0])
        self.open_layer = _OpenLayer(step, np.array(weights, dtype=np.float64), bias, takes_bias)
        self.shape = shape

    def close_layer(self) -> None:
        layer = self.open_layer
        if layer is None:
            return
        self.open_layer = None
        activation = layer.activation or Activation.IDENTITY
        try:
            if layer.conv is None:
                self.layers.append(Dense(layer.weights, layer.bias, activation))
            else:
                self.layers.append(Conv2D(layer.weights, layer.bias, activation, **layer.conv))
        except InputError as error:
            raise self.fail(layer.step, f"has invalid parameters: {error}") from None

    def clip(self, step: _Step) -> None:
        """Clip(0, 6) is ReLU6 (opset 11+: bounds as constant inputs; opset 6: attributes); any other
        bounds are refused, naming them."""
        names = self.inputs(step, 1, 3)
        bounds = []
        for index, (key, default) in enumerate((("min", -np.inf), ("max", np.inf)), start=1):
            if index < len(names) and names[index]:
                if names[index] not in self.constants:
                    raise self.unsupported(step, f"has a non-constant {key} bound '{names[index]}'")
                value = self.constant(step, names[index]).reshape(-1)
                if value.size != 1:
                    raise self.fail(step, f"has a {key} bound of {value.size} values (one expected)")
                bounds.append(float(value[0]))
            else:
                bounds.append(float(self.attribute(step, key, default)))
        if bounds != [0.0, 6.0]:
            raise self.unsupported(
                step, f"clips to [{bounds[0]:g}, {bounds[1]:g}]; only Clip(0, 6) (ReLU6) is supported"
            )
        self.activation(step, Activation.RELU6, max_inputs=3)

    def activation(self, step: _Step, activation: Activation, max_inputs: int = 1) -> None:
        self.inputs(step, 1, max_inputs)
        layer = self.open_layer
        if layer is None and activation is Activation.RELU and self.relu_through_max_pool():
            return
        if layer is None or layer.activation is not None:
            raise self.unsupported(
                step,
                "is not supported here: an activation must directly follow a linear layer "
                "(MatMul, Gemm or Conv, and its bias Add or BatchNormalization)",
            )
        layer.activation = activation
        self.close_layer()

    def relu_through_max_pool(self) -> bool:
        """Conv -> MaxPool -> Relu is Conv -> Relu -> MaxPool (ReLU and max commute): move it."""
        if len(self.layers) < 2 or not isinstance(self.layers[-1], MaxPool2D):
            return False
        before = self.layers[-2]
        if not isinstance(before, (Conv2D, Dense)) or before.activation is not Activation.IDENTITY:
            return False
        if isinstance(before, Conv2D):
            moved = Conv2D(
                before.weights,
                before.bias,
                Activation.RELU,
                before.input_shape,
                before.strides,
                before.pads,
                before.groups,
            )
        else:
            moved = Dense(before.weights, before.bias, Activation.RELU)
        self.layers[-2] = moved
        return True

    # -- convolutional layers ----------------------------------------------------------------------

    def ints(self, step: _Step, name: str, default: Sequence[int]) -> tuple[int, ...]:
        """An integer-list attribute, or `default`."""
        for attribute in step.node.attribute:
            if attribute.name == name:
                value = onnx.helper.get_attribute_value(attribute)
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
                    raise self.fail(step, f"has a malformed attribute {name}={value!r}")
                return tuple(int(v) for v in value)
        return tuple(default)

    def text(self, step: _Step, name: str, default: str) -> str:
        for attribute in step.node.attribute:
            if attribute.name == name:
                value = onnx.helper.get_attribute_value(attribute)
                return value.decode() if isinstance(value, bytes) else str(value)
        return default

    def image(self, step: _Step) -> tuple[int, int, int]:
        """The current tensor as (channels, height, width): it must be (1, C, H, W)."""
        if len(self.shape) != 4 or self.shape[0] != 1:
            raise self.unsupported(step, f"needs an NCHW input of batch 1, got shape {self.shape}")
        return self.shape[1], self.shape[2], self.shape[3]

    def geometry(self, step: _Step, kernel: tuple[int, int], image: tuple[int, int, int]) -> tuple:
        """Strides and pads (top, left, bottom, right) from the attributes, auto_pad resolved."""
        strides = self.ints(step, "strides", (1, 1))
        dilations = self.ints(step, "dilations", (1, 1))
        if len(strides) != 2 or any(v < 1 for v in strides):
            raise self.fail(step, f"has strides {list(strides)}; two positive integers expected")
        if any(v != 1 for v in dilations):
            raise self.unsupported(step, f"with dilations {list(dilations)} is not supported")
        auto_pad = self.text(step, "auto_pad", "NOTSET")
        if auto_pad != "NOTSET" and any(attribute.name == "pads" for attribute in step.node.attribute):
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

    def conv(self, step: _Step) -> None:
        names = self.inputs(step, 2, 3)
        if names[1] not in self.constants:
            raise self.unsupported(step, "with a non-constant kernel is not supported")
        image = self.image(step)
        kernel = self.constant(step, names[1])
        if kernel.ndim != 4:
            raise self.unsupported(
                step, f"has a kernel of shape {kernel.shape}; only 2-D convolutions are supported"
            )
        declared = self.ints(step, "kernel_shape", kernel.shape[2:])
        if tuple(declared) != tuple(kernel.shape[2:]):
            raise self.fail(step, f"shape mismatch: kernel_shape {list(declared)} but kernel {kernel.shape}")
        strides, pads = self.geometry(step, (kernel.shape[2], kernel.shape[3]), image)
        image, pads = self.take_pad(pads)
        groups = int(self.attribute(step, "group", 1))
        has_b = len(names) == 3 and names[2] != ""
        bias = self.constant(step, names[2]).reshape(-1) if has_b else np.zeros(kernel.shape[0])
        geometry = {"input_shape": image, "strides": strides, "pads": pads, "groups": groups}
        try:
            probe = Conv2D(kernel, bias, Activation.IDENTITY, **geometry)
        except InputError as error:
            raise self.fail(step, f"has invalid parameters: {error}") from None
        if self.stage is _Stage.OUTPUT:
            raise self.unsupported(step, "follows an output normalisation")
        self.close_layer()
        self.stage = _Stage.LAYERS
        self.open_layer = _OpenLayer(step, kernel, bias, takes_bias=not has_b, conv=geometry)
        self.shape = (1, *probe.output_shape)

    def batch_norm(self, step: _Step) -> None:
        """Fold inference-mode BatchNormalization into the open dense or convolution layer."""
        names = self.inputs(step, 5, 5)
        layer = self.open_layer
        if layer is None or layer.activation is not None:
            raise self.unsupported(
                step, "is supported only directly after a Conv, Gemm or MatMul (it is folded into it)"
            )
        if any(name not in self.constants for name in names[1:]):
            raise self.unsupported(step, "with non-constant parameters is not supported")
        if int(self.attribute(step, "training_mode", 0)):
            raise self.unsupported(step, "in training mode is not supported")
        epsilon = float(self.attribute(step, "epsilon", 1e-5))
        scale, shift, mean, variance = (self.constant(step, name).reshape(-1) for name in names[1:])
        channels = layer.weights.shape[0]
        if not all(v.size == channels for v in (scale, shift, mean, variance)):
            raise self.fail(
                step, f"shape mismatch: parameters for {scale.size} channels, the layer has {channels}"
            )
        if np.any(variance + epsilon <= 0):
            raise self.fail(step, "has a non-positive variance + epsilon")
        factor = scale / np.sqrt(variance + epsilon)
        layer.weights = layer.weights * factor.reshape((-1,) + (1,) * (layer.weights.ndim - 1))
        layer.bias = (layer.bias - mean) * factor + shift
        layer.takes_bias = False

    def pool(self, step: _Step) -> None:
        self.inputs(step, 1, 1)
        image = self.image(step)
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
        if self.stage is _Stage.OUTPUT:
            raise self.unsupported(step, "follows an output normalisation")
        include = bool(self.attribute(step, "count_include_pad", 0))
        if self.pending_pad is not None:
            include = self.absorb_pad_into_pool(step, pads, include)
        self.close_layer()
        image, pads = self.take_pad(pads)
        self.stage = _Stage.LAYERS
        try:
            if op_type == "MaxPool":
                layer = MaxPool2D(image, kernel, strides, pads)
            else:
                layer = AveragePool2D(image, kernel, strides, pads, include)
        except InputError as error:
            raise self.fail(step, f"has invalid parameters: {error}") from None
        self.layers.append(layer)
        self.shape = (1, *layer.output_shape)

    def absorb_pad_into_pool(self, step: _Step, own_pads: tuple[int, ...], include: bool) -> bool:
        """Can the pool take the pending Pad's zeros as its padding? Returns its count_include_pad.

        Average: the zeros are counted in every window, which is `count_include_pad` when the pool
        has no pads of its own or counts those too; a pool with its own uncounted pads would count
        the Pad's zeros but not its own padding, which the IR cannot state. Max: a zero changes no
        window maximum of non-negative values (the output of a ReLU layer).
        """
        label = self.pending_pad.label  # type: ignore[union-attr]
        if step.node.op_type == "MaxPool":
            before = self.layers[-1] if self.layers and self.open_layer is None else None
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

    def passthrough(self, step: _Step) -> None:
        self.inputs(step, 1, 1)

    def dropout(self, step: _Step) -> None:
        names = self.inputs(step, 1, 3)
        if len(names) == 3 and names[2] and bool(np.any(self.constants[names[2]])):
            raise self.unsupported(step, "in training mode is not supported")

    def flatten(self, step: _Step) -> None:
        self.inputs(step, 1, 1)
        rank = len(self.shape)
        axis = int(self.attribute(step, "axis", 1))
        if axis < 0:
            axis += rank
        if not 0 <= axis <= rank:
            raise self.fail(step, f"has axis {axis} outside 0..{rank} for shape {self.shape}")
        self.shape = (math.prod(self.shape[:axis]), math.prod(self.shape[axis:]))

    def reshape(self, step: _Step) -> None:
        _, shape_name = self.inputs(step, 2, 2)
        requested = [int(dim) for dim in np.asarray(self.constants[shape_name]).reshape(-1)]
        allow_zero = int(self.attribute(step, "allowzero", 0))
        dims = [
            self.shape[i] if dim == 0 and not allow_zero and i < len(self.shape) else dim
            for i, dim in enumerate(requested)
        ]
        size = math.prod(self.shape)
        known = math.prod(dim for dim in dims if dim != -1)
        if dims.count(-1) == 1 and known > 0 and size % known == 0:
            dims = [size // known if dim == -1 else dim for dim in dims]
        if any(dim < 0 for dim in dims) or math.prod(dims) != size:
            raise self.fail(step, f"shape mismatch: cannot reshape {self.shape} to {tuple(requested)}")
        self.shape = tuple(dims)

    # -- constant elementwise operators ------------------------------------------------------------

    def broadcast(self, step: _Step, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
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

    def elementwise(self, step: _Step) -> None:
        left, right = self.inputs(step, 2, 2)
        constant_first = left in self.constants
        value = self.constant(step, left if constant_first else right)
        if constant_first and step.node.op_type == "Div":
            raise self.unsupported(step, "divides a constant by the input, which is not affine")
        flat = self.broadcast(step, value, self.shape)
        self.shape = np.broadcast_shapes(self.shape, value.shape)
        layer = self.open_layer
        if self.stage is _Stage.INPUT:
            self.fold_input(step, flat, constant_first)
        elif layer is not None and layer.takes_bias and step.node.op_type == "Add":
            layer.bias = layer.bias + self.per_channel(step, layer, flat)
            layer.takes_bias = False
        else:
            self.close_layer()
            if self.stage is not _Stage.OUTPUT:
                self.stage, self.first_output_step = _Stage.OUTPUT, step
                self.out_mean, self.out_range = np.zeros(flat.size), np.ones(flat.size)
            self.fold_output(step, flat, constant_first)

    def per_channel(self, step: _Step, layer: _OpenLayer, flat: np.ndarray) -> np.ndarray:
        """A bias added to a layer's output: per neuron (dense) or per output channel (convolution)."""
        if layer.conv is None:
            return flat
        channels = flat.reshape(layer.weights.shape[0], -1)
        if np.any(channels != channels[:, :1]):
            raise self.unsupported(step, "adds a bias that is not constant within each output channel")
        return channels[:, 0]

    def fold_input(self, step: _Step, k: np.ndarray, constant_first: bool) -> None:
        """Compose f(x) = (x - m) / r with one operator, keeping the (m, r) form exact for Sub, Div."""
        op_type, m, r = step.node.op_type, self.in_mean, self.in_range
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
        self.in_mean, self.in_range = m, r

    def fold_output(self, step: _Step, k: np.ndarray, constant_first: bool) -> None:
        """Compose g(y) = y R + M with one operator."""
        op_type, mean, scale = step.node.op_type, self.out_mean, self.out_range
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
        self.out_mean, self.out_range = mean, scale

    # -- result ------------------------------------------------------------------------------------

    def finish(self) -> list[Dense | Conv2D | MaxPool2D | AveragePool2D]:
        if self.pending_pad is not None:
            raise UnsupportedError(
                f"{self.where}: ONNX node '{self.pending_pad.label}' (Pad) pads the graph's output, "
                "which is not supported"
            )
        if self.order is not None:
            raise self.unsupported(self.order_step, "reorders the graph's output, which is not supported")  # type: ignore[arg-type]
        if self.stage is _Stage.INPUT:
            raise InputError(f"{self.where}: ONNX graph has no linear layer (MatMul, Gemm or Conv)")
        self.close_layer()
        return self.layers

    def output_norm(self) -> OutputNormalisation | None:
        if self.stage is not _Stage.OUTPUT or (np.all(self.out_mean == 0) and np.all(self.out_range == 1)):
            return None
        return OutputNormalisation(self.out_mean, self.out_range)


def _input_norm(
    model: onnx.ModelProto, builder: _Builder, n_inputs: int, where: str
) -> InputNormalisation | None:
    """Mean and range from the folded operators, clip bounds from qverify's metadata (else none).

    :returns: None for the identity (no clipping, mean 0, range 1), as `qverify.io.nnet` does.
    """
    props = {prop.key: prop.value for prop in model.metadata_props}
    minimum, maximum = np.full(n_inputs, -np.inf), np.full(n_inputs, np.inf)
    if METADATA_INPUT_MIN in props:
        minimum = decode_bounds(
            props[METADATA_INPUT_MIN], n_inputs, f"{where}: metadata {METADATA_INPUT_MIN}"
        )
    if METADATA_INPUT_MAX in props:
        maximum = decode_bounds(
            props[METADATA_INPUT_MAX], n_inputs, f"{where}: metadata {METADATA_INPUT_MAX}"
        )
    mean, scale = builder.in_mean, builder.in_range
    if np.all(minimum == -np.inf) and np.all(maximum == np.inf) and np.all(mean == 0) and np.all(scale == 1):
        return None
    try:
        return InputNormalisation(minimum, maximum, mean, scale)
    except InputError as error:
        raise InputError(f"{where}: invalid input normalisation: {error}") from None


def _check_output_shape(graph: onnx.GraphProto, n_outputs: int, where: str) -> None:
    declared = _static_shape(graph.output[0])
    if declared is not None and declared and math.prod(declared) != n_outputs:
        raise InputError(
            f"{where}: shape mismatch: graph output '{graph.output[0].name}' declares shape "
            f"{declared}, but the network computes {n_outputs} values"
        )


def read_onnx(path: str | Path) -> Network:
    """Read a sequential dense ONNX network, converting every weight to float64.

    :returns: a `Network` named after the file stem, with `source` = `path`; the input normalisation
        comes from constant Sub/Div/Add/Mul before the first linear layer (plus clip bounds from
        qverify metadata), the output normalisation from those after the last one.
    :raises InputError: unreadable or empty file, missing initializer, shape mismatch, zero scale.
    :raises UnsupportedError: an operator outside the list in the module docstring, or a graph that
        is not one chain (several inputs or outputs, a branch, an operator on two dynamic tensors).
    """
    where = str(path)
    model = load_model(path)
    graph = model.graph
    if not graph.node:
        raise InputError(f"{where}: ONNX graph has no nodes")
    _check_names(graph, where)
    constants = fold_shape_computations(model, _constants(graph, where))
    graph_input = _graph_input(graph, where)
    shape = _static_shape(graph_input)
    if shape is None:
        raise InputError(f"{where}: graph input '{graph_input.name}' has no static shape")
    check_tensor(shape, 8, f"{where}: graph input '{graph_input.name}'")  # read as float64
    if is_quantized(model):
        folded = fold_dequantized_constants(graph, constants, where)
        steps = _chain(graph, graph_input.name, folded, where)
        network = read_quantized(model, where, constants, [(step.node, step.label) for step in steps], shape)
        _check_output_shape(graph, network.n_outputs, where)
        return replace(network, image_shape=_image_shape(shape))
    steps = _chain(graph, graph_input.name, constants, where)
    builder = _Builder(where, constants, shape)
    for step in steps:
        builder.feed(step)
    layers = builder.finish()
    n_inputs = layers[0].n_in
    _check_output_shape(graph, layers[-1].n_out, where)
    try:
        return Network(
            layers=tuple(layers),
            input_norm=_input_norm(model, builder, n_inputs, where),
            output_norm=builder.output_norm(),
            name=file_stem(path),
            source=where,
            image_shape=_image_shape(shape),
        )
    except InputError as error:
        if str(error).startswith(where):
            raise
        raise InputError(f"{where}: {error}") from None
