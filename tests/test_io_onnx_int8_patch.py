"""Changed int8 integers written back into the quantized ONNX model they came from (QDQ and QOperator,
per tensor and per channel): the file reads back as exactly the changed integers, everything else as
before, and onnxruntime runs a QOperator file exactly like qverify's simulator of the changed model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from qverify.errors import InputError
from qverify.io import load_network
from qverify.io.onnx_int8_patch import write_int8_changes
from qverify.network import Activation, Dense, MacQuant, Network
from qverify.quant import ImplementationOptions, Int8Format, quantize_network, simulate
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from tests.test_int8_onnxruntime import onnxruntime_outputs


def _float_network() -> Network:
    rng = np.random.default_rng(11)
    return Network(
        (
            Dense(rng.uniform(-1, 1, (4, 3)), rng.uniform(-0.2, 0.2, 4), Activation.RELU),
            Dense(rng.uniform(-1, 1, (2, 4)), rng.uniform(-0.2, 0.2, 2), Activation.IDENTITY),
        ),
        name="patch",
    )


def _changed(net: Network) -> Network:
    """The last layer with one weight moved by +3 and one bias by -40 (still int8 / int32)."""
    layers = list(net.quantization.layers)
    last: MacQuant = layers[-1]
    weights, bias = np.array(last.weights), np.array(last.bias)
    weights[1, 2] = int(np.clip(weights[1, 2] + 3, -127, 127))
    bias[0] -= 40
    layers[-1] = replace(last, weights=weights, bias=bias)
    return replace(net, quantization=replace(net.quantization, layers=tuple(layers)))


@pytest.mark.parametrize("quant_format", [QuantFormat.QDQ, QuantFormat.QOP], ids=["qdq", "qop"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_changed_integers_read_back_exactly(tmp_path, quant_format, per_channel):
    source = tmp_path / "model.onnx"
    samples = np.random.default_rng(0).uniform(0, 1, (300, 3))
    original = quantize_with_onnxruntime(
        _float_network(), samples, QuantizeSettings(quant_format, per_channel), source
    )
    changed = _changed(original)
    written = load_network(write_int8_changes(source, original, changed, tmp_path / "changed.onnx"))
    for got, want, before in zip(
        written.quantization.layers, changed.quantization.layers, original.quantization.layers
    ):
        assert np.array_equal(got.weights, want.weights) and np.array_equal(got.bias, want.bias)
        assert np.array_equal(got.weight_scales, before.weight_scales)
        assert got.output.same_as(before.output)
    if quant_format is QuantFormat.QOP:  # int8 x int8 kernels: onnxruntime is exact on every CPU
        qnet = quantize_network(changed, ImplementationOptions(Int8Format()))
        x = np.random.default_rng(1).uniform(0, 1, (500, 3))
        simulated = qnet.output_quant.dequantize(simulate(qnet, qnet.input_quant.quantize(x)).outputs)
        assert np.array_equal(onnxruntime_outputs(tmp_path / "changed.onnx", x, (3,)), simulated)


def test_a_file_that_is_not_the_models_source_is_refused(tmp_path):
    samples = np.random.default_rng(0).uniform(0, 1, (300, 3))
    original = quantize_with_onnxruntime(
        _float_network(), samples, QuantizeSettings(QuantFormat.QOP), tmp_path / "a.onnx"
    )
    other_net = Network(
        (Dense(np.full((4, 3), 0.5), np.zeros(4), Activation.RELU),) + _float_network().layers[1:], name="b"
    )
    quantize_with_onnxruntime(other_net, samples, QuantizeSettings(QuantFormat.QOP), tmp_path / "b.onnx")
    changed = replace(
        original,
        quantization=replace(
            original.quantization,
            layers=(
                replace(original.quantization.layers[0], bias=original.quantization.layers[0].bias + 1),
                *original.quantization.layers[1:],
            ),
        ),
    )
    with pytest.raises(InputError, match="int8 initializers hold its weights"):
        write_int8_changes(tmp_path / "b.onnx", original, changed, tmp_path / "c.onnx")
