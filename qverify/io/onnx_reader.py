"""Read a float ONNX graph into a `Network` (using the `onnx` package only).

What is understood, in graph order from the single graph input to the single graph output (a chain,
or a graph whose tensors feed several nodes and meet again in a residual `Add` or a `Concat`:
`qverify.io.onnx_graph` walks it with a state per tensor; constants are initializers or `Constant`
nodes):

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

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from qverify.errors import InputError, UnsupportedError
from qverify.input_limits import check_file, check_tensor
from qverify.io.files import file_stem, read_bytes
from qverify.io.onnx_fusion import has_float_groups, unfused_outputs
from qverify.io.onnx_graph import GraphResult, Step, _GraphBuilder
from qverify.io.onnx_quant import fold_dequantized_constants, is_quantized, read_quantized
from qverify.io.onnx_static import fold_shape_computations
from qverify.network.model import (
    Activation,
    InputNormalisation,
    Network,
)

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
    """Every tensor whose value is known before the input arrives: initializers, Constant nodes, and
    an `Identity` of one of them (torch.onnx writes one where a module shares a parameter under two
    names: an alias of any size, which the shape folding's small-input rule would leave)."""
    values = {tensor.name: _tensor_to_array(tensor, where) for tensor in graph.initializer}
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.output:
            values[node.output[0]] = _constant_node_value(index, node, where)
        elif node.op_type == "Identity" and node.input and node.output and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]]
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


_TAIL_OPS = ("Add", "Sub", "Mul", "Div", "Flatten", "Reshape", "Identity", "Dropout", "Softmax")


@dataclass(frozen=True, slots=True)
class _Walk:
    """The graph's live nodes in order, each with its dynamic inputs; how many live nodes read each
    tensor (the graph output counts as one reader); and the tensors on the output's tail (from
    which only constant elementwise, shape operators and Softmax lead to the output, read once)."""

    steps: list[tuple[Step, list[str]]]
    readers: dict[str, int]
    tail: set[str]


def _walk(graph: onnx.GraphProto, start: str, constants: dict[str, np.ndarray], where: str) -> _Walk:
    """Every node's dynamic inputs checked to be produced before it (no cycle, no dangling input;
    `_check_names` has refused a tensor defined twice), then the nodes that reach the graph output."""
    produced = {start}
    later = {name for node in graph.node for name in node.output}
    steps: list[tuple[Step, list[str]]] = []
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            continue
        if node.output and all(name in constants for name in node.output):  # folded shape computations
            continue
        step = Step(node, _label(index, node))
        dynamic = [name for name in node.input if name and name not in constants]
        for name in dynamic:
            if name not in produced:
                if name in later:
                    raise InputError(
                        f"{where}: {step.describe()} reads '{name}' before any node produces it (the graph has "
                        "a cycle, or its nodes are not in topological order)"
                    )
                raise InputError(
                    f"{where}: {step.describe()} reads '{name}', which is neither an initializer, "
                    "a Constant nor a node output (missing initializer?)"
                )
        if not node.output or not node.output[0]:
            raise InputError(f"{where}: {step.describe()} has no output")
        produced.update(name for name in node.output if name)  # (each defined once: `_check_names`)
        steps.append((step, dynamic))
    if not steps:
        raise InputError(f"{where}: ONNX graph has no nodes")
    output = graph.output[0].name
    if output not in produced:
        raise InputError(f"{where}: graph output '{output}' is computed by no node")
    live: set[str] = {output}
    kept: list[tuple[Step, list[str]]] = []
    for step, dynamic in reversed(steps):
        if any(name in live for name in step.node.output):
            kept.append((step, dynamic))
            live.update(dynamic)
    kept.reverse()
    readers: dict[str, int] = {output: 1}
    for _, dynamic in kept:
        for name in dynamic:
            readers[name] = readers.get(name, 0) + 1
    tail = {output}
    for step, dynamic in reversed(kept):
        out = step.node.output[0]
        if (
            out in tail
            and step.node.op_type in _TAIL_OPS
            and len(dynamic) == 1
            and readers.get(dynamic[0], 0) == 1
        ):
            tail.add(dynamic[0])
    return _Walk(kept, readers, tail)


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


def _input_norm(
    model: onnx.ModelProto, graph: GraphResult, n_inputs: int, where: str
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
    mean = graph.in_mean if graph.in_mean is not None else np.zeros(n_inputs)
    scale = graph.in_range if graph.in_range is not None else np.ones(n_inputs)
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
    """Read a float (or int8: `qverify.io.onnx_quant`) ONNX graph, converting every weight to float64.

    :returns: a `Network` named after the file stem, with `source` = `path`; the input normalisation
        comes from constant Sub/Div/Add/Mul before the first linear layer (plus clip bounds from
        qverify metadata), the output normalisation from those after the last one.
    :raises InputError: unreadable or empty file, missing initializer, shape mismatch, zero scale.
    :raises UnsupportedError: an operator outside the list in the module docstring, or a graph that
        qverify does not read (several inputs or outputs, an operator on two dynamic tensors other
        than the joins), naming the node.
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
        walk = _walk(graph, graph_input.name, folded, where)
        steps = [(step.node, step.label, dynamic) for step, dynamic in walk.steps]
        output = graph.output[0].name
        unfused = unfused_outputs(model, where) if has_float_groups(model) else frozenset()
        network = read_quantized(
            where, folded, steps, walk.readers, (graph_input.name, shape), output, unfused
        )
        _check_output_shape(graph, network.n_outputs, where)
        return replace(network, image_shape=_image_shape(shape))
    walk = _walk(graph, graph_input.name, constants, where)
    builder = _GraphBuilder(
        where, constants, graph_input.name, shape, walk.readers, walk.tail, graph.output[0].name
    )
    for step, dynamic in walk.steps:
        builder.feed(step, dynamic)
    result = builder.finish()
    layers = result.layers
    try:
        network = Network(
            layers=tuple(layers),
            wiring=tuple(result.wiring),
            output_norm=result.output_norm,
            name=file_stem(path),
            source=where,
            image_shape=_image_shape(shape),
            notes=tuple(result.notes),
            output_softmax=result.softmax_dropped,
        )
        network = replace(network, input_norm=_input_norm(model, result, network.n_inputs, where))
    except InputError as error:
        if str(error).startswith(where):
            raise
        raise InputError(f"{where}: {error}") from None
    _check_output_shape(graph, network.n_outputs, where)
    return network
