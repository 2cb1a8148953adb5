"""Fixed-point and float number formats, range analysis, lookup tables, and the bit-exact simulator."""

from qverify.quant.affine import Int8Format, Int8Kernel, RequantMode
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
from qverify.quant.intervals import (
    LayerBounds,
    implementation_bounds,
    implementation_bounds_batch,
    real_bounds,
)
from qverify.quant.labels import named_format, parse_number_format, word_length
from qverify.quant.lut import Lut, LutDesign, design_lut, lut_fixed, lut_float, measure_lut_error
from qverify.quant.mac import balanced_tree, reduce_terms
from qverify.quant.network import (
    Accumulation,
    ImplementationOptions,
    Int8Tables,
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
    resolve_word_length,
)
from qverify.quant.simulate import NO_OVERFLOW, SimulationResult, neuron_name, simulate
from qverify.vocabulary import FORMAT_HELP, WORD_LENGTH_HELP

__all__ = [
    "FORMAT_HELP",
    "NO_OVERFLOW",
    "WORD_LENGTH_HELP",
    "Accumulation",
    "FixedFormat",
    "FloatFormat",
    "FloatKind",
    "ImplementationOptions",
    "Int8Format",
    "Int8Kernel",
    "Int8Tables",
    "IntBitsProposal",
    "LayerBounds",
    "Layout",
    "Lut",
    "LutDesign",
    "NumberFormat",
    "Overflow",
    "QuantizedLayer",
    "QuantizedNetwork",
    "RequantMode",
    "Rounding",
    "SimulationResult",
    "add",
    "apply_overflow",
    "balanced_tree",
    "choose_format",
    "design_lut",
    "implementation_bounds",
    "implementation_bounds_batch",
    "input_box_words",
    "lut_fixed",
    "lut_float",
    "measure_lut_error",
    "mult",
    "named_format",
    "neuron_name",
    "overflow_sites",
    "overflow_warnings",
    "parse_number_format",
    "propose_int_bits",
    "quantize_constants",
    "quantize_network",
    "quantize_real",
    "real_bounds",
    "reduce_terms",
    "resolve_word_length",
    "round_shift",
    "simulate",
    "word_length",
]
