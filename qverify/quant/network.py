"""A network as implemented: number format, MAC order, accumulation, tables, quantised constants.

`QuantizedNetwork` holds everything the generated C depends on; the simulator and codegen both read
it, so they cannot disagree about constants or tables.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from qverify.errors import InputError, RangeError
from qverify.network import Activation, Network
from qverify.quant.fixed import FixedFormat, quantize_constants
from qverify.quant.floatfmt import FloatFormat
from qverify.quant.lut import LIPSCHITZ, Lut, LutDesign, design_lut

NumberFormat = FixedFormat | FloatFormat
WIDE_ACCUMULATOR_LIMIT = 1 << 62  # |acc| below this leaves room for the rounding offset in int64


class Accumulation(enum.Enum):
    PER_OP = "per-op"  # acc = O(acc + O(R(w*x))) after every product (the thesis model)
    WIDE = "wide"  # exact int64 sum of the products, rounded once (int8-kernel style)


class Layout(enum.Enum):
    SEQUENTIAL = "sequential"  # acc = b; acc += w_0 x_0; ...; one loop per neuron
    BALANCED = "balanced"  # a divide-and-conquer tree of partial sums, unrolled


@dataclass(frozen=True, slots=True)
class ImplementationOptions:
    """Every choice that changes the implemented arithmetic (not the network)."""

    number: NumberFormat = field(default_factory=lambda: FixedFormat(16, 16))
    accumulation: Accumulation = Accumulation.PER_OP
    layout: Layout = Layout.SEQUENTIAL
    lut: LutDesign = field(default_factory=LutDesign)

    def __post_init__(self) -> None:
        if isinstance(self.number, FloatFormat) and self.accumulation is Accumulation.WIDE:
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
class QuantizedLayer:
    """One dense layer's constants in the implementation's number format."""

    weights: np.ndarray  # int64 words (fixed) or values of the float type, shape (n_out, n_in)
    bias: np.ndarray
    activation: Activation

    @property
    def n_in(self) -> int:
        return int(self.weights.shape[1])

    @property
    def n_out(self) -> int:
        return int(self.weights.shape[0])


@dataclass(frozen=True, slots=True, eq=False)
class QuantizedNetwork:
    """A network as the C implements it."""

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
    def n_inputs(self) -> int:
        return self.layers[0].n_in

    @property
    def n_outputs(self) -> int:
        return self.layers[-1].n_out

    def lut_for(self, activation: Activation) -> Lut:
        for lut in self.luts:
            if lut.activation is activation:
                return lut
        raise KeyError(activation)

    @property
    def lut_error_bound(self) -> float:
        """The largest LUT error bound of the network's tables (0 without tables)."""
        return max((lut.error_bound for lut in self.luts), default=0.0)


def _quantize_layer(index: int, weights: np.ndarray, bias: np.ndarray, number: NumberFormat) -> tuple:
    if isinstance(number, FloatFormat):
        return number.round(weights), number.round(bias)
    return (
        quantize_constants(weights, number, f"layer {index} weight (neuron, input)"),
        quantize_constants(bias, number, f"layer {index} bias (neuron,)"),
    )


def check_wide_accumulator(layers: tuple[QuantizedLayer, ...], number: FixedFormat) -> None:
    """Wide accumulation sums exact products in int64: prove at generation time that it cannot overflow."""
    bound_input = 1 << (number.word_bits - 1)
    for index, layer in enumerate(layers, start=1):
        worst = (
            np.abs(layer.bias).astype(object) * number.scale
            + np.abs(layer.weights).astype(object).sum(axis=1) * bound_input
        )
        neuron = int(np.argmax(worst))
        if worst[neuron] >= WIDE_ACCUMULATOR_LIMIT:
            raise RangeError(
                f"layer {index}, neuron {neuron}: a wide int64 accumulator can overflow at {number} "
                f"(worst |sum| = 2^{float(np.log2(float(worst[neuron]))):.1f}); use --accumulate per-op"
            )


def quantize_network(net: Network, options: ImplementationOptions) -> QuantizedNetwork:
    """Quantise constants and design tables; raises RangeError when `detect` cannot hold a constant."""
    layers = tuple(
        QuantizedLayer(*_quantize_layer(index, layer.weights, layer.bias, options.number), layer.activation)
        for index, layer in enumerate(net.layers, start=1)
    )
    for layer in layers:
        layer.weights.flags.writeable = False
        layer.bias.flags.writeable = False
    if isinstance(options.number, FixedFormat) and options.accumulation is Accumulation.WIDE:
        check_wide_accumulator(layers, options.number)
    needed = sorted({layer.activation for layer in net.layers if layer.activation in LIPSCHITZ}, key=str)
    luts = tuple(design_lut(activation, options.lut, options.number) for activation in needed)
    return QuantizedNetwork(source=net, options=options, layers=layers, luts=luts)
