"""Scalar path: exact SMT encoding of a query: bit-vectors with interval-narrowed widths, IEEE floating
point.

`SmtEncoder(builder, interval)` walks the SSA of a query and builds terms through a `TermBuilder`
(implemented by each solver module, the only importer of its library). Each integer node is a
bit-vector holding its *value* in two's complement with the fewest bits its interval allows (the
interval holds for every execution that reaches the query's assertion, so nothing is lost):

- ring operations (+, -, *, unary -, <<): both operands truncated/extended to the result's width
  (the value modulo 2^w determines it, as it lies in the interval), done there;
- >>, /, %, comparisons, max/min: at a width holding both operands exactly (+1 for / and rounding);
- casts: value-preserving ones only change the width; wrapping ones take the low bits of the
  target type and re-extend; bitwise operations of unsigned types at the type's full width;
- table reads and step functions: ite chains over the reachable indices/pieces only;
- floats: SMT-LIB FloatingPoint, every operation rounded to nearest even, (int) truncating (RTZ).

An input is a fresh bit-vector (float) of its narrowed width; its model value is read back exactly.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Protocol

from qverify.engine import c_types
from qverify.engine.scalar import ssa
from qverify.engine.scalar.passes import intervals as iv
from qverify.engine.scalar.ssa import Binary, Cast, Compare, Const, Input, Ite, Node, Read, Step, Unary
from qverify.errors import InternalError, UnsupportedError

Term = Any
FP_FORMATS = {16: (5, 11), 32: (8, 24), 64: (11, 53)}  # SMT-LIB (exponent bits, significand bits)
_PACK = {16: (">e", ">H"), 32: (">f", ">I"), 64: (">d", ">Q")}


class TermBuilder(Protocol):
    def bv_const(self, value: int, width: int) -> Term: ...
    def bv_var(self, name: str, width: int) -> Term: ...
    def fp_var(self, name: str, bits: int) -> Term: ...
    def fp_const(self, value: float, bits: int) -> Term: ...
    def true(self) -> Term: ...
    def false(self) -> Term: ...
    def op(self, name: str, *args: Term) -> Term: ...
    def extract(self, term: Term, high: int, low: int) -> Term: ...
    def sext(self, term: Term, extra: int) -> Term: ...
    def zext(self, term: Term, extra: int) -> Term: ...
    def fp_from_sbv(self, term: Term, bits: int) -> Term: ...
    def fp_to_sbv(self, term: Term, width: int) -> Term: ...
    def fp_convert(self, term: Term, bits: int) -> Term: ...


def needed_width(lo: int, hi: int) -> int:
    """The fewest bits w with -2^(w-1) <= lo and hi <= 2^(w-1) - 1."""
    width = 1
    while not (-(1 << (width - 1)) <= lo and hi <= (1 << (width - 1)) - 1):
        width += 1
    return width


class SmtEncoder:
    """SSA nodes to terms; `width(node)` is the narrowed width of an integer node."""

    def __init__(self, builder: TermBuilder, interval, narrow: bool = True) -> None:
        self.b = builder
        self.interval = interval
        self.narrow = narrow
        self.memo: dict[int, Term] = {}
        self.widths: dict[int, int] = {}
        self.inputs: dict[int, tuple[Node, Term]] = {}
        self.bits_total = 0

    # -------------------------------------------------------------- widths

    def width(self, node: Node) -> int:
        found = self.widths.get(node.id)
        if found is not None:
            return found
        ty = node.ty
        full = ty.bits + (0 if ty.signed else 1)
        if self.narrow:
            lo, hi = self.interval(node)
            width = min(needed_width(int(lo), int(hi)), full)
        else:
            width = full
        self.widths[node.id] = width
        return width

    def fit(self, term: Term, have: int, want: int) -> Term:
        """A signed value at `have` bits re-expressed at `want` bits (it must fit)."""
        if want == have:
            return term
        if want > have:
            return self.b.sext(term, want - have)
        return self.b.extract(term, want - 1, 0)

    def operand(self, node: Node, width: int) -> Term:
        return self.fit(self.term(node), self.width(node), width)

    # -------------------------------------------------------------- walk

    def term(self, root: Node) -> Term:
        memo = self.memo
        for node in ssa.topological([root], memo):
            if node.id not in memo:
                memo[node.id] = self._translate(node)
        return memo[root.id]

    def _translate(self, node: Node) -> Term:
        b = self.b
        ty = node.ty
        if isinstance(node, Const):
            if ty.is_bool:
                return b.true() if node.value else b.false()
            if ty.is_float:
                return b.fp_const(float(node.value), ty.bits)
            return b.bv_const(int(node.value), self.width(node))
        if isinstance(node, Input):
            if ty.is_float:
                term = b.fp_var(f"in{node.index}", ty.bits)
            elif ty.is_bool:
                raise UnsupportedError("boolean nondet inputs in the SMT encoding")
            else:
                term = b.bv_var(f"in{node.index}", self.width(node))
                self.bits_total += self.width(node)
            self.inputs[node.index] = (node, term)
            return term
        if ty.is_bool:
            return self._bool(node)
        if ty.is_float:
            return self._float(node)
        return self._int(node)

    # booleans -----------------------------------------------------------------

    def _bool(self, node: Node) -> Term:
        b = self.b
        if isinstance(node, Compare):
            if node.a.ty.is_float:
                a, c = self.term(node.a), self.term(node.b)
                names = {"lt": "fp_lt", "le": "fp_le", "gt": "fp_gt", "ge": "fp_ge", "eq": "fp_eq"}
                if node.op == "ne":
                    return b.op("not", b.op("fp_eq", a, c))
                return b.op(names[node.op], a, c)
            if node.a.ty.is_bool:
                a, c = self.term(node.a), self.term(node.b)
                equal = b.op("iff", a, c)
                if node.op == "eq":
                    return equal
                if node.op == "ne":
                    return b.op("not", equal)
                a, c = (
                    b.op("ite", a, b.bv_const(1, 2), b.bv_const(0, 2)),
                    b.op("ite", c, b.bv_const(1, 2), b.bv_const(0, 2)),
                )
                return b.op({"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}[node.op], a, c)
            width = max(self.width(node.a), self.width(node.b))
            a, c = self.operand(node.a, width), self.operand(node.b, width)
            names = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}
            if node.op == "ne":
                return b.op("not", b.op("eq", a, c))
            return b.op(names[node.op], a, c)
        if isinstance(node, Unary) and node.op == "lnot":
            return b.op("not", self.term(node.a))
        if isinstance(node, Binary) and node.op in ("land", "lor", "band", "bor", "bxor"):
            name = {"land": "and", "band": "and", "lor": "or", "bor": "or", "bxor": "xor"}[node.op]
            return b.op(name, self.term(node.a), self.term(node.b))
        if isinstance(node, Ite):
            return b.op("ite", self.term(node.c), self.term(node.a), self.term(node.b))
        if isinstance(node, Cast):
            source = node.a
            if source.ty.is_float:
                return b.op("not", b.op("fp_eq", self.term(source), b.fp_const(0.0, source.ty.bits)))
            return b.op("not", b.op("eq", self.term(source), b.bv_const(0, self.width(source))))
        raise UnsupportedError(f"SMT encoding of boolean {type(node).__name__}")

    # integers -----------------------------------------------------------------

    def _type_width(self, ty: c_types.Type) -> int:
        return ty.bits

    def _extend_value(self, term: Term, have: int, want: int, signed: bool) -> Term:
        if want == have:
            return term
        if want < have:
            return self.b.extract(term, want - 1, 0)
        return self.b.sext(term, want - have) if signed else self.b.zext(term, want - have)

    def _int(self, node: Node) -> Term:
        b = self.b
        ty = node.ty
        w = self.width(node)
        if isinstance(node, Binary):
            op = node.op
            if op in ("add", "sub", "mul"):
                # the value modulo 2^m determines the result (m = min(w, type bits))
                m = min(w, ty.bits)
                a, c = self.operand(node.a, m), self.operand(node.b, m)
                return self._extend_value(b.op(op, a, c), m, w, ty.signed)
            if op in ("shl",):
                if not isinstance(node.b, Const):
                    raise UnsupportedError("shift by a non-constant amount in the SMT encoding")
                m = min(w, ty.bits)
                amount = int(node.b.value)
                if amount >= m:
                    return b.bv_const(0, w)
                a = self.operand(node.a, m)
                return self._extend_value(b.op("shl", a, b.bv_const(amount, m)), m, w, ty.signed)
            if op in ("shr", "shr_rna"):
                if not isinstance(node.b, Const):
                    raise UnsupportedError("shift by a non-constant amount in the SMT encoding")
                amount = int(node.b.value)
                wa = max(self.width(node.a) + (1 if op == "shr_rna" else 0), amount + 2)
                a = self.operand(node.a, wa)
                shift = b.bv_const(amount, wa)
                if op == "shr":
                    result = b.op("ashr", a, shift)
                else:
                    half = b.bv_const(1 << (amount - 1), wa) if amount > 0 else b.bv_const(0, wa)
                    positive = b.op("ashr", b.op("add", a, half), shift)
                    negative = b.op("neg", b.op("ashr", b.op("add", b.op("neg", a), half), shift))
                    result = b.op("ite", b.op("sge", a, b.bv_const(0, wa)), positive, negative)
                return self.fit(result, wa, w)
            if op in ("div", "rem"):
                width = max(self.width(node.a), self.width(node.b)) + 1
                a, c = self.operand(node.a, width), self.operand(node.b, width)
                result = b.op("sdiv" if op == "div" else "srem", a, c)
                # C: x / 0 is undefined; the evaluator gives 0
                zero = b.op("eq", c, b.bv_const(0, width))
                result = b.op("ite", zero, b.bv_const(0, width), result)
                return self.fit(result, width, w)
            if op in ("max", "min"):
                width = max(self.width(node.a), self.width(node.b), w)
                a, c = self.operand(node.a, width), self.operand(node.b, width)
                pick = b.op("sge" if op == "max" else "sle", a, c)
                return self.fit(b.op("ite", pick, a, c), width, w)
            if op in ("band", "bor", "bxor"):
                if ty.signed:
                    width = max(self.width(node.a), self.width(node.b))
                    a, c = self.operand(node.a, width), self.operand(node.b, width)
                    return self.fit(b.op({"band": "and", "bor": "or", "bxor": "xor"}[op], a, c), width, w)
                full = ty.bits
                a, c = self._bits(node.a, full), self._bits(node.b, full)
                result = b.op({"band": "and", "bor": "or", "bxor": "xor"}[op], a, c)
                return self._extend_value(result, full, w, False)
            raise UnsupportedError(f"SMT encoding of integer operation {op}")
        if isinstance(node, Unary):
            if node.op == "neg":
                m = min(w, ty.bits)
                return self._extend_value(b.op("neg", self.operand(node.a, m)), m, w, ty.signed)
            if node.op == "bnot":
                if ty.signed:
                    width = max(self.width(node.a), w)
                    return self.fit(b.op("not", self.operand(node.a, width)), width, w)
                full = ty.bits
                return self._extend_value(b.op("not", self._bits(node.a, full)), full, w, False)
        if isinstance(node, Cast):
            return self._int_cast(node)
        if isinstance(node, Ite):
            return b.op("ite", self.term(node.c), self.operand(node.a, w), self.operand(node.b, w))
        if isinstance(node, Read):
            return self._read(node)
        if isinstance(node, Step):
            return self._step(node)
        raise InternalError(f"SMT encoding: integer node {type(node).__name__}")

    def _bits(self, node: Node, full: int) -> Term:
        """The `full`-bit two's complement pattern of an integer node's value."""
        have = self.width(node)
        term = self.term(node)
        if have >= full:
            return self.b.extract(term, full - 1, 0) if have > full else term
        return self.b.sext(term, full - have)

    def _int_cast(self, node: Cast) -> Term:
        b = self.b
        ty, source = node.ty, node.a
        w = self.width(node)
        if source.ty.is_bool:
            return b.op("ite", self.term(source), b.bv_const(1, w), b.bv_const(0, w))
        if source.ty.is_float:
            width = max(ty.bits + 1, w)
            converted = b.fp_to_sbv(self.term(source), width)
            if ty.bits < width:
                converted = self._extend_value(
                    b.extract(converted, ty.bits - 1, 0), ty.bits, width, ty.signed
                )
            return self.fit(converted, width, w)
        lo, hi = self.interval(source)
        if ty.min <= lo and hi <= ty.max:
            return self.operand(source, w)  # value-preserving
        pattern = self._bits(source, ty.bits)
        return self._extend_value(pattern, ty.bits, w, ty.signed)

    def _index_range(self, index: Node, size: int) -> tuple[int, int]:
        lo, hi = self.interval(index)
        return max(0, min(int(lo), size - 1)), max(0, min(int(hi), size - 1))

    def _read(self, node: Read) -> Term:
        b = self.b
        values = node.table.values
        first, last = self._index_range(node.index, len(values))
        if node.ty.is_float:
            make = lambda value: b.fp_const(float(value), node.ty.bits)
        else:
            w = self.width(node)
            make = lambda value: b.bv_const(int(value), w)
        wi = self.width(node.index) + 1
        index = self.operand(node.index, wi)
        runs: list[tuple[int, object]] = []  # (last position of the run, value), increasing
        for position in range(first, last + 1):
            if runs and values[position] == runs[-1][1]:
                runs[-1] = (position, values[position])
            else:
                runs.append((position, values[position]))
        result = make(runs[-1][1])
        for end, value in reversed(runs[:-1]):
            result = b.op("ite", b.op("sle", index, b.bv_const(end, wi)), make(value), result)
        return result

    def _step(self, node: Step) -> Term:
        b = self.b
        w = self.width(node)
        lo, hi = self.interval(node.a)
        wa = self.width(node.a)
        a = self.term(node.a)
        pieces = [
            (start, node.values[k])
            for k, start in enumerate(node.starts)
            if (k + 1 == len(node.starts) or node.starts[k + 1] > lo) and start <= hi
        ]
        result = b.bv_const(int(pieces[-1][1]), w)
        for k in range(len(pieces) - 2, -1, -1):
            boundary = pieces[k + 1][0]
            if boundary > (1 << (wa - 1)) - 1:
                continue
            result = b.op(
                "ite", b.op("slt", a, b.bv_const(boundary, wa)), b.bv_const(int(pieces[k][1]), w), result
            )
        return result

    # floats -------------------------------------------------------------------

    def _float(self, node: Node) -> Term:
        b = self.b
        bits = node.ty.bits
        if isinstance(node, Binary):
            names = {"add": "fp_add", "sub": "fp_sub", "mul": "fp_mul", "div": "fp_div"}
            if node.op in names:
                return b.op(names[node.op], self.term(node.a), self.term(node.b))
            if node.op in ("max", "min"):
                a, c = self.term(node.a), self.term(node.b)
                return b.op("ite", b.op("fp_ge" if node.op == "max" else "fp_le", a, c), a, c)
        if isinstance(node, Unary) and node.op == "neg":
            return b.op("fp_neg", self.term(node.a))
        if isinstance(node, Cast):
            source = node.a
            if source.ty.is_float:
                return b.fp_convert(self.term(source), bits)
            if source.ty.is_bool:
                return b.op("ite", self.term(source), b.fp_const(1.0, bits), b.fp_const(0.0, bits))
            return b.fp_from_sbv(self.term(source), bits)
        if isinstance(node, Ite):
            return b.op("ite", self.term(node.c), self.term(node.a), self.term(node.b))
        if isinstance(node, Read):
            return self._read(node)
        raise UnsupportedError(f"SMT encoding of float {type(node).__name__} {getattr(node, 'op', '')}")


def float_bits(value: float, bits: int) -> tuple[int, int, int]:
    """(sign, biased exponent, significand) of a binary16/32/64 value (`value` must be one)."""
    float_format, int_format = _PACK[bits]
    (raw,) = struct.unpack(int_format, struct.pack(float_format, value))
    exponent_bits, significand_bits = FP_FORMATS[bits]
    fraction = significand_bits - 1
    return raw >> (bits - 1), (raw >> fraction) & ((1 << exponent_bits) - 1), raw & ((1 << fraction) - 1)


def float_from_bits(sign: int, exponent: int, significand: int, bits: int) -> float:
    float_format, int_format = _PACK[bits]
    fraction = FP_FORMATS[bits][1] - 1
    raw = (sign << (bits - 1)) | (exponent << fraction) | significand
    return struct.unpack(float_format, struct.pack(int_format, raw))[0]


def query_conditions(simplified, p: int) -> list[tuple[Node, bool]]:
    """The conditions of query p: every step before p holds (assumes, and asserts -- an execution
    that fails an earlier assert is found by that assert's query) and p fails."""
    steps = simplified.program.steps
    conds = [(step.cond, True) for step in steps[:p]]
    conds.append((steps[p].cond, False))
    return conds


def signed_value(unsigned: int, width: int) -> int:
    return unsigned - (1 << width) if unsigned >> (width - 1) else unsigned


def finite(value: float) -> bool:
    return math.isfinite(value)


_ = iv  # intervals are passed in as a function
