"""ReLU6 (min(max(x, 0), 6)): read from ONNX Clip(0, 6), written back, and computed alike by the
float64 reference, onnxruntime, the simulator and the generated C in every number format."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from qverify.codegen import CompiledNetwork, render_network
from qverify.errors import RangeError, UnsupportedError
from qverify.io import read_onnx, write_onnx
from qverify.network import Activation, Dense, Network, evaluate_core
from qverify.quant import ImplementationOptions, parse_number_format, quantize_network, simulate
from qverify.quant.fixed import Overflow, Rounding


def relu6_network() -> Network:
    rng = np.random.default_rng(6)
    first = Dense(rng.normal(0, 4.0, (6, 3)), rng.normal(0, 1.0, 6), Activation.RELU6)
    last = Dense(rng.normal(0, 1.0, (2, 6)), rng.normal(0, 0.5, 2), Activation.IDENTITY)
    return Network((first, last), name="relu6")


def test_clip_0_6_reads_as_relu6_and_agrees_with_onnxruntime(tmp_path):
    net = relu6_network()
    path = tmp_path / "relu6.onnx"
    write_onnx(net, path, float32=True)
    back = read_onnx(path)
    assert [layer.activation for layer in back.layers] == [Activation.RELU6, Activation.IDENTITY]
    x = np.random.default_rng(1).uniform(-2, 2, size=(500, 3)).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    expected = np.concatenate([session.run(None, {name: row[None]})[0] for row in x])
    assert np.allclose(evaluate_core(back, x.astype(np.float64)), expected, atol=1e-4)
    assert (net.layers[0].weights @ x.T.astype(np.float64) + net.layers[0].bias[:, None] > 6).any()


def test_other_clip_bounds_are_refused_naming_the_node(tmp_path):
    import onnx
    from onnx import helper, numpy_helper

    weights = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), "W")
    low = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "lo")
    high = numpy_helper.from_array(np.array(4.0, dtype=np.float32), "hi")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
            helper.make_node("Clip", ["h", "lo", "hi"], ["y"], name="clip4"),
        ],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2])],
        [weights, low, high],
    )
    path = tmp_path / "clip4.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    with pytest.raises(UnsupportedError, match=r"clip4.*\[0, 4\]"):
        read_onnx(path)


@pytest.mark.parametrize("label", ["float", "double", "half", "8.8", "16.16"])
def test_c_equals_simulator(tmp_path, label):
    net = relu6_network()
    number = parse_number_format(label, Rounding.NEAREST, Overflow.SATURATE)
    qnet = quantize_network(net, ImplementationOptions(number))
    rng = np.random.default_rng(2)
    x = rng.uniform(-2, 2, size=(300, 3))
    inputs = np.rint(x * number.scale).astype(np.int64) if qnet.is_fixed else x
    compiled = CompiledNetwork(render_network(qnet), tmp_path / "c", qnet.is_integer)
    simulated = simulate(qnet, inputs).outputs
    assert np.array_equal(compiled.run(inputs).outputs, simulated)
    pre = simulate(qnet, inputs, trace=True).layers[0]
    assert (pre.pre > qnet.relu6_top).any() and (pre.post <= qnet.relu6_top).all()


def test_a_format_that_cannot_hold_6_is_refused():
    number = parse_number_format("3.5", Rounding.NEAREST, Overflow.SATURATE)
    with pytest.raises(RangeError, match="relu6"):
        quantize_network(relu6_network(), ImplementationOptions(number))
