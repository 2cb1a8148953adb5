"""Scalar path: the interval domain over SSA values: transfer functions and facts from conditions.

An interval is a pair `(lo, hi)`, inclusive: Python ints for integer and boolean nodes (exact), and
Python floats for float nodes, where `(nan, nan)` stands for "any value, NaN included". Every
transfer function is sound for the exact C semantics of `qverify.engine.scalar.semantics`: integer results
that may wrap get the whole range of their type; float bounds are the operation applied to the
endpoints in the node's type (IEEE rounding is monotone, so this is sound and, per operation, exact).

`facts(cond)` gives intervals that hold for some nodes whenever `cond` holds (used with assumes and
asserts): `x >= c`, `x <= c`, conjunctions, and the hull over the disjuncts of a disjunction.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qverify.engine import c_types
from qverify.engine.scalar import semantics as sem
from qverify.engine.scalar import ssa
from qverify.engine.scalar.ssa import Binary, Cast, Compare, Const, Input, Ite, Node, Read, Step, Unary
from qverify.errors import InternalError

Interval = tuple
NAN = float("nan")
ANY_FLOAT = (NAN, NAN)
TRUE_I, FALSE_I, BOOL_I = (1, 1), (0, 0), (0, 1)


def type_range(ty: c_types.Type) -> Interval:
    if ty.is_float:
        return ANY_FLOAT
    return (ty.min, ty.max)


def is_any_float(interval: Interval) -> bool:
    return math.isnan(interval[0])


def meet(a: Interval, b: Interval) -> Interval:
    """The intersection (an empty result is returned as is: lo > hi)."""
    if isinstance(a[0], float) and math.isnan(a[0]):
        return b
    if isinstance(b[0], float) and math.isnan(b[0]):
        return a
    return (max(a[0], b[0]), min(a[1], b[1]))


def hull(a: Interval, b: Interval) -> Interval:
    if (isinstance(a[0], float) and math.isnan(a[0])) or (isinstance(b[0], float) and math.isnan(b[0])):
        return ANY_FLOAT
    return (min(a[0], b[0]), max(a[1], b[1]))


def _fit(ty: c_types.Type, lo: int, hi: int) -> Interval:
    """Exact integer bounds if they fit the type, else the type range (the result may wrap)."""
    if lo >= ty.min and hi <= ty.max:
        return (lo, hi)
    return (ty.min, ty.max)


def _float_fit(ty: c_types.Type, lo: float, hi: float) -> Interval:
    if math.isnan(lo) or math.isnan(hi):
        return ANY_FLOAT
    return (sem.round_float(ty, lo), sem.round_float(ty, hi))


def _fop(ty: c_types.Type, op: str, a: float, b: float) -> float:
    value = sem.binary(op, ty, a, b)
    return float(value)  # type: ignore[arg-type]


def _float_binary(node: Binary, a: Interval, b: Interval) -> Interval:
    ty, op = node.ty, node.op
    if is_any_float(a) or is_any_float(b):
        return ANY_FLOAT
    if op == "add":
        lo, hi = _fop(ty, "add", a[0], b[0]), _fop(ty, "add", a[1], b[1])
    elif op == "sub":
        lo, hi = _fop(ty, "sub", a[0], b[1]), _fop(ty, "sub", a[1], b[0])
    elif op == "mul":
        products = [_fop(ty, "mul", x, y) for x in a for y in b]
        lo, hi = min(products), max(products)
        if any(math.isnan(p) for p in products):
            return ANY_FLOAT
    elif op == "div":
        if b[0] <= 0 <= b[1]:
            return ANY_FLOAT
        quotients = [_fop(ty, "div", x, y) for x in a for y in b]
        lo, hi = min(quotients), max(quotients)
    elif op in ("max", "min"):
        f = max if op == "max" else min
        lo, hi = f(a[0], b[0]), f(a[1], b[1])
    else:
        raise InternalError(f"intervals: float operation {op}")
    if math.isnan(lo) or math.isnan(hi) or (math.isinf(lo) and math.isinf(hi) and lo > 0 > hi):
        return ANY_FLOAT
    return (lo, hi)


def _bits_for(value: int) -> int:
    return max(int(value).bit_length(), 1)


def _int_binary(node: Binary, a: Interval, b: Interval) -> Interval:
    ty, op = node.ty, node.op
    if op == "land":
        return (a[0] & b[0], a[1] & b[1])
    if op == "lor":
        return (a[0] | b[0], a[1] | b[1])
    if op == "add":
        return _fit(ty, a[0] + b[0], a[1] + b[1])
    if op == "sub":
        return _fit(ty, a[0] - b[1], a[1] - b[0])
    if op == "mul":
        products = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return _fit(ty, min(products), max(products))
    if op == "div":
        if b[0] <= 0 <= b[1]:
            bound = max(abs(a[0]), abs(a[1]))
            return _fit(ty, -bound, bound)
        quotients = [sem.trunc_div(x, y) for x in a for y in b]
        return _fit(ty, min(quotients), max(quotients))
    if op == "rem":
        limit = max(abs(b[0]), abs(b[1])) - 1
        if limit < 0:
            return (0, 0)
        lo = 0 if a[0] >= 0 else -min(limit, abs(a[0]))
        hi = 0 if a[1] <= 0 else min(limit, a[1])
        return (lo, hi)
    if op in ("shl", "shr", "shr_rna"):
        if b[0] < 0 or b[1] >= ty.bits:
            return type_range(ty)
        if op == "shl":
            candidates = [x << s for x in a for s in b]
            return _fit(ty, min(candidates), max(candidates))
        shift = sem.shr_rna if op == "shr_rna" else (lambda x, s: x >> s)
        candidates = [shift(x, s) for x in a for s in b]
        return _fit(ty, min(candidates), max(candidates))
    if op == "band":
        if a[0] >= 0 and b[0] >= 0:
            return (0, min(a[1], b[1]))
        if b[0] >= 0:
            return (0, b[1])
        if a[0] >= 0:
            return (0, a[1])
        return type_range(ty)
    if op in ("bor", "bxor"):
        if a[0] >= 0 and b[0] >= 0:
            top = (1 << max(_bits_for(a[1]), _bits_for(b[1]))) - 1
            return _fit(ty, 0, top)
        return type_range(ty)
    if op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    raise InternalError(f"intervals: integer operation {op}")


def _compare(node: Compare, a: Interval, b: Interval) -> Interval:
    if is_any_float(a) or is_any_float(b):
        return BOOL_I
    op = node.op
    if op == "lt":
        always, never = a[1] < b[0], a[0] >= b[1]
    elif op == "le":
        always, never = a[1] <= b[0], a[0] > b[1]
    elif op == "gt":
        always, never = a[0] > b[1], a[1] <= b[0]
    elif op == "ge":
        always, never = a[0] >= b[1], a[1] < b[0]
    elif op == "eq":
        always, never = a[0] == a[1] == b[0] == b[1], a[1] < b[0] or b[1] < a[0]
    else:
        always, never = a[1] < b[0] or b[1] < a[0], a[0] == a[1] == b[0] == b[1]
    if always:
        return TRUE_I
    if never:
        return FALSE_I
    return BOOL_I


def _cast(node: Cast, a: Interval) -> Interval:
    to, source = node.ty, node.a.ty
    if to.is_bool:
        if is_any_float(a):
            return BOOL_I
        if a[0] == a[1] == 0:
            return FALSE_I
        if a[0] > 0 or a[1] < 0:
            return TRUE_I
        return BOOL_I
    if to.is_float:
        if source.is_float:
            return _float_fit(to, a[0], a[1]) if not is_any_float(a) else ANY_FLOAT
        return (float(sem.cast(to, source, a[0])), float(sem.cast(to, source, a[1])))
    if source.is_float:
        if is_any_float(a) or math.isinf(a[0]) or math.isinf(a[1]):
            return type_range(to)
        return _fit(to, int(a[0]), int(a[1]))  # truncation toward zero is monotone
    return _fit(to, a[0], a[1])


_TABLE_RANGES: dict[int, tuple[ssa.Table, np.ndarray]] = {}


def _table_values(table: ssa.Table) -> np.ndarray:
    cached = _TABLE_RANGES.get(id(table))
    if cached is not None and cached[0] is table:
        return cached[1]
    array = np.array(table.values, dtype=object if table.ty.is_int else np.float64)
    _TABLE_RANGES[id(table)] = (table, array)
    return array


def _read(node: Read, index: Interval) -> Interval:
    values = _table_values(node.table)
    lo = min(max(int(index[0]), 0), len(values) - 1)
    hi = min(max(int(index[1]), 0), len(values) - 1)
    part = values[lo : hi + 1]
    if node.ty.is_float:
        if np.any(np.isnan(part.astype(np.float64))):
            return ANY_FLOAT
        return (float(np.min(part)), float(np.max(part)))
    return (int(min(part)), int(max(part)))


def _step(node: Step, a: Interval) -> Interval:
    starts, values = node.starts, node.values
    first = 0
    while first + 1 < len(starts) and starts[first + 1] <= a[0]:
        first += 1
    last = first
    while last + 1 < len(starts) and starts[last + 1] <= a[1]:
        last += 1
    part = values[first : last + 1]
    return (min(part), max(part))


def transfer(node: Node, get: Callable[[Node], Interval]) -> Interval:
    """The interval of `node` from its children's intervals (`get(child)`)."""
    if isinstance(node, Const):
        return (node.value, node.value)
    if isinstance(node, Input):
        return type_range(node.ty)
    if isinstance(node, Binary):
        a, b = get(node.a), get(node.b)
        if node.ty.is_float:
            return _float_binary(node, a, b)
        return _int_binary(node, a, b)
    if isinstance(node, Compare):
        return _compare(node, get(node.a), get(node.b))
    if isinstance(node, Ite):
        c = get(node.c)
        if c == TRUE_I:
            return get(node.a)
        if c == FALSE_I:
            return get(node.b)
        return hull(get(node.a), get(node.b))
    if isinstance(node, Cast):
        return _cast(node, get(node.a))
    if isinstance(node, Unary):
        a = get(node.a)
        if node.op == "lnot":
            return (1 - a[1], 1 - a[0])
        if node.ty.is_float:
            return ANY_FLOAT if is_any_float(a) else (-a[1], -a[0])
        if node.op == "neg":
            return _fit(node.ty, -a[1], -a[0])
        return _fit(node.ty, -a[1] - 1, -a[0] - 1)  # ~x = -x - 1
    if isinstance(node, Read):
        return _read(node, get(node.index))
    if isinstance(node, Step):
        return _step(node, get(node.a))
    raise InternalError(f"intervals: unknown node kind {type(node).__name__}")


# ------------------------------------------------------------------------------ facts

_FLIP = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "eq": "eq", "ne": "ne"}
_NEGATE = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}


def _next_float(ty: c_types.Type, value: float, up: bool) -> float:
    dtype = sem.float_dtype(ty)
    return float(np.nextafter(dtype(value), dtype(np.inf if up else -np.inf)))


def _compare_fact(op: str, node: Node, value: float) -> Interval | None:
    ty = node.ty
    if ty.is_float:
        if math.isnan(value):
            return None
        if op == "ge":
            return (value, math.inf)
        if op == "gt":
            return (_next_float(ty, value, True), math.inf)
        if op == "le":
            return (-math.inf, value)
        if op == "lt":
            return (-math.inf, _next_float(ty, value, False))
        if op == "eq":
            return (value, value)
        return None
    if op == "ge":
        return (value, ty.max)
    if op == "gt":
        return (value + 1, ty.max)
    if op == "le":
        return (ty.min, value)
    if op == "lt":
        return (ty.min, value - 1)
    if op == "eq":
        return (value, value)
    return None


def _widening_source(node: Node) -> Node | None:
    """x when node is a value-preserving cast of an integer x (its type holds all of x's)."""
    if (
        isinstance(node, Cast)
        and node.ty.is_int
        and node.a.ty.is_int
        and node.ty.min <= node.a.ty.min
        and node.a.ty.max <= node.ty.max
    ):
        return node.a
    return None


def facts(cond: Node, positive: bool = True) -> dict[int, tuple[Node, Interval]]:
    """Node intervals implied by `cond` (or by its negation when positive is False)."""
    if isinstance(cond, Const):
        return {}
    if isinstance(cond, Unary) and cond.op == "lnot":
        return facts(cond.a, not positive)
    if isinstance(cond, Binary) and cond.op in ("land", "lor"):
        conjunctive = (cond.op == "land") == positive
        left, right = facts(cond.a, positive), facts(cond.b, positive)
        if conjunctive:
            merged = dict(left)
            for key, (node, interval) in right.items():
                merged[key] = (node, meet(merged[key][1], interval)) if key in merged else (node, interval)
            return merged
        return {
            key: (node, hull(interval, right[key][1]))
            for key, (node, interval) in left.items()
            if key in right
        }
    if isinstance(cond, Compare):
        op = cond.op if positive else _NEGATE[cond.op]
        if not positive and cond.a.ty.is_float:
            return {}  # !(a < b) is not a >= b when NaN is possible
        a, b = cond.a, cond.b
        if isinstance(a, Const) and not isinstance(b, Const):
            a, b, op = b, a, _FLIP[op]
        if not isinstance(b, Const) or isinstance(a, Const):
            return {}
        result: dict[int, tuple[Node, Interval]] = {}
        interval = _compare_fact(op, a, b.value)
        if interval is None:
            return {}
        result[a.id] = (a, interval)
        source = _widening_source(a)
        while source is not None:
            narrowed = meet(interval, type_range(source.ty))
            result[source.id] = (source, narrowed)
            source = _widening_source(source)
        return result
    if cond.ty.is_bool and positive:
        return {cond.id: (cond, TRUE_I)}
    return {}
