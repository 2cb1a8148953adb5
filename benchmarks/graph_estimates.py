"""DeepPoly bounds and a gradient attack on a network *graph* (qverify's IR), for choosing the radii
of the CIFAR-10 graph suites (benchmarks/cifar10/suites.py). Not part of qverify.

`deeppoly.py` and `conv_training.image_attack` walk a chain of layers; the ResNet, MobileNetV2 and
SqueezeNet shapes fork and join, so this module treats every node of a `Network` as a sparse linear
map of what it reads (its producers' outputs concatenated, `Network.wiring`) followed by an
activation, with a max pool the one node that is not linear:

- `Dense`: its weights; `Conv2D` (grouped and depthwise too): its taps as a sparse matrix;
  `AveragePool2D`: the window means; `Add` of k tensors: [I ... I]; `Concat`: I; `Permute`: the
  permutation matrix. Activations: ReLU, ReLU6 (min(max(z, 0), 6)), identity.
- Bounds (`margin_lower_bound`): DeepPoly's relaxations (Singh et al., POPL 2019) with CROWN's
  backward walk on a general graph (Xu et al., NeurIPS 2020: auto_LiRPA): the coefficients on a
  tensor that several nodes read are the sum of what each consumer passes down, and a node is
  relaxed once all its consumers have been visited (they come later in the topological order).
  Intermediate bounds: interval arithmetic first, then back-substitution for the neurons whose
  interval still straddles a kink (the others are relaxed exactly either way). float64, no outward
  rounding: an *estimate* of where SAFE verdicts are easy, not a proof (qverify's own sound bounds
  are `qverify.engine.netlevel`).
- Attack (`image_attack`): projected sign-gradient ascent of the best rival's margin from the centre
  and random points of the box, gradients by the same backward walk.

ReLU6's relaxations: between the kinks it is the identity, outside them constant; across 0 only,
ReLU's triangle; across 6 only, the mirror image (6 - relu(6 - z)); across both, `_relu6_lines`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from deeppoly import _Lines, _relu_lines  # (benchmarks/ on the path, as for the suites' scripts)

from qverify.network import (
    NETWORK_INPUT,
    Activation,
    Add,
    AveragePool2D,
    Concat,
    Conv2D,
    Dense,
    MaxPool2D,
    Network,
    Permute,
)

ROW_CHUNK = 1024  # rows back-substituted at a time (memory: rows x the widest node, float64)


@dataclass(frozen=True, slots=True)
class _Node:
    """One node as the walks see it: z = matrix @ input + bias, h = activation(z); or a max pool."""

    producers: tuple[int, ...]
    sizes: tuple[int, ...]  # of each producer's part of the input
    matrix: sp.csr_matrix | None  # (n_out, n_in); None for a max pool
    bias: np.ndarray
    activation: Activation
    pool: MaxPool2D | None = None


def _taps_matrix(n_out: int, n_in: int, taps, values: np.ndarray) -> sp.csr_matrix:
    rows = np.repeat(np.arange(n_out), taps.count)
    return sp.csr_matrix((values, (rows, taps.inputs[taps.valid])), shape=(n_out, n_in))


def _node(layer, producers: tuple[int, ...]) -> _Node:
    sizes = tuple(layer.input_sizes)
    n_in, n_out = sum(sizes), layer.n_out
    zeros = np.zeros(n_out)
    if isinstance(layer, MaxPool2D):
        return _Node(producers, sizes, None, zeros, Activation.IDENTITY, layer)
    if isinstance(layer, Dense):
        return _Node(producers, sizes, sp.csr_matrix(layer.weights), layer.bias, layer.activation)
    if isinstance(layer, Conv2D):
        taps = layer.taps()
        values = layer.weights.reshape(-1)[taps.weights[taps.valid]]
        return _Node(
            producers, sizes, _taps_matrix(n_out, n_in, taps, values), layer.expanded_bias(), layer.activation
        )
    if isinstance(layer, AveragePool2D):
        windows = layer.windows()
        values = np.repeat(1.0 / layer.divisors(), windows.count)
        return _Node(producers, sizes, _taps_matrix(n_out, n_in, windows, values), zeros, Activation.IDENTITY)
    if isinstance(layer, Add):
        matrix = sp.hstack([sp.identity(n_out, format="csr")] * layer.count, format="csr")
        return _Node(producers, sizes, matrix, zeros, layer.activation)
    if isinstance(layer, Concat):
        return _Node(producers, sizes, sp.identity(n_out, format="csr"), zeros, Activation.IDENTITY)
    if isinstance(layer, Permute):
        matrix = sp.csr_matrix((np.ones(n_out), (np.arange(n_out), layer.order)), shape=(n_out, n_in))
        return _Node(producers, sizes, matrix, zeros, Activation.IDENTITY)
    raise SystemExit(f"graph_estimates: no map for {layer.describe()}")


def graph_nodes(net: Network) -> tuple[_Node, ...]:
    """Every node of `net` as a sparse linear map and an activation (module docstring)."""
    supported = (Activation.RELU, Activation.RELU6, Activation.IDENTITY)
    for layer in net.layers:
        if layer.activation not in supported:
            raise SystemExit(f"graph_estimates: activation {layer.activation.value} is not relaxed here")
    return tuple(_node(layer, producers) for layer, producers in zip(net.layers, net.wiring))


def _split(values: np.ndarray, sizes: tuple[int, ...]) -> list[np.ndarray]:
    return np.split(values, np.cumsum(sizes)[:-1], axis=-1) if len(sizes) > 1 else [values]


def _gather(node: _Node, x: np.ndarray, outputs: list[np.ndarray]) -> np.ndarray:
    parts = [x if p == NETWORK_INPUT else outputs[p] for p in node.producers]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


def _activate(activation: Activation, z: np.ndarray) -> np.ndarray:
    if activation is Activation.RELU:
        return np.maximum(z, 0.0)
    if activation is Activation.RELU6:
        return np.clip(z, 0.0, 6.0)
    return z


# ----------------------------------------------------------------------------------- attack


def _forward(nodes: tuple[_Node, ...], x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(pre-activations or max pool winners, outputs) of every node on a batch (batch, n_in)."""
    pre: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    for node in nodes:
        values = _gather(node, x, outputs)
        if node.pool is not None:
            windows = node.pool.windows()
            gathered = np.where(windows.valid[None], values[:, windows.inputs], -np.inf)
            winner = gathered.argmax(axis=2)
            pre.append(
                np.take_along_axis(np.broadcast_to(windows.inputs, gathered.shape), winner[..., None], 2)[
                    ..., 0
                ]
            )
            outputs.append(gathered.max(axis=2))
            continue
        z = (node.matrix @ values.T).T + node.bias
        pre.append(z)
        outputs.append(_activate(node.activation, z))
    return pre, outputs


def _input_gradient(
    nodes: tuple[_Node, ...], pre: list[np.ndarray], d_out: np.ndarray, n_in: int
) -> np.ndarray:
    """d(sum of d_out * last output)/d input, by the backward walk over the graph."""
    grads: dict[int, np.ndarray] = {len(nodes) - 1: d_out}
    for index in range(len(nodes) - 1, -1, -1):
        if index not in grads:
            continue
        node, g = nodes[index], grads.pop(index)
        if node.pool is not None:
            d_in = np.zeros((len(g), sum(node.sizes)))
            rows = np.repeat(np.arange(len(g)), g.shape[1])
            np.add.at(d_in, (rows, pre[index].reshape(-1)), g.reshape(-1))
        else:
            z = pre[index]
            if node.activation is Activation.RELU:
                g = g * (z > 0)
            elif node.activation is Activation.RELU6:
                g = g * ((z > 0) & (z < 6))
            d_in = (node.matrix.T @ g.T).T
        for producer, part in zip(node.producers, _split(d_in, node.sizes)):
            grads[producer] = grads[producer] + part if producer in grads else part
    return grads.get(NETWORK_INPUT, np.zeros((len(d_out), n_in)))


def image_attack(
    net: Network, lo: np.ndarray, hi: np.ndarray, label: int, seed: int, steps: int = 60, starts: int = 8
) -> float:
    """The largest margin max_{j != label} y_j - y_label that projected sign-gradient ascent finds
    in [lo, hi] (from the centre and `starts` random points); >= 0 means falsified."""
    nodes = graph_nodes(net)
    rng = np.random.default_rng(seed)
    x = np.vstack([(lo + hi) / 2, rng.uniform(lo, hi, (starts, len(lo)))])
    step = (hi - lo) / 4
    best = -np.inf
    for _ in range(steps):
        pre, outputs = _forward(nodes, x)
        logits = outputs[-1]
        others = logits.copy()
        others[:, label] = -np.inf
        rival = others.argmax(axis=1)
        margin = others[np.arange(len(x)), rival] - logits[:, label]
        best = max(best, float(margin.max()))
        if best >= 0:
            break
        d_logits = np.zeros_like(logits)
        d_logits[np.arange(len(x)), rival] = 1.0
        d_logits[:, label] -= 1.0
        x = np.clip(x + step * np.sign(_input_gradient(nodes, pre, d_logits, len(lo))), lo, hi)
        step *= 0.95
    return best


# ----------------------------------------------------------------------------------- bounds


def _relu6_lines(lo: np.ndarray, hi: np.ndarray) -> _Lines:
    """ReLU6: relu(z) where lo < 0 (and hi <= 6); 6 - relu(6 - z) where lo >= 0 (the mirror image
    of ReLU's lines, which also gives the identity between the kinks and 6 above them); across both
    kinks, below by 0 or the line through the origin and (hi, 6), above by 6 or the line through
    (lo, 0) and (6, 6), as DeepPoly picks ReLU's lower line (by the interval's shape)."""
    low_kink = _relu_lines(lo, hi)
    mirrored = _relu_lines(6 - hi, 6 - lo)  # relu(w), w = 6 - z
    above = lo >= 0
    lower_slope = np.where(above, mirrored.upper_slope, low_kink.lower_slope)
    lower_shift = np.where(above, 6 - mirrored.upper_shift - 6 * mirrored.upper_slope, low_kink.lower_shift)
    upper_slope = np.where(above, mirrored.lower_slope, low_kink.upper_slope)
    upper_shift = np.where(above, 6 - mirrored.lower_shift - 6 * mirrored.lower_slope, low_kink.upper_shift)
    both = (lo < 0) & (hi > 6)
    through_origin = both & (hi >= -lo)
    through_six = both & (6 - lo <= hi)
    lower_slope = np.where(both, np.where(through_origin, 6 / np.where(both, hi, 1.0), 0.0), lower_slope)
    lower_shift = np.where(both, 0.0, lower_shift)
    upper_slope = np.where(both, np.where(through_six, 6 / (6 - lo), 0.0), upper_slope)
    upper_shift = np.where(both, np.where(through_six, -6 * lo / (6 - lo), 6.0), upper_shift)
    return _Lines(lower_slope, lower_shift, upper_slope, upper_shift)


def _lines(activation: Activation, lo: np.ndarray, hi: np.ndarray) -> _Lines:
    if activation is Activation.RELU:
        return _relu_lines(lo, hi)
    if activation is Activation.RELU6:
        return _relu6_lines(lo, hi)
    ones = np.ones_like(lo)
    return _Lines(ones, 0 * lo, ones, 0 * lo)


def _unstable(activation: Activation, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Neurons whose interval straddles a kink of the activation (indices)."""
    if activation is Activation.RELU:
        return np.flatnonzero((lo < 0) & (hi > 0))
    if activation is Activation.RELU6:
        return np.flatnonzero(((lo < 0) & (hi > 0)) | ((lo < 6) & (hi > 6)))
    return np.zeros(0, dtype=np.int64)


class GraphBounds:
    """Bounds of every node's pre-activation and output over an input box (module docstring)."""

    def __init__(self, net: Network, lo: np.ndarray, hi: np.ndarray) -> None:
        self.nodes = graph_nodes(net)
        self.box = (np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64))
        self.pre: list[tuple[np.ndarray, np.ndarray]] = []  # z (or a max pool's output)
        self.post: list[tuple[np.ndarray, np.ndarray]] = []
        self.lines: list[_Lines | None] = []
        self.pool_rules: list[tuple | None] = []
        for index, node in enumerate(self.nodes):
            self._add(index, node)

    def _input_bounds(self, node: _Node) -> tuple[np.ndarray, np.ndarray]:
        parts = [self.box if p == NETWORK_INPUT else self.post[p] for p in node.producers]
        return tuple(np.concatenate([part[k] for part in parts]) for k in (0, 1))  # type: ignore[return-value]

    def _add(self, index: int, node: _Node) -> None:
        lo_in, hi_in = self._input_bounds(node)
        if node.pool is not None:
            windows = node.pool.windows()
            lows = np.where(windows.valid, lo_in[windows.inputs], -np.inf)
            highs = np.where(windows.valid, hi_in[windows.inputs], -np.inf)
            choice = windows.inputs[np.arange(node.pool.n_out), lows.argmax(axis=1)]  # largest lower bound
            others = np.where(windows.inputs == choice[:, None], -np.inf, highs).max(axis=1)
            dominated = lo_in[choice] >= others
            top = highs.max(axis=1)
            self.pre.append((lo_in[choice], top))
            self.post.append((lo_in[choice], top))
            self.lines.append(None)
            self.pool_rules.append((choice, dominated, top))
            return
        matrix = node.matrix
        positive, negative = matrix.maximum(0), matrix.minimum(0)
        lo = positive @ lo_in + negative @ hi_in + node.bias
        hi = positive @ hi_in + negative @ lo_in + node.bias
        unstable = _unstable(node.activation, lo, hi)
        self.pre.append((lo, hi))
        self.lines.append(None)
        self.pool_rules.append(None)
        for start in range(0, len(unstable), ROW_CHUNK):
            rows = unstable[start : start + ROW_CHUNK]
            selector = sp.csr_matrix(
                (np.ones(len(rows)), (np.arange(len(rows)), rows)), shape=(len(rows), len(lo))
            )
            coefficients = (selector @ matrix).toarray()
            shift = selector @ node.bias
            lower = self._back_substitute(index, coefficients, shift)
            upper = -self._back_substitute(index, -coefficients, -shift)
            lo[rows], hi[rows] = np.maximum(lo[rows], lower), np.minimum(hi[rows], upper)
        self.lines[index] = _lines(node.activation, lo, hi)
        post = _activate(node.activation, np.stack([lo, hi]))
        self.post.append((post[0], post[1]))

    def _back_substitute(self, index: int, coefficients: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """Lower bounds of rows @ input(node index) + shift, down to the input box."""
        node = self.nodes[index]
        pending: dict[int, np.ndarray] = {}
        for producer, part in zip(node.producers, _split(coefficients, node.sizes)):
            pending[producer] = pending[producer] + part if producer in pending else part
        constant = shift.astype(np.float64).copy()
        for j in range(index - 1, -1, -1):
            if j not in pending:
                continue
            c, node_j = pending.pop(j), self.nodes[j]
            if node_j.pool is not None:
                choice, dominated, top = self.pool_rules[j]
                positive, negative = np.maximum(c, 0), np.minimum(c, 0)
                constant = constant + (negative * ~dominated[None]) @ top
                mapped = np.zeros((len(c), sum(node_j.sizes)))
                np.add.at(mapped.T, choice, (positive + negative * dominated[None]).T)
                g = mapped
            else:
                lines = self.lines[j]
                if node_j.activation is not Activation.IDENTITY:
                    positive, negative = np.maximum(c, 0), np.minimum(c, 0)
                    constant = constant + positive @ lines.lower_shift + negative @ lines.upper_shift
                    c = positive * lines.lower_slope + negative * lines.upper_slope
                constant = constant + c @ node_j.bias
                g = np.asarray(c @ node_j.matrix)  # (rows, n_in) via the sparse matrix
            for producer, part in zip(node_j.producers, _split(g, node_j.sizes)):
                pending[producer] = pending[producer] + part if producer in pending else part
        c = pending.get(NETWORK_INPUT)
        if c is None:
            return constant
        lo, hi = self.box
        return constant + np.maximum(c, 0) @ lo + np.minimum(c, 0) @ hi

    def margin_rows(self, label: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, shift) of y_label - y_j (j != label) on the last node's input."""
        last = self.nodes[-1]
        n = len(last.bias)
        rows = np.zeros((n - 1, n))
        others = [j for j in range(n) if j != label]
        rows[np.arange(n - 1), label] = 1.0
        rows[np.arange(n - 1), others] = -1.0
        if last.activation is not Activation.IDENTITY or last.pool is not None:
            raise SystemExit("graph_estimates: the last node must be linear (logits)")
        return np.asarray(rows @ last.matrix), rows @ last.bias


def margin_lower_bound(net: Network, lo: np.ndarray, hi: np.ndarray, label: int) -> float:
    """A lower bound of min_{j != label} y_label - y_j over the box (> 0: robust, as estimated)."""
    bounds = GraphBounds(net, lo, hi)
    rows, shift = bounds.margin_rows(label)
    last = len(bounds.nodes) - 1
    return float(bounds._back_substitute(last, rows, shift).min())
