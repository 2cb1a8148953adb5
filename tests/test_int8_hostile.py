"""Corrupted int8 models: every command that reads one answers with one `error:` line naming the node
and the value, and exit 2 -- never a traceback, a numpy warning, a wrong verdict or exit 3.

The models are made by `qverify quantize` (onnxruntime's quantizer, QDQ per channel) from a small
MLP, then one parameter is corrupted the way a hostile corpus did (issue 28)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from qverify.io import save_network
from qverify.network import Activation, Dense, Network, evaluate_core
from qverify.quant.calibrate import QuantizeSettings, quantize_with_onnxruntime

QVERIFY = [sys.executable, "-m", "qverify"]
PROPERTY = """(declare-const X_0 Real)
(declare-const X_1 Real)
(declare-const Y_0 Real)
(declare-const Y_1 Real)
(declare-const Y_2 Real)
(assert (>= X_0 0.2))
(assert (<= X_0 0.4))
(assert (>= X_1 0.2))
(assert (<= X_1 0.4))
(assert (>= Y_0 100.0))
"""


def _replace(model: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    for index, tensor in enumerate(model.graph.initializer):
        if tensor.name == name:
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(value, name))
            return
    raise KeyError(name)


def _set_axis(model: onnx.ModelProto, weight: str, axis: int) -> None:
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] == weight:
            for attribute in node.attribute:
                if attribute.name == "axis":
                    attribute.i = axis
            return
    raise KeyError(weight)


def _zero_point_length_3(model):
    _replace(model, "W2_zero_point", np.zeros(3, dtype=np.int8))


def _axis_5(model):
    _set_axis(model, "W2_quantized", 5)


def _int32_scale(model):
    _replace(model, "layer1_relu_scale", np.array(1, dtype=np.int32))


def _int32_weight_scale(model):
    _replace(model, "W1_scale", np.ones(8, dtype=np.int32))


def _huge_input_scale(model):
    _replace(model, "input_scale", np.array(3e38, dtype=np.float32))


def _huge_input_scale_consistent(model):
    """Issue 43: the input scale 3e38 with the bias scales it implies (input scale x weight scale),
    so that no scale check refuses the model first: the first bias's dequantized values overflow
    float32 (they used to print numpy's RuntimeWarning lines before an error naming no node)."""
    scales = {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
    _replace(model, "input_scale", np.array(3e38, dtype=np.float32))
    _replace(model, "B1_quantized_scale", (np.float32(3e38) * scales["W1_scale"]).astype(np.float32))


def _tiny_output_scale(model):
    _replace(model, "output_scale", np.array(1e-30, dtype=np.float32))


CORRUPTIONS = {
    # (corruption, the node it must name, the value it must name)
    "zero-point-length-3": (_zero_point_length_3, "W2_zero_point", "3"),
    "axis-5": (_axis_5, "W2_quantized", "axis 5"),
    "int32-activation-scale": (_int32_scale, "layer1_relu", "int32"),
    "int32-weight-scale": (_int32_weight_scale, "W1_scale", "int32"),
    "huge-input-scale": (_huge_input_scale, "W1_gemm", "3.00000001e+38"),
    "huge-input-scale-consistent": (_huge_input_scale_consistent, "B1_DequantizeLinear", "e+35"),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    net = Network(
        (
            Dense(rng.normal(0, 1, (8, 2)), rng.normal(0, 0.3, 8), Activation.RELU),
            Dense(rng.normal(0, 1, (8, 8)), rng.normal(0, 0.3, 8), Activation.RELU),
            Dense(rng.normal(0, 1, (3, 8)), rng.normal(0, 0.3, 3), Activation.IDENTITY),
        ),
        name="mlp",
    )
    directory = tmp_path_factory.mktemp("int8-hostile")
    path = directory / "q.onnx"
    quantize_with_onnxruntime(net, rng.uniform(0, 1, size=(200, 2)), QuantizeSettings(per_channel=True), path)
    save_network(net, directory / "float.onnx")
    (directory / "p.vnnlib").write_text(PROPERTY)
    x = rng.uniform(0, 1, size=(40, 2))
    np.savez(directory / "data.npz", x=x, y=np.argmax(evaluate_core(net, x), axis=1))
    return path


def _corrupted(model: Path, name: str) -> Path:
    corrupt, _, _ = CORRUPTIONS[name]
    proto = onnx.load(model)
    corrupt(proto)
    path = model.with_name(f"{name}.onnx")
    onnx.save(proto, path)
    return path


def _commands(bad: Path) -> dict[str, list[str]]:
    folder = bad.parent
    prop, data = str(folder / "p.vnnlib"), str(folder / "data.npz")
    return {
        "info": ["info", str(bad)],
        "verify": ["verify", str(bad), "--property", prop, "--format", "int8"],
        "verify-default": ["verify", str(bad), "--property", prop],
        "impact": [
            "impact",
            str(folder / "float.onnx"),
            "--candidate",
            f"int8={bad}",
            "--data",
            data,
            "--samples",
            "20",
            "--resamples",
            "10",
            "-o",
            str(folder / f"impact-{bad.stem}"),
            "--no-progress",
        ],
        "diff": [
            "diff",
            str(folder / "float.onnx"),
            "--candidate",
            f"int8={bad}",
            "--data",
            data,
            "--seeds",
            "2",
            "--budget",
            "20",
            "-o",
            str(folder / f"diff-{bad.stem}"),
            "--no-progress",
        ],
        "repair": [
            "repair",
            str(folder / "float.onnx"),
            "--quantized",
            str(bad),
            "--format",
            "int8",
            "--repair-set",
            data,
            "-o",
            str(folder / f"repair-{bad.stem}"),
            "--no-progress",
        ],
    }


def test_a_tiny_output_scale_is_read_and_refused_by_the_property_without_warnings(model):
    """onnxruntime runs a model whose output scale is 1e-30 (every output saturates): it is a model,
    `info` shows it; a property threshold that no 64-bit comparison can hold is one error line."""
    proto = onnx.load(model)
    _tiny_output_scale(proto)
    path = model.with_name("tiny-output-scale.onnx")
    onnx.save(proto, path)
    info = subprocess.run([*QVERIFY, "info", str(path)], capture_output=True, text=True, check=False)
    assert info.returncode == 0 and "1.0000000031710769e-30" in info.stdout and not info.stderr
    prop = str(model.parent / "p.vnnlib")
    done = subprocess.run(
        [*QVERIFY, "verify", str(path), "--property", prop], capture_output=True, text=True, check=False
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Warning" not in done.stderr, done.stderr


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_corrupted_int8_model_is_one_error_line(model, name):
    bad = _corrupted(model, name)
    _, node, value = CORRUPTIONS[name]
    for command, args in _commands(bad).items():
        done = subprocess.run([*QVERIFY, *args], capture_output=True, text=True, timeout=300, check=False)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2, (command, done.returncode, done.stdout[-500:], done.stderr[-1500:])
        assert len(lines) == 1 and lines[0].startswith("error: "), (command, done.stderr)
        assert node in lines[0] and value in lines[0], (command, lines[0])
