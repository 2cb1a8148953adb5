"""Write changed int8 integers back into the quantized ONNX model they came from.

qverify reads QDQ and QOperator models (`onnx_quant.py`) but does not write int8 graphs from scratch:
a changed model (a repair of some weights and biases) is the *original file* with those initializers
replaced, so every other node, scale, zero point and attribute stays byte for byte what the user's
quantizer wrote, and onnxruntime runs it as it ran the original. The weight initializer of a layer is
found by its values (the int8 array equal to the layer's old weights, in the layer's or the transposed
orientation: Gemm with transB=0 and MatMul store [in, out]); its bias is the int32 initializer the same
operator takes (QGemm input 6, QLinearConv input 8, or the DequantizeLinear'd input 2 of a QDQ
Conv/Gemm). The written file is read back and must hold exactly the intended integers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from qverify.errors import InputError, InternalError
from qverify.io.onnx_reader import load_model, read_onnx
from qverify.network.model import Network
from qverify.network.qparams import MacQuant

_BIAS_INPUT = {"QGemm": 6, "QLinearConv": 8, "Conv": 2, "Gemm": 2}
_NO_BIAS = ("MatMul", "QLinearMatMul")


def _mac_layers(net: Network) -> list[MacQuant]:
    if net.quantization is None:
        raise InputError(f"{net.name}: not an int8 model")
    return [layer for layer in net.quantization.layers if isinstance(layer, MacQuant)]


class _Graph:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.initializers = {init.name: init for init in model.graph.initializer}

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.initializers[name])

    def consumers(self, name: str) -> list[onnx.NodeProto]:
        return [node for node in self.model.graph.node if name in node.input]

    def replace(self, name: str, values: np.ndarray) -> None:
        self.initializers[name].CopyFrom(numpy_helper.from_array(values, name))

    def weight_initializer(self, weights: np.ndarray, what: str) -> tuple[str, bool]:
        """The int8 initializer holding `weights` (and whether it is stored transposed)."""
        found = []
        for name in self.initializers:
            stored = self.array(name)
            if stored.dtype != np.int8 or stored.size != weights.size:
                continue
            if stored.shape == weights.shape and np.array_equal(stored, weights):
                found.append((name, False))
            elif stored.ndim == 2 and stored.shape == weights.T.shape and np.array_equal(stored, weights.T):
                found.append((name, True))
        if len(found) != 1:
            raise InputError(
                f"{what}: {'no' if not found else len(found)} int8 initializers hold its weights; "
                "cannot tell which one to change"
            )
        return found[0]

    def bias_initializer(self, weight_name: str, what: str) -> str | None:
        """The int32 bias initializer of the operator that consumes `weight_name` (None: no bias)."""
        for node in self.consumers(weight_name):
            operator = node
            if node.op_type == "DequantizeLinear":  # QDQ: the float operator takes the dequantized weight
                users = self.consumers(node.output[0])
                if len(users) != 1:
                    continue
                operator = users[0]
            if operator.op_type in _NO_BIAS:
                return None
            index = _BIAS_INPUT.get(operator.op_type)
            if index is None:
                continue
            if len(operator.input) <= index or not operator.input[index]:
                return None
            bias = operator.input[index]
            if bias not in self.initializers:  # QDQ: DequantizeLinear(int32 initializer)
                producers = [n for n in self.model.graph.node if bias in n.output]
                if len(producers) != 1 or producers[0].op_type != "DequantizeLinear":
                    raise InputError(f"{what}: its bias '{bias}' is not an initializer")
                bias = producers[0].input[0]
            return bias
        raise InputError(f"{what}: no Conv/Gemm/MatMul (or their quantized operators) takes its weights")


def write_int8_changes(source: str | Path, original: Network, changed: Network, path: str | Path) -> Path:
    """Copy the quantized ONNX model `source` (read as `original`) to `path` with the weights and
    biases of `changed` (the same network with some integers changed), and check the result.

    :raises InputError: the source is not the model `original` was read from, a changed layer's
        initializer cannot be identified, or a bias changes where the model has none.
    """
    model = load_model(source)
    graph = _Graph(model)
    # layers are paired by their node's name: `changed` may list a graph's nodes in another order
    before = {layer.what: layer for layer in _mac_layers(original)}
    after = {layer.what: layer for layer in _mac_layers(changed)}
    if set(before) != set(after):
        raise InputError(
            f"{changed.name}: its int8 layers {sorted(after)} are not {source}'s {sorted(before)}"
        )
    for name_of_layer, new in after.items():
        old = before[name_of_layer]
        old_w, new_w = np.asarray(old.weights, np.int8), np.asarray(new.weights, np.int8)
        old_b, new_b = np.asarray(old.bias, np.int64), np.asarray(new.bias, np.int64)
        if np.array_equal(old_w, new_w) and np.array_equal(old_b, new_b):
            continue
        name, transposed = graph.weight_initializer(old_w, old.what)
        if not np.array_equal(old_w, new_w):
            graph.replace(name, new_w.T.copy() if transposed else new_w)
        if not np.array_equal(old_b, new_b):
            bias_name = graph.bias_initializer(name, old.what)
            if bias_name is None:
                raise InputError(f"{old.what}: the model has no bias to change")
            shape = graph.array(bias_name).shape
            graph.replace(bias_name, new_b.astype(np.int32).reshape(shape))
    path = Path(path)
    onnx.save(model, str(path))
    written = {layer.what: layer for layer in _mac_layers(read_onnx(path))}
    for what, want in after.items():
        layer = written[what]
        if not (
            np.array_equal(np.asarray(layer.weights, np.int64), np.asarray(want.weights, np.int64))
            and np.array_equal(np.asarray(layer.bias, np.int64), np.asarray(want.bias, np.int64))
        ):
            raise InternalError(f"{path}: {layer.what} does not read back as the intended integers")
    return path
