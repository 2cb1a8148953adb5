"""Tables on int8/uint8 codes as onnxruntime builds them: QLinearSigmoid's 256 output codes.

onnxruntime's CPU kernel (com.microsoft QLinearSigmoid, and the DequantizeLinear -> Sigmoid ->
QuantizeLinear groups its QDQ optimiser fuses into it) builds, once per node, a table over the 256
input codes q:

    x = float32(X_scale * (q - X_zero_point))        (the int difference converted to float32)
    y = MlasComputeLogistic(x)                        (float32, MLAS's vectorised logistic)
    table[q] = MlasQuantizeLinear(y, Y_scale, Y_zero_point)
             = clamp(round_half_even(float32(y / Y_scale)) + Y_zero_point, qmin, qmax)

and looks every code up in it. MLAS's logistic is a rational approximation whose last bit depends on
the kernel the CPU dispatches (FMA or not), so qverify does not write a twin of it: the float32
values are onnxruntime's own float `Sigmoid` on these 256 inputs (its CPU kernel calls the same
MlasComputeLogistic), and the rest is the formula above (`TensorQuant.dequantize`, `.quantize`).
tests/test_int8_lookup.py checks the table against QLinearSigmoid on every code, for many scales and
zero points, and whole quantized networks against onnxruntime bit for bit.
"""

from __future__ import annotations

import functools

import numpy as np

from qverify.errors import UnsupportedError
from qverify.network import CodeFunction, CodeLookup, TensorQuant

_OPSET = 13


@functools.cache
def _sigmoid_session():
    """A one-node float32 Sigmoid model in onnxruntime (imported here: only int8 models with a
    table need it)."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"])],
        "qverify_sigmoid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = min(model.ir_version, 8)
    onnx.checker.check_model(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def ort_sigmoid(values: np.ndarray) -> np.ndarray:
    """onnxruntime's float32 logistic (MlasComputeLogistic) of float32 values."""
    x = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    return _sigmoid_session().run(None, {"x": x})[0].reshape(np.shape(values))


def all_codes(quant: TensorQuant) -> np.ndarray:
    """Every code of the tensor's type in increasing order (int64)."""
    return np.arange(quant.code.qmin, quant.code.qmax + 1, dtype=np.int64)


@functools.cache
def _lookup_table(function: CodeFunction, source: TensorQuant, target: TensorQuant) -> np.ndarray:
    codes = all_codes(source)
    if function is CodeFunction.SIGMOID:
        values = ort_sigmoid(source.dequantize(codes))
    else:  # pragma: no cover - every CodeFunction has its table above
        raise UnsupportedError(f"no table for {function.value}")
    table = target.quantize(values)
    table.flags.writeable = False
    return table


def lookup_table(lookup: CodeLookup, output: TensorQuant) -> np.ndarray:
    """int64 (256,): the output code of each input code qmin, qmin + 1, ..., qmax of `lookup.input`."""
    return _lookup_table(lookup.function, lookup.input, output)


def apply_lookup(codes: np.ndarray, lookup: CodeLookup, output: TensorQuant) -> np.ndarray:
    """The table applied to codes of `lookup.input`."""
    table = lookup_table(lookup, output)
    return table[np.asarray(codes, dtype=np.int64) - lookup.input.code.qmin]
