"""Network level: convolution and pooling loops of `qv_network` (`templates/_network.c.j2`), recognised
exactly.

A convolution is the loop nest `oc, oy, ox` around the accumulator's start, `j = (oc * OH + oy) *
OW + ox;`, the product loops `ic, ky, kx` with `iy = oy * SH + ky - PT; ix = ox * SW + kx - PL;`
and, when padded, the bounds test `if (iy >= 0 && iy < IH && ix >= 0 && ix < IW)` around one MAC
`W[oc][ic][ky][kx] * IN[(IC * IH + iy) * IW + ix]` (IC = `ic`, or `(oc / GO * GI + ic)` for grouped
convolutions) in the layer's arithmetic; then the optional invariant assume, the store with the
activation and its assume, as for dense layers. Products are added in (ic, ky, kx) order skipping
padded positions: the order of `qverify.network.Conv2D.taps`, which the simulator follows.
A pool is the loop nest `c, oy, ox` with `qv_num acc = 0; int first = 1;`, the same `j`, the window
loops `ky, kx` with the bounds test, `qv_num v = IN[(c * IH + iy) * IW + ix];` and the template's
`first` logic (maximum: `else if (v > acc) acc = v;`; average: `else acc = acc + v` in the
arithmetic, then `acc = acc * R[j]` with the reciprocal table R), then the store `OUT[j] = acc`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pycparser import c_ast

from qverify.engine.netlevel.lift.cnodes import (
    call,
    conjuncts,
    fail,
    index_ref,
    integer_constant,
    is_id,
    statements,
    type_names,
)
from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.engine.netlevel.lift.int8 import INT32, Int8Mac, int8_product, requant_store
from qverify.engine.netlevel.lift.layers import (
    INT64_NAMES,
    Arith,
    MacReader,
    Term,
    bounds_assume,
    counted_loop,
    fresh,
    local_decl,
    store_activation,
)
from qverify.errors import InputError
from qverify.network import Activation, AveragePool2D, Conv2D, MaxPool2D
from qverify.quant import Accumulation, Layout, QuantizedLayer


@dataclass(frozen=True, slots=True)
class SpatialLoop:
    """One recognised convolution or pool: arrays, geometry and arithmetic."""

    kind: str  # conv, maxpool, avgpool
    weights: str | None  # conv kernel, or the average pool's reciprocals
    bias: str | None
    input: str
    output: str
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int]  # top, left (the bottom and right ones follow from the output size)
    groups: int
    activation: Activation
    accumulation: Accumulation | None  # None for pools (they add per operation in every mode)
    pre_bounds: tuple[str, str] | None
    out_bounds: tuple[str, str] | None
    line: str
    layout: Layout = Layout.SEQUENTIAL
    int8: Int8Mac | None = None  # an int8 convolution's requantization (lift.int8 builds its layer)

    @property
    def n_in(self) -> int:
        return int(np.prod(self.in_shape))

    @property
    def n_out(self) -> int:
        return int(np.prod(self.out_shape))

    def constant_names(self) -> tuple[str, ...]:
        table = self.int8.table if self.int8 is not None else None
        names = (self.weights, self.bias, table, *(self.pre_bounds or ()), *(self.out_bounds or ()))
        return tuple(name for name in names if name is not None)

    def geometry(self) -> dict:
        """The keyword arguments of `Conv2D` / the pools that the loops state (bottom and right
        pads: the least that give the loops' output size)."""
        return {"input_shape": self.in_shape, "strides": self.strides, "pads": self._full_pads()}

    def layer(self, arrays: dict[str, np.ndarray], scale: int) -> QuantizedLayer:
        """The QuantizedLayer (with its IR source) of this loop nest, from the harness's arrays."""
        pads = self._full_pads()
        out_channels = self.out_shape[0]
        try:
            if self.kind == "conv":
                weights, bias = arrays[self.weights], arrays[self.bias]  # type: ignore[index]
                group_in = self.in_shape[0] // self.groups
                if weights.shape != (out_channels, group_in, *self.kernel) or bias.shape != (out_channels,):
                    raise NotRecognised(
                        f"{self.line}: {self.weights} {list(weights.shape)} / {self.bias} {list(bias.shape)} "
                        "do not match the loops"
                    )
                source = Conv2D(
                    weights.astype(np.float64) / scale,
                    bias.astype(np.float64) / scale,
                    self.activation,
                    self.in_shape,
                    self.strides,
                    pads,
                    self.groups,
                )
                layer = QuantizedLayer(weights, bias, self.activation, source)
            else:
                pool = MaxPool2D if self.kind == "maxpool" else AveragePool2D
                source = pool(self.in_shape, self.kernel, self.strides, pads)
                reciprocals = arrays[self.weights] if self.weights else np.zeros(0)
                if self.weights and reciprocals.shape != (self.n_out,):
                    raise NotRecognised(f"{self.line}: {self.weights} is not one reciprocal per output")
                layer = QuantizedLayer(
                    reciprocals, np.zeros(0, dtype=reciprocals.dtype), Activation.IDENTITY, source
                )
        except InputError as error:
            raise NotRecognised(f"{self.line}: geometry not a valid layer ({error})") from error
        if source.output_shape != self.out_shape:
            raise NotRecognised(f"{self.line}: loop bounds do not give the layer's output shape")
        return layer

    def _full_pads(self) -> tuple[int, int, int, int]:
        """Top, left as written; bottom, right the least that give the loops' output size."""
        (_, in_h, in_w), (_, out_h, out_w) = self.in_shape, self.out_shape
        bottom = max(0, (out_h - 1) * self.strides[0] + self.kernel[0] - in_h - self.pads[0])
        right = max(0, (out_w - 1) * self.strides[1] + self.kernel[1] - in_w - self.pads[1])
        return (self.pads[0], self.pads[1], bottom, right)


def _binary(node: c_ast.Node, op: str) -> tuple[c_ast.Node, c_ast.Node]:
    if not (isinstance(node, c_ast.BinaryOp) and node.op == op):
        raise NotRecognised("")
    return node.left, node.right


def _constant(node: c_ast.Node) -> int:
    value = integer_constant(node)
    if value is None or value < 0:
        raise NotRecognised("")
    return value


def _name(node: c_ast.Node, name: str) -> None:
    if not is_id(node, name):
        raise NotRecognised("")


def _flat_index(node: c_ast.Node, channel: str | None, row: str, column: str) -> tuple[int, int, c_ast.Node]:
    """`(CH * H + row) * W + column` as (H, W, CH node); CH must be the variable `channel` if given."""
    left, col = _binary(node, "+")
    _name(col, column)
    inner, width = _binary(left, "*")
    channel_part, row_node = _binary(inner, "+")
    _name(row_node, row)
    channel_node, height = _binary(channel_part, "*")
    if channel is not None:
        _name(channel_node, channel)
    return _constant(height), _constant(width), channel_node


def _position(node: c_ast.Node, target: str, outer: str, inner: str) -> tuple[int, int]:
    """`target = outer * S + inner - P;` as (S, P)."""
    if not (isinstance(node, c_ast.Assignment) and node.op == "=" and is_id(node.lvalue, target)):
        raise NotRecognised("")
    shifted, pad = _binary(node.rvalue, "-")
    scaled, kernel = _binary(shifted, "+")
    _name(kernel, inner)
    position, stride = _binary(scaled, "*")
    _name(position, outer)
    return _constant(stride), _constant(pad)


def _bounds_test(node: c_ast.Node, iy: str, ix: str) -> tuple[int, int]:
    """`iy >= 0 && iy < IH && ix >= 0 && ix < IW` as (IH, IW)."""
    parts = conjuncts(node)
    if len(parts) != 4:
        raise NotRecognised("")
    expected = ((iy, ">="), (iy, "<"), (ix, ">="), (ix, "<"))
    values = []
    for part, (name, op) in zip(parts, expected):
        left, right = _binary(part, op)
        _name(left, name)
        values.append(_constant(right))
    if values[0] != 0 or values[2] != 0:
        raise NotRecognised("")
    return values[1], values[3]


@dataclass(slots=True)
class _Nest:
    """The three output loops and the flat index `j` common to convolutions and pools."""

    outer: str
    oy: str
    ox: str
    channels: int
    out_h: int
    out_w: int
    items: list[c_ast.Node]


def _output_nest(node: c_ast.Node, loop_vars: set[str]) -> _Nest:
    outer, channels, body = counted_loop(node, loop_vars)
    middle = statements(body)
    if len(middle) != 1:
        raise fail(node, "spatial layer: expected the row loop alone in the channel loop")
    oy, out_h, body = counted_loop(middle[0], loop_vars)
    inner = statements(body)
    if len(inner) != 1:
        raise fail(middle[0], "spatial layer: expected the column loop alone in the row loop")
    ox, out_w, body = counted_loop(inner[0], loop_vars)
    if len({outer, oy, ox}) != 3:
        raise fail(node, "spatial layer: loops share a variable")
    return _Nest(outer, oy, ox, channels, out_h, out_w, statements(body))


def _flat_output(node: c_ast.Node, nest: _Nest, loop_vars: set[str]) -> str:
    """`j = (outer * OH + oy) * OW + ox;` with the nest's own sizes; returns j."""
    if not (isinstance(node, c_ast.Assignment) and node.op == "=" and isinstance(node.lvalue, c_ast.ID)):
        raise fail(node, "spatial layer: expected j = (c * OH + oy) * OW + ox")
    j = node.lvalue.name
    try:
        out_h, out_w, _ = _flat_index(node.rvalue, nest.outer, nest.oy, nest.ox)
    except NotRecognised:
        raise fail(node, "spatial layer: expected j = (c * OH + oy) * OW + ox") from None
    if (
        j not in loop_vars
        or j in (nest.outer, nest.oy, nest.ox)
        or (out_h, out_w) != (nest.out_h, nest.out_w)
    ):
        raise fail(node, "spatial layer: the flat output index does not match the loops")
    return j


class _ConvReader(MacReader):
    """Products W[oc][ic][ky][kx] * IN[(IC * IH + iy) * IW + ix] read as ('*', 'i')."""

    def __init__(self, arith: Arith, oc: str, names: dict[str, str], acc: str | None) -> None:
        super().__init__(arith, oc, None, acc)
        self.names = names
        self.geometry: tuple | None = None

    def product(self, weight: c_ast.Node, value: c_ast.Node) -> Term:
        w, x = index_ref(weight), index_ref(value)
        names = self.names
        if w is None or x is None or len(w[1]) != 4 or len(x[1]) != 1:
            raise fail(weight, "convolution product is not W[oc][ic][ky][kx] * IN[...]")
        if not all(is_id(index, names[key]) for index, key in zip(w[1], ("oc", "ic", "ky", "kx"))):
            raise fail(weight, "convolution weight is not indexed [oc][ic][ky][kx]")
        try:
            in_h, in_w, channel = _flat_index(x[1][0], None, names["iy"], names["ix"])
            geometry = (in_h, in_w, _channel(channel, names))
        except NotRecognised:
            raise fail(value, "convolution input index is not (IC * IH + iy) * IW + ix") from None
        if self.geometry is not None and self.geometry != geometry:
            raise fail(value, "convolution reads its input in two layouts")
        self.geometry = geometry
        self._same("weights", w[0], weight)
        self._same("input", x[0], value)
        return ("*", "i")


def _channel(node: c_ast.Node, names: dict[str, str]) -> tuple[int, int] | None:
    """`ic` (None: one group) or `(oc / GO * GI + ic)` as (GO, GI)."""
    if is_id(node, names["ic"]):
        return None
    offset, ic = _binary(node, "+")
    _name(ic, names["ic"])
    quotient, group_in = _binary(offset, "*")
    oc, group_out = _binary(quotient, "/")
    _name(oc, names["oc"])
    return _constant(group_out), _constant(group_in)


def _tail(
    items: list[c_ast.Node], position: int, j: str, acc: str, node: c_ast.Node, pool: bool, store_reader=None
):
    """The optional pre assume, the store (`OUT[j] = activation(acc)`, or what `store_reader` reads
    and returns as (OUT, activation)) and the optional out assume."""
    pre = bounds_assume(items[position], j, c_ast.ID(acc)) if position < len(items) else None
    position += pre is not None
    if position >= len(items):
        raise fail(node, "spatial layer ends before the output is stored")
    store = items[position]
    target, activation = (store_reader or store_activation)(store, j, acc)
    if pool and activation is not Activation.IDENTITY:
        raise fail(store, "a pool stores acc itself")
    position += 1
    out = bounds_assume(items[position], j, store.lvalue) if position < len(items) else None
    position += out is not None
    if position != len(items):
        raise fail(items[position], "statement not recognised in a spatial layer")
    return pre, target, activation, out


def match_conv(node: c_ast.Node, arith: Arith, loop_vars: set[str], forbidden: set[str]) -> SpatialLoop:
    nest = _output_nest(node, loop_vars)
    items = nest.items
    if len(items) < 3:
        raise fail(node, "convolution body not recognised")
    int8 = arith.kind == "int8"
    starts = INT32 if int8 else (("qv_num",),) + (INT64_NAMES if arith.kind == "fixed" else ())
    first = local_decl(items[0], starts)
    if first is None or first[1] is None:
        raise fail(items[0], "convolution does not start with the accumulator's declaration")
    wide = type_names(items[0].type) in INT64_NAMES
    start_name = first[0]
    position = 1
    acc = start_name
    if wide:
        declared = local_decl(items[1], (("qv_num",),))
        if declared is None or declared[1] is not None:
            raise fail(items[1], "expected the declaration `qv_num acc;`")
        acc = declared[0]
        position = 2
    for name in {start_name, acc}:
        if not fresh(name, forbidden | loop_vars):
            raise fail(items[0], f"accumulator {name} shadows another name")
    j = _flat_output(items[position], nest, loop_vars)
    position += 1
    ic, group_in, body = counted_loop(items[position], loop_vars)
    ky_loop = statements(body)
    ky, kernel_h, body = counted_loop(ky_loop[0], loop_vars) if len(ky_loop) == 1 else (None, 0, None)
    kx_loop = statements(body) if body is not None else []
    kx, kernel_w, body = counted_loop(kx_loop[0], loop_vars) if len(kx_loop) == 1 else (None, 0, None)
    steps = statements(body) if body is not None else []
    if ky is None or kx is None or len(steps) != 3:
        raise fail(items[position], "convolution product loops not recognised")
    names = {"oc": nest.outer, "ic": ic, "ky": ky, "kx": kx}
    try:
        stride_h, pad_top = _position(steps[0], steps[0].lvalue.name, nest.oy, ky)
        stride_w, pad_left = _position(steps[1], steps[1].lvalue.name, nest.ox, kx)
    except (NotRecognised, AttributeError):
        raise fail(steps[0], "expected iy = oy * SH + ky - PT; ix = ox * SW + kx - PL;") from None
    names.update(iy=steps[0].lvalue.name, ix=steps[1].lvalue.name)
    if len(set(names.values()) | {nest.oy, nest.ox, j}) != 9 or not {names["iy"], names["ix"]} <= loop_vars:
        raise fail(node, "convolution loops share a variable, or iy/ix are not int locals")
    mac, tested = steps[2], None
    if isinstance(mac, c_ast.If):
        if mac.iffalse is not None or len(statements(mac.iftrue)) != 1:
            raise fail(mac, "convolution bounds test not recognised")
        try:
            tested = _bounds_test(mac.cond, names["iy"], names["ix"])
        except NotRecognised:
            raise fail(mac, "convolution bounds test not recognised") from None
        mac = statements(mac.iftrue)[0]
    reader = _ConvReader(
        Arith("wide", arith.frac_bits) if wide else arith, nest.outer, names, None if wide else acc
    )
    if wide:
        if reader.term(items[0].init) != "b":
            raise fail(items[0], "wide accumulator does not start at (int64_t)B[oc] * FXP_ONE")
        ok = isinstance(mac, c_ast.Assignment) and mac.op == "+=" and is_id(mac.lvalue, start_name)
        if not ok or reader.term(mac.rvalue) != ("*", "i"):
            raise fail(mac, "expected wide += (int64_t)W[oc][ic][ky][kx] * IN[...]")
        position += 1
        result = items[position] if position < len(items) else None
        rounded = call(result.rvalue, "fxp_wide_result") if isinstance(result, c_ast.Assignment) else None
        if (
            rounded is None
            or not is_id(result.lvalue, acc)
            or len(rounded[1]) != 1
            or not is_id(rounded[1][0], start_name)
        ):
            raise fail(result or mac, "expected acc = fxp_wide_result(wide)")
    elif int8:
        if not reader.bias_ref(items[0].init):
            raise fail(items[0], "accumulator does not start at the bias B[oc]")
        weight, value, input_zero = int8_product(mac, acc)
        reader.product(weight, value)
    else:
        if not reader.bias_ref(items[0].init):
            raise fail(items[0], "accumulator does not start at the bias B[oc]")
        ok = isinstance(mac, c_ast.Assignment) and mac.op == "=" and is_id(mac.lvalue, acc)
        if not ok or reader.term(mac.rvalue) != ("+", "acc", ("*", "i")):
            raise fail(mac, "convolution MAC not recognised in the layer's arithmetic")
    position += 1
    in_h, in_w, channel = reader.geometry  # type: ignore[misc]
    if tested is not None and tested != (in_h, in_w):
        raise fail(steps[2], "bounds test and input index use different sizes")
    groups = 1
    if channel is not None:
        group_out, written_in = channel
        if written_in != group_in or group_out <= 0 or nest.channels % group_out:
            raise fail(steps[2], "grouped convolution's channel expression does not match its loops")
        groups = nest.channels // group_out
    if tested is None and _reads_padding(
        nest, (kernel_h, kernel_w), (stride_h, stride_w), (pad_top, pad_left), (in_h, in_w)
    ):
        raise fail(steps[2], "convolution without a bounds test reads outside its input")
    int8_spec: list[Int8Mac] = []

    def requantized(store: c_ast.Node, j: str, acc: str) -> tuple[str, Activation]:
        output, qmin, table, per_channel = requant_store(store, j, acc, nest.outer)
        int8_spec.append(Int8Mac(table, per_channel, input_zero, qmin))
        return output, Activation.IDENTITY  # the clamp (a fused ReLU's too) is in the table

    pre, target, activation, out = _tail(
        items, position, j, acc, node, pool=False, store_reader=requantized if int8 else None
    )
    return SpatialLoop(
        "conv",
        reader.weights,
        reader.bias,
        reader.input,  # type: ignore[arg-type]
        target,
        (group_in * groups, in_h, in_w),
        (nest.channels, nest.out_h, nest.out_w),
        (kernel_h, kernel_w),
        (stride_h, stride_w),
        (pad_top, pad_left),
        groups,
        activation,
        None if int8 else Accumulation.WIDE if wide else Accumulation.PER_OP,
        pre,
        out,
        f"{node.coord.file}:{node.coord.line}" if node.coord else "?",
        int8=int8_spec[0] if int8 else None,
    )


def _reads_padding(nest: _Nest, kernel, strides, pads, size) -> bool:
    """Would an unguarded window reach outside the input (a padded or oversized geometry)?"""
    last_y = (nest.out_h - 1) * strides[0] + kernel[0] - 1 - pads[0]
    last_x = (nest.out_w - 1) * strides[1] + kernel[1] - 1 - pads[1]
    return pads[0] > 0 or pads[1] > 0 or last_y >= size[0] or last_x >= size[1]


def _pool_step(node: c_ast.Node, v: str, acc: str, first: str, arith: Arith) -> str:
    """`if (first) { acc = v; first = 0; } else <max or sum>` as 'maxpool' or 'avgpool'."""
    if not (isinstance(node, c_ast.If) and is_id(node.cond, first)):
        raise fail(node, "pool step not recognised")
    taken = statements(node.iftrue)
    if not (
        len(taken) == 2
        and _is_assign(taken[0], acc, lambda e: is_id(e, v))
        and _is_assign(taken[1], first, lambda e: integer_constant(e) == 0)
    ):
        raise fail(node, "pool step's first element not recognised")
    other = node.iffalse
    if isinstance(other, c_ast.If):
        cond = other.cond
        greater = (
            isinstance(cond, c_ast.BinaryOp)
            and cond.op == ">"
            and is_id(cond.left, v)
            and is_id(cond.right, acc)
        )
        then = statements(other.iftrue)
        if (
            greater
            and other.iffalse is None
            and len(then) == 1
            and _is_assign(then[0], acc, lambda e: is_id(e, v))
        ):
            return "maxpool"
        raise fail(other, "max pool comparison not recognised")
    rest = statements(other) if other is not None else []
    if (
        len(rest) == 1
        and isinstance(rest[0], c_ast.Assignment)
        and rest[0].op == "="
        and is_id(rest[0].lvalue, acc)
    ) and _sum_of(rest[0].rvalue, acc, v, arith):
        return "avgpool"
    raise fail(node, "pool step not recognised")


def _is_assign(node: c_ast.Node, target: str, value) -> bool:
    return (
        isinstance(node, c_ast.Assignment)
        and node.op == "="
        and is_id(node.lvalue, target)
        and value(node.rvalue)
    )


def _sum_of(node: c_ast.Node, a: str, b: str, arith: Arith, op: str = "+") -> bool:
    """acc op v in the arithmetic: fxp_add/fxp_mult, (qv_num)(a op b), or a op b."""
    function = {"+": "fxp_add", "*": "fxp_mult"}[op]
    if arith.kind == "fixed":
        called = call(node, function)
        return called is not None and len(called[1]) == 2 and _operands(called[1], a, b)
    if arith.kind == "half":
        if not (isinstance(node, c_ast.Cast) and type_names(node.to_type) == ("qv_num",)):
            return False
        node = node.expr
    return isinstance(node, c_ast.BinaryOp) and node.op == op and _operands([node.left, node.right], a, b)


def _operands(nodes: list[c_ast.Node], a: str, b) -> bool:
    return is_id(nodes[0], a) and (is_id(nodes[1], b) if isinstance(b, str) else b(nodes[1]))


def match_pool(node: c_ast.Node, arith: Arith, loop_vars: set[str], forbidden: set[str]) -> SpatialLoop:
    nest = _output_nest(node, loop_vars)
    items = nest.items
    if len(items) < 5:
        raise fail(node, "pool body not recognised")
    acc_decl, first_decl = local_decl(items[0], (("qv_num",),)), local_decl(items[1], (("int",),))
    if (
        acc_decl is None
        or first_decl is None
        or integer_constant(acc_decl[1]) != 0
        or integer_constant(first_decl[1]) != 1
    ):
        raise fail(items[0], "pool does not start with `qv_num acc = 0; int first = 1;`")
    acc, first = acc_decl[0], first_decl[0]
    j = _flat_output(items[2], nest, loop_vars)
    ky, kernel_h, body = counted_loop(items[3], loop_vars)
    kx_loop = statements(body)
    kx, kernel_w, body = counted_loop(kx_loop[0], loop_vars) if len(kx_loop) == 1 else (None, 0, None)
    steps = statements(body) if body is not None else []
    if kx is None or len(steps) != 3 or not isinstance(steps[2], c_ast.If) or steps[2].iffalse is not None:
        raise fail(items[3], "pool window loops not recognised")
    try:
        iy, ix = steps[0].lvalue.name, steps[1].lvalue.name
        stride_h, pad_top = _position(steps[0], iy, nest.oy, ky)
        stride_w, pad_left = _position(steps[1], ix, nest.ox, kx)
        in_h, in_w = _bounds_test(steps[2].cond, iy, ix)
    except (NotRecognised, AttributeError):
        raise fail(steps[0], "pool window positions or bounds test not recognised") from None
    guarded = statements(steps[2].iftrue)
    v_decl = local_decl(guarded[0], (("qv_num",),)) if len(guarded) == 2 else None
    if v_decl is None or v_decl[1] is None:
        raise fail(steps[2], "expected `qv_num v = IN[(c * IH + iy) * IW + ix];`")
    v = v_decl[0]
    source = index_ref(v_decl[1])
    try:
        if source is None or len(source[1]) != 1:
            raise NotRecognised("")
        read_h, read_w, _ = _flat_index(source[1][0], nest.outer, iy, ix)
    except NotRecognised:
        raise fail(guarded[0], "pool input index is not (c * IH + iy) * IW + ix") from None
    names = {acc, first, v, j, nest.outer, nest.oy, nest.ox, ky, kx, iy, ix}
    if (
        len(names) != 11
        or not {iy, ix} <= loop_vars
        or not all(fresh(name, forbidden | loop_vars) for name in (acc, first, v))
    ):
        raise fail(node, "pool variables share a name or shadow another one")
    if (read_h, read_w) != (in_h, in_w):
        raise fail(guarded[0], "pool input index and bounds test use different sizes")
    kind = _pool_step(guarded[1], v, acc, first, arith)
    if kind == "avgpool" and arith.kind == "int8":
        raise fail(
            guarded[1], "an int8 average pool (codes summed in qv_num) is not a layer the simulator has"
        )
    position = 4
    reciprocals = None
    if kind == "avgpool":
        scale = items[position] if position < len(items) else None
        factor = None
        if isinstance(scale, c_ast.Assignment) and scale.op == "=" and is_id(scale.lvalue, acc):
            ref: list = []

            def reciprocal(e: c_ast.Node) -> bool:
                found = index_ref(e)
                ok = found is not None and len(found[1]) == 1 and is_id(found[1][0], j)
                if ok:
                    ref.append(found[0])
                return ok

            if _sum_of(scale.rvalue, acc, reciprocal, arith, "*"):
                factor = ref[0]
        if factor is None:
            raise fail(scale or node, "average pool does not end with acc = acc * R[j]")
        reciprocals = factor
        position += 1
    pre, target, _, out = _tail(items, position, j, acc, node, pool=True)
    return SpatialLoop(
        kind,
        reciprocals,
        None,
        source[0],
        target,
        (nest.channels, in_h, in_w),
        (nest.channels, nest.out_h, nest.out_w),
        (kernel_h, kernel_w),
        (stride_h, stride_w),
        (pad_top, pad_left),
        1,
        Activation.IDENTITY,
        None,
        pre,
        out,
        f"{node.coord.file}:{node.coord.line}" if node.coord else "?",
    )


def match_spatial(node: c_ast.Node, arith: Arith, loop_vars: set[str], forbidden: set[str]) -> SpatialLoop:
    """A convolution or a pool, told apart by the pool's `int first = 1;`."""
    items = _output_nest(node, loop_vars).items
    is_pool = len(items) > 1 and local_decl(items[1], (("int",),)) is not None
    return (match_pool if is_pool else match_conv)(node, arith, loop_vars, forbidden)


def is_spatial(node: c_ast.Node) -> bool:
    """A loop whose body starts with another loop (the row loop): a convolution or a pool."""
    if not isinstance(node, c_ast.For):
        return False
    body = statements(node.stmt)
    return bool(body) and isinstance(body[0], c_ast.For)
