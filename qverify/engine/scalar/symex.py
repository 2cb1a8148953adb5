"""Scalar path: symbolic execution of `main`: functions inlined, loops unrolled, constant indices resolved.

The executor walks the pycparser AST of a `TranslationUnit` once, from `main`, keeping every
variable's current SSA value. Control flow that depends on inputs is handled with path guards: a
branch runs under `guard && cond`, an assignment under a guard becomes `ite(guard, new, old)`, and
an early `return` / `break` / `continue` removes its paths from the guard of what follows. An
assume or assert under a guard `g` becomes `!g || cond`. Loops must have conditions that fold to
constants (the loop bound is a constant); a read of a constant table at a symbolic index becomes a
`Read` node; any other array read at a symbolic index becomes an ite chain.

Supported: scalar integer/float/double/_Float16/_Bool variables (_Float16 arithmetic as gcc
evaluates it: in float, see EXCESS_F16), arrays of any dimension (local, global, const),
pointers to arrays and array elements with constant offsets, every C operator on those, if/else,
for/while/do loops, break/continue/return, calls of functions with bodies (inlined; recursion is an
error), nondet_* / __VERIFIER_nondet_* calls (inputs, in call order), __ESBMC_assume /
__VERIFIER_assume, __ESBMC_assert and assert().
Unsupported (an error naming file:line): pointers into unknown memory, symbolic pointer offsets,
writes at symbolic indices, loops whose condition depends on inputs or that do not terminate,
recursion, switch/goto, structs, calls of functions without a body (I/O, libm, malloc).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from pycparser import c_ast

from qverify.engine import c_types
from qverify.engine.c_types import BOOL
from qverify.engine.cfront import (
    VOID,
    ArrayT,
    CType,
    FuncT,
    PointerT,
    TranslationUnit,
    TypeResolver,
    VoidT,
    coord_of,
    float_literal,
    int_literal,
    unsupported,
    where,
)
from qverify.engine.scalar import ssa
from qverify.engine.scalar.ssa import Node, NodeManager
from qverify.errors import InputError, InternalError, ResourceLimitError, UnsupportedError

MAX_LOOP_ITERATIONS = 10_000_000
MAX_SYMBOLIC_EXIT_ITERATIONS = 1_000  # a loop whose exit depends on inputs: unrolled this far at most
MAX_CALL_DEPTH = 200
# gcc on x86-64 (without AVX512-FP16) evaluates _Float16 arithmetic in float and keeps the float
# value (an *excess-precision* half) until a conversion (a cast, an assignment, a return, an
# argument): FLT_EVAL_METHOD 0 does not describe it. Measured with gcc 12 (-std=c99, the strict
# flags; tests/test_engine_half.py checks every case against gcc):
#   a + b, a * i (+ - * / whose usual arithmetic conversions give _Float16): the operands are
#       converted to _Float16 (an int rounds to half; an excess operand keeps its float value),
#       the operation is done in float, the result is an excess half;
#   -e of an excess e: excess;  c ? e : i: the int arm converted to _Float16, the result excess;
#   comparisons: in _Float16 (an int operand rounded to half) unless an operand is excess: then in
#       float, an int operand converted to float directly;
#   (float)(a + b), (int)(a + b) see the float value; (_Float16)(a + b) rounds it.
# Symex holds an excess half as a float node and tracks which expressions (AST nodes) are excess.
EXCESS_F16 = c_types.F32

NONDET_TYPES = {
    "int": c_types.I32,
    "uint": c_types.U32,
    "unsigned": c_types.U32,
    "unsigned_int": c_types.U32,
    "long": c_types.I64,
    "ulong": c_types.U64,
    "longlong": c_types.I64,
    "ulonglong": c_types.U64,
    "short": c_types.I16,
    "ushort": c_types.U16,
    "char": c_types.I8,
    "uchar": c_types.U8,
    "bool": BOOL,
    "_Bool": BOOL,
    "float": c_types.F32,
    "double": c_types.F64,
    "half": c_types.F16,
    "float16": c_types.F16,
    "int32": c_types.I32,
    "int64": c_types.I64,
}
ASSUME_NAMES = ("__ESBMC_assume", "__VERIFIER_assume")
ASSERT_NAMES = ("__ESBMC_assert", "__qv_c_assert")
IO_NAMES = frozenset(
    [
        "printf",
        "fprintf",
        "sprintf",
        "snprintf",
        "scanf",
        "puts",
        "putchar",
        "getchar",
        "fgets",
        "fopen",
        "fclose",
        "fread",
        "fwrite",
    ]
)


# ------------------------------------------------------------------------------ runtime values


class Cell:
    """A scalar variable: its declared type and current SSA value (None before assignment)."""

    __slots__ = ("const", "ctype", "name", "value")

    def __init__(self, ctype: c_types.Type, value: Node | None, name: str, const: bool = False) -> None:
        self.ctype = ctype
        self.value = value
        self.name = name
        self.const = const


class ArrayVal:
    """An array object: `elems` are SSA nodes (innermost dimension) or ArrayVals (outer)."""

    __slots__ = ("_table", "const", "ctype", "elems", "name")

    def __init__(self, ctype: ArrayT, elems: list, name: str, const: bool) -> None:
        self.ctype = ctype
        self.elems = elems
        self.name = name
        self.const = const
        self._table: ssa.Table | None = None

    def flat(self) -> list:
        out: list = []
        stack = [self]
        while stack:
            current = stack.pop()
            if current.elems and isinstance(current.elems[0], ArrayVal):
                stack.extend(reversed(current.elems))
            else:
                out.extend(current.elems)
        return out


@dataclass(frozen=True, slots=True)
class PointerVal:
    """A pointer to element `offset` of `target` (an ArrayVal) or to a scalar Cell (offset 0)."""

    target: ArrayVal | Cell
    offset: int
    elem: CType


@dataclass(frozen=True, slots=True)
class StringVal:
    text: str


Value = Node | ArrayVal | PointerVal | StringVal


@dataclass
class Frame:
    name: str
    result: CType
    ret: Node | None
    returned: Node


@dataclass
class LoopState:
    broken: Node
    continued: Node


class NotPure(Exception):
    """Raised while summarising a function that touches state other than its scalar parameters."""


@dataclass
class Summary:
    """A function's effect on placeholder parameters: its result and its assumes/asserts."""

    params: list[Node]
    result: Node | None
    steps: list[tuple[str, Node, str, c_types.Coord | None]]
    order: list[Node]


class SymexStats:
    def __init__(self) -> None:
        self.calls = 0
        self.iterations = 0


# ------------------------------------------------------------------------------ helpers on types


def promote(ty: c_types.Type) -> c_types.Type:
    """C integer promotion."""
    if ty.is_bool or (ty.is_int and ty.bits < 32):
        return c_types.I32
    return ty


def common_type(a: c_types.Type, b: c_types.Type) -> c_types.Type:
    """C's usual arithmetic conversions (_Float16 ranks below float; with an integer: _Float16)."""
    if a.is_float or b.is_float:
        return max((t for t in (a, b) if t.is_float), key=lambda t: t.bits)
    a, b = promote(a), promote(b)
    if a == b:
        return a
    if a.signed == b.signed:
        return a if a.bits >= b.bits else b
    unsigned, signed = (a, b) if not a.signed else (b, a)
    if unsigned.bits >= signed.bits:
        return unsigned
    if signed.bits > unsigned.bits:
        return signed
    return c_types.int_type(signed.bits, False)


def sizeof(ctype: CType) -> int:
    if isinstance(ctype, c_types.Type):
        return 1 if ctype.is_bool else ctype.bits // 8
    if isinstance(ctype, ArrayT):
        return sizeof(ctype.elem) * (ctype.length or 0)
    if isinstance(ctype, PointerT):
        return 8
    return 1


def _unescape(text: str) -> str:
    body = text[1:-1] if text.startswith('"') else text
    out, index = [], 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            nxt = body[index + 1]
            out.append({"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}.get(nxt, nxt))
            index += 2
        else:
            out.append(char)
            index += 1
    return "".join(out)


# ------------------------------------------------------------------------------ the executor


class Executor:
    """Executes `main` of a translation unit symbolically; see the module docstring."""

    def __init__(self, unit: TranslationUnit, manager: NodeManager, deadline: float | None = None) -> None:
        self.unit = unit
        self.m = manager
        self.deadline = deadline
        self.resolver = TypeResolver(unit)
        self.inputs: list[ssa.Input] = []
        self.steps: list[ssa.Assume | ssa.Assert] = []
        self.globals: dict[str, Cell | ArrayVal] = {}
        self.scopes: list[dict[str, Cell | ArrayVal]] = []
        self.frames: list[Frame] = []
        self.loops: list[LoopState] = []
        self.static_guard: Node = manager.true
        self.stats = SymexStats()
        self._ticks = 0
        self._constants: dict[c_ast.Node, Value] = {}
        self._cast_types: dict[c_ast.Node, CType] = {}
        self._excess: set[int] = set()  # ids of the expressions whose value is an excess half
        self.summaries: dict[str, Summary | None] = {}
        self._summarising = 0
        self.call_stack: list[str] = []
        self._stmt: dict[type, Callable] = {
            c_ast.Compound: self.s_compound,
            c_ast.Decl: self.s_decl,
            c_ast.DeclList: self.s_decllist,
            c_ast.If: self.s_if,
            c_ast.For: self.s_for,
            c_ast.While: self.s_while,
            c_ast.DoWhile: self.s_dowhile,
            c_ast.Return: self.s_return,
            c_ast.Break: self.s_break,
            c_ast.Continue: self.s_continue,
            c_ast.EmptyStatement: lambda node: None,
            c_ast.Pragma: lambda node: None,
            c_ast.Typedef: self.s_typedef,
        }
        self._expr: dict[type, Callable] = {
            c_ast.Constant: self.e_constant,
            c_ast.ID: self.e_id,
            c_ast.BinaryOp: self.e_binary,
            c_ast.UnaryOp: self.e_unary,
            c_ast.TernaryOp: self.e_ternary,
            c_ast.Assignment: self.e_assignment,
            c_ast.ArrayRef: self.e_arrayref,
            c_ast.FuncCall: self.e_call,
            c_ast.Cast: self.e_cast,
            c_ast.ExprList: self.e_exprlist,
        }

    # -------------------------------------------------------------- entry

    def run(self) -> ssa.Program:
        for decl in self.unit.globals:
            self.globals[decl.name] = self.make_variable(
                decl.name, decl.ctype, decl.const, decl.init, decl.node
            )
        main = self.unit.functions.get("main")
        if main is None:
            raise InputError(f"{self.unit.source}: no main function")
        ftype = self.unit.function_types["main"]
        if ftype.params:
            raise unsupported(main.decl, "main with parameters")
        self.inline(main, [], main.decl)
        return ssa.Program(tuple(self.inputs), tuple(self.steps), self.unit.source, self.m)

    def tick(self, node: c_ast.Node) -> None:
        self._ticks += 1
        if self._ticks & 0xFFF == 0 and self.deadline is not None and time.monotonic() > self.deadline:
            raise ResourceLimitError(f"timeout during symbolic execution (at {where(node) or 'main'})")

    # -------------------------------------------------------------- guards

    def guard(self) -> Node:
        m = self.m
        g = self.static_guard
        if self.frames and self.frames[-1].returned is not m.false:
            g = m.land(g, m.lnot(self.frames[-1].returned))
        if self.loops:
            loop = self.loops[-1]
            if loop.broken is not m.false:
                g = m.land(g, m.lnot(loop.broken))
            if loop.continued is not m.false:
                g = m.land(g, m.lnot(loop.continued))
        return g

    def under_guard(self, value: Node) -> Node:
        """`value` simplified on the paths the current guard admits: each conjunct of the guard is
        true there (e.g. a loop counter `ite(!broken, i + 1, i)` is `i + 1` while not broken)."""
        m = self.m
        truths: dict[int, Node] = {}
        stack: list[tuple[Node, bool]] = [(self.guard(), True)]
        while stack:
            item, holds = stack.pop()
            if isinstance(item, ssa.Const):
                continue
            truths[item.id] = m.boolean(holds)
            if isinstance(item, ssa.Unary) and item.op == "lnot":
                stack.append((item.a, not holds))
            elif isinstance(item, ssa.Binary) and item.op == ("land" if holds else "lor"):
                stack.extend(((item.a, holds), (item.b, holds)))
        if not truths:
            return value
        memo: dict[int, Node] = dict(truths)
        for node in ssa.topological([value]):
            if node.id in memo:
                continue
            children = node.children()
            memo[node.id] = m.rebuild(node, tuple(memo[c.id] for c in children)) if children else node
        return memo[value.id]

    # -------------------------------------------------------------- variables

    def lookup(self, name: str, node: c_ast.Node) -> Cell | ArrayVal:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.globals:
            variable = self.globals[name]
            if self._summarising and not variable.const:
                raise NotPure(name)
            return variable
        raise unsupported(node, f"'{name}' is not a variable the engine knows (undeclared or a function)")

    def make_variable(
        self,
        name: str,
        ctype: CType,
        const: bool,
        init: c_ast.Node | None,
        node: c_ast.Node,
        zero: bool = True,
    ) -> Cell | ArrayVal:
        """A new variable; `zero` gives uninitialised scalars the value 0 (globals)."""
        if isinstance(ctype, ArrayT):
            if ctype.length is None:
                if isinstance(init, c_ast.InitList):
                    ctype = ArrayT(ctype.elem, len(init.exprs))
                elif isinstance(init, c_ast.Constant) and init.type == "string":
                    ctype = ArrayT(ctype.elem, len(_unescape(init.value)) + 1)
                else:
                    raise unsupported(node, f"array '{name}' without a length")
            array = self.new_array(name, ctype, const, zero)
            if init is not None:
                self.init_array(array, init)
            return array
        if isinstance(ctype, PointerT):
            cell = Cell(c_types.U64, None, name)  # placeholder; pointers are kept in `_pointers`
            if init is not None:
                value = self.expr(init)
                cell.value = self.to_pointer(value, init)  # type: ignore[assignment]
            return cell
        if isinstance(ctype, (VoidT, FuncT)):
            raise unsupported(node, f"variable '{name}' of type {type(ctype).__name__}")
        value = None
        if init is not None:
            if isinstance(init, c_ast.InitList):
                if len(init.exprs) != 1:
                    raise unsupported(init, "scalar initialiser list with several values")
                init = init.exprs[0]
            value = self.nondet_narrowed(init, ctype)
            if value is None:
                value = self.convert(self.rvalue(init), ctype, init)
        elif zero:
            value = self.m.const(ctype, 0)
        return Cell(ctype, value, name, const)

    def new_array(self, name: str, ctype: ArrayT, const: bool, zero: bool) -> ArrayVal:
        if isinstance(ctype.elem, ArrayT):
            if ctype.elem.length is None:
                raise unsupported(None, f"array '{name}': inner dimension without a length")
            elems = [self.new_array(name, ctype.elem, const, zero) for _ in range(ctype.length or 0)]
        elif isinstance(ctype.elem, c_types.Type):
            fill = self.m.const(ctype.elem, 0) if zero else None
            elems = [fill] * (ctype.length or 0)
        else:
            raise unsupported(None, f"array '{name}' of {type(ctype.elem).__name__}")
        return ArrayVal(ctype, elems, name, const)

    def init_array(self, array: ArrayVal, init: c_ast.Node) -> None:
        """Fill from an initialiser list (with brace elision) or a string; the rest is zero."""
        zero_fill = self.m.const(array.ctype.elem, 0) if isinstance(array.ctype.elem, c_types.Type) else None
        if zero_fill is not None:
            array.elems = [zero_fill] * len(array.elems)
        else:
            for sub in array.elems:
                self.init_array_zero(sub)
        if isinstance(init, c_ast.Constant) and init.type == "string":
            text = _unescape(init.value)
            for index, char in enumerate(text[: len(array.elems)]):
                array.elems[index] = self.m.const(array.ctype.elem, ord(char))  # type: ignore[arg-type]
            return
        if not isinstance(init, c_ast.InitList):
            raise unsupported(init, f"initialiser of array '{array.name}' is not a list")
        items = list(init.exprs)
        self._fill(array, items, init)
        if items:
            raise unsupported(init, f"too many initialisers for array '{array.name}'")

    def init_array_zero(self, array: ArrayVal) -> None:
        if isinstance(array.ctype.elem, c_types.Type):
            array.elems = [self.m.const(array.ctype.elem, 0)] * len(array.elems)
        else:
            for sub in array.elems:
                self.init_array_zero(sub)

    def _fill(self, array: ArrayVal, items: list, node: c_ast.Node) -> None:
        """Consume items (front of the list) into `array`, C99 6.7.8 brace elision."""
        for index in range(len(array.elems)):
            if not items:
                return
            item = items[0]
            if isinstance(item, c_ast.NamedInitializer):
                raise unsupported(item, "designated initialisers")
            if isinstance(array.ctype.elem, ArrayT):
                sub = array.elems[index]
                if isinstance(item, c_ast.InitList):
                    items.pop(0)
                    inner = list(item.exprs)
                    self._fill(sub, inner, item)
                    if inner:
                        raise unsupported(item, f"too many initialisers for array '{array.name}'")
                else:
                    self._fill(sub, items, node)
            else:
                items.pop(0)
                if isinstance(item, c_ast.InitList):
                    if len(item.exprs) != 1:
                        raise unsupported(item, "braced scalar initialiser with several values")
                    item = item.exprs[0]
                array.elems[index] = self.convert(self.rvalue(item), array.ctype.elem, item)  # type: ignore[arg-type]

    # -------------------------------------------------------------- conversions

    def convert(self, value: Value, ctype: CType, node: c_ast.Node | None) -> Node:
        """An rvalue converted (as by assignment) to the scalar type `ctype`."""
        if not isinstance(ctype, c_types.Type):
            raise unsupported(node, "assignment of a non-scalar value")
        if not isinstance(value, Node):
            if isinstance(value, PointerVal) and ctype == BOOL:
                return self.m.true
            raise unsupported(node, "a pointer or array used as a number")
        return self.m.cast(ctype, value)

    def rvalue(self, node: c_ast.Node) -> Value:
        return self.expr(node)

    def scalar(self, node: c_ast.Node) -> Node:
        value = self.expr(node)
        if not isinstance(value, Node):
            raise unsupported(node, "a pointer, array or string used as a number")
        return value

    def arith(self, value: Node) -> Node:
        """Integer promotion of a scalar (booleans become int)."""
        promoted = promote(value.ty)
        return value if promoted == value.ty else self.m.cast(promoted, value)

    def truth(self, value: Value, node: c_ast.Node | None) -> Node:
        """A C value in a condition: `!= 0`."""
        if isinstance(value, (PointerVal, ArrayVal, StringVal)):
            return self.m.true
        if value.ty == BOOL:
            return value
        return self.m.compare("ne", value, self.m.const(value.ty, 0))

    def to_pointer(self, value: Value, node: c_ast.Node) -> PointerVal:
        if isinstance(value, PointerVal):
            return value
        if isinstance(value, ArrayVal):
            return PointerVal(value, 0, value.ctype.elem)
        raise unsupported(
            node, "pointer into unknown memory (only pointers to arrays and variables are supported)"
        )

    # -------------------------------------------------------------- statements

    def stmt(self, node: c_ast.Node) -> None:
        self.tick(node)
        if self.guard() is self.m.false:
            return  # dead code
        handler = self._stmt.get(type(node))
        if handler is not None:
            handler(node)
            return
        if isinstance(node, (c_ast.Switch, c_ast.Case, c_ast.Default)):
            raise unsupported(node, "switch statements")
        if isinstance(node, (c_ast.Goto, c_ast.Label)):
            raise unsupported(node, "goto and labels")
        self.expr(node)  # an expression statement

    def s_compound(self, node: c_ast.Compound) -> None:
        self.scopes.append({})
        try:
            for item in node.block_items or []:
                if self.guard() is self.m.false:
                    break
                self.stmt(item)
        finally:
            self.scopes.pop()

    def s_typedef(self, node: c_ast.Typedef) -> None:
        self.unit.typedefs[node.name] = self.resolver.resolve(node.type)

    def s_decllist(self, node: c_ast.DeclList) -> None:
        for decl in node.decls:
            self.s_decl(decl)

    def s_decl(self, node: c_ast.Decl) -> None:
        if isinstance(node.type, c_ast.FuncDecl):
            ftype, _ = self.resolver.resolve(node.type)
            self.unit.function_types.setdefault(node.name, ftype)  # type: ignore[arg-type]
            return
        if "static" in (node.storage or []):
            raise unsupported(node, f"static local variable '{node.name}'")
        if "extern" in (node.storage or []):
            return
        ctype, const = self.resolver.resolve(node.type)
        self.scopes[-1][node.name] = self.make_variable(node.name, ctype, const, node.init, node, zero=False)

    def s_if(self, node: c_ast.If) -> None:
        cond = self.truth(self.expr(node.cond), node.cond)
        m = self.m
        if cond is m.true:
            self.stmt(node.iftrue)
            return
        if cond is m.false:
            if node.iffalse is not None:
                self.stmt(node.iffalse)
            return
        saved = self.static_guard
        self.static_guard = m.land(saved, cond)
        self.stmt(node.iftrue)
        if node.iffalse is not None:
            self.static_guard = m.land(saved, m.lnot(cond))
            self.stmt(node.iffalse)
        self.static_guard = saved

    def _loop(
        self,
        node: c_ast.Node,
        cond: c_ast.Node | None,
        body: c_ast.Node,
        nxt: c_ast.Node | None,
        test_first: bool,
    ) -> None:
        m = self.m
        loop = LoopState(m.false, m.false)
        self.loops.append(loop)
        try:
            iterations = 0
            first = True
            while True:
                if not (first and not test_first):
                    if self.guard() is m.false:
                        break
                    if cond is not None:
                        value = self.truth(self.expr(cond), cond)
                        if value is not m.true and value is not m.false:
                            value = self.under_guard(value)
                        if value is m.false:
                            break
                        if value is not m.true:
                            raise unsupported(
                                node,
                                "loop condition depends on nondeterministic values (only loops with "
                                "constant bounds can be unrolled)",
                            )
                first = False
                iterations += 1
                self.stats.iterations += 1
                if iterations > MAX_LOOP_ITERATIONS:
                    raise unsupported(
                        node, f"loop does not terminate within {MAX_LOOP_ITERATIONS} iterations"
                    )
                if iterations > MAX_SYMBOLIC_EXIT_ITERATIONS and loop.broken is not m.false:
                    raise unsupported(
                        node,
                        f"loop does not terminate within {MAX_SYMBOLIC_EXIT_ITERATIONS} iterations "
                        "(its exit depends on nondeterministic values)",
                    )
                self.stmt(body)
                loop.continued = m.false
                if self.guard() is m.false:
                    break
                if nxt is not None:
                    self.expr(nxt)
        finally:
            self.loops.pop()

    def s_for(self, node: c_ast.For) -> None:
        self.scopes.append({})
        try:
            if node.init is not None:
                if isinstance(node.init, c_ast.DeclList):
                    self.s_decllist(node.init)
                else:
                    self.expr(node.init)
            self._loop(node, node.cond, node.stmt, node.next, True)
        finally:
            self.scopes.pop()

    def s_while(self, node: c_ast.While) -> None:
        self._loop(node, node.cond, node.stmt, None, True)

    def s_dowhile(self, node: c_ast.DoWhile) -> None:
        self._loop(node, node.cond, node.stmt, None, False)

    def s_return(self, node: c_ast.Return) -> None:
        if not self.frames:
            raise InternalError("return outside a function")
        frame = self.frames[-1]
        g = self.guard()
        if node.expr is not None:
            value = self.expr(node.expr)
            if isinstance(frame.result, c_types.Type):
                value = self.convert(value, frame.result, node.expr)
                frame.ret = value if frame.ret is None else self.m.ite(g, value, frame.ret)
            elif frame.result != VOID:
                raise unsupported(node, "functions returning pointers or structs")
        frame.returned = self.m.lor(frame.returned, g)

    def s_break(self, node: c_ast.Break) -> None:
        if not self.loops:
            raise unsupported(node, "break outside a loop")
        loop = self.loops[-1]
        loop.broken = self.m.lor(loop.broken, self.guard())

    def s_continue(self, node: c_ast.Continue) -> None:
        if not self.loops:
            raise unsupported(node, "continue outside a loop")
        loop = self.loops[-1]
        loop.continued = self.m.lor(loop.continued, self.guard())

    # -------------------------------------------------------------- expressions

    def expr(self, node: c_ast.Node) -> Value:
        handler = self._expr.get(type(node))
        if handler is None:
            if isinstance(node, c_ast.CompoundLiteral):
                raise unsupported(node, "compound literals")
            if isinstance(node, c_ast.StructRef):
                raise unsupported(node, "structs and unions")
            raise unsupported(node, f"expression {type(node).__name__}")
        return handler(node)

    def e_constant(self, node: c_ast.Constant) -> Value:
        cached = self._constants.get(node)
        if cached is None:
            cached = self._constants[node] = self._constant(node)
        return cached

    def _constant(self, node: c_ast.Constant) -> Value:
        if node.type == "string":
            return StringVal(_unescape(node.value))
        if node.type in ("float", "double", "long double"):
            value, ty = float_literal(node.value, node)
            return self.m.const(ty, value)
        if node.type == "char":
            value, ty = int_literal(node.value, node)
            return self.m.const(ty, value)
        value, ty = int_literal(node.value, node)
        return self.m.const(ty, value)

    def e_id(self, node: c_ast.ID) -> Value:
        if node.name in self.unit.enum_constants:
            return self.m.const(c_types.I32, self.unit.enum_constants[node.name])
        variable = self.lookup(node.name, node)
        if isinstance(variable, ArrayVal):
            return variable
        if isinstance(variable.value, PointerVal):
            return variable.value
        if variable.value is None:
            raise unsupported(node, f"'{node.name}' is read before it is assigned")
        return variable.value

    def e_exprlist(self, node: c_ast.ExprList) -> Value:
        value: Value = self.m.const(c_types.I32, 0)
        for item in node.exprs:
            value = self.expr(item)
        if node.exprs and id(node.exprs[-1]) in self._excess:
            self._excess.add(id(node))
        return value

    def e_cast(self, node: c_ast.Cast) -> Value:
        ctype = self._cast_types.get(node)
        if ctype is None:
            ctype = self._cast_types[node] = self.resolver.resolve(node.to_type)[0]
        value = self.expr(node.expr)
        if ctype == VOID:
            return self.m.const(c_types.I32, 0)
        if isinstance(ctype, PointerT):
            return self.to_pointer(value, node)
        if not isinstance(value, Node):
            raise unsupported(node, "cast of a pointer to a number")
        return self.m.cast(ctype, value)  # type: ignore[arg-type]

    # binary operators -----------------------------------------------------------

    _ARITH: ClassVar[dict[str, str]] = {
        "+": "add",
        "-": "sub",
        "*": "mul",
        "/": "div",
        "%": "rem",
        "&": "band",
        "|": "bor",
        "^": "bxor",
    }
    _CMP: ClassVar[dict[str, str]] = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}

    def e_binary(self, node: c_ast.BinaryOp) -> Value:
        op = node.op
        if op in ("&&", "||"):
            return self.logical(node)
        left = self.expr(node.left)
        right = self.expr(node.right)
        excess = (id(node.left) in self._excess, id(node.right) in self._excess)
        value = self.apply_binary(op, left, right, node, excess)
        if op in ("+", "-", "*", "/") and self.half_arithmetic(left, right, excess):
            self._excess.add(id(node))
        return value

    def semantic_type(self, value: Node, excess: bool) -> c_types.Type:
        """The C type of a scalar value: _Float16 for an excess half (held in a float node)."""
        return c_types.F16 if excess else value.ty

    def half_arithmetic(self, left: Value, right: Value, excess: tuple[bool, bool]) -> bool:
        """Whether arithmetic on these operands is _Float16 arithmetic (done in float by gcc)."""
        if not (isinstance(left, Node) and isinstance(right, Node)):
            return False
        ty = common_type(self.semantic_type(left, excess[0]), self.semantic_type(right, excess[1]))
        return ty == c_types.F16

    def excess_operand(self, value: Node, excess: bool) -> Node:
        """An operand of _Float16 arithmetic: converted to _Float16, then held in float."""
        return value if excess else self.m.cast(EXCESS_F16, self.m.cast(c_types.F16, value))

    def apply_binary(
        self, op: str, left: Value, right: Value, node: c_ast.Node, excess: tuple[bool, bool] = (False, False)
    ) -> Value:
        m = self.m
        if isinstance(left, (PointerVal, ArrayVal)) or isinstance(right, (PointerVal, ArrayVal)):
            return self.pointer_binary(op, left, right, node)
        if isinstance(left, StringVal) or isinstance(right, StringVal):
            raise unsupported(node, "string operations")
        if op in ("<<", ">>"):
            a, b = self.arith(left), self.arith(right)
            if a.ty.is_float or b.ty.is_float:
                raise InputError(f"{where(node)}shift of a floating value")
            return m.binary("shl" if op == "<<" else "shr", a, b)
        ty = common_type(self.semantic_type(left, excess[0]), self.semantic_type(right, excess[1]))
        if op in self._CMP:
            if ty == c_types.F16 and any(excess):
                ty = EXCESS_F16
            return m.compare(self._CMP[op], m.cast(ty, left), m.cast(ty, right))
        if op in self._ARITH:
            if ty.is_float and op in ("%", "&", "|", "^"):
                raise InputError(f"{where(node)}operator {op} on a floating value")
            if ty == c_types.F16:
                a, b = self.excess_operand(left, excess[0]), self.excess_operand(right, excess[1])
                return m.binary(self._ARITH[op], a, b)
            return m.binary(self._ARITH[op], m.cast(ty, left), m.cast(ty, right))
        raise unsupported(node, f"operator {op}")

    def pointer_binary(self, op: str, left: Value, right: Value, node: c_ast.Node) -> Value:
        m = self.m
        if op in ("+", "-") and isinstance(right, Node):
            pointer = self.to_pointer(left, node)
            if not isinstance(right, ssa.Const) or not right.ty.is_int:
                raise unsupported(node, "pointer arithmetic with a symbolic offset")
            step = int(right.value) if op == "+" else -int(right.value)
            return PointerVal(pointer.target, pointer.offset + step, pointer.elem)
        if op == "+" and isinstance(left, Node):
            return self.pointer_binary("+", right, left, node)
        if (
            op in ("-", "==", "!=", "<", "<=", ">", ">=")
            and not isinstance(right, Node)
            and not isinstance(left, Node)
        ):
            a, b = self.to_pointer(left, node), self.to_pointer(right, node)
            if a.target is not b.target:
                if op in ("==", "!="):
                    return m.boolean(op == "!=")
                raise unsupported(node, "comparison of pointers into different objects")
            if op == "-":
                return m.const(c_types.I64, a.offset - b.offset)
            from qverify.engine.scalar.semantics import compare

            return m.boolean(compare(self._CMP[op], a.offset, b.offset))
        raise unsupported(node, f"operator {op} on pointers")

    def logical(self, node: c_ast.BinaryOp) -> Node:
        """a && b, a || b: b is evaluated only on the paths where it is reached (its side effects
        -- calls with assertions -- are guarded)."""
        m = self.m
        left = self.truth(self.expr(node.left), node.left)
        if node.op == "&&":
            if left is m.false:
                return m.false
            reach = left
        else:
            if left is m.true:
                return m.true
            reach = m.lnot(left)
        saved = self.static_guard
        self.static_guard = m.land(saved, reach)
        try:
            right = self.truth(self.expr(node.right), node.right)
        finally:
            self.static_guard = saved
        return m.land(left, right) if node.op == "&&" else m.lor(left, right)

    # unary operators ------------------------------------------------------------

    def e_unary(self, node: c_ast.UnaryOp) -> Value:
        m = self.m
        op = node.op
        if op in ("++", "--", "p++", "p--"):
            return self.increment(node)
        if op == "sizeof":
            if isinstance(node.expr, c_ast.Typename):
                ctype, _ = self.resolver.resolve(node.expr)
            else:
                ctype = self.static_type(node.expr)
            return m.const(c_types.U64, sizeof(ctype))
        if op == "&":
            return self.address_of(node.expr, node)
        value = self.expr(node.expr)
        if op == "*":
            pointer = self.to_pointer(value, node)
            return self.load(pointer, node)
        if op == "!":
            return m.lnot(self.truth(value, node.expr))
        if not isinstance(value, Node):
            raise unsupported(node, f"operator {op} on a pointer")
        if op in ("-", "+") and id(node.expr) in self._excess:
            self._excess.add(id(node))
        if op == "-":
            return m.unary("neg", self.arith(value))
        if op == "+":
            return self.arith(value)
        if op == "~":
            if value.ty.is_float:
                raise InputError(f"{where(node)}operator ~ on a floating value")
            return m.unary("bnot", self.arith(value))
        raise unsupported(node, f"operator {op}")

    def static_type(self, node: c_ast.Node) -> CType:
        if isinstance(node, c_ast.ID):
            variable = self.lookup(node.name, node)
            return variable.ctype
        value = self.expr(node)
        if isinstance(value, Node):
            return self.semantic_type(value, id(node) in self._excess)
        if isinstance(value, ArrayVal):
            return value.ctype
        return PointerT(VOID)

    def address_of(self, target: c_ast.Node, node: c_ast.Node) -> PointerVal:
        if isinstance(target, c_ast.ID):
            variable = self.lookup(target.name, target)
            if isinstance(variable, ArrayVal):
                return PointerVal(variable, 0, variable.ctype)
            return PointerVal(variable, 0, variable.ctype)
        if isinstance(target, c_ast.ArrayRef):
            array, index = self.element_location(target)
            return PointerVal(array, index, array.ctype.elem)
        if isinstance(target, c_ast.UnaryOp) and target.op == "*":
            return self.to_pointer(self.expr(target.expr), node)
        raise unsupported(node, "address of this expression")

    def increment(self, node: c_ast.UnaryOp) -> Value:
        m = self.m
        old = self.expr(node.expr)
        if isinstance(old, PointerVal):
            step = 1 if "+" in node.op else -1
            new_pointer = PointerVal(old.target, old.offset + step, old.elem)
            self.store(node.expr, new_pointer, node)
            return old if node.op.startswith("p") else new_pointer
        if not isinstance(old, Node):
            raise unsupported(node, "increment of a non-scalar")
        ty = common_type(old.ty, c_types.I32)
        one = m.const(ty, 1)
        new = m.binary("add" if "+" in node.op else "sub", m.cast(ty, old), one)
        stored = self.store(node.expr, new, node)
        return old if node.op.startswith("p") else stored

    def e_ternary(self, node: c_ast.TernaryOp) -> Value:
        m = self.m
        cond = self.truth(self.expr(node.cond), node.cond)
        if cond is m.true:
            return self.expr(node.iftrue)
        if cond is m.false:
            return self.expr(node.iffalse)
        saved = self.static_guard
        try:
            self.static_guard = m.land(saved, cond)
            a = self.expr(node.iftrue)
            self.static_guard = m.land(saved, m.lnot(cond))
            b = self.expr(node.iffalse)
        finally:
            self.static_guard = saved
        if not isinstance(a, Node) or not isinstance(b, Node):
            raise unsupported(node, "conditional expression choosing between pointers")
        if a.ty == BOOL and b.ty == BOOL:
            return m.ite(cond, a, b)
        excess = (id(node.iftrue) in self._excess, id(node.iffalse) in self._excess)
        if any(excess) and self.half_arithmetic(a, b, excess):
            self._excess.add(id(node))  # an excess arm stays in float; an int arm becomes a half
            return m.ite(cond, self.excess_operand(a, excess[0]), self.excess_operand(b, excess[1]))
        ty = common_type(a.ty, b.ty)
        return m.ite(cond, m.cast(ty, a), m.cast(ty, b))

    # arrays and memory ------------------------------------------------------------

    def element_location(self, node: c_ast.ArrayRef) -> tuple[ArrayVal, int]:
        """The (array, constant index) an ArrayRef designates; errors on symbolic indices."""
        base = self.expr(node.name)
        index = self.scalar(node.subscript)
        pointer = self.to_pointer(base, node)
        if not isinstance(pointer.target, ArrayVal):
            raise unsupported(node, "indexing a pointer to a scalar")
        if not isinstance(index, ssa.Const):
            raise unsupported(node, "write to an array at an index that depends on nondeterministic values")
        position = pointer.offset + int(index.value)
        if not 0 <= position < len(pointer.target.elems):
            raise InputError(
                f"{where(node)}index {position} is outside array '{pointer.target.name}' "
                f"of length {len(pointer.target.elems)}"
            )
        return pointer.target, position

    def e_arrayref(self, node: c_ast.ArrayRef) -> Value:
        base = self.expr(node.name)
        index = self.scalar(node.subscript)
        pointer = self.to_pointer(base, node)
        target = pointer.target
        if not isinstance(target, ArrayVal):
            raise unsupported(node, "indexing a pointer to a scalar")
        if isinstance(index, ssa.Const):
            position = pointer.offset + int(index.value)
            if not 0 <= position < len(target.elems):
                raise InputError(
                    f"{where(node)}index {position} is outside array '{target.name}' of length {len(target.elems)}"
                )
            element = target.elems[position]
            if element is None:
                raise unsupported(node, f"'{target.name}[{position}]' is read before it is assigned")
            return element
        if isinstance(target.ctype.elem, ArrayT):
            raise unsupported(node, "symbolic index into an array of arrays")
        return self.symbolic_read(target, pointer.offset, index, node)

    def symbolic_read(self, array: ArrayVal, offset: int, index: Node, node: c_ast.Node) -> Node:
        m = self.m
        if index.ty.is_float:
            raise InputError(f"{where(node)}array index of floating type")
        index64 = m.cast(c_types.I64, index)
        if offset:
            index64 = m.binary("add", index64, m.const(c_types.I64, offset))
        elems = array.elems
        if any(e is None for e in elems):
            raise unsupported(
                node, f"symbolic read of array '{array.name}' before all its elements are assigned"
            )
        if all(isinstance(e, ssa.Const) for e in elems):
            table = array._table if array.const else None
            if table is None:
                table = ssa.Table(array.name, array.ctype.elem, tuple(e.value for e in elems))  # type: ignore[union-attr]
                if array.const:
                    array._table = table
            return m.read(table, index64)
        result = elems[-1]
        for position in range(len(elems) - 2, -1, -1):
            result = m.ite(m.compare("eq", index64, m.const(c_types.I64, position)), elems[position], result)
        return result

    def load(self, pointer: PointerVal, node: c_ast.Node) -> Value:
        target = pointer.target
        if isinstance(target, Cell):
            if pointer.offset != 0:
                raise unsupported(node, "pointer arithmetic past a scalar variable")
            if target.value is None:
                raise unsupported(node, f"'{target.name}' is read before it is assigned")
            return target.value
        if not 0 <= pointer.offset < len(target.elems):
            raise InputError(f"{where(node)}pointer outside array '{target.name}'")
        value = target.elems[pointer.offset]
        if value is None:
            raise unsupported(node, f"'{target.name}[{pointer.offset}]' is read before it is assigned")
        return value

    def store(self, lvalue: c_ast.Node, value: Value, node: c_ast.Node) -> Value:
        """Assign `value` to the lvalue under the current guard; returns the stored value."""
        m = self.m
        g = self.guard()
        if isinstance(lvalue, c_ast.ID):
            variable = self.lookup(lvalue.name, lvalue)
            if isinstance(variable, ArrayVal):
                raise unsupported(node, f"assignment to array '{lvalue.name}'")
            if isinstance(value, (PointerVal, ArrayVal)) or isinstance(variable.value, PointerVal):
                if g is not m.true:
                    raise unsupported(node, "pointer assignment under a condition that depends on inputs")
                variable.value = self.to_pointer(value, node)  # type: ignore[assignment]
                return variable.value  # type: ignore[return-value]
            new = self.convert(value, variable.ctype, node)
            variable.value = new if (g is m.true or variable.value is None) else m.ite(g, new, variable.value)
            return new
        if isinstance(lvalue, c_ast.ArrayRef):
            array, position = self.element_location(lvalue)
            elem_type = array.ctype.elem
            new = self.convert(value, elem_type, node)
            old = array.elems[position]
            array.elems[position] = new if (g is m.true or old is None) else m.ite(g, new, old)
            return new
        if isinstance(lvalue, c_ast.UnaryOp) and lvalue.op == "*":
            pointer = self.to_pointer(self.expr(lvalue.expr), lvalue)
            target = pointer.target
            if isinstance(target, Cell):
                new = self.convert(value, target.ctype, node)
                target.value = new if (g is m.true or target.value is None) else m.ite(g, new, target.value)
                return new
            if not 0 <= pointer.offset < len(target.elems) or isinstance(target.ctype.elem, ArrayT):
                raise unsupported(node, "store through a pointer outside its array")
            new = self.convert(value, target.ctype.elem, node)
            old = target.elems[pointer.offset]
            target.elems[pointer.offset] = new if (g is m.true or old is None) else m.ite(g, new, old)
            return new
        raise unsupported(node, "assignment to this kind of expression")

    def e_assignment(self, node: c_ast.Assignment) -> Value:
        if node.op == "=":
            value = None
            if self.nondet_call(node.rvalue) is not None:
                value = self.nondet_narrowed(node.rvalue, self.plain_lvalue_type(node.lvalue))
            if value is None:
                value = self.expr(node.rvalue)
            return self.store(node.lvalue, value, node)
        op = node.op[:-1]
        left = self.expr(node.lvalue)
        right = self.expr(node.rvalue)
        return self.store(node.lvalue, self.apply_binary(op, left, right, node), node)

    # calls ------------------------------------------------------------------------

    def e_call(self, node: c_ast.FuncCall) -> Value:
        if not isinstance(node.name, c_ast.ID):
            raise unsupported(node, "call through a function pointer")
        name = node.name.name
        args = list(node.args.exprs) if node.args is not None else []
        if name in ASSUME_NAMES:
            return self.call_assume(args, node)
        if name in ASSERT_NAMES:
            return self.call_assert(name, args, node)
        nondet = self.nondet_type(name)
        if nondet is not None:
            return self.call_nondet(name, nondet, args, node)
        function = self.unit.functions.get(name)
        if function is None:
            if name in IO_NAMES:
                raise unsupported(node, f"call to {name}: input/output is not supported")
            raise unsupported(node, f"call to {name}, a function without a body in this file (not supported)")
        values = [self.expr(arg) for arg in args]
        return self.inline(function, values, node)

    def plain_lvalue_type(self, lvalue: c_ast.Node) -> CType | None:
        """The type of a variable or of an array element whose indices are variables or constants
        (None for other lvalues): what an assignment converts to, found without side effects."""
        if isinstance(lvalue, c_ast.ID):
            variable = self.lookup(lvalue.name, lvalue)
            return variable.ctype if isinstance(variable, Cell) else None
        name = lvalue
        while isinstance(name, c_ast.ArrayRef) and isinstance(name.subscript, (c_ast.ID, c_ast.Constant)):
            name = name.name
        if lvalue is name or not isinstance(name, c_ast.ID):
            return None
        array, _ = self.element_location(lvalue)
        return array.ctype.elem

    def nondet_narrowed(self, rvalue: c_ast.Node, target: CType | None) -> Node | None:
        """`nondet_T()` converted at once to a narrower type of its kind (`x[i] = nondet_int()`
        with `int8_t x[2]`, qverify's int8 harnesses): the input taken in the narrow type.

        The program sees only the converted value, and the conversion maps the wide type onto the
        narrow one and is the identity there: no behaviour is lost, and a counterexample (a
        narrow value) is a valid wide value. The evaluator converts every input value to the
        input's type as the C does, so a value outside still gives the C's outcome. Without this,
        the input is an int32 whose 2^32 values splitting cannot cover."""
        source = self.nondet_call(rvalue)
        if (
            not isinstance(target, c_types.Type)
            or source is None
            or source == target
            or source.kind != target.kind
        ):
            return None
        if source.is_int and not (source.min <= target.min and target.max <= source.max):
            return None
        if source.is_float and target.bits > source.bits:
            return None
        args = list(rvalue.args.exprs) if rvalue.args is not None else []
        return self.call_nondet(rvalue.name.name, target, args, rvalue)

    def nondet_call(self, node: c_ast.Node) -> c_types.Type | None:
        """The result type if `node` is a call of a nondet function, else None."""
        if isinstance(node, c_ast.FuncCall) and isinstance(node.name, c_ast.ID):
            return self.nondet_type(node.name.name)
        return None

    def nondet_type(self, name: str) -> c_types.Type | None:
        for prefix in ("nondet_", "__VERIFIER_nondet_"):
            if name.startswith(prefix):
                return NONDET_TYPES.get(name[len(prefix) :])
        return None

    def call_nondet(self, name: str, ty: c_types.Type, args: list, node: c_ast.Node) -> Node:
        if self._summarising:
            raise NotPure(name)
        if args:
            raise InputError(f"{where(node)}{name} takes no arguments")
        if self.guard() is not self.m.true:
            raise unsupported(
                node, f"{name} under a condition that depends on inputs (the inputs' order would vary)"
            )
        value = self.m.input(ty, len(self.inputs), f"{name}#{len(self.inputs)}", coord_of(node))
        self.inputs.append(value)  # type: ignore[arg-type]
        return value

    def call_assume(self, args: list, node: c_ast.Node) -> Node:
        if len(args) != 1:
            raise InputError(f"{where(node)}assume takes one argument")
        cond = self.truth(self.expr(args[0]), args[0])
        m = self.m
        full = m.lor(m.lnot(self.guard()), cond)
        if full is not m.true:
            self.steps.append(ssa.Assume(full, coord_of(node)))
        return m.const(c_types.I32, 0)

    def call_assert(self, name: str, args: list, node: c_ast.Node) -> Node:
        if len(args) != 2:
            raise InputError(f"{where(node)}{name} takes a condition and a message")
        cond = self.truth(self.expr(args[0]), args[0])
        message = self.expr(args[1])
        text = message.text if isinstance(message, StringVal) else "assertion"
        if name == "__qv_c_assert":
            text = f"assertion {text}"
        m = self.m
        full = m.lor(m.lnot(self.guard()), cond)
        if full is not m.true:
            self.steps.append(ssa.Assert(full, text, coord_of(node)))
        return m.const(c_types.I32, 0)

    def inline(self, function: c_ast.FuncDef, values: list[Value], node: c_ast.Node) -> Value:
        """Inline a call: through the function's summary when it has one (pure functions of
        scalars, such as fxp_mult), else by executing its body in place."""
        name = function.decl.name
        if name in self.call_stack:
            raise unsupported(node, f"recursive call to {name}")
        if name != "main" and all(isinstance(v, Node) for v in values):
            summary = self.summary(function, node)
            if summary is not None:
                return self.apply_summary(summary, values, node)
        return self.execute_body(function, values, node)

    def summary(self, function: c_ast.FuncDef, node: c_ast.Node) -> Summary | None:
        name = function.decl.name
        if name in self.summaries:
            return self.summaries[name]
        ftype = self.unit.function_types[name]
        if not all(isinstance(ptype, c_types.Type) for _, ptype in ftype.params) or not isinstance(
            ftype.result, (c_types.Type, VoidT)
        ):
            self.summaries[name] = None
            return None
        m = self.m
        params = [
            m.input(ptype, -1 - index - 1000 * len(self.summaries), f"{name}.{pname}")  # placeholders
            for index, (pname, ptype) in enumerate(ftype.params)
        ]
        saved = (self.steps, self.static_guard, self.frames, self.scopes, self.loops)
        self.steps, self.static_guard, self.frames, self.scopes, self.loops = [], m.true, [], [], []
        self._summarising += 1
        try:
            result = self.execute_body(function, list(params), node)
            steps = [
                (
                    "assume" if isinstance(step, ssa.Assume) else "assert",
                    step.cond,
                    getattr(step, "message", ""),
                    step.coord,
                )
                for step in self.steps
            ]
        except NotPure:
            self.summaries[name] = None
            return None
        finally:
            self._summarising -= 1
            self.steps, self.static_guard, self.frames, self.scopes, self.loops = saved
        roots = [step[1] for step in steps] + ([result] if isinstance(result, Node) else [])
        summary = Summary(params, result if isinstance(ftype.result, c_types.Type) else None, steps, [])
        summary.order = ssa.topological(roots)
        self.summaries[name] = summary
        return summary

    def apply_summary(self, summary: Summary, values: list[Value], node: c_ast.Node) -> Value:
        m = self.m
        self.stats.calls += 1
        mapping: dict[int, Node] = {
            param.id: self.convert(value, param.ty, node) for param, value in zip(summary.params, values)
        }
        for item in summary.order:
            if item.id in mapping:
                continue
            children = item.children()
            if not children:
                mapping[item.id] = item
                continue
            mapping[item.id] = m.rebuild(item, tuple(mapping[child.id] for child in children))
        g = self.guard()
        for kind, cond, message, coord in summary.steps:
            full = m.lor(m.lnot(g), mapping[cond.id])
            if full is m.true:
                continue
            self.steps.append(
                ssa.Assume(full, coord) if kind == "assume" else ssa.Assert(full, message, coord)
            )
        if summary.result is None:
            return m.const(c_types.I32, 0)
        return mapping[summary.result.id]

    def execute_body(self, function: c_ast.FuncDef, values: list[Value], node: c_ast.Node) -> Value:
        name = function.decl.name
        if len(self.call_stack) >= MAX_CALL_DEPTH:
            raise unsupported(node, f"calls nested deeper than {MAX_CALL_DEPTH}")
        ftype = self.unit.function_types[name]
        if len(values) != len(ftype.params) and not ftype.variadic:
            raise InputError(f"{where(node)}{name} expects {len(ftype.params)} arguments, got {len(values)}")
        scope: dict[str, Cell | ArrayVal] = {}
        for (pname, ptype), value in zip(ftype.params, values):
            if isinstance(ptype, PointerT):
                cell = Cell(c_types.U64, None, pname)
                cell.value = self.to_pointer(value, node)  # type: ignore[assignment]
                scope[pname] = cell
            else:
                scope[pname] = Cell(ptype, self.convert(value, ptype, node), pname)  # type: ignore[arg-type]
        self.stats.calls += 1
        frame = Frame(name, ftype.result, None, self.m.false)
        saved_scopes, saved_loops, saved_guard = self.scopes, self.loops, self.static_guard
        self.static_guard = self.guard()
        self.scopes, self.loops = [scope], []
        self.frames.append(frame)
        self.call_stack.append(name)
        try:
            self.stmt(function.body)
        finally:
            self.call_stack.pop()
            self.frames.pop()
            self.scopes, self.loops, self.static_guard = saved_scopes, saved_loops, saved_guard
        if isinstance(ftype.result, c_types.Type):
            if frame.ret is None:
                if name == "main":
                    return self.m.const(c_types.I32, 0)
                raise unsupported(node, f"{name} returns no value")
            return frame.ret
        return self.m.const(c_types.I32, 0)


def execute(
    unit: TranslationUnit, manager: NodeManager | None = None, deadline: float | None = None
) -> ssa.Program:
    """Symbolically execute `main` of `unit` into an SSA program.

    :raises UnsupportedError: a construct outside the supported subset (message `file:line: ...`).
    :raises InputError: C that is wrong (an index outside its array, a wrong argument count).
    :raises ResourceLimitError: the deadline (time.monotonic()) passed.
    """
    manager = manager or NodeManager()
    try:
        return Executor(unit, manager, deadline).run()
    except RecursionError as error:
        raise UnsupportedError(f"{unit.source}: expression nesting too deep for the front end") from error
