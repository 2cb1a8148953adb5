"""int8 average pooling (onnxruntime's QLinearAveragePool, and DequantizeLinear -> AveragePool ->
QuantizeLinear): the code of a window is a function of the window's sum wherever
`qverify.quant.pool8` says so, checked against onnxruntime at every sum; whole quantized conv nets
bit for bit (C, simulator, onnxruntime); the engine's verdicts against brute force through the
compiled C; pools whose code the float rounding decides, and malformed pools, refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qverify.codegen import CompiledNetwork, render_network
from qverify.errors import UnsupportedError
from qverify.network import (
    Activation,
    AffineQuantization,
    AveragePool2D,
    CodeType,
    Conv2D,
    Dense,
    MacQuant,
    Network,
    PoolQuant,
    TensorQuant,
)
from qverify.quant import ImplementationOptions, Int8Format, quantize_network, simulate
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from qverify.quant.pool8 import ambiguous_sums, pool_codes
from tests.conftest import budgeted
from tests.int8_kernels import machine_format, other_format
from tests.test_engine_oracle import seeded_instances
from tests.test_int8_oracle import _scale, _tensor, check_instance, make_instance

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

QVERIFY = [sys.executable, "-m", "qverify"]
_NP_TYPES = {CodeType.INT8: np.int8, CodeType.UINT8: np.uint8}
_ONNX_TYPES = {CodeType.INT8: TensorProto.INT8, CodeType.UINT8: TensorProto.UINT8}


def qlinear_average_pool(
    windows: np.ndarray,
    source: TensorQuant,
    target: TensorQuant,
    kernel: tuple[int, int],
    global_path: bool = False,
) -> np.ndarray:
    """onnxruntime's QLinearAveragePool of each window (rows of kernel-sized code blocks, no
    padding: one output per window, the windows side by side as channels). The image is twice the
    window's width (so that onnxruntime does not take its global-average path), or with
    `global_path` the window itself (so that it does: an integer sum times a rounded scale)."""
    width = 1 if global_path else 2
    code = source.code
    dtype = _NP_TYPES[code]
    count = len(windows)
    inits = [
        numpy_helper.from_array(np.array(source.scale, dtype=np.float32), "xs"),
        numpy_helper.from_array(np.array(source.zero_point, dtype=dtype), "xz"),
        numpy_helper.from_array(np.array(target.scale, dtype=np.float32), "ys"),
        numpy_helper.from_array(np.array(target.zero_point, dtype=dtype), "yz"),
    ]
    # a 2x-wide image so that the pool is not onnxruntime's global-average special case
    node = helper.make_node(
        "QLinearAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        kernel_shape=list(kernel),
        strides=list(kernel),
    )
    shape = [1, count, kernel[0], width * kernel[1]]
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", _ONNX_TYPES[code], shape)],
        [helper.make_tensor_value_info("y", _ONNX_TYPES[code], [1, count, 1, width])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    blocks = windows.reshape(count, kernel[0], kernel[1])
    image = (
        blocks if global_path else np.concatenate([blocks, np.full_like(blocks, source.zero_point)], axis=2)
    )
    image = image[None]
    return session.run(None, {"x": image.astype(dtype)})[0][0, :, 0, 0].astype(np.int64)


def windows_with_sums(
    rng: np.random.Generator, sums: np.ndarray, size: int, quant: TensorQuant
) -> np.ndarray:
    """For each sum S, a random window of `size` codes whose differences from the zero point sum to S
    (each difference drawn among those that leave the rest of the sum reachable)."""
    low, high = quant.code.qmin - quant.zero_point, quant.code.qmax - quant.zero_point
    rows = np.zeros((len(sums), size), dtype=np.int64)
    for row, total in zip(rows, sums):
        remaining = int(total)
        for done, position in enumerate(rng.permutation(size)):
            left = size - 1 - done  # positions still to fill after this one
            least, most = max(low, remaining - left * high), min(high, remaining - left * low)
            row[position] = int(rng.integers(least, most + 1))
            remaining -= int(row[position])
        assert remaining == 0
    return rows + quant.zero_point


def _pool_quant(
    source: TensorQuant, target: TensorQuant, divisor: int, whole_image: bool = False
) -> MacQuant:
    channels = 1
    return MacQuant(
        source,
        np.ones((channels, 1, 1, divisor), dtype=np.int64),
        np.ones(1),
        np.zeros(channels),
        target,
        False,
        pool_divisor=divisor,
        pool_global=whole_image,
    )


@pytest.mark.parametrize("code", [CodeType.INT8, CodeType.UINT8])
def test_the_code_of_a_window_is_the_rounded_mean_of_its_sum_wherever_unambiguous(code):
    """At every sum S (four random windows each, some near every rounding boundary), onnxruntime's
    code is pool8's code(S) unless pool8 calls S ambiguous; across the cases few S are."""
    rng = np.random.default_rng(11 if code is CodeType.INT8 else 12)
    checked = ambiguous_total = 0
    for case in range(8):
        kernel = ((2, 2), (3, 3), (4, 4), (2, 3))[case % 4]
        size = kernel[0] * kernel[1]
        relu_range = case % 2 == 0
        source = _tensor(rng, code, "input", relu_range=relu_range)
        target = TensorQuant(
            float(np.float32(source.scale * rng.uniform(0.4, 1.1))),
            code.qmin if relu_range else int(rng.integers(code.qmin + 20, code.qmax - 20)),
            code,
        )
        quant = _pool_quant(source, target, size)
        low = size * (code.qmin - source.zero_point)
        high = size * (code.qmax - source.zero_point)
        sums = np.repeat(np.arange(low, high + 1), 2)
        ambiguous = set(ambiguous_sums(quant, low, high, size).tolist())
        ambiguous_total += len(ambiguous)
        windows = windows_with_sums(rng, sums, size, source)
        expected = qlinear_average_pool(windows, source, target, kernel)
        clear = np.array([int(s) not in ambiguous for s in sums])
        assert np.array_equal(pool_codes(sums[clear], quant), expected[clear]), (case, source, target)
        checked += int(clear.sum())
    assert checked > 30_000 and ambiguous_total < checked / 100


@pytest.mark.parametrize("code", [CodeType.INT8, CodeType.UINT8])
def test_onnxruntimes_global_average_path_has_the_same_codes(code):
    """A kernel over the whole unpadded image sends onnxruntime to its global-average kernel (an
    integer sum, a rounded scale): pool8's exact codes at every sum, the ties of equal scales and
    the sums beside rounding boundaries included (no sum is ambiguous there)."""
    rng = np.random.default_rng(21 if code is CodeType.INT8 else 22)
    for case, kernel in enumerate(((3, 3), (4, 4), (2, 5), (2, 2))):
        size = kernel[0] * kernel[1]
        source = _tensor(rng, code, "input", relu_range=case % 2 == 0)
        scale = source.scale if case == 3 else float(np.float32(source.scale * rng.uniform(0.4, 1.1)))
        target = TensorQuant(scale, source.zero_point, code)
        quant = _pool_quant(source, target, size, whole_image=True)
        low, high = size * (code.qmin - source.zero_point), size * (code.qmax - source.zero_point)
        sums = np.repeat(np.arange(low, high + 1), 3)
        windows = windows_with_sums(rng, sums, size, source)
        expected = qlinear_average_pool(windows, source, target, kernel, global_path=True)
        assert np.array_equal(pool_codes(sums, quant), expected), (case, source, target)


def test_a_pool_with_equal_scales_is_refused_and_onnxruntime_shows_why():
    """s_in = s_out and a 2x2 window: the mean of a sum 2 is exactly half a code; onnxruntime's
    float32 sums round it either way depending on the window, so qverify refuses the pool."""
    quant_in = TensorQuant(float(np.float32(0.0123)), -128, CodeType.INT8)
    rng = np.random.default_rng(3)
    ties = np.repeat(np.arange(2, 1020, 4), 40)  # sums whose exact mean is a half code
    codes = qlinear_average_pool(windows_with_sums(rng, ties, 4, quant_in), quant_in, quant_in, (2, 2))
    split = [s for s in np.unique(ties) if len(set(codes[ties == s].tolist())) == 2]
    assert split, "onnxruntime rounds every tie one way"
    assert set(split) <= set(ambiguous_sums(_pool_quant(quant_in, quant_in, 4), 0, 1020, 4).tolist())
    net = Network(
        (
            Conv2D(np.ones((1, 1, 1, 1)), np.zeros(1), Activation.RELU, (1, 4, 4)),
            AveragePool2D((1, 4, 4), (2, 2), (2, 2)),  # (a window over the whole image is exact)
            Dense(np.ones((1, 4)), np.zeros(1), Activation.IDENTITY),
        ),
        quantization=AffineQuantization(
            quant_in,
            (
                MacQuant(quant_in, np.ones((1, 1, 1, 1)), np.ones(1), np.zeros(1), quant_in, False, "conv"),
                PoolQuant(quant_in, quant_in, "pool"),
                MacQuant(quant_in, np.ones((1, 4)), np.ones(1), np.zeros(1), quant_in, False, "dense"),
            ),
        ),
    )
    with pytest.raises(UnsupportedError, match="float rounding"):
        quantize_network(net, ImplementationOptions(Int8Format()))


def _conv_pool_net(seed: int, count_include_pad: bool) -> Network:
    rng = np.random.default_rng(seed)
    conv = Conv2D(rng.normal(0, 0.7, (3, 1, 2, 2)), rng.normal(0, 0.2, 3), Activation.RELU, (1, 9, 9))
    pads = (1, 1, 1, 1) if count_include_pad else (0, 0, 0, 0)
    pool = AveragePool2D(conv.output_shape, (3, 3), (3, 3), pads, count_include_pad=count_include_pad)
    dense = Dense(rng.normal(0, 0.5, (4, pool.n_out)), rng.normal(0, 0.1, 4), Activation.IDENTITY)
    return Network((conv, pool, dense), name="conv-avgpool")


@pytest.mark.parametrize("quant_format", [QuantFormat.QOP, QuantFormat.QDQ])
@pytest.mark.parametrize("activations", [CodeType.INT8, CodeType.UINT8])
def test_conv_pool_networks_are_bit_exact_against_onnxruntime(tmp_path, quant_format, activations):
    """Conv + ReLU + average pool (padded, counted) + dense, quantized by onnxruntime's quantizer, in
    the variant this machine's onnxruntime computes (the probe: int8 with AVX-VNNI, int8-x86 on AVX2
    alone): where qverify accepts the pool (QOp: its own output scale), C, simulator and onnxruntime
    agree on 1,500 inputs; where it refuses (QDQ: the pool shares its input's scale, so exact ties),
    the refusal names the float rounding. int8-x86 refuses a convolution whose weight pairs could
    saturate (MLAS's convolution kernels pair them in an order not modelled): then the same network
    quantized with --reduce-range (7-bit weights, no pair saturates) is checked in its place. The
    other variant's C equals its simulator."""
    accepted = 0
    for seed in range(4):
        net = _conv_pool_net(seed, count_include_pad=seed % 2 == 0)
        rng = np.random.default_rng(100 + seed)
        calibration, x = rng.uniform(0, 1, (100, 81)), rng.uniform(-0.2, 1.2, (1500, 81))
        settings = QuantizeSettings(quant_format, False, activations)
        model = _machine_model(net, calibration, settings, tmp_path / f"q{seed}.onnx", x)
        if model is None:
            continue
        accepted += 1
        quantized, path, qnet = model
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        expected = np.concatenate(
            [session.run(None, {"input": row.reshape(1, 1, 9, 9).astype(np.float32)})[0] for row in x]
        )
        simulated = simulate(qnet, qnet.input_quant.quantize(x)).outputs
        assert np.array_equal(qnet.output_quant.dequantize(simulated), expected), machine_format().describe()
        with contextlib.suppress(UnsupportedError):  # int8-x86's refusal of the convolution, as above
            _c_equals_simulator(quantized, other_format(), x, tmp_path / f"other{seed}")
    if quant_format is QuantFormat.QOP:
        assert accepted >= 3, accepted


def _machine_model(
    net: Network, calibration: np.ndarray, settings: QuantizeSettings, path: Path, x: np.ndarray
):
    """(quantized network, its file, the network in this machine's variant once its C equals its
    simulator on `x`); None where qverify refuses the pool (float rounding). A convolution int8-x86
    refuses (pairs that could saturate) is quantized again with --reduce-range."""
    quantized = quantize_with_onnxruntime(net, calibration, settings, path)
    try:
        return quantized, path, _c_equals_simulator(quantized, machine_format(), x, path.with_suffix(".c"))
    except UnsupportedError as error:
        if "pairing in convolutions is not modelled" in str(error) and not settings.reduce_range:
            reduced = dataclasses.replace(settings, reduce_range=True)
            return _machine_model(net, calibration, reduced, path.with_name(f"{path.stem}r.onnx"), x)
        assert "float rounding" in str(error), error
        return None


def _c_equals_simulator(quantized: Network, number: Int8Format, x: np.ndarray, folder: Path):
    """The quantized network in `number`, once its compiled C gave its simulator's codes on `x`."""
    qnet = quantize_network(quantized, ImplementationOptions(number))
    codes = qnet.input_quant.quantize(x)
    compiled = CompiledNetwork(render_network(qnet), folder, True)
    assert np.array_equal(compiled.run(codes).outputs, simulate(qnet, codes).outputs), number
    return qnet


def random_pool_network(rng: np.random.Generator) -> Network:
    """A random int8 model on a 1x1x2 image: conv 1x1 -> 2..3 channels with the ReLU clamp, an
    average pool over the row (kernel 1x2, or 1x3 with one counted pad), dense to 2..3 outputs;
    pools that pool8 refuses are drawn again."""
    while True:
        code = CodeType.INT8 if rng.random() < 0.5 else CodeType.UINT8
        channels, n_out = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        quant_in = _tensor(rng, code, "input")
        hidden = _tensor(rng, code, "hidden", relu_range=True)
        pooled = TensorQuant(
            float(np.float32(hidden.scale * rng.uniform(0.4, 1.0))), code.qmin, code, "pooled"
        )
        output = _tensor(rng, code, "output")
        weights = rng.integers(-127, 128, size=(channels, 1, 1, 1))
        scale = np.array([_scale(rng, 0.002, 0.05)])
        bias = rng.integers(-3000, 3000, size=channels)
        conv = Conv2D(weights * scale[0], bias * quant_in.scale * scale[0], Activation.RELU, (1, 1, 2))
        if rng.random() < 0.5:
            pool = AveragePool2D(conv.output_shape, (1, 2), (1, 1))
        else:
            pool = AveragePool2D(conv.output_shape, (1, 3), (1, 1), (0, 1, 0, 0), count_include_pad=True)
        dense_w = rng.integers(-127, 128, size=(n_out, pool.n_out))
        dense_scale = np.array([_scale(rng, 0.002, 0.05)])
        dense_b = rng.integers(-3000, 3000, size=n_out)
        dense = Dense(dense_w * dense_scale[0], dense_b * pooled.scale * dense_scale[0], Activation.IDENTITY)
        quants = (
            MacQuant(quant_in, weights, scale, bias, hidden, True, "conv"),
            PoolQuant(hidden, pooled, "pool"),
            MacQuant(pooled, dense_w, dense_scale, dense_b, output, False, "dense"),
        )
        net = Network(
            (conv, pool, dense), name="int8-pool-oracle", quantization=AffineQuantization(quant_in, quants)
        )
        try:
            quantize_network(net, ImplementationOptions(Int8Format()))
        except UnsupportedError:
            continue
        return net


FAST_SEEDS = range(12)
SLOW_SEEDS = range(12, 40)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    make = functools.partial(make_instance, build=random_pool_network, tflite_share=0.0)
    return seeded_instances(
        tmp_path_factory.mktemp("int8-pool-oracle"), lambda seed, path: make(seed + 800, path)
    )


@pytest.mark.parametrize("seed", FAST_SEEDS)
def test_int8_pool_oracle(cases, seed):
    """The engine's verdict equals the compiled C's on every point of the box; an UNSAFE replays."""
    check_instance(cases(seed), budgeted())


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_int8_pool_oracle_slow(cases, seed):
    check_instance(cases(seed), budgeted())


def test_pool_oracle_cases_cover_both_verdicts(cases):
    truths = [cases(seed).truth for seed in FAST_SEEDS]
    assert truths.count("SAFE") >= 3 and truths.count("UNSAFE") >= 3


# -- hostile models -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qop_model(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("int8-pool-hostile")
    for seed in range(10):
        path = directory / "q.onnx"
        rng = np.random.default_rng(seed)
        quantized = quantize_with_onnxruntime(
            _conv_pool_net(seed, True), rng.uniform(0, 1, (100, 81)), QuantizeSettings(QuantFormat.QOP), path
        )
        try:
            quantize_network(quantized, ImplementationOptions(Int8Format()))
        except UnsupportedError:
            continue
        (directory / "p.vnnlib").write_text(
            "".join(f"(declare-const X_{i} Real)\n" for i in range(81))
            + "".join(f"(declare-const Y_{i} Real)\n" for i in range(4))
            + "".join(f"(assert (>= X_{i} 0.4))\n(assert (<= X_{i} 0.5))\n" for i in range(81))
            + "(assert (>= Y_0 100.0))\n"
        )
        return path
    raise AssertionError("no accepted model")


def _pool_node(model: onnx.ModelProto) -> onnx.NodeProto:
    return next(node for node in model.graph.node if node.op_type == "QLinearAveragePool")


def _set_attribute(node: onnx.NodeProto, name: str, value) -> None:
    for index, attribute in enumerate(node.attribute):
        if attribute.name == name:
            del node.attribute[index]
            break
    node.attribute.append(helper.make_attribute(name, value))


def _uncounted_pads(model):
    _set_attribute(_pool_node(model), "count_include_pad", 0)


def _channels_last(model):
    _set_attribute(_pool_node(model), "channels_last", 1)


def _negative_output_scale(model):
    node = _pool_node(model)
    model.graph.initializer.append(numpy_helper.from_array(np.array(-0.5, dtype=np.float32), "bad_scale"))
    node.input[3] = "bad_scale"


def _ceil_mode(model):
    _set_attribute(_pool_node(model), "ceil_mode", 1)


HOSTILE = {
    "uncounted-pads": (_uncounted_pads, "different divisors"),
    "channels-last": (_channels_last, "channels_last"),
    "negative-output-scale": (_negative_output_scale, "-0.5"),
    "ceil-mode": (_ceil_mode, "ceil_mode"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_pool_model_is_one_error_line(qop_model, name):
    corrupt, text = HOSTILE[name]
    proto = onnx.load(qop_model)
    corrupt(proto)
    bad = qop_model.with_name(f"{name}.onnx")
    onnx.save(proto, bad)
    prop = str(qop_model.parent / "p.vnnlib")
    done = subprocess.run(
        [*QVERIFY, "verify", str(bad), "--property", prop, "--format", "int8"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, (name, done.stdout[-400:], done.stderr[-1500:])
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], (name, done.stderr)


def test_the_pool_model_itself_verifies(qop_model):
    prop = str(qop_model.parent / "p.vnnlib")
    done = subprocess.run(
        [*QVERIFY, "verify", str(qop_model), "--property", prop, "--format", "int8"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and "SAFE" in done.stdout, (done.stdout[-800:], done.stderr[-800:])
