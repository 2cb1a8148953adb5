"""Write a `Network` as a plain ONNX graph that `read_onnx` (and onnxruntime) read back.

Layout (opset 13, input `input` of shape [1, n_in] -- [1, C, H, W] when the first layer is a
convolution or pool --, output `output` of shape [1, n_out]):

    Sub(input_mean) -> Div(input_range)                  if the network has an input normalisation
    MatMul(W_k) -> Add(B_k) [-> Relu|Sigmoid|Tanh]       per dense layer, W_k of shape (n_in, n_out)
      or Gemm(W_k, B_k, transB=1)                          with `gemm=True` (what quantizers fuse)
    Conv(W_k, B_k) [-> Relu|...] | MaxPool | AveragePool per spatial layer; Flatten before a dense
                                                         layer that follows one
    Mul(output_range) -> Add(output_mean)                if it has an output normalisation

A graph (`Network.wiring`) is written node by node: a node reads its producers' tensors (the input,
or a node's output), an `Add` join is ONNX Add (and its activation), a `Concat` ONNX Concat on
axis 1, a `Permute` a Gather on the flattened tensor; a Flatten or Reshape goes where a dense layer
reads an image or a spatial layer a vector.

All tensors are DOUBLE by default, so every weight survives a round trip bit for bit (onnxruntime's CPU provider
runs MatMul, Add, Sub, Div, Mul, Relu, Sigmoid and Tanh in double; but its extended graph optimisation
fuses Div-by-constant into FusedMatMul with a float32 `alpha`, so run with ORT_ENABLE_BASIC for results
exact to double precision: default settings differ by ~3e-8 relative). ONNX has no clip-bound operator
that NNet semantics needs before normalising, so the input min/max go into `metadata_props` under the
keys defined in `qverify.io.onnx_reader`; onnxruntime ignores them and does not clip.
`float32=True` writes FLOAT tensors instead (weights rounded to float32): the form onnxruntime's
quantizer takes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qverify.errors import InputError, UnsupportedError
from qverify.io.onnx_reader import METADATA_INPUT_MAX, METADATA_INPUT_MIN, encode_bounds
from qverify.network import Add, AveragePool2D, Concat, Conv2D, Dense, MaxPool2D, Permute
from qverify.network.model import Activation, Network

__all__ = ["OPSET", "input_shape", "write_onnx"]

OPSET = 13
_IR_VERSION = 7  # the IR version that introduced opset 13; accepted by every onnxruntime since 1.6

_ACTIVATION_OPS = {
    Activation.RELU: "Relu",
    Activation.SIGMOID: "Sigmoid",
    Activation.TANH: "Tanh",
}


class _GraphParts:
    """Nodes and initializers appended in order; `current` is the tensor the next operator reads."""

    def __init__(self, dtype: type) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.current = "input"
        self.dtype = dtype

    def tensor(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=self.dtype), name))
        return name

    def constant_op(self, op_type: str, name: str, value: np.ndarray) -> None:
        """`current = op_type(current, value)` with `value` stored as an initializer."""
        self.op(op_type, [self.current, self.tensor(name, value)], f"{name}_{op_type.lower()}")

    def op(self, op_type: str, inputs: list[str], name: str, **attributes) -> None:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attributes))
        self.current = name


def _spatial_attributes(layer: Conv2D | MaxPool2D | AveragePool2D) -> dict:
    kernel = layer.kernel
    return {"kernel_shape": list(kernel), "strides": list(layer.strides), "pads": list(layer.pads)}


def _is_image(layer) -> bool:
    return len(getattr(layer, "output_shape", ())) == 3


def _add_layer(parts: _GraphParts, k: int, layer, gemm: bool) -> None:
    if isinstance(layer, Dense):
        if gemm:
            inputs = [parts.current, parts.tensor(f"W{k}", layer.weights), parts.tensor(f"B{k}", layer.bias)]
            parts.op("Gemm", inputs, f"W{k}_gemm", transB=1)
        else:
            parts.constant_op("MatMul", f"W{k}", layer.weights.T)
            parts.constant_op("Add", f"B{k}", layer.bias)
    elif isinstance(layer, Conv2D):
        inputs = [parts.current, parts.tensor(f"W{k}", layer.weights), parts.tensor(f"B{k}", layer.bias)]
        parts.op("Conv", inputs, f"W{k}_conv", group=layer.groups, **_spatial_attributes(layer))
    elif isinstance(layer, MaxPool2D):
        parts.op("MaxPool", [parts.current], f"layer{k}_maxpool", **_spatial_attributes(layer))
    else:
        parts.op(
            "AveragePool",
            [parts.current],
            f"layer{k}_averagepool",
            count_include_pad=int(layer.count_include_pad),
            **_spatial_attributes(layer),
        )
    _add_activation(parts, k, layer.activation)


def _add_activation(parts: _GraphParts, k: int, activation: Activation) -> None:
    if activation is Activation.RELU6:
        bounds = [
            parts.tensor(f"layer{k}_clip_min", np.array(0.0)),
            parts.tensor(f"layer{k}_clip_max", np.array(6.0)),
        ]
        parts.op("Clip", [parts.current, *bounds], f"layer{k}_relu6")
    elif activation in _ACTIVATION_OPS:
        parts.op(_ACTIVATION_OPS[activation], [parts.current], f"layer{k}_{activation.value}")


def _add_join(parts: _GraphParts, k: int, layer, inputs: list[str]) -> None:
    """An `Add` (ONNX Add of its inputs, or Identity for one), a `Concat` (axis 1), a `Permute`
    (Gather on axis 1 of the flattened tensor)."""
    if isinstance(layer, Add):
        if layer.count == 1:
            parts.op("Identity", inputs, f"layer{k}_identity")
        else:
            parts.op("Add", inputs[:2], f"layer{k}_add")
            for index, name in enumerate(inputs[2:], start=2):
                parts.op("Add", [parts.current, name], f"layer{k}_add{index}")
        _add_activation(parts, k, layer.activation)
    elif isinstance(layer, Concat):
        parts.op("Concat", inputs, f"layer{k}_concat", axis=1)
    else:
        indices = parts.tensor(f"layer{k}_order", layer.order)
        parts.initializers[-1] = numpy_helper.from_array(np.asarray(layer.order, dtype=np.int64), indices)
        parts.op("Gather", [inputs[0], indices], f"layer{k}_permute", axis=1)


def _reading(parts: _GraphParts, name: str, image: bool, wanted: tuple[int, ...]) -> str:
    """The tensor `name` (an image or a vector) as the consumer wants it: flattened (`wanted` ()),
    or reshaped to [1, C, H, W]."""
    if image == (len(wanted) == 3):
        return name
    if not wanted:  # a vector
        parts.op("Flatten", [name], f"{name}_flat", axis=1)
        return parts.current
    dims = parts.tensor(f"{name}_shape{len(parts.nodes)}", np.array([1, *wanted]))
    parts.initializers[-1] = numpy_helper.from_array(np.array([1, *wanted], dtype=np.int64), dims)
    parts.op("Reshape", [name, dims], f"{name}_image{len(parts.nodes)}")
    return parts.current


def _wanted(layer, slot: int) -> tuple[int, ...]:
    """The shape a node reads its input `slot` in: (C, H, W) for spatial layers and image joins,
    () (a vector) for dense layers, vector joins and a permutation (a Gather on the flat tensor)."""
    if isinstance(layer, (Conv2D, MaxPool2D, AveragePool2D)):
        return layer.input_shape
    if isinstance(layer, Add) and len(layer.shape) == 3:
        return layer.shape
    if isinstance(layer, Concat) and len(layer.output_shape) == 3:
        return layer.input_shapes[slot]
    return ()


def input_shape(net: Network) -> list[int]:
    """The graph input's shape: [1, C, H, W] when every node reading the input is a spatial layer
    (a convolution or pool), else [1, n_in]."""
    readers = [layer for k, layer in enumerate(net.layers) if -1 in net.wiring[k]]
    if all(isinstance(layer, (Conv2D, MaxPool2D, AveragePool2D)) for layer in readers):
        return [1, *readers[0].input_shape]
    return [1, net.n_inputs]


def _build_graph(net: Network, float32: bool, gemm: bool) -> onnx.GraphProto:
    parts = _GraphParts(np.float32 if float32 else np.float64)
    element = TensorProto.FLOAT if float32 else TensorProto.DOUBLE
    shape = input_shape(net)
    spatial_input = len(shape) == 4
    if net.input_norm is not None:
        if spatial_input:
            raise UnsupportedError("an input normalisation before a convolution cannot be written to ONNX")
        parts.constant_op("Sub", "input_mean", net.input_norm.mean)
        parts.constant_op("Div", "input_range", net.input_norm.range)
    sources = {-1: (parts.current, spatial_input)}
    for k, layer in enumerate(net.layers, start=1):
        names = []
        for slot, producer in enumerate(net.wiring[k - 1]):
            name, image = sources[producer]
            names.append(_reading(parts, name, image, _wanted(layer, slot)))
        parts.current = names[0]
        if isinstance(layer, (Add, Concat, Permute)):
            _add_join(parts, k, layer, names)
        else:
            _add_layer(parts, k, layer, gemm)
        sources[k - 1] = (parts.current, _is_image(layer) and not isinstance(layer, Permute))
    last, image = sources[len(net.layers) - 1]
    parts.current = last
    if image:
        parts.op("Flatten", [parts.current], "flatten_output", axis=1)
    if net.output_norm is not None:
        n_out = net.n_outputs
        parts.constant_op("Mul", "output_range", np.broadcast_to(net.output_norm.range, (n_out,)))
        parts.constant_op("Add", "output_mean", np.broadcast_to(net.output_norm.mean, (n_out,)))
    parts.nodes[-1].output[0] = "output"  # the graph output's name, as the docstring promises
    return helper.make_graph(
        parts.nodes,
        net.name,
        [helper.make_tensor_value_info("input", element, shape)],
        [helper.make_tensor_value_info("output", element, [1, net.n_outputs])],
        parts.initializers,
    )


def write_onnx(net: Network, path: str | Path, *, float32: bool = False, gemm: bool = False) -> None:
    """Write `net` as an ONNX model (layout in the module docstring); with the defaults it
    round-trips exactly.

    :raises InputError: the file cannot be written.
    :raises UnsupportedError: an int8 network (write its quantized file instead) or a normalisation
        before a convolution.
    """
    if net.quantization is not None:
        raise UnsupportedError(
            f"{net.name} is an int8 model: qverify writes float ONNX only (`qverify quantize` writes int8)"
        )
    model = helper.make_model(
        _build_graph(net, float32, gemm),
        producer_name="qverify",
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    model.ir_version = _IR_VERSION
    if net.input_norm is not None:
        helper.set_model_props(
            model,
            {
                METADATA_INPUT_MIN: encode_bounds(net.input_norm.minimum),
                METADATA_INPUT_MAX: encode_bounds(net.input_norm.maximum),
            },
        )
    onnx.checker.check_model(model)
    try:
        Path(path).write_bytes(model.SerializeToString())
    except OSError as error:
        raise InputError(f"{path}: cannot write: {error.strerror or error}") from None
