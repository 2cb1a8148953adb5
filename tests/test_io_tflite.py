"""TFLite models in: int8 graphs built with the flatbuffers API and the CIFAR-10 zoo's small files
read into the IR, simulator = generated C = the LiteRT interpreter bit for bit (its reference-kernel
resolver: `int8-tflite`; its default resolver with the XNNPACK delegate: `int8-xnnpack`), and the
hostile set (truncated, wrong magic, an unread operator, a tensor index out of range, a 2 GB
buffer) refused with one `error:` line and exit 2. No TensorFlow is imported."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qverify.codegen import CompiledNetwork, render_network
from qverify.errors import InputError, UnsupportedError
from qverify.io import load_network
from qverify.io.tflite_reader import read_tflite
from qverify.network import JoinQuant
from qverify.network.evaluate import evaluate
from qverify.quant import ImplementationOptions, quantize_network, simulate
from qverify.quant.affine import Int8Format
from tests import tflite_builder as tb
from tests.conftest import ROOT

litert = pytest.importorskip(
    "ai_edge_litert.interpreter", reason="ai-edge-litert (the LiteRT interpreter) is not installed"
)

ZOO = ROOT / "benchmarks" / "cifar10" / "models"
RESOLVERS = {"int8-tflite": "BUILTIN_REF", "int8-xnnpack": "AUTO"}
INPUTS = 4000  # per model and resolver (the figure)
C_INPUTS = 1000  # through the compiled C (gcc), the simulator's first ones


def _interpreter(path: Path, resolver: str):
    kind = getattr(litert.OpResolverType, resolver)
    interpreter = litert.Interpreter(
        model_path=str(path),
        num_threads=1,
        experimental_op_resolver_type=kind,
        experimental_preserve_all_tensors=True,
    )
    interpreter.allocate_tensors()
    return interpreter


def _interpreter_codes(path: Path, resolver: str, codes: np.ndarray, softmax: bool) -> np.ndarray:
    """The interpreter's output codes (the SOFTMAX's input where qverify drops the final SOFTMAX)."""
    interpreter = _interpreter(path, resolver)
    feed = interpreter.get_input_details()[0]
    fetch = interpreter.get_output_details()[0]["index"]
    if softmax:
        fetch = [op for op in interpreter._get_ops_details() if op["op_name"] == "SOFTMAX"][-1]["inputs"][0]
    rows = []
    for row in codes:
        interpreter.set_tensor(feed["index"], row.reshape(feed["shape"]).astype(feed["dtype"]))
        interpreter.invoke()
        rows.append(interpreter.get_tensor(fetch).reshape(-1).copy())
    return np.array(rows).astype(np.int64)


def _check_bit_exact(
    path: Path, label: str, tmp_path: Path, count: int = INPUTS, c_count: int = C_INPUTS
) -> None:
    net = load_network(path)
    qnet = quantize_network(net, ImplementationOptions(number=Int8Format.parse(label)))
    rng = np.random.default_rng(44)
    codes = rng.integers(-128, 128, (count, net.n_inputs)).astype(np.int64)
    simulated = simulate(qnet, codes).outputs
    expected = _interpreter_codes(path, RESOLVERS[label], codes, net.output_softmax)
    mismatches = int((simulated != expected).any(axis=1).sum())
    assert mismatches == 0, f"{path.name} {label}: {mismatches} of {count} inputs differ from the interpreter"
    compiled = CompiledNetwork(render_network(qnet), tmp_path / "c", True).run(codes[:c_count])
    assert np.array_equal(np.asarray(compiled.outputs), simulated[:c_count])


# -- models built here -----------------------------------------------------------------------------


def _scale(rng, fan_in: int, in_scale: float, channels: int):
    weight_scales = rng.uniform(0.002, 0.02, channels).astype(np.float32)
    out = float(in_scale * weight_scales.mean() * 127 * np.sqrt(fan_in) / 30)
    return weight_scales, out


def _conv_weights(rng, shape):
    return rng.integers(-127, 128, shape).astype(np.int8)


def _graph_model(rng, with_mean: bool) -> bytes:
    """PAD, CONV_2D (RELU6), DEPTHWISE_CONV_2D (RELU), CONV_2D 1x1, ADD (RELU), MAX_POOL_2D,
    CONCATENATION, then MEAN + RESHAPE (or TRANSPOSE + RESHAPE), FULLY_CONNECTED."""
    m = tb.ModelBuilder()
    s_in = 1 / 255
    x = m.tensor((1, 6, 6, 3), tb.INT8, s_in, -128)
    padded = m.tensor((1, 8, 8, 3), tb.INT8, s_in, -128)
    tb.pad(m, x, [[0, 0], [1, 1], [1, 1], [0, 0]], padded)
    ws, s1 = _scale(rng, 27, s_in, 4)
    t1 = m.tensor((1, 6, 6, 4), tb.INT8, s1, -128)
    tb.conv(
        m,
        padded,
        _conv_weights(rng, (4, 3, 3, 3)),
        ws,
        rng.integers(-500, 500, 4),
        t1,
        padding=tb.VALID,
        act=tb.ACT.RELU6,
    )
    ws, s2 = _scale(rng, 9, s1, 4)
    t2 = m.tensor((1, 6, 6, 4), tb.INT8, s2, -128)
    tb.depthwise(m, t1, _conv_weights(rng, (1, 3, 3, 4)), ws, rng.integers(-500, 500, 4), t2, act=tb.ACT.RELU)
    ws, s3 = _scale(rng, 4, s2, 4)
    t3 = m.tensor((1, 6, 6, 4), tb.INT8, s3, 5)
    tb.conv(m, t2, _conv_weights(rng, (4, 1, 1, 4)), ws, rng.integers(-500, 500, 4), t3)
    s4 = max(s1, s3) * 1.3
    t4 = m.tensor((1, 6, 6, 4), tb.INT8, s4, -128)
    tb.add(m, t1, t3, t4, act=tb.ACT.RELU)
    t5 = m.tensor((1, 3, 3, 4), tb.INT8, s4, -128)
    tb.pool(m, tb.OP.MAX_POOL_2D, t4, t5)
    ws, _ = _scale(rng, 4, s4, 4)
    t5b = m.tensor((1, 3, 3, 4), tb.INT8, s4, -128)
    tb.conv(m, t5, _conv_weights(rng, (4, 1, 1, 4)), ws, rng.integers(-500, 500, 4), t5b, act=tb.ACT.RELU)
    t6 = m.tensor((1, 3, 3, 8), tb.INT8, s4, -128)
    tb.concat(m, (t5, t5b), t6)
    if with_mean:
        s7 = s4 * 0.7
        t7 = m.tensor((1, 1, 1, 8), tb.INT8, s7, -100)
        tb.mean(m, t6, t7)
        flat = m.tensor((1, 8), tb.INT8, s7, -100)
        tb.reshape(m, t7, flat)
        fan = 8
    else:
        s7 = s4
        t7 = m.tensor((1, 8, 3, 3), tb.INT8, s7, -128)
        tb.transpose(m, t6, (0, 3, 1, 2), t7)
        flat = m.tensor((1, 72), tb.INT8, s7, -128)
        tb.reshape(m, t7, flat)
        fan = 72
    ws, s9 = _scale(rng, fan, s7, 5)
    out = m.tensor((1, 5), tb.INT8, s9, 3)
    tb.dense(m, flat, rng.integers(-127, 128, (5, fan)), ws, rng.integers(-2000, 2000, 5), out)
    m.inputs, m.outputs = (x,), (out,)
    return m.finish()


def _average_pool_model(rng) -> bytes:
    """CONV_2D, AVERAGE_POOL_2D (VALID: every window counts 4 positions), FULLY_CONNECTED (RELU)."""
    m = tb.ModelBuilder()
    s_in = 0.02
    x = m.tensor((1, 4, 4, 2), tb.INT8, s_in, 7)
    ws, s1 = _scale(rng, 18, s_in, 3)
    t1 = m.tensor((1, 4, 4, 3), tb.INT8, s1, -20)
    tb.conv(m, x, _conv_weights(rng, (3, 3, 3, 2)), ws, rng.integers(-500, 500, 3), t1)
    t2 = m.tensor((1, 2, 2, 3), tb.INT8, s1, -20)
    tb.pool(m, tb.OP.AVERAGE_POOL_2D, t1, t2)
    flat = m.tensor((1, 12), tb.INT8, s1, -20)
    tb.reshape(m, t2, flat)
    ws, s3 = _scale(rng, 12, s1, 4)
    out = m.tensor((1, 4), tb.INT8, s3, -128)
    tb.dense(m, flat, rng.integers(-127, 128, (4, 12)), ws, rng.integers(-500, 500, 4), out, act=tb.ACT.RELU)
    m.inputs, m.outputs = (x,), (out,)
    return m.finish()


BUILT = {
    "graph-mean": (lambda rng: _graph_model(rng, True), ("int8-tflite",)),
    "graph": (lambda rng: _graph_model(rng, False), ("int8-tflite", "int8-xnnpack")),
    "average-pool": (_average_pool_model, ("int8-tflite",)),
}


@pytest.mark.parametrize(
    "name,label", [(name, label) for name, (_, labels) in BUILT.items() for label in labels]
)
def test_built_models_are_bit_exact_with_the_interpreter(name, label, tmp_path):
    make, _ = BUILT[name]
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(make(np.random.default_rng(7)))
    net = read_tflite(path)
    assert net.quantization is not None and net.quantization.model_format == "int8-tflite"
    if name.startswith("graph"):
        assert not net.is_chain and any(isinstance(q, JoinQuant) for q in net.quantization.layers)
    _check_bit_exact(path, label, tmp_path)


# -- the zoo's small files -------------------------------------------------------------------------

ZOO_REFERENCE = ("squeeze", "keras_cnn", "resnet2b", "resnet4b", "mbv2s", "lenet5")  # 4,000 inputs each: slow
XNNPACK_ZOO = ("keras_cnn", "lenet5", "resnet2b", "mbv2s")  # no MEAN (not modelled under XNNPACK)


@pytest.mark.slow
@pytest.mark.parametrize("family", ZOO_REFERENCE)
def test_zoo_files_are_bit_exact_with_the_reference_kernels(family, tmp_path):
    _check_bit_exact(ZOO / f"{family}.int8.tflite", "int8-tflite", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("family", XNNPACK_ZOO)
def test_zoo_files_are_bit_exact_with_the_default_delegate(family, tmp_path):
    _check_bit_exact(ZOO / f"{family}.int8.tflite", "int8-xnnpack", tmp_path)


@pytest.mark.parametrize("label", RESOLVERS)
def test_a_zoo_file_quick(label, tmp_path):
    """The cheap case of the two above, run by `make test`: keras_cnn (CONV_2D, FULLY_CONNECTED, a
    dropped SOFTMAX) on 500 inputs per resolver."""
    _check_bit_exact(ZOO / "keras_cnn.int8.tflite", label, tmp_path, count=500, c_count=100)


def test_the_input_is_the_files_nhwc_order_and_the_softmax_is_dropped():
    net = read_tflite(ZOO / "keras_cnn.int8.tflite")
    assert net.image_shape == (32, 32, 3) and net.output_softmax and net.notes
    first = net.layers[0]
    assert first.describe() == "permute 3072 -> 3x32x32"
    # file position (h, w, c) -> IR position c*H*W + h*W + w
    h, w, c = 5, 7, 2
    assert first.order[c * 32 * 32 + h * 32 + w] == (h * 32 + w) * 3 + c


def test_dynamic_range_file_is_its_float_network_with_a_note():
    net = read_tflite(ZOO / "lenet5.dynamic.tflite")
    assert net.quantization is None and any("dynamic-range" in note for note in net.notes)
    interpreter = _interpreter(ZOO / "lenet5.dynamic.tflite", "BUILTIN_REF")
    feed = interpreter.get_input_details()[0]
    fetch = [op for op in interpreter._get_ops_details() if op["op_name"] == "SOFTMAX"][-1]["inputs"][0]
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (20, net.n_inputs)).astype(np.float32)
    for row in x:
        interpreter.set_tensor(feed["index"], row.reshape(feed["shape"]))
        interpreter.invoke()
        logits = interpreter.get_tensor(fetch).reshape(-1)
        # the hybrid kernels quantize activations at run time: close, not equal
        assert np.allclose(evaluate(net, row[None].astype(np.float64))[0], logits, atol=0.15)


# -- refusals --------------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _small_model(rng, bias_scale_factor: float = 1.0, code=None) -> bytes:
    m = tb.ModelBuilder()
    x = m.tensor((1, 4), tb.INT8, 0.05, 0)
    out = m.tensor((1, 3), tb.INT8, 0.1, 0)
    weights = m.constant(rng.integers(-127, 128, (3, 4)), tb.INT8, [0.01], 0)
    bias = m.constant(np.array([1, 2, 3]), tb.INT32, [0.05 * 0.01 * bias_scale_factor], 0)
    if code is None:
        m.op(tb.OP.FULLY_CONNECTED, (x, weights, bias), (out,), tb.OPTIONS.FullyConnectedOptions)
    else:
        m.op(code, (x,), (out,))
    m.inputs, m.outputs = (x,), (out,)
    return m.finish()


def _conv_model(scale_count: int, bias_factor: float = 1.0) -> bytes:
    m = tb.ModelBuilder()
    x = m.tensor((1, 4, 4, 2), tb.INT8, 0.05, 0)
    out = m.tensor((1, 4, 4, 4), tb.INT8, 0.1, 0)
    weights = m.constant(np.ones((4, 3, 3, 2)), tb.INT8, [0.01] * scale_count, 0, axis=0)
    bias = m.constant(np.arange(4), tb.INT32, [0.05 * 0.01 * bias_factor] * scale_count, 0)
    tb.conv_op(m, x, weights, bias, out)
    m.inputs, m.outputs = (x,), (out,)
    return m.finish()


def test_what_the_interpreter_refuses_is_refused_with_the_same_reason(tmp_path):
    """Per-axis weight scales of the wrong count: the interpreter refuses the model, and qverify
    refuses it with the same words; a bias scale other than input x weight scale the interpreter
    accepts (its kernels read the bias at input x weight scale), and so does qverify."""
    path = _write(tmp_path, "scales.tflite", _conv_model(3))
    for resolver in RESOLVERS.values():
        with pytest.raises(
            (RuntimeError, ValueError), match="num_scales must be 1 for per-layer quantization, or 4"
        ):
            _interpreter(path, resolver)
    with pytest.raises(
        InputError, match="num_scales must be 1 for per-layer quantization, or 4 for per-axis"
    ):
        read_tflite(path)
    accepted = _write(tmp_path, "bias.tflite", _conv_model(4, bias_factor=1.5))
    _interpreter(accepted, "BUILTIN_REF")
    assert read_tflite(accepted).quantization is not None


def test_logistic_is_refused_naming_the_operator(tmp_path):
    path = _write(tmp_path, "logistic.tflite", _small_model(np.random.default_rng(1), code=tb.OP.LOGISTIC))
    with pytest.raises(UnsupportedError, match=r"operator 0 \(LOGISTIC.*not modelled"):
        read_tflite(path)


def _hostile_files(tmp_path: Path) -> dict[str, Path]:
    good = _small_model(np.random.default_rng(2))
    files = {
        "truncated": good[: len(good) // 2],
        "wrong-magic": good[:4] + b"ONNX" + good[8:],
        "unread-op": _small_model(np.random.default_rng(2), code=tb.OP.SQUARED_DIFFERENCE),
    }
    # a tensor index out of range: the operator's first input (an int32 in its inputs vector)
    m = tb.ModelBuilder()
    x = m.tensor((1, 4), tb.INT8, 0.05, 0)
    out = m.tensor((1, 4), tb.INT8, 0.05, 0)
    m.op(tb.OP.RESHAPE, (x, 4242), (out,))
    m.inputs, m.outputs = (x,), (out,)
    files["tensor-index"] = m.finish()
    # a 2 GB buffer: the weights' data vector declares 2^31 bytes
    data = bytearray(good)
    weights = np.random.default_rng(2).integers(-127, 128, (3, 4)).astype(np.int8).tobytes()
    at = data.find(weights)
    assert at > 4
    struct.pack_into("<I", data, at - 4, 1 << 31)
    files["2gb-buffer"] = bytes(data)
    return {name: _write(tmp_path, f"{name}.tflite", blob) for name, blob in files.items()}


def test_hostile_files_are_one_error_line_and_exit_2(tmp_path):
    for name, path in _hostile_files(tmp_path).items():
        run = subprocess.run(
            [sys.executable, "-m", "qverify", "info", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert run.returncode == 2, (name, run.stderr)
        assert len(lines) == 1 and lines[0].startswith("error:"), (name, run.stderr)
        assert "Traceback" not in run.stderr


def test_hostile_messages_say_what_is_wrong(tmp_path):
    files = _hostile_files(tmp_path)
    expected = {
        "truncated": "not a valid TFLite flatbuffer|outside the file",
        "wrong-magic": "not a TFLite model",
        "unread-op": "SQUARED_DIFFERENCE",
        "tensor-index": "names tensor 4242; the subgraph has 2 tensors",
        "2gb-buffer": "declares 2147483648 entries",
    }
    for name, path in files.items():
        with pytest.raises((InputError, UnsupportedError), match=expected[name]):
            read_tflite(path)


# -- the commands ----------------------------------------------------------------------------------


def test_a_repaired_tflite_runs_in_the_interpreter_as_the_simulator_says(tmp_path):
    """Changed int8 weights and biases written into the user's file in place (`io.tflite_patch`):
    the interpreter runs the written file as the simulator runs the changed network."""
    from dataclasses import replace

    from qverify.io.tflite_patch import write_tflite_int8_changes
    from qverify.network import MacQuant

    path = _write(tmp_path, "graph.tflite", _graph_model(np.random.default_rng(7), True))
    net = read_tflite(path)
    layers = list(net.quantization.layers)
    for index in [k for k, q in enumerate(layers) if isinstance(q, MacQuant)]:
        weights, bias = layers[index].weights.copy(), layers[index].bias.copy()
        weights.reshape(-1)[::5] = -weights.reshape(-1)[::5]
        bias[0] += 37
        layers[index] = replace(layers[index], weights=weights, bias=bias)
    changed = replace(net, quantization=replace(net.quantization, layers=tuple(layers)))
    written = write_tflite_int8_changes(path, net, changed, tmp_path / "repaired.int8.tflite")
    assert len(written.read_bytes()) == len(path.read_bytes())
    qnet = quantize_network(changed, ImplementationOptions(number=Int8Format.parse("int8-tflite")))
    codes = np.random.default_rng(5).integers(-128, 128, (500, net.n_inputs))
    expected = _interpreter_codes(written, "BUILTIN_REF", codes, False)
    assert np.array_equal(simulate(qnet, codes).outputs, expected)
    assert not np.array_equal(expected, _interpreter_codes(path, "BUILTIN_REF", codes, False))


def test_verify_takes_a_tflite_model_in_its_own_arithmetic(tmp_path):
    """`qverify verify M.tflite` verifies the model as TFLite's reference kernels run it (the record
    says int8-tflite, origin network); `info` reads it."""
    import json

    path = _write(tmp_path, "graph.tflite", _graph_model(np.random.default_rng(7), True))
    center = ",".join(["0.5"] * 108)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "qverify",
            "verify",
            str(path),
            "--center",
            center,
            "--label",
            "0",
            "--eps",
            "0.004",
        ]
        + ["--json", str(tmp_path / "record.json"), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode in (0, 10, 20), run.stderr
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["format"] == "int8-tflite" and record["origins"]["format"] == "network"
    info = subprocess.run(
        [sys.executable, "-m", "qverify", "info", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert info.returncode == 0 and "TFLite" in info.stdout


def test_a_gzipped_tflite_file_reads_as_the_file(tmp_path):
    """`.tflite.gz`, as VNN-COMP ships its networks gzipped: decompressed within the size limit and
    read as the plain file (the same nodes and quantization, named after the stem)."""
    import gzip

    plain = ZOO / "lenet5.int8.tflite"
    packed = tmp_path / "lenet5.int8.tflite.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    net, again = load_network(plain), load_network(packed)
    assert again.name == net.name and again.wiring == net.wiring
    options = ImplementationOptions(Int8Format())
    codes = np.random.default_rng(7).integers(-128, 128, (50, net.n_inputs))
    assert np.array_equal(
        simulate(quantize_network(again, options), codes).outputs,
        simulate(quantize_network(net, options), codes).outputs,
    )
