"""Convolution and pooling layers of the IR: geometry, MAC order, shapes, and the ONNX reader's
folding (BatchNormalization, bias Add, Relu after MaxPool) against onnxruntime."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qverify.errors import InputError, UnsupportedError
from qverify.io import read_onnx, write_onnx
from qverify.network import Activation, AveragePool2D, Conv2D, Dense, MaxPool2D, Network, evaluate_core


def loop_conv(x: np.ndarray, layer: Conv2D) -> np.ndarray:
    """The textbook definition (ONNX Conv, zero padding), with explicit loops."""
    _channels, height, width = layer.input_shape
    out_c, out_h, out_w = layer.output_shape
    image = x.reshape(layer.input_shape)
    top, left, _, _ = layer.pads
    kh, kw = layer.kernel
    per_group = out_c // layer.groups
    result = np.zeros(layer.output_shape)
    for oc, oy, ox in itertools.product(range(out_c), range(out_h), range(out_w)):
        total = layer.bias[oc]
        for ic, ky, kx in itertools.product(range(layer.group_in_channels), range(kh), range(kw)):
            iy, ix = oy * layer.strides[0] - top + ky, ox * layer.strides[1] - left + kx
            if 0 <= iy < height and 0 <= ix < width:
                channel = (oc // per_group) * layer.group_in_channels + ic
                total += layer.weights[oc, ic, ky, kx] * image[channel, iy, ix]
        result[oc, oy, ox] = total
    return result.reshape(-1)


CONV_CASES = [
    # (input shape, out channels, kernel, strides, pads, groups)
    ((1, 6, 6), 3, (3, 3), (1, 1), (0, 0, 0, 0), 1),
    ((2, 7, 5), 4, (3, 2), (2, 1), (1, 0, 1, 1), 1),
    ((3, 5, 5), 3, (3, 3), (1, 1), (1, 1, 1, 1), 3),  # depthwise
    ((4, 6, 6), 4, (1, 1), (1, 1), (0, 0, 0, 0), 2),  # grouped 1x1
    ((1, 4, 4), 2, (4, 4), (1, 1), (2, 2, 2, 2), 1),
]


@pytest.mark.parametrize("shape, out_c, kernel, strides, pads, groups", CONV_CASES)
def test_conv_taps_and_matrix_equal_the_definition(shape, out_c, kernel, strides, pads, groups):
    rng = np.random.default_rng(sum(shape) + out_c)
    weights = rng.normal(size=(out_c, shape[0] // groups, *kernel))
    layer = Conv2D(weights, rng.normal(size=out_c), Activation.IDENTITY, shape, strides, pads, groups)
    x = rng.normal(size=(5, layer.n_in))
    expected = np.array([loop_conv(row, layer) for row in x])
    taps = layer.taps()
    gathered = np.where(taps.valid[None], x[:, taps.inputs] * weights.reshape(-1)[taps.weights][None], 0)
    by_taps = gathered.sum(axis=2) + layer.expanded_bias()
    assert np.allclose(by_taps, expected)
    assert np.allclose(x @ layer.matrix.T + layer.expanded_bias(), expected)
    # the MAC order is (input channel, kernel row, kernel column): increasing flat input index
    for row, count in zip(taps.inputs, taps.count):
        assert np.all(np.diff(row[:count]) > 0)


def test_pools_take_windows_without_padding():
    x = np.arange(2 * 5 * 5, dtype=np.float64).reshape(1, -1) * np.array([1.0])
    pool = MaxPool2D((2, 5, 5), (3, 3), (2, 2), (1, 1, 1, 1))
    assert pool.output_shape == (2, 3, 3)
    image = x.reshape(2, 5, 5)
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    expected = np.array(
        [
            [[padded[c, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max() for j in range(3)] for i in range(3)]
            for c in range(2)
        ]
    )
    assert np.array_equal(evaluate_core(Network((pool,)), x)[0], expected.reshape(-1))
    average = AveragePool2D((2, 5, 5), (3, 3), (2, 2), (1, 1, 1, 1))
    zero_padded = np.pad(image, ((0, 0), (1, 1), (1, 1)))
    counts = np.pad(np.ones((5, 5)), 1)
    expected_mean = np.array(
        [
            [
                [
                    zero_padded[c, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].sum()
                    / counts[2 * i : 2 * i + 3, 2 * j : 2 * j + 3].sum()
                    for j in range(3)
                ]
                for i in range(3)
            ]
            for c in range(2)
        ]
    )
    assert np.allclose(evaluate_core(Network((average,)), x)[0], expected_mean.reshape(-1))
    including = AveragePool2D((2, 5, 5), (3, 3), (2, 2), (1, 1, 1, 1), count_include_pad=True)
    assert np.array_equal(including.divisors(), np.full(18, 9))


@pytest.mark.parametrize(
    "build, phrase",
    [
        (
            lambda: Conv2D(np.ones((2, 3, 3, 3)), np.ones(2), Activation.RELU, (2, 5, 5)),
            "expects 3 input channels",
        ),
        (lambda: Conv2D(np.ones((2, 1, 3, 3)), np.ones(3), Activation.RELU, (1, 5, 5)), "3 biases"),
        (
            lambda: Conv2D(np.ones((2, 1, 7, 3)), np.ones(2), Activation.RELU, (1, 5, 5)),
            "larger than the padded input",
        ),
        (
            lambda: Conv2D(np.ones((3, 1, 3, 3)), np.ones(3), Activation.RELU, (2, 5, 5), groups=2),
            "must divide",
        ),
        (lambda: MaxPool2D((1, 4, 4), (2, 2), (1, 1), (2, 0, 0, 0)), "smaller than the kernel"),
        (lambda: Conv2D(np.full((1, 1, 2, 2), np.nan), np.ones(1), Activation.RELU, (1, 4, 4)), "non-finite"),
    ],
)
def test_bad_geometry_is_refused(build, phrase):
    with pytest.raises(InputError, match=phrase):
        build()


def test_network_checks_shapes_between_spatial_layers():
    conv = Conv2D(np.ones((2, 1, 3, 3)), np.zeros(2), Activation.RELU, (1, 6, 6))  # -> 2x4x4
    pool = MaxPool2D((2, 3, 3), (2, 2), (1, 1))  # wants 2x3x3 = 18 values, conv gives 32
    with pytest.raises(InputError, match="layer 1 has 32 outputs but layer 2 expects 18"):
        Network((conv, pool))
    other = MaxPool2D((4, 2, 4), (2, 2), (2, 2))  # 32 values, but another shape
    with pytest.raises(InputError, match="shape mismatch"):
        Network((conv, other))
    Network(
        (conv, MaxPool2D((2, 4, 4), (2, 2), (2, 2)), Dense(np.ones((3, 8)), np.zeros(3), Activation.IDENTITY))
    )


def _model(tmp_path: Path, nodes, initializers: dict, input_shape, output_size: int) -> Path:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, output_size])],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return path


def _agrees_with_onnxruntime(path: Path, input_shape, seed: int = 0) -> Network:
    net = read_onnx(path)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(64, *input_shape[1:])).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = np.concatenate([session.run(None, {"x": row[None]})[0] for row in x])
    got = evaluate_core(net, x.reshape(64, -1).astype(np.float64))
    assert np.allclose(got, expected, atol=1e-4, rtol=1e-4)
    return net


def test_reader_folds_batch_norm_bias_and_relu_after_max_pool(tmp_path):
    rng = np.random.default_rng(1)
    init = {
        "W": rng.normal(size=(3, 2, 3, 3)),
        "scale": rng.uniform(0.5, 2, 3),
        "shift": rng.normal(size=3),
        "mean": rng.normal(size=3),
        "var": rng.uniform(0.5, 2, 3),
        "cb": rng.normal(size=(3, 1, 1)),
        "G": rng.normal(size=(4, 12)),
        "gb": rng.normal(size=4),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Add", ["c", "cb"], ["cb_out"]),
        helper.make_node(
            "BatchNormalization", ["cb_out", "scale", "shift", "mean", "var"], ["bn"], epsilon=1e-3
        ),
        helper.make_node("MaxPool", ["bn"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Relu", ["p"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "G", "gb"], ["y"], transB=1),
    ]
    net = _agrees_with_onnxruntime(_model(tmp_path, nodes, init, (1, 2, 7, 7), 4), (1, 2, 7, 7))
    assert [type(layer).__name__ for layer in net.layers] == ["Conv2D", "MaxPool2D", "Dense"]
    assert net.layers[0].activation is Activation.RELU


def test_reader_reads_average_and_global_pools(tmp_path):
    rng = np.random.default_rng(2)
    init = {
        "W": rng.normal(size=(2, 1, 3, 3)),
        "B": rng.normal(size=2),
        "G": rng.normal(size=(3, 2)),
        "gb": rng.normal(size=3),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], auto_pad="SAME_UPPER"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("AveragePool", ["r"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "G", "gb"], ["y"], transB=1),
    ]
    net = _agrees_with_onnxruntime(_model(tmp_path, nodes, init, (1, 1, 6, 6), 3), (1, 1, 6, 6))
    assert [type(layer).__name__ for layer in net.layers] == [
        "Conv2D",
        "AveragePool2D",
        "AveragePool2D",
        "Dense",
    ]


@pytest.mark.parametrize(
    "node, error, phrase",
    [
        (
            helper.make_node("Conv", ["x", "W"], ["y"], name="dilated", dilations=[2, 2]),
            UnsupportedError,
            "dilations",
        ),
        (
            helper.make_node("MaxPool", ["x"], ["y"], name="ceil", kernel_shape=[2, 2], ceil_mode=1),
            UnsupportedError,
            "ceil_mode",
        ),
        (
            helper.make_node("Conv", ["x", "W"], ["y"], name="wrong", kernel_shape=[2, 2]),
            InputError,
            "kernel_shape",
        ),
    ],
)
def test_reader_names_unsupported_or_malformed_spatial_nodes(tmp_path, node, error, phrase):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((1, 1, 3, 3), dtype=np.float32), "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(error) as caught:
        read_onnx(path)
    assert f"'{node.name}'" in str(caught.value) and phrase in str(caught.value)


def test_written_conv_network_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(4)
    conv = Conv2D(
        rng.normal(size=(3, 2, 3, 3)), rng.normal(size=3), Activation.RELU, (2, 6, 6), (1, 1), (1, 1, 1, 1)
    )
    pool = AveragePool2D((3, 6, 6), (2, 2), (2, 2))
    dense = Dense(rng.normal(size=(5, 27)), rng.normal(size=5), Activation.IDENTITY)
    net = Network((conv, pool, dense), name="cnn")
    for gemm in (False, True):
        write_onnx(net, tmp_path / "cnn.onnx", gemm=gemm)
        back = read_onnx(tmp_path / "cnn.onnx")
        assert back.digest() == net.digest()
