"""Network level: the int8 joins of `qv_network` that requantize (`templates/_network.c.j2`,
`qverify.quant.join8`), recognised statement by statement.

A join that copies codes (a Permute; a Concat of inputs quantized as its output) is the float forms'
loop (`lift.joins`: qv_num is the code type). One that requantizes is an exact integer staircase:

    for (j = 0; j < N; j++) {                                  (an Add of two tensors)
        int32_t acc = WA * (int32_t)A[j] + WB * (int32_t)B[j];
        [__ESBMC_assume(PRE_LO[j] <= acc && acc <= PRE_HI[j]);]
        OUT[j] = (qv_num)(QMIN + qv_requant(acc, T[0]));
        [__ESBMC_assume(OUT_LO[j] <= OUT[j] && OUT[j] <= OUT_HI[j]);]
    }

    for (j = S; j < E; j++) {                                  (part r of a Concat, r = 0, 1, ...)
        int32_t acc = (int32_t)A[j - S];
        [assumes as above]
        OUT[j] = (qv_num)(QMIN + qv_requant(acc, T[r]));
    }

with WA, WB integer constants, T an `int32_t [rows][255]` table of sorted rows: the join is the
simulator's (`qverify.quant.simulate.int8_join_codes`) on these integers.
"""

from __future__ import annotations

from dataclasses import dataclass

from pycparser import c_ast

from qverify.engine.netlevel.lift.cnodes import (
    cast_operand,
    fail,
    index_ref,
    integer_constant,
    is_id,
    statements,
    where,
)
from qverify.engine.netlevel.lift.int8 import INT32, requant_parts
from qverify.engine.netlevel.lift.joins import range_loop
from qverify.engine.netlevel.lift.layers import bounds_assume, counted_loop, fresh, local_decl
from qverify.network import Activation


@dataclass(frozen=True, slots=True)
class Int8JoinLoop:
    """One recognised requantizing int8 join: an `add` (integer weights, one table row) or a
    `concat` (one table row per part)."""

    kind: str
    inputs: tuple[str, ...]
    output: str
    n_out: int
    input_sizes: tuple[int, ...]
    weights: tuple[int, ...]
    table: str
    rows: tuple[int, ...]
    qmin: int
    pre_bounds: tuple[str, str] | None
    out_bounds: tuple[str, str] | None
    line: str
    activation: Activation = Activation.IDENTITY  # the clamp is in the table

    @property
    def input(self) -> str:
        return self.inputs[0]

    @property
    def n_in(self) -> int:
        return sum(self.input_sizes)

    def constant_names(self) -> tuple[str, ...]:
        return (self.table, *(self.pre_bounds or ()), *(self.out_bounds or ()))


def _accumulator(items: list, node: c_ast.Node, forbidden: set[str], loop_vars: set[str]):
    first = local_decl(items[0], INT32) if items else None
    if first is None or first[1] is None:
        raise fail(node, "an int8 join loop does not start with `int32_t acc = ...`")
    acc, init = first
    if not fresh(acc, forbidden | loop_vars):
        raise fail(items[0], f"accumulator {acc} shadows another name")
    return acc, init


def _requantized_tail(items: list, j: str, acc: str, node: c_ast.Node):
    """The assumes and the requantizing store: (OUT, QMIN, T, row expression, pre, out)."""
    position = 1
    pre = bounds_assume(items[position], j, c_ast.ID(acc)) if position < len(items) else None
    position += pre is not None
    if position >= len(items):
        raise fail(node, "int8 join loop ends before the code is stored")
    store = items[position]
    output, qmin, table, row = requant_parts(store, j, acc)
    position += 1
    out = bounds_assume(items[position], j, store.lvalue) if position < len(items) else None
    position += out is not None
    if position != len(items):
        raise fail(items[position], "statement not recognised in an int8 join loop")
    return output, qmin, table, row, pre, out


def _initial(node: c_ast.Node) -> c_ast.Node | None:
    """The initialiser of a loop body's first declaration `int32_t acc = ...`, or None."""
    if not isinstance(node, c_ast.For):
        return None
    items = statements(node.stmt)
    first = local_decl(items[0], INT32) if items else None
    return None if first is None else first[1]


def is_int8_add(node: c_ast.Node) -> bool:
    """Does the loop start `int32_t acc = W * (int32_t)A[j] + ...` (not a MAC layer's `= B[j]`)?"""
    init = _initial(node)
    return isinstance(init, c_ast.BinaryOp) and init.op == "+"


def is_int8_concat_part(node: c_ast.Node) -> bool:
    """Does the loop start `int32_t acc = (int32_t)A[j - S]`?"""
    init = _initial(node)
    value = cast_operand(init, INT32) if init is not None else None
    ref = index_ref(value) if value is not None else None
    return (
        ref is not None and len(ref[1]) == 1 and isinstance(ref[1][0], c_ast.BinaryOp) and ref[1][0].op == "-"
    )


def _terms(init: c_ast.Node, j: str) -> list[tuple[int, str]]:
    """`W1 * (int32_t)A1[j] + W2 * (int32_t)A2[j] + ...` as [(W1, A1), ...]."""
    terms = []
    while True:
        if isinstance(init, c_ast.BinaryOp) and init.op == "+":
            terms.append(init.right)
            init = init.left
            continue
        terms.append(init)
        break
    result = []
    for term in reversed(terms):
        if not (isinstance(term, c_ast.BinaryOp) and term.op == "*"):
            raise fail(term, "an int8 addition's term is not W * (int32_t)A[j]")
        weight = integer_constant(term.left)
        value = cast_operand(term.right, INT32)
        ref = index_ref(value) if value is not None else None
        if weight is None or ref is None or len(ref[1]) != 1 or not is_id(ref[1][0], j):
            raise fail(term, "an int8 addition's term is not W * (int32_t)A[j], W a constant")
        result.append((weight, ref[0]))
    return result


def match_int8_add(node: c_ast.Node, loop_vars: set[str], forbidden: set[str]) -> Int8JoinLoop:
    j, n_out, body = counted_loop(node, loop_vars)
    items = statements(body)
    acc, init = _accumulator(items, node, forbidden, loop_vars)
    terms = _terms(init, j)
    if len(terms) < 2:
        raise fail(items[0], "an int8 addition adds at least two tensors")
    output, qmin, table, row, pre, out = _requantized_tail(items, j, acc, node)
    if integer_constant(row) != 0:
        raise fail(node, "an int8 addition's table is not T[0]")
    return Int8JoinLoop(
        "add",
        tuple(name for _, name in terms),
        output,
        n_out,
        (n_out,) * len(terms),
        tuple(weight for weight, _ in terms),
        table,
        (0,),
        qmin,
        pre,
        out,
        where(node),
    )


def match_int8_concat(
    nodes: list[c_ast.Node], loop_vars: set[str], forbidden: set[str]
) -> tuple[Int8JoinLoop, int]:
    """The consecutive part loops of one requantizing concatenation from `nodes[0]`: (the join,
    loops taken)."""
    inputs, sizes, rows = [], [], []
    common = None
    expected_start = 0
    for node in nodes:
        if not is_int8_concat_part(node):
            break
        j, start, stop, body = range_loop(node, loop_vars)
        if start != expected_start:
            break  # (the next concatenation's first part starts at 0 again)
        items = statements(body)
        acc, init = _accumulator(items, node, forbidden, loop_vars)
        ref = index_ref(cast_operand(init, INT32))
        offset = ref[1][0]  # type: ignore[index]
        if not (is_id(offset.left, j) and integer_constant(offset.right) == start):
            raise fail(items[0], "a concatenation's part does not read A[j - S] with S its first index")
        output, qmin, table, row, pre, out = _requantized_tail(items, j, acc, node)
        row_index = integer_constant(row)
        if row_index != len(rows):
            raise fail(
                node, f"part {len(rows)} of an int8 concatenation does not read its table's row {len(rows)}"
            )
        if common is not None and (output, qmin, table, pre, out) != common:
            break
        common = (output, qmin, table, pre, out)
        inputs.append(ref[0])  # type: ignore[index]
        sizes.append(stop - start)
        rows.append(row_index)
        expected_start = stop
    if len(inputs) < 2 or common is None:
        raise fail(nodes[0], "an int8 concatenation needs at least two part loops")
    output, qmin, table, pre, out = common
    loop = Int8JoinLoop(
        "concat", tuple(inputs), output, expected_start, tuple(sizes), (1,) * len(inputs), table,
        tuple(rows), qmin, pre, out, where(nodes[0]),
    )  # fmt: skip
    return loop, len(inputs)
