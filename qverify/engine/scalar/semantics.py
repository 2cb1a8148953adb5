"""Scalar path: scalar semantics of every SSA operation, on Python ints and floats: the reference for
folding.

C rules as gcc implements them on x86-64 (the replay oracle): integers are two's complement and
wrap (signed overflow is undefined in C and does not occur in qverify's generated code, which forms
sums and products in int64 where they are exact); `>>` of a negative value is arithmetic; `/` and
`%` truncate toward zero; float operations round to nearest even in the operation's type (no FMA),
binary16 (`_Float16`) included: numpy's float16 arithmetic computes in float32 and rounds back, which
is the correctly rounded binary16 result (double rounding is innocuous since 24 >= 2 * 11 + 2);
float to int truncates toward zero. Division by zero, shifts by the width or more and out-of-range
float-to-int conversions are undefined in C; here they give 0, as in the numpy evaluator, and are
assumed not to happen (as with ESBMC's --no-div-by-zero-check).

The numpy twin is `qverify.engine.scalar.evaluate`; the two must agree (tests compare them).
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from qverify.engine.c_types import Type


def wrap(ty: Type, value: int) -> int:
    """An integer brought into the range of `ty` by two's complement wrap-around."""
    if ty.kind == "bool":
        return 1 if value else 0
    mask = (1 << ty.bits) - 1
    value &= mask
    if ty.signed and value >> (ty.bits - 1):
        value -= 1 << ty.bits
    return value


FLOAT_DTYPES = {16: np.float16, 32: np.float32, 64: np.float64}
FLOAT_MAX = {16: 65504.0, 32: float(np.finfo(np.float32).max), 64: float(np.finfo(np.float64).max)}


def float_dtype(ty: Type) -> type:
    """The numpy dtype of a float type (float16 for _Float16, float32, float64)."""
    return FLOAT_DTYPES[ty.bits]


def round_float(ty: Type, value: float) -> float:
    """A Python float rounded to the float type (to nearest even; numpy converts a double to
    float16/float32 with one correct rounding, overflow to inf)."""
    if ty.bits == 64:
        return float(value)
    with np.errstate(over="ignore"):
        return float(FLOAT_DTYPES[ty.bits](value))


def round_float_directed(ty: Type, value: float, up: bool) -> float:
    """The least value of the float type >= `value` (up) or the greatest <= `value` (down)."""
    nearest = round_float(ty, value)
    if nearest == value or math.isnan(value):
        return nearest
    dtype = FLOAT_DTYPES[ty.bits]
    if (nearest > value) != up:
        with np.errstate(over="ignore"):
            return float(np.nextafter(dtype(nearest), dtype(math.inf if up else -math.inf)))
    return nearest


def normalise(ty: Type, value: float) -> int | float:
    if ty.kind == "float":
        return round_float(ty, float(value))
    return wrap(ty, int(value))


def unary(op: str, ty: Type, a: float) -> int | float:
    if op == "lnot":
        return 0 if a else 1
    if op == "neg":
        return -a if ty.kind == "float" else wrap(ty, -a)
    if op == "bnot":
        return wrap(ty, ~a)
    raise ValueError(op)


def trunc_div(a: int, b: int) -> int:
    """C integer division: the quotient truncated toward zero."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def shr_rna(a: int, shift: int) -> int:
    """a / 2^shift rounded to nearest, ties away from zero (fxp_shift, `nearest`)."""
    if shift == 0:
        return a
    half = 1 << (shift - 1)
    return (a + half) >> shift if a >= 0 else -((-a + half) >> shift)


def binary(op: str, ty: Type, a: float, b: float, b_ty: Type | None = None) -> int | float | None:
    """The value of `a op b` in type `ty`; None when the operation is undefined here (not folded)."""
    if ty.kind == "float":
        dtype = float_dtype(ty)
        x, y = dtype(a), dtype(b)
        with np.errstate(all="ignore"):
            if op == "add":
                return float(x + y)
            if op == "sub":
                return float(x - y)
            if op == "mul":
                return float(x * y)
            if op == "div":
                return float(x / y)
            if op == "max":
                return float(max(x, y))
            if op == "min":
                return float(min(x, y))
        return None
    if op == "land":
        return 1 if (a and b) else 0
    if op == "lor":
        return 1 if (a or b) else 0
    if op == "add":
        return wrap(ty, a + b)
    if op == "sub":
        return wrap(ty, a - b)
    if op == "mul":
        return wrap(ty, a * b)
    if op == "div":
        return 0 if b == 0 else wrap(ty, trunc_div(a, b))
    if op == "rem":
        return 0 if b == 0 else wrap(ty, a - b * trunc_div(a, b))
    if op in ("shl", "shr", "shr_rna"):
        if b < 0 or b >= ty.bits:
            return 0
        if op == "shl":
            return wrap(ty, a << b)
        if op == "shr":
            return a >> b  # arithmetic for signed (Python ints are exact), logical for unsigned (a >= 0)
        return wrap(ty, shr_rna(a, b))
    if op == "band":
        return wrap(ty, a & b)
    if op == "bor":
        return wrap(ty, a | b)
    if op == "bxor":
        return wrap(ty, a ^ b)
    if op == "max":
        return max(a, b)
    if op == "min":
        return min(a, b)
    raise ValueError(op)


COMPARISONS = {
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
}  # also applied elementwise to numpy arrays by the evaluator


def compare(op: str, a: float, b: float) -> bool:
    if op not in COMPARISONS:
        raise ValueError(op)
    return COMPARISONS[op](a, b)


def cast(to: Type, source: Type, value: float) -> int | float:
    if to.kind == "bool":
        return 1 if value != 0 else 0
    if to.kind == "float":
        if source.kind == "float":
            return round_float(to, float(value))
        # int -> float: one correct rounding (numpy's C cast of int64/uint64; half: inf from 65520)
        array = np.array([value], dtype=np.uint64 if value >= 1 << 63 else np.int64)
        with np.errstate(over="ignore"):
            return float(array.astype(float_dtype(to))[0])
    if source.kind == "float":
        if math.isnan(value) or math.isinf(value):
            return 0
        return wrap(to, int(value))  # int() truncates toward zero, exactly
    return wrap(to, int(value))


def step_value(x: int, starts: tuple[int, ...], values: tuple[int, ...]) -> int:
    """values[k] for the last k with starts[k] <= x (values[0] below starts[0])."""
    low, high = 0, len(starts) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if starts[middle] <= x:
            low = middle
        else:
            high = middle - 1
    return values[low]
