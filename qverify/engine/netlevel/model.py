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

from qverify.engine.netlevel.activations import NetActivation, Stairs
from qverify.engine.netlevel.lookup import lut_staircase, monotone
from qverify.engine.netlevel.operations import (
    LinearOperation,
)
from qverify.engine.netlevel.query import Arithmetic, NetworkQuery
from qverify.engine.netlevel.roundoff import TINY, gamma
from qverify.engine.netlevel.staircase import Staircase
from qverify.errors import UnsupportedError
from qverify.network import (
    NETWORK_INPUT,
    Activation,
)
from qverify.network.operators import operator_of
from qverify.quant import FixedFormat, FloatFormat, Overflow, QuantizedLayer, QuantizedNetwork, Rounding

_UNIT_ROUNDOFF = {np.float16: 2.0**-11, np.float32: 2.0**-24, np.float64: 2.0**-53}
_ETA = {np.float16: 2.0**-25, np.float32: 2.0**-150, np.float64: 2.0**-1075}


def unsupported_reason(query: NetworkQuery) -> str | None:
    """Why the network-level strategy cannot decide this query (None when it can)."""
    qnet = query.qnet
    if qnet.is_int8 and query.arithmetic is Arithmetic.REAL:
        return "netlevel: int8 networks have no real-arithmetic reading"
    for index, layer in enumerate(qnet.layers, start=1):
        try:
            operator_of(layer.source)  # (every kind an operator class describes has its statement)
        except UnsupportedError:
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

    def split(self, index: int, lam: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Coefficients on node `index`'s input (last axis) as its producers' parts, in order: what
        `gather` joined, taken apart. Every backward walk (back-substitution, its estimates, the
        attack's gradients) sends a node's coefficients to its producers here, and each producer
        read by several consumers sums their parts before its own turn (auto_LiRPA's order)."""
        producers = self.qnet.wiring[index]
        if len(producers) == 1:
            return [(producers[0], lam)]
        parts, start = [], 0
        for producer, width in zip(producers, self.input_widths(index)):
            parts.append((producer, lam[..., start : start + width]))
            start += width
        return parts

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
    layers = tuple(
        operator_of(layer.source).net_layer(layer, unit if unit else 1.0, tables) for layer in qnet.layers
    )
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
    values with scale 1), and the bias of every neuron (the node's operator, `qverify.operators`:
    a dense matrix, a convolution's taps, an average pool's windows with each neuron's reciprocal)."""
    return operator_of(layer.source).linear_operation(layer, scale)


def _int8_model(qnet: QuantizedNetwork) -> NetModel:
    """int8: integer statements with no error term (the module docstring), unit 1, no overflow."""
    return NetModel(
        qnet=qnet,
        layers=tuple(operator_of(layer.source).int8_net_layer(layer) for layer in qnet.layers),
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
