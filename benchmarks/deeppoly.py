"""DeepPoly-style bounds of a network's robustness margin in a box, for choosing the suites' radii.

Not part of qverify (whose own sound bounds are `qverify.engine.netlevel`): the image suites'
scripts use it to find, per centre, the largest grid radius at which a plain back-substitution
already proves the label robust in real arithmetic (float64, no outward rounding: an estimate of
where SAFE verdicts are easy, not a proof). Layers are qverify's own: `Dense` and `Conv2D` as their
(n_out, n_in) matrices, `AveragePool2D` as its averaging matrix, `MaxPool2D` by windows; ReLU,
sigmoid and identity activations. Relaxations are DeepPoly's (Singh et al., POPL 2019): a ReLU's
triangle with the lower slope 0 or 1, a sigmoid's tangent/secant lines by the sign of its bounds
(the endpoints' smaller derivative where they straddle 0), a max pool's largest-lower-bound input
below and its largest upper bound above (the input itself when it dominates the window).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.network import Activation, AveragePool2D, Dense, MaxPool2D, Network, apply_activation


@dataclass(frozen=True, slots=True)
class _Lines:
    """h >= lower_slope z + lower_shift and h <= upper_slope z + upper_shift, per neuron."""

    lower_slope: np.ndarray
    lower_shift: np.ndarray
    upper_slope: np.ndarray
    upper_shift: np.ndarray


def _relu_lines(lo: np.ndarray, hi: np.ndarray) -> _Lines:
    active, dead = lo >= 0, hi <= 0
    open_ = ~active & ~dead
    width = np.where(open_, hi - lo, 1.0)
    upper_slope = np.where(active, 1.0, np.where(open_, hi / width, 0.0))
    upper_shift = np.where(open_, -lo * hi / width, 0.0)
    lower_slope = np.where(active, 1.0, np.where(open_ & (hi >= -lo), 1.0, 0.0))
    return _Lines(lower_slope, np.zeros_like(lo), upper_slope, upper_shift)


def _sigmoid_lines(lo: np.ndarray, hi: np.ndarray) -> _Lines:
    f_lo, f_hi = apply_activation(Activation.SIGMOID, lo), apply_activation(Activation.SIGMOID, hi)
    d_lo, d_hi = f_lo * (1 - f_lo), f_hi * (1 - f_hi)
    narrow = hi - lo < 1e-9
    secant = np.where(narrow, d_lo, (f_hi - f_lo) / np.where(narrow, 1.0, hi - lo))
    both = np.minimum(d_lo, d_hi)
    convex, concave = hi <= 0, lo >= 0  # sigmoid is convex below 0, concave above
    lower_slope = np.where(convex, d_lo, np.where(concave, secant, both))
    upper_slope = np.where(convex, secant, np.where(concave, d_hi, both))
    lower_shift = f_lo - lower_slope * lo  # lines through (lo, f(lo)) below, (hi, f(hi)) above
    upper_shift = f_hi - upper_slope * hi
    return _Lines(lower_slope, lower_shift, upper_slope, upper_shift)


def _lines(activation: Activation, lo: np.ndarray, hi: np.ndarray) -> _Lines:
    if activation is Activation.RELU:
        return _relu_lines(lo, hi)
    if activation is Activation.SIGMOID:
        return _sigmoid_lines(lo, hi)
    ones = np.ones_like(lo)
    return _Lines(ones, 0 * lo, ones, 0 * lo)


def _linear(layer) -> tuple[np.ndarray, np.ndarray]:
    """(matrix, bias) of a Dense, Conv2D or AveragePool2D layer."""
    if isinstance(layer, AveragePool2D):
        windows = layer.windows()
        matrix = np.zeros((layer.n_out, layer.n_in))
        rows = np.repeat(np.arange(layer.n_out), windows.count)
        matrix[rows, windows.inputs[windows.valid]] = np.repeat(1.0 / layer.divisors(), windows.count)
        return matrix, np.zeros(layer.n_out)
    if isinstance(layer, Dense):
        return layer.weights, layer.bias
    return layer.matrix, layer.expanded_bias()


class _Bounds:
    """Per layer: the bounds of its input values (post-activation of the layer before), and the
    relaxation of each layer's output in terms of its input."""

    def __init__(self, net: Network, lo: np.ndarray, hi: np.ndarray) -> None:
        self.net = net
        self.inputs = [(lo, hi)]  # bounds of each layer's input vector
        self.steps: list = []  # per layer: ("linear", matrix, bias, lines) or ("max", pool, choice, dominated, top)
        for layer in net.layers:
            if isinstance(layer, MaxPool2D):
                self.steps.append(self._max_step(layer))
                continue
            matrix, bias = _linear(layer)
            pre_lo, pre_hi = self._pre_bounds(matrix, bias)
            lines = _lines(layer.activation, pre_lo, pre_hi)
            self.steps.append(("linear", matrix, bias, lines))
            post = apply_activation(layer.activation, np.stack([pre_lo, pre_hi]))
            self.inputs.append((np.minimum(post[0], post[1]), np.maximum(post[0], post[1])))

    def _pre_bounds(self, matrix: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(self.steps) == 0:  # the first layer over the input box: exact intervals
            lo, hi = self.inputs[0]
            positive, negative = np.maximum(matrix, 0), np.minimum(matrix, 0)
            return positive @ lo + negative @ hi + bias, positive @ hi + negative @ lo + bias
        lower = self.back_substitute(matrix, bias, lower=True)
        upper = -self.back_substitute(-matrix, -bias, lower=True)
        return lower, upper

    def _max_step(self, layer: MaxPool2D) -> tuple:
        lo, hi = self.inputs[-1]
        windows = layer.windows()
        lows = np.where(windows.valid, lo[windows.inputs], -np.inf)
        highs = np.where(windows.valid, hi[windows.inputs], -np.inf)
        choice = windows.inputs[np.arange(layer.n_out), lows.argmax(axis=1)]  # the largest lower bound
        others = np.where(windows.inputs == choice[:, None], -np.inf, highs).max(axis=1)
        dominated = lo[choice] >= others
        top = highs.max(axis=1)
        self.inputs.append((lo[choice], top))
        return ("max", layer, choice, dominated, top)

    def back_substitute(
        self, rows: np.ndarray, shift: np.ndarray, lower: bool, upto: int | None = None
    ) -> np.ndarray:
        """Lower bounds of rows @ z + shift, z the pre-activation of layer `upto` (default: the
        layer being added), by DeepPoly back-substitution down to the input box."""
        coefficients, constant = rows, shift.astype(np.float64).copy()
        for step in reversed(self.steps[: upto if upto is not None else len(self.steps)]):
            if step[0] == "max":
                _, layer, choice, dominated, top = step
                # coefficients act on the pool's outputs h; h >= v[choice]; h <= v[choice] if dominated else top
                positive, negative = np.maximum(coefficients, 0), np.minimum(coefficients, 0)
                exact_neg = negative * dominated[None]
                constant = constant + (negative * ~dominated[None]) @ top
                mapped = np.zeros((len(coefficients), layer.n_in))
                np.add.at(mapped.T, choice, (positive + exact_neg).T)
                coefficients = mapped
                continue
            _, matrix, bias, lines = step
            positive, negative = np.maximum(coefficients, 0), np.minimum(coefficients, 0)
            constant = constant + positive @ lines.lower_shift + negative @ lines.upper_shift
            coefficients = positive * lines.lower_slope + negative * lines.upper_slope
            constant = constant + coefficients @ bias
            coefficients = coefficients @ matrix
        lo, hi = self.inputs[0]
        return constant + np.maximum(coefficients, 0) @ lo + np.minimum(coefficients, 0) @ hi


def margin_lower_bound(net: Network, lo: np.ndarray, hi: np.ndarray, label: int) -> float:
    """A lower bound of min_{j != label} y_label - y_j over the box (> 0: robust, as estimated)."""
    bounds = _Bounds(net, lo, hi)
    n = net.n_outputs
    rows = np.zeros((n - 1, n))
    others = [j for j in range(n) if j != label]
    rows[np.arange(n - 1), label] = 1.0
    rows[np.arange(n - 1), others] = -1.0
    # the margin's rows act on the last layer's output: fold the last layer's (identity) lines in
    _, matrix, bias, _ = bounds.steps[-1]
    last = len(bounds.steps) - 1
    return float(bounds.back_substitute(rows @ matrix, rows @ bias, lower=True, upto=last).min())
