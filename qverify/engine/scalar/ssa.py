"""Scalar path: the SSA node set of the engine, declared once, and the factory that builds and interns nodes.

A program is a DAG of nodes: `Const`, `Input` (a nondet call), `Unary`, `Binary`, `Compare`, `Ite`,
`Cast`, `Read` (a symbolic read of a constant table), `Step` (a univariate piecewise-constant
function, built by the simplifier from table reads) and the two events `Assume` and `Assert`,
which `Program.steps` lists in execution order.

Node values are C values of the node's `Type` (`qverify.engine.c_types`): integers of 1..64 bits
(signed or not) with C's conversion rules, IEEE binary16 (`_Float16`), binary32 and binary64, and
booleans. Semantics of every operation are in `qverify.engine.scalar.semantics`; the numpy evaluator
(`qverify.engine.scalar.evaluate`) and the encoders must agree with it (tests check the evaluator
against gcc bit for bit).

Nodes are built only through `NodeManager`, which folds constants and interns nodes: two
structurally equal nodes are the same object, so equality is identity and the hash is the id.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field

from qverify.engine.c_types import BOOL, F16, Coord, Type
from qverify.engine.scalar import semantics as sem
from qverify.errors import InternalError

# ------------------------------------------------------------------------------ nodes

UNARY_OPS = ("neg", "bnot", "lnot")
# add sub mul div rem: C arithmetic in the node type (wrapping); shl, shr (arithmetic for signed);
# band bor bxor: bitwise; land lor: booleans; max min: the larger/smaller operand;
# shr_rna: a / 2^b rounded to nearest, ties away from zero (fxp_shift's `nearest` branch pair).
BINARY_OPS = (
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "shl",
    "shr",
    "shr_rna",
    "band",
    "bor",
    "bxor",
    "land",
    "lor",
    "max",
    "min",
)
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")


@dataclass(frozen=True, slots=True, eq=False)
class Table:
    """A constant C array read at a symbolic index: values of type `ty`, flattened."""

    name: str
    ty: Type
    values: tuple

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """Base class: every node has a type and an id (its creation rank in its manager)."""

    ty: Type
    id: int

    def children(self) -> tuple[Node, ...]:
        return ()

    def __hash__(self) -> int:
        return self.id

    def __lt__(self, other: Node) -> bool:
        return self.id < other.id


@dataclass(frozen=True, slots=True, eq=False)
class Const(Node):
    value: int | float

    def __repr__(self) -> str:
        return f"{self.value!r}:{self.ty}"


@dataclass(frozen=True, slots=True, eq=False)
class Input(Node):
    """The value of the `index`-th nondet call (0-based), of type `ty`."""

    index: int
    name: str
    coord: Coord | None = None

    def __repr__(self) -> str:
        return f"in{self.index}:{self.ty}"


@dataclass(frozen=True, slots=True, eq=False)
class Unary(Node):
    op: str
    a: Node

    def children(self) -> tuple[Node, ...]:
        return (self.a,)


@dataclass(frozen=True, slots=True, eq=False)
class Binary(Node):
    op: str
    a: Node
    b: Node

    def children(self) -> tuple[Node, ...]:
        return (self.a, self.b)


@dataclass(frozen=True, slots=True, eq=False)
class Compare(Node):
    """A comparison of two operands of the same type (signedness from that type); type bool."""

    op: str
    a: Node
    b: Node

    def children(self) -> tuple[Node, ...]:
        return (self.a, self.b)


@dataclass(frozen=True, slots=True, eq=False)
class Ite(Node):
    c: Node
    a: Node
    b: Node

    def children(self) -> tuple[Node, ...]:
        return (self.c, self.a, self.b)


@dataclass(frozen=True, slots=True, eq=False)
class Cast(Node):
    """C conversion of `a` to `ty`: ints wrap to the target width, floats round to nearest even,
    float to int truncates toward zero, anything to bool is `!= 0`."""

    a: Node

    def children(self) -> tuple[Node, ...]:
        return (self.a,)


@dataclass(frozen=True, slots=True, eq=False)
class Read(Node):
    """table[index], with the index clamped to the table (an out-of-bounds read is assumed not to
    happen on an executed path, as with ESBMC's --no-bounds-check)."""

    table: Table
    index: Node

    def children(self) -> tuple[Node, ...]:
        return (self.index,)


@dataclass(frozen=True, slots=True, eq=False)
class Step(Node):
    """f(a) = values[k] for starts[k] <= a < starts[k+1] (a an integer; below starts[0]: values[0]).

    Built by the simplifier from a table lookup that depends on one integer value only."""

    a: Node
    starts: tuple[int, ...]
    values: tuple[int, ...]

    def children(self) -> tuple[Node, ...]:
        return (self.a,)


# ------------------------------------------------------------------------------ program


@dataclass(frozen=True, slots=True)
class Assume:
    """Executions continue only where `cond` holds."""

    cond: Node
    coord: Coord | None = None


@dataclass(frozen=True, slots=True)
class Assert:
    """`cond` must hold; its failure (with every earlier assume holding) is a violation."""

    cond: Node
    message: str
    coord: Coord | None = None


@dataclass(frozen=True, slots=True)
class Program:
    """An SSA program: the nondet inputs in call order and the assumes/asserts in execution order."""

    inputs: tuple[Input, ...]
    steps: tuple[Assume | Assert, ...]
    source: str = ""
    manager: NodeManager | None = field(default=None, compare=False, repr=False)

    @property
    def asserts(self) -> tuple[Assert, ...]:
        return tuple(step for step in self.steps if isinstance(step, Assert))

    @property
    def assumes(self) -> tuple[Assume, ...]:
        return tuple(step for step in self.steps if isinstance(step, Assume))

    def roots(self) -> list[Node]:
        return [step.cond for step in self.steps]


def topological(roots: Iterable[Node], leaf_ids: Container[int] = ()) -> list[Node]:
    """Every node reachable from `roots`, children before parents (iterative, each node once);
    nodes whose id is in `leaf_ids` are listed but not expanded."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[bool, Node]] = [(False, root) for root in roots]
    while stack:
        expanded, node = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node.id in seen:
            continue
        seen.add(node.id)
        stack.append((True, node))
        if node.id not in leaf_ids:
            for child in node.children():
                if child.id not in seen:
                    stack.append((False, child))
    return order


def count_nodes(roots: Iterable[Node]) -> int:
    return len(topological(roots))


def iter_kinds() -> Iterator[type[Node]]:
    """Every node class (for tests that check each pass handles each kind)."""
    yield from (Const, Input, Unary, Binary, Compare, Ite, Cast, Read, Step)


# ------------------------------------------------------------------------------ the factory

_COMMUTATIVE = frozenset(("add", "mul", "band", "bor", "bxor", "land", "lor", "max", "min"))
_SWAP = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "eq": "eq", "ne": "ne"}


class NodeManager:
    """Builds nodes, folds constants, applies the identities that need no analysis, and interns.

    Identities applied here (each pattern above the code that applies it):
    constant operands fold; ite(true, a, b) -> a; ite(c, a, a) -> a; land/lor with constants;
    lnot(lnot(x)) -> x; x + 0, x - 0, x * 1, x * 0 (ints) -> x, x, x, 0; commutative operands ordered
    (constant last); comparisons of widened floats on the narrow values; (half)(a op b) computed in a
    wider float from half values -> a op b in half. Everything else is in `qverify.engine.scalar.passes`.
    """

    def __init__(self) -> None:
        self._table: dict[tuple, Node] = {}
        self._next_id = 0
        self.true = self.const(BOOL, 1)
        self.false = self.const(BOOL, 0)

    def __len__(self) -> int:
        return len(self._table)

    def _intern(self, cls: type, ty: Type, key: tuple, *fields) -> Node:
        full = (cls, ty, *key)
        node = self._table.get(full)
        if node is None:
            node = cls(ty, self._next_id, *fields)
            self._next_id += 1
            self._table[full] = node
        return node

    # -------------------------------------------------------------- leaves

    def const(self, ty: Type, value: float) -> Const:
        value = sem.normalise(ty, value)
        key = (repr(value),) if ty.is_float else (value,)
        return self._intern(Const, ty, key, value)

    def boolean(self, value: bool) -> Const:
        return self.true if value else self.false

    def input(self, ty: Type, index: int, name: str, coord: Coord | None = None) -> Input:
        return self._intern(Input, ty, (index,), index, name, coord)

    # -------------------------------------------------------------- operations

    def unary(self, op: str, a: Node) -> Node:
        ty = BOOL if op == "lnot" else a.ty
        if op == "lnot" and a.ty != BOOL:
            raise InternalError("lnot of a non-boolean")
        if isinstance(a, Const):
            return self.const(ty, sem.unary(op, ty, a.value))
        # lnot(lnot(x)) -> x ; neg(neg(x)) -> x ; bnot(bnot(x)) -> x
        if isinstance(a, Unary) and a.op == op:
            return a.a
        # lnot(a < b) -> a >= b (ints: exact; floats: not with NaN, so ints and bools only)
        if op == "lnot" and isinstance(a, Compare) and not a.a.ty.is_float:
            inverse = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}[a.op]
            return self.compare(inverse, a.a, a.b)
        return self._intern(Unary, ty, (op, a.id), op, a)

    def binary(self, op: str, a: Node, b: Node) -> Node:
        if a.ty != b.ty and op not in ("shl", "shr", "shr_rna"):
            raise InternalError(f"binary {op}: operand types {a.ty} and {b.ty} differ")
        ty = a.ty
        if isinstance(a, Const) and isinstance(b, Const):
            value = sem.binary(op, ty, a.value, b.value, b.ty)
            if value is not None:
                return self.const(ty, value)
        if op in _COMMUTATIVE and (isinstance(a, Const) or (not isinstance(b, Const) and b.id < a.id)):
            a, b = b, a
        simplified = self._binary_identity(op, a, b)
        if simplified is not None:
            return simplified
        return self._intern(Binary, ty, (op, a.id, b.id), op, a, b)

    def _binary_identity(self, op: str, a: Node, b: Node) -> Node | None:
        if not isinstance(b, Const):
            if op in ("land", "lor", "band", "bor", "max", "min") and a is b:
                return a  # x & x -> x, max(x, x) -> x
            if op in ("sub", "bxor") and a is b and a.ty.is_int:
                return self.const(a.ty, 0)  # x - x -> 0 (ints)
            return None
        value = b.value
        if op == "land":
            return a if value else self.false  # x && true -> x ; x && false -> false
        if op == "lor":
            return self.true if value else a  # x || true -> true ; x || false -> x
        if not a.ty.is_int:
            return None
        if op in ("add", "sub", "bor", "bxor", "shl", "shr", "shr_rna") and value == 0:
            return a  # x + 0 -> x (and -, |, ^, shifts by 0)
        if op == "mul" and value == 1:
            return a  # x * 1 -> x
        if op == "mul" and value == 0:
            return b  # x * 0 -> 0
        if op == "div" and value == 1:
            return a
        if op == "band" and value == 0:
            return b
        return None

    def compare(self, op: str, a: Node, b: Node) -> Node:
        if a.ty != b.ty:
            raise InternalError(f"compare {op}: operand types {a.ty} and {b.ty} differ")
        if isinstance(a, Const) and isinstance(b, Const):
            return self.boolean(sem.compare(op, a.value, b.value))
        if isinstance(a, Const):
            op, a, b = _SWAP[op], b, a  # constant on the right
        if a is b and not a.ty.is_float:
            return self.boolean(op in ("le", "ge", "eq"))
        narrow = self._narrow_compare(op, a, b)
        if narrow is not None:
            return narrow
        return self._intern(Compare, BOOL, (op, a.id, b.id), op, a, b)

    def _narrow_compare(self, op: str, a: Node, b: Node) -> Node | None:
        """(W)x cmp (W)y -> x cmp y, and (W)x cmp c -> x cmp c' (c' of x's type), for a widening
        float conversion (W)x: widening is exact and order-preserving (NaN stays NaN), and x cannot
        lie strictly between the two neighbours of c in its type, so c' is c rounded down for <= and
        >, up for < and >=; x == c is false and x != c true when c is not of x's type. Why: C
        compares a _Float16 with a float literal in float (`x <= 0x1p-1f`); on x itself the
        comparison is a fact about the input (the attack's box, intervals, splitting)."""
        if not (isinstance(a, Cast) and a.ty.is_float and a.a.ty.is_float and a.a.ty.bits < a.ty.bits):
            return None
        x = a.a
        if isinstance(b, Cast) and b.a.ty == x.ty:
            return self.compare(op, x, b.a)
        if not isinstance(b, Const) or math.isnan(b.value):
            return None
        value = b.value
        if sem.round_float(x.ty, value) == value:
            return self.compare(op, x, self.const(x.ty, value))
        if op in ("eq", "ne"):
            return self.boolean(op == "ne")
        return self.compare(
            op, x, self.const(x.ty, sem.round_float_directed(x.ty, value, op in ("lt", "ge")))
        )

    def ite(self, c: Node, a: Node, b: Node) -> Node:
        if c.ty != BOOL:
            raise InternalError("ite condition is not boolean")
        if a.ty != b.ty:
            raise InternalError(f"ite arms of types {a.ty} and {b.ty}")
        if isinstance(c, Const):
            return a if c.value else b  # ite(true, a, b) -> a
        if a is b:
            return a  # ite(c, a, a) -> a
        if a.ty == BOOL and isinstance(a, Const) and isinstance(b, Const):
            return c if a.value else self.unary("lnot", c)  # ite(c, true, false) -> c
        if isinstance(c, Unary) and c.op == "lnot":
            return self.ite(c.a, b, a)  # ite(!c, a, b) -> ite(c, b, a)
        return self._intern(Ite, a.ty, (c.id, a.id, b.id), c, a, b)

    def cast(self, ty: Type, a: Node) -> Node:
        if a.ty == ty:
            return a
        if isinstance(a, Const):
            return self.const(ty, sem.cast(ty, a.ty, a.value))
        if ty == BOOL:
            return self.compare("ne", a, self.const(a.ty, 0))
        narrow = self._narrow_operation(ty, a)
        if narrow is not None:
            return narrow
        # (T)(U)x -> (T)x when U holds every value of x's type and T is an int type
        if (
            isinstance(a, Cast)
            and ty.is_int
            and a.ty.is_int
            and (a.a.ty.is_int or a.a.ty == BOOL)
            and a.ty.min <= a.a.ty.min
            and a.a.ty.max <= a.ty.max
        ):
            return self.cast(ty, a.a)
        return self._intern(Cast, ty, (a.id,), a)

    def _narrow_operation(self, ty: Type, a: Node) -> Node | None:
        """(half)(x op y) -> x op y in half, for + - * / computed in a wider float on operands that
        are half values (widened halves, constants representable in half).

        gcc on x86-64 evaluates _Float16 arithmetic in float and rounds at the conversion to
        _Float16 (its excess precision, see symex.EXCESS_F16); symex computes it the same way.
        Rounding the float (or double) result to half gives the correctly rounded half result:
        double rounding is innocuous when the wide significand has at least 2 * 11 + 2 bits (24
        and 53 do), half's overflow threshold and subnormal results included. The half operation
        is what the generated C means (every operation cast) and what the bounds (one rounding
        error instead of two) and the SMT encoding handle best."""
        if not (ty == F16 and isinstance(a, Binary) and a.op in ("add", "sub", "mul", "div")):
            return None
        if not (a.ty.is_float and a.ty.bits > ty.bits):
            return None
        x, y = self._as_narrow(a.a, ty), self._as_narrow(a.b, ty)
        if x is None or y is None:
            return None
        return self.binary(a.op, x, y)

    def _as_narrow(self, node: Node, ty: Type) -> Node | None:
        """`node` (a wider float) as a node of the float type `ty` if it is one of its values."""
        if isinstance(node, Cast) and node.a.ty == ty:
            return node.a
        if isinstance(node, Const) and sem.round_float(ty, node.value) == node.value:
            return self.const(ty, node.value)
        return None

    def read(self, table: Table, index: Node) -> Node:
        if isinstance(index, Const):
            position = min(max(int(index.value), 0), len(table) - 1)
            return self.const(table.ty, table.values[position])
        return self._intern(Read, table.ty, (id(table), index.id), table, index)

    def step(self, ty: Type, a: Node, starts: tuple[int, ...], values: tuple[int, ...]) -> Node:
        if len(set(values)) == 1:
            return self.const(ty, values[0])
        if isinstance(a, Const):
            return self.const(ty, sem.step_value(int(a.value), starts, values))
        return self._intern(Step, ty, (a.id, starts, values), a, starts, values)

    # -------------------------------------------------------------- helpers

    def land(self, *conds: Node) -> Node:
        result = self.true
        for cond in conds:
            result = self.binary("land", result, cond)
        return result

    def lor(self, *conds: Node) -> Node:
        result = self.false
        for cond in conds:
            result = self.binary("lor", result, cond)
        return result

    def lnot(self, cond: Node) -> Node:
        return self.unary("lnot", cond)

    def rebuild(self, node: Node, children: tuple[Node, ...]) -> Node:
        """`node` with new children, through the smart constructors (used by passes)."""
        if isinstance(node, (Const, Input)):
            return node
        if isinstance(node, Unary):
            return self.unary(node.op, children[0])
        if isinstance(node, Binary):
            return self.binary(node.op, children[0], children[1])
        if isinstance(node, Compare):
            return self.compare(node.op, children[0], children[1])
        if isinstance(node, Ite):
            return self.ite(*children)
        if isinstance(node, Cast):
            return self.cast(node.ty, children[0])
        if isinstance(node, Read):
            return self.read(node.table, children[0])
        if isinstance(node, Step):
            return self.step(node.ty, children[0], node.starts, node.values)
        raise InternalError(f"rebuild: unknown node kind {type(node).__name__}")


def dump(roots: Iterable[Node], limit: int = 200) -> str:
    """A readable listing `%id = op(args)` of the DAG below `roots` (for debugging and docs)."""
    lines = []
    for node in topological(roots)[:limit]:
        args = ", ".join(f"%{child.id}" for child in node.children())
        if isinstance(node, Const):
            text = repr(node)
        elif isinstance(node, Input):
            text = f"input {node.index} {node.name}"
        elif isinstance(node, (Unary, Binary, Compare)):
            text = f"{node.op}({args})"
        elif isinstance(node, Ite):
            text = f"ite({args})"
        elif isinstance(node, Cast):
            text = f"cast({args})"
        elif isinstance(node, Read):
            text = f"{node.table.name}[{args}]"
        elif isinstance(node, Step):
            text = f"step({args}; {len(node.starts)} pieces)"
        else:
            text = type(node).__name__
        lines.append(f"%{node.id}:{node.ty} = {text}")
    return "\n".join(lines)
