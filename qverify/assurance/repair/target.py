"""The layer to repair in one quantized implementation: what the MILP needs of it, and the
repaired network once its integer changes are known.

Supported: dense layers of fixed-point implementations (`<k,l>`, any rounding and overflow mode;
wide accumulation, or per-operation rounding in the sequential layout) and of int8 models. The changes live in the format's own integer domain
-- fixed-point words of weights and biases, int8 weights in [-127, 127] and int32 biases -- so the
repaired network is exactly representable: a fixed-point repair is written as the float network
whose repaired layer holds word / 2^l (which quantizes back to exactly those words), an int8 repair
as the same model with other int8/int32 initializers. Float formats (float, double, half) are
refused: their "integer domain" would be ulp steps of each weight, whose effect on a product
depends on the exponents (docs/repair.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from qverify.assurance.implementations import Implementation
from qverify.assurance.repair.milp import LayerData
from qverify.assurance.repair.readout import Readout, int8_readout, per_op_readout, wide_readout
from qverify.errors import InputError, InternalError, UnsupportedError
from qverify.network import AffineQuantization, Dense, MacQuant, Network
from qverify.quant import (
    Accumulation,
    FixedFormat,
    Int8Format,
    Layout,
    QuantizedLayer,
    Rounding,
    mult,
    round_shift,
)
from qverify.quant.affine import INT32_MAX, INT32_MIN, apply_thresholds
from qverify.quant.fixed import add, apply_overflow
from qverify.quant.simulate import SimulationResult

INT8_WEIGHT_LIMIT = 127  # symmetric int8 weights, as onnxruntime's quantizer writes them


@dataclass(frozen=True, slots=True, eq=False)
class RepairTarget:
    """Layer `index` (0-based) of a quantized implementation, checked repairable."""

    implementation: Implementation
    index: int

    @property
    def qlayer(self) -> QuantizedLayer:
        return self.implementation.qnet.layers[self.index]  # type: ignore[union-attr]

    @property
    def is_output(self) -> bool:
        return self.index == len(self.implementation.qnet.layers) - 1  # type: ignore[union-attr]

    @property
    def is_int8(self) -> bool:
        return self.implementation.qnet.is_int8  # type: ignore[union-attr]

    @property
    def fixed(self) -> FixedFormat:
        return self.implementation.qnet.number  # type: ignore[union-attr,return-value]

    @property
    def n_neurons(self) -> int:
        return self.qlayer.n_out

    @property
    def zero(self) -> int:
        """The output value meaning 0: the output zero point (int8) or the word 0."""
        return self.qlayer.int8.quant.output.zero_point if self.is_int8 else 0  # type: ignore[union-attr]

    def describe(self) -> str:
        role = "the output layer" if self.is_output else "a hidden layer"
        return f"layer {self.index + 1} ({self.qlayer.source.describe()}, {role})"  # type: ignore[union-attr]


def make_target(implementation: Implementation, layer: int | None) -> RepairTarget:
    """Check the implementation and the 1-based layer number (None: the output layer).

    :raises InputError: a layer number out of range.
    :raises UnsupportedError: a float format, or a layer that is not dense, or an output layer
        whose activation is not the identity (fixed point).
    """
    qnet = implementation.qnet
    if qnet is None or qnet.is_float:
        raise UnsupportedError(
            f"repair changes weights in a fixed-point or int8 implementation; {implementation.label} is a "
            "float format (see docs/repair.md)"
        )
    count = len(qnet.layers)
    number = count if layer is None else layer
    if not 1 <= number <= count:
        raise InputError(f"--layer {layer}: out of range (the network has layers 1..{count})")
    target = RepairTarget(implementation, number - 1)
    qlayer = target.qlayer
    if not qlayer.is_dense:
        raise UnsupportedError(
            f"layer {number} is a {qlayer.source.describe()}: repair changes dense layers only"  # type: ignore[union-attr]
        )
    if target.is_int8 and qlayer.int8.paired is not None:  # type: ignore[union-attr]
        raise UnsupportedError(
            f"layer {number}: under int8-x86 its pair sums can saturate at int16, and repair's MILP models "
            "exact sums; repair the exact int8 semantics (--format int8), another layer (--layer), or a "
            "model quantized with --reduce-range"
        )
    options = qnet.options
    if qnet.is_fixed and options.accumulation is Accumulation.PER_OP and options.layout is Layout.BALANCED:
        raise UnsupportedError(
            "repair of per-op fixed point needs the sequential layout (its partial sums are encoded); "
            "use --layout sequential or --accumulate wide"
        )
    if not target.is_int8 and target.is_output and qlayer.activation.value != "identity":
        raise UnsupportedError(
            f"layer {number} (the output layer) has a {qlayer.activation.value} activation: label repair "
            "needs linear outputs"
        )
    return target


def layer_inputs(target: RepairTarget, inputs: np.ndarray, simulation: SimulationResult) -> np.ndarray:
    """The values entering the layer on each sample (words or codes), from the simulator's trace:
    its producers' outputs (the input, for a first layer) joined in the wiring's order."""
    qnet = target.implementation.qnet
    posts = [layer.post for layer in simulation.layers]
    return np.asarray(qnet.node_inputs(target.index, np.asarray(inputs), posts), dtype=np.int64)  # type: ignore[union-attr]


def layer_outputs(target: RepairTarget, simulation: SimulationResult) -> np.ndarray:
    """The layer's values before its activation (words; int8: the codes, ReLU fused)."""
    return np.asarray(simulation.layers[target.index].pre, dtype=np.int64)


def quantized_activity(target: RepairTarget, simulation: SimulationResult) -> np.ndarray:
    """Activation status per sample and neuron: pre-activation > 0 (int8: code > output zero point)."""
    return layer_outputs(target, simulation) > target.zero


def _bias_span(target: RepairTarget) -> np.ndarray:
    """int8: per neuron, the accumulator span of its requantization table (a larger bias change
    only saturates): the largest useful bias change."""
    table = target.qlayer.int8.table  # type: ignore[union-attr]
    rows = table if table.shape[0] > 1 else np.broadcast_to(table, (target.n_neurons, table.shape[1]))
    spans = []
    for row in rows:
        finite = row[(row > INT32_MIN) & (row < INT32_MAX)]
        spans.append(int(finite.max() - finite.min()) + 1 if finite.size else 1 << 16)
    return np.array(spans, dtype=np.int64)


def layer_data(
    target: RepairTarget,
    x: np.ndarray,
    outputs: np.ndarray,
    chosen: np.ndarray,
    max_delta: int | None,
) -> LayerData:
    """The MILP's view of the layer for tests with layer inputs `x` and outputs `outputs` (as the
    simulator computed them), restricted to the `chosen` neurons."""
    chosen = np.asarray(chosen, dtype=np.int64)
    if target.is_int8:
        return _int8_data(target, x, outputs, chosen, max_delta)
    return _fixed_data(target, x, outputs, chosen, max_delta)


def _fixed_data(
    target: RepairTarget, x: np.ndarray, outputs: np.ndarray, chosen: np.ndarray, max_delta: int | None
) -> LayerData:
    fmt = target.fixed
    qlayer, qnet = target.qlayer, target.implementation.qnet
    weights = qlayer.weights.astype(np.int64)[chosen]
    bias = qlayer.bias.astype(np.int64)[chosen]
    limit = (fmt.max_q - fmt.min_q) if max_delta is None else int(max_delta)
    w_lo, w_hi = np.maximum(fmt.min_q - weights, -limit), np.minimum(fmt.max_q - weights, limit)
    b_lo, b_hi = np.maximum(fmt.min_q - bias, -limit), np.minimum(fmt.max_q - bias, limit)
    cost_w, cost_b = np.ones(weights.shape), np.ones(bias.shape)
    scale = fmt.scale
    if qnet.options.accumulation is Accumulation.WIDE:
        exact = bias[None, :] * scale + x @ weights.T
        words, _ = apply_overflow(round_shift(exact, fmt.frac_bits, fmt.rounding), fmt)
        _check(words, outputs[:, chosen], "fixed-point wide sums")
        readout: Readout = wide_readout(fmt)
        return LayerData(x, exact, scale, (readout,) * chosen.size, w_lo, w_hi, b_lo, b_hi, cost_w, cost_b)
    # no changed product may leave the word range on an encoded test: |w'| max|x| <= max_q 2^l
    largest_input = np.maximum(np.abs(x).max(axis=0), 1)
    w_limit = (fmt.max_q * scale) // largest_input
    w_lo, w_hi = np.maximum(w_lo, -w_limit[None, :] - weights), np.minimum(w_hi, w_limit[None, :] - weights)
    w_lo, w_hi = np.minimum(w_lo, 0), np.maximum(w_hi, 0)
    products, _ = mult(weights[None, :, :], x[:, None, :], fmt)
    error = products * scale - weights[None, :, :] * x[:, None, :]
    partials = np.empty((x.shape[0], chosen.size, x.shape[1] + 1), dtype=np.int64)
    partials[:, :, 0] = bias[None, :]
    for i in range(x.shape[1]):
        partials[:, :, i + 1], _ = add(partials[:, :, i], products[:, :, i], fmt)
    _check(partials[:, :, -1], outputs[:, chosen], "fixed-point per-op sums")
    if fmt.frac_bits == 0:
        error_range = (0, 0)
    elif fmt.rounding is Rounding.NEAREST:
        error_range = (-(scale // 2), scale // 2)
    else:
        error_range = (-(scale - 1), 0)
    base = outputs[:, chosen].astype(np.int64) * scale
    readout = per_op_readout(fmt)
    return LayerData(
        x,
        base,
        scale,
        (readout,) * chosen.size,
        w_lo,
        w_hi,
        b_lo,
        b_hi,
        cost_w,
        cost_b,
        error,
        error_range,
        partials * scale,
        (fmt.min_q, fmt.max_q),
    )


def _int8_data(
    target: RepairTarget, x: np.ndarray, outputs: np.ndarray, chosen: np.ndarray, max_delta: int | None
) -> LayerData:
    qlayer, qnet = target.qlayer, target.implementation.qnet
    tables = qlayer.int8
    quant: MacQuant = tables.quant
    centred = x - tables.input_zero
    weights = quant.weights.astype(np.int64)[chosen]
    bias = quant.bias.astype(np.int64)[chosen]
    acc = bias[None, :] + centred @ weights.T
    table = tables.table if tables.table.shape[0] == 1 else tables.table[chosen]
    codes = np.column_stack(
        [
            apply_thresholds(acc[:, [k]], table[[0 if table.shape[0] == 1 else k]], tables.code.qmin)[:, 0]
            for k in range(chosen.size)
        ]
    )
    _check(codes, outputs[:, chosen], "int8 accumulators")
    limit = 2 * INT8_WEIGHT_LIMIT if max_delta is None else int(max_delta)
    w_lo = np.maximum(-INT8_WEIGHT_LIMIT - weights, -limit)
    w_hi = np.minimum(INT8_WEIGHT_LIMIT - weights, limit)
    span = _bias_span(target)[chosen]
    b_lo = np.maximum(INT32_MIN + 1 - bias, -span)
    b_hi = np.minimum(INT32_MAX - 1 - bias, span)
    scales = quant.channel_scales()[chosen]
    smallest = float(quant.channel_scales().min())
    cost_w = np.broadcast_to((scales / smallest)[:, None], weights.shape).astype(np.float64)
    cost_b = scales * quant.input.scale / smallest
    spread = max(tables.input_zero - quant.input.code.qmin, quant.input.code.qmax - tables.input_zero)
    reach = np.maximum(np.abs(w_lo), np.abs(w_hi)).sum(axis=1) * spread + np.maximum(np.abs(b_lo), b_hi)
    readouts = tuple(
        int8_readout(
            quant,
            qnet.number.requant,  # type: ignore[union-attr]
            int(neuron),
            int(tables.acc_lo[neuron] - reach[k]),
            int(tables.acc_hi[neuron] + reach[k]),
        )
        for k, neuron in enumerate(chosen)
    )
    return LayerData(centred, acc, 1, readouts, w_lo, w_hi, b_lo, b_hi, cost_w, cost_b)


def _check(ours: np.ndarray, simulated: np.ndarray, what: str) -> None:
    if not np.array_equal(ours, simulated):
        raise InternalError(f"repair: {what} differ from the simulator's layer values")


# ---------------------------------------------------------------------------------- the repaired network


def repaired_network(
    target: RepairTarget, chosen: np.ndarray, weight_delta: np.ndarray, bias_delta: np.ndarray
) -> Network:
    """The network with the changes applied: for fixed point the float network whose repaired layer
    holds the new words / 2^l (exact in float64), for int8 the model with new integers (and its
    layers' dequantized weights updated to match)."""
    net = target.implementation.network
    qlayer = target.qlayer
    weights = np.array(qlayer.weights if not target.is_int8 else qlayer.int8.quant.weights, dtype=np.int64)  # type: ignore[union-attr]
    bias = np.array(qlayer.bias if not target.is_int8 else qlayer.int8.quant.bias, dtype=np.int64)  # type: ignore[union-attr]
    weights[chosen] += weight_delta
    bias[chosen] += bias_delta
    layers = list(net.layers)
    source: Dense = net.layers[target.index]  # type: ignore[assignment]
    if not target.is_int8:
        scale = float(target.fixed.scale)
        layers[target.index] = Dense(weights / scale, bias / scale, source.activation)
        return replace(net, layers=tuple(layers), name=f"{net.name}-repaired")
    quant: MacQuant = qlayer.int8.quant  # type: ignore[union-attr]
    if np.any(np.abs(weights) > INT8_WEIGHT_LIMIT) or np.any(bias < INT32_MIN) or np.any(bias > INT32_MAX):
        raise InternalError("repair: a changed int8 weight or int32 bias is out of range")
    new_quant = replace(quant, weights=weights, bias=bias)
    scales = quant.channel_scales().astype(np.float32)
    float_weights = (weights.astype(np.float32) * scales[:, None]).astype(np.float64)
    bias_scales = (np.float32(quant.input.scale) * scales).astype(np.float32)
    float_bias = (bias.astype(np.float32) * bias_scales).astype(np.float64)
    layers[target.index] = Dense(float_weights, float_bias, source.activation)
    quantization: AffineQuantization = net.quantization  # type: ignore[assignment]
    quants = list(quantization.layers)
    quants[target.index] = new_quant
    return replace(
        net,
        layers=tuple(layers),
        quantization=replace(quantization, layers=tuple(quants)),
        name=f"{net.name}-repaired",
    )


def check_format_supported(label: str, number: object) -> None:
    """Refuse float formats before any work (the same message as `make_target`)."""
    if not isinstance(number, (FixedFormat, Int8Format)):
        raise UnsupportedError(
            f"repair changes weights in a fixed-point or int8 implementation; {label} is a float format "
            "(see docs/repair.md)"
        )
