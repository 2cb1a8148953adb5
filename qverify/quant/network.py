"""A network as implemented: number format, MAC order, accumulation, tables, quantised constants.

`QuantizedNetwork` holds everything the generated C depends on; the simulator and codegen both read
it, so they cannot disagree about constants or tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from qverify.errors import InputError, RangeError, UnsupportedError
from qverify.input_limits import check_tensor
from qverify.network import (
    Activation,
    CodeType,
    Dense,
    Layer,
    Network,
    TensorQuant,
    gather_inputs,
)
from qverify.network.operators import operator_of
from qverify.network.qparams import LayerQuant, MacQuant
from qverify.quant.affine import Int8Format, RequantMode
from qverify.quant.code_tables import lookup_table
from qverify.quant.fixed import FixedFormat, quantize_constants
from qverify.quant.floatfmt import FloatFormat
from qverify.quant.lut import LIPSCHITZ, Lut, LutDesign, design_lut
from qverify.quant.x86 import PairedSums
from qverify.vocabulary import Accumulation, Layout

NumberFormat = FixedFormat | FloatFormat | Int8Format
WIDE_ACCUMULATOR_LIMIT = 1 << 62  # |acc| below this leaves room for the rounding offset in int64


@dataclass(frozen=True, slots=True)
class ImplementationOptions:
    """Every choice that changes the implemented arithmetic (not the network)."""

    number: NumberFormat = field(default_factory=lambda: FixedFormat(16, 16))
    accumulation: Accumulation = Accumulation.PER_OP
    layout: Layout = Layout.SEQUENTIAL
    lut: LutDesign = field(default_factory=LutDesign)

    def __post_init__(self) -> None:
        if not isinstance(self.number, FixedFormat) and self.accumulation is Accumulation.WIDE:
            raise InputError("--accumulate wide applies to fixed-point formats only")

    def key(self) -> str:
        """A stable text key (journal entries, file names): e.g. `16.16-nearest-saturate-per-op-sequential-res=2`."""
        number = self.number
        if isinstance(number, FixedFormat):
            arith = f"{number.label}-{number.rounding.value}-{number.overflow.value}"
        else:
            arith = number.label
        return f"{arith}-{self.accumulation.value}-{self.layout.value}-{self.lut.describe()}"


@dataclass(frozen=True, slots=True, eq=False)
class Int8Tables:
    """What an int8 layer needs beyond its integer weights: codes in and out, requantization table.

    `table` has one row of 255 thresholds per output channel (per-channel weights) or a single row
    (per-tensor), see `qverify.quant.affine.thresholds`; pools have none (they work on codes).
    """

    quant: LayerQuant
    table: np.ndarray | None  # int64 (rows, 255)
    acc_lo: np.ndarray | None  # int64 per output channel: static accumulator bounds
    acc_hi: np.ndarray | None
    paired: PairedSums | None = None  # int8-x86: the pair-saturating sum (None: the exact sum)

    @property
    def input_zero(self) -> int:
        return self.quant.input.zero_point

    @property
    def code(self) -> CodeType:
        return self.quant.output.code


@dataclass(frozen=True, slots=True, eq=False)
class QuantizedLayer:
    """One layer's constants in the implementation's number format, and its geometry (`source`).

    MAC layers (dense, convolution): `weights` in the source layer's weight shape ((n_out, n_in)
    for dense, the 4-D kernel for a convolution) and `bias` per output channel: words (fixed),
    values of the float type, or int8 weights and int32 biases (int8). Average pools: `weights`
    holds the reciprocal of each output neuron's divisor in the format (the C multiplies the window's
    sum by it), `bias` is empty. Max pools and joins (`Add`, `Concat`, `Permute`): both empty.
    """

    weights: np.ndarray
    bias: np.ndarray
    activation: Activation
    source: Layer | None = None
    int8: Int8Tables | None = None

    def __post_init__(self) -> None:
        if self.source is None:  # a dense layer given by its matrix (tests, hand-built networks)
            object.__setattr__(self, "source", Dense(self.weights, self.bias, self.activation))

    @property
    def n_in(self) -> int:
        return self.source.n_in  # type: ignore[union-attr]

    @property
    def n_out(self) -> int:
        return self.source.n_out  # type: ignore[union-attr]

    @property
    def is_mac(self) -> bool:
        """Products of weights and inputs summed from a bias (dense, convolution)."""
        return operator_of(self.source).is_mac

    @property
    def is_pool(self) -> bool:
        return operator_of(self.source).is_pool

    @property
    def is_join(self) -> bool:
        """A node that adds, concatenates or moves its inputs (`qverify.network.joins`)."""
        return operator_of(self.source).is_join

    @property
    def is_dense(self) -> bool:
        return operator_of(self.source).is_dense

    @property
    def matrix(self) -> np.ndarray:
        """A MAC layer's quantized weights as a dense (n_out, n_in) matrix (structural zeros for a
        convolution): what the linear analyses read."""
        if self.is_dense:
            return self.weights
        check_tensor(
            (self.n_out, self.n_in),
            self.weights.dtype.itemsize,
            f"{self.source.describe()}: its dense matrix",
        )
        taps = self.source.taps()  # type: ignore[union-attr]
        matrix = np.zeros((self.n_out, self.n_in), dtype=self.weights.dtype)
        valid = taps.valid
        rows = np.repeat(np.arange(self.n_out), taps.count)
        matrix[rows, taps.inputs[valid]] = self.weights.reshape(-1)[taps.weights[valid]]
        return matrix

    def expanded_bias(self) -> np.ndarray:
        """The bias of every output neuron (a convolution's bias repeated over positions)."""
        return operator_of(self.source).expanded_bias(self)

    def tap_weights(self) -> np.ndarray:
        """(n_out, width) quantized weights of each neuron's products in C order (0 past `count`)."""
        taps = self.source.taps()  # type: ignore[union-attr]
        return np.where(taps.valid, self.weights.reshape(-1)[taps.weights], 0).astype(self.weights.dtype)


@dataclass(frozen=True, slots=True, eq=False)
class QuantizedNetwork:
    """A network as the C implements it (fixed point, IEEE float/double/half, or int8 affine)."""

    source: Network
    options: ImplementationOptions
    layers: tuple[QuantizedLayer, ...]
    luts: tuple[Lut, ...]

    @property
    def number(self) -> NumberFormat:
        return self.options.number

    @property
    def is_fixed(self) -> bool:
        return isinstance(self.options.number, FixedFormat)

    @property
    def is_int8(self) -> bool:
        return isinstance(self.options.number, Int8Format)

    @property
    def is_float(self) -> bool:
        return isinstance(self.options.number, FloatFormat)

    @property
    def is_integer(self) -> bool:
        """Integer words everywhere (fixed point or int8 codes): exact integer reasoning applies."""
        return not self.is_float

    @property
    def input_quant(self) -> TensorQuant:
        """int8 only: how real inputs become input codes (the model's first QuantizeLinear)."""
        return self.source.quantization.input  # type: ignore[union-attr]

    @property
    def output_quant(self) -> TensorQuant:
        """int8 only: what the output codes mean (the model's last DequantizeLinear)."""
        return self.source.quantization.output  # type: ignore[union-attr]

    @property
    def n_inputs(self) -> int:
        return self.source.n_inputs

    @property
    def n_outputs(self) -> int:
        return self.layers[-1].n_out

    @property
    def wiring(self) -> tuple[tuple[int, ...], ...]:
        """Per node, the nodes it reads (`qverify.network.Network.wiring`)."""
        return self.source.wiring

    def node_inputs(self, index: int, x: np.ndarray, outputs: list[np.ndarray]) -> np.ndarray:
        """What node `index` reads: its producers' values (`outputs[p]`, or the input `x`) joined
        along the last axis, in order (one producer: its array itself)."""
        return gather_inputs(self.source.wiring, index, x, outputs)

    def output_reals(self, outputs: np.ndarray) -> list[Fraction]:
        """The exact (normalised) real values of one output vector: words * 2^-l, codes
        (y - zero_point) * scale, or the float values."""
        if self.is_fixed:
            return [Fraction(int(v), self.number.scale) for v in outputs]  # type: ignore[union-attr]
        if self.is_int8:
            out = self.output_quant
            return [(int(v) - out.zero_point) * Fraction(out.scale) for v in outputs]
        return [Fraction(float(v)) for v in outputs]

    def input_reals(self, inputs: np.ndarray) -> np.ndarray:
        """Normalised real inputs (float64) the implementation inputs stand for: words * 2^-l, the
        float values, or for int8 codes their DequantizeLinear values (inputs that quantize to them)."""
        if self.is_fixed:
            return np.asarray(inputs, dtype=np.float64) / self.number.scale  # type: ignore[union-attr]
        if self.is_int8:
            return self.input_quant.dequantize(inputs).astype(np.float64)
        return np.asarray(inputs, dtype=np.float64)

    @property
    def relu6_top(self) -> int | float:
        """ReLU6's upper clamp, 6, in the implementation's units (a word for fixed point)."""
        if self.is_fixed:
            return 6 * self.number.scale  # type: ignore[union-attr]
        return 6.0

    def lut_for(self, activation: Activation) -> Lut:
        for lut in self.luts:
            if lut.activation is activation:
                return lut
        raise KeyError(activation)

    @property
    def lut_error_bound(self) -> float:
        """The largest LUT error bound of the network's tables (0 without tables)."""
        return max((lut.error_bound for lut in self.luts), default=0.0)


def quantize_values(values: np.ndarray, number: NumberFormat, what: str) -> np.ndarray:
    """Constants in a fixed-point format (words) or a float format (values of the type)."""
    if isinstance(number, FloatFormat):
        return number.round(values)
    return quantize_constants(values, number, what)  # type: ignore[arg-type]


def check_wide_accumulator(layers: tuple[QuantizedLayer, ...], number: FixedFormat) -> None:
    """Wide accumulation sums exact products in int64: prove at generation time that it cannot overflow."""
    bound_input = 1 << (number.word_bits - 1)
    for index, layer in enumerate(layers, start=1):
        if not layer.is_mac:
            continue
        worst = (
            np.abs(layer.expanded_bias()).astype(object) * number.scale
            + np.abs(layer.tap_weights()).astype(object).sum(axis=1) * bound_input
        )
        neuron = int(np.argmax(worst))
        if worst[neuron] >= WIDE_ACCUMULATOR_LIMIT:
            raise RangeError(
                f"layer {index}, neuron {neuron}: a wide int64 accumulator can overflow at {number} "
                f"(worst |sum| = 2^{float(np.log2(float(worst[neuron]))):.1f}); use --accumulate per-op"
            )


def check_lookup(index: int, quant: MacQuant, mode: RequantMode) -> None:
    """A table after the requantization (QLinearSigmoid) is onnxruntime's, and must be monotone for
    the layer to stay one threshold table (it is for a monotone function: rounding is monotone)."""
    assert quant.lookup is not None
    if mode is not RequantMode.ONNXRUNTIME:
        raise UnsupportedError(
            f"layer {index}: the {quant.lookup.function.value} table ({quant.lookup.what}) is onnxruntime's "
            f"QLinearSigmoid; it is not modelled with {mode.value} requantization (use --format int8)"
        )
    table = lookup_table(quant.lookup, quant.output)
    if np.any(np.diff(table) < 0):
        code = int(np.argmax(np.diff(table) < 0)) + quant.lookup.input.code.qmin
        raise UnsupportedError(
            f"layer {index}: the {quant.lookup.function.value} table ({quant.lookup.what}) decreases after "
            f"code {code}; only monotone tables are supported"
        )


def _int8_network(net: Network, options: ImplementationOptions) -> QuantizedNetwork:
    number: Int8Format = options.number  # type: ignore[assignment]
    if net.quantization is None:
        raise InputError(
            f"{net.source or net.name} has no int8 quantization parameters: quantize it first with "
            "`qverify quantize FLOAT.onnx --calibration DATA -o MODEL.onnx` (onnxruntime's static "
            "quantization) and verify the quantized model"
        )
    if options.layout is Layout.BALANCED or options.accumulation is Accumulation.WIDE:
        raise InputError("int8 layers accumulate exactly in int32: --layout/--accumulate do not apply")
    layers = tuple(
        operator_of(layer).quantize_int8(index, layer, quant, number.requant, number.kernel)
        for index, (layer, quant) in enumerate(zip(net.layers, net.quantization.layers), start=1)
    )
    return QuantizedNetwork(source=net, options=options, layers=layers, luts=())


def _check_relu6_top(net: Network, fmt: FixedFormat) -> None:
    """ReLU6 clamps at 6: the format must hold it (a wrapped or saturated 6 would be another function)."""
    if any(layer.activation is Activation.RELU6 for layer in net.layers) and 6 * fmt.scale > fmt.max_q:
        raise RangeError(
            f"relu6 clamps at 6, which {fmt} cannot hold (its largest value is "
            f"{fmt.max_q / fmt.scale:g}); use more integer bits"
        )


def quantize_network(net: Network, options: ImplementationOptions) -> QuantizedNetwork:
    """Quantise constants and design tables; raises RangeError when `detect` cannot hold a constant."""
    if isinstance(options.number, Int8Format):
        return _int8_network(net, options)
    if options.layout is Layout.BALANCED and not net.is_dense:
        raise UnsupportedError(
            "--layout balanced is implemented for dense layers only (this network has convolution or "
            "pooling layers); use the sequential layout"
        )
    layers = tuple(
        operator_of(layer).quantize(index, layer, options.number)
        for index, layer in enumerate(net.layers, start=1)
    )
    for layer in layers:
        layer.weights.flags.writeable = False
        layer.bias.flags.writeable = False
    if isinstance(options.number, FixedFormat):
        _check_relu6_top(net, options.number)
    if isinstance(options.number, FixedFormat) and options.accumulation is Accumulation.WIDE:
        check_wide_accumulator(layers, options.number)
    needed = sorted({layer.activation for layer in net.layers if layer.activation in LIPSCHITZ}, key=str)
    luts = tuple(design_lut(activation, options.lut, options.number) for activation in needed)
    return QuantizedNetwork(source=net, options=options, layers=layers, luts=luts)
