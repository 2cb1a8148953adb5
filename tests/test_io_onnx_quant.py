"""Reading int8 ONNX models (QDQ and QOperator) and refusing malformed ones with a clear error that
names the node: through the library and through the command line (exit 2, one `error:` line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qverify.errors import InputError, UnsupportedError
from qverify.io import load_network
from qverify.network import CodeType, Conv2D, Dense, MaxPool2D
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.onnx"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("quantized")
    net = load_network(CNN)
    calibration = np.random.default_rng(0).uniform(0, 1, size=(100, 64))
    paths = {}
    for quant_format in QuantFormat:
        for per_channel in (False, True):
            name = f"{quant_format.value}-{'pc' if per_channel else 'pt'}"
            settings = QuantizeSettings(quant_format, per_channel, CodeType.INT8)
            quantize_with_onnxruntime(net, calibration, settings, directory / f"{name}.onnx")
            paths[name] = directory / f"{name}.onnx"
    settings = QuantizeSettings(QuantFormat.QOP, False, CodeType.UINT8)
    quantize_with_onnxruntime(net, calibration, settings, directory / "qop-uint8.onnx")
    paths["qop-uint8"] = directory / "qop-uint8.onnx"
    return paths


@pytest.mark.parametrize("name", ["qdq-pt", "qdq-pc", "qop-pt", "qop-pc", "qop-uint8"])
def test_quantized_models_read_with_their_parameters(models, name):
    net = load_network(models[name])
    assert [type(layer) for layer in net.layers] == [Conv2D, MaxPool2D, Dense]
    quant = net.quantization
    assert quant is not None
    assert quant.per_channel == name.endswith("pc")
    assert quant.input.code is (CodeType.UINT8 if "uint8" in name else CodeType.INT8)
    assert ("QDQ" in quant.origin) == name.startswith("qdq")
    conv = quant.layers[0]
    # the float layer holds exactly the dequantized weights: w_int8 * scale in float32
    scales = np.broadcast_to(conv.weight_scales, (8,)).astype(np.float32)[:, None, None, None]
    assert np.array_equal(
        net.layers[0].weights, (conv.weights.astype(np.float32) * scales).astype(np.float64)
    )
    assert net.image_shape == (1, 8, 8)


def _edit(source: Path, target: Path, edit) -> Path:
    model = onnx.load(str(source))
    edit(model)
    onnx.save(model, str(target))
    return target


def _initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(tensor for tensor in model.graph.initializer if tensor.name == name)


def _set(model: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    tensor = _initializer(model, name)
    tensor.CopyFrom(numpy_helper.from_array(value, name))


def _node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(node for node in model.graph.node if node.op_type == op_type)


def _missing_scale(model):
    node = _node(model, "QLinearConv")
    model.graph.initializer.remove(_initializer(model, node.input[6]))


def _nan_scale(model):
    _set(model, _node(model, "QGemm").input[4], np.array(np.nan, dtype=np.float32))


def _negative_scale(model):
    _set(model, _node(model, "QLinearConv").input[6], np.array(-0.5, dtype=np.float32))


def _wide_zero_point(model):
    node = _node(model, "QuantizeLinear")
    _set(model, node.input[2], np.array(3, dtype=np.int32))


def _weight_zero_point(model):
    node = _node(model, "QGemm")
    _set(model, node.input[5], np.array(3, dtype=np.int8))


def _unsupported_op(model):
    node = _node(model, "MaxPool")
    qsig = helper.make_node(  # (QLinearSigmoid is read since issue 29; LeakyRelu's table is not)
        "QLinearLeakyRelu",
        [node.input[0], "s", "z", "s", "z"],
        list(node.output),
        name="qleaky",
        domain="com.microsoft",
    )
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(0.1, np.float32), "s"),
            numpy_helper.from_array(np.array(0, np.int8), "z"),
        ]
    )
    index = list(model.graph.node).index(node)
    model.graph.node.remove(node)
    model.graph.node.insert(index, qsig)


def _shape_mismatch(model):
    node = _node(model, "QGemm")
    weights = numpy_helper.to_array(_initializer(model, node.input[3]))
    _set(model, node.input[3], np.ascontiguousarray(weights[..., :60]))


def _bias_of_wrong_type(model):
    node = _node(model, "QLinearConv")
    bias = numpy_helper.to_array(_initializer(model, node.input[8]))
    _set(model, node.input[8], bias.astype(np.float32))


BROKEN = [
    ("missing scale", _missing_scale, InputError, "QLinearConv", "neither an initializer"),
    ("NaN scale", _nan_scale, InputError, "QGemm", "positive and finite"),
    ("negative scale", _negative_scale, InputError, "QLinearConv", "positive and finite"),
    ("zero point of a wide type", _wide_zero_point, UnsupportedError, "QuantizeLinear", "int8 and uint8"),
    ("weight zero point", _weight_zero_point, UnsupportedError, "QGemm", "symmetric weights"),
    ("unsupported Q-op", _unsupported_op, UnsupportedError, "qleaky", "not supported"),
    ("shape mismatch", _shape_mismatch, InputError, "QGemm", "shape mismatch"),
    ("float bias", _bias_of_wrong_type, UnsupportedError, "QLinearConv", "int32 biases"),
]


@pytest.mark.parametrize("case, edit, error, node, phrase", BROKEN, ids=[case[0] for case in BROKEN])
def test_malformed_quantized_models_name_the_node(models, tmp_path, case, edit, error, node, phrase):
    path = _edit(models["qop-pt"], tmp_path / "broken.onnx", edit)
    with pytest.raises(error) as caught:
        load_network(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and node in message and phrase in message, message
    completed = subprocess.run(
        [sys.executable, "-m", "qverify", "info", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and node in lines[0], completed.stderr


def test_zero_point_out_of_the_code_range_is_refused(tmp_path):
    """A uint8 activation whose zero point does not fit is caught when the parameters are read."""
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [
            numpy_helper.from_array(np.array(float("inf"), np.float32), "s"),
            numpy_helper.from_array(np.array(3, np.uint8), "z"),
        ],
    )
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(InputError, match="'quant'.*positive and finite"):
        load_network(path)


def test_quantize_command_writes_a_model_and_reports_accuracy(tmp_path):
    target = tmp_path / "cnn.int8.onnx"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "qverify",
            "quantize",
            str(CNN),
            "--calibration",
            "digits:train",
            "-o",
            str(target),
            "--per-channel",
            "--format",
            "qop",
            "--samples",
            "300",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert "per-channel, QOperator" in completed.stdout
    assert "accuracy on the calibration samples: float" in completed.stdout
    assert load_network(target).quantization.per_channel


@pytest.mark.parametrize(
    "arguments, phrase",
    [
        (["--calibration", "nothing.npz"], "no such data file"),
        (["--calibration", "digits:validation"], "unknown split"),
        (["--calibration", "uniform", "--samples", "0"], "--samples: 0"),
    ],
)
def test_quantize_command_refuses_bad_calibration(tmp_path, arguments, phrase):
    completed = subprocess.run(
        [sys.executable, "-m", "qverify", "quantize", str(CNN), "-o", str(tmp_path / "q.onnx"), *arguments],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert completed.returncode == 2 and phrase in completed.stderr, completed.stderr


def test_quantize_command_refuses_data_of_the_wrong_shape(tmp_path):
    np.savez(tmp_path / "data.npz", x=np.zeros((10, 5)), y=np.zeros(10, dtype=int))
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "qverify",
            "quantize",
            str(CNN),
            "-o",
            str(tmp_path / "q.onnx"),
            "--calibration",
            str(tmp_path / "data.npz"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2 and "5 values per sample, the network takes 64" in completed.stderr
