"""The bit-exact simulator: the Python twin of the generated C (numpy, vectorised over a batch).

For fixed-point networks every value is an int64 word and every operation is the one of
`qverify.quant.fixed`; for float networks every operation is done in the C type (float32 or
float64), one rounding per C operation, in the C's order (no fused multiply-add).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.errors import InputError
from qverify.network import Activation
from qverify.quant.fixed import FixedFormat, Overflow, add, apply_overflow, mult, round_shift
from qverify.quant.floatfmt import FloatFormat
from qverify.quant.lut import lut_fixed, lut_float
from qverify.quant.mac import reduce_terms
from qverify.quant.network import Accumulation, Layout, QuantizedLayer, QuantizedNetwork

NO_OVERFLOW = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True, eq=False)
class LayerTrace:
    """One layer's values for a batch: `pre` after the accumulation, `post` after the activation."""

    pre: np.ndarray
    post: np.ndarray


@dataclass(frozen=True, slots=True, eq=False)
class SimulationResult:
    """Outputs for a batch, and where each sample first overflowed (in any overflow mode).

    Under `detect` the C stops at the first overflow (its replay prints OVERFLOW): `detected` marks
    those samples, whose outputs are then meaningless.
    """

    outputs: np.ndarray
    overflow_site: np.ndarray  # per sample: global neuron number of the first overflow, or NO_OVERFLOW
    layers: tuple[LayerTrace, ...]
    detect_mode: bool = False

    @property
    def overflowed(self) -> np.ndarray:
        return self.overflow_site != NO_OVERFLOW

    @property
    def detected(self) -> np.ndarray:
        return self.overflowed if self.detect_mode else np.zeros_like(self.overflowed)


class _OverflowLog:
    """Keeps, per sample, the smallest global neuron number at which an overflow happened."""

    def __init__(self, batch: int) -> None:
        self.first = np.full(batch, NO_OVERFLOW, dtype=np.int64)

    def record(self, overflowed: np.ndarray, neuron_offset: int) -> None:
        overflowed = np.asarray(overflowed)
        if not overflowed.any():
            return
        neurons = np.where(overflowed, np.arange(overflowed.shape[-1]) + neuron_offset, NO_OVERFLOW)
        self.first = np.minimum(self.first, neurons.reshape(overflowed.shape[0], -1).min(axis=1))


def _fixed_accumulate(
    layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork, log: _OverflowLog, offset: int
) -> np.ndarray:
    fmt: FixedFormat = qnet.number  # type: ignore[assignment]
    weights = layer.weights.astype(np.int64)
    bias = np.broadcast_to(layer.bias.astype(np.int64), (x.shape[0], layer.n_out))
    if qnet.options.accumulation is Accumulation.WIDE:
        exact = bias * fmt.scale + x @ weights.T
        acc, overflowed = apply_overflow(round_shift(exact, fmt.frac_bits, fmt.rounding), fmt)
        log.record(overflowed, offset)
        return acc

    def product(i: int) -> np.ndarray:
        words, overflowed = mult(weights[None, :, i], x[:, i, None], fmt)
        log.record(overflowed, offset)
        return words

    def plus(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        words, overflowed = add(left, right, fmt)
        log.record(overflowed, offset)
        return words

    return reduce_terms(layer.n_in, bias, product, plus, qnet.options.layout is Layout.BALANCED)


def _float_accumulate(
    layer: QuantizedLayer, x: np.ndarray, number: FloatFormat, layout: Layout
) -> np.ndarray:
    dtype = number.dtype
    weights = layer.weights.astype(dtype)
    bias = np.broadcast_to(layer.bias.astype(dtype), (x.shape[0], layer.n_out))
    return reduce_terms(
        layer.n_in,
        bias,
        lambda i: (weights[None, :, i] * x[:, i, None]).astype(dtype),
        lambda a, b: (a + b).astype(dtype),
        layout is Layout.BALANCED,
    )


def _activate(qnet: QuantizedNetwork, activation: Activation, values: np.ndarray) -> np.ndarray:
    if activation is Activation.RELU:
        return np.where(values < 0, np.zeros_like(values), values)
    if activation is Activation.IDENTITY:
        return values
    lut = qnet.lut_for(activation)
    if qnet.is_fixed:
        return lut_fixed(lut, values)
    return lut_float(lut, values, qnet.number)  # type: ignore[arg-type]


def _check_inputs(qnet: QuantizedNetwork, x: np.ndarray) -> np.ndarray:
    x = np.atleast_2d(np.asarray(x))
    if x.shape[1] != qnet.n_inputs:
        raise InputError(f"expected {qnet.n_inputs} inputs per sample, got {x.shape[1]}")
    if not qnet.is_fixed:
        return x.astype(qnet.number.dtype)  # type: ignore[union-attr]
    fmt: FixedFormat = qnet.number  # type: ignore[assignment]
    words = x.astype(np.int64)
    if np.any(words != x) or np.any(words < fmt.min_q) or np.any(words > fmt.max_q):
        raise InputError(f"input words must be integers in [{fmt.min_q}, {fmt.max_q}] for {fmt}")
    return words


def simulate(qnet: QuantizedNetwork, x: np.ndarray, trace: bool = False) -> SimulationResult:
    """Run the implemented network on a batch of inputs (words for fixed, values for float).

    x: shape (batch, n_inputs) (or (n_inputs,)). Returns outputs of shape (batch, n_outputs): int64
    words or float values, exactly what the C's replay main prints (with `--raw` for words).
    """
    values = _check_inputs(qnet, x)
    log = _OverflowLog(values.shape[0])
    traces = []
    offset = 0
    for layer in qnet.layers:
        if qnet.is_fixed:
            pre = _fixed_accumulate(layer, values, qnet, log, offset)
        else:
            pre = _float_accumulate(layer, values, qnet.number, qnet.options.layout)  # type: ignore[arg-type]
        values = _activate(qnet, layer.activation, pre)
        if trace:
            traces.append(LayerTrace(pre=pre, post=values))
        offset += layer.n_out
    detect_mode = qnet.is_fixed and qnet.number.overflow is Overflow.DETECT  # type: ignore[union-attr]
    return SimulationResult(
        outputs=values, overflow_site=log.first, layers=tuple(traces), detect_mode=detect_mode
    )


def neuron_name(qnet: QuantizedNetwork, site: int) -> str:
    """A global neuron number (as in `overflow_site`) as `layer L, neuron J` (1-based layers)."""
    for index, layer in enumerate(qnet.layers, start=1):
        if site < layer.n_out:
            return f"layer {index}, neuron {site}"
        site -= layer.n_out
    raise IndexError(site)
