"""The CIFAR-10 zoo (benchmarks/cifar10): every committed model is the file export.py measured and
runs in its own runtime (onnxruntime; the LiteRT interpreter for .tflite); the zoo has every kind the
issues ask for. No deep-learning framework is imported.

The accuracies need the test images, which are not in the repository (benchmarks/cifar10/README.md
says why and how to make them with data.py): benchmarks/cifar10/accuracy.py measures them beside
zoo.json's figures.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ZOO = Path(__file__).resolve().parent.parent / "benchmarks" / "cifar10"
RECORD = json.loads((ZOO / "zoo.json").read_text())
FILES = [
    pytest.param(family, label, entry, id=entry["file"])
    for family, record in RECORD["families"].items()
    for label, entry in record["files"].items()
]


def _accuracy_module():
    """benchmarks/cifar10/accuracy.py as a module: the test runs each file as that script runs it."""
    spec = importlib.util.spec_from_file_location("cifar10_accuracy", ZOO / "accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNTIMES = _accuracy_module()


def _outputs(path: Path, images: np.ndarray) -> np.ndarray:
    if path.suffix == ".tflite":
        pytest.importorskip(
            "ai_edge_litert.interpreter", reason="ai-edge-litert (the LiteRT interpreter) is not installed"
        )
        return RUNTIMES.tflite_outputs(path, images)
    return RUNTIMES.onnx_outputs(path, images)


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
