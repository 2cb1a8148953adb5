"""The committed digits784 benchmarks (benchmarks/digits784, and issue 32's second frontier suite
benchmarks/digits784x4, built by the same procedure) are what their scripts and READMEs say.

The network's shape and accuracy (against the README's figures, on the data `train.py` builds), and
the instances: the VNN-LIB files listed by `instances.csv`, each an L-inf box of the README's radii
clipped to [0, 1] around a test image the network classifies as the property's label. Retraining is
not repeated (it needs the exact library versions); the committed files are the artifacts.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import re
import sys

import numpy as np
import pytest

from qverify.io import load_network
from qverify.network import Activation, evaluate_core
from qverify.properties import format_vnnlib
from tests.conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
SUITES = {"digits784": 6, "digits784x4": 4}  # folder: hidden layers of 256 ReLUs
# "| test | 441/450 | 98.00% |" (digits784's table) or "test 439/450 (97.56 %)" (digits784x4's text)
_ACCURACY = re.compile(r"\b(train|test)\s*\|?\s*(\d+)\s*/\s*(\d+)")


@functools.cache
def _script(folder: str):
    pytest.importorskip("sklearn")
    spec = importlib.util.spec_from_file_location(
        f"benchmarks_{folder}_train", BENCHMARKS / folder / "train.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@functools.cache
def _network(folder: str):
    return load_network(BENCHMARKS / folder / f"{folder}.onnx")


@pytest.mark.parametrize("folder", SUITES)
def test_network_is_784_256xN_10_relu(folder):
    net, hidden = _network(folder), SUITES[folder]
    assert [layer.weights.shape for layer in net.layers] == [(256, 784)] + [(256, 256)] * (hidden - 1) + [
        (10, 256)
    ]
    assert [layer.activation for layer in net.layers] == [Activation.RELU] * hidden + [Activation.IDENTITY]
    assert net.input_norm is None and net.output_norm is None


@pytest.mark.parametrize("folder", SUITES)
def test_accuracy_matches_readme(folder):
    script = _script(folder)
    x, y, train_idx, test_idx = script.dataset()
    predicted = evaluate_core(_network(folder), x).argmax(axis=1)
    stated = {split: (int(right), int(total)) for split, right, total in _ACCURACY.findall(
        (BENCHMARKS / folder / "README.md").read_text(encoding="utf-8"))}  # fmt: skip
    for split, idx in (("train", train_idx), ("test", test_idx)):
        assert stated[split] == (int(np.sum(predicted[idx] == y[idx])), len(idx))
    assert stated["test"][0] / stated["test"][1] > 0.9


@pytest.mark.parametrize("folder", SUITES)
def test_instances_are_what_the_script_writes(folder):
    """instances.csv and every VNN-LIB file equal what train.py writes for the committed network."""
    script, net, where = _script(folder), _network(folder), BENCHMARKS / folder
    x, y, _, test_idx = script.dataset()
    chosen = script.chosen_images(net, x, y, test_idx)
    assert np.array_equal(evaluate_core(net, x[chosen]).argmax(axis=1), y[chosen])
    expected = {
        f"vnnlib/{name}.vnnlib": format_vnnlib(prop, n_outputs=10)
        for name, prop in script.properties(x, y, chosen)
    }
    with (where / "instances.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows == [[f"{folder}.onnx", name, str(script.TIMEOUT_S)] for name in expected]
    assert sorted(expected) == sorted(f"vnnlib/{path.name}" for path in (where / "vnnlib").iterdir())
    for name, text in expected.items():
        assert (where / name).read_text(encoding="utf-8") == text, name
    assert len(expected) >= 30
