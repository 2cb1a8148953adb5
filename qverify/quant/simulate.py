"""The bit-exact simulator: the Python twin of the generated C (numpy, vectorised over a batch).

For fixed-point networks every value is an int64 word and every operation is the one of
`qverify.quant.fixed`; for float networks every operation is done in the C type (float32, float64
or float16), one rounding per C operation, in the C's order (no fused multiply-add). For int8
networks values are codes, accumulators exact integers and requantization the layer's threshold
table (`qverify.quant.affine`). MAC layers add their products in the C's order (`Taps`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.errors import InputError
from qverify.network import Activation
from qverify.network.operators import operator_of
from qverify.quant.affine import apply_thresholds
from qverify.quant.blas8 import blas_dtype
from qverify.quant.fixed import FixedFormat, Overflow, add, apply_overflow, mult, round_shift
from qverify.quant.floatfmt import FloatFormat
from qverify.quant.lut import lut_fixed, lut_float
from qverify.quant.mac import reduce_terms
from qverify.quant.network import Accumulation, Layout, QuantizedLayer, QuantizedNetwork

NO_OVERFLOW = np.iinfo(np.int64).max
# A sequential MAC's slots all at once (`_fixed_sequential`, `_float_sequential`): every product in
# one array, then the running sums by one numpy accumulate along the slots, whose additions run one
# after the other in the slots' order, as the C's loop does (the same words, bit for bit:
# tests/test_simulate_sequential.py). Up to this many products at a time (three arrays of them are
# held), else slot by slot. On ACAS Xu's 50x50 layers and the attack's batch of 1,024 samples the
# slot loop's 300 small numpy calls per layer were most of the exact confirmations' time.
AT_ONCE_PRODUCTS = 1 << 22


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


def tap_inputs(values: np.ndarray, layer: QuantizedLayer) -> tuple[np.ndarray, np.ndarray]:
    """Per product slot t: the inputs x[:, taps.inputs[:, t]] (batch, n_out, width) and validity."""
    taps = layer.source.taps()  # type: ignore[union-attr]
    return values[:, taps.inputs], taps.valid


def fixed_accumulate(
    layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork, log: _OverflowLog, offset: int
) -> np.ndarray:
    fmt: FixedFormat = qnet.number  # type: ignore[assignment]
    bias = np.broadcast_to(layer.expanded_bias().astype(np.int64), (x.shape[0], layer.n_out))
    inputs, valid = tap_inputs(x, layer)
    weights = layer.tap_weights().astype(np.int64)
    if qnet.options.accumulation is Accumulation.WIDE:
        exact = bias * fmt.scale + np.einsum("bjt,jt->bj", inputs, weights)
        acc, overflowed = apply_overflow(round_shift(exact, fmt.frac_bits, fmt.rounding), fmt)
        log.record(overflowed, offset)
        return acc
    if qnet.options.layout is Layout.BALANCED:  # dense layers only (quantize_network checks)
        weights = layer.weights.astype(np.int64)

        def product(i: int) -> np.ndarray:
            words, overflowed = mult(weights[None, :, i], x[:, i, None], fmt)
            log.record(overflowed, offset)
            return words

        def plus(left: np.ndarray, right: np.ndarray) -> np.ndarray:
            words, overflowed = add(left, right, fmt)
            log.record(overflowed, offset)
            return words

        return reduce_terms(layer.n_in, bias, product, plus, True)
    if 0 < inputs.size <= AT_ONCE_PRODUCTS:
        at_once = _fixed_sequential(bias, inputs, valid, weights, fmt)
        if at_once is not None:
            acc, overflowed = at_once
            log.record(overflowed, offset)
            return acc
    acc = bias
    for t in range(weights.shape[1]):
        words, overflowed = mult(weights[None, :, t], inputs[:, :, t], fmt)
        total, overflowed_sum = add(acc, words, fmt)
        log.record((overflowed | overflowed_sum) & valid[None, :, t], offset)
        acc = np.where(valid[None, :, t], total, acc)
    return acc


def _fixed_sequential(
    bias: np.ndarray, inputs: np.ndarray, valid: np.ndarray, weights: np.ndarray, fmt: FixedFormat
) -> tuple[np.ndarray, np.ndarray] | None:
    """The slot loop of `fixed_accumulate` at once: (accumulators, which neurons overflowed), or
    None when a running sum leaves the word range (its saturation or wrap-around depends on the
    order of the steps: the loop then runs). Each product is `mult`'s word, as in the loop; while
    no running sum overflows, every `add` is exact, so the words are the exact running sums."""
    words, overflowed = mult(weights[None], inputs, fmt)
    words = np.where(valid[None], words, 0)  # (an empty slot leaves the sum as it is)
    sums = np.cumsum(words, axis=2)
    sums += bias[:, :, None]
    if sums.min() < fmt.min_q or sums.max() > fmt.max_q:
        return None
    return sums[:, :, -1], (overflowed & valid[None]).any(axis=2)


def float_accumulate(layer: QuantizedLayer, x: np.ndarray, number: FloatFormat, layout: Layout) -> np.ndarray:
    dtype = number.dtype
    bias = np.broadcast_to(layer.expanded_bias().astype(dtype), (x.shape[0], layer.n_out))
    with np.errstate(over="ignore", invalid="ignore"):
        if layout is Layout.BALANCED:  # dense layers only
            weights = layer.weights.astype(dtype)
            return reduce_terms(
                layer.n_in,
                bias,
                lambda i: (weights[None, :, i] * x[:, i, None]).astype(dtype),
                lambda a, b: (a + b).astype(dtype),
                True,
            )
        inputs, valid = tap_inputs(x, layer)
        weights = layer.tap_weights().astype(dtype)
        if 0 < inputs.size <= AT_ONCE_PRODUCTS:
            return _float_sequential(bias, inputs, valid, weights, dtype)
        acc = bias
        for t in range(weights.shape[1]):
            total = (acc + (weights[None, :, t] * inputs[:, :, t]).astype(dtype)).astype(dtype)
            acc = np.where(valid[None, :, t], total, acc)
    return acc


def _float_sequential(
    bias: np.ndarray, inputs: np.ndarray, valid: np.ndarray, weights: np.ndarray, dtype: type[np.floating]
) -> np.ndarray:
    """The slot loop of `float_accumulate` at once: the products rounded to the C type, then
    `np.add.accumulate` in that type from the bias, one rounded addition per slot in the slots'
    order (an accumulate is sequential; only reductions sum pairwise). An empty slot adds -0.0,
    which leaves every value as it is, a zero's sign and a NaN included."""
    products = (weights[None] * inputs).astype(dtype)
    products = np.where(valid[None], products, dtype(-0.0))
    terms = np.concatenate([bias[:, :, None], products], axis=2)
    return np.add.accumulate(terms, axis=2, dtype=dtype)[:, :, -1]


def int8_join_codes(layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
    """An int8 join on a batch of its inputs' codes (concatenated): a copy or a move of codes, or
    its staircase (`qverify.quant.join8`; the join's operator, `qverify.operators`)."""
    return operator_of(layer.source).simulate_int8(layer, codes)


def gathered_int8_codes(layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
    """An int8 MAC layer by its gathered products (batch, n_out, slots) in int64: the general path
    (x86's pair-saturating dense sums; what `blas8` is checked against)."""
    tables = layer.int8
    if tables.paired is not None:  # int8-x86, a dense layer whose pair sums can saturate
        acc = tables.paired.accumulate(layer.weights, codes)
        return apply_thresholds(acc, tables.table, tables.code.qmin)  # type: ignore[arg-type]
    inputs, _ = tap_inputs(codes - tables.input_zero, layer)  # type: ignore[union-attr]
    acc = layer.expanded_bias().astype(np.int64)[None, :] + np.einsum(
        "bjt,jt->bj", inputs, layer.tap_weights().astype(np.int64)
    )
    table = tables.table  # type: ignore[union-attr]
    if table.shape[0] > 1:
        table = table[layer.source.channel_of()]
    return apply_thresholds(acc, table, tables.code.qmin)  # type: ignore[union-attr]


def _activate(qnet: QuantizedNetwork, activation: Activation, values: np.ndarray) -> np.ndarray:
    if activation is Activation.RELU:
        return np.where(values < 0, np.zeros_like(values), values)
    if activation is Activation.RELU6:
        six = np.asarray(qnet.relu6_top, dtype=values.dtype)
        clamped = np.where(values < 0, np.zeros_like(values), values)
        return np.where(clamped > six, six, clamped)
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
    if qnet.is_float:
        return x.astype(qnet.number.dtype)  # type: ignore[union-attr]
    if qnet.is_int8:
        code = qnet.input_quant.code
        low, high, what = code.qmin, code.qmax, f"{code.value} codes"
    else:
        fmt: FixedFormat = qnet.number  # type: ignore[assignment]
        low, high, what = fmt.min_q, fmt.max_q, f"words for {fmt}"
    words = x.astype(np.int64)
    if np.any(words != x) or np.any(words < low) or np.any(words > high):
        raise InputError(f"input {what} must be integers in [{low}, {high}]")
    return words


def simulate(qnet: QuantizedNetwork, x: np.ndarray, trace: bool = False) -> SimulationResult:
    """Run the implemented network on a batch of inputs (words for fixed, values for float, codes
    for int8).

    x: shape (batch, n_inputs) (or (n_inputs,)). Returns outputs of shape (batch, n_outputs): int64
    words or codes, or float values, exactly what the C's replay main prints (with `--raw` for
    words and codes).
    """
    inputs = _check_inputs(qnet, x)
    log = _OverflowLog(inputs.shape[0])
    traces = []
    outputs: list[np.ndarray | None] = []
    offset = 0
    last_reader = _last_readers(qnet)
    for index, layer in enumerate(qnet.layers):
        values = qnet.node_inputs(index, inputs, outputs)  # type: ignore[arg-type]
        for producer in qnet.wiring[index]:
            if not trace and producer >= 0 and last_reader[producer] == index:
                outputs[producer] = None  # read for the last time: its memory goes (a chunk's codes per node)
        operator = operator_of(layer.source)
        if qnet.is_int8:
            pre = values = operator.simulate_int8(layer, values)
        else:
            pre = operator.simulate(layer, values, qnet, log, offset)
            values = _activate(qnet, layer.activation, pre)
        outputs.append(values)
        if trace:
            traces.append(LayerTrace(pre=pre, post=values))
        offset += layer.n_out
    detect_mode = qnet.is_fixed and qnet.number.overflow is Overflow.DETECT  # type: ignore[union-attr]
    return SimulationResult(
        outputs=values, overflow_site=log.first, layers=tuple(traces), detect_mode=detect_mode
    )


def _last_readers(qnet: QuantizedNetwork) -> list[int]:
    """Per node, the last node that reads it (itself when none does: the output)."""
    last = list(range(len(qnet.layers)))
    for index, producers in enumerate(qnet.wiring):
        for producer in producers:
            if producer >= 0:
                last[producer] = max(last[producer], index)
    return last


def bytes_per_sample(qnet: QuantizedNetwork) -> int:
    """About how many bytes `simulate` holds per sample at its peak: a few nodes' values (int64 or
    float) alive at once, and the widest layer's gathered products (three arrays of them) unless
    the layer sums through BLAS (`qverify.quant.blas8`, which blocks its own columns)."""
    widest = max((layer.n_out for layer in qnet.layers), default=1)
    gathered = 0
    for layer in qnet.layers:
        if qnet.is_int8 and blas_dtype(layer) is not None:
            continue
        width = operator_of(layer.source).gathered_width(layer.source)
        gathered = max(gathered, 3 * layer.n_out * width)
    return 8 * (4 * widest + qnet.n_inputs + gathered)


def neuron_name(qnet: QuantizedNetwork, site: int) -> str:
    """A global neuron number (as in `overflow_site`) as `layer L, neuron J` (1-based layers)."""
    for index, layer in enumerate(qnet.layers, start=1):
        if site < layer.n_out:
            return f"layer {index}, neuron {site}"
        site -= layer.n_out
    raise IndexError(site)
