"""One parser for number-format labels, shared by the command line, spec files and suite files.

Labels: `K.L` (fixed point <K,L>), `float`, `double`, `half` (IEEE binary32/64/16), `int8`
(affine int8 with onnxruntime's requantization; the model's own scales; products summed exactly, the
ONNX semantics) and `int8-tflite` (the same with TFLite/CMSIS-NN's integer multiplier and shift) and
`int8-x86` (onnxruntime's x86 u8 x s8 kernels without AVX-VNNI: product pairs saturated at int16,
`qverify.quant.x86`) and `int8-ort` (alias `int8-onnxruntime`: whichever of `int8` and `int8-x86`
this machine's onnxruntime computes, found by running a probe model in it, `quant.ort_kernel`). Suites also accept a word length `W`
(`qverify.quant.ranges.choose_format` picks the integer bits per network), which is not a format
by itself and is handled by the suite runner.
"""

from __future__ import annotations

from qverify.errors import InputError
from qverify.quant.affine import Int8Format
from qverify.quant.fixed import FixedFormat, Overflow, Rounding
from qverify.quant.floatfmt import FloatFormat, FloatKind
from qverify.quant.ort_kernel import ORT_LABEL, ort_kernel
from qverify.vocabulary import FORMAT_HELP, MAX_WORD_BITS, MIN_WORD_BITS

MAX_WORD_LENGTH = MAX_WORD_BITS
_FLOAT_LABELS = {kind.value: kind for kind in FloatKind}


ORT_LABELS = (ORT_LABEL, "int8-onnxruntime")  # int8 as this machine's onnxruntime computes it


def named_format(label: str) -> FloatFormat | Int8Format | None:
    """The float or int8 format a label names (`float`, `double`, `half`, `int8`, ...), else None.
    `int8-ort` runs the probe (once per process; ToolMissingError without onnxruntime)."""
    key = label.strip().lower()
    if key in _FLOAT_LABELS:
        return FloatFormat(_FLOAT_LABELS[key])
    if key in ORT_LABELS:
        return Int8Format(kernel=ort_kernel(), resolved_from=ORT_LABEL)
    return Int8Format.parse(key)


def parse_number_format(
    label: str, rounding: Rounding = Rounding.NEAREST, overflow: Overflow = Overflow.SATURATE
) -> FixedFormat | FloatFormat | Int8Format:
    """A format label to its number format; `rounding`/`overflow` apply to fixed point only.

    :raises InputError: not a label of `FORMAT_HELP`'s forms.
    """
    named = named_format(label)
    if named is not None:
        return named
    if "." not in label:
        raise InputError(f"bad format '{label}': expected {FORMAT_HELP}")
    return FixedFormat.parse(label, rounding, overflow)


def is_fixed_label(label: str) -> bool:
    return named_format(label) is None


def word_length(label: str) -> int | None:
    """The word length a bare integer label names (`16`), None for any other label.

    :raises InputError: an integer outside 2..32.
    """
    key = label.strip()
    if not key.isdigit():
        return None
    bits = int(key)
    if not MIN_WORD_BITS <= bits <= MAX_WORD_LENGTH:
        raise InputError(f"format '{label}': a word length is {MIN_WORD_BITS}..{MAX_WORD_LENGTH} bits")
    return bits
