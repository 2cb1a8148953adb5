"""Network level: small readers of pycparser nodes shared by the lifter's matchers: each returns the piece it
recognises or raises `NotRecognised` naming the line."""

from __future__ import annotations

from fractions import Fraction

from pycparser import c_ast

from qverify.engine import c_types
from qverify.engine.cfront import float_literal, int_literal
from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.errors import InputError

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def where(node: c_ast.Node | None) -> str:
    if node is None or node.coord is None:
        return "?"
    return f"{node.coord.file}:{node.coord.line}"


def fail(node: c_ast.Node | None, message: str) -> NotRecognised:
    return NotRecognised(f"{where(node)}: {message}")


def is_id(node: c_ast.Node, name: str | None = None) -> bool:
    return isinstance(node, c_ast.ID) and (name is None or node.name == name)


def id_name(node: c_ast.Node, what: str) -> str:
    if not isinstance(node, c_ast.ID):
        raise fail(node, f"expected {what}")
    return node.name


def type_names(node: c_ast.Node) -> tuple[str, ...] | None:
    """The names of a plain scalar type (`TypeDecl` of an `IdentifierType`, no pointer), or None."""
    if isinstance(node, c_ast.Typename):
        node = node.type
    if isinstance(node, c_ast.TypeDecl) and isinstance(node.type, c_ast.IdentifierType):
        return tuple(node.type.names)
    return None


def integer_constant(node: c_ast.Node) -> int | None:
    """A signed integer constant (with unary minus and the `(-2147483647 - 1)` form), or None."""
    if isinstance(node, c_ast.Constant) and node.type not in ("float", "double", "char", "string"):
        try:
            value, ctype = int_literal(node.value, node)
        except InputError:
            return None
        return value if ctype.signed else None
    if isinstance(node, c_ast.UnaryOp) and node.op == "-":
        inner = integer_constant(node.expr)
        return None if inner is None else -inner
    if isinstance(node, c_ast.BinaryOp) and node.op in ("-", "+"):
        # only where no C type can overflow: int32 operands and result (e.g. (-2147483647 - 1))
        left, right = integer_constant(node.left), integer_constant(node.right)
        if left is None or right is None:
            return None
        result = left - right if node.op == "-" else left + right
        return result if all(INT32_MIN <= v <= INT32_MAX for v in (left, right, result)) else None
    return None


def float_constant(node: c_ast.Node) -> tuple[Fraction, int] | None:
    """A floating constant's exact value and its type's width (32 or 64 bits), or None."""
    negate = False
    if isinstance(node, c_ast.UnaryOp) and node.op == "-":
        node, negate = node.expr, True
    if not isinstance(node, c_ast.Constant) or node.type not in ("float", "double"):
        return None
    try:
        value, ctype = float_literal(node.value, node)
    except InputError:
        return None
    if ctype not in (c_types.F32, c_types.F64):
        return None
    exact = Fraction(value)
    return (-exact if negate else exact), ctype.bits


def index_ref(node: c_ast.Node) -> tuple[str, list[c_ast.Node]] | None:
    """`a[e1][e2]...` as (a, [e1, e2, ...]), or None."""
    indices: list[c_ast.Node] = []
    while isinstance(node, c_ast.ArrayRef):
        indices.append(node.subscript)
        node = node.name
    if not isinstance(node, c_ast.ID):
        return None
    return node.name, indices[::-1]


def indexed_by(node: c_ast.Node, *indices: str) -> str | None:
    """The array `a` of `a[i1][i2]...` whose subscripts are exactly the identifiers `indices`, or None."""
    ref = index_ref(node)
    if ref is None or len(ref[1]) != len(indices):
        return None
    if not all(is_id(subscript, index) for subscript, index in zip(ref[1], indices)):
        return None
    return ref[0]


def cast_operand(node: c_ast.Node, names: tuple[tuple[str, ...], ...]) -> c_ast.Node | None:
    """The operand of `(T)e` when T's type names are one of `names`, else None."""
    if isinstance(node, c_ast.Cast) and type_names(node.to_type) in names:
        return node.expr
    return None


def call(node: c_ast.Node, name: str | None = None) -> tuple[str, list[c_ast.Node]] | None:
    """`f(args)` as (f, args), or None."""
    if not isinstance(node, c_ast.FuncCall) or not isinstance(node.name, c_ast.ID):
        return None
    if name is not None and node.name.name != name:
        return None
    return node.name.name, list(node.args.exprs) if node.args is not None else []


def conjuncts(node: c_ast.Node, operator: str = "&&") -> list[c_ast.Node]:
    """The operands of a chain of `&&` (or `||`), left to right."""
    if isinstance(node, c_ast.BinaryOp) and node.op == operator:
        return conjuncts(node.left, operator) + conjuncts(node.right, operator)
    return [node]


def statements(node: c_ast.Node) -> list[c_ast.Node]:
    """The items of a compound statement (a single statement is a list of one)."""
    if isinstance(node, c_ast.Compound):
        return list(node.block_items or [])
    return [node]
