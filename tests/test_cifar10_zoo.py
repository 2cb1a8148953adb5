"""The CIFAR-10 zoo (benchmarks/cifar10): every committed model is the file export.py measured and
runs in its own runtime (onnxruntime; the LiteRT interpreter for .tflite); the zoo has every kind the
issues ask for. No deep-learning framework is imported.

The accuracies need the test images, which are not in the repository (benchmarks/cifar10/README.md
says why and how to make them with data.py): benchmarks/cifar10/accuracy.py measures them beside
zoo.json's figures.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

ZOO = Path(__file__).resolve().parent.parent / "benchmarks" / "cifar10"
RECORD = json.loads((ZOO / "zoo.json").read_text())
FILES = [
    pytest.param(family, label, entry, id=entry["file"])
    for family, record in RECORD["families"].items()
    for label, entry in record["files"].items()
]


def _onnx_outputs(path: Path, images: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    if feed.shape[-1] == 3:  # tf2onnx's NHWC input
        images = images.transpose(0, 2, 3, 1)
    return np.vstack([session.run(None, {feed.name: image[None]})[0] for image in images])


def _tflite_outputs(path: Path, images: np.ndarray) -> np.ndarray:
    litert = pytest.importorskip(
        "ai_edge_litert.interpreter", reason="ai-edge-litert (the LiteRT interpreter) is not installed"
    )
    interpreter = litert.Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    feed, fetch = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    nhwc = images.transpose(0, 2, 3, 1)
    if feed["dtype"] == np.int8:
        scale, zero = feed["quantization"]
        nhwc = np.clip(np.round(nhwc / scale) + zero, -128, 127).astype(np.int8)
    outputs = []
    for image in nhwc:
        interpreter.set_tensor(feed["index"], image[None])
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(fetch["index"])[0].astype(np.float64))
    return np.array(outputs)


def _outputs(path: Path, images: np.ndarray) -> np.ndarray:
    return (_tflite_outputs if path.suffix == ".tflite" else _onnx_outputs)(path, images)


@pytest.mark.parametrize(("family", "label", "entry"), FILES)
def test_the_committed_file_is_the_measured_one_and_runs(family, label, entry):
    path = ZOO / "models" / entry["file"]
    content = path.read_bytes()
    assert len(content) == entry["bytes"] and hashlib.sha256(content).hexdigest() == entry["sha256"]
    images = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    outputs = _outputs(path, images)
    assert outputs.shape == (2, 10) and np.all(np.isfinite(outputs))


def test_the_zoo_has_every_kind_the_issues_ask_for():
    """Issue 44's families with ONNX float, both int8 formats and TFLite int8 each, a dynamic-range
    TFLite file; issue 41's suite networks; and the export patterns: BatchNormalization kept in at
    least one file, residual Add, Concat, depthwise conv with ReLU6 (Clip), GlobalAveragePool, a
    final Softmax, and tf2onnx's NHWC Transpose."""
    families = RECORD["families"]
    issue44 = {"lenet5", "resnet20", "vgg16", "resnet18", "mobilenetv2"}
    issue41 = {"resnet2b", "resnet4b", "mbv2s", "squeeze", "keras_cnn"}
    assert issue44 | issue41 <= set(families)
    for family in issue44 | issue41:
        assert {"float", "int8-qdq", "int8-qop", "int8"} <= set(families[family]["files"]), family
    assert any("dynamic" in record["files"] for record in families.values())
    for family in issue41:
        assert families[family]["params"] <= 100_000, family
    float_ops = {op for record in families.values() for op in record["files"]["float"]["ops"]}
    assert {
        "BatchNormalization",
        "Add",
        "Concat",
        "Clip",
        "GlobalAveragePool",
        "Softmax",
        "Transpose",
    } <= float_ops
    assert "Transpose" in families["keras_cnn"]["files"]["float"]["ops"]
