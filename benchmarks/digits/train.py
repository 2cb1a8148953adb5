"""Train the digits benchmark network and write `digits.nnet` and `suite.toml` (deterministic).

Run from anywhere with qverify and scikit-learn installed:

    python benchmarks/digits/train.py

What it does (README.md explains the choices):

1. Loads scikit-learn's bundled 8x8 digits (1797 images, pixel levels 0..16, classes 0..9) and
   splits them 75/25 (stratified, fixed seed). Inputs are normalised as x / 16.
2. Trains a 64x32x16x10 ReLU MLP with L2 regularisation. The softmax of scikit-learn's classifier
   is dropped: the outputs are the logits, whose argmax is the class.
3. Rebalances the layers by powers of two (`rebalance`) so that no pre-activation exceeds HEADROOM
   on the training images: the same classifier (logits scaled by a positive power of two), but
   values small enough that an 8-bit format keeps 4 or 5 fractional bits.
4. Writes the network as NNet (ReLU hidden layers and a linear output fit the format).
5. Picks the first N_IMAGES test images that the network classifies correctly and writes the suite:
   L-inf robustness of each at the radii EPSILONS (in pixel levels, 0..16 scale): 60 tasks.
6. Prints the accuracy, and which properties a float attack (random points and projected gradient
   ascent) falsifies: a lower bound on the UNSAFE verdicts in float.

Deterministic for fixed library versions: fixed seeds, and BLAS/OpenMP limited to one thread (the
thread count changes the order of floating-point sums). The committed files are the artifacts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sklearn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits

from qverify.io import load_network, save_network
from qverify.network import Activation, Dense, InputNormalisation, Network, apply_activation, evaluate
from qverify.suites.suite_file import read_suite

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared training tools
from training_tools import attack_report, centre_and_random, format_report, sklearn_network

# where the float attack starts: the centre and 32 random points
ATTACK_STARTS = centre_and_random(32)

HERE = Path(__file__).resolve().parent
NETWORK_FILE = "digits.nnet"
HIDDEN = (32, 16)
ALPHA = 1.0  # L2 penalty: keeps the weights small (|w| < 1.5), so 8-bit formats stay meaningful
SEED = 0
TEST_SIZE = 0.25
SPLIT_SEED = 0
HEADROOM = 4.0  # largest |pre-activation| on the training images after `rebalance`
N_IMAGES = 20
EPSILONS = ("0.5", "1", "2")  # pixel levels; strings so the suite holds the exact decimal
DESCRIPTION = (
    "8x8 digits (scikit-learn), 64x32x16x10 ReLU: L-inf robustness of 20 test images, "
    f"eps in {{{', '.join(EPSILONS)}}} pixel levels (0..16)"
)


def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Images (1797, 64) as pixel levels 0..16, labels, and the fixed training and test indices.

    tests/test_suites_data.py uses this to check the committed network's accuracy.
    """
    data = load_digits()
    train_idx, test_idx = train_test_split(
        np.arange(len(data.target)), test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=data.target
    )
    return data.data, data.target, train_idx, test_idx


def normalisation() -> InputNormalisation:
    """Pixel levels 0..16 -> x / 16 in [0, 1]."""
    return InputNormalisation(
        minimum=np.zeros(64), maximum=np.full(64, 16.0), mean=np.zeros(64), range=np.full(64, 16.0)
    )


def train(x_norm: np.ndarray, y: np.ndarray) -> MLPClassifier:
    model = MLPClassifier(
        hidden_layer_sizes=HIDDEN,
        activation="relu",
        solver="lbfgs",
        alpha=ALPHA,
        max_iter=5000,
        tol=1e-8,
        random_state=SEED,
    )
    return model.fit(x_norm, y)


def rebalance(net: Network, x_norm: np.ndarray) -> tuple[Network, tuple[float, ...]]:
    """The same ReLU classifier with every layer's outputs scaled by a power of two c_k <= 1 so that
    its largest |pre-activation| on `x_norm` is at most HEADROOM; returns it and the c_k.

    ReLU is positively homogeneous (relu(c z) = c relu(z) for c > 0): scaling layer k's weights by
    c_k / c_{k-1} and its bias by c_k multiplies its outputs by c_k, and the logits by the last
    c_k only. The argmax, and so every robustness verdict in real arithmetic, is unchanged; powers of
    two keep the scaling exact in binary floating point.
    """
    layers, scales, previous, values = [], [], 1.0, x_norm
    for layer in net.layers:
        if layer.activation not in (Activation.RELU, Activation.IDENTITY):
            raise ValueError(f"rebalance needs ReLU hidden layers, got {layer.activation.value}")
        pre = values @ layer.weights.T + layer.bias  # pre-activations of the original network
        scale = 2.0 ** -max(0, int(np.ceil(np.log2(np.abs(pre).max() / HEADROOM))))
        layers.append(Dense(layer.weights * (scale / previous), layer.bias * scale, layer.activation))
        scales.append(scale)
        previous, values = scale, apply_activation(layer.activation, pre)
    return Network(layers=tuple(layers), input_norm=net.input_norm, name=net.name), tuple(scales)


def task_name(image: int, eps: str) -> str:
    return f"img{image:02d}-eps{eps}"


def suite_text(centres: np.ndarray, labels: np.ndarray, indices: np.ndarray) -> str:
    lines = [
        "# Generated by benchmarks/digits/train.py: edit that script and rerun it, not this file.",
        'name = "digits"',
        f'description = "{DESCRIPTION}"',
        'formats = ["8", "16", "32", "float"]',
        "timeout = 60",
        "image_shape = [8, 8]",
    ]
    for image, (centre, label, index) in enumerate(zip(centres, labels, indices)):
        for eps in EPSILONS:
            lines += [
                "",
                f"# test image {image}: load_digits() sample {index}, digit {label}",
                "[[task]]",
                f'name = "{task_name(image, eps)}"',
                f'network = "{NETWORK_FILE}"',
                "[task.property]",
                'kind = "robustness"',
                'units = "raw"',
                f"center = [{', '.join(str(int(level)) for level in centre)}]",
                f'eps = "{eps}"',
                f"label = {label}",
            ]
    return "\n".join(lines) + "\n"


def chosen_images(net: Network, x: np.ndarray, y: np.ndarray, test_idx: np.ndarray) -> np.ndarray:
    """Sample indices of the first N_IMAGES test images (split order) the network gets right."""
    correct = evaluate(net, x[test_idx]).argmax(axis=1) == y[test_idx]
    return test_idx[correct][:N_IMAGES]


def main() -> int:
    x, y, train_idx, test_idx = dataset()
    norm = normalisation()
    with threadpool_limits(limits=1):
        model = train(norm.apply(x[train_idx]), y[train_idx])
    trained = sklearn_network(model, Activation.RELU, "digits", norm)
    net, scales = rebalance(trained, norm.apply(x[train_idx]))
    path = HERE / NETWORK_FILE
    save_network(net, path)
    net = load_network(path)  # report what was written
    chosen = chosen_images(net, x, y, test_idx)
    (HERE / "suite.toml").write_text(suite_text(x[chosen], y[chosen], chosen), encoding="utf-8")

    print(f"numpy {np.__version__}, scikit-learn {sklearn.__version__}, python {sys.version.split()[0]}")
    print(
        f"lbfgs iterations: {model.n_iter_}; largest |weight| {max(abs(w).max() for w in model.coefs_):.3f}"
    )
    print(f"layer scales (rebalance): {scales}")
    same = np.array_equal(evaluate(net, x).argmax(axis=1), evaluate(trained, x).argmax(axis=1))
    print(f"rebalanced network classifies every image as the trained one: {same}")
    for split, idx in (("train", train_idx), ("test", test_idx)):
        correct = int(np.sum(evaluate(net, x[idx]).argmax(axis=1) == y[idx]))
        print(f"| {split} | {correct}/{len(idx)} | {100 * correct / len(idx):.2f}% |")
    print(f"images: {chosen.tolist()} (digits {y[chosen].tolist()})")
    tasks = read_suite(HERE / "suite.toml").tasks
    attack_report(net, tasks, steps=100, starts=ATTACK_STARTS)
    print("| word | format | tasks | correct (test) | accuracy |")
    format_report(net, tasks, x[test_idx], y[test_idx])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
