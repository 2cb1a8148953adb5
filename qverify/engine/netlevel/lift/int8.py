"""Network level: int8 harnesses: the neuron loop of `templates/_network.c.j2` for int8, and the network it
states.

One dense int8 layer is

    for (j = 0; j < N; j++) {
        int32_t acc = B[j];
        for (i = 0; i < N_IN; i++) {
            acc += (int32_t)W[j][i] * ((int32_t)IN[i] - Z);
        }
        [__ESBMC_assume(PRE_LO[j] <= acc && acc <= PRE_HI[j]);]
        OUT[j] = (qv_num)(QMIN + qv_requant(acc, T[j]));      (per-tensor: T[0])
        [__ESBMC_assume(OUT_LO[j] <= OUT[j] && OUT[j] <= OUT_HI[j]);]
    }

with W `int8_t [N][N_IN]`, B `int32_t [N]`, T `int32_t [N or 1][255]` sorted rows and QMIN the
minimum of qv_num's codes. `qv_requant` is int8.h's (checked byte for byte with the header): the
number of thresholds <= acc, so the layer is exactly `simulate`'s int8 layer on these integers:
acc = B + sum W (x - Z) (int32 by the generator's proof, re-checked here from the constants) and
code = QMIN + #{k : T[k] <= acc}.

What the C does not state is the quantization's meaning: the scales (and which runtime's rounding
made the tables) appear only in comments. The lifted network needs neither: its layers carry the
tables themselves, every scale is 1 and the output's zero point 0, so `output_reals` gives the codes
and the unsafe atoms, which the C states over codes (`(int64_t)y[k] >= 80`), are read over codes
exactly. The requantization mode recorded is the default (it names how tables were made, not used).
The invariant assumes (`int32_t` arrays) bound acc and the stored code: `LayerBounds` with `pre` the
accumulator, as `qverify.quant.intervals` states int8 bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pycparser import c_ast

from qverify.engine.netlevel.lift.cnodes import (
    call,
    cast_operand,
    fail,
    index_ref,
    indexed_by,
    integer_constant,
    is_id,
    statements,
)
from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.engine.netlevel.lift.layers import bounds_assume, counted_loop, fresh, local_decl
from qverify.errors import InputError, RangeError
from qverify.network import (
    NETWORK_INPUT,
    Activation,
    Add,
    AffineQuantization,
    CodeType,
    Concat,
    Conv2D,
    Dense,
    JoinQuant,
    MacQuant,
    MaxPool2D,
    Network,
    PoolQuant,
    TensorQuant,
)
from qverify.network.operators import operator_of
from qverify.quant import ImplementationOptions, Int8Format, QuantizedLayer, QuantizedNetwork
from qverify.quant.affine import LEVELS, accumulator_bounds
from qverify.quant.network import Int8Tables

CODE_TYPES = {("int8_t",): CodeType.INT8, ("uint8_t",): CodeType.UINT8}
ARRAY_TYPES = {"weights": ("int8_t",), "bias": ("int32_t",), "table": ("int32_t",), "bounds": ("int32_t",)}
INT32 = (("int32_t",),)


@dataclass(frozen=True, slots=True)
class Int8Loop:
    """One recognised int8 dense layer (the arrays it reads and writes, sizes, zero point, table)."""

    weights: str
    bias: str
    table: str
    per_channel: bool
    input_zero: int
    qmin: int
    input: str
    output: str
    n_out: int
    n_in: int
    line: str
    pre_bounds: tuple[str, str] | None = None
    out_bounds: tuple[str, str] | None = None
    activation: Activation = Activation.IDENTITY  # the clamp (a fused ReLU's too) is in the table

    def constant_names(self) -> tuple[str, ...]:
        return (self.weights, self.bias, self.table, *(self.pre_bounds or ()), *(self.out_bounds or ()))


def _row_ref(node: c_ast.Node, j: str, what: str) -> str:
    name = indexed_by(node, j)
    if name is None:
        raise fail(node, f"expected {what}[j]")
    return name


def int8_product(step: c_ast.Node, acc: str) -> tuple[c_ast.Node, c_ast.Node, int]:
    """`acc += (int32_t)W * ((int32_t)X - Z);` as (W, X, Z): the weight and input references (their
    indexing is the caller's to check) and the constant zero point."""
    if not (isinstance(step, c_ast.Assignment) and step.op == "+=" and is_id(step.lvalue, acc)):
        raise fail(step, "expected acc += (int32_t)W * ((int32_t)IN - Z)")
    product = step.rvalue
    if not (isinstance(product, c_ast.BinaryOp) and product.op == "*"):
        raise fail(step, "expected (int32_t)W * ((int32_t)IN - Z)")
    weight = cast_operand(product.left, INT32)
    if weight is None:
        raise fail(product, "the product's left operand is not a weight cast to int32_t")
    difference = product.right
    if not (isinstance(difference, c_ast.BinaryOp) and difference.op == "-"):
        raise fail(product, "the product's right operand is not ((int32_t)IN - Z)")
    value = cast_operand(difference.left, INT32)
    zero = integer_constant(difference.right)
    if value is None or zero is None:
        raise fail(product, "the product's right operand is not ((int32_t)IN - Z), Z a constant")
    return weight, value, zero


def _product(step: c_ast.Node, acc: str, j: str, i: str) -> tuple[str, str, int]:
    """`acc += (int32_t)W[j][i] * ((int32_t)IN[i] - Z);` as (W, IN, Z)."""
    weight, value, zero = int8_product(step, acc)
    w = indexed_by(weight, j, i)
    x = indexed_by(value, i)
    if w is None:
        raise fail(step, "the product's left operand is not (int32_t)W[j][i]")
    if x is None:
        raise fail(step, "the product's right operand is not ((int32_t)IN[i] - Z)")
    return w, x, zero


def requant_parts(store: c_ast.Node, j: str, acc: str) -> tuple[str, int, str, c_ast.Node]:
    """`OUT[j] = (qv_num)(QMIN + qv_requant(acc, T[r]));` as (OUT, QMIN, T, r's expression)."""
    if not (isinstance(store, c_ast.Assignment) and store.op == "="):
        raise fail(store, "expected OUT[j] = (qv_num)(QMIN + qv_requant(acc, T[j]))")
    output = _row_ref(store.lvalue, j, "OUT")
    total = cast_operand(store.rvalue, (("qv_num",),))
    if total is None:
        raise fail(store, "the stored code is not cast to qv_num")
    if not (isinstance(total, c_ast.BinaryOp) and total.op == "+"):
        raise fail(store, "the stored code is not QMIN + qv_requant(acc, T[j])")
    qmin = integer_constant(total.left)
    requant = call(total.right, "qv_requant")
    if qmin is None or requant is None or len(requant[1]) != 2 or not is_id(requant[1][0], acc):
        raise fail(store, "the stored code is not QMIN + qv_requant(acc, T[j])")
    table = index_ref(requant[1][1])
    if table is None or len(table[1]) != 1:
        raise fail(store, "qv_requant's table is not one row T[r] of a table")
    return output, qmin, table[0], table[1][0]


def requant_store(store: c_ast.Node, j: str, acc: str, row: str) -> tuple[str, int, str, bool]:
    """`OUT[j] = (qv_num)(QMIN + qv_requant(acc, T[row or 0]));` as (OUT, QMIN, T, per channel);
    `row` is the output channel's variable (j for a dense layer, oc for a convolution)."""
    output, qmin, table, index = requant_parts(store, j, acc)
    per_channel = is_id(index, row)
    if not per_channel and integer_constant(index) != 0:
        raise fail(store, "qv_requant's table is not T[j] or T[0]")
    return output, qmin, table, per_channel


def match_int8_layer(node: c_ast.Node, loop_vars: set[str], forbidden: set[str]) -> Int8Loop:
    """One int8 neuron loop (module docstring)."""
    j, n_out, body = counted_loop(node, loop_vars)
    items = statements(body)
    first = local_decl(items[0], INT32) if items else None
    if first is None or first[1] is None:
        raise fail(items[0] if items else node, "neuron loop does not start with `int32_t acc = B[j];`")
    acc, init = first
    if not fresh(acc, forbidden | loop_vars):
        raise fail(items[0], f"accumulator {acc} shadows another name")
    bias = _row_ref(init, j, "B")
    if len(items) < 3:
        raise fail(node, "an int8 neuron loop is the accumulator, the product loop and the store")
    i, n_in, inner = counted_loop(items[1], loop_vars)
    body_items = statements(inner)
    if i == j or len(body_items) != 1:
        raise fail(items[1], "expected one statement in the product loop")
    weights, source, zero = _product(body_items[0], acc, j, i)
    position = 2
    pre = bounds_assume(items[position], j, c_ast.ID(acc))
    position += pre is not None
    if position >= len(items):
        raise fail(node, "neuron loop ends before the code is stored")
    output, qmin, table, per_channel = requant_store(items[position], j, acc, j)
    store = items[position]
    position += 1
    out = bounds_assume(items[position], j, store.lvalue) if position < len(items) else None
    position += out is not None
    if position != len(items):
        raise fail(items[position], "statement not recognised in an int8 neuron loop")
    line = f"{node.coord.file}:{node.coord.line}" if node.coord else "?"
    return Int8Loop(
        weights, bias, table, per_channel, zero, qmin, source, output, n_out, n_in, line, pre, out
    )


@dataclass(frozen=True, slots=True)
class Int8Mac:
    """The int8 arithmetic of a dense or convolution loop besides its arrays: the products
    `(int32_t)W[..] * ((int32_t)IN[..] - input_zero)` and the store `OUT[j] = (qv_num)(qmin +
    qv_requant(acc, table[row or 0]))`, per channel when the row is the output channel's variable."""

    table: str
    per_channel: bool
    input_zero: int
    qmin: int


def _mac(loop) -> Int8Mac | None:
    """The requantization of a dense loop (`Int8Loop`) or a convolution (`SpatialLoop.int8`); None
    for a max pool, which passes codes on, and for a join (`lift.joins`, `lift.joins8`)."""
    if isinstance(loop, Int8Loop):
        return Int8Mac(loop.table, loop.per_channel, loop.input_zero, loop.qmin)
    return getattr(loop, "int8", None)


def _join_kind(loop) -> str | None:
    """ "copy" for a join that moves codes (`lift.joins.JoinLoop`), "requant" for one with a table
    (`lift.joins8.Int8JoinLoop`), None for a layer."""
    if hasattr(loop, "rows"):
        return "requant"
    return "copy" if hasattr(loop, "input_sizes") else None


def _weight_shape(loop) -> tuple[int, ...]:
    if isinstance(loop, Int8Loop):
        return (loop.n_out, loop.n_in)
    return (loop.out_shape[0], loop.in_shape[0] // loop.groups, *loop.kernel)


def check_int8_arrays(
    loops: list, arrays: dict[str, np.ndarray], types: dict[str, tuple[str, ...] | None]
) -> None:
    """Each layer's arrays have the template's element types and shapes, and sorted tables; every
    spatial layer is a convolution or a max pool (`lift.spatial` declines int8 average pools)."""
    for loop in loops:
        mac = _mac(loop)
        expected = {
            name: ("bounds", (loop.n_out,)) for name in (*(loop.pre_bounds or ()), *(loop.out_bounds or ()))
        }
        join = _join_kind(loop)
        if mac is not None:
            shape = _weight_shape(loop)
            expected[loop.weights] = ("weights", shape)
            expected[loop.bias] = ("bias", (shape[0],))
            expected[mac.table] = ("table", (shape[0] if mac.per_channel else 1, LEVELS))
        elif join == "requant":
            expected[loop.table] = ("table", (len(loop.rows), LEVELS))
        elif join == "copy":
            if loop.kind == "add":
                raise NotRecognised(f"{loop.line}: an int8 addition without its requantization table")
        elif loop.kind != "maxpool":
            raise NotRecognised(f"{loop.line}: an int8 {loop.kind} is not recognised")
        for name, (kind, shape) in expected.items():
            if types.get(name) != ARRAY_TYPES[kind] or arrays[name].shape != shape:
                raise NotRecognised(
                    f"{loop.line}: {name} is not {' '.join(ARRAY_TYPES[kind])} {list(shape)} "
                    f"(the template's {kind})"
                )
        table = mac.table if mac is not None else loop.table if join == "requant" else None
        if table is not None and np.any(np.diff(arrays[table], axis=1) < 0):
            raise NotRecognised(f"{loop.line}: {table} has a row that is not sorted")


def _channel_reach(source: Dense | Conv2D, weights: np.ndarray) -> np.ndarray:
    """Per output channel, the largest sum of |w| over one neuron's products (a padded
    convolution's border neurons have fewer): what `accumulator_bounds` multiplies by the codes'
    spread, as `quantize_network` computes it for the same layer."""
    return operator_of(source).channel_reach(source, weights)


def _source(loop, weights: np.ndarray, bias: np.ndarray):
    """The IR layer of a loop (float weights = the integers; the lifted network has scales 1)."""
    if isinstance(loop, Int8Loop):
        return Dense(weights.astype(np.float64), bias.astype(np.float64), Activation.IDENTITY)
    if loop.kind == "conv":
        return Conv2D(
            weights.astype(np.float64),
            bias.astype(np.float64),
            Activation.IDENTITY,
            groups=loop.groups,
            **loop.geometry(),
        )
    return MaxPool2D(kernel=loop.kernel, **loop.geometry())


def _output_zeros(loops: list, wiring: tuple[tuple[int, ...], ...]) -> tuple[list[int], int]:
    """Each node's output zero point in the lifted network, and the input's: the input zero point
    of the MAC layers that read those codes (the C subtracts it), passed back through the nodes
    that only move codes (pools, copies); 0 where nothing says (a join's table reads raw codes).
    Readers that disagree mean the C is not one network's: `NotRecognised`."""
    zeros: dict[int, int] = {}  # node -> zero point (NETWORK_INPUT: the input's)
    for index in range(len(loops) - 1, -1, -1):
        loop = loops[index]
        mac = _mac(loop)
        if _join_kind(loop) == "requant":
            continue
        wanted = mac.input_zero if mac is not None else zeros.setdefault(index, 0)
        for producer in wiring[index]:
            if zeros.setdefault(producer, wanted) != wanted:
                what = "the input" if producer == NETWORK_INPUT else loops[producer].line
                raise NotRecognised(
                    f"{what}: its codes are read with zero points {zeros[producer]} and {wanted}"
                )
    return [zeros.get(index, 0) for index in range(len(loops))], zeros.get(NETWORK_INPUT, 0)


def _join_node(loop, arrays: dict[str, np.ndarray], reads, output: TensorQuant, code: CodeType):
    """A lifted join: its IR node and `QuantizedLayer` (the requantizing ones with their table)."""
    source = loop.source(arrays) if _join_kind(loop) == "copy" else None
    quant = JoinQuant(reads, output, loop.line)
    empty = np.zeros(0, dtype=np.int64)
    if source is not None:
        return (
            source,
            quant,
            QuantizedLayer(empty, empty, Activation.IDENTITY, source, Int8Tables(quant, None, None, None)),
        )
    if loop.qmin != code.qmin:
        raise NotRecognised(f"{loop.line}: codes start at {loop.qmin}, qv_num's at {code.qmin}")
    if loop.kind == "add":
        source = Add((loop.n_out,), len(loop.inputs))
    else:
        source = Concat(tuple((size,) for size in loop.input_sizes))
    weights = np.array(loop.weights, dtype=np.int64)
    table = np.array(arrays[loop.table], dtype=np.int64)
    table.flags.writeable = False
    lows = np.array([read.code.qmin for read in reads], dtype=np.int64)
    highs = np.array([read.code.qmax for read in reads], dtype=np.int64)
    if loop.kind == "add":
        reach_lo = np.minimum(weights * lows, weights * highs).sum()
        reach_hi = np.maximum(weights * lows, weights * highs).sum()
        if max(abs(int(reach_lo)), abs(int(reach_hi))) >= 1 << 31:
            raise NotRecognised(f"{loop.line}: the int32 accumulator can overflow")
        lows, highs = np.array([reach_lo]), np.array([reach_hi])
    tables = Int8Tables(quant, table, lows, highs)
    return source, quant, QuantizedLayer(weights, empty, Activation.IDENTITY, source, tables)


def int8_network(
    path: Path,
    loops: list,
    arrays: dict[str, np.ndarray],
    code: CodeType,
    wiring: tuple[tuple[int, ...], ...],
) -> QuantizedNetwork:
    """The network the loops state (module docstring: scales 1, output zero point 0), wired as
    the C reads its arrays (`wiring`, `qverify.network.Network.wiring`): a node's output zero point
    is the input zero point of the MAC layers that read it (`_output_zeros`)."""
    zeros, input_zero = _output_zeros(loops, wiring)
    layers, sources, quants = [], [], []

    def codes(node: int, what: str) -> TensorQuant:
        zero = quants[node].output.zero_point if node != NETWORK_INPUT else input_zero
        return TensorQuant(1.0, zero, code, what)

    for loop, output_zero, producers in zip(loops, zeros, wiring):
        mac = _mac(loop)
        output = TensorQuant(1.0, output_zero, code, f"{loop.line} output")
        try:
            if _join_kind(loop) is not None:
                reads = tuple(codes(p, f"{loop.line} input") for p in producers)
                source, quant, layer = _join_node(loop, arrays, reads, output, code)
                sources.append(source)
                quants.append(quant)
                layers.append(layer)
                continue
            if mac is None:
                source = _source(loop, np.zeros(0), np.zeros(0))
                quant = PoolQuant(output, output, loop.line)
                tables = Int8Tables(quant, None, None, None)
                empty = np.zeros(0, dtype=np.int64)
                layers.append(QuantizedLayer(empty, empty, Activation.IDENTITY, source, tables))
                sources.append(source)
                quants.append(quant)
                continue
            if mac.qmin != code.qmin:
                raise NotRecognised(f"{loop.line}: codes start at {mac.qmin}, qv_num's at {code.qmin}")
            weights, bias, table = arrays[loop.weights], arrays[loop.bias], arrays[mac.table]
            source = _source(loop, weights, bias)
            quant = MacQuant(
                TensorQuant(1.0, mac.input_zero, code, f"{loop.line} input"),
                weights,
                np.ones(table.shape[0]),
                bias,
                output,
                False,
                f"{loop.line}",
            )
            acc_lo, acc_hi = accumulator_bounds(quant, _channel_reach(source, quant.weights))
        except (InputError, RangeError) as error:
            raise NotRecognised(f"{loop.line}: {error}") from error
        frozen = np.array(table, dtype=np.int64)
        frozen.flags.writeable = False
        sources.append(source)
        quants.append(quant)
        layers.append(
            QuantizedLayer(
                quant.weights,
                quant.bias,
                Activation.IDENTITY,
                source,
                Int8Tables(quant, frozen, acc_lo, acc_hi),
            )
        )
    try:
        quantization = AffineQuantization(
            TensorQuant(1.0, input_zero, code, "input"), tuple(quants), "lifted C"
        )
        net = Network(
            tuple(sources),
            name=f"lifted {path.name}",
            source=str(path),
            quantization=quantization,
            wiring=wiring,
        )
    except InputError as error:
        raise NotRecognised(f"{path}: the layers do not form a network ({error})") from error
    return QuantizedNetwork(
        source=net, options=ImplementationOptions(Int8Format()), layers=tuple(layers), luts=()
    )
