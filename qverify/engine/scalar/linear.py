"""Scalar path: the piecewise-linear form of a query: affine expressions over a few kinds of nonlinear
variables.

`Lowering` maps the SSA nodes of a query to affine expressions over *variables*: the inputs and one
variable per nonlinear operation. Linear operations (+, -, multiplication by a constant, value-
preserving casts) never create variables. The variable kinds and their exact meaning (z is the
variable, a, b affine arguments):

    input    z in [lo, hi] (integer for integer inputs)
    quot     z = a / d rounded by `mode`: floor, rna (nearest, ties away from zero), trunc (C `/`)
    relu     z = max(a, 0)          (max(a, b) = b + relu(a - b), min(a, b) = a - relu(a - b))
    step     z = values[k] for starts[k] <= a < starts[k+1]   (table reads, tabulated lookups)
    wrap     z = a wrapped to `bits` (two's complement or unsigned)
    mul      z = a * b
    ite      z = a if c else b      (c an affine 0/1 expression)
    cmp      z = [a >= 0] ("ge0") or [a == 0] ("eq0"), a boolean
    and, or  z = all / any of boolean arguments
    fround   z = a + e with |e| <= eps (IEEE rounding, a relaxation; floats under --semantics ieee)
    free     z in [lo, hi], nothing else known (a relaxation of an operation the lowering does not
             model; a model with `free` or `fround` variables is not exact)

Integer programs lower exactly: every variable is integer-valued and every coefficient an integer,
so a feasible point of the lowered query with integral values is an execution. Float programs lower
exactly under --semantics real (ideal arithmetic) and as a relaxation under ieee.

A *query* is the conjunction of some conditions (assumes, one way to violate an assertion); its
top-level conjunctions/disjunctions are split into `Conjunction`s of literals by `dnf`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from qverify.engine.scalar import semantics as sem
from qverify.engine.scalar import ssa
from qverify.engine.scalar.passes import intervals as iv
from qverify.engine.scalar.ssa import Binary, Cast, Compare, Const, Input, Ite, Node, Read, Step, Unary
from qverify.errors import InternalError, UnsupportedError

Number = int | Fraction | float
MAX_DNF = 64
# per float width: the unit roundoff, the smallest subnormal (an absolute error bound for results
# in the subnormal range), and the largest magnitude up to which every integer is exact
EPS = {16: 2.0**-11, 32: 2.0**-24, 64: 2.0**-53}
TINY = {16: 2.0**-24, 32: 2.0**-149, 64: 2.0**-1074}
EXACT_INT = {16: 1 << 11, 32: 1 << 24, 64: 1 << 53}


class Affine:
    """sum(coef * var) + const, with exact (int/Fraction) or float coefficients."""

    __slots__ = ("const", "terms")

    def __init__(self, terms: dict[int, Number] | None = None, const: Number = 0) -> None:
        self.terms = terms or {}
        self.const = const

    @staticmethod
    def var(index: int) -> Affine:
        return Affine({index: 1}, 0)

    def is_const(self) -> bool:
        return not self.terms

    def plus(self, other: Affine, scale: Number = 1) -> Affine:
        terms = dict(self.terms)
        for index, coef in other.terms.items():
            value = terms.get(index, 0) + scale * coef
            if value:
                terms[index] = value
            else:
                terms.pop(index, None)
        return Affine(terms, self.const + scale * other.const)

    def scaled(self, factor: Number) -> Affine:
        if factor == 0:
            return Affine({}, 0)
        return Affine({i: c * factor for i, c in self.terms.items()}, self.const * factor)

    def shifted(self, delta: Number) -> Affine:
        return Affine(self.terms, self.const + delta)

    def __repr__(self) -> str:
        parts = [f"{c}*v{i}" for i, c in sorted(self.terms.items())]
        return " + ".join(parts + [str(self.const)])


@dataclass
class Var:
    index: int
    kind: str
    lo: Number
    hi: Number
    integer: bool
    args: tuple[Affine, ...] = ()
    params: tuple = ()
    node: int = -1


@dataclass
class Literal:
    """`expr >= 0` (sense "ge") or `expr == 0` (sense "eq"). `optimistic` when the expression relies
    on an optimistic lowering (a saturation or wrap-around taken as the identity)."""

    expr: Affine
    sense: str = "ge"
    optimistic: bool = False
    assumed: bool = False  # from an assumption (not from the assertion's violation)


@dataclass
class Conjunction:
    literals: list[Literal] = field(default_factory=list)


class Lowering:
    """Lowers SSA nodes to affine expressions over variables; one instance per query context.

    `interval(node)` must give intervals valid in the query's context (the simplifier's).
    """

    def __init__(
        self,
        interval: Callable[[Node], iv.Interval],
        semantics: str = "ieee",
        optimistic: bool = False,
        keep: frozenset[int] = frozenset(),
    ) -> None:
        self.interval = interval
        self.semantics = semantics
        self.vars: list[Var] = []
        self.memo: dict[int, Affine] = {}
        self.inputs: dict[int, int] = {}  # input index -> var index
        self.exact = True
        self.notes: list[str] = []
        # optimistic: saturations (max/min with a far constant) and wrap-arounds are lowered as the
        # identity, each recorded in `checks` as (node id, affine value, lo, hi): the lowering is
        # exact only once every check is proved (the value lies in [lo, hi] in every execution);
        # nodes in `keep` are lowered exactly regardless
        self.optimistic = optimistic
        self.keep = keep
        self.checks: list[tuple[int, Affine, Number, Number]] = []
        self.tainted: set[int] = set()  # nodes whose affine form relies on a check

    # -------------------------------------------------------------- variables

    def new_var(
        self, kind: str, lo: Number, hi: Number, integer: bool, args=(), params=(), node: int = -1
    ) -> Affine:
        if kind in ("fround", "free"):
            self.exact = False
        var = Var(len(self.vars), kind, lo, hi, integer, tuple(args), tuple(params), node)
        self.vars.append(var)
        return Affine.var(var.index)

    def bounds(self, expr: Affine) -> tuple[Number, Number]:
        """Interval of an affine expression from the variables' bounds."""
        lo = hi = expr.const
        for index, coef in expr.terms.items():
            var = self.vars[index]
            if coef > 0:
                lo += coef * var.lo
                hi += coef * var.hi
            else:
                lo += coef * var.hi
                hi += coef * var.lo
        return lo, hi

    # -------------------------------------------------------------- nodes

    def affine(self, root: Node) -> Affine:
        """The affine expression of `root` (lowering every node below it once)."""
        memo = self.memo
        for node in ssa.topological([root], memo):
            if node.id in memo:
                continue
            checks = len(self.checks)
            memo[node.id] = self._lower(node)
            if len(self.checks) > checks or any(child.id in self.tainted for child in node.children()):
                self.tainted.add(node.id)
        return memo[root.id]

    def _int_bounds(self, node: Node) -> tuple[Number, Number]:
        lo, hi = self.interval(node)
        if iv.is_any_float((lo, hi)):
            return (-math.inf, math.inf)
        return lo, hi

    def _lower(self, node: Node) -> Affine:
        if isinstance(node, Const):
            if node.ty.is_float:
                if not math.isfinite(node.value):
                    raise UnsupportedError(f"non-finite constant {node.value} in a linear encoding")
                return Affine({}, Fraction(node.value) if self.semantics == "real" else node.value)
            return Affine({}, int(node.value))
        if isinstance(node, Input):
            lo, hi = self._int_bounds(node)
            if node.ty.is_float:
                lo, hi = (
                    (Fraction(lo) if math.isfinite(lo) else lo),
                    (Fraction(hi) if math.isfinite(hi) else hi),
                )
            expr = self.new_var("input", lo, hi, not node.ty.is_float, node=node.id)
            self.inputs[node.index] = next(iter(expr.terms))
            return expr
        if node.ty.is_bool or (isinstance(node, Compare)):
            return self._lower_bool(node)
        if node.ty.is_float:
            return self._lower_float(node)
        return self._lower_int(node)

    def _child(self, node: Node) -> Affine:
        return self.memo[node.id]

    def _var_for(self, node: Node, kind: str, args=(), params=()) -> Affine:
        lo, hi = self._int_bounds(node)
        return self.new_var(kind, lo, hi, not node.ty.is_float, args, params, node.id)

    # integers --------------------------------------------------------------------

    def _wrap_if_needed(self, node: Node, expr: Affine, math_lo: Number, math_hi: Number) -> Affine:
        ty = node.ty
        if ty.min <= math_lo and math_hi <= ty.max:
            return expr
        if self.optimistic and node.id not in self.keep:
            self.checks.append((node.id, expr, ty.min, ty.max))
            return expr
        return self._var_for(node, "wrap", (expr,), (ty.bits, ty.signed))

    def _lower_int(self, node: Node) -> Affine:
        if isinstance(node, Binary):
            a, b = self._child(node.a), self._child(node.b)
            op = node.op
            if op in ("add", "sub"):
                expr = a.plus(b, 1 if op == "add" else -1)
                return self._wrap_if_needed(node, expr, *self._math(node))
            if op == "mul":
                if b.is_const():
                    a, b = b, a
                if a.is_const():
                    expr = b.scaled(a.const)
                    return self._wrap_if_needed(node, expr, *self._math(node))
                product = self._var_for_math(node, "mul", (a, b))
                return self._wrap_if_needed(node, product, *self._math(node))
            if op in ("shr", "shr_rna", "div", "rem", "shl"):
                if not b.is_const():
                    raise UnsupportedError(f"{op} by a non-constant amount in a linear encoding")
                amount = int(b.const)
                if op == "shl":
                    return self._wrap_if_needed(node, a.scaled(1 << amount), *self._math(node))
                if op in ("shr", "shr_rna"):
                    if a.is_const():
                        raise InternalError("unfolded constant shift")
                    if not node.ty.signed and node.ty.bits == 64:
                        raise UnsupportedError("unsigned 64-bit shift in a linear encoding")
                    mode = "floor" if op == "shr" else "rna"
                    return self._var_for(node, "quot", (a,), (1 << amount, mode))
                if amount == 0:
                    raise UnsupportedError("division by zero in a linear encoding")
                divisor = abs(amount)
                quotient = self.new_var(
                    "quot",
                    *self._quot_bounds(node, a, divisor, amount < 0),
                    True,
                    (a,),
                    (divisor, "trunc"),
                    node.id,
                )
                signed_quotient = quotient if amount > 0 else quotient.scaled(-1)
                if op == "div":
                    return self._wrap_if_needed(node, signed_quotient, *self._int_bounds(node))
                return a.plus(signed_quotient, -amount)  # a - b * (a / b)
            if op in ("max", "min"):
                saturation = _saturation(node)
                if saturation is not None and self.optimistic and node.id not in self.keep:
                    value, bound = saturation
                    expr = self._child(value)
                    if op == "max":
                        self.checks.append((node.id, expr, int(bound.value), math.inf))
                    else:
                        self.checks.append((node.id, expr, -math.inf, int(bound.value)))
                    return expr
                difference = a.plus(b, -1)
                lo, hi = self.bounds(difference)
                relu = self.new_var("relu", max(lo, 0), max(hi, 0), True, (difference,), (), node.id)
                return b.plus(relu) if op == "max" else a.plus(relu, -1)
            raise UnsupportedError(f"integer operation '{op}' has no linear encoding (use --solver bitwuzla)")
        if isinstance(node, Unary):
            a = self._child(node.a)
            if node.op == "neg":
                return self._wrap_if_needed(node, a.scaled(-1), *self._math(node))
            if node.op == "bnot":
                return self._wrap_if_needed(node, a.scaled(-1).shifted(-1), *self._math(node))
            raise InternalError(f"lowering: unary {node.op} on an integer")
        if isinstance(node, Cast):
            a = self._child(node.a)
            source = node.a
            if source.ty.is_float:
                if self.semantics != "real" and not a.is_const():
                    pass
                lo, hi = self._int_bounds(node)
                quotient = self.new_var("quot", lo, hi, True, (a,), (1, "trunc"), node.id)
                return self._wrap_if_needed(node, quotient, *self._float_to_int_math(source))
            lo, hi = self._int_bounds(source) if not source.ty.is_bool else (0, 1)
            return self._wrap_if_needed(node, a, lo, hi)
        if isinstance(node, Ite):
            c, a, b = self._child(node.c), self._child(node.a), self._child(node.b)
            return self._var_for(node, "ite", (c, a, b))
        if isinstance(node, Read):
            index = self._child(node.index)
            starts, values = table_runs(node.table)
            return self._var_for(node, "step", (index,), (starts, values))
        if isinstance(node, Step):
            return self._var_for(node, "step", (self._child(node.a),), (node.starts, node.values))
        raise InternalError(f"lowering: integer node {type(node).__name__}")

    def _quot_bounds(self, node: Node, a: Affine, divisor: int, negative: bool) -> tuple[Number, Number]:
        """Bounds of trunc(a / divisor) (the quotient before the divisor's sign is applied)."""
        lo, hi = self.bounds(a)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return (-math.inf, math.inf)
        return (sem.trunc_div(math.floor(lo), divisor), sem.trunc_div(math.ceil(hi), divisor))

    def _float_to_int_math(self, source: Node) -> tuple[Number, Number]:
        lo, hi = self.interval(source)
        if iv.is_any_float((lo, hi)) or not (math.isfinite(lo) and math.isfinite(hi)):
            return (-math.inf, math.inf)
        return (int(lo), int(hi))

    def _var_for_math(self, node: Node, kind: str, args) -> Affine:
        lo, hi = self._math(node)
        return self.new_var(kind, lo, hi, True, args, (), node.id)

    def _math(self, node: Node) -> tuple[Number, Number]:
        """The interval of the exact (unwrapped) result of a ring operation."""
        if isinstance(node, Unary):
            lo, hi = self._int_bounds(node.a)
            return (-hi, -lo) if node.op == "neg" else (-hi - 1, -lo - 1)
        a, b = self._int_bounds(node.a), self._int_bounds(node.b)
        if node.op == "add":
            return (a[0] + b[0], a[1] + b[1])
        if node.op == "sub":
            return (a[0] - b[1], a[1] - b[0])
        if node.op == "mul":
            products = [
                x * y
                for x in a
                for y in b
                if not (math.isinf(x) and y == 0) and not (math.isinf(y) and x == 0)
            ]
            return (min(products), max(products)) if products else (0, 0)
        if node.op == "shl":
            return (a[0] * (1 << int(b[0])), a[1] * (1 << int(b[0])))
        raise InternalError(f"lowering: math interval of {node.op}")

    # floats ----------------------------------------------------------------------

    def _round(self, node: Node, expr: Affine) -> Affine:
        """The IEEE rounding of an exact result (ieee semantics): a bounded error variable."""
        if self.semantics == "real":
            return expr
        lo, hi = self.interval(node)
        if iv.is_any_float((lo, hi)) or not (math.isfinite(lo) and math.isfinite(hi)):
            return self.new_var("free", -math.inf, math.inf, False, (), (), node.id)
        bits = node.ty.bits
        eps = EPS[bits] * max(abs(lo), abs(hi)) + TINY[bits]
        return self.new_var("fround", lo, hi, False, (expr,), (eps,), node.id)

    def _lower_float(self, node: Node) -> Affine:
        if isinstance(node, Binary):
            a, b = self._child(node.a), self._child(node.b)
            op = node.op
            if op in ("add", "sub"):
                return self._round(node, a.plus(b, 1 if op == "add" else -1))
            if op == "mul":
                if b.is_const():
                    a, b = b, a
                if a.is_const():
                    return self._round(node, b.scaled(a.const))
                lo, hi = self.interval(node)
                product = self.new_var("mul", lo, hi, False, (a, b), (), node.id)
                return self._round(node, product)
            if op == "div" and b.is_const() and b.const != 0:
                factor = Fraction(1) / Fraction(b.const) if self.semantics == "real" else 1.0 / b.const
                if self.semantics != "real" and Fraction(factor) != 1 / Fraction(b.const):
                    return self._free(node)
                return self._round(node, a.scaled(factor))
            return self._free(node)
        if isinstance(node, Unary) and node.op == "neg":
            return self._child(node.a).scaled(-1)
        if isinstance(node, Cast):
            a = self._child(node.a)
            if node.a.ty.is_float and node.a.ty.bits <= node.ty.bits:
                return a  # float -> double is exact
            if node.a.ty.is_float:
                return self._round(node, a)
            lo, hi = self._int_bounds(node.a) if not node.a.ty.is_bool else (0, 1)
            exact_limit = EXACT_INT[node.ty.bits]
            if -exact_limit <= lo and hi <= exact_limit:
                return a
            return self._round(node, a)
        if isinstance(node, Ite):
            c, a, b = self._child(node.c), self._child(node.a), self._child(node.b)
            lo, hi = self.interval(node)
            if iv.is_any_float((lo, hi)):
                return self._free(node)
            extremum = self._float_extremum(node)
            if extremum is not None:
                return extremum
            return self.new_var("ite", lo, hi, False, (c, a, b), (), node.id)
        if isinstance(node, Read):
            starts, values = table_runs(node.table)
            lo, hi = self.interval(node)
            return self.new_var("step", lo, hi, False, (self._child(node.index),), (starts, values), node.id)
        return self._free(node)

    def _float_extremum(self, node: Ite) -> Affine | None:
        """x < y ? y : x and the like on finite (so non-NaN) floats: max/min through a relu
        (numerically exact; -0.0 and 0.0 are equal numbers)."""
        c = node.c
        if not (isinstance(c, Compare) and c.op in ("lt", "le", "gt", "ge")):
            return None
        x, y = c.a, c.b
        if not ((node.a is y and node.b is x) or (node.a is x and node.b is y)):
            return None
        for operand in (x, y):
            lo, hi = self.interval(operand)
            if iv.is_any_float((lo, hi)) or not (math.isfinite(lo) and math.isfinite(hi)):
                return None
        picks_larger = (node.a is y) == (c.op in ("lt", "le"))
        a, b = self._child(x), self._child(y)
        difference = a.plus(b, -1)
        lo, hi = self.bounds(difference)
        relu = self.new_var("relu", max(lo, 0), max(hi, 0), False, (difference,), (), node.id)
        return b.plus(relu) if picks_larger else a.plus(relu, -1)

    def _free(self, node: Node) -> Affine:
        lo, hi = self.interval(node)
        if iv.is_any_float((lo, hi)):
            lo, hi = -math.inf, math.inf
        self.notes.append(f"{type(node).__name__} relaxed to its interval")
        return self.new_var("free", lo, hi, False, (), (), node.id)

    # booleans --------------------------------------------------------------------

    def _lower_bool(self, node: Node) -> Affine:
        if isinstance(node, Compare):
            a, b = self._child(node.a), self._child(node.b)
            strict_shift = 0 if (node.a.ty.is_float and self.semantics == "real") else 1
            if node.a.ty.is_float and self.semantics != "real":
                # IEEE comparison of relaxed values: exact on the relaxation's values
                strict_shift = 0
            op = node.op
            if op in ("ge", "gt", "le", "lt"):
                difference = a.plus(b, -1) if op in ("ge", "gt") else b.plus(a, -1)
                if op in ("gt", "lt") and not node.a.ty.is_float:
                    difference = difference.shifted(-strict_shift)
                return self.new_var("cmp", 0, 1, True, (difference,), ("ge0",), node.id)
            difference = a.plus(b, -1)
            equal = self.new_var("cmp", 0, 1, True, (difference,), ("eq0",), node.id)
            return equal if op == "eq" else Affine({}, 1).plus(equal, -1)
        if isinstance(node, Unary) and node.op == "lnot":
            return Affine({}, 1).plus(self._child(node.a), -1)
        if isinstance(node, Binary) and node.op in ("land", "lor", "band", "bor"):
            a, b = self._child(node.a), self._child(node.b)
            kind = "and" if node.op in ("land", "band") else "or"
            return self.new_var(kind, 0, 1, True, (a, b), (), node.id)
        if isinstance(node, Binary) and node.op == "bxor":
            a, b = self._child(node.a), self._child(node.b)
            return self.new_var("cmp", 0, 1, True, (a.plus(b, -1),), ("ne0",), node.id)
        if isinstance(node, Ite):
            c, a, b = self._child(node.c), self._child(node.a), self._child(node.b)
            return self.new_var("ite", 0, 1, True, (c, a, b), (), node.id)
        if isinstance(node, Cast):
            a = self._child(node.a)
            return self.new_var("cmp", 0, 1, True, (a,), ("ne0",), node.id)
        raise InternalError(f"lowering: boolean node {type(node).__name__}")


def _saturation(node: Binary) -> tuple[Node, Const] | None:
    """max(v, c) with c = -2^k, or min(v, c) with c = 2^k - 1 (k >= 7): a fixed-point saturation
    (not a ReLU), expected never to act; (v, c) or None."""
    value, bound = node.a, node.b
    if not isinstance(bound, Const):
        value, bound = bound, value
    if not isinstance(bound, Const) or isinstance(value, Const):
        return None
    c = int(bound.value)
    if node.op == "max" and c < 0 and (-c) & (-c - 1) == 0 and -c >= 1 << 7:
        return value, bound
    if node.op == "min" and c > 0 and (c + 1) & c == 0 and c + 1 >= 1 << 7:
        return value, bound
    return None


def table_runs(table: ssa.Table) -> tuple[tuple[int, ...], tuple]:
    """The table as a step function of its (clamped) index: run starts and values."""
    starts, values = [], []
    for position, value in enumerate(table.values):
        if values and values[-1] == value:
            continue
        starts.append(position)
        values.append(value)
    starts[0] = -(1 << 62)  # the clamp: below 0 reads entry 0
    return tuple(starts), tuple(values)


# ------------------------------------------------------------------------------ queries


def dnf(cond: Node, positive: bool = True, limit: int = MAX_DNF) -> list[list[tuple[Node, bool]]] | None:
    """`cond` (or its negation) as a disjunction of conjunctions of (node, polarity) literals, where
    each literal is a comparison or another boolean node; None when there would be more than `limit`."""
    if isinstance(cond, Const):
        return [[]] if bool(cond.value) == positive else []
    if isinstance(cond, Unary) and cond.op == "lnot":
        return dnf(cond.a, not positive, limit)
    if isinstance(cond, Binary) and cond.op in ("land", "lor"):
        conjunctive = (cond.op == "land") == positive
        left, right = dnf(cond.a, positive, limit), dnf(cond.b, positive, limit)
        if left is None or right is None:
            return None
        if conjunctive:
            if len(left) * len(right) > limit:
                return None
            return [x + y for x in left for y in right]
        if len(left) + len(right) > limit:
            return None
        return left + right
    return [[(cond, positive)]]


NEGATED = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}


def literal(lowering: Lowering, node: Node, positive: bool) -> list[Literal]:
    """Linear literals for `node` being true (positive) or false."""
    result = _literal(lowering, node, positive)
    tainted = node.id in lowering.tainted or any(child.id in lowering.tainted for child in node.children())
    for lit in result:
        lit.optimistic = tainted
    return result


def _literal(lowering: Lowering, node: Node, positive: bool) -> list[Literal]:
    if isinstance(node, Compare) and not (node.a.ty.is_float and not positive):
        op = node.op if positive else NEGATED[node.op]
        a, b = lowering.affine(node.a), lowering.affine(node.b)
        integral = not node.a.ty.is_float
        if op in ("ge", "gt"):
            difference = a.plus(b, -1)
        elif op in ("le", "lt"):
            difference = b.plus(a, -1)
        else:
            difference = a.plus(b, -1)
        if op in ("gt", "lt") and integral:
            difference = difference.shifted(-1)
        if op == "eq":
            return [Literal(difference, "eq")]
        if op == "ne":
            var = lowering.affine(node)
            return [Literal(var.shifted(-1) if positive else var.scaled(-1), "eq")]
        return [Literal(difference, "ge")]
    var = lowering.affine(node)
    return [Literal(var.shifted(-1), "eq")] if positive else [Literal(var, "eq")]


def conjunctions(lowering: Lowering, conds: Sequence[tuple[Node, bool]]) -> list[Conjunction] | None:
    """The conjunction of (cond, polarity) pairs as a list of alternative conjunctions of literals;
    None when the DNF is too large. The last pair is the assertion's violation, the others are
    assumptions (their literals are marked `assumed`)."""
    alternatives: list[list[tuple[Node, bool, bool]]] = [[]]
    for index, (cond, positive) in enumerate(conds):
        parts = dnf(cond, positive)
        if parts is None:
            parts = [[(cond, positive)]]
        if len(alternatives) * len(parts) > MAX_DNF:
            return None
        assumed = index < len(conds) - 1
        alternatives = [x + [(node, sign, assumed) for node, sign in y] for x in alternatives for y in parts]
    result = []
    for alternative in alternatives:
        conjunction = Conjunction()
        for node, positive, assumed in alternative:
            for lit in literal(lowering, node, positive):
                lit.assumed = assumed
                conjunction.literals.append(lit)
        result.append(conjunction)
    return result
