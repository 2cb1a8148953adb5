"""Train the vocalic benchmark network and write `vocalic.onnx` and `suite.toml` (deterministic).

Run from anywhere with qverify and scikit-learn installed:

    python benchmarks/vocalic/train.py

What it does (README.md explains the choices):

1. Draws 5x5 grey images of the vowels A, E, I, O, U (pixel levels 0..255: ink INK = 224 on a
   background BACKGROUND = 32) and other patterns: the letters in OTHER_LETTERS and random bitmaps.
2. Makes the training set: the five base vowels, noisy copies of them (ink and background levels
   drawn at random, Gaussian noise, up to two flipped pixels, clipped to 0..255 and rounded), and
   noisy copies of the other patterns.
3. Trains a 25x10x4x5 network, sigmoid (logistic) hidden layers and identity outputs, by least
   squares on one-hot targets: a vowel's target is its one-hot vector, any other pattern's target is
   all zeros (a "reject" answer: no output high). The class is the argmax of the 5 outputs.
4. Writes the network as ONNX (NNet has no sigmoid), inputs normalised as x / 255.
5. Writes the suite: hypercubes L_s of side s pixel levels around each base vowel, s in SIDES:
   25 tasks.
6. Prints the accuracy on fresh noisy copies, and which properties a float attack (random points and
   projected gradient ascent) falsifies: a lower bound on the UNSAFE verdicts in float.

Deterministic for fixed library versions: fixed seeds, and BLAS/OpenMP limited to one thread (the
thread count changes the order of floating-point sums). The committed files are the artifacts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sklearn
from sklearn.neural_network import MLPRegressor
from threadpoolctl import threadpool_limits

from qverify.io import load_network, save_network
from qverify.network import Activation, InputNormalisation, evaluate
from qverify.suites.suite_file import read_suite

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared training tools
from training_tools import attack_report, format_report, sklearn_network

# where the float attack starts: the centre, both extreme corners and 64 random points
ATTACK_STARTS = lambda rng, lo, hi: np.vstack([(lo + hi) / 2, lo, hi, rng.uniform(lo, hi, (64, len(lo)))])

HERE = Path(__file__).resolve().parent
DESCRIPTION = (
    "Vowels A E I O U as 5x5 grey images, 25x10x4x5 (sigmoid): hypercubes "
    "L_s of side s pixel levels around each base vowel"
)
NETWORK_FILE = "vocalic.onnx"
INK, BACKGROUND = 224, 32  # pixel levels of the base images
SIDES = (10, 20, 40, 80, 120)
HIDDEN = (10, 4)
ALPHA = 0.1  # L2 penalty: keeps the weights small, so 8-bit formats stay meaningful
SEED = 0
DATA_SEED = 1
TEST_SEED = 2  # the held-out noisy copies (dataset())
N_VOWEL_COPIES = 3000
N_OTHER_COPIES = 1000
N_RANDOM = 1000
N_TEST = 1000

# '#' = ink. Drawn for this benchmark.
VOWELS = {
    "A": (".###.", "#...#", "#####", "#...#", "#...#"),
    "E": ("#####", "#....", "####.", "#....", "#####"),
    "I": (".###.", "..#..", "..#..", "..#..", ".###."),
    "O": (".###.", "#...#", "#...#", "#...#", ".###."),
    "U": ("#...#", "#...#", "#...#", "#...#", ".###."),
}
OTHER_LETTERS = {
    "C": (".####", "#....", "#....", "#....", ".####"),
    "F": ("#####", "#....", "####.", "#....", "#...."),
    "H": ("#...#", "#...#", "#####", "#...#", "#...#"),
    "J": ("..###", "...#.", "...#.", "#..#.", ".##.."),
    "L": ("#....", "#....", "#....", "#....", "#####"),
    "T": ("#####", "..#..", "..#..", "..#..", "..#.."),
    "X": ("#...#", ".#.#.", "..#..", ".#.#.", "#...#"),
    "Z": ("#####", "...#.", "..#..", ".#...", "#####"),
}


def bitmap(rows: tuple[str, ...]) -> np.ndarray:
    """5 strings of 5 characters -> 25 values, 1 for ink, row-major."""
    return np.array([[char == "#" for char in row] for row in rows], dtype=float).reshape(-1)


def base_images() -> np.ndarray:
    """The five vowels as pixel levels (5, 25): INK on BACKGROUND."""
    bits = np.array([bitmap(rows) for rows in VOWELS.values()])
    return (BACKGROUND + bits * (INK - BACKGROUND)).astype(int)


def noisy_copies(bits: np.ndarray, count: int, rng: np.random.Generator, flips: bool = True) -> tuple:
    """`count` images drawn from the bitmaps `bits` (k, 25): returns (pixel levels, bitmap index).

    Per image: ink level ~ U(150, 255), background ~ U(0, 90), 0-2 flipped pixels (if `flips`),
    Gaussian noise of standard deviation 20 levels, rounded and clipped to 0..255.
    """
    index = rng.integers(0, len(bits), count)
    chosen = bits[index].copy()
    if flips:
        for row in chosen:
            flipped = rng.choice(25, size=rng.choice([0, 0, 1, 1, 2]), replace=False)
            row[flipped] = 1 - row[flipped]
    ink = rng.uniform(150, 255, (count, 1))
    background = rng.uniform(0, 90, (count, 1))
    images = background + chosen * (ink - background) + rng.normal(0, 20, (count, 25))
    return np.clip(np.round(images), 0, 255), index


def dataset() -> tuple[np.ndarray, np.ndarray]:
    """The held-out test set: N_TEST noisy vowel images (pixel levels) and their labels (0..4 = A..U).

    tests/test_suites_data.py uses this to check the committed network's accuracy.
    """
    vowels = np.array([bitmap(rows) for rows in VOWELS.values()])
    return noisy_copies(vowels, N_TEST, np.random.default_rng(TEST_SEED))


def training_set() -> tuple[np.ndarray, np.ndarray]:
    """Pixel levels and one-hot targets (all zeros for the non-vowels)."""
    rng = np.random.default_rng(DATA_SEED)
    vowels = np.array([bitmap(rows) for rows in VOWELS.values()])
    others = np.array([bitmap(rows) for rows in OTHER_LETTERS.values()])
    vowel_images, labels = noisy_copies(vowels, N_VOWEL_COPIES, rng)
    other_images, _ = noisy_copies(others, N_OTHER_COPIES, rng)
    random_bits = rng.integers(0, 2, (N_RANDOM, 25)).astype(float)
    random_images, _ = noisy_copies(random_bits, N_RANDOM, rng, flips=False)
    images = np.vstack([base_images(), vowel_images, other_images, random_images])
    targets = np.vstack([np.eye(5), np.eye(5)[labels], np.zeros((N_OTHER_COPIES + N_RANDOM, 5))])
    return images, targets


def normalisation() -> InputNormalisation:
    """Pixel levels 0..255 -> x / 255 in [0, 1]."""
    return InputNormalisation(
        minimum=np.zeros(25), maximum=np.full(25, 255.0), mean=np.zeros(25), range=np.full(25, 255.0)
    )


def train(x_norm: np.ndarray, targets: np.ndarray) -> MLPRegressor:
    model = MLPRegressor(
        hidden_layer_sizes=HIDDEN,
        activation="logistic",
        solver="lbfgs",
        alpha=ALPHA,
        max_iter=5000,
        tol=1e-9,
        random_state=SEED,
    )
    return model.fit(x_norm, targets)


def suite_text(centres: np.ndarray) -> str:
    lines = [
        "# Generated by benchmarks/vocalic/train.py: edit that script and rerun it, not this file.",
        'name = "vocalic"',
        f'description = "{DESCRIPTION}"',
        'formats = ["8", "16", "32", "float"]',
        "timeout = 60",
        "image_shape = [5, 5]",
    ]
    for label, vowel in enumerate(VOWELS):
        for side in SIDES:
            lines += [
                "",
                "[[task]]",
                f'name = "{vowel}-L{side}"',
                f'network = "{NETWORK_FILE}"',
                "[task.property]",
                'kind = "hypercube"',
                'units = "raw"',
                f"center = [{', '.join(str(int(level)) for level in centres[label])}]",
                f"side = {side}",
                f"label = {label}",
            ]
    return "\n".join(lines) + "\n"


def main() -> int:
    images, targets = training_set()
    norm = normalisation()
    with threadpool_limits(limits=1):
        model = train(norm.apply(images), targets)
    net = sklearn_network(model, Activation.SIGMOID, "vocalic", norm)
    path = HERE / NETWORK_FILE
    save_network(net, path)
    net = load_network(path)  # report what was written
    centres = base_images()
    (HERE / "suite.toml").write_text(suite_text(centres), encoding="utf-8")

    print(f"numpy {np.__version__}, scikit-learn {sklearn.__version__}, python {sys.version.split()[0]}")
    print(
        f"lbfgs iterations: {model.n_iter_}; largest |weight| {max(abs(w).max() for w in model.coefs_):.3f}"
    )
    vowel_rows = np.flatnonzero(targets.sum(axis=1) == 1)
    train_correct = int(
        np.sum(evaluate(net, images[vowel_rows]).argmax(axis=1) == targets[vowel_rows].argmax(1))
    )
    test_images, test_labels = dataset()
    test_correct = int(np.sum(evaluate(net, test_images).argmax(axis=1) == test_labels))
    base_correct = int(np.sum(evaluate(net, centres).argmax(axis=1) == np.arange(5)))
    for split, correct, total in (
        ("base", base_correct, 5),
        ("train", train_correct, len(vowel_rows)),
        ("test", test_correct, N_TEST),
    ):
        print(f"| {split} | {correct}/{total} | {100 * correct / total:.2f}% |")
    others = images[targets.sum(axis=1) == 0]
    low_share = float(np.mean(evaluate(net, others).max(axis=1) < 0.5))
    print(f"non-vowel training images with every output < 0.5: {100 * low_share:.1f}%")
    for label, vowel in enumerate(VOWELS):
        print(f"{vowel}: outputs {np.round(evaluate(net, centres[label]), 3).tolist()}")
    tasks = read_suite(HERE / "suite.toml").tasks
    attack_report(net, tasks, steps=150, starts=ATTACK_STARTS)
    print("| word | format | tasks | correct (test) | accuracy |")
    format_report(net, tasks, test_images, test_labels)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
