"""int8 joins (issue 41): residual additions and concatenations of tensors with different scales,
as onnxruntime computes them, through every stage.

- The formula (`qverify.quant.join8.add_codes`) against onnxruntime's QLinearAdd, its QDQ form and
  its unfused float path on every one of the 65,536 code pairs; its integer staircase equal to it
  on every pair; QLinearConcat's requantization the same way.
- Whole models: small residual and concatenating networks quantized by onnxruntime (QOperator),
  read back, simulator = generated C = onnxruntime on 4,000 inputs; lifted back from the C.
- The network level on tiny int8 graphs: bounds contain every enumerated execution, verdicts
  equal brute force, counterexamples replay.
- A QDQ model whose fork onnxruntime leaves unfused (float32 convolutions) is refused with the
  reason; its QOperator export is read.
"""

from __future__ import annotations

import itertools
import shutil
import time
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qverify.codegen import (
    CompiledNetwork,
    compile_replay,
    format_inputs,
    render_harness,
    render_network,
    run_lines,
)
from qverify.codegen.context import NeuronBounds
from qverify.engine import EngineStatus
from qverify.engine.netlevel.attack import Confirmer
from qverify.engine.netlevel.bounds import node_bounds
from qverify.engine.netlevel.lift import lift_file
from qverify.engine.netlevel.model import build_model
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, query_for
from qverify.engine.netlevel.search import decide
from qverify.engine.result import Recorder
from qverify.errors import UnsupportedError
from qverify.io import load_network
from qverify.io.onnx_fusion import unfused_outputs
from qverify.network import (
    Activation,
    Add,
    AffineQuantization,
    AveragePool2D,
    CodeType,
    Concat,
    Conv2D,
    Dense,
    JoinQuant,
    MacQuant,
    Network,
    Permute,
    TensorQuant,
)
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import ImplementationOptions, quantize_network, simulate
from qverify.quant.affine import Int8Format, apply_thresholds
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from qverify.quant.intervals import implementation_bounds
from qverify.quant.join8 import add_codes, add_staircase, concat_staircase, requantize_codes
from tests.conftest import ROOT, budgeted
from tests.test_int8_oracle import _tensor, dequantized_dense, random_mac_integers

MODELS_C = ROOT / "models_c"
INT8 = ImplementationOptions(Int8Format())
_ONNX_TYPE = {CodeType.INT8: TensorProto.INT8, CodeType.UINT8: TensorProto.UINT8}
_NUMPY_TYPE = {CodeType.INT8: np.int8, CodeType.UINT8: np.uint8}


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _add_model(quant: JoinQuant, form: str, fork: bool = False) -> onnx.ModelProto:
    """QLinearAdd (form "qop") or DequantizeLinear x2 -> Add -> QuantizeLinear ("qdq") over 65,536
    elements; `fork`: the Add's float sum is a graph output too, which leaves it unfused
    (onnxruntime fuses no node whose output leaves the graph)."""
    (qa, qb), out = quant.inputs, quant.output
    code = out.code
    inits = []
    for name, tensor in (("a", qa), ("b", qb), ("c", out)):
        inits.append(numpy_helper.from_array(np.array(tensor.scale, np.float32), f"s{name}"))
        inits.append(numpy_helper.from_array(np.array(tensor.zero_point, _NUMPY_TYPE[code]), f"z{name}"))
    outputs = [helper.make_tensor_value_info("c", _ONNX_TYPE[code], [1, 65536])]
    if form == "qop":
        nodes = [
            helper.make_node(
                "QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["c"], domain="com.microsoft"
            )
        ]
    else:
        nodes = [
            helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["fa"]),
            helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["fb"]),
            helper.make_node("Add", ["fa", "fb"], ["f"]),
            helper.make_node("QuantizeLinear", ["f", "sc", "zc"], ["c"]),
        ]
        if fork:
            outputs.append(helper.make_tensor_value_info("f", TensorProto.FLOAT, [1, 65536]))
    inputs = [helper.make_tensor_value_info(name, _ONNX_TYPE[code], [1, 65536]) for name in ("a", "b")]
    graph = helper.make_graph(nodes, "add", inputs, outputs, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    return model


def _random_join(rng: np.random.Generator, code: CodeType, count: int = 2) -> JoinQuant:
    return JoinQuant(
        tuple(_tensor(rng, code, f"input {i}") for i in range(count)), _tensor(rng, code, "output"), "add"
    )


@pytest.mark.parametrize("code", [CodeType.INT8, CodeType.UINT8])
def test_add_formula_is_onnxruntimes_on_every_code_pair(code):
    """QLinearAdd, the fused QDQ Add and the unfused float path (the sum also a graph output): every
    pair."""
    rng = np.random.default_rng(410 if code is CodeType.INT8 else 411)
    grid = np.arange(code.qmin, code.qmax + 1)
    a, b = (part.ravel() for part in np.meshgrid(grid, grid, indexing="ij"))
    feed = {"a": a.astype(_NUMPY_TYPE[code])[None], "b": b.astype(_NUMPY_TYPE[code])[None]}
    for case in range(6):
        quant = _random_join(rng, code)
        for form in ("qop", "qdq"):
            got = _session(_add_model(quant, form)).run(None, feed)[0].ravel().astype(np.int64)
            assert np.array_equal(got, add_codes(a, b, quant)), (case, form)
        unfused_model = _add_model(quant, "qdq", fork=True)
        assert "f" in unfused_outputs(unfused_model, "fork"), (
            "onnxruntime fused an Add whose sum is an output"
        )
        got = _session(unfused_model).run(None, feed)[0].ravel().astype(np.int64)
        floating = JoinQuant(quant.inputs, quant.output, "add", float_path=True)
        assert np.array_equal(got, add_codes(a, b, floating)), case


@pytest.mark.parametrize("code", [CodeType.INT8, CodeType.UINT8])
def test_add_staircase_is_the_formula_on_every_pair(code):
    """The integer weights and table `add_staircase` finds give the formula's code on all 65,536
    pairs (fused and float path), for scales spread over four decades."""
    rng = np.random.default_rng(412 if code is CodeType.INT8 else 413)
    grid = np.arange(code.qmin, code.qmax + 1)
    a, b = (part.ravel() for part in np.meshgrid(grid, grid, indexing="ij"))
    for case in range(40):
        quant = _random_join(rng, code)
        if case % 2:
            quant = JoinQuant(quant.inputs, quant.output, "add", float_path=True)
        stairs = add_staircase(quant, f"case {case}")
        acc = stairs.weights[0] * a + stairs.weights[1] * b
        assert np.abs(acc).max() < 2**31
        assert np.array_equal(
            apply_thresholds(acc[None], stairs.table, code.qmin)[0], add_codes(a, b, quant)
        ), case


def test_concat_requantization_is_qlinearconcats():
    """QLinearConcat and the QDQ Concat of three tensors with their own scales: each input's codes
    through QuantizeLinear(DequantizeLinear), and the staircase rows give the same codes."""
    rng = np.random.default_rng(414)
    code = CodeType.INT8
    grid = np.arange(-128, 128)
    for case in range(8):
        quant = JoinQuant(
            tuple(_tensor(rng, code, f"in {i}") for i in range(3)), _tensor(rng, code, "out"), "cat"
        )
        inits = [
            numpy_helper.from_array(np.array(quant.output.scale, np.float32), "so"),
            numpy_helper.from_array(np.array(quant.output.zero_point, np.int8), "zo"),
        ]
        args = ["so", "zo"]
        for i, source in enumerate(quant.inputs):
            inits += [
                numpy_helper.from_array(np.array(source.scale, np.float32), f"s{i}"),
                numpy_helper.from_array(np.array(source.zero_point, np.int8), f"z{i}"),
            ]
            args += [f"x{i}", f"s{i}", f"z{i}"]
        node = helper.make_node("QLinearConcat", args, ["y"], domain="com.microsoft", axis=1)
        inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.INT8, [1, 256]) for i in range(3)]
        graph = helper.make_graph(
            [node], "cat", inputs, [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 768])], inits
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
        )
        model.ir_version = 8
        got = (
            _session(model)
            .run(None, {f"x{i}": grid.astype(np.int8)[None] for i in range(3)})[0]
            .reshape(3, 256)
        )
        stairs = concat_staircase(quant)
        for i, source in enumerate(quant.inputs):
            expected = requantize_codes(grid, source, quant.output)
            assert np.array_equal(got[i], expected), (case, i)
            assert np.array_equal(apply_thresholds(grid[None], stairs.table[i : i + 1], -128)[0], expected)


def _float_graph(rng: np.random.Generator, kind: str) -> Network:
    """A small image network of the zoo's shapes: a residual block (identity shortcut), a block
    with a 1x1 projection shortcut, or two branches joined by Concat; global average pool, dense."""

    def conv(c_in: int, c_out: int, size: int, activation: Activation, image, stride: int = 1) -> Conv2D:
        pad = size // 2
        weights = rng.normal(0, 0.6, (c_out, c_in, size, size))
        return Conv2D(weights, rng.normal(0, 0.1, c_out), activation, image, (stride, stride), (pad,) * 4)

    relu, identity = Activation.RELU, Activation.IDENTITY
    stem = conv(2, 4, 3, relu, (2, 6, 6))
    if kind == "concat":
        left = conv(4, 3, 1, relu, (4, 6, 6))
        right = conv(4, 2, 3, relu, (4, 6, 6))
        join = Concat(((3, 6, 6), (2, 6, 6)))
        pool = AveragePool2D((5, 6, 6), (6, 6))
        head = Dense(rng.normal(0, 0.6, (3, 5)), rng.normal(0, 0.1, 3), identity)
        return Network(
            (stem, left, right, join, pool, head), wiring=((-1,), (0,), (0,), (1, 2), (3,), (4,)), name=kind
        )
    first = conv(4, 4, 3, relu, (4, 6, 6))
    second = conv(4, 4, 3, identity, (4, 6, 6))
    head = Dense(rng.normal(0, 0.6, (3, 4)), rng.normal(0, 0.1, 3), identity)
    pool = AveragePool2D((4, 6, 6), (6, 6))
    if kind == "residual":
        layers = (stem, first, second, Add((4, 6, 6), 2, relu), pool, head)
        return Network(layers, wiring=((-1,), (0,), (1,), (2, 0), (3,), (4,)), name=kind)
    shortcut = conv(4, 4, 1, identity, (4, 6, 6))
    layers = (stem, first, second, shortcut, Add((4, 6, 6), 2, relu), pool, head)
    return Network(layers, wiring=((-1,), (0,), (1,), (0,), (2, 3), (4,), (5,)), name=kind)


@pytest.mark.parametrize("kind", ["residual", "projection", "concat"])
def test_quantized_graphs_are_bit_exact_with_onnxruntime(kind, tmp_path):
    """onnxruntime's QOperator export of each shape: read back as a graph, simulator = generated
    C = onnxruntime on 4,000 inputs (every join requantizes: the quantizer gives each tensor its
    own scale); the harness lifts back to the same network."""
    rng = np.random.default_rng(415)
    net = _float_graph(rng, kind)
    calibration = rng.uniform(0, 1, (64, net.n_inputs))
    path = tmp_path / f"{kind}.int8.onnx"
    settings = QuantizeSettings(QuantFormat.QOP, per_channel=kind != "concat")
    model = quantize_with_onnxruntime(net, calibration, settings, path)
    assert not model.is_chain and model.quantization is not None
    joins = [q for q in model.quantization.layers if isinstance(q, JoinQuant)]
    assert joins and not any(q.copies for q in joins)
    # the float view keeps the block's ReLU that the quantizer folded into QLinearAdd's zero point
    adds = [layer.activation for layer in model.layers if isinstance(layer, Add)]
    assert adds == [layer.activation for layer in net.layers if isinstance(layer, Add)]
    qnet = quantize_network(model, INT8)
    x = rng.uniform(-0.2, 1.2, (4000, net.n_inputs)).astype(np.float32)
    codes = qnet.input_quant.quantize(x)
    simulated = simulate(qnet, codes).outputs
    session = _session(onnx.load(path))
    name = session.get_inputs()[0].name
    reference = np.concatenate(
        [session.run(None, {name: row.reshape(1, 2, 6, 6)})[0].reshape(1, -1) for row in x]
    )
    assert np.array_equal(qnet.output_quant.quantize(reference), simulated)
    compiled = CompiledNetwork(render_network(qnet), tmp_path / "c", True).run(codes[:1000])
    assert np.array_equal(np.asarray(compiled.outputs), simulated[:1000])
    box = Box(
        tuple(Fraction(0) for _ in range(net.n_inputs)), tuple(Fraction(1) for _ in range(net.n_inputs))
    )
    prop = Property(
        "p", (box,), OutputCondition((Clause((Atom(((0, Fraction(1)),), Fraction(-100), Relation.GE),)),))
    )
    lifted = lift_file(render_harness(qnet, prop).write(tmp_path / "h"), [MODELS_C])
    assert lifted.lifted, lifted.reason
    assert lifted.query.qnet.wiring == qnet.wiring
    assert np.array_equal(simulate(lifted.query.qnet, codes[:500]).outputs, simulated[:500])


def test_a_qdq_fork_onnxruntime_runs_in_float_is_refused_with_the_reason(tmp_path):
    """The QDQ export of a residual block: onnxruntime leaves the fork's convolution unfused and
    runs it in float32, so qverify refuses the model naming the node and the way out."""
    rng = np.random.default_rng(416)
    net = _float_graph(rng, "residual")
    with pytest.raises(UnsupportedError, match="run by onnxruntime in float32.*QOperator"):
        quantize_with_onnxruntime(
            net, rng.uniform(0, 1, (32, net.n_inputs)), QuantizeSettings(), tmp_path / "r.onnx"
        )


# --- the network level on tiny int8 graphs, against brute force ------------------------------


def _random_int8_graph(rng: np.random.Generator, shape: str) -> Network:
    """Two input codes; a residual block (its shortcut the input), two branches joined by a
    requantizing Concat, or a permuted copy-Concat; every tensor with its own quantization."""
    code = CodeType.INT8 if rng.random() < 0.5 else CodeType.UINT8
    per_channel = rng.random() < 0.5
    quant_in = _tensor(rng, code, "input")
    layers, quants = [], []

    def dense(
        reads: TensorQuant, n_in: int, n_out: int, relu: bool, what: str, out: TensorQuant | None = None
    ):
        weights, scales, bias = random_mac_integers(rng, n_in, n_out, per_channel)
        target = out or _tensor(rng, code, what, relu_range=relu and rng.random() < 0.5)
        quant = MacQuant(reads, weights, scales, bias, target, relu, what)
        layers.append(dequantized_dense(quant, Activation.RELU if relu else Activation.IDENTITY))
        quants.append(quant)
        return target

    if shape == "residual":
        hidden = dense(quant_in, 2, 3, True, "first")
        second = dense(hidden, 3, 2, False, "second")
        joined = _tensor(rng, code, "sum")
        layers.append(Add((2,), 2))
        quants.append(JoinQuant((second, quant_in), joined, "add"))
        dense(joined, 2, 2, False, "head")
        wiring = ((-1,), (0,), (1, -1), (2,))
    elif shape == "concat":
        left = dense(quant_in, 2, 2, True, "left")
        right = dense(quant_in, 2, 3, False, "right")
        joined = _tensor(rng, code, "cat")
        layers.append(Concat(((2,), (3,))))
        quants.append(JoinQuant((left, right), joined, "concat"))
        dense(joined, 5, 2, False, "head")
        wiring = ((-1,), (-1,), (0, 1), (2,))
    else:
        shared = _tensor(rng, code, "shared")
        dense(quant_in, 2, 2, True, "left", shared)
        dense(quant_in, 2, 2, False, "right", shared)
        layers.append(Concat(((2,), (2,))))
        quants.append(JoinQuant((shared, shared), shared, "copy"))
        layers.append(Permute(rng.permutation(4), (4,), (4,)))
        quants.append(JoinQuant((shared,), shared, "permute"))
        dense(shared, 4, 2, False, "head")
        wiring = ((-1,), (-1,), (0, 1), (2,), (3,))
    quantization = AffineQuantization(quant_in, tuple(quants))
    return Network(tuple(layers), name=f"int8-{shape}", wiring=wiring, quantization=quantization)


def _threshold(qnet, lo, hi, threshold: int) -> Property:
    """Output code 0 >= threshold (as reals: the output quantization's value of that code)."""
    out = qnet.output_quant
    value = (Fraction(threshold) - out.zero_point) * Fraction(out.scale)
    atom = Atom(((0, Fraction(1)),), -value, Relation.GE)
    return Property("t", (Box(tuple(lo), tuple(hi)),), OutputCondition((Clause((atom,)),)))


def _int8_cases(rng: np.random.Generator):
    for shape in ("residual", "concat", "copy") * 3:
        net = _random_int8_graph(rng, shape)
        qnet = quantize_network(net, INT8)
        quant_in = qnet.input_quant
        center = rng.integers(quant_in.code.qmin + 20, quant_in.code.qmax - 20, 2)
        codes_lo, codes_hi = center - 12, center + 12
        lo = [Fraction(float(v)) for v in quant_in.dequantize(codes_lo)]
        hi = [Fraction(float(v)) for v in quant_in.dequantize(codes_hi)]
        grid = np.array(list(itertools.product(*(range(a, b + 1) for a, b in zip(codes_lo, codes_hi)))))
        top = int(simulate(qnet, grid).outputs[:, 0].max())
        for threshold in (top, top + 1):
            yield shape, qnet, query_for(qnet, _threshold(qnet, lo, hi, threshold)), threshold <= top


def test_int8_graph_verdicts_and_bounds_agree_with_brute_force():
    """Residual, concatenating and copying int8 graphs: node bounds contain every execution of
    the box (all 625 input codes), verdicts equal the truth, counterexamples replay."""
    rng = np.random.default_rng(417)
    wrong, total, decided = [], 0, 0
    for index, (shape, qnet, query, truth) in enumerate(_int8_cases(rng)):
        model = build_model(query)
        region = query.regions[0]
        grid = enumerate_box(qnet, region.lo, region.hi)
        run = simulate(qnet, grid, trace=True)
        xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        bounds = node_bounds(model, xl, xu, phases)
        for k, trace in enumerate(run.layers):  # (an int8 trace holds codes: the activation's values)
            low, high = model.layers[k].post_bounds(bounds.pre_lo[k], bounds.pre_hi[k])
            assert np.all(trace.post >= low) and np.all(trace.post <= high), (shape, k)
        budget = budgeted(disable=("attack",) if index % 2 else ())
        result = decide(query, budget, time.monotonic() + budget.timeout_s, Recorder())
        total += 1
        if result.status is EngineStatus.UNKNOWN:
            continue
        decided += 1
        if (result.status is EngineStatus.UNSAFE) != truth:
            wrong.append((shape, result.to_json()))
        if result.status is EngineStatus.UNSAFE:
            assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
    assert not wrong
    assert decided == total


pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


@pytest.mark.parametrize("form", ["qop", "qdq"])
def test_a_keras_int8_export_reads_its_transposes_and_drops_its_softmax(form, tmp_path):
    """The zoo's Keras CNN through tf2onnx and onnxruntime's quantizer: NHWC Transposes of the float
    input (before QuantizeLinear) and of codes (before the Flatten), a final (QLinear)Softmax. The
    transposes are Permute nodes; the Softmax is dropped and said, and the simulator's output codes
    are onnxruntime's codes of the Softmax's input (made a graph output) on 4,000 inputs; C = simulator."""
    path = ROOT / "benchmarks" / "cifar10" / "models" / f"keras_cnn.int8-{form}.onnx"
    model = onnx.load(path)
    softmax = next(n for n in model.graph.node if n.op_type in ("QLinearSoftmax", "Softmax"))
    logits = softmax.input[0]
    if softmax.op_type == "Softmax":  # QDQ: the DequantizeLinear before it reads the logits' codes
        logits = next(n for n in model.graph.node if n.output[0] == logits).input[0]
    model.graph.output.append(helper.make_tensor_value_info(logits, TensorProto.INT8, None))
    qmodel = load_network(path)
    assert qmodel.output_softmax and "Softmax" in qmodel.notes[0]
    assert qmodel.image_shape == (32, 32, 3)
    assert sum(isinstance(layer, Permute) for layer in qmodel.layers) == 2
    qnet = quantize_network(qmodel, INT8)
    rng = np.random.default_rng(44)
    x = rng.uniform(0, 1, (4000, qmodel.n_inputs)).astype(np.float32)
    codes = qnet.input_quant.quantize(x)
    simulated = simulate(qnet, codes).outputs
    session = _session(model)
    name = session.get_inputs()[0].name
    reference = np.concatenate([session.run(None, {name: row.reshape(1, 32, 32, 3)})[1] for row in x])
    assert np.array_equal(reference.astype(np.int64), np.asarray(simulated).astype(np.int64))
    compiled = CompiledNetwork(render_network(qnet), tmp_path / "c", True).run(codes[:300])
    assert np.array_equal(np.asarray(compiled.outputs), simulated[:300])


def test_the_harness_invariants_of_int8_joins_hold_on_every_input(tmp_path):
    """The built-in interval analysis's bounds, injected into the harness as assumes, hold for every
    input code of the box: the compiled harness never prints ASSUME-FAILED (a requantizing Concat's
    accumulator is its input's code, not the requantized output's: bounds of the latter made ESBMC
    and the replay refuse real executions of SqueezeNet's fire modules). The engine's attack, which
    checks a candidate against the lifted invariants before calling it a counterexample, accepts
    every one of them too (it compared a requantizing Concat's output codes with those bounds)."""
    rng = np.random.default_rng(418)
    for index, (shape, qnet, query, _) in enumerate(_int8_cases(rng)):
        if index % 2:
            continue  # (both thresholds share the network and box)
        region = query.regions[0]
        bounds = NeuronBounds(implementation_bounds(qnet, region.lo, region.hi), "built-in")
        prop = _threshold(
            qnet,
            *[[Fraction(float(v)) for v in qnet.input_quant.dequantize(b)] for b in (region.lo, region.hi)],
            127,
        )
        executable = compile_replay(render_harness(qnet, prop, bounds).write(tmp_path / f"h{index}"))
        grid = enumerate_box(qnet, region.lo, region.hi)
        outcomes = run_lines(executable, format_inputs(grid, False))
        assert not [line for line in outcomes if line.startswith("ASSUME-FAILED")], shape
        lifted = lift_file(tmp_path / f"h{index}" / "harness.c", [MODELS_C])
        assert lifted.lifted and lifted.query.invariants is not None, lifted.reason
        confirmer = Confirmer(lifted.query, build_model(lifted.query), [])
        assert all(confirmer.respects_invariants(point) for point in grid[::7]), shape
