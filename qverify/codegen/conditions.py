"""Property constants in the implementation's domain, exactly.

Fixed point: an output word y_i means y_i * 2^-l, so an atom sum(a_i * Y_i) + c (rel) 0 is, after
multiplying by D * 2^l (D the common denominator of the a_i), sum(A_i * y_i) (rel) -C with integer
A_i; as the left side is an integer, `>= t` becomes `>= ceil(t)`, `> t` becomes `>= floor(t) + 1`,
and so on: the C comparison holds exactly when the real one does.
Float: `y >= c` holds for a float y exactly when y >= (the smallest float >= c), and so on; a
difference `y_i - y_j >= 0` is compared as `y_i >= y_j` (exact for IEEE numbers).
Input boxes: `[lo, hi]` becomes the words `[ceil(lo * 2^l), floor(hi * 2^l)]` (exactly the
representable points), or the floats `[smallest float >= lo, largest float <= hi]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from qverify.codegen.literals import float_literal
from qverify.errors import RangeError, UnsupportedError
from qverify.properties import Atom, Box, Relation
from qverify.quant import FixedFormat, FloatFormat

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


def fixed_atom(atom: Atom, fmt: FixedFormat) -> CAtom:
    """The atom over output words `y[i]`, exact."""
    denominator = math.lcm(*(coefficient.denominator for _, coefficient in atom.terms)) if atom.terms else 1
    coefficients = [(index, int(coefficient * denominator)) for index, coefficient in atom.terms]
    bound = -atom.constant * denominator * fmt.scale
    if atom.relation in (Relation.GE, Relation.GT):
        threshold = _ceil(bound) if atom.relation is Relation.GE else _floor(bound) + 1
        operator = ">="
    else:
        threshold = _floor(bound) if atom.relation is Relation.LE else _ceil(bound) - 1
        operator = "<="
    worst = sum(abs(c) for _, c in coefficients) * (1 << (fmt.word_bits - 1)) + abs(threshold)
    if worst >= INT64_LIMIT:
        raise RangeError(f"property atom '{atom.text}' needs more than 64 bits to compare exactly at {fmt}")
    left = _linear_expression(coefficients)
    return CAtom(
        f"{left} {operator} {int64_literal(threshold)}", f"{atom.text}  <=>  {left} {operator} {threshold}"
    )


def _float_up(value: Fraction, number: FloatFormat) -> float:
    """The smallest value of the float type >= value."""
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
    """One input box in the implementation's domain; `empty` when it holds no representable point."""

    lo: tuple[str, ...]
    hi: tuple[str, ...]
    empty: bool
    clipped: bool  # the box reached beyond the word range and was cut to it
    comment: str


def fixed_box(box: Box, fmt: FixedFormat) -> CBox:
    lo = [max(_ceil(v * fmt.scale), fmt.min_q) for v in box.lo]
    hi = [min(_floor(v * fmt.scale), fmt.max_q) for v in box.hi]
    clipped = any(_ceil(v * fmt.scale) < fmt.min_q for v in box.lo) or any(
        _floor(v * fmt.scale) > fmt.max_q for v in box.hi
    )
    empty = any(low > high for low, high in zip(lo, hi))
    pairs = ", ".join(
        f"[{float(a):.10g}, {float(b):.10g}] -> [{p}, {q}]" for a, b, p, q in zip(box.lo, box.hi, lo, hi)
    )
    return CBox(tuple(map(str, lo)), tuple(map(str, hi)), empty, clipped, pairs)


def float_box(box: Box, number: FloatFormat) -> CBox:
    lo = [_float_up(v, number) for v in box.lo]
    hi = [_float_down(v, number) for v in box.hi]
    empty = any(low > high for low, high in zip(lo, hi))
    pairs = ", ".join(f"[{float(a):.10g}, {float(b):.10g}]" for a, b in zip(box.lo, box.hi))
    return CBox(
        tuple(float_literal(v, number.c_type) for v in lo),
        tuple(float_literal(v, number.c_type) for v in hi),
        empty,
        False,
        pairs,
    )


def box_is_empty(qnet, box: Box) -> bool:
    """Does the box hold no representable input of the network's number format?"""
    number = qnet.number
    return (fixed_box(box, number) if isinstance(number, FixedFormat) else float_box(box, number)).empty
