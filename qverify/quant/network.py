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
    Add,
    AveragePool2D,
    CodeType,
    Concat,
    Conv2D,
    Dense,
    Join,
    Layer,
    MaxPool2D,
    Network,
    Permute,
    PoolQuant,
    TensorQuant,
    gather_inputs,
)
from qverify.network.float_view import implied_join_activation
from qverify.network.qparams import JoinQuant, LayerQuant, MacQuant
from qverify.quant import tflite8
from qverify.quant.affine import Int8Format, Int8Kernel, RequantMode, accumulator_bounds, thresholds
from qverify.quant.code_tables import lookup_table
from qverify.quant.fixed import FixedFormat, quantize_constants
from qverify.quant.floatfmt import FloatFormat
from qverify.quant.join8 import add_staircase, all_pairs, concat_staircase, pairs_staircase
from qverify.quant.lut import LIPSCHITZ, Lut, LutDesign, design_lut
from qverify.quant.pool8 import ambiguous_sums, exact_means
from qverify.quant.x86 import PairedSums, paired_sums
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
        return isinstance(self.source, (Dense, Conv2D))

    @property
    def is_pool(self) -> bool:
        return isinstance(self.source, (MaxPool2D, AveragePool2D))

    @property
    def is_join(self) -> bool:
        """A node that adds, concatenates or moves its inputs (`qverify.network.joins`)."""
        return isinstance(self.source, (Add, Concat, Permute))

    @property
    def is_dense(self) -> bool:
        return isinstance(self.source, Dense)

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
        if isinstance(self.source, Conv2D):
            return self.bias[self.source.channel_of()]
        return self.bias

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


def _quantize_values(values: np.ndarray, number: NumberFormat, what: str) -> np.ndarray:
    if isinstance(number, FloatFormat):
        return number.round(values)
    return quantize_constants(values, number, what)  # type: ignore[arg-type]


def _quantize_layer(index: int, layer: Layer, number: NumberFormat) -> QuantizedLayer:
    """A layer's constants in a fixed-point or float format."""
    empty = np.zeros(0)
    if isinstance(layer, (MaxPool2D, Add, Concat, Permute)):
        return QuantizedLayer(empty, empty, layer.activation, layer)
    if isinstance(layer, AveragePool2D):
        reciprocals = _quantize_values(1.0 / layer.divisors(), number, f"layer {index} pool reciprocal")
        return QuantizedLayer(reciprocals, empty, layer.activation, layer)
    shape = "(neuron, input)" if isinstance(layer, Dense) else "(out channel, in channel, row, column)"
    weights = _quantize_values(layer.weights, number, f"layer {index} weight {shape}")
    bias = _quantize_values(layer.bias, number, f"layer {index} bias")
    return QuantizedLayer(weights, bias, layer.activation, layer)


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


def _int8_average_pool(
    index: int, layer: AveragePool2D, quant: PoolQuant, mode: RequantMode
) -> QuantizedLayer:
    """An int8 average pool as a depthwise convolution of ones whose threshold table is the code of
    the window's mean (`qverify.quant.pool8`), when that is a function of the window's sum."""
    where = f"layer {index} ({layer.describe()})"
    divisors = np.unique(layer.divisors())
    if divisors.size != 1:
        raise UnsupportedError(
            f"{where}: int8 average pooling whose windows have different divisors (padding not counted) "
            "is not supported; count_include_pad=1 or no padding is"
        )
    tflite = mode is RequantMode.TFLITE
    if mode is RequantMode.XNNPACK:
        raise UnsupportedError(
            f"{where}: int8 {'MEAN' if quant.mean else 'average pooling'} under the LiteRT interpreter's default "
            "delegate (XNNPACK's float32 rescaling of the sum) is not modelled; verify with --format int8-tflite"
        )
    if not tflite and quant.mean:
        raise UnsupportedError(
            f"{where}: TFLite's int8 MEAN is modelled with TFLite's arithmetic (--format int8-tflite), not "
            f"with {mode.value} requantization"
        )
    channels, (kh, kw) = layer.input_shape[0], layer.kernel
    ones = np.ones((channels, 1, kh, kw), dtype=np.int64)
    divisor = int(divisors[0])
    conv = Conv2D(
        np.full(ones.shape, 1.0 / divisor),
        np.zeros(channels),
        Activation.IDENTITY,
        layer.input_shape,
        layer.strides,
        layer.pads,
        groups=channels,
    )
    mac = MacQuant(
        quant.input,
        ones,
        np.ones(1),
        np.zeros(channels),
        quant.output,
        False,
        quant.what,
        pool_divisor=divisor,
        pool_global=tuple(layer.kernel) == tuple(layer.input_shape[1:])
        and not any(layer.pads)
        and not quant.float_path,
        pool_mean=quant.mean,
        act_range=quant.act_range,
    )
    taps = int(conv.taps().count.max())
    acc_lo, acc_hi = accumulator_bounds(mac, np.full(channels, taps))
    ambiguous = np.zeros(0, dtype=np.int64)  # (the global path is exact: `pool8.global_codes`)
    if not mac.pool_global and not tflite:  # (TFLite's pools are integer arithmetic: exact)
        ambiguous = ambiguous_sums(mac, int(acc_lo.min()), int(acc_hi.max()), taps)
    if ambiguous.size:
        sum_ = int(ambiguous[0])
        raise UnsupportedError(
            f"{where}: int8 average pooling ({quant.what}): the code of a window whose codes sum to "
            f"{sum_} above the zero point depends on the float rounding of its values (its exact mean, "
            f"{float(exact_means(np.array([sum_]), mac)[0]):.6f} in output codes, lies within float32 rounding "
            f"of a rounding boundary; {ambiguous.size} such sums); not supported"
        )
    lo, hi = np.array([acc_lo.min()]), np.array([acc_hi.max()])
    table = thresholds(mac, mode, np.broadcast_to(lo, acc_lo.shape), np.broadcast_to(hi, acc_hi.shape))[:1]
    table.flags.writeable = False
    return QuantizedLayer(
        ones,
        np.zeros(channels, dtype=np.int64),
        Activation.IDENTITY,
        conv,
        Int8Tables(mac, table, acc_lo, acc_hi),
    )


def _int8_join(index: int, layer: Join, quant: JoinQuant, mode: RequantMode) -> QuantizedLayer:
    """A join on codes: a copy (a Permute, a Concat of inputs quantized as its output), or an exact
    integer staircase (an Add; a Concat that requantizes): `qverify.quant.join8`."""
    empty = np.zeros(0, dtype=np.int64)
    where = f"layer {index} ({layer.describe()})"
    if not isinstance(layer, Add) and quant.copies:
        return QuantizedLayer(empty, empty, Activation.IDENTITY, layer, Int8Tables(quant, None, None, None))
    tflite_add = mode in (RequantMode.TFLITE, RequantMode.XNNPACK) and isinstance(layer, Add)
    if mode is not RequantMode.ONNXRUNTIME and not tflite_add:
        raise UnsupportedError(
            f"{where}: an int8 {type(layer).__name__} that requantizes is modelled as onnxruntime's "
            f"QLinear{type(layer).__name__}; not with {mode.value} requantization (use --format int8)"
        )
    if quant.act_range is not None and not tflite_add:
        raise UnsupportedError(f"{where}: a clamp of a fused activation is modelled in TFLite's ADD only")
    if isinstance(layer, Add):
        # (its float view's activation is the one its output's clamp implies, in the staircase already)
        if layer.count != 2 or layer.activation not in (Activation.IDENTITY, implied_join_activation(quant)):
            raise UnsupportedError(
                f"{where}: an int8 Add is of two tensors, with no activation but its output's clamp"
            )
        if tflite_add and mode is RequantMode.XNNPACK:
            a, b = all_pairs(*quant.inputs)
            codes = tflite8.xnnpack_add_codes(a, b, quant, where)
            weights = tflite8.xnnpack_add_parameters(quant, where)[:2]
            stairs = pairs_staircase(quant, a, b, codes, where, "XNNPACK's integer ADD", weights)
        elif tflite_add:
            a, b = all_pairs(*quant.inputs)
            codes = tflite8.add_codes(a, b, quant, where)
            stairs = pairs_staircase(quant, a, b, codes, where, "TFLite's integer ADD")
        else:
            stairs = add_staircase(quant, where)
    else:
        stairs = concat_staircase(quant)
    stairs.table.flags.writeable = False
    return QuantizedLayer(
        stairs.weights,
        empty,
        Activation.IDENTITY,
        layer,
        Int8Tables(quant, stairs.table, stairs.acc_lo, stairs.acc_hi),
    )


def _int8_layer(
    index: int, layer: Layer, quant: LayerQuant, mode: RequantMode, kernel: Int8Kernel
) -> QuantizedLayer:
    """A layer of an int8 model: integer weights and bias, and its requantization table."""
    empty = np.zeros(0, dtype=np.int64)
    if isinstance(quant, JoinQuant):
        return _int8_join(index, layer, quant, mode)  # type: ignore[arg-type]
    if isinstance(quant, PoolQuant):
        if isinstance(layer, AveragePool2D):
            return _int8_average_pool(index, layer, quant, mode)
        if not quant.input.same_as(quant.output):
            raise UnsupportedError(
                f"layer {index} ({layer.describe()}): max pooling that changes the quantization "
                f"({quant.input.describe()} -> {quant.output.describe()}) is not supported"
            )
        return QuantizedLayer(empty, empty, Activation.IDENTITY, layer, Int8Tables(quant, None, None, None))
    if quant.lookup is not None:
        check_lookup(index, quant, mode)
    elif layer.activation not in (Activation.IDENTITY, Activation.RELU, Activation.RELU6):
        raise UnsupportedError(
            f"layer {index}: {layer.activation.value} activation is not supported in int8 (ReLU, fused as "
            "the requantization clamp, and identity are)"
        )
    taps = layer.taps()  # type: ignore[union-attr]
    tap_abs = np.where(taps.valid, np.abs(quant.weights.reshape(-1)[taps.weights]), 0).sum(axis=1)
    channel = layer.channel_of()  # type: ignore[union-attr]
    per_channel_abs = np.zeros(quant.weights.shape[0], dtype=np.int64)
    np.maximum.at(per_channel_abs, channel, tap_abs)
    acc_lo, acc_hi = accumulator_bounds(quant, per_channel_abs)
    if quant.per_channel:
        table = thresholds(quant, mode, acc_lo, acc_hi)
    else:  # one table valid for every channel: search over the union of their ranges
        lo, hi = np.array([acc_lo.min()]), np.array([acc_hi.max()])
        table = thresholds(quant, mode, np.broadcast_to(lo, acc_lo.shape), np.broadcast_to(hi, acc_hi.shape))[
            :1
        ]
    table.flags.writeable = False
    activation = Activation.RELU if quant.relu else Activation.IDENTITY
    # the x86 sum lies within the exact sum's range (saturation moves a pair sum towards 0, which
    # its range holds), so the tables above are valid for it too
    paired = paired_sums(layer, quant, f"layer {index}") if kernel is Int8Kernel.X86 else None
    return QuantizedLayer(
        quant.weights, quant.bias, activation, layer, Int8Tables(quant, table, acc_lo, acc_hi, paired)
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
        _int8_layer(index, layer, quant, number.requant, number.kernel)
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
        _quantize_layer(index, layer, options.number) for index, layer in enumerate(net.layers, start=1)
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
