"""The ONNX patterns deep-learning frameworks export around convolutions, read against onnxruntime.

Real ONNX files built with `onnx.helper` in the layout PyTorch (or Keras) writes: `Pad` before an
average pool (PyTorch's `AvgPool2d(padding=p)`, opsets 10 and 13), before a convolution and before a
max pool of ReLU outputs; `Transpose` to NHWC before a flatten and a dense layer; per-channel input
normalisation (`Sub`/`Div`) before a convolution; `BatchNormalization` after one; `MatMul` + `Add`
with the bias first. Accepted means: the network qverify reads computes what onnxruntime computes.
Everything else is an error naming the node (and `qverify info` exits 2 with one `error:` line).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper
from test_io_onnx import run_onnxruntime, save_model

from qverify.errors import InputError, UnsupportedError
from qverify.io import read_onnx
from qverify.network import AveragePool2D, Conv2D, Dense, MaxPool2D, evaluate


def _params(rng: np.random.Generator, **shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {name: rng.normal(0.0, 0.5, shape).astype(np.float32) for name, shape in shapes.items()}


def _pads_input(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _agrees(path: Path, shape: tuple[int, ...], seed: int = 0, low: float = -1.0):
    """read_onnx's network against onnxruntime on random images (float32 inputs)."""
    net = read_onnx(path)
    x = np.random.default_rng(seed).uniform(low, 1.0, (12, int(np.prod(shape)))).astype(np.float32)
    np.testing.assert_allclose(
        evaluate(net, x.astype(np.float64)), run_onnxruntime(path, x), rtol=2e-5, atol=2e-5
    )
    return net


@pytest.mark.parametrize("opset", [10, 13, 18])
def test_pytorch_average_pool_with_padding(tmp_path, opset):
    """Conv -> Relu -> Pad -> AveragePool -> Flatten -> Gemm: the Pad's zeros are counted by the
    pool (count_include_pad), whichever way the opset spells the Pad."""
    rng = np.random.default_rng(1)
    params = _params(rng, W1=(4, 1, 2, 2), B1=(4,), W2=(3, 4 * 3 * 3), B2=(3,))
    if opset < 11:
        pad = helper.make_node(
            "Pad", ["r"], ["p"], name="Pad_2", mode="constant", pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.0
        )
    elif opset < 18:
        params["pads"] = _pads_input([0, 0, 1, 1, 0, 0, 1, 1])
        params["zero"] = np.array(0.0, dtype=np.float32)
        pad = helper.make_node("Pad", ["r", "pads", "zero"], ["p"], name="Pad_2", mode="constant")
    else:
        params["pads"] = _pads_input([1, 1, 1, 1])
        params["axes"] = np.array([2, 3], dtype=np.int64)
        pad = helper.make_node("Pad", ["r", "pads", "", "axes"], ["p"], name="Pad_2")
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c"], kernel_shape=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        pad,
        helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Flatten", ["a"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1),
    ]
    path = save_model(tmp_path, nodes, params, [1, 1, 11, 11], [1, 3], opset=opset)
    net = _agrees(path, (1, 11, 11))
    pool = net.layers[1]
    assert isinstance(pool, AveragePool2D) and pool.count_include_pad
    assert pool.input_shape == (4, 10, 10) and pool.pads == (1, 1, 1, 1) and pool.output_shape == (4, 3, 3)


def test_pad_before_a_convolution_adds_to_its_pads(tmp_path):
    """Asymmetric zero padding (F.pad) before a strided, padded convolution, on the graph input."""
    rng = np.random.default_rng(2)
    params = _params(rng, W1=(3, 2, 3, 3), B1=(3,), W2=(2, 3 * 4 * 3), B2=(2,))
    params["pads"] = _pads_input([0, 0, 2, 0, 0, 0, 1, 3])
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"], name="pad_in"),
        helper.make_node(
            "Conv", ["p", "W1", "B1"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0]
        ),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "W2t"], ["m"]),
        helper.make_node("Add", ["B2", "m"], ["y"]),  # bias first: PyTorch writes either order
    ]
    params["W2t"] = params.pop("W2").T.copy()
    path = save_model(tmp_path, nodes, params, [1, 2, 5, 4], [1, 2], opset=13)
    net = _agrees(path, (2, 5, 4))
    conv = net.layers[0]
    assert isinstance(conv, Conv2D) and conv.input_shape == (2, 5, 4) and conv.pads == (3, 1, 1, 3)


def test_pad_before_a_max_pool_of_relu_outputs(tmp_path):
    """Zeros never change a maximum of ReLU outputs: the Pad is the pool's (ignored) padding."""
    rng = np.random.default_rng(3)
    params = _params(rng, W1=(2, 1, 2, 2), B1=(2,), W2=(3, 2 * 3 * 3), B2=(3,))
    params["pads"] = _pads_input([0, 0, 1, 1, 0, 0, 0, 0])
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c"], kernel_shape=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Pad", ["r", "pads"], ["p"]),
        helper.make_node("MaxPool", ["p"], ["m"], kernel_shape=[3, 3], strides=[3, 3]),
        helper.make_node("Flatten", ["m"], ["f"]),
        helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1),
    ]
    path = save_model(tmp_path, nodes, params, [1, 1, 9, 9], [1, 3])
    net = _agrees(path, (1, 9, 9))
    assert isinstance(net.layers[1], MaxPool2D) and net.layers[1].pads == (1, 1, 0, 0)


def test_nhwc_transpose_before_flatten_permutes_the_dense_columns(tmp_path):
    """Keras-style flattening: Conv -> Relu -> Transpose(0, 2, 3, 1) -> Reshape -> MatMul -> Add."""
    rng = np.random.default_rng(4)
    params = _params(rng, W1=(3, 2, 2, 2), B1=(3,), W2=(4 * 4 * 3, 5), B2=(5,))
    params["shape"] = np.array([1, -1], dtype=np.int64)
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c"], kernel_shape=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], name="to_nhwc", perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "W2"], ["m"]),
        helper.make_node("Add", ["m", "B2"], ["y"]),
    ]
    path = save_model(tmp_path, nodes, params, [1, 2, 5, 5], [1, 5])
    net = _agrees(path, (2, 5, 5))
    assert [type(layer) for layer in net.layers] == [Conv2D, Dense]


def test_transposed_input_and_per_channel_normalisation(tmp_path):
    """An NHWC graph input transposed to NCHW (a real reordering, 3 channels) and normalised per
    channel before a dense layer; a single-channel NHWC input before a convolution (the identity)."""
    rng = np.random.default_rng(5)
    params = _params(rng, W=(3 * 2 * 2, 4), B=(4,))
    params["mean"] = np.array([0.5, 0.25, -0.5], dtype=np.float32).reshape(1, 3, 1, 1)
    params["std"] = np.array([2.0, 0.5, 0.25], dtype=np.float32).reshape(1, 3, 1, 1)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
        helper.make_node("Sub", ["t", "mean"], ["s"]),
        helper.make_node("Div", ["s", "std"], ["n"]),
        helper.make_node("Flatten", ["n"], ["f"]),
        helper.make_node("MatMul", ["f", "W"], ["m"]),
        helper.make_node("Add", ["m", "B"], ["y"]),
    ]
    _agrees(save_model(tmp_path, nodes, params, [1, 2, 2, 3], [1, 4], name="dense.onnx"), (2, 2, 3))

    conv = _params(rng, W1=(2, 1, 2, 2), B1=(2,), W2=(2, 2 * 2 * 2), B2=(2,))
    conv["mean"] = np.array([0.5], dtype=np.float32).reshape(1, 1, 1, 1)
    conv["std"] = np.array([0.25], dtype=np.float32).reshape(1, 1, 1, 1)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
        helper.make_node("Sub", ["t", "mean"], ["s"]),
        helper.make_node("Div", ["s", "std"], ["n"]),
        helper.make_node("Conv", ["n", "W1", "B1"], ["c"], kernel_shape=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1),
    ]
    net = _agrees(save_model(tmp_path, nodes, conv, [1, 3, 3, 1], [1, 2], name="conv.onnx"), (3, 3, 1))
    assert net.input_norm is not None and np.all(net.input_norm.range == np.float32(0.25))


def test_batch_normalization_after_convolution_and_dense(tmp_path):
    """Inference-mode BatchNormalization folded into the Conv and the Gemm before it."""
    rng = np.random.default_rng(6)
    params = _params(rng, W1=(3, 1, 3, 3), B1=(3,), W2=(4, 3 * 2 * 2), B2=(4,))
    for prefix, channels in (("bn1", 3), ("bn2", 4)):
        params[f"{prefix}_scale"] = rng.uniform(0.5, 2.0, channels).astype(np.float32)
        params[f"{prefix}_shift"] = rng.normal(0, 1, channels).astype(np.float32)
        params[f"{prefix}_mean"] = rng.normal(0, 1, channels).astype(np.float32)
        params[f"{prefix}_var"] = rng.uniform(0.2, 3.0, channels).astype(np.float32)
    bn = [f"_{part}" for part in ("scale", "shift", "mean", "var")]
    nodes = [
        helper.make_node(
            "Conv", ["x", "W1", "B1"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("BatchNormalization", ["c", *(f"bn1{s}" for s in bn)], ["b"], epsilon=1e-3),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "W2", "B2"], ["g"], transB=1),
        helper.make_node("BatchNormalization", ["g", *(f"bn2{s}" for s in bn)], ["y"]),
    ]
    path = save_model(tmp_path, nodes, params, [1, 1, 4, 4], [1, 4])
    assert len(_agrees(path, (1, 4, 4)).layers) == 2


def _pad_model(tmp_path: Path, after: list, pads=(0, 0, 1, 1, 0, 0, 1, 1), mode: str = "constant",
               value: float = 0.0, relu: bool = True, name: str = "bad.onnx") -> Path:  # fmt: skip
    rng = np.random.default_rng(7)
    params = _params(rng, W1=(2, 1, 2, 2), B1=(2,))
    params["pads"] = _pads_input(list(pads))
    params["value"] = np.array(value, dtype=np.float32)
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c"], kernel_shape=[2, 2])]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes.append(
        helper.make_node("Pad", [nodes[-1].output[0], "pads", "value"], ["p"], name="Pad_2", mode=mode)
    )
    for op_type, attributes in after:
        nodes.append(
            helper.make_node(op_type, [nodes[-1].output[0]], [f"{op_type.lower()}_out"], **attributes)
        )
    return save_model(tmp_path, nodes, params, [1, 1, 6, 6], None, name=name)


AVERAGE = ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]})
REJECTED = [
    ("reflect", {"after": [AVERAGE], "mode": "reflect"}, "mode 'reflect'"),
    ("value", {"after": [AVERAGE], "value": 1.5}, "pads with 1.5"),
    ("crop", {"after": [AVERAGE], "pads": (0, 0, -1, 0, 0, 0, 0, 0)}, "negative pads"),
    ("channel", {"after": [AVERAGE], "pads": (0, 1, 0, 0, 0, 0, 0, 0)}, "batch or channel axis"),
    ("before relu", {"after": [("Relu", {})], "relu": False}, "right before a Conv"),
    ("at the output", {"after": []}, "pads the graph's output"),
    (
        "max without relu",
        {"after": [("MaxPool", {"kernel_shape": [2, 2]})], "relu": False},
        "output of a ReLU",
    ),
    (
        "uncounted own pads",
        {"after": [("AveragePool", {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]})]},
        "count_include_pad=0",
    ),
]


@pytest.mark.parametrize(("case", "kwargs", "phrase"), REJECTED, ids=[case[0] for case in REJECTED])
def test_pads_that_cannot_be_folded_are_errors_naming_the_node(tmp_path, case, kwargs, phrase):
    path = _pad_model(tmp_path, **kwargs)
    with pytest.raises(UnsupportedError) as caught:
        read_onnx(path)
    message = str(caught.value)
    assert phrase in message and (
        "'Pad_2' (Pad)" in message or "(AveragePool)" in message or "(MaxPool)" in message
    )


def test_transposes_no_dense_layer_absorbs_are_permute_nodes(tmp_path):
    """tf2onnx's NHWC -> NCHW before a Conv, and a reordering of the outputs: `Permute` nodes, with
    onnxruntime's values."""
    rng = np.random.default_rng(8)
    params = _params(rng, W1=(2, 2, 2, 2), B1=(2,), W2=(4, 3))
    before_conv = [
        helper.make_node("Transpose", ["x"], ["t"], name="swap", perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["t", "W1", "B1"], ["y"], kernel_shape=[2, 2]),
    ]
    path = save_model(tmp_path, before_conv, params, [1, 3, 3, 2], None, name="a.onnx")
    net = read_onnx(path)
    assert [layer.describe().split()[0] for layer in net.layers] == ["permute", "conv"]
    x = rng.normal(size=(20, 18))
    np.testing.assert_allclose(evaluate(net, x), run_onnxruntime(path, x), rtol=1e-5, atol=1e-6)
    at_output = [
        helper.make_node("MatMul", ["x", "W2"], ["m"]),
        helper.make_node("Reshape", ["m", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], name="last", perm=[0, 2, 1]),
    ]
    params["shape"] = np.array([1, 2, 3], dtype=np.int64)
    params["W2"] = rng.normal(size=(4, 6)).astype(np.float32)
    path = save_model(tmp_path, at_output, params, [1, 4], None, name="b.onnx")
    net = read_onnx(path)
    assert [layer.describe().split()[0] for layer in net.layers] == ["dense", "permute"]
    x = rng.normal(size=(20, 4))
    np.testing.assert_allclose(evaluate(net, x), run_onnxruntime(path, x), rtol=1e-5, atol=1e-6)
    bad_perm = [helper.make_node("Transpose", ["x"], ["y"], name="odd", perm=[0, 0])]
    with pytest.raises(InputError, match="not a permutation"):
        read_onnx(save_model(tmp_path, bad_perm, {}, [1, 4], None, name="c.onnx"))


def test_cli_names_the_unsupported_pad(tmp_path):
    """`qverify info` on a reflect Pad: exit 2, one `error:` line naming the node."""
    path = _pad_model(tmp_path, after=[AVERAGE], mode="reflect")
    done = subprocess.run(
        [sys.executable, "-m", "qverify", "info", str(path)], check=False, capture_output=True, text=True
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "'Pad_2' (Pad)" in lines[0]


@pytest.mark.parametrize("batch", ["N", 1])
def test_pytorch_view_of_the_size_is_folded(tmp_path, batch):
    """`x.view(x.size(0), -1)` as older PyTorch exports it: Shape -> Gather -> Unsqueeze -> Concat
    into the Reshape's shape, a branch on the dynamic tensor whose values are constants at batch 1
    (also with a symbolic batch dimension)."""
    rng = np.random.default_rng(9)
    params = _params(rng, W1=(3, 1, 2, 2), B1=(3,), W2=(4, 3 * 3 * 3), B2=(4,))
    params["zero"] = np.array(0, dtype=np.int64)
    params["minus_one"] = np.array([-1], dtype=np.int64)
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c"], kernel_shape=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"], name="Shape_2"),
        helper.make_node("Gather", ["s", "zero"], ["g"], axis=0),
        helper.make_node("Unsqueeze", ["g", "axes"], ["u"]),
        helper.make_node("Concat", ["u", "minus_one"], ["shape"], axis=0),
        helper.make_node("Reshape", ["r", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1),
    ]
    params["axes"] = np.array([0], dtype=np.int64)
    path = save_model(tmp_path, nodes, params, [batch, 1, 4, 4], [batch, 4])
    assert [type(layer) for layer in _agrees(path, (1, 4, 4)).layers] == [Conv2D, Dense]


def test_shape_computation_that_is_not_folded_is_named(tmp_path):
    """A shape computation the folding leaves (ConstantOfShape builds a tensor: not evaluated) is
    read as it is: the reader names the node."""
    params = {"W": np.ones((4, 2), dtype=np.float32)}
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Shape", ["m"], ["s"], name="size"),
        helper.make_node("ConstantOfShape", ["s"], ["z"], name="zeros"),
        helper.make_node("Add", ["m", "z"], ["y"], name="plus_zeros"),
    ]
    with pytest.raises(UnsupportedError, match="'zeros'"):
        read_onnx(save_model(tmp_path, nodes, params, [1, 4], None))
