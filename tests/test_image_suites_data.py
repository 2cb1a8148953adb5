"""The committed image suites of issue 29 are what their scripts and READMEs say.

benchmarks/digits28-maxpool, digits28-avgpool, digits32rgb-conv (3x32x32) and digits784-sigmoid:
each network's architecture and ONNX layout (the nodes torch.onnx.export writes, a `Pad` before the
average pool), its accuracy against the README's table on the data the script builds (and the int8
model's, where there is one), and the instances: at least 30 VNN-LIB files listed by
`instances.csv`, each an L-inf box of a grid radius clipped to [0, 1] around one of the first test
images the network classifies correctly, with its label; `suite.toml` as the script writes it.
Retraining is not repeated (it needs the exact library versions and minutes); the committed files
are the artifacts.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import re
import sys
from dataclasses import dataclass

import numpy as np
import onnx
import pytest

from qverify.io import load_network
from qverify.network import Activation, AveragePool2D, Conv2D, Dense, MaxPool2D, evaluate_core
from qverify.properties import format_vnnlib, robustness
from qverify.quant import ImplementationOptions, Int8Format, quantize_network, simulate
from tests.conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
# example README row: "| test | 436/450 | 96.89% |"; int8: "| int8 test | 432/450 | 96.00% |"
_ACCURACY_ROW = re.compile(r"^\|\s*(train|test|int8 test)\s*\|\s*(\d+)\s*/\s*(\d+)\s*\|", re.MULTILINE)
_NAME = re.compile(r"^img(\d\d)-eps([0-9.]+)$")


@dataclass(frozen=True)
class Expected:
    folder: str
    network: str
    layers: tuple[tuple[type, tuple[int, ...], Activation], ...]  # (kind, output shape, activation)
    nodes: tuple[str, ...]  # the ONNX op types in graph order (Constant nodes left out)
    parameters: int
    int8: str | None


SUITES = {
    "digits28-maxpool": Expected(
        "digits28-maxpool",
        "digits28_maxpool.onnx",
        ((Conv2D, (32, 27, 27), Activation.RELU), (MaxPool2D, (32, 6, 6), Activation.IDENTITY),
         (Dense, (10,), Activation.IDENTITY)),
        ("Conv", "Relu", "MaxPool", "Flatten", "Gemm"),
        32 * 4 + 32 + 1152 * 10 + 10,
        "digits28_maxpool.int8.onnx",
    ),
    "digits28-avgpool": Expected(
        "digits28-avgpool",
        "digits28_avgpool.onnx",
        ((Conv2D, (32, 27, 27), Activation.RELU), (AveragePool2D, (32, 7, 7), Activation.IDENTITY),
         (Dense, (10,), Activation.IDENTITY)),
        ("Conv", "Relu", "Pad", "AveragePool", "Flatten", "Gemm"),
        32 * 4 + 32 + 1568 * 10 + 10,
        "digits28_avgpool.int8.onnx",
    ),
    "digits32rgb-conv": Expected(
        "digits32rgb-conv",
        "digits32rgb_conv.onnx",
        ((Conv2D, (8, 16, 16), Activation.RELU), (Conv2D, (16, 8, 8), Activation.RELU),
         (Dense, (100,), Activation.RELU), (Dense, (10,), Activation.IDENTITY)),
        ("Conv", "Relu", "Conv", "Relu", "Flatten", "Gemm", "Relu", "Gemm"),
        105_966,
        "digits32rgb_conv.int8.onnx",
    ),
    "digits784-sigmoid": Expected(
        "digits784-sigmoid",
        "digits784_sigmoid.onnx",
        ((Dense, (200,), Activation.SIGMOID),) * 3 + ((Dense, (10,), Activation.IDENTITY),),
        ("Gemm", "Sigmoid") * 3 + ("Gemm",),
        784 * 200 + 200 + 2 * (200 * 200 + 200) + 200 * 10 + 10,
        "digits784_sigmoid.int8.onnx",
    ),
}  # fmt: skip


@functools.cache
def _script(name: str):
    pytest.importorskip("sklearn")
    folder = BENCHMARKS / SUITES[name].folder
    spec = importlib.util.spec_from_file_location(
        f"benchmarks_{name.replace('-', '_')}_train", folder / "train.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # puts benchmarks/ on sys.path: image_suites is importable after
    return module


@functools.cache
def _tools():
    """benchmarks/image_suites.py (the scripts' shared steps; each script puts benchmarks/ on the path)."""
    _script("digits784-sigmoid")
    import image_suites

    return image_suites


@functools.cache
def _data(name: str):
    tools = _tools()
    return tools.digits32rgb() if name == "digits32rgb-conv" else tools.digits28()


def _network(name: str):
    return load_network(BENCHMARKS / SUITES[name].folder / SUITES[name].network)


def _readme_rows(name: str) -> dict[str, tuple[int, int]]:
    text = (BENCHMARKS / SUITES[name].folder / "README.md").read_text(encoding="utf-8")
    return {split: (int(right), int(total)) for split, right, total in _ACCURACY_ROW.findall(text)}


@pytest.mark.parametrize("name", SUITES)
def test_architecture_and_onnx_layout(name):
    expected = SUITES[name]
    net = _network(name)
    shapes = [
        (type(layer), getattr(layer, "output_shape", (layer.n_out,)), layer.activation)
        for layer in net.layers
    ]
    assert tuple(shapes) == expected.layers
    count = sum(layer.weights.size + layer.bias.size for layer in net.layers if hasattr(layer, "bias"))
    assert count == expected.parameters
    model = onnx.load(str(BENCHMARKS / expected.folder / expected.network))
    assert tuple(node.op_type for node in model.graph.node if node.op_type != "Constant") == expected.nodes
    assert model.opset_import[0].version == 13
    if name == "digits28-avgpool":  # PyTorch's AvgPool2d(4, padding=1): a Pad, then a pool without pads
        pool = next(node for node in model.graph.node if node.op_type == "AveragePool")
        assert [list(a.ints) for a in pool.attribute if a.name == "pads"] == [[0, 0, 0, 0]]
        assert net.layers[1].pads == (1, 1, 1, 1) and net.layers[1].count_include_pad


def _heavy(*names: str) -> list:
    """The suites whose check takes more than a few seconds (qverify's float64 reference evaluates a
    convolution as its dense matrix: 23,328 x 784 for the 28x28 nets) run with the slow tests."""
    return [pytest.param(name, marks=pytest.mark.slow) if name in names else name for name in SUITES]


@pytest.mark.parametrize("name", _heavy("digits28-maxpool", "digits28-avgpool", "digits32rgb-conv"))
def test_accuracy_matches_readme(name):
    x, y, train_idx, test_idx = _data(name)
    net = _network(name)
    predicted = evaluate_core(net, x).argmax(axis=1)
    stated = _readme_rows(name)
    for split, idx in (("train", train_idx), ("test", test_idx)):
        assert stated[split] == (int(np.sum(predicted[idx] == y[idx])), len(idx))
    assert stated["test"][0] / stated["test"][1] > 0.9
    int8_file = SUITES[name].int8
    if int8_file is not None:
        qnet = quantize_network(
            load_network(BENCHMARKS / SUITES[name].folder / int8_file), ImplementationOptions(Int8Format())
        )
        codes = simulate(qnet, qnet.input_quant.quantize(x[test_idx])).outputs.argmax(axis=1)
        assert stated["int8 test"] == (int(np.sum(codes == y[test_idx])), len(test_idx))


@pytest.mark.parametrize("name", _heavy("digits32rgb-conv"))
def test_instances_are_robustness_boxes_of_the_chosen_images(name):
    """instances.csv <-> vnnlib/, every file as the script's builder writes it for its image and
    radius; four grid radii per image (two certified-side, two falsified-side); suite.toml."""
    image_suites = _tools()
    script = _script(name)
    x, y, _, test_idx = _data(name)
    net = _network(name)
    folder = BENCHMARKS / SUITES[name].folder
    n_images = script.SUITE.n_images if hasattr(script, "SUITE") else script.N_IMAGES
    chosen = image_suites.chosen_images(net, x, y, test_idx, n_images)
    assert np.array_equal(evaluate_core(net, x[chosen]).argmax(axis=1), y[chosen])
    with (folder / "instances.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    timeout = script.SUITE.timeout_s if hasattr(script, "SUITE") else script.TIMEOUT_S
    assert all(row[0] == SUITES[name].network and row[2] == str(timeout) for row in rows)
    files = [row[1] for row in rows]
    assert sorted(files) == sorted(f"vnnlib/{path.name}" for path in (folder / "vnnlib").iterdir())
    assert len(files) >= 30
    domain = (np.zeros(x.shape[1]), np.ones(x.shape[1]))
    per_image: dict[int, list[str]] = {}
    for file_name in files:
        match = _NAME.match(file_name.removeprefix("vnnlib/").removesuffix(".vnnlib"))
        assert match is not None and match[2] in image_suites.RADII, file_name
        image, eps = int(match[1]), match[2]
        per_image.setdefault(image, []).append(eps)
        index = chosen[image]
        centre = [f"{round(v * image_suites.GREY_LEVELS)}/{image_suites.GREY_LEVELS}" for v in x[index]]
        prop = robustness(centre, eps, int(y[index]), 10, domain=domain, name=f"img{image:02d}-eps{eps}")
        assert (folder / file_name).read_text(encoding="utf-8") == format_vnnlib(prop, n_outputs=10), (
            file_name
        )
    assert sorted(per_image) == list(range(n_images))
    assert all(2 <= len(radii) <= 4 for radii in per_image.values())
    suite_text = (
        script.suite_file_text()
        if hasattr(script, "suite_file_text")
        else image_suites.conv_suite_text(script.SUITE)
    )
    assert (folder / "suite.toml").read_text(encoding="utf-8") == suite_text
