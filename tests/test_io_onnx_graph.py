"""The ONNX reader on graphs (issue 41): the export patterns of PyTorch's ResNet, MobileNetV2 and
SqueezeNet blocks and of a Keras model through tf2onnx, read as `Network` graphs whose float64
reference is onnxruntime's function; and the broken graphs onnxruntime refuses, refused with one
`error:` line naming what is wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qverify.errors import InputError, UnsupportedError
from qverify.io import read_onnx, write_onnx
from qverify.network import Add, Concat, Permute, evaluate

RNG = np.random.default_rng(41)


def _init(name: str, value) -> onnx.TensorProto:
    value = np.asarray(value)
    return numpy_helper.from_array(value.astype(np.int64 if value.dtype.kind in "iu" else np.float32), name)


def _model(tmp_path: Path, nodes, inits: dict, input_shape, output: str, name: str, opset: int = 13) -> Path:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [_init(k, v) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def _agrees(path: Path, samples: int = 30, tolerance: float = 2e-5):
    """read_onnx's network and onnxruntime give the same outputs on random inputs."""
    net = read_onnx(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    declared = session.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in declared.shape]
    x = RNG.uniform(-1, 1, (samples, net.n_inputs))
    expected = np.array(
        [
            session.run(None, {declared.name: row.reshape(shape).astype(np.float32)})[0].reshape(-1)
            for row in x
        ]
    )
    np.testing.assert_allclose(evaluate(net, x), expected, rtol=tolerance, atol=tolerance)
    return net


class _Builder:
    """Nodes and initializers of a hand-written export, with fresh names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict = {}
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def node(self, op: str, inputs: list[str], **attributes) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attributes))
        return out

    def const(self, value) -> str:
        name = self.name("c")
        self.inits[name] = value
        return name

    def conv(
        self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, pad: int = 0, group: int = 1
    ) -> str:
        weights = self.const(RNG.normal(0, 0.5, (c_out, c_in // group, k, k)))
        bias = self.const(RNG.normal(0, 0.1, c_out))
        return self.node(
            "Conv",
            [x, weights, bias],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=group,
        )

    def bn(self, x: str, channels: int) -> str:
        params = [
            RNG.uniform(0.5, 1.5, channels),
            RNG.normal(0, 0.1, channels),
            RNG.normal(0, 0.1, channels),
            RNG.uniform(0.5, 1.5, channels),
        ]
        return self.node("BatchNormalization", [x, *[self.const(p) for p in params]], epsilon=1e-5)

    def relu6(self, x: str) -> str:
        return self.node("Clip", [x, self.const(np.array(0.0)), self.const(np.array(6.0))])


def test_pytorch_resnet_basic_blocks(tmp_path):
    """conv-BN-ReLU-conv-BN + shortcut (identity, then a strided 1x1 conv with BN), ReLU after the
    Add, global average pool, flatten, Gemm: as `torch.onnx.export` writes a CIFAR ResNet."""
    b = _Builder()
    x = b.node("Relu", [b.bn(b.conv("x", 3, 4, 3, pad=1), 4)])
    for stride, c_in, c_out in ((1, 4, 4), (2, 4, 8)):
        y = b.node("Relu", [b.bn(b.conv(x, c_in, c_out, 3, stride=stride, pad=1), c_out)])
        y = b.bn(b.conv(y, c_out, c_out, 3, pad=1), c_out)
        shortcut = x if stride == 1 else b.bn(b.conv(x, c_in, c_out, 1, stride=2), c_out)
        x = b.node("Relu", [b.node("Add", [y, shortcut])])
    pooled = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    out = b.node("Gemm", [pooled, b.const(RNG.normal(0, 0.5, (10, 8))), b.const(np.zeros(10))], transB=1)
    net = _agrees(_model(tmp_path, b.nodes, b.inits, [1, 3, 8, 8], out, "resnet"))
    assert not net.is_chain
    assert sum(isinstance(layer, Add) for layer in net.layers) == 2
    assert all(layer.activation.value == "relu" for layer in net.layers if isinstance(layer, Add))
    # BatchNormalization folded into the convolutions before it: no node of its own
    assert len(net.layers) == 1 + 2 + 3 + 2 + 1 + 1


def test_a_parameter_shared_through_identity_is_read_as_its_initializer(tmp_path):
    """torch.onnx without constant folding writes `Identity` of an initializer where two modules share
    one tensor (the zoo's resnet4b: one bias under two names); the alias is a constant of any size,
    not a node reading no dynamic tensor."""
    b = _Builder()
    bias = b.const(RNG.normal(0, 0.1, 70))
    alias = b.node("Identity", [bias])
    weights = [b.const(RNG.normal(0, 0.5, (n, 70))) for n in (12, 70)]
    hidden = b.node("Relu", [b.node("Gemm", ["x", weights[0], bias], transB=0)])
    hidden = b.node("Gemm", [hidden, weights[1], alias], transB=0)
    net = _agrees(_model(tmp_path, b.nodes, b.inits, [1, 12], hidden, "shared"))
    assert len(net.layers) == 2


def test_mobilenet_v2_inverted_residual(tmp_path):
    """expand 1x1 - BN - ReLU6, depthwise 3x3 - BN - ReLU6, project 1x1 - BN (linear bottleneck),
    residual Add."""
    b = _Builder()
    x = b.relu6(b.bn(b.conv("x", 3, 8, 3, pad=1), 8))
    y = b.relu6(b.bn(b.conv(x, 8, 16, 1), 16))
    y = b.relu6(b.bn(b.conv(y, 16, 16, 3, pad=1, group=16), 16))
    y = b.bn(b.conv(y, 16, 8, 1), 8)
    x = b.node("Add", [x, y])
    out = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    net = _agrees(_model(tmp_path, b.nodes, b.inits, [1, 3, 6, 6], out, "mobilenet"))
    assert any(getattr(layer, "groups", 1) == 16 for layer in net.layers)
    assert sum(layer.activation.value == "relu6" for layer in net.layers) == 3


def test_squeezenet_fire_module(tmp_path):
    """squeeze 1x1 - ReLU, then expand 1x1 - ReLU and expand 3x3 - ReLU joined by Concat."""
    b = _Builder()
    x = b.node("MaxPool", [b.node("Relu", [b.conv("x", 3, 8, 3)])], kernel_shape=[2, 2], strides=[2, 2])
    squeeze = b.node("Relu", [b.conv(x, 8, 2, 1)])
    left = b.node("Relu", [b.conv(squeeze, 2, 4, 1)])
    right = b.node("Relu", [b.conv(squeeze, 2, 4, 3, pad=1)])
    joined = b.node("Concat", [left, right], axis=1)
    out = b.node("Flatten", [b.node("GlobalAveragePool", [b.conv(joined, 8, 5, 1)])], axis=1)
    net = _agrees(_model(tmp_path, b.nodes, b.inits, [1, 3, 9, 9], out, "squeeze"))
    (concat,) = [layer for layer in net.layers if isinstance(layer, Concat)]
    assert concat.output_shape == (8, 3, 3)


def test_keras_cnn_through_tf2onnx(tmp_path):
    """tf2onnx's Keras export: an NHWC input transposed to NCHW, Conv with its bias, BatchNormalization
    as Mul and Add, MaxPool, Identity chains, the transpose back to NHWC before Reshape, MatMul and
    Add, a final Softmax (dropped: the property is read on the logits, and `notes` says so)."""
    b = _Builder()
    t = b.node("Transpose", ["x"], perm=[0, 3, 1, 2])
    y = b.node("Relu", [b.conv(t, 3, 4, 3, pad=1)])
    y = b.node("Mul", [y, b.const(RNG.uniform(0.5, 1.5, (1, 4, 1, 1)))])
    y = b.node("Add", [y, b.const(RNG.normal(0, 0.1, (1, 4, 1, 1)))])
    y = b.node("Identity", [b.node("Identity", [y])])
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.node("Transpose", [y], perm=[0, 2, 3, 1])
    y = b.node("Reshape", [y, b.const(np.array([-1, 36]))])
    y = b.node(
        "Add", [b.node("MatMul", [y, b.const(RNG.normal(0, 0.3, (36, 5)))]), b.const(RNG.normal(0, 0.1, 5))]
    )
    logits = y
    out = b.node("Softmax", [logits], axis=-1)
    path = _model(tmp_path, b.nodes, b.inits, [1, 6, 6, 3], out, "keras")
    net = read_onnx(path)
    assert net.output_softmax and "Softmax" in net.notes[0]
    assert isinstance(net.layers[0], Permute)  # the NHWC input, moved once
    # the logits: the same graph without the Softmax is onnxruntime's function
    b.nodes.pop()
    _agrees(_model(tmp_path, b.nodes, b.inits, [1, 6, 6, 3], logits, "keras-logits"))


def test_graphs_write_and_read_back(tmp_path):
    """`write_onnx` of a graph (residual add, concat, permutation) reads back to the same network,
    and onnxruntime runs it."""
    b = _Builder()
    x = b.node("Relu", [b.conv("x", 2, 3, 3, pad=1)])
    y = b.conv(x, 3, 3, 3, pad=1)
    z = b.node("Relu", [b.node("Add", [x, y])])
    joined = b.node("Concat", [z, x], axis=1)
    out = b.node("Flatten", [joined], axis=1)
    net = read_onnx(_model(tmp_path, b.nodes, b.inits, [1, 2, 5, 5], out, "graph"))
    write_onnx(net, tmp_path / "written.onnx", float32=True)
    back = _agrees(tmp_path / "written.onnx")
    assert back.wiring == net.wiring


def _hostile(tmp_path: Path, kind: str) -> Path:
    w = RNG.normal(size=(3, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="first")]
    if kind == "cycle":
        nodes = [
            helper.make_node("Add", ["x", "c"], ["b"], name="loop_add"),
            helper.make_node("MatMul", ["b", "W"], ["c"], name="loop_mm"),
        ]
        out = "c"
    elif kind == "dangling":
        nodes.append(helper.make_node("Add", ["a", "ghost"], ["y"], name="reads_ghost"))
        out = "y"
    elif kind == "duplicate":
        nodes.append(helper.make_node("Relu", ["a"], ["a"], name="again"))
        out = "a"
    elif kind == "concat-shapes":
        nodes += [
            helper.make_node("Reshape", ["a", "shape4"], ["a4"], name="r"),
            helper.make_node("Reshape", ["x", "shape4b"], ["x4"], name="rx"),
            helper.make_node("Concat", ["a4", "x4"], ["y"], name="bad_concat", axis=1),
        ]
        out = "y"
    else:  # add of tensors of different shapes
        nodes += [
            helper.make_node("MatMul", ["x", "W2"], ["b"], name="second"),
            helper.make_node("Add", ["a", "b"], ["y"], name="bad_add"),
        ]
        out = "y"
    graph = helper.make_graph(
        nodes,
        kind,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(RNG.normal(size=(3, 2)).astype(np.float32), "W2"),
            numpy_helper.from_array(np.array([1, 3, 1, 1], dtype=np.int64), "shape4"),
            numpy_helper.from_array(np.array([1, 1, 3, 1], dtype=np.int64), "shape4b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize(
    ("kind", "phrase", "error"),
    [
        ("cycle", "'loop_add' (Add) reads 'c' before any node produces it", InputError),
        ("dangling", "'reads_ghost' (Add) reads 'ghost', which is neither", InputError),
        ("duplicate", "'again' (Relu) defines 'a', already defined by node 'first'", InputError),
        ("concat-shapes", "'bad_concat' (Concat)", InputError),
        ("add-shapes", "'bad_add' (Add) shape mismatch: adds tensors of different shapes", InputError),
    ],
)
def test_broken_graphs_are_one_error_line(tmp_path, kind, phrase, error):
    path = _hostile(tmp_path, kind)
    with pytest.raises((InputError, UnsupportedError)) as caught:
        read_onnx(path)
    assert phrase in str(caught.value)
    done = subprocess.run(
        [sys.executable, "-m", "qverify", "info", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and phrase in lines[0], done.stderr
