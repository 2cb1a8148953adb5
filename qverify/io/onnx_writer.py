"""Write a `Network` as a plain ONNX graph that `read_onnx` (and onnxruntime) read back.

Layout (opset 13, input `input` of shape [1, n_in], output `output` of shape [1, n_out]):

    Sub(input_mean) -> Div(input_range)                  if the network has an input normalisation
    MatMul(W_k) -> Add(B_k) [-> Relu|Sigmoid|Tanh]       per layer, W_k of shape (n_in, n_out)
    Mul(output_range) -> Add(output_mean)                if it has an output normalisation

All tensors are DOUBLE, so every weight survives a round trip bit for bit (onnxruntime's CPU provider
runs MatMul, Add, Sub, Div, Mul, Relu, Sigmoid and Tanh in double; but its extended graph optimisation
fuses Div-by-constant into FusedMatMul with a float32 `alpha`, so run with ORT_ENABLE_BASIC for results
exact to double precision: default settings differ by ~3e-8 relative). ONNX has no clip-bound operator
that NNet semantics needs before normalising, so the input min/max go into `metadata_props` under the
keys defined in `qverify.io.onnx_reader`; onnxruntime ignores them and does not clip.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qverify.errors import InputError
from qverify.io.onnx_reader import METADATA_INPUT_MAX, METADATA_INPUT_MIN, encode_bounds
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

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.current = "input"

    def constant_op(self, op_type: str, name: str, value: np.ndarray) -> None:
        """`current = op_type(current, value)` with `value` stored as a DOUBLE initializer."""
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=np.float64), name))
        self.op(op_type, [self.current, name], f"{name}_{op_type.lower()}")

    def op(self, op_type: str, inputs: list[str], name: str) -> None:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name))
        self.current = name


def _build_graph(net: Network) -> onnx.GraphProto:
    parts = _GraphParts()
    if net.input_norm is not None:
        parts.constant_op("Sub", "input_mean", net.input_norm.mean)
        parts.constant_op("Div", "input_range", net.input_norm.range)
    for k, layer in enumerate(net.layers, start=1):
        parts.constant_op("MatMul", f"W{k}", layer.weights.T)
        parts.constant_op("Add", f"B{k}", layer.bias)
        if layer.activation in _ACTIVATION_OPS:
            parts.op(_ACTIVATION_OPS[layer.activation], [parts.current], f"layer{k}_{layer.activation.value}")
    if net.output_norm is not None:
        n_out = net.n_outputs
        parts.constant_op("Mul", "output_range", np.broadcast_to(net.output_norm.range, (n_out,)))
        parts.constant_op("Add", "output_mean", np.broadcast_to(net.output_norm.mean, (n_out,)))
    parts.nodes[-1].output[0] = "output"  # the graph output's name, as the docstring promises
    return helper.make_graph(
        parts.nodes,
        net.name,
        [helper.make_tensor_value_info("input", TensorProto.DOUBLE, [1, net.n_inputs])],
        [helper.make_tensor_value_info("output", TensorProto.DOUBLE, [1, net.n_outputs])],
        parts.initializers,
    )


def write_onnx(net: Network, path: str | Path) -> None:
    """Write `net` as an ONNX model (layout in the module docstring) that round-trips exactly.

    :raises InputError: the file cannot be written.
    """
    model = helper.make_model(
        _build_graph(net),
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
