"""Which float operators of a QDQ model onnxruntime actually runs in float.

A QDQ model writes each quantized layer as float operators between DequantizeLinear and
QuantizeLinear; onnxruntime's optimiser fuses such a group into a quantized kernel (QLinearConv,
QGemm, QLinearAdd, QLinearGlobalAveragePool, ...) only when the group is self-contained: each
DequantizeLinear read by that operator alone, the operator's output read by its QuantizeLinear
alone, a Relu between them made redundant by the QuantizeLinear, and more conditions that depend on
the order in which its transformers run (a MaxPool's QDQ pair dropped first frees a shared
DequantizeLinear, for instance). A residual network's fork -- one quantized tensor read by a
convolution and by the shortcut's Add -- typically leaves both unfused (onnxruntime 1.32 also merges
dedicated DequantizeLinear copies back into one), and an unfused group is computed in float32:
dequantized values, a float32 convolution whose summation order is the BLAS kernel's, then
QuantizeLinear. That is a different function from the int8 layer the group describes.

So rather than re-implement the fusion rules, qverify asks onnxruntime: it optimises the model as
an inference session does by default (`ORT_ENABLE_ALL`, the CPU provider) and reports the names of
the float compute operators left in the optimised graph. The quantized reader then states those
operators as onnxruntime runs them (an Add in float32 is still an exact function of its two codes),
or refuses them with the reason (a float32 convolution is not stated bit for bit).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from qverify.errors import InputError, ToolMissingError

FLOAT_COMPUTE_OPS = frozenset(
    {"Conv", "Gemm", "MatMul", "Add", "AveragePool", "GlobalAveragePool", "Sigmoid"}
)


def has_float_groups(model: onnx.ModelProto) -> bool:
    """Does the model hold float compute operators (a QDQ model), whose fusion must be asked?"""
    return any(node.op_type in FLOAT_COMPUTE_OPS for node in model.graph.node)


def unfused_outputs(model: onnx.ModelProto, where: str) -> frozenset[str]:
    """The output tensors of the float compute operators onnxruntime leaves unfused (runs in
    float32): tensor names, which its optimiser keeps (a node may have no name)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ToolMissingError(
            f"{where}: a QDQ model means what onnxruntime runs, and which of its float operators "
            "onnxruntime fuses is asked of onnxruntime, but onnxruntime is not installed (pip install "
            "onnxruntime, or `make setup`)"
        ) from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    with tempfile.TemporaryDirectory(prefix="qverify-fusion-") as scratch:
        optimised = Path(scratch) / "optimised.onnx"
        options.optimized_model_filepath = str(optimised)
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # noqa: BLE001 - onnxruntime refuses with its own exception classes
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise InputError(f"{where}: onnxruntime refuses the model: {first_line}") from None
        graph = onnx.load(str(optimised), load_external_data=False).graph
    return frozenset(
        node.output[0] for node in graph.node if node.op_type in FLOAT_COMPUTE_OPS and node.output
    )
