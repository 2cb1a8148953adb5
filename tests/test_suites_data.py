"""The benchmark suites' data: suite files, networks, accuracy, properties, and tiny's verdicts.

Each trained suite (iris, vocalic, digits) has a training script whose data functions (`dataset`,
`suite_text`, ...) are loaded here, so the test checks the committed files against the same data:
the networks' accuracy against the README, and the suite files against the properties the script
would write. Retraining is not repeated here (it needs the exact library versions); the committed
networks are the artifacts.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from qverify.io import load_network
from qverify.network import Activation, Network, evaluate, evaluate_core
from qverify.properties import Property
from qverify.properties.model import Relation
from qverify.quant import (
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    choose_format,
    implementation_bounds,
    input_box_words,
    quantize_network,
    simulate,
)
from qverify.suites.suite_file import read_suite

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TASK_COUNTS = {
    "iris": 27,
    "vocalic": 25,
    "digits": 60,
    "tiny": 6,
    "acasxu": 186,
    "acasxu-phi1-4": 180,
    "digits784": 40,
}
ALL_FORMATS = ("8", "16", "32", "float")

# network file -> (layer sizes, activations after each layer)
ARCHITECTURES = {
    "iris/iris.onnx": ((4, 7, 3), (Activation.TANH, Activation.IDENTITY)),
    "vocalic/vocalic.onnx": ((25, 10, 4, 5), (Activation.SIGMOID, Activation.SIGMOID, Activation.IDENTITY)),
    "digits/digits.nnet": ((64, 32, 16, 10), (Activation.RELU, Activation.RELU, Activation.IDENTITY)),
    "tiny/relu2.nnet": ((2, 4, 2), (Activation.RELU, Activation.IDENTITY)),
    "tiny/tanh3.onnx": ((3, 3, 2), (Activation.TANH, Activation.IDENTITY)),
}
IMAGE_SHAPES = {"iris": None, "vocalic": (5, 5), "digits": (8, 8), "tiny": None}
# example README row: "| test | 45/45 | 100.00% |"
_ACCURACY_ROW = re.compile(r"^\|\s*(base|train|test|all)\s*\|\s*(\d+)\s*/\s*(\d+)\s*\|", re.MULTILINE)


@functools.cache
def suite(name: str):
    return read_suite(name)


@functools.cache
def script(name: str, filename: str = "train.py") -> ModuleType:
    """A suite's training (or generating) script, loaded as a module without running `main`."""
    path = BENCHMARKS / name / filename
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trained_script(name: str) -> ModuleType:
    pytest.importorskip("sklearn")
    return script(name)


def readme_accuracy(name: str) -> dict[str, tuple[int, int]]:
    text = (BENCHMARKS / name / "README.md").read_text(encoding="utf-8")
    return {split: (int(correct), int(total)) for split, correct, total in _ACCURACY_ROW.findall(text)}


def correct(net: Network, x: np.ndarray, labels: np.ndarray) -> tuple[int, int]:
    return int(np.sum(evaluate(net, x).argmax(axis=1) == labels)), len(labels)


# ---------------------------------------------------------------- suite files


@pytest.mark.parametrize("name", sorted(TASK_COUNTS))
def test_suite_reads_with_its_task_count(name: str) -> None:
    assert len(suite(name).tasks) == TASK_COUNTS[name]


@pytest.mark.parametrize("name", ["iris", "vocalic", "digits"])
def test_trained_suites_run_every_format(name: str) -> None:
    assert suite(name).formats == ALL_FORMATS


def test_tiny_suite_is_quick_and_mixes_property_kinds() -> None:
    tiny = suite("tiny")
    assert tiny.formats == ("8", "16", "float")
    assert tiny.timeout_s == 20
    sources = {Path(task.property.source).suffix or task.property.source for task in tiny.tasks}
    assert sources == {".vnnlib", "robustness", "hypercube", "hyperrectangle"}
    assert set(_expected_verdicts().values()) == {"SAFE", "UNSAFE"}
    assert set(_expected_verdicts()) == {task.name for task in tiny.tasks}


@pytest.mark.parametrize("name", sorted(IMAGE_SHAPES))
def test_image_shapes(name: str) -> None:
    assert {task.image_shape for task in suite(name).tasks} == {IMAGE_SHAPES[name]}


@pytest.mark.parametrize("path", sorted(ARCHITECTURES))
def test_network_architecture(path: str) -> None:
    net = load_network(BENCHMARKS / path)
    sizes, activations = ARCHITECTURES[path]
    assert net.sizes == sizes
    assert tuple(layer.activation for layer in net.layers) == activations
    assert net.output_norm is None


@pytest.mark.parametrize("name", ["iris", "vocalic", "digits", "tiny"])
def test_property_centres_are_classified_as_their_label(name: str) -> None:
    """A robustness/box property around a misclassified centre would be meaningless."""
    checked = 0
    for task in suite(name).tasks:
        info = task.property.robustness
        if info is None:
            continue
        net = load_network(task.network_path)
        outputs = evaluate_core(net, np.array(info.center))
        others = np.delete(outputs, info.label)
        assert outputs[info.label] > others.max(), f"{task.name}: centre classified {int(outputs.argmax())}"
        box = task.property.boxes[0]
        assert np.all(box.lo_array() <= np.array(info.center)) and np.all(
            np.array(info.center) <= box.hi_array()
        )
        checked += 1
    assert checked == sum(task.property.robustness is not None for task in suite(name).tasks) > 0


# ---------------------------------------------------------------- accuracy, as stated in the READMEs


def test_iris_accuracy_matches_readme() -> None:
    train = trained_script("iris")
    x, y, train_idx, test_idx = train.dataset()
    net = load_network(BENCHMARKS / "iris" / "iris.onnx")
    measured = {
        "train": correct(net, x[train_idx], y[train_idx]),
        "test": correct(net, x[test_idx], y[test_idx]),
        "all": correct(net, x, y),
    }
    assert readme_accuracy("iris") == measured


def test_vocalic_accuracy_matches_readme() -> None:
    train = trained_script("vocalic")
    net = load_network(BENCHMARKS / "vocalic" / "vocalic.onnx")
    images, targets = train.training_set()
    vowels = targets.sum(axis=1) == 1
    test_images, test_labels = train.dataset()
    measured = {
        "base": correct(net, train.base_images(), np.arange(5)),
        "train": correct(net, images[vowels], targets[vowels].argmax(axis=1)),
        "test": correct(net, test_images, test_labels),
    }
    assert readme_accuracy("vocalic") == measured


def test_digits_accuracy_matches_readme() -> None:
    train = trained_script("digits")
    x, y, train_idx, test_idx = train.dataset()
    net = load_network(BENCHMARKS / "digits" / "digits.nnet")
    measured = {
        "train": correct(net, x[train_idx], y[train_idx]),
        "test": correct(net, x[test_idx], y[test_idx]),
    }
    assert readme_accuracy("digits") == measured


# ---------------------------------------------------------------- suite files in sync with the scripts


def _suite_file(name: str) -> str:
    return (BENCHMARKS / name / "suite.toml").read_text(encoding="utf-8")


def test_iris_suite_is_built_on_the_class_medoids() -> None:
    train = trained_script("iris")
    x, y, _, _ = train.dataset()
    medoids = np.array([train.medoid(x[y == label]) for label in range(3)])
    assert _suite_file("iris") == train.suite_text(medoids)


def test_vocalic_suite_is_built_on_the_base_vowels() -> None:
    train = trained_script("vocalic")
    assert _suite_file("vocalic") == train.suite_text(train.base_images())
    assert train.base_images().min() >= 0 and train.base_images().max() <= 255


def test_digits_suite_uses_the_first_correct_test_images() -> None:
    train = trained_script("digits")
    x, y, _, test_idx = train.dataset()
    net = load_network(BENCHMARKS / "digits" / "digits.nnet")
    chosen = train.chosen_images(net, x, y, test_idx)
    assert len(chosen) == 20
    assert _suite_file("digits") == train.suite_text(x[chosen], y[chosen], chosen)


def test_tiny_files_are_those_of_make_networks() -> None:
    make = script("tiny", "make_networks.py")
    assert _suite_file("tiny") == make.suite_text()
    for built, path in ((make.relu_network(), "relu2.nnet"), (make.tanh_network(), "tanh3.onnx")):
        committed = load_network(BENCHMARKS / "tiny" / path)
        for mine, theirs in zip(built.layers, committed.layers, strict=True):
            assert np.array_equal(mine.weights, theirs.weights) and np.array_equal(mine.bias, theirs.bias)


# ---------------------------------------------------------------- tiny: the expected verdicts hold


def _expected_verdicts() -> dict[str, str]:
    with (BENCHMARKS / "tiny" / "expected.csv").open(newline="") as handle:
        return {row["task"]: row["expected"] for row in csv.DictReader(handle)}


def _can_be_unsafe(prop: Property, out_lo: np.ndarray, out_hi: np.ndarray) -> bool:
    """Can some output in the box [out_lo, out_hi] satisfy a clause of the unsafe set?"""
    for clause in prop.unsafe.clauses:
        possible = True
        for atom in clause.atoms:
            terms = [(float(c), index) for index, c in atom.terms]
            largest = float(atom.constant) + sum(c * (out_hi[i] if c > 0 else out_lo[i]) for c, i in terms)
            smallest = float(atom.constant) + sum(c * (out_lo[i] if c > 0 else out_hi[i]) for c, i in terms)
            if atom.relation in (Relation.GE, Relation.GT):
                possible &= largest >= 0
            else:
                possible &= smallest <= 0
        if possible:
            return True
    return False


def _grid(lo: np.ndarray, hi: np.ndarray, points: int = 11) -> np.ndarray:
    axes = [np.linspace(low, high, points) for low, high in zip(lo, hi)]
    return np.array(np.meshgrid(*axes)).reshape(len(lo), -1).T


def _tiny_cases() -> list[tuple[str, str]]:
    return [(task.name, label) for task in suite("tiny").tasks for label in suite("tiny").formats]


@pytest.mark.parametrize(("task_name", "label"), _tiny_cases())
def test_tiny_expected_verdict_holds_in_the_implementation(task_name: str, label: str) -> None:
    """SAFE: interval bounds of the implemented network exclude the unsafe set. UNSAFE: some
    input of the box, quantised to the implementation's inputs, violates the property."""
    task = next(task for task in suite("tiny").tasks if task.name == task_name)
    expected = _expected_verdicts()[task_name]
    net = load_network(task.network_path)
    prop = task.property
    lo, hi = prop.boxes[0].lo_array().astype(float), prop.boxes[0].hi_array().astype(float)
    if label == "float":
        qnet = quantize_network(net, ImplementationOptions(number=FloatFormat(FloatKind.FLOAT)))
        box_lo = np.nextafter(lo.astype(np.float32), np.float32(-np.inf))  # outward: sound bounds
        box_hi = np.nextafter(hi.astype(np.float32), np.float32(np.inf))
        points = _grid(lo, hi).astype(np.float32)
        points = points[np.all((points >= lo) & (points <= hi), axis=1)]
        to_real = 1.0
    else:
        fmt, _ = choose_format(net, int(label), lo, hi)
        qnet = quantize_network(net, ImplementationOptions(number=fmt))
        box_lo, box_hi = input_box_words(lo, hi, fmt)
        points = np.unique(np.clip(np.round(_grid(lo, hi) * fmt.scale), box_lo, box_hi), axis=0)
        to_real = 1.0 / fmt.scale
    if expected == "SAFE":
        last = implementation_bounds(qnet, box_lo, box_hi)[-1]
        out_lo, out_hi = last.post_lo * to_real, last.post_hi * to_real
        assert not _can_be_unsafe(prop, out_lo.astype(float), out_hi.astype(float))
    else:
        assert expected == "UNSAFE"
        outputs = simulate(qnet, points).outputs.astype(float) * to_real
        assert np.any(prop.unsafe.violated_clause(outputs) >= 0)


def test_acasxu_phi1_4_is_the_phi1_to_phi4_part_of_acasxu():
    """The engine benchmark's set: the same networks and VNN-LIB files, nothing copied."""
    full = {(task.network_path, task.property.name) for task in suite("acasxu").tasks}
    part = {(task.network_path, task.property.name) for task in suite("acasxu-phi1-4").tasks}
    assert len(part) == 180 and part <= full
    assert {name for _, name in part} == {f"prop_{number}" for number in range(1, 5)}
