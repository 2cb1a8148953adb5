"""Train the learned-index networks of `lindex-cases` and write its instances (deterministic).

Run from anywhere with qverify and scikit-learn installed:

    python benchmarks/lindex-cases/train.py

A VNN-COMP category in the *case form* (issue 43), shaped like VNN-COMP 2022's nn4sys `lindex`: a
learned index maps a key to its position in a sorted array, and each property is a disjunction of
input boxes, each with its own output condition -- for every key range, the predicted position
must stay within a band:

    (assert (or (and (>= X_0 a) (<= X_0 b) (<= Y_0 lo)) (and (>= X_0 a) (<= X_0 b) (>= Y_0 hi)) ...))

What it does:
1. Draws 20,000 keys from a log-normal distribution (seed 0), scales them to [0, 1] and sorts them;
   the target of key i is its rank i / 20,000 (the cumulative distribution).
2. Trains two ReLU MLP regressors key -> position (scikit-learn's MLPRegressor, Adam, fixed seeds,
   one BLAS thread): `lindex_small` (1-32-32-1) and `lindex_deep` (1-32x4-1).
3. Writes each as ONNX (float32 weights, MatMul/Add/Relu) gzipped, `onnx/<name>.onnx.gz`, as the
   competition ships its networks.
4. Writes six properties per network (`vnnlib/<network>_<n>_<safe|unsafe>.vnnlib.gz`), n cases each:
   n keys of the data set, each box [k - w, k + w] (w = 1/20,000: a key's neighbourhood) with the
   band [min - 0.005, max + 0.005] around the network's own outputs on 2,001 points of the box
   (in float64: SAFE, by a margin far above the network's variation between two sample points).
   An `unsafe` property moves one case's upper band edge to a quarter of the way down its outputs'
   range: that case is violated (at the sampled maximum, at least).
5. Writes `instances.csv` (network, property, timeout 60 s) and `suite.toml`.
Deterministic for fixed library versions; the committed files are the artifacts.
"""

from __future__ import annotations

import gzip
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.neural_network import MLPRegressor
from threadpoolctl import threadpool_limits

from qverify.io import load_network, write_onnx
from qverify.network import Activation, evaluate_core

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the shared training tools
from training_tools import sklearn_network

KEYS = 20_000
HALF_WIDTH = 1.0 / KEYS  # a case's box: [k - HALF_WIDTH, k + HALF_WIDTH]
MARGIN = 0.005  # the band around the network's own outputs on the box
SAMPLES = 2001
TIMEOUT_S = 60
CASES = ((10, "safe"), (100, "safe"), (500, "safe"), (2000, "safe"), (100, "unsafe"), (1000, "unsafe"))


@dataclass(frozen=True)
class Design:
    name: str
    hidden: tuple[int, ...]
    seed: int


NETWORKS = (Design("lindex_small", (32, 32), 0), Design("lindex_deep", (32, 32, 32, 32), 1))


def keys() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    raw = np.sort(rng.lognormal(mean=0.0, sigma=1.0, size=KEYS))
    x = (raw - raw[0]) / (raw[-1] - raw[0])
    return x, np.arange(KEYS) / KEYS


def train(design: Design, x: np.ndarray, y: np.ndarray):
    model = MLPRegressor(
        hidden_layer_sizes=design.hidden, activation="relu", solver="adam", learning_rate_init=1e-3,
        max_iter=400, tol=1e-7, n_iter_no_change=30, random_state=design.seed,
    )  # fmt: skip
    model.fit(x[:, None], y)
    return sklearn_network(model, Activation.RELU, design.name)


def case_lines(net, centre: float, index: int, unsafe: bool) -> list[str]:
    """The two disjuncts of one case: the box around `centre`, Y_0 below or above its band."""
    lo, hi = max(0.0, centre - HALF_WIDTH), min(1.0, centre + HALF_WIDTH)
    outputs = evaluate_core(net, np.linspace(lo, hi, SAMPLES)[:, None])[:, 0]
    low, high = float(outputs.min()) - MARGIN, float(outputs.max()) + MARGIN
    if unsafe:
        high = float(outputs.max()) - 0.25 * float(outputs.max() - outputs.min())
    box = f"(>= X_0 {lo!r}) (<= X_0 {hi!r})"
    return [f"  (and {box} (<= Y_0 {low!r}))", f"  (and {box} (>= Y_0 {high!r}))"]


def property_text(net, centres: np.ndarray, violated: int | None, name: str) -> str:
    lines = [
        f"; {name}: {len(centres)} key ranges of a learned index, each with its own band of positions",
        "; (benchmarks/lindex-cases/train.py); unsafe if a key's predicted position leaves its band",
        "(declare-const X_0 Real)",
        "(declare-const Y_0 Real)",
        "(assert (or",
    ]
    for index, centre in enumerate(centres):
        lines += case_lines(net, float(centre), index, index == violated)
    return "\n".join([*lines, "))"]) + "\n"


def write_gzip(path: Path, text: str) -> None:
    path.write_bytes(gzip.compress(text.encode(), mtime=0))  # mtime 0: the same bytes on every run


def main() -> int:
    x, y = keys()
    (HERE / "onnx").mkdir(exist_ok=True)
    (HERE / "vnnlib").mkdir(exist_ok=True)
    rows = []
    with threadpool_limits(limits=1):
        for design in NETWORKS:
            net = train(design, x, y)
            plain = HERE / "onnx" / f"{design.name}.onnx"
            write_onnx(net, plain, float32=True)
            packed = plain.with_name(plain.name + ".gz")
            packed.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
            plain.unlink()
            net = load_network(packed)  # what is verified: the float32 weights as written
            error = np.abs(evaluate_core(net, x[:, None])[:, 0] - y)
            print(f"{design.name}: max |position error| {error.max():.4f}, mean {error.mean():.5f}")
            rng = np.random.default_rng(100 + design.seed)
            for count, kind in CASES:
                centres = np.sort(rng.choice(x[1:-1], size=count, replace=False))
                violated = int(rng.integers(count)) if kind == "unsafe" else None
                name = f"{design.name}_{count}_{kind}"
                write_gzip(HERE / "vnnlib" / f"{name}.vnnlib.gz", property_text(net, centres, violated, name))
                rows.append(f"onnx/{packed.name},vnnlib/{name}.vnnlib.gz,{TIMEOUT_S}")
    (HERE / "instances.csv").write_text("\n".join(rows) + "\n")
    (HERE / "suite.toml").write_text(
        "# Generated by benchmarks/lindex-cases/train.py: edit that script and rerun it, not this file.\n"
        'name = "lindex-cases"\n'
        "description = \"learned indexes (1-32x2-1, 1-32x4-1 ReLU) in VNN-COMP's case form: per key range its own "
        'band of positions; 12 instances, 10 to 2000 cases each, 8 SAFE, 4 UNSAFE"\n'
        'formats = ["float"]\n'
        f"timeout = {TIMEOUT_S}\n"
        'instances = "instances.csv"\n'
    )
    print(f"wrote {len(rows)} instances")
    return 0


if __name__ == "__main__":
    sys.exit(main())
