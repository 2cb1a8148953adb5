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
from dataclasses import dataclass
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

SIDE = 28
GREY_LEVELS = 256  # inputs are multiples of 1/256
ATTACK_STARTS = centre_and_random(32)


@dataclass(frozen=True)
class Design:
    """One suite this script writes: the network's shape and training, the images and radii."""

    name: str
    folder: Path
    hidden: tuple[int, ...]
    epsilons: tuple[str, ...]  # normalised units (inputs in [0, 1])
    seed: int = 0
    alpha: float = 1e-4
    max_iter: int = 60
    n_images: int = 10
    timeout_s: int = 120

    @property
    def network_file(self) -> str:
        return f"{self.name}.onnx"

    @property
    def shape(self) -> str:
        """e.g. 784-256x6-10"""
        widths = sorted(set(self.hidden))
        inner = f"{widths[0]}x{len(self.hidden)}" if len(widths) == 1 else "-".join(map(str, self.hidden))
        return f"{SIDE * SIDE}-{inner}-10"


DIGITS784 = Design("digits784", HERE, (256,) * 6, ("0.005", "0.01", "0.03", "0.06"))
DESIGN = DIGITS784  # (what `bench_netlevel.py --folder` reads of a suite's script)
NETWORK_FILE = DIGITS784.network_file
EPSILONS = DIGITS784.epsilons
TIMEOUT_S = DIGITS784.timeout_s


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


def train(x: np.ndarray, y: np.ndarray, design: Design = DIGITS784) -> MLPClassifier:
    model = MLPClassifier(
        hidden_layer_sizes=design.hidden,
        activation="relu",
        solver="adam",
        alpha=design.alpha,
        batch_size=64,
        learning_rate_init=1e-3,
        max_iter=design.max_iter,
        n_iter_no_change=design.max_iter,
        random_state=design.seed,
    )
    return model.fit(x, y)


def instance_name(image: int, eps: str) -> str:
    return f"img{image:02d}-eps{eps}"


def chosen_images(
    net: Network, x: np.ndarray, y: np.ndarray, test_idx: np.ndarray, design: Design = DIGITS784
) -> np.ndarray:
    """Sample indices of the first `n_images` test images (split order) the network gets right."""
    correct = evaluate(net, x[test_idx]).argmax(axis=1) == y[test_idx]
    return test_idx[correct][: design.n_images]


def properties(x: np.ndarray, y: np.ndarray, chosen: np.ndarray, epsilons: tuple[str, ...] = EPSILONS):
    """(name, Property) of every instance: L-inf balls around the chosen images, clipped to [0, 1]."""
    domain = (np.zeros(SIDE * SIDE), np.ones(SIDE * SIDE))
    for image, index in enumerate(chosen):
        centre = [str(round(v * GREY_LEVELS)) + f"/{GREY_LEVELS}" for v in x[index]]
        for eps in epsilons:
            name = instance_name(image, eps)
            yield name, robustness(centre, eps, int(y[index]), 10, domain=domain, name=name)


def suite_text(design: Design = DIGITS784) -> str:
    count = design.n_images * len(design.epsilons)
    return (
        "\n".join(
            [
                (
                    f"# Generated by benchmarks/{design.folder.name}/train.py: edit that script and rerun it, "
                    "not this file."
                ),
                f'name = "{design.name}"',
                (
                    f'description = "digits upsampled to 28x28, {design.shape} ReLU: L-inf robustness of '
                    f"{design.n_images} test images, eps in {{{', '.join(design.epsilons)}}} (inputs in "
                    f'[0, 1]); {count} VNN-LIB instances"'
                ),
                'formats = ["16.16"]',
                f"timeout = {design.timeout_s}",
                f"image_shape = [{SIDE}, {SIDE}]",
                'instances = "instances.csv"',
            ]
        )
        + "\n"
    )


def main(design: Design = DIGITS784) -> int:
    x, y, train_idx, test_idx = dataset()
    with threadpool_limits(limits=1):
        model = train(x[train_idx], y[train_idx], design)
    net = sklearn_network(model, Activation.RELU, design.name)
    here = design.folder
    path = here / design.network_file
    write_onnx(net, path, float32=True)
    net = load_network(path)  # report on, and write instances for, what was written
    chosen = chosen_images(net, x, y, test_idx, design)
    vnnlib = here / "vnnlib"
    vnnlib.mkdir(exist_ok=True)
    rows = []
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, scikit-learn {sklearn.__version__}")
    print(f"adam epochs: {model.n_iter_}; final training loss {model.loss_:.4f}")
    for split, idx in (("train", train_idx), ("test", test_idx)):
        correct = int(np.sum(evaluate(net, x[idx]).argmax(axis=1) == y[idx]))
        print(f"| {split} | {correct}/{len(idx)} | {100 * correct / len(idx):.2f}% |")
    print(f"images: {chosen.tolist()} (digits {y[chosen].tolist()})")
    falsified, kept = [], []
    for number, (name, prop) in enumerate(properties(x, y, chosen, design.epsilons)):
        file_name = f"vnnlib/{name}.vnnlib"
        (here / file_name).write_text(format_vnnlib(prop, n_outputs=10), encoding="utf-8")
        rows.append(f"{design.network_file},{file_name},{design.timeout_s}")
        box = prop.boxes[0]
        margin = attack(
            net, box.lo_array(), box.hi_array(), prop.robustness.label, seed=number, starts=ATTACK_STARTS
        )
        (falsified if margin >= 0 else kept).append(f"{name} ({margin:+.3f})")
    (here / "instances.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (here / "suite.toml").write_text(suite_text(design), encoding="utf-8")
    print(f"falsified by the float attack ({len(falsified)}): {', '.join(falsified) or '-'}")
    print(f"not falsified ({len(kept)}): {', '.join(kept) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
