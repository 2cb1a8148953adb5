"""int8 models against onnxruntime, bit for bit: the generated C, the simulator and onnxruntime's CPU
execution of the same quantized ONNX file give the same output codes on many inputs.

Models are quantized by onnxruntime's own quantizer (`qverify quantize`'s code path): the digits
CNN per tensor and per channel, QOperator and QDQ, and random conv/dense configurations.

Where onnxruntime departs from the ONNX semantics it is said, and checked: on x86 CPUs without
AVX-VNNI, onnxruntime runs QDQ models with uint8 activations (it converts int8 codes by adding 128)
and multiplies uint8 x int8 with `vpmaddubsw`, which adds two neighbouring products into an int16
*with saturation*. The models below are compared in the variant this machine's onnxruntime computes
(`tests/int8_kernels.py`: the probe), which for QOperator int8 models (int8 x int8 kernels) and
`--reduce-range` ones is the exact int32 sum on every CPU; for the QDQ digits CNN, whose convolution
int8-x86 refuses, the test shows that every difference between the exact sums and onnxruntime is
explained by that saturation (an emulation of it reproduces onnxruntime on every input) and that
`--reduce-range` (7-bit weights) removes the differences.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from qverify.codegen import CompiledNetwork, render_network
from qverify.io import load_network
from qverify.network import Activation, Conv2D, Dense, MaxPool2D, Network
from qverify.quant import ImplementationOptions, Int8Format, Int8Kernel, quantize_network, simulate
from qverify.quant.affine import apply_thresholds
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from tests.int8_kernels import HERE, machine_format

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.onnx"
N_INPUTS = 10_000


def onnxruntime_outputs(path: Path, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    rows = x.astype(np.float32).reshape((-1, *shape))
    return np.concatenate([session.run(None, {name: row[None]})[0] for row in rows]).reshape(len(x), -1)


def probe_inputs(rng: np.random.Generator, n_inputs: int) -> np.ndarray:
    """Mostly the calibration range [0, 1], a fifth beyond it (saturating codes), a fifth at the ends."""
    x = rng.uniform(0, 1, size=(N_INPUTS, n_inputs))
    x[: N_INPUTS // 5] = rng.uniform(-0.5, 1.5, size=(N_INPUTS // 5, n_inputs))
    x[N_INPUTS // 5 : 2 * N_INPUTS // 5] = rng.choice([0.0, 1.0], size=(N_INPUTS // 5, n_inputs))
    return x


def check_bit_exact(
    quantized: Network, path: Path, x: np.ndarray, tmp_path: Path, number: Int8Format | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """C == simulator on every input, in `number` (default: this machine's variant); returns (qverify's
    output codes, onnxruntime's dequantized outputs)."""
    qnet = quantize_network(quantized, ImplementationOptions(number or machine_format()))
    codes = qnet.input_quant.quantize(x)
    simulated = simulate(qnet, codes).outputs
    compiled = CompiledNetwork(render_network(qnet), tmp_path / "c", True)
    assert np.array_equal(compiled.run(codes).outputs, simulated)
    real_in = compiled.run(x, raw=False).outputs  # the C's own QuantizeLinear/DequantizeLinear
    shape = quantized.layers[0].input_shape
    expected = onnxruntime_outputs(path, x, tuple(shape) if len(shape) == 3 else (quantized.n_inputs,))
    assert np.array_equal(real_in.astype(np.float32), qnet.output_quant.dequantize(simulated))
    return simulated, expected


def _quantize(
    net: Network, tmp_path: Path, name: str, settings: QuantizeSettings, seed: int
) -> tuple[Network, Path]:
    calibration = np.random.default_rng(seed).uniform(0, 1, size=(200, net.n_inputs))
    path = tmp_path / f"{name}.onnx"
    return quantize_with_onnxruntime(net, calibration, settings, path), path


@pytest.fixture(scope="module")
def cnn() -> Network:
    return load_network(CNN)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_digits_cnn_qoperator_is_bit_exact(tmp_path, cnn, per_channel):
    quantized, path = _quantize(cnn, tmp_path, "cnn", QuantizeSettings(QuantFormat.QOP, per_channel), 1)
    simulated, expected = check_bit_exact(
        quantized, path, probe_inputs(np.random.default_rng(2), 64), tmp_path
    )
    qnet = quantize_network(quantized, ImplementationOptions(machine_format()))
    assert np.array_equal(qnet.output_quant.dequantize(simulated), expected)


def saturating_outputs(qnet, codes: np.ndarray) -> np.ndarray:
    """onnxruntime's AVX2 uint8 x int8 arithmetic for dense layers and convolutions whose im2col
    order is the taps' order (one input channel, no padding): products of uint8 codes (int8 + 128)
    and weights, added in neighbouring pairs into int16 with saturation, then the zero-point
    correction in int32."""
    for layer in qnet.layers:
        if not layer.is_mac:
            windows = layer.source.windows()
            codes = np.where(windows.valid[None], codes[:, windows.inputs], -(1 << 30)).max(axis=2)
            continue
        tables, taps = layer.int8, layer.source.taps()
        if isinstance(layer.source, Conv2D):
            assert layer.source.input_shape[0] == 1 and not any(layer.source.pads)
        unsigned = codes + 128
        weights = layer.tap_weights().astype(np.int64)
        products = unsigned[:, taps.inputs] * weights[None]
        if products.shape[2] % 2:
            products = np.concatenate([products, np.zeros_like(products[:, :, :1])], axis=2)
        pairs = np.clip(products[:, :, 0::2] + products[:, :, 1::2], -32768, 32767)
        acc = (
            layer.expanded_bias()[None]
            + pairs.sum(axis=2)
            - (tables.input_zero + 128) * weights.sum(axis=1)[None]
        )
        table = tables.table if tables.table.shape[0] == 1 else tables.table[layer.source.channel_of()]
        codes = apply_thresholds(acc, table, tables.code.qmin)
    return codes


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_digits_cnn_qdq_differs_from_onnxruntime_only_by_int16_saturation(tmp_path, cnn, per_channel):
    quantized, path = _quantize(cnn, tmp_path, "cnn", QuantizeSettings(QuantFormat.QDQ, per_channel), 1)
    x = probe_inputs(np.random.default_rng(3), 64)
    simulated, expected = check_bit_exact(quantized, path, x, tmp_path, Int8Format())
    qnet = quantize_network(quantized, ImplementationOptions(Int8Format()))
    exact = qnet.output_quant.dequantize(simulated)
    differing = np.any(exact != expected, axis=1)
    if HERE is Int8Kernel.EXACT:
        assert not differing.any()
        return
    emulated = qnet.output_quant.dequantize(saturating_outputs(qnet, qnet.input_quant.quantize(x)))
    assert np.array_equal(emulated, expected), "onnxruntime = exact products with int16 pair saturation"
    print(
        f"\nQDQ {'per-channel' if per_channel else 'per-tensor'}: onnxruntime differs from the exact int8 "
        f"model on {int(differing.sum())} of {N_INPUTS} inputs, each explained by int16 saturation"
    )


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_digits_cnn_qdq_with_reduced_range_is_bit_exact(tmp_path, cnn, per_channel):
    settings = QuantizeSettings(QuantFormat.QDQ, per_channel, reduce_range=True)
    quantized, path = _quantize(cnn, tmp_path, "cnn", settings, 1)
    simulated, expected = check_bit_exact(
        quantized, path, probe_inputs(np.random.default_rng(4), 64), tmp_path
    )
    qnet = quantize_network(quantized, ImplementationOptions(machine_format()))
    assert np.array_equal(qnet.output_quant.dequantize(simulated), expected)


def random_network(seed: int) -> Network:
    """A small random CNN or MLP: convolutions with padding, strides, groups; pools; dense layers."""
    rng = np.random.default_rng(seed)
    kind = seed % 3
    if kind == 0:
        conv = Conv2D(
            rng.normal(0, 0.6, (4, 2, 3, 3)),
            rng.normal(0, 0.2, 4),
            Activation.RELU,
            (2, 7, 7),
            (1, 1),
            (1, 1, 1, 1),
        )
        pool = MaxPool2D((4, 7, 7), (2, 2), (2, 2))
        dense = Dense(rng.normal(0, 0.3, (5, 36)), rng.normal(0, 0.2, 5), Activation.IDENTITY)
        return Network((conv, pool, dense), name=f"cnn{seed}")
    if kind == 1:
        first = Conv2D(
            rng.normal(0, 0.6, (4, 2, 3, 3)),
            rng.normal(0, 0.2, 4),
            Activation.RELU,
            (4, 6, 6),
            (2, 2),
            (0, 0, 1, 1),
            groups=2,
        )
        second = Conv2D(
            rng.normal(0, 0.6, (3, 4, 1, 1)), rng.normal(0, 0.2, 3), Activation.IDENTITY, (4, 3, 3)
        )
        dense = Dense(rng.normal(0, 0.3, (4, 27)), rng.normal(0, 0.2, 4), Activation.IDENTITY)
        return Network((first, second, dense), name=f"grouped{seed}")
    sizes = (12, 16, 8, 3)
    layers = [
        Dense(
            rng.normal(0, 0.5, (n_out, n_in)),
            rng.normal(0, 0.2, n_out),
            Activation.RELU if i < 2 else Activation.IDENTITY,
        )
        for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes))
    ]
    return Network(tuple(layers), name=f"mlp{seed}")


def _random_configuration(tmp_path: Path, seed: int) -> None:
    net = random_network(seed)
    settings = [
        QuantizeSettings(QuantFormat.QOP, per_channel=seed % 2 == 0),
        QuantizeSettings(QuantFormat.QDQ, per_channel=seed % 2 == 1, reduce_range=True),
    ]
    for index, setting in enumerate(settings):
        quantized, path = _quantize(net, tmp_path / f"{index}", f"{net.name}", setting, seed)
        simulated, expected = check_bit_exact(
            quantized, path, probe_inputs(np.random.default_rng(seed), net.n_inputs), tmp_path / f"{index}"
        )
        qnet = quantize_network(quantized, ImplementationOptions(machine_format()))
        assert np.array_equal(qnet.output_quant.dequantize(simulated), expected), setting


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_configurations_are_bit_exact(tmp_path, seed):
    (tmp_path / "0").mkdir()
    (tmp_path / "1").mkdir()
    _random_configuration(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 12))
def test_more_random_configurations_are_bit_exact(tmp_path, seed):
    (tmp_path / "0").mkdir()
    (tmp_path / "1").mkdir()
    _random_configuration(tmp_path, seed)


def test_tflite_requantization_c_equals_simulator(tmp_path, cnn):
    quantized, _ = _quantize(cnn, tmp_path, "cnn", QuantizeSettings(QuantFormat.QOP, True), 1)
    qnet = quantize_network(
        quantized, replace(ImplementationOptions(), number=Int8Format.parse("int8-tflite"))
    )
    codes = qnet.input_quant.quantize(probe_inputs(np.random.default_rng(5), 64))
    compiled = CompiledNetwork(render_network(qnet), tmp_path / "c", True)
    assert np.array_equal(compiled.run(codes).outputs, simulate(qnet, codes).outputs)
