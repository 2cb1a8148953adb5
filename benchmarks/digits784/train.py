"""Train the image-size benchmark network `digits784.onnx` and write its instances (deterministic).

Run from anywhere with qverify and scikit-learn installed:

    python benchmarks/digits784/train.py

What it does (README.md explains the choices):

1. Loads scikit-learn's bundled 8x8 digits with the split of the `digits` suite (75/25, stratified,
   seed 0: `benchmarks/digits/train.py`'s `dataset`) and upsamples every image to 28x28 (MNIST's
   size) with `scipy.ndimage.zoom` (bilinear). Inputs are levels / 16, clipped to [0, 1] and rounded
   to multiples of 1/256 (an 8-bit grey image; the centres are then exact dyadic numbers).
2. Trains a 784-256x6-10 ReLU MLP (scikit-learn's MLPClassifier, Adam, fixed seed, one BLAS
   thread). The softmax is dropped: the outputs are the logits, whose argmax is the class.
3. Writes the network as ONNX with float32 weights (MatMul/Add/Relu, no normalisation node: the
   inputs are already in [0, 1]); NNet text would be ~6 MB for ~530,000 weights, so there is none.
4. Picks the first N_IMAGES test images the network classifies correctly and writes L-inf robustness
   properties at EPSILONS (normalised units, box clipped to [0, 1]) as VNN-LIB files, the VNN-COMP
   `instances.csv` (network, property, timeout) and `suite.toml` for `qverify suite run`.
5. Prints the accuracy and which instances a float attack (projected gradient ascent from the centre
   and random points) falsifies: a lower bound on the UNSAFE verdicts in real arithmetic.

Deterministic for fixed library versions (fixed seeds, BLAS limited to one thread). The committed
files are the artifacts.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import scipy
import sklearn
from scipy.ndimage import zoom
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits

from qverify.io import load_network, write_onnx
from qverify.network import Activation, Network, evaluate
from qverify.properties import format_vnnlib, robustness

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
sys.path.insert(0, str(BENCHMARKS))  # the shared training tools
from training_tools import attack, centre_and_random, sklearn_network

NETWORK_FILE = "digits784.onnx"
SIDE = 28
HIDDEN = (256,) * 6
SEED = 0
ALPHA = 1e-4
MAX_ITER = 60
GREY_LEVELS = 256  # inputs are multiples of 1/256
N_IMAGES = 10
EPSILONS = ("0.005", "0.01", "0.03", "0.06")  # normalised units (inputs in [0, 1])
TIMEOUT_S = 120
ATTACK_STARTS = centre_and_random(32)


def _digits_script():
    """benchmarks/digits/train.py as a module: its `dataset` is the split this network uses too."""
    path = BENCHMARKS / "digits" / "train.py"
    spec = importlib.util.spec_from_file_location("benchmarks_digits_train", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upsample(levels: np.ndarray) -> np.ndarray:
    """8x8 images (n, 64) of levels 0..16 -> (n, 784) inputs in [0, 1], multiples of 1/GREY_LEVELS."""
    images = levels.reshape(-1, 8, 8) / 16.0
    big = zoom(images, (1, SIDE / 8, SIDE / 8), order=1)
    return np.clip(np.round(big.reshape(len(levels), -1) * GREY_LEVELS) / GREY_LEVELS, 0.0, 1.0)


def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Inputs (1797, 784) in [0, 1], labels, and the digits suite's training and test indices."""
    levels, labels, train_idx, test_idx = _digits_script().dataset()
    return upsample(levels), labels, train_idx, test_idx


def train(x: np.ndarray, y: np.ndarray) -> MLPClassifier:
    model = MLPClassifier(
        hidden_layer_sizes=HIDDEN,
        activation="relu",
        solver="adam",
        alpha=ALPHA,
        batch_size=64,
        learning_rate_init=1e-3,
        max_iter=MAX_ITER,
        n_iter_no_change=MAX_ITER,
        random_state=SEED,
    )
    return model.fit(x, y)


def instance_name(image: int, eps: str) -> str:
    return f"img{image:02d}-eps{eps}"


def chosen_images(net: Network, x: np.ndarray, y: np.ndarray, test_idx: np.ndarray) -> np.ndarray:
    """Sample indices of the first N_IMAGES test images (split order) the network gets right."""
    correct = evaluate(net, x[test_idx]).argmax(axis=1) == y[test_idx]
    return test_idx[correct][:N_IMAGES]


def properties(x: np.ndarray, y: np.ndarray, chosen: np.ndarray):
    """(name, Property) of every instance: L-inf balls around the chosen images, clipped to [0, 1]."""
    domain = (np.zeros(SIDE * SIDE), np.ones(SIDE * SIDE))
    for image, index in enumerate(chosen):
        centre = [str(round(v * GREY_LEVELS)) + f"/{GREY_LEVELS}" for v in x[index]]
        for eps in EPSILONS:
            name = instance_name(image, eps)
            yield name, robustness(centre, eps, int(y[index]), 10, domain=domain, name=name)


def suite_text() -> str:
    return (
        "\n".join(
            [
                "# Generated by benchmarks/digits784/train.py: edit that script and rerun it, not this file.",
                'name = "digits784"',
                (
                    'description = "digits upsampled to 28x28, 784-256x6-10 ReLU: L-inf robustness of '
                    f"{N_IMAGES} test images, eps in {{{', '.join(EPSILONS)}}} (inputs in [0, 1]); "
                    f'{N_IMAGES * len(EPSILONS)} VNN-LIB instances"'
                ),
                'formats = ["16.16"]',
                f"timeout = {TIMEOUT_S}",
                f"image_shape = [{SIDE}, {SIDE}]",
                'instances = "instances.csv"',
            ]
        )
        + "\n"
    )


def main() -> int:
    x, y, train_idx, test_idx = dataset()
    with threadpool_limits(limits=1):
        model = train(x[train_idx], y[train_idx])
    net = sklearn_network(model, Activation.RELU, "digits784")
    path = HERE / NETWORK_FILE
    write_onnx(net, path, float32=True)
    net = load_network(path)  # report on, and write instances for, what was written
    chosen = chosen_images(net, x, y, test_idx)
    vnnlib = HERE / "vnnlib"
    vnnlib.mkdir(exist_ok=True)
    rows = []
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, scikit-learn {sklearn.__version__}")
    print(f"adam epochs: {model.n_iter_}; final training loss {model.loss_:.4f}")
    for split, idx in (("train", train_idx), ("test", test_idx)):
        correct = int(np.sum(evaluate(net, x[idx]).argmax(axis=1) == y[idx]))
        print(f"| {split} | {correct}/{len(idx)} | {100 * correct / len(idx):.2f}% |")
    print(f"images: {chosen.tolist()} (digits {y[chosen].tolist()})")
    falsified, kept = [], []
    for number, (name, prop) in enumerate(properties(x, y, chosen)):
        file_name = f"vnnlib/{name}.vnnlib"
        (HERE / file_name).write_text(format_vnnlib(prop, n_outputs=10), encoding="utf-8")
        rows.append(f"{NETWORK_FILE},{file_name},{TIMEOUT_S}")
        box = prop.boxes[0]
        margin = attack(
            net, box.lo_array(), box.hi_array(), prop.robustness.label, seed=number, starts=ATTACK_STARTS
        )
        (falsified if margin >= 0 else kept).append(f"{name} ({margin:+.3f})")
    (HERE / "instances.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (HERE / "suite.toml").write_text(suite_text(), encoding="utf-8")
    print(f"falsified by the float attack ({len(falsified)}): {', '.join(falsified) or '-'}")
    print(f"not falsified ({len(kept)}): {', '.join(kept) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
