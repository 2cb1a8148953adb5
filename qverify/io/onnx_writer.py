"""Write a `Network` as a plain ONNX graph that `read_onnx` (and onnxruntime) read back.

Layout (opset 13, input `input` of shape [1, n_in] -- [1, C, H, W] when the first layer is a
convolution or pool --, output `output` of shape [1, n_out]):

    Sub(input_mean) -> Div(input_range)                  if the network has an input normalisation
    MatMul(W_k) -> Add(B_k) [-> Relu|Sigmoid|Tanh]       per dense layer, W_k of shape (n_in, n_out)
      or Gemm(W_k, B_k, transB=1)                          with `gemm=True` (what quantizers fuse)
    Conv(W_k, B_k) [-> Relu|...] | MaxPool | AveragePool per spatial layer; Flatten before a dense
                                                         layer that follows one
    Mul(output_range) -> Add(output_mean)                if it has an output normalisation

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
from qverify.network import AveragePool2D, Conv2D, Dense, MaxPool2D
from qverify.network.model import Activation, Network

__all__ = ["OPSET", "write_onnx"]

OPSET = 13
_IR_VERSION = 7  # the IR version that introduced opset 13; accepted by every onnxruntime since 1.6

_ACTIVATION_OPS = {
    Activation.RELU: "Relu",
    Activation.SIGMOID: "Sigmoid",
    Activation.TANH: "Tanh",
}


class _GraphParts:
    """Nodes and initializers appended in chain order; `current` is the tensor flowing through."""

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


def _add_layer(parts: _GraphParts, k: int, layer, previous_spatial: bool, gemm: bool) -> None:
    if isinstance(layer, Dense):
        if previous_spatial:
            parts.op("Flatten", [parts.current], f"flatten{k}", axis=1)
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
    if layer.activation is Activation.RELU6:
        bounds = [
            parts.tensor(f"layer{k}_clip_min", np.array(0.0)),
            parts.tensor(f"layer{k}_clip_max", np.array(6.0)),
        ]
        parts.op("Clip", [parts.current, *bounds], f"layer{k}_relu6")
    elif layer.activation in _ACTIVATION_OPS:
        parts.op(_ACTIVATION_OPS[layer.activation], [parts.current], f"layer{k}_{layer.activation.value}")


def _build_graph(net: Network, float32: bool, gemm: bool) -> onnx.GraphProto:
    parts = _GraphParts(np.float32 if float32 else np.float64)
    element = TensorProto.FLOAT if float32 else TensorProto.DOUBLE
    first = net.layers[0]
    input_shape = [1, *first.input_shape] if len(first.input_shape) == 3 else [1, net.n_inputs]
    if net.input_norm is not None:
        if len(input_shape) != 2:
            raise UnsupportedError("an input normalisation before a convolution cannot be written to ONNX")
        parts.constant_op("Sub", "input_mean", net.input_norm.mean)
        parts.constant_op("Div", "input_range", net.input_norm.range)
    previous_spatial = len(input_shape) == 4
    for k, layer in enumerate(net.layers, start=1):
        _add_layer(parts, k, layer, previous_spatial, gemm)
        previous_spatial = not isinstance(layer, Dense)
    if previous_spatial:
        parts.op("Flatten", [parts.current], "flatten_output", axis=1)
    if net.output_norm is not None:
        n_out = net.n_outputs
        parts.constant_op("Mul", "output_range", np.broadcast_to(net.output_norm.range, (n_out,)))
        parts.constant_op("Add", "output_mean", np.broadcast_to(net.output_norm.mean, (n_out,)))
    parts.nodes[-1].output[0] = "output"  # the graph output's name, as the docstring promises
    return helper.make_graph(
        parts.nodes,
        net.name,
        [helper.make_tensor_value_info("input", element, input_shape)],
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
