"""Shared by the suites' training scripts (benchmarks/*/train.py): a float attack on property boxes,
and reports of the accuracy of the implemented (quantised) networks. Not part of the qverify package:
the scripts put this folder on sys.path."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qverify.errors import QverifyError
from qverify.network import Activation, Dense, InputNormalisation, Network, apply_activation
from qverify.quant import (
    FixedFormat,
    ImplementationOptions,
    choose_format,
    quantize_network,
    quantize_real,
    simulate,
)
from qverify.suites.suite_file import SuiteTask

StartPoints = Callable[[np.random.Generator, np.ndarray, np.ndarray], np.ndarray]


def sklearn_network(
    model, hidden: Activation, name: str, norm: InputNormalisation | None = None, source: str = ""
) -> Network:
    """A fitted scikit-learn MLP (classifier or regressor) as a qverify Network: its (n_in, n_out)
    coefficient matrices transposed into layers, `hidden` after every hidden layer, identity output."""
    activations = [hidden] * (len(model.coefs_) - 1) + [Activation.IDENTITY]
    layers = tuple(
        Dense(weights.T, bias, activation)
        for weights, bias, activation in zip(model.coefs_, model.intercepts_, activations)
    )
    return Network(layers=layers, input_norm=norm, output_norm=None, name=name, source=source)


def activation_derivative(activation: Activation, post: np.ndarray) -> np.ndarray:
    """d act / d pre-activation, written in terms of the activation's output."""
    if activation is Activation.TANH:
        return 1.0 - post * post
    if activation is Activation.SIGMOID:
        return post * (1.0 - post)
    if activation is Activation.RELU:
        return (post > 0).astype(float)
    return np.ones_like(post)


def centre_and_random(count: int) -> StartPoints:
    """Start points: the box centre and `count` uniform points."""
    return lambda rng, lo, hi: np.vstack([(lo + hi) / 2, rng.uniform(lo, hi, (count, len(lo)))])


DEFAULT_STARTS = centre_and_random(32)


def attack(
    net: Network,
    lo: np.ndarray,
    hi: np.ndarray,
    label: int,
    seed: int,
    steps: int = 100,
    starts: StartPoints = DEFAULT_STARTS,
) -> float:
    """The largest margin max_{j != label} y_j - y_label found in the normalised box [lo, hi].

    Projected gradient ascent on the margin from the given start points; >= 0 means falsified.
    """
    rng = np.random.default_rng(seed)
    x = starts(rng, lo, hi)
    step = (hi - lo) / 4
    best = -np.inf
    for _ in range(steps):
        posts = [x]
        for layer in net.layers:
            posts.append(apply_activation(layer.activation, posts[-1] @ layer.weights.T + layer.bias))
        y = posts[-1]
        others = y.copy()
        others[:, label] = -np.inf
        rival = others.argmax(axis=1)
        margin = others[np.arange(len(x)), rival] - y[:, label]
        best = max(best, float(margin.max()))
        grad = np.zeros_like(y)
        grad[np.arange(len(x)), rival] = 1.0
        grad[:, label] -= 1.0
        for layer, post in zip(reversed(net.layers), reversed(posts[1:])):
            grad = (grad * activation_derivative(layer.activation, post)) @ layer.weights
        x = np.clip(x + step * np.sign(grad), lo, hi)
        step *= 0.97
    return best


def format_report(
    net: Network,
    tasks: tuple[SuiteTask, ...],
    x: np.ndarray,
    y: np.ndarray,
    word_bits: tuple[int, ...] = (8, 16),
) -> None:
    """For each word length: the formats the range analysis picks for the suite's property boxes
    (how many tasks each), and the accuracy of the implemented network (the bit-exact simulator,
    inputs rounded to the format) on (x, y) at each of them."""
    for bits in word_bits:
        chosen: dict[str, tuple[FixedFormat, int]] = {}
        failed = []
        for task in tasks:
            box = task.property.boxes[0]
            try:
                fmt, _ = choose_format(net, bits, box.lo_array().astype(float), box.hi_array().astype(float))
            except QverifyError as error:
                failed.append(f"{task.name} ({error})")
                continue
            chosen[str(fmt)] = (fmt, chosen.get(str(fmt), (fmt, 0))[1] + 1)
        for label, (fmt, count) in sorted(chosen.items()):
            qnet = quantize_network(net, ImplementationOptions(number=fmt))
            words, _ = quantize_real(net.input_norm.apply(x), fmt)
            right = int(np.sum(simulate(qnet, words).outputs.argmax(axis=1) == y))
            print(f"| {bits} | {label} | {count} | {right}/{len(y)} | {100 * right / len(y):.2f}% |")
        for failure in failed:
            print(f"  {bits}-bit: no format: {failure}")


def attack_report(
    net: Network, tasks: tuple[SuiteTask, ...], steps: int = 100, starts: StartPoints = DEFAULT_STARTS
) -> None:
    """Attack every task's box (normalised, as the suite file builds it); print the margins found
    and which tasks are falsified (UNSAFE in real arithmetic) or not (not proved SAFE)."""
    falsified, kept = [], []
    for index, task in enumerate(tasks):
        box, label = task.property.boxes[0], task.property.robustness.label
        lo, hi = box.lo_array().astype(float), box.hi_array().astype(float)
        margin = attack(net, lo, hi, label, seed=index, steps=steps, starts=starts)
        (falsified if margin >= 0 else kept).append(f"{task.name} ({margin:+.3f})")
    print(f"falsified by the float attack ({len(falsified)}): {', '.join(falsified) or '-'}")
    print(f"not falsified ({len(kept)}): {', '.join(kept) or '-'}")
