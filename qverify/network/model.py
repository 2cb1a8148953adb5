"""The network IR: a feed-forward graph of layers (a chain in the common case) with NNet-style
normalisation.

A `Network` is a list of nodes in topological order -- dense, convolution and pooling layers
(`qverify.network.spatial`) and joins (`qverify.network.joins`: a residual `Add`, a channel
`Concat`) -- and its `wiring`: which nodes' outputs each node reads. Node k reads the outputs of
`wiring[k]` concatenated (`NETWORK_INPUT` is the network's input); the last node's output is the
network's output. A chain (each node reads the one before it) is the special case every NNet file
and most ONNX files are, and the default wiring.

Conventions (shared by every stage):
- `Dense.weights` has shape (n_out, n_in): row i holds the weights into neuron i, so y = W x + b
  (the NNet convention; ONNX MatMul weights are transposed by the loader).
- The *core* network maps normalised inputs to normalised outputs. VNN-LIB `X_i`/`Y_j` and the
  generated C both talk about the core; `InputNormalisation`/`OutputNormalisation` convert raw
  units at the edges, exactly as the NNet reference evaluation does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from qverify.errors import InputError
from qverify.network.activation import Activation
from qverify.network.arrays import frozen_array, require_finite
from qverify.network.joins import Add, Concat
from qverify.network.operators import operator_of
from qverify.network.qparams import AffineQuantization
from qverify.network.spatial import AveragePool2D, Conv2D, MaxPool2D
from qverify.network.taps import Taps

NETWORK_INPUT = -1  # in `Network.wiring`: the network's input
Wiring = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True, eq=False)
class Dense:
    """An affine layer followed by an activation: act(W x + b)."""

    weights: np.ndarray
    bias: np.ndarray
    activation: Activation

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", frozen_array(self.weights, ndim=2))
        object.__setattr__(self, "bias", frozen_array(self.bias, ndim=1))
        if self.weights.shape[0] != self.bias.shape[0]:
            raise InputError(f"layer has {self.weights.shape[0]} weight rows but {self.bias.shape[0]} biases")
        require_finite(self.weights, "weight matrix")
        require_finite(self.bias, "bias vector")

    @property
    def n_in(self) -> int:
        return int(self.weights.shape[1])

    @property
    def n_out(self) -> int:
        return int(self.weights.shape[0])

    @property
    def input_shape(self) -> tuple[int]:
        return (self.n_in,)

    @property
    def output_shape(self) -> tuple[int]:
        return (self.n_out,)

    @property
    def input_sizes(self) -> tuple[int, ...]:
        return (self.n_in,)

    @property
    def matrix(self) -> np.ndarray:
        """The layer as a dense (n_out, n_in) matrix: its weights (see `Conv2D.matrix`)."""
        return self.weights

    def expanded_bias(self) -> np.ndarray:
        return self.bias

    def channel_of(self) -> np.ndarray:
        """The output channel of every neuron: each neuron is its own channel."""
        return np.arange(self.n_out)

    def taps(self) -> Taps:
        """Every input, in order, for every neuron (see `qverify.network.spatial.Taps`)."""
        n_out, n_in = self.weights.shape
        inputs = np.broadcast_to(np.arange(n_in, dtype=np.int64), (n_out, n_in))
        weights = np.arange(n_out * n_in, dtype=np.int64).reshape(n_out, n_in)
        return Taps(inputs, weights, np.full(n_out, n_in, dtype=np.int64))

    def describe(self) -> str:
        return f"dense {self.n_in} -> {self.n_out}"


@dataclass(frozen=True, slots=True, eq=False)
class InputNormalisation:
    """NNet input scaling: x_norm = (clip(x, minimum, maximum) - mean) / range."""

    minimum: np.ndarray
    maximum: np.ndarray
    mean: np.ndarray
    range: np.ndarray

    def __post_init__(self) -> None:
        for name in ("minimum", "maximum", "mean", "range"):
            object.__setattr__(self, name, frozen_array(getattr(self, name), ndim=1))
        sizes = {self.minimum.size, self.maximum.size, self.mean.size, self.range.size}
        if len(sizes) != 1:
            raise InputError("input normalisation vectors have different lengths")
        require_finite(self.mean, "input mean")
        require_finite(self.range, "input range")
        if np.any(self.range == 0):
            raise InputError(f"input range is zero for input {int(np.argmax(self.range == 0))}")
        if np.any(np.isnan(self.minimum)) or np.any(np.isnan(self.maximum)):
            raise InputError("input minimum/maximum holds NaN")
        if np.any(self.minimum > self.maximum):
            i = int(np.argmax(self.minimum > self.maximum))
            raise InputError(f"input {i}: minimum {self.minimum[i]} > maximum {self.maximum[i]}")

    @property
    def size(self) -> int:
        return int(self.mean.size)

    def apply(self, x_raw: np.ndarray) -> np.ndarray:
        """Raw inputs (..., n) to normalised inputs, clipping first as NNet does."""
        return (np.clip(x_raw, self.minimum, self.maximum) - self.mean) / self.range

    def to_raw(self, x_norm: np.ndarray) -> np.ndarray:
        """Normalised inputs back to raw units (no clipping: the inverse on the clipped domain)."""
        return np.asarray(x_norm) * self.range + self.mean

    def normalised_domain(self) -> tuple[np.ndarray, np.ndarray]:
        """The normalised image of [minimum, maximum]: the default input box."""
        return (self.minimum - self.mean) / self.range, (self.maximum - self.mean) / self.range


@dataclass(frozen=True, slots=True, eq=False)
class OutputNormalisation:
    """NNet output scaling: y_raw = y_norm * range + mean (one mean/range per output)."""

    mean: np.ndarray
    range: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", frozen_array(self.mean, ndim=1))
        object.__setattr__(self, "range", frozen_array(self.range, ndim=1))
        if self.mean.size != self.range.size:
            raise InputError("output mean and range have different lengths")
        require_finite(self.mean, "output mean")
        require_finite(self.range, "output range")
        if np.any(self.range == 0):
            raise InputError("output range is zero")

    def apply(self, y_norm: np.ndarray) -> np.ndarray:
        return np.asarray(y_norm) * self.range + self.mean


def gather_inputs(wiring: Wiring, index: int, x: np.ndarray, outputs: list[np.ndarray]) -> np.ndarray:
    """What node `index` reads: its producers' values (`outputs[p]`, or the network input `x`)
    joined along the last axis, in order (one producer: its array itself). Every stage that runs
    the network node by node (reference, simulator, bounds, attack) gathers a node's input here."""
    parts = [x if p == NETWORK_INPUT else outputs[p] for p in wiring[index]]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


def chain_wiring(count: int) -> Wiring:
    """Each of `count` nodes reading the one before it (the first reads the network's input)."""
    return tuple((index - 1,) for index in range(count))


@dataclass(frozen=True, slots=True, eq=False)
class Network:
    """A feed-forward network: nodes, their wiring, optional normalisation, and where it came from.

    `layers` are the nodes in topological order: `Dense`, `Conv2D`, `MaxPool2D`, `AveragePool2D`
    (qverify.network.spatial), `Add` or `Concat` (qverify.network.joins), each mapping a flat vector
    (its producers' outputs concatenated) to a flat vector. `wiring[k]` lists node k's producers
    (`NETWORK_INPUT` for the input; default: a chain). `quantization` holds the int8 affine
    parameters of a model read from a quantized ONNX file (`qverify.network.qparams`): the layers
    then hold the dequantized weights, and `quantize_network` with the int8 format uses the integers.
    """

    layers: tuple[Dense | Conv2D | MaxPool2D | AveragePool2D | Add | Concat, ...]
    input_norm: InputNormalisation | None = None
    output_norm: OutputNormalisation | None = None
    name: str = "network"
    source: str = ""
    image_shape: tuple[int, ...] | None = field(default=None)
    quantization: AffineQuantization | None = field(default=None)
    wiring: Wiring = field(default=())
    notes: tuple[str, ...] = field(default=())  # what reading the file changed (e.g. a dropped Softmax)
    output_softmax: bool = field(default=False)  # the file ends in a Softmax, dropped (`io.onnx_graph`)
    _input_size: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        if not self.layers:
            raise InputError("network has no layers")
        wiring = tuple(tuple(int(p) for p in producers) for producers in self.wiring)
        object.__setattr__(self, "wiring", wiring or chain_wiring(len(self.layers)))
        self._check_wiring()
        if self.input_norm is not None and self.input_norm.size != self.n_inputs:
            raise InputError(
                f"input normalisation has {self.input_norm.size} entries for {self.n_inputs} inputs"
            )
        if self.output_norm is not None and self.output_norm.mean.size not in (1, self.n_outputs):
            raise InputError("output normalisation does not match the number of outputs")
        if self.quantization is not None:
            self.quantization.check_against(self.layers, self.wiring)

    def _check_wiring(self) -> None:
        """Topological order, sizes and shapes of every edge, and every node used by the output."""
        if len(self.wiring) != len(self.layers):
            raise InputError(f"wiring lists {len(self.wiring)} nodes, the network has {len(self.layers)}")
        input_size = None
        used = {len(self.layers) - 1}
        for index in range(len(self.layers) - 1, -1, -1):
            if index in used:
                used.update(p for p in self.wiring[index] if p != NETWORK_INPUT)
        for index, (layer, producers) in enumerate(zip(self.layers, self.wiring)):
            where = f"node {index + 1} ({layer.describe()})"
            if not producers or any(not NETWORK_INPUT <= p < index for p in producers):
                raise InputError(f"{where} reads {list(producers)}: only earlier nodes or the input (-1)")
            if index not in used:
                raise InputError(
                    f"{where}: its output is never used (it does not reach the network's output)"
                )
            expected = layer.input_sizes
            if len(expected) != len(producers):
                raise InputError(f"{where} reads {len(expected)} tensors, the wiring gives {len(producers)}")
            for slot, (producer, size) in enumerate(zip(producers, expected)):
                if producer == NETWORK_INPUT:
                    if input_size is not None and input_size != size:
                        raise InputError(
                            f"{where} reads the input as {size} values, another node as {input_size}"
                        )
                    input_size = size
                    continue
                before = self.layers[producer]
                which = f" as input {slot + 1}" if len(producers) > 1 else ""
                if before.n_out != size:
                    raise InputError(
                        f"layer {producer + 1} has {before.n_out} outputs but layer {index + 1} "
                        f"expects {size} inputs{which}"
                    )
                shapes = getattr(layer, "input_shapes", None) or (getattr(layer, "input_shape", ()),)
                wanted = shapes[slot] if slot < len(shapes) else ()
                if len(before.output_shape) == 3 and len(wanted) == 3 and before.output_shape != wanted:
                    raise InputError(
                        f"shape mismatch: layer {producer + 1} gives a tensor of shape {before.output_shape} "
                        f"but layer {index + 1} expects {wanted}{which}"
                    )
        if input_size is None:
            raise InputError("no node reads the network's input")
        object.__setattr__(self, "_input_size", input_size)

    @property
    def is_chain(self) -> bool:
        """Each node reads the one before it (every network NNet and the original reader held)."""
        return self.wiring == chain_wiring(len(self.layers))

    def producers(self, index: int) -> tuple[int, ...]:
        """The nodes node `index` reads, in order (`NETWORK_INPUT` for the network's input)."""
        return self.wiring[index]

    def consumers(self) -> tuple[tuple[int, ...], ...]:
        """Per node, the nodes that read its output (the last node's: none)."""
        readers: list[list[int]] = [[] for _ in self.layers]
        for index, producers in enumerate(self.wiring):
            for producer in producers:
                if producer != NETWORK_INPUT:
                    readers[producer].append(index)
        return tuple(tuple(r) for r in readers)

    @property
    def n_inputs(self) -> int:
        return self._input_size  # type: ignore[attr-defined]

    @property
    def n_outputs(self) -> int:
        return self.layers[-1].n_out

    @property
    def sizes(self) -> tuple[int, ...]:
        return (self.n_inputs,) + tuple(layer.n_out for layer in self.layers)

    @property
    def is_dense(self) -> bool:
        """A chain of dense layers only (what NNet files and the balanced MAC layout can express)."""
        return self.is_chain and all(operator_of(layer).is_dense for layer in self.layers)

    def digest(self) -> str:
        """A SHA-256 of the weights, biases, activations, geometry, normalisation and quantization
        parameters (hex, 16 chars). Generated C records it, so a file can be traced back to the
        exact network. Dense-only networks hash as they always did."""
        sha = hashlib.sha256()
        if not self.is_chain:  # (chains hash as they always did)
            sha.update(repr(self.wiring).encode())
        for layer in self.layers:
            if not operator_of(layer).is_dense:
                sha.update(layer.describe().encode())
            sha.update(layer.activation.value.encode())
            for name in ("weights", "bias"):
                if hasattr(layer, name):
                    sha.update(np.ascontiguousarray(getattr(layer, name)).tobytes())
        for norm in (self.input_norm, self.output_norm):
            if norm is not None:
                for name in norm.__slots__:
                    sha.update(np.ascontiguousarray(getattr(norm, name)).tobytes())
        if self.quantization is not None:
            self.quantization.update_digest(sha)
        return sha.hexdigest()[:16]

    def default_input_box(self) -> tuple[np.ndarray, np.ndarray]:
        """The normalised input domain: NNet min/max when known, else [0, 1] per input."""
        if (
            self.input_norm is not None
            and np.all(np.isfinite(self.input_norm.minimum))
            and np.all(np.isfinite(self.input_norm.maximum))
        ):
            return self.input_norm.normalised_domain()
        return np.zeros(self.n_inputs), np.ones(self.n_inputs)
