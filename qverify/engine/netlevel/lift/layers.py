"""Network level: the layer loops of `qv_network`, recognised statement by statement.

One dense layer is the neuron loop of `templates/_network.c.j2`:

    for (j = 0; j < N; j++) {
        <accumulate the bias and the N_IN products of row j into acc>
        [__ESBMC_assume(PRE_LO[j] <= acc && acc <= PRE_HI[j]);]
        OUT[j] = qv_relu(acc);          (or OUT[j] = acc;)
        [__ESBMC_assume(OUT_LO[j] <= OUT[j] && OUT[j] <= OUT_HI[j]);]
    }

where the accumulation is, per arithmetic, one of the template's forms: the sequential inner loop
(`acc = fxp_add(acc, fxp_mult(W[j][i], IN[i]))`, `wide += (int64_t)W[j][i] * IN[i]` then
`acc = fxp_wide_result(wide)`, `acc = acc + W[j][i] * IN[i]`, `acc = (qv_num)(acc + (qv_num)(W[j][i]
* IN[i]))`) or the unrolled balanced tree, which must be exactly `qverify.quant.reduce_terms`'s
tree (the simulator's order). Every operand order, cast and name is checked; anything else is
`NotRecognised`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pycparser import c_ast

from qverify.engine.netlevel.lift.cnodes import (
    call,
    cast_operand,
    conjuncts,
    fail,
    id_name,
    index_ref,
    indexed_by,
    integer_constant,
    is_id,
    statements,
    type_names,
)
from qverify.network import Activation
from qverify.quant import Accumulation, Layout, reduce_terms

INT64_NAMES = (("int64_t",), ("long", "long"), ("long", "long", "int"))
RESERVED_PREFIXES = ("fxp_", "qv_", "nondet_", "__", "FXP_", "QV_")  # the C models' and templates' names


def fresh(name: str, taken: set[str]) -> bool:
    """Is a local's name neither taken nor one of the C models' or templates' prefixes?"""
    return name not in taken and not name.startswith(RESERVED_PREFIXES)


Term = str | tuple


@dataclass(frozen=True, slots=True)
class LayerLoop:
    """One recognised dense layer: the arrays it reads and writes, its sizes and arithmetic."""

    weights: str
    bias: str
    input: str
    output: str
    n_out: int
    n_in: int
    activation: Activation
    accumulation: Accumulation
    layout: Layout
    pre_bounds: tuple[str, str] | None
    out_bounds: tuple[str, str] | None
    line: str

    def constant_names(self) -> tuple[str, ...]:
        return (self.weights, self.bias, *(self.pre_bounds or ()), *(self.out_bounds or ()))


@dataclass(frozen=True, slots=True)
class Arith:
    """How products and sums are written: `fixed` (fxp_add/fxp_mult), `wide` (int64 sum), `float`
    (plain + and *, float and double) or `half` (every result cast to qv_num)."""

    kind: str
    frac_bits: int = 0


class MacReader:
    """Reads MAC expressions of one neuron loop into canonical terms: 'b' (bias), 'acc', ('*', k)
    (product k, or 'i' for the loop variable) and ('+', left, right)."""

    def __init__(self, arith: Arith, j: str, i: str | None, acc: str | None) -> None:
        self.arith, self.j, self.i, self.acc = arith, j, i, acc
        self.weights: str | None = None
        self.bias: str | None = None
        self.input: str | None = None

    def _same(self, attribute: str, name: str, node: c_ast.Node) -> None:
        previous = getattr(self, attribute)
        if previous is not None and previous != name:
            raise fail(node, f"one neuron reads two {attribute} arrays ({previous}, {name})")
        setattr(self, attribute, name)

    def _index(self, node: c_ast.Node) -> str | int:
        if self.i is not None and is_id(node, self.i):
            return "i"
        value = integer_constant(node)
        if value is None or value < 0:
            raise fail(node, "array index is neither the loop variable nor a constant")
        return value

    def bias_ref(self, node: c_ast.Node) -> bool:
        name = indexed_by(node, self.j)
        if name is None:
            return False
        self._same("bias", name, node)
        return True

    def product(self, weight: c_ast.Node, value: c_ast.Node) -> Term:
        w, x = index_ref(weight), index_ref(value)
        if w is None or x is None or len(w[1]) != 2 or len(x[1]) != 1 or not is_id(w[1][0], self.j):
            raise fail(weight, "product is not W[j][k] * IN[k]")
        k = self._index(w[1][1])
        if self._index(x[1][0]) != k:
            raise fail(weight, "product's weight and input indices differ")
        self._same("weights", w[0], weight)
        self._same("input", x[0], value)
        return ("*", k)

    def term(self, node: c_ast.Node) -> Term:
        kind = self.arith.kind
        if self.acc is not None and is_id(node, self.acc):
            return "acc"
        if kind == "fixed":
            called = call(node)
            if called is not None and called[0] == "fxp_add" and len(called[1]) == 2:
                return ("+", self.term(called[1][0]), self.term(called[1][1]))
            if called is not None and called[0] == "fxp_mult" and len(called[1]) == 2:
                return self.product(*called[1])
            if self.bias_ref(node):
                return "b"
            raise fail(node, "expected fxp_add, fxp_mult or the bias")
        if kind == "half":
            inner = cast_operand(node, (("qv_num",),))
            if inner is None:
                if self.bias_ref(node):
                    return "b"
                raise fail(node, "half arithmetic: expected a result cast to qv_num")
            node = inner
        if isinstance(node, c_ast.BinaryOp) and node.op == "+":
            return ("+", self.term(node.left), self.term(node.right))
        if isinstance(node, c_ast.BinaryOp) and node.op == "*":
            if kind == "wide":
                weight = cast_operand(node.left, INT64_NAMES)
                if weight is not None and self._is_one(node.right) and self.bias_ref(weight):
                    return "b"
                if weight is not None:
                    return self.product(weight, node.right)
                raise fail(
                    node, "wide arithmetic: expected (int64_t)W[j][k] * IN[k] or (int64_t)B[j] * FXP_ONE"
                )
            return self.product(node.left, node.right)
        if kind in ("float", "half") and self.bias_ref(node):
            return "b"
        raise fail(node, f"{kind} arithmetic: operation not recognised")

    def _is_one(self, node: c_ast.Node) -> bool:
        """FXP_ONE as fxp.h expands it: ((int64_t)1 << QV_L)."""
        if not (isinstance(node, c_ast.BinaryOp) and node.op == "<<"):
            return False
        one = cast_operand(node.left, INT64_NAMES)
        return (
            one is not None
            and integer_constant(one) == 1
            and integer_constant(node.right) == self.arith.frac_bits
        )


def counted_loop(node: c_ast.Node, loop_vars: set[str]) -> tuple[str, int, c_ast.Node]:
    """`for (v = 0; v < N; v++) body` with N a constant: (v, N, body)."""
    if not isinstance(node, c_ast.For):
        raise fail(node, "expected a counted for loop")
    init, cond, step = node.init, node.cond, node.next
    if not (isinstance(init, c_ast.Assignment) and init.op == "=" and integer_constant(init.rvalue) == 0):
        raise fail(node, "loop does not start at 0")
    variable = id_name(init.lvalue, "a loop variable")
    if variable not in loop_vars:
        raise fail(node, f"loop variable {variable} is not an int local of qv_network")
    bound = integer_constant(cond.right) if isinstance(cond, c_ast.BinaryOp) else None
    if (
        not (isinstance(cond, c_ast.BinaryOp) and cond.op == "<" and is_id(cond.left, variable))
        or bound is None
    ):
        raise fail(node, "loop bound is not a constant (v < N)")
    if not (isinstance(step, c_ast.UnaryOp) and step.op in ("p++", "++") and is_id(step.expr, variable)):
        raise fail(node, "loop step is not v++")
    if bound <= 0:
        raise fail(node, "loop runs no iteration")
    return variable, bound, node.stmt


def local_decl(node: c_ast.Node, names: tuple[tuple[str, ...], ...]) -> tuple[str, c_ast.Node | None] | None:
    if isinstance(node, c_ast.Decl) and type_names(node.type) in names and not node.storage:
        return node.name, node.init
    return None


def bounds_assume(node: c_ast.Node, j: str, value: c_ast.Node) -> tuple[str, str] | None:
    """`__ESBMC_assume(LO[j] <= v && v <= HI[j])` for the given value expression, or None."""
    called = call(node, "__ESBMC_assume")
    if called is None or len(called[1]) != 1:
        return None
    parts = conjuncts(called[1][0])
    if len(parts) != 2 or not all(isinstance(p, c_ast.BinaryOp) and p.op == "<=" for p in parts):
        return None
    low, high = index_ref(parts[0].left), index_ref(parts[1].right)
    same = _same_expression(parts[0].right, value) and _same_expression(parts[1].left, value)
    if not same or low is None or high is None:
        return None
    if any(len(ref[1]) != 1 or not is_id(ref[1][0], j) for ref in (low, high)):
        return None
    return low[0], high[0]


def _same_expression(a: c_ast.Node, b: c_ast.Node) -> bool:
    if is_id(a) and is_id(b):
        return a.name == b.name
    ra, rb = index_ref(a), index_ref(b)
    return (
        ra is not None
        and rb is not None
        and ra[0] == rb[0]
        and len(ra[1]) == len(rb[1]) == 1
        and is_id(ra[1][0])
        and is_id(rb[1][0])
        and ra[1][0].name == rb[1][0].name
    )


def _expected(n_in: int, layout: Layout) -> Term:
    return reduce_terms(n_in, "b", lambda k: ("*", k), lambda a, b: ("+", a, b), layout is Layout.BALANCED)


def _tree_inputs(term: Term) -> int:
    if isinstance(term, tuple) and term[0] == "+":
        return _tree_inputs(term[1]) + _tree_inputs(term[2])
    return 1 if isinstance(term, tuple) else 0


def match_layer(node: c_ast.Node, arith: Arith, loop_vars: set[str], forbidden: set[str]) -> LayerLoop:
    """One neuron loop (see the module docstring) in the given arithmetic."""
    j, n_out, body = counted_loop(node, loop_vars)
    items = statements(body)
    if not items:
        raise fail(node, "empty neuron loop")
    position = 0
    first = local_decl(items[0], (("qv_num",),) + (INT64_NAMES if arith.kind == "fixed" else ()))
    if first is None:
        raise fail(items[0], "neuron loop does not start with the accumulator's declaration")
    acc_name, init = first
    if not fresh(acc_name, forbidden | loop_vars):
        raise fail(items[0], f"accumulator {acc_name} shadows another name")
    reader = MacReader(arith, j, None, None)
    n_in: int
    is_wide_start = type_names(items[0].type) in INT64_NAMES
    if (
        init is not None
        and not is_wide_start
        and not (call(init, "fxp_wide_result") or _is_bias(reader, init))
    ):
        # balanced: the whole tree in the initialiser
        tree = reader.term(init)
        n_in = _tree_inputs(tree)
        if tree != _expected(n_in, Layout.BALANCED):
            raise fail(items[0], "the unrolled sum is not the balanced tree of qverify.quant.reduce_terms")
        accumulation, layout, position = Accumulation.PER_OP, Layout.BALANCED, 1
    elif init is not None and call(init, "fxp_wide_result") and arith.kind == "fixed":
        arguments = call(init, "fxp_wide_result")[1]
        wide_reader = MacReader(Arith("wide", arith.frac_bits), j, None, None)
        tree = wide_reader.term(arguments[0]) if len(arguments) == 1 else None
        n_in = _tree_inputs(tree) if tree is not None else 0
        if tree is None or tree != _expected(n_in, Layout.BALANCED):
            raise fail(
                items[0], "the unrolled wide sum is not the balanced tree of qverify.quant.reduce_terms"
            )
        reader = wide_reader
        accumulation, layout, position = Accumulation.WIDE, Layout.BALANCED, 1
    else:
        n_in, accumulation, position, reader = _sequential(items, arith, j, acc_name, loop_vars, forbidden)
        acc_name = reader.acc
        layout = Layout.SEQUENTIAL
    pre = None
    if position < len(items):
        pre = bounds_assume(items[position], j, c_ast.ID(acc_name))
        position += pre is not None
    if position >= len(items):
        raise fail(node, "neuron loop ends before the output is stored")
    store = items[position]
    output, activation = store_activation(store, j, acc_name)
    position += 1
    out = None
    if position < len(items):
        out = bounds_assume(items[position], j, store.lvalue)
        position += out is not None
    if position != len(items):
        raise fail(items[position], "statement not recognised in a neuron loop")
    if reader.weights is None or reader.bias is None or reader.input is None:
        raise fail(node, "neuron loop does not read a weight row, a bias and an input")
    return LayerLoop(
        reader.weights,
        reader.bias,
        reader.input,
        output,
        n_out,
        n_in,
        activation,
        accumulation,
        layout,
        pre,
        out,
        f"{node.coord.file}:{node.coord.line}" if node.coord else "?",
    )


STORED_ACTIVATIONS = {
    "qv_relu": Activation.RELU,
    "qv_relu6": Activation.RELU6,  # checked against the template's top (`lift.frontend`)
    "qv_sigmoid": Activation.SIGMOID,  # lookup tables (lift.lut)
    "qv_tanh": Activation.TANH,
}


def store_activation(store: c_ast.Node, j: str, acc: str) -> tuple[str, Activation]:
    """`OUT[j] = qv_relu(acc);` (or a table activation's function) or `OUT[j] = acc;` as (OUT,
    activation)."""
    if not (isinstance(store, c_ast.Assignment) and store.op == "="):
        raise fail(store, "expected OUT[j] = activation(acc)")
    target = index_ref(store.lvalue)
    if target is None or len(target[1]) != 1 or not is_id(target[1][0], j):
        raise fail(store, "output is not stored to OUT[j]")
    if is_id(store.rvalue, acc):
        return target[0], Activation.IDENTITY
    applied = call(store.rvalue)
    if applied is not None and len(applied[1]) == 1 and is_id(applied[1][0], acc):
        activation = STORED_ACTIVATIONS.get(applied[0])
        if activation is not None:
            return target[0], activation
    raise fail(
        store, "activation is neither qv_relu(acc), qv_relu6(acc), qv_sigmoid(acc), qv_tanh(acc) nor acc"
    )


def _is_bias(reader: MacReader, node: c_ast.Node) -> bool:
    ref = index_ref(node)
    return ref is not None and len(ref[1]) == 1 and is_id(ref[1][0], reader.j)


def _sequential(
    items: list[c_ast.Node], arith: Arith, j: str, first_name: str, loop_vars: set[str], forbidden: set[str]
) -> tuple[int, Accumulation, int, MacReader]:
    """The sequential forms: (n_in, accumulation, index of the next statement, reader)."""
    start = items[0]
    if arith.kind == "fixed" and type_names(start.type) in INT64_NAMES:
        wide_name = first_name
        reader = MacReader(Arith("wide", arith.frac_bits), j, None, None)
        if start.init is None or reader.term(start.init) != "b":
            raise fail(start, "wide accumulator does not start at (int64_t)B[j] * FXP_ONE")
        acc = local_decl(items[1], (("qv_num",),)) if len(items) > 1 else None
        if acc is None or acc[1] is not None:
            raise fail(items[min(1, len(items) - 1)], "expected the declaration `qv_num acc;`")
        acc_name = acc[0]
        if not fresh(acc_name, forbidden | loop_vars | {wide_name}):
            raise fail(items[1], f"accumulator {acc_name} shadows another name")
        i, n_in, inner = counted_loop(items[2], loop_vars) if len(items) > 2 else (None, 0, None)
        body = statements(inner) if inner is not None else []
        reader.i = i
        if i == j or len(body) != 1:
            raise fail(items[2] if len(items) > 2 else start, "expected the product loop over i")
        step = body[0]
        if not (isinstance(step, c_ast.Assignment) and step.op == "+=" and is_id(step.lvalue, wide_name)):
            raise fail(step, "expected wide += (int64_t)W[j][i] * IN[i]")
        if reader.term(step.rvalue) != ("*", "i"):
            raise fail(step, "expected wide += (int64_t)W[j][i] * IN[i]")
        result = items[3] if len(items) > 3 else None
        rounded = call(result.rvalue, "fxp_wide_result") if isinstance(result, c_ast.Assignment) else None
        if (
            rounded is None
            or result.op != "="
            or not is_id(result.lvalue, acc_name)
            or len(rounded[1]) != 1
            or not is_id(rounded[1][0], wide_name)
        ):
            raise fail(result or step, "expected acc = fxp_wide_result(wide)")
        return n_in, Accumulation.WIDE, 4, _Renamed(reader, acc_name)
    reader = MacReader(arith, j, None, first_name)
    if start.init is None or not reader.bias_ref(start.init):
        raise fail(start, "accumulator does not start at the bias B[j]")
    if len(items) < 2:
        raise fail(start, "expected the product loop over i")
    i, n_in, inner = counted_loop(items[1], loop_vars)
    body = statements(inner)
    reader.i = i
    if i == j or len(body) != 1:
        raise fail(items[1], "expected one statement in the product loop")
    step = body[0]
    if not (isinstance(step, c_ast.Assignment) and step.op == "=" and is_id(step.lvalue, first_name)):
        raise fail(step, "expected acc = acc + W[j][i] * IN[i] in the layer's arithmetic")
    if reader.term(step.rvalue) != ("+", "acc", ("*", "i")):
        raise fail(step, "the product loop does not add W[j][i] * IN[i] to acc in the layer's arithmetic")
    return n_in, Accumulation.PER_OP, 2, reader


class _Renamed(MacReader):
    """The wide form's reader, with the accumulator the stores use (`acc`, not `wide`)."""

    def __init__(self, reader: MacReader, acc_name: str) -> None:
        super().__init__(reader.arith, reader.j, reader.i, acc_name)
        self.weights, self.bias, self.input = reader.weights, reader.bias, reader.input
