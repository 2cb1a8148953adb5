"""Train the Iris benchmark network and write `iris.onnx` and `suite.toml` (deterministic).

Run from anywhere with qverify and scikit-learn installed:

    python benchmarks/iris/train.py

What it does (README.md explains the choices):

1. Loads scikit-learn's bundled Iris data (150 flowers, 4 measurements in cm, 3 species) and
   normalises every input to [-0.5, 0.5]: mean = midpoint, range = max - min of the data.
2. Trains a 4x7x3 MLP (tanh hidden layer) with L2 regularisation on a fixed stratified 70/30 split.
   The softmax of scikit-learn's classifier is dropped: the network's outputs are the logits, whose
   argmax is the class.
3. Writes the network as ONNX (NNet has no tanh), with the normalisation and clip bounds.
4. Writes the suite: for each class, the hyper-rectangles R_s (s% of each input's range, centred on
   the class medoid, in cm) for s in PERCENTS: 27 tasks.
5. Prints the accuracy, and which properties a float attack (corners, random points and projected
   gradient ascent) falsifies: a lower bound on the UNSAFE verdicts in float.

Deterministic for fixed library versions: fixed seeds, and BLAS/OpenMP limited to one thread (the
thread count changes the order of floating-point sums). The committed files are the artifacts; the
versions used are printed and recorded in README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sklearn
from sklearn.datasets import load_iris
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits

from qverify.io import load_network, save_network
from qverify.network import Activation, Dense, InputNormalisation, Network, evaluate
from qverify.suites.suite_file import read_suite

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared training tools
from training_tools import attack_report, format_report

# where the float attack starts: box corners, the centre and 64 random points
ATTACK_STARTS = lambda rng, lo, hi: np.vstack(
    [
        (lo + hi) / 2,
        np.array(np.meshgrid(*zip(lo, hi))).reshape(len(lo), -1).T,
        rng.uniform(lo, hi, (64, len(lo))),
    ]
)

HERE = Path(__file__).resolve().parent
DESCRIPTION = (
    "Iris 4x7x3 (tanh hidden layer): hyper-rectangles R_s (s% "
    "of each input's range) around each class medoid, in cm"
)
NETWORK_FILE = "iris.onnx"
CLASS_NAMES = ("setosa", "versicolor", "virginica")
PERCENTS = (1, 2, 5, 8, 10, 20, 30, 40, 50)
HIDDEN = 7
ALPHA = 0.1  # L2 penalty: keeps the weights small (|w| < 3), so 8-bit formats stay meaningful
SEED = 0
TEST_SIZE = 0.3
SPLIT_SEED = 0


def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Inputs (150, 4) in cm, labels, and the indices of the fixed training and test split.

    tests/test_suites_data.py uses this to check the committed network's accuracy.
    """
    data = load_iris()
    train_idx, test_idx = train_test_split(
        np.arange(len(data.target)), test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=data.target
    )
    return data.data, data.target, train_idx, test_idx


def normalisation(x: np.ndarray) -> InputNormalisation:
    """Clip to the data's [min, max]; mean = midpoint, range = max - min: inputs in [-0.5, 0.5]."""
    low, high = x.min(axis=0), x.max(axis=0)
    return InputNormalisation(minimum=low, maximum=high, mean=(low + high) / 2, range=high - low)


def train(x_norm: np.ndarray, y: np.ndarray) -> MLPClassifier:
    model = MLPClassifier(
        hidden_layer_sizes=(HIDDEN,),
        activation="tanh",
        solver="lbfgs",
        alpha=ALPHA,
        max_iter=5000,
        tol=1e-8,
        random_state=SEED,
    )
    return model.fit(x_norm, y)


def to_network(model: MLPClassifier, norm: InputNormalisation, name: str) -> Network:
    """scikit-learn's (n_in, n_out) coefficient matrices as qverify layers; identity output (logits)."""
    activations = [Activation.TANH] * (len(model.coefs_) - 1) + [Activation.IDENTITY]
    layers = tuple(
        Dense(weights.T, bias, activation)
        for weights, bias, activation in zip(model.coefs_, model.intercepts_, activations)
    )
    return Network(layers=layers, input_norm=norm, output_norm=None, name=name)


def medoid(points: np.ndarray) -> np.ndarray:
    """The point minimising the sum of Euclidean distances to the others (the first one on a tie)."""
    distances = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=2).sum(axis=1)
    return points[int(np.argmin(distances))]


def _toml(value: object) -> str:
    """A TOML value: floats by repr (exact round trip), strings quoted, arrays inline."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return str(int(value))  # type: ignore[call-overload]


def suite_text(medoids: np.ndarray) -> str:
    lines = [
        "# Generated by benchmarks/iris/train.py: edit that script and rerun it, not this file.",
        'name = "iris"',
        f'description = "{DESCRIPTION}"',
        'formats = ["8", "16", "32", "float"]',
        "timeout = 60",
    ]
    for label, name in enumerate(CLASS_NAMES):
        for percent in PERCENTS:
            lines += [
                "",
                "[[task]]",
                f'name = "{name}-R{percent}"',
                f'network = "{NETWORK_FILE}"',
                "[task.property]",
                'kind = "hyperrectangle"',
                'units = "raw"',
                f"center = {_toml(medoids[label])}",
                f"percent = {percent}",
                f"label = {label}",
            ]
    return "\n".join(lines) + "\n"


def accuracy(net: Network, x: np.ndarray, y: np.ndarray) -> tuple[int, int]:
    return int(np.sum(evaluate(net, x).argmax(axis=1) == y)), len(y)


def main() -> int:
    x, y, train_idx, test_idx = dataset()
    norm = normalisation(x)
    with threadpool_limits(limits=1):
        model = train(norm.apply(x[train_idx]), y[train_idx])
    net = to_network(model, norm, "iris")
    path = HERE / NETWORK_FILE
    save_network(net, path)
    net = load_network(path)  # report what was written

    medoids = np.array([medoid(x[y == label]) for label in range(len(CLASS_NAMES))])
    (HERE / "suite.toml").write_text(suite_text(medoids), encoding="utf-8")

    print(f"numpy {np.__version__}, scikit-learn {sklearn.__version__}, python {sys.version.split()[0]}")
    print(
        f"lbfgs iterations: {model.n_iter_}; largest |weight| {max(abs(w).max() for w in model.coefs_):.3f}"
    )
    for split, idx in (("train", train_idx), ("test", test_idx), ("all", np.arange(len(y)))):
        correct, total = accuracy(net, x[idx], y[idx])
        print(f"| {split} | {correct}/{total} | {100 * correct / total:.2f}% |")
    for label, name in enumerate(CLASS_NAMES):
        logits = evaluate(net, medoids[label])
        print(f"{name}: medoid {medoids[label].tolist()} logits {np.round(logits, 3).tolist()}")
    tasks = read_suite(HERE / "suite.toml").tasks
    attack_report(net, tasks, steps=100, starts=ATTACK_STARTS)
    print("| word | format | tasks | correct (all 150) | accuracy |")
    format_report(net, tasks, x, y)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
