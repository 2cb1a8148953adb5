"""Network level: the join loops of `qv_network` (`templates/_network.c.j2`), recognised statement by
statement, as `lift.layers` recognises a dense layer.

An addition of k tensors (k >= 1; one tensor: an activation of its own):

    for (j = 0; j < N; j++) {
        qv_num acc = A[j];
        acc = fxp_add(acc, B[j]);               (or acc = acc + B[j]; or acc = (qv_num)(acc + B[j]);)
        [__ESBMC_assume(PRE_LO[j] <= acc && acc <= PRE_HI[j]);]
        OUT[j] = qv_relu(acc);                  (or any stored activation, or acc)
        [__ESBMC_assume(OUT_LO[j] <= OUT[j] && OUT[j] <= OUT_HI[j]);]
    }

a concatenation as one loop per part, the parts' output ranges one after the other from 0:

    for (j = S; j < E; j++) {
        qv_num acc = A[j - S];
        [assumes as above]
        OUT[j] = acc;
    }

and a permutation as `qv_num acc = IN[P[j]];` with P a constant int array holding each index once.
A, B, IN are arrays the harness wrote before (or the input); anything else is `NotRecognised`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pycparser import c_ast

from qverify.engine.netlevel.lift.cnodes import (
    call,
    cast_operand,
    fail,
    id_name,
    index_ref,
    integer_constant,
    is_id,
    statements,
    where,
)
from qverify.engine.netlevel.lift.layers import (
    Arith,
    bounds_assume,
    counted_loop,
    fresh,
    local_decl,
    store_activation,
)
from qverify.network import Activation, Add, Concat, Permute


@dataclass(frozen=True, slots=True)
class JoinLoop:
    """One recognised join: its kind (`add`, `concat`, `permute`), the arrays it reads (in order)
    and writes, its size, activation and invariant arrays; a permutation's index table."""

    kind: str
    inputs: tuple[str, ...]
    output: str
    n_out: int
    input_sizes: tuple[int, ...]
    activation: Activation
    pre_bounds: tuple[str, str] | None
    out_bounds: tuple[str, str] | None
    line: str
    table: str | None = None

    @property
    def input(self) -> str:
        return self.inputs[0]

    @property
    def n_in(self) -> int:
        return sum(self.input_sizes)

    @property
    def accumulation(self):
        return None  # (no products: the network's accumulation comes from its MAC layers)

    @property
    def layout(self):
        return None

    def constant_names(self) -> tuple[str, ...]:
        table = (self.table,) if self.table else ()
        return (*table, *(self.pre_bounds or ()), *(self.out_bounds or ()))

    def source(self, arrays: dict[str, np.ndarray]):
        """The IR node (flat shapes: the C holds flat arrays)."""
        if self.kind == "add":
            return Add((self.n_out,), len(self.inputs), self.activation)
        if self.kind == "concat":
            return Concat(tuple((size,) for size in self.input_sizes))
        order = np.asarray(arrays[self.table], dtype=np.int64)  # type: ignore[index]
        if order.shape != (self.n_out,) or not np.array_equal(np.sort(order), np.arange(self.n_out)):
            raise fail(None, f"{self.line}: {self.table} is not a permutation of 0..{self.n_out - 1}")
        return Permute(order, (self.n_out,), (self.n_out,))


def is_join(node: c_ast.Node, readable: set[str]) -> bool:
    """Does this loop read a whole array element as its accumulator's start (a join, not a layer)?"""
    if not isinstance(node, c_ast.For):
        return False
    items = statements(node.stmt)
    first = local_decl(items[0], (("qv_num",),)) if items else None
    if first is None or first[1] is None:
        return False
    ref = index_ref(first[1])
    return ref is not None and ref[0] in readable and len(ref[1]) == 1


def _plus(node: c_ast.Node, arith: Arith, acc: str, j: str) -> str | None:
    """`fxp_add(acc, B[j])`, `acc + B[j]` or `(qv_num)(acc + B[j])` in the arithmetic: B, or None."""
    if arith.kind in ("fixed", "wide"):
        called = call(node, "fxp_add")
        pair = called[1] if called is not None and len(called[1]) == 2 else None
    else:
        if arith.kind == "half":
            node = cast_operand(node, (("qv_num",),))  # type: ignore[assignment]
        pair = [node.left, node.right] if isinstance(node, c_ast.BinaryOp) and node.op == "+" else None
    if pair is None or not is_id(pair[0], acc):
        return None
    ref = index_ref(pair[1])
    if ref is None or len(ref[1]) != 1 or not is_id(ref[1][0], j):
        return None
    return ref[0]


def _tail(items: list, position: int, j: str, acc: str, node: c_ast.Node):
    """The assumes and the store that end a join's loop: (output, activation, pre, out)."""
    pre = None
    if position < len(items):
        pre = bounds_assume(items[position], j, c_ast.ID(acc))
        position += pre is not None
    if position >= len(items):
        raise fail(node, "join loop ends before the output is stored")
    store = items[position]
    output, activation = store_activation(store, j, acc)
    position += 1
    out = None
    if position < len(items):
        out = bounds_assume(items[position], j, store.lvalue)
        position += out is not None
    if position != len(items):
        raise fail(items[position], "statement not recognised in a join loop")
    return output, activation, pre, out


def _start(items: list, node: c_ast.Node, forbidden: set[str], loop_vars: set[str]):
    if not items:
        raise fail(node, "empty join loop")
    first = local_decl(items[0], (("qv_num",),))
    if first is None or first[1] is None:
        raise fail(items[0], "join loop does not start with `qv_num acc = ...`")
    acc, init = first
    if not fresh(acc, forbidden | loop_vars):
        raise fail(items[0], f"accumulator {acc} shadows another name")
    return acc, init


def match_add(
    node: c_ast.Node, arith: Arith, loop_vars: set[str], forbidden: set[str], sizes: dict[str, int]
) -> JoinLoop:
    j, n_out, body = counted_loop(node, loop_vars)
    items = statements(body)
    acc, init = _start(items, node, forbidden, loop_vars)
    ref = index_ref(init)
    if ref is None or len(ref[1]) != 1 or not is_id(ref[1][0], j):
        raise fail(items[0], "an addition's accumulator does not start at A[j]")
    inputs = [ref[0]]
    position = 1
    while position < len(items):
        step = items[position]
        if not (isinstance(step, c_ast.Assignment) and step.op == "=" and is_id(step.lvalue, acc)):
            break
        added = _plus(step.rvalue, arith, acc, j)
        if added is None:
            raise fail(step, f"expected acc = acc + B[j] in the {arith.kind} arithmetic")
        inputs.append(added)
        position += 1
    output, activation, pre, out = _tail(items, position, j, acc, node)
    line = where(node)
    return JoinLoop("add", tuple(inputs), output, n_out, (n_out,) * len(inputs), activation, pre, out, line)


def match_permute(
    node: c_ast.Node, loop_vars: set[str], forbidden: set[str], int_arrays: set[str]
) -> JoinLoop:
    j, n_out, body = counted_loop(node, loop_vars)
    items = statements(body)
    acc, init = _start(items, node, forbidden, loop_vars)
    ref = index_ref(init)
    inner = index_ref(ref[1][0]) if ref is not None and len(ref[1]) == 1 else None
    if inner is None or inner[0] not in int_arrays or len(inner[1]) != 1 or not is_id(inner[1][0], j):
        raise fail(items[0], "a permutation's accumulator is not IN[P[j]] with P a constant int array")
    output, activation, pre, out = _tail(items, 1, j, acc, node)
    if activation is not Activation.IDENTITY:
        raise fail(node, "a permutation applies no activation")
    return JoinLoop(
        "permute",
        (ref[0],),
        output,
        n_out,
        (n_out,),
        activation,
        pre,
        out,
        where(node),
        table=inner[0],  # type: ignore[index]
    )


def range_loop(node: c_ast.Node, loop_vars: set[str]) -> tuple[str, int, int, c_ast.Node]:
    """`for (v = S; v < E; v++) body` with constants S < E: (v, S, E, body)."""
    if not isinstance(node, c_ast.For):
        raise fail(node, "expected a counted for loop")
    init, cond, step = node.init, node.cond, node.next
    start = integer_constant(init.rvalue) if isinstance(init, c_ast.Assignment) and init.op == "=" else None
    if start is None or start < 0:
        raise fail(node, "loop does not start at a constant")
    variable = id_name(init.lvalue, "a loop variable")
    if variable not in loop_vars:
        raise fail(node, f"loop variable {variable} is not an int local of qv_network")
    stop = integer_constant(cond.right) if isinstance(cond, c_ast.BinaryOp) and cond.op == "<" else None
    if stop is None or not is_id(cond.left, variable) or stop <= start:
        raise fail(node, "loop bound is not a constant above its start (v < E)")
    if not (isinstance(step, c_ast.UnaryOp) and step.op in ("p++", "++") and is_id(step.expr, variable)):
        raise fail(node, "loop step is not v++")
    return variable, start, stop, node.stmt


def is_concat_part(node: c_ast.Node) -> bool:
    """A loop whose accumulator starts at A[j - S] (a concatenation's part)."""
    if not isinstance(node, c_ast.For):
        return False
    items = statements(node.stmt)
    first = local_decl(items[0], (("qv_num",),)) if items else None
    if first is None or first[1] is None:
        return False
    ref = index_ref(first[1])
    return (
        ref is not None and len(ref[1]) == 1 and isinstance(ref[1][0], c_ast.BinaryOp) and ref[1][0].op == "-"
    )


def match_concat(nodes: list[c_ast.Node], loop_vars: set[str], forbidden: set[str]) -> tuple[JoinLoop, int]:
    """The consecutive part loops of one concatenation from `nodes[0]`: (the join, loops taken)."""
    inputs, sizes = [], []
    output = None
    pre_names = out_names = None
    expected_start = 0
    taken = 0
    for node in nodes:
        if not is_concat_part(node):
            break
        j, start, stop, body = range_loop(node, loop_vars)
        if start != expected_start:
            break  # (the next concatenation's first part starts at 0 again)
        items = statements(body)
        acc, init = _start(items, node, forbidden, loop_vars)
        ref = index_ref(init)
        offset = ref[1][0]  # type: ignore[index]
        if not (is_id(offset.left, j) and integer_constant(offset.right) == start):
            raise fail(items[0], "a concatenation's part does not read A[j - S] with S its first index")
        part_output, activation, pre, out = _tail(items, 1, j, acc, node)
        if activation is not Activation.IDENTITY:
            raise fail(node, "a concatenation applies no activation")
        if output is not None and (part_output, pre, out) != (output, pre_names, out_names):
            break
        output, pre_names, out_names = part_output, pre, out
        inputs.append(ref[0])  # type: ignore[index]
        sizes.append(stop - start)
        expected_start = stop
        taken += 1
    if taken < 2:
        raise fail(nodes[0], "a concatenation needs at least two part loops")
    loop = JoinLoop(
        "concat", tuple(inputs), output, expected_start, tuple(sizes), Activation.IDENTITY,  # type: ignore[arg-type]
        pre_names, out_names, where(nodes[0]),
    )  # fmt: skip
    return loop, taken
