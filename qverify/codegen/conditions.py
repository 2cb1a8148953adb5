"""Property constants in the implementation's domain, exactly.

Fixed point: an output word y_i means y_i * 2^-l, so an atom sum(a_i * Y_i) + c (rel) 0 is, after
multiplying by D * 2^l (D the common denominator of the a_i), sum(A_i * y_i) (rel) -C with integer
A_i; as the left side is an integer, `>= t` becomes `>= ceil(t)`, `> t` becomes `>= floor(t) + 1`,
and so on: the C comparison holds exactly when the real one does.
Float: `y >= c` holds for a float y exactly when y >= (the smallest float >= c), and so on; a
difference `y_i - y_j >= 0` is compared as `y_i >= y_j` (exact for IEEE numbers).
Input boxes: `[lo, hi]` becomes what the implementation's input stage makes of its reals
(`qverify.quant.inputs`): the words `[Q(lo), Q(hi)]` (Q: the format's rounding of x * 2^l), the
floats `[R(lo), R(hi)]` (R: round to nearest in the C type), or for int8 the codes of `R(lo)` and
`R(hi)` in float32. The image of a non-empty box is never empty: a bound written between two
representable values becomes the nearer one (a point `X_0 = 0.1` is the float nearest 0.1).
int8: an output code y_i means (y_i - zero_point) * scale, an atom is compared as for fixed point
with that affine reading.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from qverify.codegen.literals import float_literal
from qverify.errors import RangeError, UnsupportedError
from qverify.network import TensorQuant
from qverify.properties import Atom, Box, Relation
from qverify.quant import FixedFormat, FloatFormat, FloatKind
from qverify.quant.inputs import fixed_word, nearest_float

INT64_LIMIT = 1 << 62


@dataclass(frozen=True, slots=True)
class CAtom:
    """An atom as a C expression (`code`) with the real-valued text it stands for (`comment`)."""

    code: str
    comment: str


def _floor(value: Fraction) -> int:
    return math.floor(value)


def _ceil(value: Fraction) -> int:
    return math.ceil(value)


def int64_literal(value: int) -> str:
    if -(1 << 31) < value < (1 << 31):
        return str(value)
    return f"{value}LL" if value > -(1 << 63) else "(-9223372036854775807LL - 1)"


def _linear_expression(coefficients: list[tuple[int, int]]) -> str:
    """sum(c * y[i]) in int64, e.g. `(int64_t)y[1] - (int64_t)y[0]` or `3 * (int64_t)y[2]`."""
    text = ""
    for index, coefficient in coefficients:
        magnitude = abs(coefficient)
        term = f"(int64_t)y[{index}]" if magnitude == 1 else f"{magnitude} * (int64_t)y[{index}]"
        if not text:
            text = term if coefficient > 0 else f"-{term}"
        else:
            text += f" + {term}" if coefficient > 0 else f" - {term}"
    return text or "0"


def _integer_atom(atom: Atom, scale: Fraction, zero: int, value_range: tuple[int, int], what: str) -> CAtom:
    """The atom over integer outputs `y[i]` meaning (y[i] - zero) * scale, exact.

    sum a_i (y_i - zero) scale + c (rel) 0  <=>  sum A_i y_i (rel) zero sum A_i - c D / scale, with
    A_i = a_i D integers (D the common denominator of the a_i, D / scale > 0). `value_range` holds
    every output's possible values: a comparison it decides is written as the constant 1 or 0 (gcc
    rejects comparisons that always hold for the type, and they say nothing)."""
    denominator = math.lcm(*(coefficient.denominator for _, coefficient in atom.terms)) if atom.terms else 1
    coefficients = [(index, int(coefficient * denominator)) for index, coefficient in atom.terms]
    bound = zero * sum(c for _, c in coefficients) - atom.constant * denominator / scale
    if atom.relation in (Relation.GE, Relation.GT):
        threshold = _ceil(bound) if atom.relation is Relation.GE else _floor(bound) + 1
        operator = ">="
    else:
        threshold = _floor(bound) if atom.relation is Relation.LE else _ceil(bound) - 1
        operator = "<="
    magnitude = max(abs(value_range[0]), abs(value_range[1]))
    worst = sum(abs(c) for _, c in coefficients) * magnitude + abs(threshold)
    if worst >= INT64_LIMIT:
        raise RangeError(f"property atom '{atom.text}' needs more than 64 bits to compare exactly at {what}")
    left = _linear_expression(coefficients)
    low = sum(c * (value_range[0] if c > 0 else value_range[1]) for _, c in coefficients)
    high = sum(c * (value_range[1] if c > 0 else value_range[0]) for _, c in coefficients)
    always = low >= threshold if operator == ">=" else high <= threshold
    never = high < threshold if operator == ">=" else low > threshold
    if always or never:
        verdict = "1" if always else "0"
        return CAtom(
            verdict,
            f"{atom.text}  <=>  {left} {operator} {threshold}: always {'true' if always else 'false'}",
        )
    return CAtom(
        f"{left} {operator} {int64_literal(threshold)}", f"{atom.text}  <=>  {left} {operator} {threshold}"
    )


def fixed_atom(atom: Atom, fmt: FixedFormat) -> CAtom:
    """The atom over output words `y[i]` (meaning y[i] * 2^-l), exact."""
    return _integer_atom(atom, Fraction(1, fmt.scale), 0, (fmt.min_q, fmt.max_q), str(fmt))


def int8_atom(atom: Atom, output: TensorQuant) -> CAtom:
    """The atom over output codes `y[i]`, read as the exact reals (y[i] - zero_point) * scale.

    onnxruntime's DequantizeLinear rounds that product to float32; reading it exactly can differ
    only for a threshold within half a float32 ulp of a code's value. Comparisons between outputs
    (Y_i - Y_j, argmax) are the same either way."""
    code_range = (output.code.qmin, output.code.qmax)
    return _integer_atom(atom, Fraction(output.scale), output.zero_point, code_range, output.describe())


def _float_up(value: Fraction, number: FloatFormat) -> float:
    """The smallest value of the float type >= value (|value| within the type's finite range)."""
    candidate = number.dtype(float(value))
    if Fraction(float(candidate)) < value:
        candidate = np.nextafter(candidate, number.dtype(np.inf))
    return float(candidate)


def _float_down(value: Fraction, number: FloatFormat) -> float:
    candidate = number.dtype(float(value))
    if Fraction(float(candidate)) > value:
        candidate = np.nextafter(candidate, number.dtype(-np.inf))
    return float(candidate)


def float_atom(atom: Atom, number: FloatFormat) -> CAtom:
    """The atom over float outputs, exact; only `a*Y_i + c` and `Y_i - Y_j (rel) 0` are supported."""
    c_type = number.c_type
    if len(atom.terms) == 1:
        ((index, coefficient),) = atom.terms
        relation = atom.relation
        if coefficient < 0:
            relation = {
                Relation.GE: Relation.LE,
                Relation.GT: Relation.LT,
                Relation.LE: Relation.GE,
                Relation.LT: Relation.GT,
            }[relation]
        bound = -atom.constant / coefficient
        largest = Fraction(float(np.finfo(number.dtype).max))
        if abs(bound) > largest:  # beyond every finite value: only an infinite output is beyond it
            sign = 1 if bound > 0 else -1
            above = relation in (Relation.GE, Relation.GT)
            relation = {(1, True): Relation.GT, (1, False): Relation.LE}.get(
                (sign, above), Relation.GE if above else Relation.LT
            )
            bound = sign * largest  # y >= 1e39 <=> y > max; y <= 1e39 <=> y <= max; mirrored below
        rounded = (
            _float_up(bound, number) if relation in (Relation.GE, Relation.LT) else _float_down(bound, number)
        )
        code = f"y[{index}] {relation.value} {float_literal(rounded, c_type)}"
        return CAtom(code, f"{atom.text}  <=>  y[{index}] {relation.value} {rounded!r}")
    if len(atom.terms) == 2 and atom.constant == 0 and atom.terms[0][1] == -atom.terms[1][1]:
        (first, a), (second, _) = atom.terms
        left, right = (first, second) if a > 0 else (second, first)
        code = f"y[{left}] {atom.relation.value} y[{right}]"
        return CAtom(code, f"{atom.text}  <=>  {code}")
    raise UnsupportedError(
        f"property atom '{atom.text}': float harnesses support a*Y_i + c and Y_i - Y_j comparisons only"
    )


@dataclass(frozen=True, slots=True)
class CBox:
    """One input box in the implementation's domain: the image of a real box under the input stage
    (`qverify.quant.inputs`), never empty for a box that is not empty as real numbers."""

    lo: tuple[str, ...]
    hi: tuple[str, ...]
    clipped: bool  # the box reached beyond the range of the input type and was cut to it
    comment: str
    moved: int = 0  # bounds between two representable values, rounded to the nearest of them


def _moved(values: list[Fraction], converted: list[tuple[Fraction, bool]]) -> int:
    """How many bounds lay between two representable values (not counting those cut to the range)."""
    return sum(exact != value and not clipped for value, (exact, clipped) in zip(values, converted))


def _describe(box: Box, lo: list, hi: list) -> str:
    return ", ".join(
        f"[{float(a):.10g}, {float(b):.10g}] -> [{p}, {q}]" for a, b, p, q in zip(box.lo, box.hi, lo, hi)
    )


def fixed_box(box: Box, fmt: FixedFormat) -> CBox:
    """The words the harness's conversion gives for the box's reals: [Q(lo), Q(hi)], Q the format's
    rounding of x * 2^l, saturated to the word range."""
    low = [fixed_word(v, fmt) for v in box.lo]
    high = [fixed_word(v, fmt) for v in box.hi]
    lo, hi = [w for w, _ in low], [w for w, _ in high]
    clipped = any(c for _, c in low) or any(c for _, c in high)
    moved = _moved([*box.lo, *box.hi], [(Fraction(w, fmt.scale), c) for w, c in low + high])
    return CBox(tuple(map(str, lo)), tuple(map(str, hi)), clipped, _describe(box, lo, hi), moved)


def float_box(box: Box, number: FloatFormat) -> CBox:
    """The values of the C type the box's reals round to (nearest, ties to even): [R(lo), R(hi)]."""
    low = [nearest_float(v, number) for v in box.lo]
    high = [nearest_float(v, number) for v in box.hi]
    lo, hi = [f for f, _ in low], [f for f, _ in high]
    clipped = any(c for _, c in low) or any(c for _, c in high)
    moved = _moved([*box.lo, *box.hi], [(Fraction(f), c) for f, c in low + high])
    return CBox(
        tuple(float_literal(v, number.c_type) for v in lo),
        tuple(float_literal(v, number.c_type) for v in hi),
        clipped,
        _describe(box, [repr(v) for v in lo], [repr(v) for v in hi]),
        moved,
    )


def int8_box(box: Box, quant: TensorQuant) -> CBox:
    """The input codes of a box of real inputs: the model receives the float32 value of each real
    (rounded to nearest) and quantizes it, QuantizeLinear(x): both steps are non-decreasing, so the
    box's codes are [Q(R(lo)), Q(R(hi))] (every code between is reached: a scale spans many float32
    values). Inputs beyond the codes' range saturate."""
    f32 = FloatFormat(FloatKind.FLOAT)
    low = [nearest_float(v, f32) for v in box.lo]
    high = [nearest_float(v, f32) for v in box.hi]
    low_reals = np.array([f for f, _ in low], dtype=np.float32)
    high_reals = np.array([f for f, _ in high], dtype=np.float32)
    lo, hi = quant.quantize(low_reals), quant.quantize(high_reals)
    saturated = bool(np.any(lo == quant.code.qmin) or np.any(hi == quant.code.qmax))
    saturated = saturated or any(c for _, c in low) or any(c for _, c in high)
    moved = _moved([*box.lo, *box.hi], [(Fraction(f), c) for f, c in low + high])
    return CBox(tuple(map(str, lo)), tuple(map(str, hi)), saturated, _describe(box, lo, hi), moved)


def implementation_box(qnet, box: Box) -> CBox:
    """A box of normalised real inputs in the network's input domain (words, floats or codes)."""
    number = qnet.number
    if isinstance(number, FixedFormat):
        return fixed_box(box, number)
    if qnet.is_int8:
        return int8_box(box, qnet.input_quant)
    return float_box(box, number)


def implementation_atom(qnet, atom: Atom) -> CAtom:
    """An output atom over the network's outputs `y[i]`, exact."""
    number = qnet.number
    if isinstance(number, FixedFormat):
        return fixed_atom(atom, number)
    if qnet.is_int8:
        return int8_atom(atom, qnet.output_quant)
    return float_atom(atom, number)
