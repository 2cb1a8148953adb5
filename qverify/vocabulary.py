"""The words of a task's options, without numpy: the enums and defaults the command line offers.

How the C computes (`Rounding`, `Overflow`, `Accumulation`, `Layout`, `FloatKind`, the word
lengths, the format labels' help text), where its invariants come from (`IntervalMethod`), the
units of a property (`Units`) and the question `qverify vnncomp` asks (`VnncompSemantics`) are owned
by `qverify.quant`, `qverify.invariants`, `qverify.properties` and `qverify.vnncomp`, which re-export
them from here; the defaults of a task by `qverify.tasks.model`. They live in this module, which
imports nothing, so that building the command line's parsers imports nothing heavy: `qverify CMD
--help` prints its options without numpy, ONNX or the verifier (tests/test_cli_imports.py checks
which modules it imports).
"""

from __future__ import annotations

import enum


def choices(kind: type[enum.Enum]) -> tuple[str, ...]:
    """The values of an enum, for argparse `choices` and spec-file messages."""
    return tuple(member.value for member in kind)


class Rounding(enum.Enum):
    """How a value with more fractional bits than the format is brought back to `l` bits."""

    NEAREST = "nearest"  # ties away from zero (DSVerifier's fxp_mult)
    FLOOR = "floor"  # towards -inf (an arithmetic shift)


class Overflow(enum.Enum):
    """What happens when a result leaves the word range."""

    WRAP = "wrap"  # two's complement
    SATURATE = "saturate"  # clamp to the nearest representable value
    DETECT = "detect"  # an assertion fails: the checker reports an overflow violation


class Accumulation(enum.Enum):
    PER_OP = "per-op"  # acc = O(acc + O(R(w*x))) after every product (the thesis model)
    WIDE = "wide"  # exact int64 sum of the products, rounded once (int8-kernel style)


class Layout(enum.Enum):
    SEQUENTIAL = "sequential"  # acc = b; acc += w_0 x_0; ...; one loop per neuron
    BALANCED = "balanced"  # a divide-and-conquer tree of partial sums, unrolled


class FloatKind(enum.Enum):
    FLOAT = "float"
    DOUBLE = "double"
    HALF = "half"


class Units(enum.Enum):
    """The units of a property's inputs and outputs: the network's normalised ones, or raw."""

    NORMALISED = "normalised"
    RAW = "raw"


class IntervalMethod(enum.Enum):
    """`--intervals`: where the injected invariants come from."""

    AUTO = "auto"
    FRAMAC = "framac"
    BUILTIN = "builtin"
    NONE = "none"


MAX_WORD_BITS = 32  # a fixed-point word: 2..32 bits
MIN_WORD_BITS = 2
FORMAT_HELP = "K.L (fixed point, e.g. 16.16), float, double, half, int8, int8-x86, int8-ort, int8-tflite or int8-xnnpack"
WORD_LENGTH_HELP = (
    "W (a word length, 2..32: integer bits from range analysis over the network's input domain)"
)


class VnncompSemantics(enum.Enum):
    """`qverify vnncomp --semantics`: the question asked of an instance (`qverify.vnncomp`, which
    re-exports it as `Semantics`)."""

    REAL = "real"  # the real-valued network (an int8 model: its own integer arithmetic)
    QUANTIZED = "quantized"  # an implementation in --format


class CodeType(enum.Enum):
    """The integer type of a tensor's codes."""

    INT8 = "int8"
    UINT8 = "uint8"

    @property
    def qmin(self) -> int:
        return -128 if self is CodeType.INT8 else 0

    @property
    def qmax(self) -> int:
        return 127 if self is CodeType.INT8 else 255

    @property
    def c_type(self) -> str:
        return "int8_t" if self is CodeType.INT8 else "uint8_t"


class QuantFormat(enum.Enum):
    """How onnxruntime's quantizer writes an int8 model (`qverify quantize --format`)."""

    QDQ = "qdq"  # QuantizeLinear/DequantizeLinear around float operators
    QOP = "qop"  # QOperator: QLinearConv, QGemm, ...


BUILT_IN = ("digits", "digits-raw")  # the built-in data sets (qverify.data)
# the input perturbations of qverify.data.transforms.FAMILIES, in its order (it checks this list)
FAMILY_NAMES = (
    "awgn",
    "brownian",
    "vertical-occlusion",
    "horizontal-occlusion",
    "salt-pepper",
    "blur",
    "brightness",
    "contrast",
    "rotation",
    "translate-x",
    "translate-y",
    "zoom",
    "shear",
)
PAPER_FAMILIES = ("awgn", "brownian", "vertical-occlusion", "horizontal-occlusion")
IMPACT_DEFAULT = (*PAPER_FAMILIES, "salt-pepper", "blur", "brightness", "contrast")
FRAC_POLICIES = ("fixed-int", "fit")  # `qverify sweep --frac-policy` (qverify.suites.sweep)

DEFAULT_FORMAT = "16.16"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_MB = 4096
