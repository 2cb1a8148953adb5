"""Tests for `qverify.io.onnx_reader` and `qverify.io.onnx_writer`, with onnxruntime as the oracle."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from qverify.errors import InputError, UnsupportedError
from qverify.io import load_network, read_nnet, read_onnx, save_network, write_nnet, write_onnx
from qverify.io.onnx_reader import METADATA_INPUT_MAX, METADATA_INPUT_MIN
from qverify.network import (
    Activation,
    Dense,
    InputNormalisation,
    Network,
    OutputNormalisation,
    evaluate,
    evaluate_core,
)

ROOT = Path(__file__).resolve().parents[1]
ACAS_ONNX = sorted((ROOT / "benchmarks" / "acasxu" / "onnx").glob("*.onnx"))
ACAS_NNET_DIR = ROOT / "benchmarks" / "acasxu" / "nnet"
EXAMPLES = ROOT / "benchmarks" / "nnet-examples"

_NUMPY_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64}


def assert_networks_equal(left: Network, right: Network) -> None:
    """Same layers, activations and normalisations, bit for bit (None only equals None)."""
    assert left.sizes == right.sizes
    for a, b in zip(left.layers, right.layers, strict=True):
        assert a.activation is b.activation
        assert np.array_equal(a.weights, b.weights)
        assert np.array_equal(a.bias, b.bias)
    assert (left.input_norm is None) == (right.input_norm is None)
    if left.input_norm is not None:
        for name in ("minimum", "maximum", "mean", "range"):
            assert np.array_equal(getattr(left.input_norm, name), getattr(right.input_norm, name)), name
    assert (left.output_norm is None) == (right.output_norm is None)
    if left.output_norm is not None:
        assert np.array_equal(left.output_norm.mean, right.output_norm.mean)
        assert np.array_equal(left.output_norm.range, right.output_norm.range)


def run_onnxruntime(path: Path, inputs: np.ndarray) -> np.ndarray:
    """One onnxruntime run per row, each fed in the input shape and type the model declares.

    Basic graph optimisation only: the extended level fuses Div-by-constant into FusedMatMul with a
    float32 `alpha`, which costs a DOUBLE model ~3e-8 relative precision (onnxruntime 1.31).
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    declared = session.get_inputs()[0]
    shape = [dim if isinstance(dim, int) else 1 for dim in declared.shape]
    dtype = np.float64 if declared.type == "tensor(double)" else np.float32
    outputs = [
        session.run(None, {declared.name: row.reshape(shape).astype(dtype)})[0].reshape(-1)
        for row in np.atleast_2d(inputs)
    ]
    return np.array(outputs, dtype=np.float64)


def save_model(
    tmp_path: Path,
    nodes: list[onnx.NodeProto],
    initializers: dict[str, np.ndarray],
    input_shape: list[int],
    output_shape: list[int] | None = None,
    elem_type: int = TensorProto.FLOAT,
    name: str = "model.onnx",
    opset: int = 13,
) -> Path:
    """Write a one-input, one-output model (output = the last node's first output)."""
    dtype = _NUMPY_TYPES[elem_type]
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info("x", elem_type, input_shape)],
        [helper.make_tensor_value_info(nodes[-1].output[0], elem_type, output_shape)],
        [
            numpy_helper.from_array(np.asarray(v, dtype=v.dtype if v.dtype.kind == "i" else dtype), k)
            for k, v in initializers.items()
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def assert_matches_onnxruntime(path: Path, n_inputs: int, seed: int = 0, scale: float = 2.0) -> Network:
    """read_onnx + evaluate (raw units) agrees with onnxruntime on random inputs."""
    net = read_onnx(path)
    x = np.random.default_rng(seed).uniform(-scale, scale, (20, n_inputs))
    session_type = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).get_inputs()[0].type
    if session_type == "tensor(float)":
        x = x.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(evaluate(net, x), run_onnxruntime(path, x), rtol=1e-5, atol=1e-6)
    return net


# -- the benchmark files -----------------------------------------------------------------------


def test_there_are_45_acas_onnx_networks() -> None:
    assert len(ACAS_ONNX) == 45


@pytest.mark.parametrize("path", ACAS_ONNX, ids=lambda p: p.stem)
def test_acas_onnx_agrees_with_nnet_and_onnxruntime(path: Path) -> None:
    net = read_onnx(path)
    assert net.sizes == (5,) + (50,) * 6 + (5,)
    assert [layer.activation for layer in net.layers] == [Activation.RELU] * 6 + [Activation.IDENTITY]
    assert net.input_norm is None and net.output_norm is None  # Sub(zeros) is dropped
    assert net.name == path.stem and net.source == str(path)
    reference = read_nnet(ACAS_NNET_DIR / f"{path.stem}.nnet")
    rng = np.random.default_rng(len(path.stem))
    lo, hi = reference.input_norm.normalised_domain()
    x_norm = rng.uniform(lo, hi, (100, 5))
    np.testing.assert_allclose(
        evaluate_core(net, x_norm), evaluate_core(reference, x_norm), rtol=0, atol=1e-6
    )
    x_f32 = x_norm[:20].astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(evaluate_core(net, x_f32), run_onnxruntime(path, x_f32), rtol=0, atol=1e-6)


def test_test_network2_matches_onnxruntime_and_nnet() -> None:
    """sisl's file: W @ x layout, empty node names, normalisation folded into the weights."""
    path = EXAMPLES / "TestNetwork2.onnx"
    net = read_onnx(path)
    assert net.sizes == (5,) + (50,) * 6 + (5,) and net.input_norm is None
    reference = read_nnet(EXAMPLES / "TestNetwork.nnet")
    rng = np.random.default_rng(7)
    x_raw = rng.uniform(reference.input_norm.minimum, reference.input_norm.maximum, (50, 5))
    x_raw = x_raw.astype(np.float32).astype(np.float64)
    # onnxruntime runs this float32 model in float32 on raw inputs up to 6e4: errors reach ~1e-5 of |y|
    oracle = run_onnxruntime(path, x_raw)
    np.testing.assert_allclose(evaluate_core(net, x_raw), oracle, rtol=1e-5, atol=1e-5 * np.abs(oracle).max())
    expected = evaluate(reference, x_raw)
    np.testing.assert_allclose(
        evaluate_core(net, x_raw), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max()
    )


# -- operators, on models built here -----------------------------------------------------------


def _dense_params(rng: np.random.Generator, sizes: list[int]) -> dict[str, np.ndarray]:
    params = {}
    for k in range(1, len(sizes)):
        params[f"W{k}"] = rng.normal(size=(sizes[k - 1], sizes[k]))
        params[f"B{k}"] = rng.normal(size=sizes[k])
    return params


def test_sigmoid_and_tanh_layers(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(1), [3, 4, 4, 2])
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["m1"], name="mm1"),
        helper.make_node("Add", ["m1", "B1"], ["a1"], name="add1"),
        helper.make_node("Sigmoid", ["a1"], ["s1"], name="sig"),
        helper.make_node("MatMul", ["s1", "W2"], ["m2"], name="mm2"),
        helper.make_node("Add", ["B2", "m2"], ["a2"], name="add2"),  # constant first: still the bias
        helper.make_node("Tanh", ["a2"], ["t2"], name="tanh"),
        helper.make_node("MatMul", ["t2", "W3"], ["m3"], name="mm3"),  # no Add: bias 0
    ]
    net = assert_matches_onnxruntime(save_model(tmp_path, nodes, params, [1, 3]), 3)
    assert [layer.activation for layer in net.layers] == [
        Activation.SIGMOID,
        Activation.TANH,
        Activation.IDENTITY,
    ]
    assert np.array_equal(net.layers[2].bias, np.zeros(2))
    assert np.array_equal(net.layers[0].weights, params["W1"].astype(np.float32).astype(np.float64).T)


def test_gemm_with_trans_b_alpha_beta(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    params = {"W1": rng.normal(size=(4, 3)), "C1": rng.normal(size=(1, 4)), "W2": rng.normal(size=(4, 2))}
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "C1"], ["g1"], name="gemm1", transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Relu", ["g1"], ["r1"], name="relu1"),
        helper.make_node("Gemm", ["r1", "W2"], ["g2"], name="gemm2"),  # transB=0, no C
    ]
    net = assert_matches_onnxruntime(save_model(tmp_path, nodes, params, [1, 3], [1, 2]), 3)
    assert net.sizes == (3, 4, 2)
    assert [layer.activation for layer in net.layers] == [Activation.RELU, Activation.IDENTITY]


def test_input_and_output_scaling_fold_into_normalisation(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(3), [3, 2])
    params |= {
        "mean": np.array([1.0, -2.0, 0.5]),
        "range": np.array([2.0, 4.0, 0.25]),
        "out_scale": np.array([3.0]),
        "out_shift": np.array([0.5, -1.5]),
    }
    nodes = [
        helper.make_node("Sub", ["x", "mean"], ["s"]),
        helper.make_node("Div", ["s", "range"], ["d"]),
        helper.make_node("MatMul", ["d", "W1"], ["m"]),
        helper.make_node("Add", ["m", "B1"], ["a"]),
        helper.make_node("Mul", ["a", "out_scale"], ["o1"]),
        helper.make_node("Add", ["o1", "out_shift"], ["y"]),
    ]
    net = assert_matches_onnxruntime(
        save_model(tmp_path, nodes, params, [1, 3], elem_type=TensorProto.DOUBLE), 3
    )
    assert np.array_equal(net.input_norm.mean, params["mean"])
    assert np.array_equal(net.input_norm.range, params["range"])
    assert np.all(np.isinf(net.input_norm.minimum)) and np.all(np.isinf(net.input_norm.maximum))
    assert np.array_equal(net.output_norm.range, [3.0, 3.0])
    assert np.array_equal(net.output_norm.mean, [0.5, -1.5])


def test_reversed_and_multiplicative_scaling(tmp_path: Path) -> None:
    """k - x, x * k, x + k before the first layer, and k - y, y / k after the last."""
    params = _dense_params(np.random.default_rng(4), [2, 3, 1])
    params |= {
        "k1": np.array([1.5, -1.0]),
        "k2": np.array([0.5]),
        "k3": np.array([2.0, 0.0]),
        "k4": np.array([10.0]),
        "k5": np.array([8.0]),
    }
    nodes = [
        helper.make_node("Sub", ["k1", "x"], ["a"]),
        helper.make_node("Mul", ["a", "k2"], ["b"]),
        helper.make_node("Add", ["b", "k3"], ["c"]),
        helper.make_node("MatMul", ["c", "W1"], ["m1"]),
        helper.make_node("Add", ["m1", "B1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "W2"], ["m2"]),
        helper.make_node("Add", ["m2", "B2"], ["a2"]),
        helper.make_node("Sub", ["k4", "a2"], ["o1"]),
        helper.make_node("Div", ["o1", "k5"], ["y"]),
    ]
    net = assert_matches_onnxruntime(
        save_model(tmp_path, nodes, params, [1, 2], elem_type=TensorProto.DOUBLE), 2
    )
    assert net.output_norm is not None and net.output_norm.range[0] == -1.0 / 8.0


def test_constant_nodes_reshape_flatten_identity_dropout(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    w1 = rng.normal(size=(4, 3)).astype(np.float32)
    nodes = [
        helper.make_node(
            "Constant", [], ["mean"], value=numpy_helper.from_array(np.full((1, 1, 1, 4), 0.25, np.float32))
        ),
        helper.make_node("Constant", [], ["scale"], value_float=2.0),
        helper.make_node("Constant", [], ["W1"], value=numpy_helper.from_array(w1)),
        helper.make_node("Constant", [], ["B2"], value_floats=[0.5, -0.5]),
        helper.make_node("Sub", ["x", "mean"], ["s"], name="sub"),
        helper.make_node("Mul", ["s", "scale"], ["sc"], name="mul"),
        helper.make_node("Flatten", ["sc"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "W1"], ["m1"], name="mm1"),
        helper.make_node("Identity", ["m1"], ["i1"], name="identity"),
        helper.make_node("Add", ["i1", "B1"], ["a1"], name="bias1"),
        helper.make_node("Reshape", ["a1", "shape"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["h"], name="relu"),
        helper.make_node("Dropout", ["h"], ["dr"], name="dropout"),
        helper.make_node("Reshape", ["dr", "back"], ["v"], name="reshape_back"),
        helper.make_node("MatMul", ["v", "W2"], ["m2"], name="mm2"),
        helper.make_node("Add", ["m2", "B2"], ["y"], name="bias2"),
    ]
    params = {
        "B1": rng.normal(size=3),
        "W2": rng.normal(size=(3, 2)),
        "shape": np.array([1, 1, -1], dtype=np.int64),
        "back": np.array([0, -1], dtype=np.int64),
    }
    net = assert_matches_onnxruntime(save_model(tmp_path, nodes, params, [1, 1, 1, 4], [1, 2]), 4)
    assert net.sizes == (4, 3, 2)
    assert np.array_equal(net.input_norm.mean, np.full(4, 0.25)) and np.array_equal(
        net.input_norm.range, np.full(4, 0.5)
    )


def test_image_input_with_per_channel_normalisation(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    params = {
        "mean": np.array([0.1, 0.2]).reshape(1, 2, 1, 1),
        "std": np.array([0.5, 0.25]).reshape(1, 2, 1, 1),
        "W1": rng.normal(size=(8, 3)),
        "B1": rng.normal(size=3),
    }
    nodes = [
        helper.make_node("Sub", ["x", "mean"], ["s"]),
        helper.make_node("Div", ["s", "std"], ["d"]),
        helper.make_node("Flatten", ["d"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "W1", "B1"], ["y"]),
    ]
    net = assert_matches_onnxruntime(save_model(tmp_path, nodes, params, [1, 2, 2, 2]), 8)
    assert net.image_shape == (2, 2, 2)
    assert np.array_equal(net.input_norm.mean, np.repeat(np.float32([0.1, 0.2]), 4))


def test_symbolic_batch_dimension(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(8), [3, 2])
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m"]), helper.make_node("Add", ["m", "B1"], ["y"])]
    path = save_model(tmp_path, nodes, params, ["batch", 3], ["batch", 2])
    assert_matches_onnxruntime(path, 3)


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", ["ACASXU_run2a_1_1_batch_2000", "ACASXU_run2a_5_9_batch_2000"])
def test_nnet_to_onnx_to_nnet_is_exact(stem: str, tmp_path: Path) -> None:
    original = read_nnet(ACAS_NNET_DIR / f"{stem}.nnet")
    write_onnx(original, tmp_path / "net.onnx")
    via_onnx = read_onnx(tmp_path / "net.onnx")
    assert_networks_equal(via_onnx, original)  # clip bounds come back from the metadata
    write_nnet(via_onnx, tmp_path / "net.nnet")
    assert_networks_equal(read_nnet(tmp_path / "net.nnet"), original)
    x = np.random.default_rng(0).uniform(original.input_norm.minimum, original.input_norm.maximum, (20, 5))
    inside = evaluate(original, x)
    np.testing.assert_allclose(run_onnxruntime(tmp_path / "net.onnx", x), inside, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize(
    "path", [ACAS_ONNX[0], ACAS_ONNX[-1], EXAMPLES / "TestNetwork2.onnx"], ids=lambda p: p.stem
)
def test_onnx_to_nnet_to_onnx_is_exact(path: Path, tmp_path: Path) -> None:
    original = read_onnx(path)
    write_nnet(original, tmp_path / "net.nnet")
    via_nnet = read_nnet(tmp_path / "net.nnet")
    assert_networks_equal(via_nnet, original)
    write_onnx(via_nnet, tmp_path / "net.onnx")
    assert_networks_equal(read_onnx(tmp_path / "net.onnx"), original)


def test_written_model_layout_and_metadata(tmp_path: Path) -> None:
    net = read_nnet(ACAS_NNET_DIR / "ACASXU_run2a_1_1_batch_2000.nnet")
    save_network(net, tmp_path / "acas.onnx")
    model = onnx.load(str(tmp_path / "acas.onnx"))
    assert model.opset_import[0].version == 13
    assert [i.name for i in model.graph.input] == ["input"] and model.graph.output[0].name == "output"
    assert {t.data_type for t in model.graph.initializer} == {TensorProto.DOUBLE}
    ops = [node.op_type for node in model.graph.node]
    assert ops[:2] == ["Sub", "Div"] and ops[-2:] == ["Mul", "Add"]
    assert ops.count("MatMul") == 7 and ops.count("Relu") == 6
    props = {p.key: p.value for p in model.metadata_props}
    assert props[METADATA_INPUT_MIN] == "[0.0, -3.141593, -3.141593, 100.0, 0.0]"
    assert METADATA_INPUT_MAX in props


def test_infinite_clip_bounds_in_metadata_round_trip(tmp_path: Path) -> None:
    norm = InputNormalisation([-np.inf, 0.0], [1.0, np.inf], [0.0, 0.0], [1.0, 1.0])
    net = Network((Dense([[1.0, 2.0]], [0.5], Activation.IDENTITY),), input_norm=norm)
    write_onnx(net, tmp_path / "half.onnx")
    props = {p.key: p.value for p in onnx.load(str(tmp_path / "half.onnx")).metadata_props}
    assert props[METADATA_INPUT_MIN] == '["-inf", 0.0]'
    assert_networks_equal(read_onnx(tmp_path / "half.onnx"), net)


@st.composite
def _networks(draw: st.DrawFn) -> Network:
    """Small networks with any activation and moderate doubles, so onnxruntime stays finite."""
    value = st.floats(-100, 100, allow_subnormal=True)
    nonzero = value.filter(lambda v: abs(v) > 1e-3)
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4))
    layers = []
    for k in range(1, len(sizes)):
        weights = draw(
            st.lists(
                st.lists(value, min_size=sizes[k - 1], max_size=sizes[k - 1]),
                min_size=sizes[k],
                max_size=sizes[k],
            )
        )
        bias = draw(st.lists(value, min_size=sizes[k], max_size=sizes[k]))
        layers.append(Dense(weights, bias, draw(st.sampled_from(list(Activation)))))
    n_in, n_out = sizes[0], sizes[-1]
    input_norm = draw(
        st.none()
        | st.builds(
            lambda mean, scale: InputNormalisation(np.full(n_in, -1e3), np.full(n_in, 1e3), mean, scale),
            st.lists(value, min_size=n_in, max_size=n_in),
            st.lists(nonzero, min_size=n_in, max_size=n_in),
        )
    )
    output_norm = draw(
        st.none()
        | st.builds(
            OutputNormalisation,
            st.lists(value, min_size=n_out, max_size=n_out),
            st.lists(nonzero, min_size=n_out, max_size=n_out),
        )
    )
    return Network(tuple(layers), input_norm, output_norm, name="random")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(net=_networks())
def test_random_networks_round_trip_and_run_in_onnxruntime(net: Network, tmp_path: Path) -> None:
    path = tmp_path / "random.onnx"
    write_onnx(net, path)
    assert_networks_equal(read_onnx(path), net)
    x = np.random.default_rng(0).uniform(-10, 10, (5, net.n_inputs))
    np.testing.assert_allclose(run_onnxruntime(path, x), evaluate(net, x), rtol=1e-9, atol=1e-9)


# -- malformed and unsupported models ----------------------------------------------------------


def _two_layer_nodes() -> list[onnx.NodeProto]:
    return [
        helper.make_node("MatMul", ["x", "W1"], ["m1"], name="mm1"),
        helper.make_node("Add", ["m1", "B1"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "W2"], ["y"], name="mm2"),
    ]


def _raises(path: Path, error: type[Exception], phrase: str) -> str:
    with pytest.raises(error) as caught:
        read_onnx(path)
    message = str(caught.value)
    assert phrase in message, message
    assert message.startswith(str(path)), message
    return message


def test_unsupported_operator_is_named(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 2, 2]) | {"K": np.ones((1, 1, 1, 1))}
    nodes = [helper.make_node("ConvTranspose", ["x", "K"], ["c"], name="deconv_3"), *_two_layer_nodes()]
    nodes[1].input[0] = "c"
    _raises(
        save_model(tmp_path, nodes, params, [1, 1, 1, 3]),
        UnsupportedError,
        "ONNX node 'deconv_3' (ConvTranspose) is not supported",
    )


def test_unnamed_nodes_are_numbered(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 2])
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m"]), helper.make_node("LeakyRelu", ["m"], ["y"])]
    _raises(
        save_model(tmp_path, nodes, params, [1, 3]),
        UnsupportedError,
        "ONNX node '#1 LeakyRelu' (LeakyRelu) is not supported",
    )


def test_add_of_two_dynamic_tensors_is_a_residual_join(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 3, 3])
    nodes = [*_two_layer_nodes()[:3], helper.make_node("Add", ["a1", "r1"], ["y"], name="skip")]
    net = assert_matches_onnxruntime(save_model(tmp_path, nodes, params, [1, 3]), 3)
    assert not net.is_chain and net.layers[-1].describe() == "add of 2 tensors 3"


def test_a_branch_that_does_not_reach_the_output_is_skipped(tmp_path: Path) -> None:
    """A node whose output nothing reads is dead code (onnxruntime computes it and drops it)."""
    params = _dense_params(np.random.default_rng(0), [3, 2, 2])
    nodes = _two_layer_nodes()
    nodes.insert(
        3, helper.make_node("LeakyRelu", ["a1"], ["z"], name="side")
    )  # (the output: the last node's)
    net = assert_matches_onnxruntime(save_model(tmp_path, nodes, params, [1, 3]), 3)
    assert net.is_chain and len(net.layers) == 2


def test_several_inputs_or_outputs_are_unsupported(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 2, 2])
    graph = helper.make_graph(
        _two_layer_nodes(),
        "two",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "two_inputs.onnx"))
    _raises(tmp_path / "two_inputs.onnx", UnsupportedError, "has 2 inputs ('x', 'z')")
    graph.input.pop()
    graph.output.append(helper.make_tensor_value_info("a1", TensorProto.FLOAT, [1, 2]))
    onnx.save(helper.make_model(graph), str(tmp_path / "two_outputs.onnx"))
    _raises(tmp_path / "two_outputs.onnx", UnsupportedError, "has 2 outputs ('y', 'a1')")


def test_empty_graph_and_files_that_are_not_onnx(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [],
        "empty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "empty.onnx"))
    _raises(tmp_path / "empty.onnx", InputError, "ONNX graph has no nodes")
    (tmp_path / "text.onnx").write_text("hello world\n")
    _raises(tmp_path / "text.onnx", InputError, "not an ONNX model")
    (tmp_path / "zero.onnx").write_bytes(b"")
    _raises(tmp_path / "zero.onnx", InputError, "not an ONNX model (no graph)")
    with pytest.raises(InputError, match="no such file"):
        read_onnx(tmp_path / "missing.onnx")


def test_shape_mismatch_between_layers(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 4, 2])
    params["W2"] = np.ones((5, 2))
    _raises(
        save_model(tmp_path, _two_layer_nodes(), params, [1, 3]),
        InputError,
        "ONNX node 'mm2' (MatMul) shape mismatch: weight matrix (5, 2) expects 5 inputs",
    )


def test_bias_of_the_wrong_length(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 4, 2])
    params["B1"] = np.ones(3)
    _raises(
        save_model(tmp_path, _two_layer_nodes(), params, [1, 3]),
        InputError,
        "ONNX node 'add1' (Add) shape mismatch",
    )


def test_missing_initializer(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 4, 2])
    del params["W2"]
    _raises(
        save_model(tmp_path, _two_layer_nodes(), params, [1, 3]),
        InputError,
        "ONNX node 'mm2' (MatMul) reads 'W2', which is neither an initializer",
    )


def test_non_finite_weights(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 4, 2])
    params["W2"][1, 1] = np.nan
    _raises(
        save_model(tmp_path, _two_layer_nodes(), params, [1, 3]),
        InputError,
        "ONNX node 'mm2' (MatMul) has invalid parameters: weight matrix holds a non-finite value",
    )


def test_zero_input_scale(tmp_path: Path) -> None:
    params = _dense_params(np.random.default_rng(0), [3, 4, 2]) | {"zero": np.array([1.0, 0.0, 1.0])}
    nodes = [helper.make_node("Div", ["x", "zero"], ["d"], name="scale"), *_two_layer_nodes()]
    nodes[1].input[0] = "d"
    _raises(
        save_model(tmp_path, nodes, params, [1, 3]),
        InputError,
        "ONNX node 'scale' (Div) scales the input by zero",
    )


@pytest.mark.parametrize(
    ("nodes", "described"),
    [
        (
            [
                helper.make_node("Relu", ["x"], ["r"], name="early"),
                helper.make_node("MatMul", ["r", "W1"], ["y"]),
            ],
            ["activation of 3", "dense 3 -> 3"],
        ),
        (
            [
                helper.make_node("MatMul", ["x", "W1"], ["m"]),
                helper.make_node("Relu", ["m"], ["r"]),
                helper.make_node("Tanh", ["r"], ["y"], name="second"),
            ],
            ["dense 3 -> 3", "activation of 3"],
        ),
        (
            [
                helper.make_node("MatMul", ["x", "W1"], ["m"]),
                helper.make_node("Mul", ["m", "k"], ["s"], name="between"),
                helper.make_node("MatMul", ["s", "W2"], ["y"]),
            ],
            ["dense 3 -> 3", "dense 3 -> 2"],
        ),
    ],
    ids=["activation-first", "two-activations", "scale-between-layers"],
)
def test_placements_a_chain_reader_refused_are_graph_nodes(nodes, described, tmp_path: Path) -> None:
    """An activation no layer can absorb is a node of its own; a constant between layers folds into
    the layer before it (the graph reader); the function is onnxruntime's."""
    params = {"W1": np.ones((3, 3)) / 3, "W2": np.ones((3, 2)), "k": np.array([2.0])}
    net = assert_matches_onnxruntime(save_model(tmp_path, nodes, params, [1, 3]), 3)
    assert [layer.describe() for layer in net.layers] == described


@pytest.mark.parametrize(
    ("nodes", "phrase"),
    [
        (
            [helper.make_node("Gemm", ["x", "W1"], ["y"], name="g", transA=1)],
            "ONNX node 'g' (Gemm) with transA=1",
        ),
        (
            [
                helper.make_node("Div", ["k", "x"], ["d"], name="inv"),
                helper.make_node("MatMul", ["d", "W1"], ["y"]),
            ],
            "ONNX node 'inv' (Div) divides a constant by the input",
        ),
    ],
    ids=["gemm-transA", "reciprocal"],
)
def test_unsupported_placements(nodes: list[onnx.NodeProto], phrase: str, tmp_path: Path) -> None:
    params = {"W1": np.ones((3, 3)), "W2": np.ones((3, 2)), "k": np.array([2.0])}
    _raises(save_model(tmp_path, nodes, params, [1, 3]), UnsupportedError, phrase)


def test_graph_without_linear_layer(tmp_path: Path) -> None:
    nodes = [helper.make_node("Flatten", ["x"], ["y"])]
    _raises(save_model(tmp_path, nodes, {}, [1, 3]), InputError, "has no linear layer")


def test_vector_required_at_linear_layer(tmp_path: Path) -> None:
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["y"], name="batched")]
    _raises(
        save_model(tmp_path, nodes, {"W1": np.ones((3, 2))}, [1, 2, 3]),
        UnsupportedError,
        "ONNX node 'batched' (MatMul) needs a vector input",
    )


def test_bad_clip_metadata(tmp_path: Path) -> None:
    net = Network(
        (Dense([[1.0, 2.0]], [0.5], Activation.IDENTITY),),
        input_norm=InputNormalisation([0.0, 0.0], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0]),
    )
    write_onnx(net, tmp_path / "net.onnx")
    model = onnx.load(str(tmp_path / "net.onnx"))
    helper.set_model_props(model, {METADATA_INPUT_MIN: "[0.0]", METADATA_INPUT_MAX: "[1.0, 1.0]"})
    onnx.save(model, str(tmp_path / "net.onnx"))
    _raises(tmp_path / "net.onnx", InputError, f"metadata {METADATA_INPUT_MIN} should hold 2 numbers")


def test_load_network_rejects_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(
        InputError,
        match=r"unsupported network file suffix '\.h5' \(supported: \.nnet, \.onnx, \.tflite, \.nnet\.gz, \.onnx\.gz, \.tflite\.gz\)",
    ):
        load_network(tmp_path / "model.h5")
    with pytest.raises(InputError, match="no such file"):
        load_network(tmp_path / "model.onnx")
    with pytest.raises(InputError, match="unsupported network file suffix"):
        save_network(read_onnx(ACAS_ONNX[0]), tmp_path / "model.pb")


def test_load_network_reads_onnx(tmp_path: Path) -> None:
    net = load_network(str(ACAS_ONNX[0]))
    assert net.name == ACAS_ONNX[0].stem and net.source == str(ACAS_ONNX[0])


# -- random operator chains: accepted means equal to onnxruntime -------------------------------

_CHAIN_OPS = ["MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Identity", "Flatten"]


@st.composite
def _chains(draw: st.DrawFn) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray], int]:
    """A chain of 1-6 operators on a [1, n] double input; constants are sometimes the wrong size."""
    n_in = draw(st.integers(1, 4))
    width, current = n_in, "x"
    nodes, params = [], {}
    number = st.floats(-4, 4).filter(lambda v: abs(v) > 0.1)
    for index, op_type in enumerate(draw(st.lists(st.sampled_from(_CHAIN_OPS), min_size=1, max_size=6))):
        out = f"t{index}"
        if op_type in ("MatMul", "Gemm"):
            rows = width + draw(st.sampled_from([0, 0, 0, 1]))
            cols = draw(st.integers(1, 4))
            params[f"w{index}"] = np.array(
                draw(st.lists(number, min_size=rows * cols, max_size=rows * cols))
            ).reshape(rows, cols)
            nodes.append(helper.make_node(op_type, [current, f"w{index}"], [out]))
            width = cols
        elif op_type in ("Add", "Sub", "Mul", "Div"):
            size = draw(st.sampled_from([width, width, 1, width + 1]))
            params[f"k{index}"] = np.array(draw(st.lists(number, min_size=size, max_size=size)))
            operands = [f"k{index}", current] if draw(st.booleans()) else [current, f"k{index}"]
            nodes.append(helper.make_node(op_type, operands, [out]))
        else:
            nodes.append(helper.make_node(op_type, [current], [out]))
        current = out
    return nodes, params, n_in


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chain=_chains())
def test_random_chains_are_rejected_or_agree_with_onnxruntime(chain: tuple, tmp_path: Path) -> None:
    nodes, params, n_in = chain
    path = save_model(tmp_path, nodes, params, [1, n_in], elem_type=TensorProto.DOUBLE)
    try:
        net = read_onnx(path)
    except (InputError, UnsupportedError):
        return
    x = np.random.default_rng(0).uniform(-3, 3, (4, n_in))
    np.testing.assert_allclose(evaluate(net, x), run_onnxruntime(path, x), rtol=1e-9, atol=1e-9)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4))
def test_damaged_models_raise_only_qverify_errors(edits: list[tuple[int, int]], tmp_path: Path) -> None:
    """Overwrite a few bytes of a valid model: the reader parses it or raises InputError/UnsupportedError."""
    net = Network(
        (
            Dense([[1.0, 2.0], [3.0, 4.0]], [0.5, -0.5], Activation.RELU),
            Dense([[1.0, -1.0]], [0.0], Activation.IDENTITY),
        ),
        InputNormalisation([0.0, 0.0], [1.0, 1.0], [0.5, 0.5], [2.0, 2.0]),
        OutputNormalisation([1.0], [3.0]),
    )
    write_onnx(net, tmp_path / "model.onnx")
    data = bytearray((tmp_path / "model.onnx").read_bytes())
    for position, value in edits:
        data[position % len(data)] = value
    (tmp_path / "model.onnx").write_bytes(bytes(data))
    with contextlib.suppress(InputError, UnsupportedError):
        read_onnx(tmp_path / "model.onnx")
