"""Network level: the lookup-table activations of a harness (`qv_sigmoid`, `qv_tanh`), read back as `Lut`s.

The template writes, per activation used, the table `qv_NAME_table[N]` and the function
`templates/_lut.c.j2` renders: saturation outside [-a, a], then the index by rounding, in integer
arithmetic for fixed point (`((int64_t)x + QA) * (N - 1) + QA) / (2 QA)`) or in the float type
(`(int)((x + A) * SCALE + HALF)`, clamped to N - 1; every operation cast back for `_Float16`).

A function is recognised when it is, token for token, what that template renders for the numbers
it holds: its literals (QA or A, SCALE, HALF, the saturation values) are read from the harness's
own function, the template is rendered with them and the table's size, and both are compared as
pycparser prints them. The numbers are then checked to be the ones the simulator's `lut_fixed` /
`lut_float` computes with: QA a positive word, the divisor 2 QA, A a value of the type, SCALE the
type's rounding of (N - 1) / (2 A) and HALF one half (the table and the saturation values are
read exactly, as every constant). The `Lut` is then `quant.lut.table_lut` of these values, so its
error bound is the one `design_lut` states for the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from pycparser import c_ast, c_generator, c_parser

from qverify.engine.netlevel.lift.cnodes import fail, float_constant, integer_constant
from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.network import Activation
from qverify.quant import FixedFormat, FloatFormat
from qverify.quant.lut import LIPSCHITZ, Lut, table_lut

LUT_ACTIVATIONS = {f"qv_{activation.value}": activation for activation in LIPSCHITZ}
_PRELUDE = "typedef int qv_num; typedef long long int64_t;\n"  # names only: the text is compared


@dataclass(frozen=True, slots=True)
class _Literals:
    """The literal texts of one function (as written), and the nodes they came from."""

    bound: c_ast.Node  # QA or A, from `if (x < -BOUND)`
    sat_lo: c_ast.Node
    sat_hi: c_ast.Node
    scale: c_ast.Node | None = None  # float formats
    half: c_ast.Node | None = None


def _text(node: c_ast.Node) -> str:
    return c_generator.CGenerator().visit(node)


def _literals(function: c_ast.FuncDef, fixed: bool) -> _Literals:
    """The literals at the template's positions (any other shape fails the comparison after)."""
    items = list(function.body.block_items or [])
    offset = 0 if fixed else 1
    try:
        low, high = items[offset], items[offset + 1]
        bound = low.cond.right.expr
        sat_lo = low.iftrue.block_items[0].expr
        sat_hi = high.iftrue.block_items[0].expr
        if fixed:
            return _Literals(bound, sat_lo, sat_hi)
        position = items[offset + 2].rvalue.expr
        while isinstance(position, c_ast.Cast):
            position = position.expr
        inner = position.left
        while isinstance(inner, c_ast.Cast):
            inner = inner.expr
        return _Literals(bound, sat_lo, sat_hi, inner.right, position.right)
    except (AttributeError, IndexError, TypeError):
        raise fail(function, f"{function.decl.name} is not the template's lookup-table function") from None


def _render(name: str, n: int, literals: _Literals, number: FixedFormat | FloatFormat, qa: int) -> str:
    from qverify.codegen.render import render_lut_function  # jinja2: paid by table harnesses only

    entry = {"name": name, "n": n, "sat_lo": _text(literals.sat_lo), "sat_hi": _text(literals.sat_hi)}
    fixed = isinstance(number, FixedFormat)
    if fixed:
        entry["qa"] = qa
    else:
        entry.update(a=_text(literals.bound), scale=_text(literals.scale), half=_text(literals.half))
    return render_lut_function(entry, fixed, not fixed and number.is_half)


def _same_text(function: c_ast.FuncDef, expected: str) -> bool:
    parsed = c_parser.CParser().parse(_PRELUDE + expected, "<template>")
    return _text(function) == _text(parsed.ext[-1])


def _float_value(node: c_ast.Node, number: FloatFormat, what: str) -> float:
    """A float literal's value, which the format's type must hold exactly."""
    found = float_constant(node)
    if found is None:
        raise fail(node, f"{what} is not a floating literal")
    value = float(found[0])
    if Fraction(value) != found[0] or float(number.dtype(value)) != value:
        raise fail(node, f"{what} {_text(node)} is not a value of {number.c_type}")
    return value


def _word(node: c_ast.Node, number: FixedFormat, what: str) -> int:
    value = integer_constant(node)
    if value is None or not number.min_q <= value <= number.max_q:
        raise fail(node, f"{what} {_text(node)} is not a word of {number}")
    return value


def match_lut(function: c_ast.FuncDef, table: np.ndarray, number: FixedFormat | FloatFormat) -> Lut:
    """The `Lut` of `qv_NAME` (module docstring); `table`: qv_NAME_table in the format's domain."""
    name = function.decl.name
    activation = LUT_ACTIVATIONS[name]
    n = int(table.shape[0]) if table.ndim == 1 else 0
    if n < 2:
        raise fail(function, f"{name}_table is not a one-dimensional table of at least two entries")
    fixed = isinstance(number, FixedFormat)
    literals = _literals(function, fixed)
    qa = integer_constant(literals.bound) if fixed else 0
    if fixed and (qa is None or qa <= 0):
        raise fail(function, f"{name}: the table's half range is not a positive word")
    if not _same_text(function, _render(activation.value, n, literals, number, qa or 0)):
        raise fail(function, f"{name} is not the template's lookup-table function for its table")
    if fixed:
        sat_lo, sat_hi = (
            _word(literals.sat_lo, number, "saturation value"),
            _word(literals.sat_hi, number, "saturation value"),
        )
        return table_lut(activation, number, qa / number.scale, qa, table, sat_lo, sat_hi)
    half_range = _float_value(literals.bound, number, "half range")
    scale = _float_value(literals.scale, number, "index scale")  # type: ignore[arg-type]
    if half_range <= 0 or scale != float(number.dtype((n - 1) / (2.0 * half_range))):
        raise fail(function, f"{name}: the index scale is not (N - 1) / (2 a) in {number.c_type}")
    if _float_value(literals.half, number, "rounding offset") != 0.5:  # type: ignore[arg-type]
        raise fail(function, f"{name}: the index is not rounded by adding one half")
    sat_lo = _float_value(literals.sat_lo, number, "saturation value")
    sat_hi = _float_value(literals.sat_hi, number, "saturation value")
    return table_lut(activation, number, half_range, 0, table, sat_lo, sat_hi)


def check_tables(functions: dict[str, c_ast.FuncDef], used: set[Activation], where: str) -> None:
    """Every table activation a layer applies has its function, and every function is used."""
    defined = {LUT_ACTIVATIONS[name] for name in functions if name in LUT_ACTIVATIONS}
    if used - defined:
        missing = ", ".join(sorted(f"qv_{a.value}" for a in used - defined))
        raise NotRecognised(f"{where}: {missing} is called but not defined in the harness")
    if defined - used:
        extra = ", ".join(sorted(f"qv_{a.value}" for a in defined - used))
        raise NotRecognised(f"{where}: {extra} is defined but no layer applies it")
