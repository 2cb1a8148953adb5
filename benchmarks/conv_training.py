"""Training and export of the suites' convolutional networks, in numpy (no deep-learning framework).

Shared by benchmarks/digits28-maxpool, digits28-avgpool and digits32rgb-conv (their `train.py` put
this folder on sys.path). Not part of the qverify package.

- `ConvTrainer`: a sequential network of qverify's own layers (`Conv2D`, `MaxPool2D`,
  `AveragePool2D`, `Dense`; ReLU or identity) trained by minibatch Adam on the softmax
  cross-entropy plus an L2 penalty on the weights. The geometry comes from the IR itself: a
  convolution is the sparse matrix of its `taps()` (one row per output neuron, products in C order),
  a pool the windows of `windows()`, so the trained network is, by construction, the one qverify
  reads back. Deterministic: seeded initialisation and shuffles, float64, BLAS on one thread (the
  callers' `threadpool_limits`).
- `export_pytorch_layout`: the network as an ONNX file in the layout `torch.onnx.export` writes for
  the equivalent `nn.Sequential` (opset 13): `Conv` with its padding as an attribute, `Relu`,
  `MaxPool`, an `AvgPool2d(padding=p)` as `Pad` (pads and value from `Constant` nodes) + `AveragePool`
  without pads, `Flatten`, `Gemm` (transB = 1); initializers named after the module
  (`0.weight`, ...), float32; input `input` [1, C, H, W], output `output` [1, classes].
- `check_with_onnxruntime`: onnxruntime's logits on the file equal qverify's float64 evaluation
  of what it reads (within float32 precision) and give the same classes.
- `image_attack`: projected gradient ascent on the margin in a box, for choosing radii.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from scipy import sparse

from qverify.io import read_onnx
from qverify.network import Activation, AveragePool2D, Conv2D, Dense, MaxPool2D, Network, evaluate

OPSET = 13
Layer = Conv2D | MaxPool2D | AveragePool2D | Dense


def _conv_structure(layer: Conv2D) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CSR structure of the convolution as an (n_out, n_in) matrix: indptr, column indices, the
    flat kernel index of each entry, and the valid taps' (row, position) mask."""
    taps = layer.taps()
    valid = taps.valid
    indptr = np.concatenate([[0], np.cumsum(taps.count)])
    return indptr, taps.inputs[valid], taps.weights[valid], valid


@dataclass
class _Cache:
    inputs: np.ndarray
    pre: np.ndarray | None = None
    argmax: np.ndarray | None = None


class ConvTrainer:
    """Parameters and gradients of a sequential network with the geometry of `template`."""

    def __init__(self, template: Network, seed: int) -> None:
        self.template = template
        rng = np.random.default_rng(seed)
        self.weights: list[np.ndarray | None] = []
        self.biases: list[np.ndarray | None] = []
        self.structure: list[tuple | None] = []
        self.pools: list[sparse.csr_matrix | None] = []
        for layer in template.layers:
            structure, pool = None, None
            if isinstance(layer, (Conv2D, Dense)):
                fan_in = int(np.prod(layer.weights.shape[1:]))
                self.weights.append(rng.normal(0.0, np.sqrt(2.0 / fan_in), layer.weights.shape))
                self.biases.append(np.zeros(layer.bias.shape))
                if isinstance(layer, Conv2D):
                    structure = _conv_structure(layer)
            else:
                self.weights.append(None)
                self.biases.append(None)
                if isinstance(layer, AveragePool2D):
                    windows = layer.windows()
                    reciprocal = np.repeat(1.0 / layer.divisors(), windows.count)
                    indptr = np.concatenate([[0], np.cumsum(windows.count)])
                    pool = sparse.csr_matrix(
                        (reciprocal, windows.inputs[windows.valid], indptr), shape=(layer.n_out, layer.n_in)
                    )
            self.structure.append(structure)
            self.pools.append(pool)

    @classmethod
    def of(cls, net: Network) -> ConvTrainer:
        """A trainer holding the parameters of `net` (to attack it)."""
        trainer = cls(net, 0)
        for index, layer in enumerate(net.layers):
            if isinstance(layer, (Conv2D, Dense)):
                trainer.weights[index], trainer.biases[index] = layer.weights, layer.bias
        return trainer

    # -- the parameters (for Adam) ---------------------------------------------------------------

    def parameters(self) -> list[np.ndarray]:
        return [p for pair in zip(self.weights, self.biases) for p in pair if p is not None]

    def _matrix(self, index: int) -> sparse.csr_matrix:
        layer = self.template.layers[index]
        indptr, columns, kernel_index, _ = self.structure[index]  # type: ignore[misc]
        data = self.weights[index].reshape(-1)[kernel_index]  # type: ignore[union-attr]
        return sparse.csr_matrix((data, columns, indptr), shape=(layer.n_out, layer.n_in))

    def _expanded_bias(self, index: int) -> np.ndarray:
        layer = self.template.layers[index]
        bias = self.biases[index]
        return bias[layer.channel_of()] if isinstance(layer, Conv2D) else bias  # type: ignore[index]

    # -- forward and backward ----------------------------------------------------------------------

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, list[_Cache]]:
        caches = []
        values = x
        for index, layer in enumerate(self.template.layers):
            cache = _Cache(values)
            if isinstance(layer, MaxPool2D):
                windows = layer.windows()
                gathered = np.where(windows.valid[None], values[:, windows.inputs], -np.inf)
                cache.argmax = gathered.argmax(axis=2)
                values = np.take_along_axis(gathered, cache.argmax[:, :, None], axis=2)[:, :, 0]
            elif isinstance(layer, AveragePool2D):
                values = (self.pools[index] @ values.T).T
            else:
                if isinstance(layer, Conv2D):
                    pre = (self._matrix(index) @ values.T).T + self._expanded_bias(index)
                else:
                    pre = values @ self.weights[index].T + self.biases[index]  # type: ignore[union-attr,operator]
                cache.pre = pre
                values = np.maximum(pre, 0.0) if layer.activation is Activation.RELU else pre
            caches.append(cache)
        return values, caches

    def backward(
        self, d_out: np.ndarray, caches: list[_Cache], to_input: bool = False
    ) -> tuple[list[np.ndarray], np.ndarray | None]:
        """Gradients in the order of `parameters()` for the gradient `d_out` of the last layer, and
        (with `to_input`) the gradient of the input."""
        grads: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        grad = d_out
        for index in range(len(self.template.layers) - 1, -1, -1):
            layer, cache = self.template.layers[index], caches[index]
            if isinstance(layer, MaxPool2D):
                windows = layer.windows()
                source = np.take_along_axis(
                    np.broadcast_to(windows.inputs[None], (len(grad), *windows.inputs.shape)),
                    cache.argmax[:, :, None],  # type: ignore[index]
                    axis=2,
                )[:, :, 0]
                upstream = np.zeros_like(cache.inputs)
                rows = np.repeat(np.arange(len(grad)), grad.shape[1])
                np.add.at(upstream, (rows, source.reshape(-1)), grad.reshape(-1))
                grad = upstream
                continue
            if isinstance(layer, AveragePool2D):
                grad = (self.pools[index].T @ grad.T).T
                continue
            if layer.activation is Activation.RELU:
                grad = grad * (cache.pre > 0)  # type: ignore[operator]
            if isinstance(layer, Conv2D):
                _, _, kernel_index, valid = self.structure[index]  # type: ignore[misc]
                taps = layer.taps()
                per_tap = np.einsum("bj,bjt->jt", grad, cache.inputs[:, taps.inputs])[valid]
                d_weights = np.bincount(kernel_index, per_tap, minlength=layer.weights.size)
                d_bias = np.bincount(layer.channel_of(), grad.sum(axis=0), minlength=layer.out_channels)
                grads[index] = (d_weights.reshape(layer.weights.shape), d_bias)
                if index > 0 or to_input:
                    grad = (self._matrix(index).T @ grad.T).T
            else:
                grads[index] = (grad.T @ cache.inputs, grad.sum(axis=0))
                if index > 0 or to_input:
                    grad = grad @ self.weights[index]  # type: ignore[operator]
        return [g for index in sorted(grads) for g in grads[index]], grad if to_input else None

    def loss_and_gradients(
        self, x: np.ndarray, y: np.ndarray, decay: float
    ) -> tuple[float, list[np.ndarray]]:
        logits, caches = self.forward(x)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        n = len(y)
        loss = -log_p[np.arange(n), y].mean()
        d_logits = np.exp(log_p)
        d_logits[np.arange(n), y] -= 1.0
        grads, _ = self.backward(d_logits / n, caches)
        weights = [w for w in self.weights if w is not None]
        loss += 0.5 * decay * sum(float(np.sum(w * w)) for w in weights)
        position = 0
        for w in weights:
            grads[position] = grads[position] + decay * w
            position += 2
        return float(loss), grads

    def fit(
        self, x: np.ndarray, y: np.ndarray, epochs: int, batch: int, rate: float, decay: float, seed: int
    ) -> list[float]:
        """Minibatch Adam (beta 0.9/0.999), shuffled by `seed`; the mean loss of every epoch."""
        rng = np.random.default_rng(seed)
        params = self.parameters()
        first = [np.zeros_like(p) for p in params]
        second = [np.zeros_like(p) for p in params]
        step, history = 0, []
        for _ in range(epochs):
            order = rng.permutation(len(y))
            losses = []
            for start in range(0, len(y), batch):
                chosen = order[start : start + batch]
                loss, grads = self.loss_and_gradients(x[chosen], y[chosen], decay)
                losses.append(loss)
                step += 1
                for p, g, m, v in zip(params, grads, first, second):
                    m *= 0.9
                    m += 0.1 * g
                    v *= 0.999
                    v += 0.001 * g * g
                    p -= rate * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
            history.append(float(np.mean(losses)))
        return history

    def network(self, name: str, float32: bool = True) -> Network:
        """The trained network (weights rounded to float32 when `float32`, as exported)."""

        def cast(values: np.ndarray) -> np.ndarray:
            return values.astype(np.float32).astype(np.float64) if float32 else values

        layers: list[Layer] = []
        for layer, w, b in zip(self.template.layers, self.weights, self.biases):
            if isinstance(layer, Conv2D):
                layers.append(
                    Conv2D(
                        cast(w),
                        cast(b),
                        layer.activation,
                        layer.input_shape,
                        layer.strides,
                        layer.pads,
                        layer.groups,
                    )
                )
            elif isinstance(layer, Dense):
                layers.append(Dense(cast(w), cast(b), layer.activation))
            else:
                layers.append(layer)
        return Network(tuple(layers), name=name)


# -- export ------------------------------------------------------------------------------------------


class _Exporter:
    """Nodes named as torch.onnx.export names them (`Conv_0`, `Relu_1`, ...), in chain order."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.current = "input"

    def node(self, op_type: str, extra_inputs: list[str], **attributes) -> None:
        name = f"{op_type}_{len(self.nodes)}"
        output = f"onnx::{name}_out"
        self.nodes.append(
            helper.make_node(op_type, [self.current, *extra_inputs], [output], name=name, **attributes)
        )
        self.current = output

    def constant(self, value: np.ndarray) -> str:
        name = f"Constant_{len(self.nodes)}"
        output = f"onnx::{name}_out"
        self.nodes.append(
            helper.make_node(
                "Constant", [], [output], name=name, value=numpy_helper.from_array(value, output)
            )
        )
        return output

    def tensor(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name


def export_pytorch_layout(net: Network, path: Path) -> None:
    """Write `net` as torch.onnx.export writes the equivalent nn.Sequential (module docstring)."""
    parts = _Exporter()
    first = net.layers[0]
    previous_spatial = True
    for module, layer in enumerate(net.layers):
        if isinstance(layer, Conv2D):
            inputs = [
                parts.tensor(f"{module}.weight", layer.weights),
                parts.tensor(f"{module}.bias", layer.bias),
            ]
            kh, kw = layer.kernel
            parts.node(
                "Conv", inputs, dilations=[1, 1], group=layer.groups, kernel_shape=[kh, kw],
                pads=list(layer.pads), strides=list(layer.strides),
            )  # fmt: skip
        elif isinstance(layer, MaxPool2D):
            parts.node(
                "MaxPool",
                [],
                kernel_shape=list(layer.kernel),
                pads=list(layer.pads),
                strides=list(layer.strides),
            )
        elif isinstance(layer, AveragePool2D):
            counted = {}  # torch: count_include_pad only when the pool keeps its padding
            if any(layer.pads) and layer.count_include_pad:  # AvgPool2d(padding=p): Pad, then no pads
                top, left, bottom, right = layer.pads
                pads = parts.constant(np.array([0, 0, top, left, 0, 0, bottom, right], dtype=np.int64))
                value = parts.constant(np.array(0.0, dtype=np.float32))
                parts.node("Pad", [pads, value], mode="constant")
                pool_pads = [0, 0, 0, 0]
            else:
                pool_pads = list(layer.pads)
                counted = {"count_include_pad": int(layer.count_include_pad)}
            parts.node(
                "AveragePool", [], ceil_mode=0, kernel_shape=list(layer.kernel), pads=pool_pads,
                strides=list(layer.strides), **counted,
            )  # fmt: skip
        else:
            if previous_spatial:
                parts.node("Flatten", [], axis=1)
            inputs = [
                parts.tensor(f"{module}.weight", layer.weights),
                parts.tensor(f"{module}.bias", layer.bias),
            ]
            parts.node("Gemm", inputs, alpha=1.0, beta=1.0, transB=1)
        if layer.activation is Activation.RELU:
            parts.node("Relu", [])
        previous_spatial = not isinstance(layer, Dense)
    parts.nodes[-1].output[0] = "output"
    graph = helper.make_graph(
        parts.nodes,
        "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, *first.input_shape])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, net.n_outputs])],
        parts.initializers,
    )
    model = helper.make_model(graph, producer_name="pytorch", opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    path.write_bytes(model.SerializeToString())


def check_with_onnxruntime(path: Path, x: np.ndarray, tolerance: float = 1e-4) -> Network:
    """qverify's reading of the file computes onnxruntime's logits on `x` (flat rows) and classes."""
    net = read_onnx(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    declared = session.get_inputs()[0]
    shape = [dim if isinstance(dim, int) else 1 for dim in declared.shape]
    ours = evaluate(net, x)
    theirs = np.array(
        [
            session.run(None, {declared.name: row.reshape(shape).astype(np.float32)})[0].reshape(-1)
            for row in x
        ]
    )
    worst = float(np.max(np.abs(ours - theirs)))
    if worst > tolerance or np.any(ours.argmax(axis=1) != theirs.argmax(axis=1)):
        raise SystemExit(
            f"{path}: onnxruntime differs from qverify's reading (largest difference {worst:.2e})"
        )
    return net


# -- attack ------------------------------------------------------------------------------------------


def image_attack(
    net: Network, lo: np.ndarray, hi: np.ndarray, label: int, seed: int, steps: int = 60, starts: int = 8
) -> float:
    """The largest margin max_{j != label} y_j - y_label that projected sign-gradient ascent finds
    in [lo, hi] (from the centre and random points); >= 0 means falsified."""
    trainer = ConvTrainer.of(net)
    rng = np.random.default_rng(seed)
    x = np.vstack([(lo + hi) / 2, rng.uniform(lo, hi, (starts, len(lo)))])
    step = (hi - lo) / 4
    best = -np.inf
    for _ in range(steps):
        logits, caches = trainer.forward(x)
        others = logits.copy()
        others[:, label] = -np.inf
        rival = others.argmax(axis=1)
        margin = others[np.arange(len(x)), rival] - logits[:, label]
        best = max(best, float(margin.max()))
        d_logits = np.zeros_like(logits)
        d_logits[np.arange(len(x)), rival] = 1.0
        d_logits[:, label] -= 1.0
        _, grad = trainer.backward(d_logits, caches, to_input=True)
        x = np.clip(x + step * np.sign(grad), lo, hi)
        step *= 0.95
    return best
