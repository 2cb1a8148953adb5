"""Fixed-point and float number formats, range analysis, lookup tables, and the bit-exact simulator."""

from qverify.quant.fixed import (
    FixedFormat,
    Overflow,
    Rounding,
    add,
    apply_overflow,
    mult,
    quantize_constants,
    quantize_real,
    round_shift,
)
from qverify.quant.floatfmt import FloatFormat, FloatKind
from qverify.quant.intervals import LayerBounds, implementation_bounds, real_bounds
from qverify.quant.lut import Lut, LutDesign, design_lut, lut_fixed, lut_float, measure_lut_error
from qverify.quant.mac import balanced_tree, reduce_terms
from qverify.quant.network import (
    Accumulation,
    ImplementationOptions,
    Layout,
    NumberFormat,
    QuantizedLayer,
    QuantizedNetwork,
    quantize_network,
)
from qverify.quant.ranges import (
    IntBitsProposal,
    choose_format,
    input_box_words,
    overflow_sites,
    overflow_warnings,
    propose_int_bits,
)
from qverify.quant.simulate import NO_OVERFLOW, SimulationResult, neuron_name, simulate

__all__ = [
    "NO_OVERFLOW",
    "Accumulation",
    "FixedFormat",
    "FloatFormat",
    "FloatKind",
    "ImplementationOptions",
    "IntBitsProposal",
    "LayerBounds",
    "Layout",
    "Lut",
    "LutDesign",
    "NumberFormat",
    "Overflow",
    "QuantizedLayer",
    "QuantizedNetwork",
    "Rounding",
    "SimulationResult",
    "add",
    "apply_overflow",
    "balanced_tree",
    "choose_format",
    "design_lut",
    "implementation_bounds",
    "input_box_words",
    "lut_fixed",
    "lut_float",
    "measure_lut_error",
    "mult",
    "neuron_name",
    "overflow_sites",
    "overflow_warnings",
    "propose_int_bits",
    "quantize_constants",
    "quantize_network",
    "quantize_real",
    "real_bounds",
    "reduce_terms",
    "round_shift",
    "simulate",
]
