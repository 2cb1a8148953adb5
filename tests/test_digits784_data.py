"""The committed digits784 benchmark (benchmarks/digits784) is what its script and README say.

The network's shape and accuracy (against the README's table, on the data `train.py` builds), and
the instances: 40 VNN-LIB files listed by `instances.csv`, each an L-inf box of the README's radii
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

FOLDER = ROOT / "benchmarks" / "digits784"
# example README row: "| test | 441/450 | 98.00% |"
_ACCURACY_ROW = re.compile(r"^\|\s*(train|test)\s*\|\s*(\d+)\s*/\s*(\d+)\s*\|", re.MULTILINE)


@functools.cache
def _script():
    pytest.importorskip("sklearn")
    spec = importlib.util.spec_from_file_location("benchmarks_digits784_train", FOLDER / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@functools.cache
def _network():
    return load_network(FOLDER / "digits784.onnx")


def test_network_is_784_256x6_10_relu():
    net = _network()
    assert [layer.weights.shape for layer in net.layers] == [(256, 784)] + [(256, 256)] * 5 + [(10, 256)]
    assert [layer.activation for layer in net.layers] == [Activation.RELU] * 6 + [Activation.IDENTITY]
    assert net.input_norm is None and net.output_norm is None


def test_accuracy_matches_readme():
    script = _script()
    x, y, train_idx, test_idx = script.dataset()
    predicted = evaluate_core(_network(), x).argmax(axis=1)
    stated = {split: (int(right), int(total)) for split, right, total in _ACCURACY_ROW.findall(
        (FOLDER / "README.md").read_text(encoding="utf-8"))}  # fmt: skip
    for split, idx in (("train", train_idx), ("test", test_idx)):
        assert stated[split] == (int(np.sum(predicted[idx] == y[idx])), len(idx))
    assert stated["test"][0] / stated["test"][1] > 0.9


def test_instances_are_what_the_script_writes():
    """instances.csv and every VNN-LIB file equal what train.py writes for the committed network."""
    script = _script()
    x, y, _, test_idx = script.dataset()
    chosen = script.chosen_images(_network(), x, y, test_idx)
    assert np.array_equal(evaluate_core(_network(), x[chosen]).argmax(axis=1), y[chosen])
    expected = {
        f"vnnlib/{name}.vnnlib": format_vnnlib(prop, n_outputs=10)
        for name, prop in script.properties(x, y, chosen)
    }
    with (FOLDER / "instances.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows == [["digits784.onnx", name, str(script.TIMEOUT_S)] for name in expected]
    assert sorted(expected) == sorted(f"vnnlib/{path.name}" for path in (FOLDER / "vnnlib").iterdir())
    for name, text in expected.items():
        assert (FOLDER / name).read_text(encoding="utf-8") == text, name
    assert len(expected) >= 30
