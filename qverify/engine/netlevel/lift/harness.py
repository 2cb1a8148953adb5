"""Network level: the harness's `main`: nondet inputs, the assumes that bound them, the call of `qv_network`,
the assertions `!(clause)` over the outputs (`templates/harness.c.j2`).

Input bounds become `InputRegion`s in the implementation's domain: integers exactly (a strict
comparison moves the bound by one), floats as the smallest/largest value of the input type that
satisfies the C comparison of exact values. Output atoms become exact `Atom`s over normalised
outputs: a fixed-point comparison `sum A_k (int64_t)y[k] (rel) T` over words y = Y * 2^l is
`sum A_k Y_k - T / 2^l (rel) 0`; a float comparison `y[k] (rel) c` or `y[a] (rel) y[b]` compares
exact values, so it is the same atom over the float outputs.
"""

from __future__ import annotations

import codecs
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from pycparser import c_ast

from qverify.engine.netlevel.lift.cnodes import (
    call,
    conjuncts,
    fail,
    float_constant,
    index_ref,
    integer_constant,
    is_id,
    type_names,
)
from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.engine.netlevel.lift.inputs import MARKER, InputBlock
from qverify.engine.netlevel.lift.layers import INT64_NAMES
from qverify.properties import Atom, Clause, OutputCondition, Relation

_RELATIONS = {">=": Relation.GE, ">": Relation.GT, "<=": Relation.LE, "<": Relation.LT}
_MIRROR = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class InputDomain:
    """What one input variable can hold before any assume: an integer range, or a float dtype."""

    integer: bool
    lo: int = 0
    hi: int = 0
    dtype: type | None = None


@dataclass(slots=True)
class _Bounds:
    """Per input index, the bounds a conjunction of comparisons states (absent: unbounded)."""

    lo: dict[int, object] = field(default_factory=dict)
    hi: dict[int, object] = field(default_factory=dict)

    def tighten(self, other: _Bounds) -> None:
        for k, value in other.lo.items():
            self.lo[k] = max(self.lo[k], value) if k in self.lo else value
        for k, value in other.hi.items():
            self.hi[k] = min(self.hi[k], value) if k in self.hi else value


@dataclass(frozen=True, slots=True, eq=False)
class HarnessMain:
    """What `main` states: the input boxes (inclusive, implementation domain), the unsafe set."""

    regions: tuple[tuple[np.ndarray, np.ndarray], ...]
    unsafe: OutputCondition
    n_inputs: int
    n_outputs: int
    messages: tuple[str, ...] = ()  # each clause's assertion message, as a replay prints it


def _string_value(constant: c_ast.Constant) -> str:
    """A C string literal's characters (the codegen writes printable ASCII with C escapes)."""
    return codecs.decode(constant.value[1:-1], "unicode_escape")


def _float_step(value: float, dtype: type, up: bool) -> float:
    return float(np.nextafter(dtype(value), dtype(np.inf if up else -np.inf)))


def _float_bound(value: Fraction, dtype: type, relation: str) -> tuple[str, float]:
    """x (rel) value for x of type dtype, as ('lo'|'hi', bound) over the values of dtype."""
    candidate = float(dtype(float(value)))
    if not math.isfinite(candidate):
        raise NotRecognised(f"input bound {float(value)!r} is beyond the input type's range")
    if relation in (">=", ">"):
        if Fraction(candidate) < value or (relation == ">" and Fraction(candidate) == value):
            candidate = _float_step(candidate, dtype, True)
        return "lo", candidate
    if Fraction(candidate) > value or (relation == "<" and Fraction(candidate) == value):
        candidate = _float_step(candidate, dtype, False)
    return "hi", candidate


def _input_comparison(node: c_ast.Node, x_name: str, domain: InputDomain) -> tuple[int, str, object]:
    """`c (rel) x[k]` or `x[k] (rel) c` as (k, 'lo'|'hi', bound)."""
    if not (isinstance(node, c_ast.BinaryOp) and node.op in _RELATIONS):
        raise fail(node, "input assume is not a comparison of x[k] with a constant")
    relation, left, right = node.op, node.left, node.right
    ref = index_ref(left)
    if ref is None or ref[0] != x_name:
        left, right, relation = right, left, _MIRROR[relation]
        ref = index_ref(left)
    if ref is None or ref[0] != x_name or len(ref[1]) != 1 or integer_constant(ref[1][0]) is None:
        raise fail(node, "input assume does not compare x[k] (constant k)")
    k = integer_constant(ref[1][0])
    if domain.integer:
        value = integer_constant(right)
        if value is None:
            raise fail(node, "integer input compared with a non-integer constant")
        if relation in (">=", ">"):
            return k, "lo", value + (relation == ">")
        return k, "hi", value - (relation == "<")
    constant = float_constant(right)
    if constant is None:
        integer = integer_constant(right)
        if integer is None:
            raise fail(node, "float input compared with a non-constant")
        if float(domain.dtype(integer)) != integer:  # C converts it to the input's type first
            raise fail(node, f"integer {integer} is not exact in the input's float type")
        constant = (Fraction(integer), 64)
    side, bound = _float_bound(constant[0], domain.dtype, relation)
    return k, side, bound


def _box_of(node: c_ast.Node, x_name: str, domain: InputDomain, assigned: int) -> _Bounds:
    """A conjunction of input comparisons (or the constant 1) as a box."""
    box = _Bounds()
    for part in conjuncts(node):
        if integer_constant(part) == 1:
            continue
        k, side, bound = _input_comparison(part, x_name, domain)
        if not 0 <= k < assigned:
            raise fail(part, f"assume on x[{k}] before it is given a nondet value")
        box.tighten(_Bounds({k: bound}) if side == "lo" else _Bounds({}, {k: bound}))
    return box


def _linear(node: c_ast.Node, y_name: str, integer: bool) -> tuple[dict[int, int], int]:
    """An int64 linear form over (int64_t)y[k] and integer constants: ({k: A_k}, constant)."""
    value = integer_constant(node)
    if value is not None:
        return {}, value
    if isinstance(node, c_ast.Cast) and type_names(node.to_type) in INT64_NAMES:
        ref = index_ref(node.expr)
        if (
            ref is not None
            and ref[0] == y_name
            and len(ref[1]) == 1
            and integer_constant(ref[1][0]) is not None
        ):
            return {integer_constant(ref[1][0]): 1}, 0
    if isinstance(node, c_ast.UnaryOp) and node.op == "-":
        terms, constant = _linear(node.expr, y_name, integer)
        return {k: -a for k, a in terms.items()}, -constant
    if isinstance(node, c_ast.BinaryOp) and node.op in ("+", "-"):
        left, right = _linear(node.left, y_name, integer), _linear(node.right, y_name, integer)
        sign = 1 if node.op == "+" else -1
        terms = dict(left[0])
        for k, a in right[0].items():
            terms[k] = terms.get(k, 0) + sign * a
        return terms, left[1] + sign * right[1]
    if isinstance(node, c_ast.BinaryOp) and node.op == "*":
        factor = integer_constant(node.left)
        if factor is not None:
            terms, constant = _linear(node.right, y_name, integer)
            return {k: factor * a for k, a in terms.items()}, factor * constant
    raise fail(node, "output comparison is not a linear form over (int64_t)y[k]")


def _integer_atom(node: c_ast.BinaryOp, y_name: str, word_bits: int, frac_bits: int) -> Atom:
    left, right = _linear(node.left, y_name, True), _linear(node.right, y_name, True)
    terms = dict(left[0])
    for k, a in right[0].items():
        terms[k] = terms.get(k, 0) - a
    constant = left[1] - right[1]
    # int64 evaluation must be exact: every partial sum is bounded by this
    worst = sum(abs(a) for a in left[0].values()) * (1 << (word_bits - 1)) + abs(left[1])
    worst_right = sum(abs(a) for a in right[0].values()) * (1 << (word_bits - 1)) + abs(right[1])
    if max(worst, worst_right) > INT64_MAX:
        raise fail(node, "output comparison can overflow int64")
    scale = Fraction(1, 1 << frac_bits)
    return Atom(
        tuple((k, Fraction(a)) for k, a in sorted(terms.items())),
        Fraction(constant) * scale,
        _RELATIONS[node.op],
    )


def _float_side(node: c_ast.Node, y_name: str) -> tuple[int | None, Fraction]:
    ref = index_ref(node)
    if ref is not None and ref[0] == y_name and len(ref[1]) == 1 and integer_constant(ref[1][0]) is not None:
        return integer_constant(ref[1][0]), Fraction(0)
    constant = float_constant(node)
    if constant is not None:
        return None, constant[0]
    raise fail(node, "float output comparison is not between y[k] and a floating constant or y[m]")


def _float_atom(node: c_ast.BinaryOp, y_name: str) -> Atom:
    left, right = _float_side(node.left, y_name), _float_side(node.right, y_name)
    terms: dict[int, Fraction] = {}
    if left[0] is not None:
        terms[left[0]] = terms.get(left[0], Fraction(0)) + 1
    if right[0] is not None:
        terms[right[0]] = terms.get(right[0], Fraction(0)) - 1
    return Atom(tuple(sorted(terms.items())), left[1] - right[1], _RELATIONS[node.op])


def _clause(node: c_ast.Node, y_name: str, fixed: tuple[int, int] | None) -> Clause:
    atoms = []
    for part in conjuncts(node):
        constant = integer_constant(part)
        if constant is not None:
            atoms.append(Atom((), Fraction(0 if constant else -1), Relation.GE))
            continue
        if not (isinstance(part, c_ast.BinaryOp) and part.op in _RELATIONS):
            raise fail(part, "unsafe clause atom is not a comparison")
        atoms.append(_integer_atom(part, y_name, *fixed) if fixed else _float_atom(part, y_name))
    return Clause(tuple(atoms))


def _array_local(node: c_ast.Node) -> tuple[str, int] | None:
    if (
        isinstance(node, c_ast.Decl)
        and not node.storage
        and node.init is None
        and isinstance(node.type, c_ast.ArrayDecl)
        and type_names(node.type.type) == ("qv_num",)
        and node.type.dim is not None
        and integer_constant(node.type.dim) is not None
    ):
        return node.name, integer_constant(node.type.dim)
    return None


def _block_bounds(block: InputBlock, domain: InputDomain) -> _Bounds:
    """The bounds of the input lines `lift.inputs` read, as `_input_comparison` reads them."""
    box = _Bounds()
    for bound in block.bounds:
        relation = ">=" if bound.side == "lo" else "<="
        if domain.integer:
            if not bound.integer:
                raise NotRecognised(f"x[{bound.k}]: integer input compared with a floating constant")
            value = int(bound.value)
        else:
            if bound.integer and float(domain.dtype(int(bound.value))) != bound.value:
                raise NotRecognised(f"x[{bound.k}]: integer {bound.value} is not exact in the input's type")
            value = _float_bound(bound.value, domain.dtype, relation)[1]
        box.tighten(_Bounds({bound.k: value}) if bound.side == "lo" else _Bounds({}, {bound.k: value}))
    return box


def match_main(
    main: c_ast.FuncDef,
    nondet: str,
    domain: InputDomain,
    fixed: tuple[int, int] | None,
    inputs: InputBlock | None = None,
) -> HarnessMain:
    """`main` of a harness; `fixed` = (word bits, fractional bits) for fixed point, else None;
    `inputs` the input lines `lift.inputs` took out of the text (the marker statement stands for
    them)."""
    items = list(main.body.block_items or [])
    if len(items) < 2:
        raise fail(main, "main is not a harness main")
    x_decl, y_decl = _array_local(items[0]), _array_local(items[1])
    if x_decl is None or y_decl is None:
        raise fail(main, "main does not start with the input and output arrays")
    (x_name, n_in), (y_name, n_out) = x_decl, y_decl
    if x_name == y_name:
        raise fail(main, "input and output arrays share a name")
    hull = _Bounds()
    disjunction: list[_Bounds] | None = None
    assigned = 0
    position = 2
    while position < len(items):
        item = items[position]
        if isinstance(item, c_ast.Assignment) and item.op == "=":
            ref = index_ref(item.lvalue)
            source = call(item.rvalue)
            if ref is None or ref[0] != x_name or len(ref[1]) != 1 or integer_constant(ref[1][0]) != assigned:
                raise fail(item, f"expected x[{assigned}] = {nondet}()")
            if source is None or source[0] != nondet or source[1]:
                raise fail(item, f"input is not a {nondet}() value")
            assigned += 1
        elif call(item, MARKER) == (MARKER, []) and inputs is not None and assigned == 0:
            if inputs.x != x_name or inputs.nondet != nondet:
                raise fail(
                    item, f"input lines of {inputs.x} by {inputs.nondet}, expected {x_name} by {nondet}"
                )
            assigned = inputs.count
            hull.tighten(_block_bounds(inputs, domain))
            inputs = None  # one use
        elif (assume := call(item, "__ESBMC_assume")) is not None and len(assume[1]) == 1:
            alternatives = conjuncts(assume[1][0], "||")
            boxes = [_box_of(alt, x_name, domain, assigned) for alt in alternatives]
            if len(boxes) == 1:
                hull.tighten(boxes[0])
            elif disjunction is None:
                disjunction = boxes
            else:
                raise fail(item, "more than one disjunction of input boxes")
        else:
            break
        position += 1
    if assigned != n_in:
        raise fail(main, f"only {assigned} of {n_in} inputs get a nondet value before the network")
    rest = items[position:]
    network = call(rest[0], "qv_network") if rest else None
    if (
        network is None
        or len(network[1]) != 2
        or not is_id(network[1][0], x_name)
        or not is_id(network[1][1], y_name)
    ):
        raise fail(rest[0] if rest else main, f"expected qv_network({x_name}, {y_name})")
    clauses, messages = [], []
    for item in rest[1:-1]:
        asserted = call(item, "__ESBMC_assert")
        if (
            asserted is None
            or len(asserted[1]) != 2
            or not (isinstance(asserted[1][0], c_ast.UnaryOp) and asserted[1][0].op == "!")
            or not (isinstance(asserted[1][1], c_ast.Constant) and asserted[1][1].type == "string")
        ):
            raise fail(item, 'expected __ESBMC_assert(!(clause), "message")')
        clauses.append(_clause(asserted[1][0].expr, y_name, fixed))
        messages.append(_string_value(asserted[1][1]))
    last = rest[-1]
    if len(rest) < 2 or not (isinstance(last, c_ast.Return) and integer_constant(last.expr) == 0):
        raise fail(last, "main does not end with return 0 after the assertions")
    max_index = max((k for clause in clauses for atom in clause.atoms for k, _ in atom.terms), default=-1)
    if max_index >= n_out:
        raise fail(main, f"an assertion reads y[{max_index}], the outputs are y[0..{n_out - 1}]")
    regions = []
    unbounded = (domain.lo, domain.hi) if domain.integer else (-math.inf, math.inf)
    for box in disjunction or [_Bounds()]:
        box.tighten(hull)
        lo = [box.lo.get(k, unbounded[0]) for k in range(n_in)]
        hi = [box.hi.get(k, unbounded[1]) for k in range(n_in)]
        if any(a > b for a, b in zip(lo, hi)):
            continue  # an empty box: no input satisfies it
        if not domain.integer and not all(math.isfinite(v) for v in lo + hi):
            raise fail(main, "a float input is not bounded on both sides")
        if domain.integer:
            regions.append((np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)))
        else:
            regions.append((np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)))
    return HarnessMain(tuple(regions), OutputCondition(tuple(clauses)), n_in, n_out, tuple(messages))
