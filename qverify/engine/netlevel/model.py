"""Network level: the network of a `NetworkQuery` as real-valued layers plus what the arithmetic adds
to them.

Every analysis of the network-level strategy reads the implemented network through one statement
per neuron, in normalised real units (words * 2^-l, the float values):

    z = W h + b + e,    e in [err_lo, err_hi],    h = f(z)

with W h a layer's linear operation (`operations`: the products the analyses need, whatever the
layer's structure) and f its activation (`activations`: ReLU, identity, a staircase),
W, b the implementation's constants read as reals (exact in float64: fixed-point words below
2^32 and float/double/half values are all float64 numbers) and e the rounding of the C:

- REAL arithmetic: e = 0.
- fixed point (`qverify.invariants.symbolic`'s statement): when no partial sum of the neuron can
  leave the word range in the region, the C computes acc = b + sum R(w_i h_i) with exact additions,
  so e in n * [d_lo, d_hi] * 2^-l, n the neuron's non-zero weights (a zero weight's product is an
  exact 0), [d_lo, d_hi] one rounding's error in words: [-1/2, 1/2] nearest, [-(1 - 2^-l), 0]
  floor; wide accumulation rounds once: [d_lo, d_hi] * 2^-l. A neuron whose sums may leave the
  range has no such relation: it is a free value in its interval (`free`), and under
  `--overflow detect` an execution that overflows is itself a violation.
- IEEE float (any order of additions): |e| <= gamma_(n+1) (|b| + sum |w_i| max|h_i|) + 2 n eta,
  gamma_k = k u / (1 - k u), u the unit roundoff, eta half the smallest subnormal, provided nothing
  overflows (checked on the magnitude bound).

- int8: the statement is exact, z = acc = W x + (bias - W z_in) on the input codes x (integers, the
  int32 accumulator cannot overflow: `accumulator_bounds`), e = 0, and the activation is the
  neuron's requantization staircase h = code(acc) (`staircase.Staircase`; every layer has one, the
  last included: the outputs are codes). The model's unit is 1 (codes and accumulators are
  integers: bounds settle to whole numbers as fixed point's words do); the unsafe set is read on
  the output codes (`attack.atom_forms` rewrites the atoms over (code - zero) * scale).

What the network level does not read is refused with a reason (`unsupported_reason`) so that the
caller falls back to the scalar path: activations other than ReLU, ReLU6, identity and monotone
sigmoid/tanh tables, int8 in real arithmetic, int8-x86's pair-saturating sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.activations import Clamp, Identity, MaxPool, NetActivation, Relu, Stairs
from qverify.engine.netlevel.lookup import lut_staircase, monotone
from qverify.engine.netlevel.operations import (
    AveragePoolOperation,
    DenseOperation,
    IdentityOperation,
    LinearOperation,
    PermuteOperation,
    SparseOperation,
    SumOperation,
)
from qverify.engine.netlevel.query import Arithmetic, NetworkQuery
from qverify.engine.netlevel.roundoff import TINY, gamma
from qverify.engine.netlevel.staircase import Staircase
from qverify.network import (
    NETWORK_INPUT,
    Activation,
    Add,
    AveragePool2D,
    Concat,
    Conv2D,
    Dense,
    MaxPool2D,
    Permute,
)
from qverify.quant import FixedFormat, FloatFormat, Overflow, QuantizedLayer, QuantizedNetwork, Rounding

_UNIT_ROUNDOFF = {np.float16: 2.0**-11, np.float32: 2.0**-24, np.float64: 2.0**-53}
_ETA = {np.float16: 2.0**-25, np.float32: 2.0**-150, np.float64: 2.0**-1075}


def unsupported_reason(query: NetworkQuery) -> str | None:
    """Why the network-level strategy cannot decide this query (None when it can)."""
    qnet = query.qnet
    if qnet.is_int8 and query.arithmetic is Arithmetic.REAL:
        return "netlevel: int8 networks have no real-arithmetic reading"
    for index, layer in enumerate(qnet.layers, start=1):
        supported = (Dense, Conv2D, MaxPool2D) if qnet.is_int8 else (Dense, Conv2D, AveragePool2D, MaxPool2D)
        supported = (*supported, Add, Concat, Permute)
        if not isinstance(layer.source, supported):
            return f"netlevel: layer {index} ({layer.source.describe()}): not supported"
        activation = layer.activation
        if activation not in (
            Activation.RELU,
            Activation.RELU6,
            Activation.IDENTITY,
            Activation.SIGMOID,
            Activation.TANH,
        ):
            return f"netlevel: layer {index}: {activation.value} activation not supported"
        if activation in (Activation.SIGMOID, Activation.TANH) and not monotone(qnet.lut_for(activation)):
            return f"netlevel: layer {index}: the {activation.value} table is not monotone"
        if layer.int8 is not None and layer.int8.paired is not None:
            return f"netlevel: layer {index}: int8-x86 pair-saturating sums not supported (the accumulator is not exact)"
    return None


@dataclass(frozen=True, slots=True, eq=False)
class NetLayer:
    """One layer read as reals: z = W h + bias through its linear operation (`operations`), then
    its activation (`activations`: ReLU, identity, or int8's requantization staircase)."""

    op: LinearOperation
    bias: np.ndarray
    activation: NetActivation

    @property
    def relu(self) -> bool:
        """A ReLU: phases to split on."""
        return self.activation.splittable

    @property
    def stairs(self) -> Staircase | None:
        return self.activation.stairs

    @property
    def relaxed(self) -> bool:
        """Is the activation relaxed by linear bounds (ReLU or staircase), not the identity?"""
        return self.activation.relaxed

    @property
    def weights(self) -> np.ndarray:
        """W as a dense matrix (the LP and the split scores)."""
        return self.op.matrix()

    def post_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The activation's range on pre-activation bounds [lo, hi] (monotone: its two ends)."""
        return self.activation.post_bounds(lo, hi)

    def open_neurons(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Neurons whose activation is not linear on [lo, hi] (unstable ReLUs, non-constant codes)."""
        return self.activation.open_neurons(lo, hi)

    @property
    def n_out(self) -> int:
        """Pre-activation values (z)."""
        return self.op.n_out

    @property
    def n_post(self) -> int:
        """Post-activation values (h: a pool's outputs; z's count otherwise)."""
        return self.activation.outputs(self.op.n_out)

    @property
    def n_in(self) -> int:
        return self.op.n_in


@dataclass(frozen=True, slots=True, eq=False)
class NetModel:
    """The layers, their wiring (`qverify.network.Network.wiring`: node k reads its producers'
    values concatenated) and the arithmetic's error model (see the module docstring)."""

    qnet: QuantizedNetwork
    layers: tuple[NetLayer, ...]
    real: bool
    unit: float  # fixed point: the real value of one word (2^-l); 0 otherwise
    round_lo: float  # fixed point: one rounding's error in real units
    round_hi: float
    wide: bool
    word_max: float  # fixed point: the largest magnitude a partial sum may reach without overflow
    detect: bool
    float_u: float  # IEEE: unit roundoff and eta of the C type
    float_eta: float
    float_max: float

    @property
    def is_fixed(self) -> bool:
        """Integer-valued implementation (fixed-point words, or int8 codes with unit 1)."""
        return self.unit > 0

    @property
    def stepped(self) -> bool:
        """int8: the activations are requantization staircases: no ReLU phases, and the LP/MILP
        only at a high-dimensional root (`lp`'s int8 rows; lookup tables, also staircases, have
        both: `lp`, the search's table splits)."""
        return self.qnet.is_int8

    @property
    def n_inputs(self) -> int:
        return self.qnet.n_inputs

    @property
    def wiring(self) -> tuple[tuple[int, ...], ...]:
        return self.qnet.wiring

    @property
    def is_chain(self) -> bool:
        return self.qnet.source.is_chain

    def producers(self, index: int) -> tuple[int, ...]:
        """The nodes node `index` reads, in order (`NETWORK_INPUT`: the input)."""
        return self.qnet.wiring[index]

    def reads_input_only(self, index: int) -> bool:
        """Does node `index` read nothing but the network's input (its bounds over a box are then
        those of one linear map of the input: back-substitution adds nothing)?"""
        return all(p == NETWORK_INPUT for p in self.qnet.wiring[index])

    def input_widths(self, index: int) -> list[int]:
        """The sizes of node `index`'s producers' values, in order (how its input splits)."""
        return [
            self.n_inputs if p == NETWORK_INPUT else self.layers[p].n_post for p in self.qnet.wiring[index]
        ]

    def consumers(self, index: int) -> tuple[int, ...]:
        """The nodes that read node `index`'s output."""
        return tuple(k for k, producers in enumerate(self.qnet.wiring) if index in producers)

    def gather(self, index: int, x, values: list):
        """Node `index`'s input from the input `x` and the nodes' values (last axis joined)."""
        parts = [x if p == NETWORK_INPUT else values[p] for p in self.qnet.wiring[index]]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)

    def input_reals(self, x: np.ndarray) -> np.ndarray:
        """Implementation inputs (words or float values) as normalised reals (exact in float64)."""
        if self.is_fixed:
            return np.asarray(x, dtype=np.float64) * self.unit
        return np.asarray(x, dtype=np.float64)

    def error_terms(self, index: int, hmax: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(err_lo, err_hi, related) of layer `index` given max |h| of its inputs (one row per box with
        a leading batch axis): the rounding term
        of every neuron, and which neurons have the linear relation at all (the others may overflow:
        they are free values in their interval)."""
        layer = self.layers[index]
        n = layer.n_out
        if self.real or layer.op.exact:  # (an exact operation does no arithmetic)
            zeros = np.zeros(hmax.shape[:-1] + (n,))
            return zeros, zeros, np.ones(zeros.shape, dtype=bool)
        # hmax may carry a leading batch axis: one row of max |h| per box
        slack = 1 + gamma(layer.op.forward_terms + 2)
        magnitude = (np.abs(layer.bias) + layer.op.magnitude(hmax)) * slack + TINY
        # the partial sums' reach (an average pool adds the window before its one product)
        reach = (np.abs(layer.bias) + layer.op.sum_reach(hmax)) * slack + TINY
        if self.is_fixed:
            count = self.rounding_count(index, hmax)
            related = (reach + count * self.unit) * (1 + 1e-9) <= self.word_max
            return count * self.round_lo, count * self.round_hi, related
        terms = layer.op.forward_terms
        bound = gamma(terms + 1, self.float_u) * magnitude + 2 * terms * self.float_eta
        bound = bound * (1 + 1e-9) + TINY
        related = np.isfinite(bound) & (reach * 2 < self.float_max)
        return -bound, bound, related

    def rounding_count(self, index: int, hmax: np.ndarray) -> np.ndarray:
        """Fixed point: how many roundings each neuron's sum of layer `index` carries, given max
        |h| of its inputs (per box with a leading batch axis). The wide sum rounds once; per
        operation every product rounds except those that are exact: by a zero weight, or of an
        input that is exactly zero (max |h| = 0: an inactive ReLU, a zero input), since the
        product's word is then 0 in every rounding mode. (At <16,16> each rounding is up to half a
        word per product: on a 784-256x6 network these terms cost more of the root's margin than
        the relaxation; inactive neurons are a third to a half of a layer.)"""
        layer = self.layers[index]
        if self.wide and not layer.op.exact:
            return np.ones(hmax.shape[:-1] + (layer.n_out,))
        return layer.op.live_products((hmax > 0).astype(np.float64))


def build_model(query: NetworkQuery) -> NetModel:
    """The query's network as `NetModel` (call `unsupported_reason` first)."""
    qnet = query.qnet
    if qnet.is_int8:
        return _int8_model(qnet)
    real = query.arithmetic is Arithmetic.REAL
    number = qnet.number
    unit = round_lo = round_hi = word_max = 0.0
    wide = detect = False
    float_u = float_eta = 0.0
    float_max = float("inf")
    if isinstance(number, FixedFormat):
        unit = 2.0**-number.frac_bits
        if number.rounding is Rounding.NEAREST:
            round_lo, round_hi = -0.5 * unit, 0.5 * unit
        else:
            round_lo, round_hi = -(1.0 - unit) * unit, 0.0
        wide = qnet.options.accumulation.value == "wide"
        word_max = (2.0 ** (number.word_bits - 1) - 1) * unit
        detect = number.overflow is Overflow.DETECT and not real
    elif isinstance(number, FloatFormat):
        dtype = number.dtype
        float_u, float_eta = _UNIT_ROUNDOFF[dtype], _ETA[dtype]
        float_max = float(np.finfo(dtype).max)
    tables = {
        activation: Stairs(lut_staircase(qnet, activation, real))
        for activation in {layer.activation for layer in qnet.layers}
        if activation in (Activation.SIGMOID, Activation.TANH)
    }
    layers = tuple(_layer(layer, unit if unit else 1.0, tables) for layer in qnet.layers)
    return NetModel(
        qnet=qnet,
        layers=layers,
        real=real,
        unit=unit,
        round_lo=round_lo,
        round_hi=round_hi,
        wide=wide,
        word_max=word_max,
        detect=detect,
        float_u=float_u,
        float_eta=float_eta,
        float_max=float_max,
    )


def linear_operation(layer: QuantizedLayer, scale: float) -> tuple[LinearOperation, np.ndarray]:
    """The layer's linear part with its constants read as reals (words * `scale`, or the float
    values with scale 1), and the bias of every neuron: a dense matrix, a convolution's taps, an
    average pool's windows with each neuron's reciprocal."""
    source = layer.source
    if isinstance(source, Dense):
        weights = np.asarray(layer.weights, dtype=np.float64) * scale
        return DenseOperation(weights), np.asarray(layer.bias, dtype=np.float64) * scale
    if isinstance(source, Conv2D):
        taps = source.taps()
        valid = taps.valid
        rows = np.repeat(np.arange(layer.n_out), taps.count)
        values = np.asarray(layer.weights, dtype=np.float64).reshape(-1)[taps.weights[valid]] * scale
        op = SparseOperation.of_taps(rows, taps.inputs[valid], values, layer.n_out, layer.n_in)
        return op, np.asarray(layer.expanded_bias(), dtype=np.float64) * scale
    if isinstance(source, AveragePool2D):
        windows = source.windows()
        rows = np.repeat(np.arange(layer.n_out), windows.count)
        reciprocal = np.asarray(layer.weights, dtype=np.float64) * scale
        op = AveragePoolOperation.of_taps(
            rows, windows.inputs[windows.valid], reciprocal[rows], layer.n_out, layer.n_in
        )
        return op, np.zeros(layer.n_out)
    if isinstance(source, (MaxPool2D, Concat)):
        return IdentityOperation(layer.n_in), np.zeros(layer.n_in)
    if isinstance(source, Add):
        if source.count == 1:  # an activation of its own: z = h
            return IdentityOperation(layer.n_in), np.zeros(layer.n_in)
        return SumOperation.of(source.count, source.size), np.zeros(source.size)
    if isinstance(source, Permute):
        return PermuteOperation(source.order), np.zeros(layer.n_in)
    raise ValueError(f"no linear operation for {source.describe()}")  # type: ignore[union-attr]


def _layer(layer: QuantizedLayer, scale: float, tables: dict[Activation, Stairs]) -> NetLayer:
    op, bias = linear_operation(layer, scale)
    if isinstance(layer.source, MaxPool2D):
        return NetLayer(op, bias, max_pool(layer.source))
    if layer.activation in tables:  # sigmoid / tanh: the C's lookup table as a staircase
        return NetLayer(op, bias, tables[layer.activation])
    if layer.activation is Activation.RELU6:  # clamped at 6, exactly 6 in every format's real units
        return NetLayer(op, bias, Clamp(6.0))
    activation = Relu() if layer.activation is Activation.RELU else Identity()
    return NetLayer(op, bias, activation)


def max_pool(source: MaxPool2D) -> MaxPool:
    """The pool's windows as the activation of an identity layer."""
    windows = source.windows()
    return MaxPool(windows.inputs, windows.valid)


def _int8_join(layer: QuantizedLayer) -> NetLayer:
    """An int8 join on codes (`qverify.quant.join8`): a move or a copy of codes (exact), or its
    staircase: an Add's z = acc = w_1 a + w_2 b on the two inputs' codes, a requantizing Concat's
    z = the code through its input's row."""
    tables = layer.int8
    assert tables is not None
    source = layer.source
    zeros = np.zeros(layer.n_out)
    if isinstance(source, Permute):
        return NetLayer(PermuteOperation(source.order), zeros, Identity())
    if tables.table is None:
        return NetLayer(IdentityOperation(layer.n_in), zeros, Identity())
    code = tables.code
    if isinstance(source, Add):
        op = SumOperation.of(source.count, source.size, layer.weights)
        rows = np.zeros(layer.n_out, dtype=np.int64)
        return NetLayer(op, zeros, Stairs(Staircase.of(tables.table, rows, code.qmin, code.qmax)))
    rows = np.repeat(np.arange(len(source.input_sizes)), source.input_sizes)  # type: ignore[union-attr]
    stairs = Staircase.of(tables.table, rows, code.qmin, code.qmax)
    return NetLayer(IdentityOperation(layer.n_in), zeros, Stairs(stairs))


def _int8_layer(layer: QuantizedLayer) -> NetLayer:
    """z = acc = W x + (bias - z_in sum W) on input codes x (a convolution's sum over its valid taps:
    padding adds nothing), exact integers in float64 (|acc| < 2^31), and the requantization
    staircase of every neuron; a max pool takes the largest code of each window (exact on codes);
    joins: `_int8_join`."""
    tables = layer.int8
    assert tables is not None
    if layer.is_join:
        return _int8_join(layer)
    if isinstance(layer.source, MaxPool2D):
        return NetLayer(IdentityOperation(layer.n_in), np.zeros(layer.n_in), max_pool(layer.source))
    assert tables.table is not None
    op, bias = linear_operation(layer, 1.0)
    weight_sums = layer.tap_weights().astype(np.int64).sum(axis=1)
    bias = np.asarray(layer.expanded_bias(), dtype=np.int64) - weight_sums * tables.input_zero
    rows = tables.table
    neuron_rows = layer.source.channel_of() if rows.shape[0] > 1 else np.zeros(layer.n_out, dtype=np.int64)  # type: ignore[union-attr]
    return NetLayer(
        op,
        bias.astype(np.float64),
        Stairs(Staircase.of(rows, neuron_rows, tables.code.qmin, tables.code.qmax)),
    )


def _int8_model(qnet: QuantizedNetwork) -> NetModel:
    """int8: integer statements with no error term (the module docstring), unit 1, no overflow."""
    return NetModel(
        qnet=qnet,
        layers=tuple(_int8_layer(layer) for layer in qnet.layers),
        real=False,
        unit=1.0,
        round_lo=0.0,
        round_hi=0.0,
        wide=False,
        word_max=float("inf"),  # int32 accumulators never overflow (`accumulator_bounds`)
        detect=False,
        float_u=0.0,
        float_eta=0.0,
        float_max=float("inf"),
    )
