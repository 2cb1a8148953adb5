"""int8 sigmoid (onnxruntime's QLinearSigmoid, and DequantizeLinear -> Sigmoid -> QuantizeLinear):
the table against onnxruntime on every code, whole quantized networks bit for bit (C, simulator,
onnxruntime), the engine's verdicts against brute force through the compiled C, and hostile models.

A table on codes after a MAC layer is composed into the layer's threshold table
(`qverify.quant.affine.requantize`), so the C, the lifter and the network level see one monotone
staircase per layer, as for any int8 layer.
"""

from __future__ import annotations

import functools
import itertools
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
from qverify.io import load_network
from qverify.network import (
    Activation,
    AffineQuantization,
    CodeFunction,
    CodeLookup,
    CodeType,
    Dense,
    MacQuant,
    Network,
    TensorQuant,
)
from qverify.quant import ImplementationOptions, Int8Format, RequantMode, quantize_network, simulate
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from qverify.quant.code_tables import all_codes, lookup_table
from tests.conftest import budgeted
from tests.int8_kernels import OTHER, machine_format, oracle, other_format, runner_or_skip
from tests.test_engine_oracle import seeded_instances
from tests.test_int8_oracle import (
    _scale,
    _tensor,
    check_instance,
    dequantized_dense,
    make_instance,
    random_mac_integers,
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

QVERIFY = [sys.executable, "-m", "qverify"]
_NP_TYPES = {CodeType.INT8: np.int8, CodeType.UINT8: np.uint8}
_ONNX_TYPES = {CodeType.INT8: TensorProto.INT8, CodeType.UINT8: TensorProto.UINT8}


def qlinear_sigmoid_codes(source: TensorQuant, target: TensorQuant) -> np.ndarray:
    """onnxruntime's QLinearSigmoid on every code of `source` (a one-node com.microsoft model)."""
    code = source.code
    dtype = _NP_TYPES[code]
    inits = [
        numpy_helper.from_array(np.array(source.scale, dtype=np.float32), "xs"),
        numpy_helper.from_array(np.array(source.zero_point, dtype=dtype), "xz"),
        numpy_helper.from_array(np.array(target.scale, dtype=np.float32), "ys"),
        numpy_helper.from_array(np.array(target.zero_point, dtype=dtype), "yz"),
    ]
    node = helper.make_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft")
    graph = helper.make_graph(
        [node],
        "sigmoid",
        [helper.make_tensor_value_info("x", _ONNX_TYPES[code], [256])],
        [helper.make_tensor_value_info("y", _ONNX_TYPES[code], [256])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": all_codes(source).astype(dtype)})[0].astype(np.int64)


@pytest.mark.parametrize("code", [CodeType.INT8, CodeType.UINT8])
def test_the_sigmoid_table_is_qlinear_sigmoid_on_every_code(code):
    """Scales from tiny (the sigmoid's flat middle) to huge (its saturated ends), any zero points."""
    rng = np.random.default_rng(5 if code is CodeType.INT8 else 6)
    for case in range(60):
        source = TensorQuant(_scale(rng, 1e-4, 2.0), int(rng.integers(code.qmin, code.qmax + 1)), code)
        target = TensorQuant(_scale(rng, 1e-4, 0.05), int(rng.integers(code.qmin, code.qmax + 1)), code)
        expected = qlinear_sigmoid_codes(source, target)
        table = lookup_table(CodeLookup(CodeFunction.SIGMOID, source), target)
        assert np.array_equal(table, expected), (case, source, target)


def _sigmoid_mlp(seed: int) -> Network:
    rng = np.random.default_rng(seed)
    return Network(
        (
            Dense(rng.normal(0, 1.5, (7, 4)), rng.normal(0, 1, 7), Activation.SIGMOID),
            Dense(rng.normal(0, 2, (5, 7)), rng.normal(0, 1, 5), Activation.SIGMOID),
            Dense(rng.normal(0, 1, (3, 5)), rng.normal(0, 0.3, 3), Activation.IDENTITY),
        ),
        name="sigmoid-mlp",
    )


SIGMOID_CONFIGURATIONS = list(
    itertools.product([QuantFormat.QOP, QuantFormat.QDQ], [CodeType.INT8, CodeType.UINT8])
)


def _sigmoid_model(tmp_path: Path, quant_format: QuantFormat, activations: CodeType, n_inputs: int = 4000):
    """A sigmoid MLP quantized by onnxruntime's quantizer (QLinearSigmoid or its QDQ group), its file
    and `n_inputs` inputs, saturating ones among them."""
    net = _sigmoid_mlp(3)
    rng = np.random.default_rng(4)
    path = tmp_path / f"q-{quant_format.name}-{activations.name}.onnx"
    settings = QuantizeSettings(quant_format, False, activations)
    quantized = quantize_with_onnxruntime(net, rng.uniform(0, 1, (200, 4)), settings, path)
    ops = {node.op_type for node in onnx.load(path).graph.node}
    assert ("QLinearSigmoid" in ops) == (quant_format is QuantFormat.QOP) and ("Sigmoid" in ops) != (
        quant_format is QuantFormat.QOP
    )
    assert [layer.activation for layer in quantized.layers] == [layer.activation for layer in net.layers]
    x = rng.uniform(-0.5, 1.5, (n_inputs, 4))
    x[: n_inputs // 8] = rng.choice([-3.0, 0.0, 1.0, 3.0], size=(n_inputs // 8, 4))
    return quantized, path, x


def _simulated_outputs(quantized: Network, number: Int8Format, x: np.ndarray) -> np.ndarray:
    qnet = quantize_network(quantized, ImplementationOptions(number))
    return qnet.output_quant.dequantize(simulate(qnet, qnet.input_quant.quantize(x)).outputs)


@pytest.mark.parametrize("quant_format, activations", SIGMOID_CONFIGURATIONS)
def test_sigmoid_networks_are_bit_exact_against_onnxruntime(tmp_path, quant_format, activations):
    """The variant this machine's onnxruntime computes (the probe: int8 with AVX-VNNI, int8-x86 on
    AVX2 alone): its compiled C, its simulator and onnxruntime give the same codes on 4,000 inputs,
    saturating ones among them; the other variant's C equals its simulator; the float view keeps
    the sigmoid."""
    quantized, path, x = _sigmoid_model(tmp_path, quant_format, activations)
    for number in (machine_format(), other_format()):
        qnet = quantize_network(quantized, ImplementationOptions(number))
        codes = qnet.input_quant.quantize(x)
        simulated = simulate(qnet, codes).outputs
        compiled = CompiledNetwork(render_network(qnet), tmp_path / f"c-{number.label}", True)
        assert np.array_equal(compiled.run(codes).outputs, simulated), number
        assert len(np.unique(simulated[:, 0])) > 20  # the inputs reach many output codes
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = np.concatenate([session.run(None, {"input": row[None].astype(np.float32)})[0] for row in x])
    assert np.array_equal(_simulated_outputs(quantized, machine_format(), x), expected), (
        machine_format().describe()
    )


def test_sigmoid_networks_are_bit_exact_against_the_other_kind_of_cpu(tmp_path):
    """The other variant's simulator against onnxruntime running the other kernel (qemu-user's Haswell
    model on a VNNI machine; a VNNI CPU for an AVX2 one, else skipped saying so), 1,000 inputs per
    configuration, the four in one process; where pair sums saturate, the variants differ there."""
    runner = runner_or_skip(OTHER)
    models = [
        _sigmoid_model(tmp_path, *configuration, n_inputs=1000) for configuration in SIGMOID_CONFIGURATIONS
    ]
    outputs = oracle.onnxruntime_outputs(runner, [path for _, path, _ in models], [x for _, _, x in models])
    differing = 0
    for (quantized, _, x), expected in zip(models, outputs):
        assert np.array_equal(_simulated_outputs(quantized, other_format(), x), expected)
        differing += int(np.any(_simulated_outputs(quantized, machine_format(), x) != expected, axis=1).sum())
    assert differing > 0  # the two kernels differ on these models: the check tells them apart


def random_sigmoid_network(rng: np.random.Generator) -> Network:
    """A random int8 model 2 -> 2..4 (sigmoid table) -> 2..3, as onnxruntime's quantizer states one."""
    code = CodeType.INT8 if rng.random() < 0.5 else CodeType.UINT8
    sizes = (2, int(rng.integers(2, 5)), int(rng.integers(2, 4)))
    quant_in = _tensor(rng, code, "input")
    requantized = TensorQuant(_scale(rng, 0.01, 0.1), int(rng.integers(code.qmin + 20, code.qmax - 20)), code)
    # the sigmoid's output range [0, 1] in codes, sometimes a narrower one (saturating)
    table_out = TensorQuant(_scale(rng, 1 / 255, 1 / 60), code.qmin, code, "sigmoid")
    output = _tensor(rng, code, "output")
    per_channel = rng.random() < 0.5
    layers, quants, current = [], [], quant_in
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        last = index == len(sizes) - 2
        weights, scales, bias = random_mac_integers(rng, n_in, n_out, per_channel)
        lookup = None if last else CodeLookup(CodeFunction.SIGMOID, requantized, f"sigmoid {index + 1}")
        target = output if last else table_out
        quant = MacQuant(current, weights, scales, bias, target, False, f"layer {index + 1}", lookup=lookup)
        quants.append(quant)
        layers.append(dequantized_dense(quant, Activation.IDENTITY if last else Activation.SIGMOID))
        current = target
    return Network(
        tuple(layers), name="int8-sigmoid-oracle", quantization=AffineQuantization(quant_in, tuple(quants))
    )


FAST_SEEDS = range(16)
SLOW_SEEDS = range(16, 48)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    make = functools.partial(make_instance, build=random_sigmoid_network, tflite_share=0.0)
    return seeded_instances(
        tmp_path_factory.mktemp("int8-sigmoid-oracle"), lambda seed, path: make(seed + 500, path)
    )


@pytest.mark.parametrize("seed", FAST_SEEDS)
def test_int8_sigmoid_oracle(cases, seed):
    """The engine's verdict equals the compiled C's on every point of the box; an UNSAFE replays."""
    check_instance(cases(seed), budgeted())


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_int8_sigmoid_oracle_slow(cases, seed):
    check_instance(cases(seed), budgeted())


def test_sigmoid_oracle_cases_cover_both_verdicts(cases):
    truths = [cases(seed).truth for seed in FAST_SEEDS]
    assert truths.count("SAFE") >= 5 and truths.count("UNSAFE") >= 5


def test_sigmoid_layers_are_decided_at_the_network_level(cases):
    from qverify.engine import check_file

    instance = cases(0)
    result = check_file(instance.harness, [Path(__file__).resolve().parents[1] / "models_c"], budgeted())
    assert result.decided_by.startswith("netlevel"), result.to_json()


def test_tflite_requantization_with_a_sigmoid_table_is_refused():
    net = random_sigmoid_network(np.random.default_rng(1))
    with pytest.raises(UnsupportedError, match="QLinearSigmoid"):
        quantize_network(net, ImplementationOptions(Int8Format(RequantMode.TFLITE)))


# -- hostile models -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qop_model(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("int8-sigmoid-hostile")
    path = directory / "q.onnx"
    rng = np.random.default_rng(8)
    quantize_with_onnxruntime(
        _sigmoid_mlp(8), rng.uniform(0, 1, (100, 4)), QuantizeSettings(QuantFormat.QOP), path
    )
    (directory / "p.vnnlib").write_text(
        "".join(f"(declare-const X_{i} Real)\n" for i in range(4))
        + "".join(f"(declare-const Y_{i} Real)\n" for i in range(3))
        + "".join(f"(assert (>= X_{i} 0.4))\n(assert (<= X_{i} 0.6))\n" for i in range(4))
        + "(assert (>= Y_0 100.0))\n"
    )
    return path


def _sigmoid_node(model: onnx.ModelProto) -> onnx.NodeProto:
    return next(node for node in model.graph.node if node.op_type == "QLinearSigmoid")


def _set_initializer(model: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    for index, tensor in enumerate(model.graph.initializer):
        if tensor.name == name:
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(value, name))
            return
    raise KeyError(name)


def _zero_output_scale(model):
    _set_initializer(model, _sigmoid_node(model).input[3], np.array(0.0, dtype=np.float32))


def _nan_input_scale(model):
    node = _sigmoid_node(model)
    # a scale of its own (the input scale is shared with the previous layer's output)
    model.graph.initializer.append(numpy_helper.from_array(np.array(np.nan, dtype=np.float32), "bad_scale"))
    node.input[1] = "bad_scale"


def _uint8_output_zero_point(model):
    node = _sigmoid_node(model)
    model.graph.initializer.append(numpy_helper.from_array(np.array(3, dtype=np.uint8), "bad_zero"))
    node.input[4] = "bad_zero"


def _sigmoid_on_the_input(model):
    """A QLinearSigmoid straight after the input's QuantizeLinear (no MAC layer before it)."""
    nodes = list(model.graph.node)
    quantize, sigmoid = nodes[0], _sigmoid_node(model)
    moved = onnx.NodeProto()
    moved.CopyFrom(sigmoid)
    moved.name = "early_sigmoid"
    moved.input[0] = quantize.output[0]
    moved.input[1], moved.input[2] = quantize.input[1], quantize.input[2]
    moved.output[0] = "early_out"
    following = nodes[1]
    following.input[0] = "early_out"
    model.graph.node.insert(1, moved)


HOSTILE = {
    "zero-output-scale": (_zero_output_scale, "QLinearSigmoid"),
    "nan-input-scale": (_nan_input_scale, "QLinearSigmoid"),
    "uint8-output-zero-point": (_uint8_output_zero_point, "QLinearSigmoid"),
    "sigmoid-on-the-input": (_sigmoid_on_the_input, "early_sigmoid"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_sigmoid_model_is_one_error_line(qop_model, name):
    corrupt, node = HOSTILE[name]
    proto = onnx.load(qop_model)
    corrupt(proto)
    bad = qop_model.with_name(f"{name}.onnx")
    onnx.save(proto, bad)
    prop = str(qop_model.parent / "p.vnnlib")
    for args in (["info", str(bad)], ["verify", str(bad), "--property", prop, "--format", "int8"]):
        done = subprocess.run([*QVERIFY, *args], capture_output=True, text=True, timeout=300, check=False)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2, (name, args[0], done.stdout[-400:], done.stderr[-1500:])
        assert len(lines) == 1 and lines[0].startswith("error: ") and node in lines[0], (name, done.stderr)


def test_the_model_itself_verifies(qop_model):
    """The uncorrupted model of the hostile tests is read and decided (its property is SAFE: Y_0 is
    a few units at most)."""
    prop = str(qop_model.parent / "p.vnnlib")
    done = subprocess.run(
        [*QVERIFY, "verify", str(qop_model), "--property", prop, "--format", "int8"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and "SAFE" in done.stdout, (done.stdout[-800:], done.stderr[-800:])
    assert load_network(qop_model).layers[0].activation is Activation.SIGMOID
