"""The Jinja context of a network: every number the C needs, already as exact C literals.

The MAC order of the balanced layout comes from `qverify.quant.reduce_terms`, the routine the
simulator uses, so the two cannot add in different orders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify import __version__
from qverify.codegen.literals import array_rows, matrix_rows, number_literal
from qverify.network import NETWORK_INPUT, Activation, Network
from qverify.network.operators import operator_of
from qverify.quant import (
    Accumulation,
    FixedFormat,
    LayerBounds,
    Layout,
    QuantizedLayer,
    QuantizedNetwork,
    reduce_terms,
)


@dataclass(frozen=True, slots=True)
class NeuronBounds:
    """Per-layer invariants to inject as assumes, in the implementation's units."""

    layers: tuple[LayerBounds, ...]
    origin: str  # e.g. "built-in interval analysis", "Frama-C EVA"


def _ctype(qnet: QuantizedNetwork) -> str:
    if qnet.is_int8:
        return qnet.output_quant.code.c_type
    return "fxp_t" if qnet.is_fixed else qnet.number.c_type  # type: ignore[union-attr]


def literal_type(qnet: QuantizedNetwork) -> str:
    return "int" if qnet.is_integer else qnet.number.c_type  # type: ignore[union-attr]


def arithmetic(qnet: QuantizedNetwork) -> str:
    """How the template writes one product and one addition: fixed, wide, float, half or int8."""
    if qnet.is_int8:
        return "int8"
    if qnet.is_fixed:
        return "wide" if qnet.options.accumulation is Accumulation.WIDE else "fixed"
    return "half" if qnet.number.is_half else "float"  # type: ignore[union-attr]


def tree_expression(qnet: QuantizedNetwork, index: int, n_in: int, input_name: str) -> str:
    weight = f"qv_w{index}[j]"
    if qnet.is_float and qnet.number.is_half:  # type: ignore[union-attr]
        return reduce_terms(
            n_in,
            f"qv_b{index}[j]",
            lambda i: f"(qv_num)({weight}[{i}] * {input_name}[{i}])",
            lambda a, b: f"(qv_num)({a} + {b})",
            balanced=True,
        )
    if not qnet.is_fixed:
        return reduce_terms(
            n_in,
            f"qv_b{index}[j]",
            lambda i: f"{weight}[{i}] * {input_name}[{i}]",
            lambda a, b: f"({a} + {b})",
            balanced=True,
        )
    if qnet.options.accumulation is Accumulation.WIDE:
        total = reduce_terms(
            n_in,
            f"(int64_t)qv_b{index}[j] * FXP_ONE",
            lambda i: f"(int64_t){weight}[{i}] * {input_name}[{i}]",
            lambda a, b: f"({a} + {b})",
            balanced=True,
        )
        return f"fxp_wide_result({total})"
    return reduce_terms(
        n_in,
        f"qv_b{index}[j]",
        lambda i: f"fxp_mult({weight}[{i}], {input_name}[{i}])",
        lambda a, b: f"fxp_add({a}, {b})",
        balanced=True,
    )


def _apply(activation: Activation) -> str:
    if activation is Activation.IDENTITY:
        return "acc"
    if activation is Activation.RELU:
        return "qv_relu(acc)"
    return f"qv_{activation.value}(acc)"


def _bound_literal_type(qnet: QuantizedNetwork) -> str:
    return "int" if qnet.is_integer else qnet.number.c_type  # type: ignore[union-attr]


def _bounds_context(bounds: LayerBounds, literal_type: str, origin: str) -> dict:
    def rows(values: np.ndarray) -> list[str]:
        return array_rows(values, literal_type)

    return {
        "origin": origin,
        "pre_lo": rows(bounds.pre_lo),
        "pre_hi": rows(bounds.pre_hi),
        "post_lo": rows(bounds.post_lo),
        "post_hi": rows(bounds.post_hi),
    }


def geometry(layer: QuantizedLayer) -> dict:
    """Loop bounds and offsets of a convolution or pool, as the template's loops use them."""
    source = layer.source
    channels, in_h, in_w = source.input_shape  # type: ignore[union-attr]
    out_c, out_h, out_w = source.output_shape  # type: ignore[union-attr]
    kernel = source.kernel  # type: ignore[union-attr]
    strides, pads = source.strides, source.pads  # type: ignore[union-attr]
    return {
        "channels": channels,
        "in_h": in_h,
        "in_w": in_w,
        "out_channels": out_c,
        "out_h": out_h,
        "out_w": out_w,
        "kernel_h": kernel[0],
        "kernel_w": kernel[1],
        "stride_h": strides[0],
        "stride_w": strides[1],
        "pad_top": pads[0],
        "pad_left": pads[1],
        "padded": any(pads),
    }


def int8_context(qnet: QuantizedNetwork, layer: QuantizedLayer, row_variable: str) -> dict:
    tables = layer.int8
    assert tables is not None
    if tables.table is None:
        return {}
    quant = tables.quant
    mode = qnet.number.requant.value  # type: ignore[union-attr]
    per = "per channel" if tables.table.shape[0] > 1 else "per tensor"
    return {
        "qmin": tables.code.qmin,
        "zp_in": f"({tables.input_zero})" if tables.input_zero < 0 else str(tables.input_zero),
        "table_count": tables.table.shape[0],
        "table_rows": matrix_rows(tables.table, "int"),
        "table_row": row_variable if tables.table.shape[0] > 1 else "0",
        "requant_note": (
            f"{mode}, {per}; input {quant.input.describe()}, output {quant.output.describe()}"
            + (", ReLU as the clamp" if layer.activation is Activation.RELU else "")
        ),
    }


def array_name(producer: int) -> str:
    """The C array holding a node's output (`h<k>` for node k, 1-based; `x` for the input)."""
    return "x" if producer == NETWORK_INPUT else f"h{producer + 1}"


def _layer_context(
    qnet: QuantizedNetwork, index: int, layer: QuantizedLayer, bounds: NeuronBounds | None
) -> dict:
    last = index == len(qnet.layers)
    names = [array_name(p) for p in qnet.wiring[index - 1]]
    input_name = names[0]
    source = layer.source
    context = {
        "index": index,
        "n_in": layer.n_in,
        "n_out": layer.n_out,
        "description": source.describe(),  # type: ignore[union-attr]
        "activation": layer.activation.value,
        "input": input_name,
        "inputs": names,
        "output": "y" if last else f"h{index}",
        "apply": _apply(layer.activation),
        "tree": None,
        "table_row": "0",
        "pair_offset": None,
        "bounds": _bounds_context(bounds.layers[index - 1], _bound_literal_type(qnet), bounds.origin)
        if bounds
        else None,
    }
    operator = operator_of(source)
    context["loop_variables_used"] = operator.loop_variables(qnet.options.layout is Layout.BALANCED)
    context.update(operator.c_context(qnet, index, layer, names))
    return context


def loop_variables(layers: list[dict]) -> list[str]:
    """The C loop variables the layers use (declared once; unused ones would not compile)."""
    used: set[str] = set()
    for layer in layers:
        used |= layer["loop_variables_used"]
    order = ("j", "i", "c", "oc", "oy", "ox", "ic", "ky", "kx", "iy", "ix")
    return [name for name in order if name in used]


def _luts_context(qnet: QuantizedNetwork) -> list[dict]:
    literal = literal_type(qnet)
    result = []
    for lut in qnet.luts:
        entry = {
            "name": lut.activation.value,
            "n": lut.n_entries,
            "rows": array_rows(lut.table, literal),
            "half_range": f"{lut.half_range:.10g}",
            "eps": f"{lut.error_bound:.6g}",
            "sat_lo": number_literal(lut.sat_lo, literal),
            "sat_hi": number_literal(lut.sat_hi, literal),
        }
        if qnet.is_fixed:
            entry["qa"] = lut.half_range_q
        else:
            entry.update(
                a=number_literal(lut.half_range, literal),
                scale=number_literal(lut.float_scale, literal),
                half=number_literal(0.5, literal),
            )
        result.append(entry)
    return result


def int8_lines(qnet: QuantizedNetwork) -> list[str]:
    """The header comment's account of an int8 network's quantization."""
    quant = qnet.source.quantization
    assert quant is not None
    lines = [
        f"{quant.describe()}",
        f"input codes: x = QuantizeLinear(real input) with {qnet.input_quant.describe()}",
        f"output codes: real output = (y - {qnet.output_quant.zero_point}) * {qnet.output_quant.scale!r}",
        f"requantization: {qnet.number.requant.value} rounding (qverify.quant.affine), as integer threshold tables",  # type: ignore[union-attr]
    ]
    return lines


def normalisation_lines(net: Network) -> list[str]:
    """The header comment's account of the NNet normalisation done at generation time."""
    lines = []
    norm = net.input_norm
    if norm is None:
        lines.append("inputs: used as given (the network has no input normalisation)")
    else:
        lines.append("inputs are NORMALISED: x_norm = (clip(x, min, max) - mean) / range, done by qverify")
        for i in range(norm.size):
            lines.append(
                f"  x{i}: min {norm.minimum[i]:.9g} max {norm.maximum[i]:.9g} "
                f"mean {norm.mean[i]:.9g} range {norm.range[i]:.9g}"
            )
    if net.output_norm is not None:
        lines.append(
            "outputs are normalised: y = y_norm * range + mean with range "
            f"{net.output_norm.range[0]:.9g}, mean {net.output_norm.mean[0]:.9g}"
        )
    return lines


def network_context(
    qnet: QuantizedNetwork, bounds: NeuronBounds | None = None, notes: tuple[str, ...] = ()
) -> dict:
    """Everything `_network.c.j2` and `_header.c.j2` read."""
    net = qnet.source
    layers = [_layer_context(qnet, index, layer, bounds) for index, layer in enumerate(qnet.layers, start=1)]
    context = {
        "version": __version__,
        "name": net.name,
        "source": net.source or net.name,
        "digest": net.digest(),
        "sizes": " -> ".join(map(str, net.sizes)),
        "activations": ", ".join(layer.activation.value for layer in qnet.layers),
        "is_fixed": qnet.is_fixed,
        "ctype": _ctype(qnet),
        "accumulation": qnet.options.accumulation.value,
        "layout": qnet.options.layout.value,
        "wide": qnet.options.accumulation is Accumulation.WIDE,
        "lut_design": qnet.options.lut.describe(),
        "luts": _luts_context(qnet),
        "layers": layers,
        "loop_variables": loop_variables(layers),
        "arith": arithmetic(qnet),
        "weight_type": "int8_t" if qnet.is_int8 else "qv_num",
        "bias_type": "int32_t" if qnet.is_int8 else "qv_num",
        "bound_type": "int32_t" if qnet.is_int8 else "qv_num",
        "uses_relu": not qnet.is_int8 and any(layer.activation is Activation.RELU for layer in qnet.layers),
        "relu6_top": None
        if qnet.is_int8 or all(layer.activation is not Activation.RELU6 for layer in qnet.layers)
        else number_literal(qnet.relu6_top, literal_type(qnet)),
        "n_inputs": qnet.n_inputs,
        "n_outputs": qnet.n_outputs,
        "normalisation": normalisation_lines(net),
        "notes": list(notes),
    }
    if qnet.is_int8:
        inq, outq = qnet.input_quant, qnet.output_quant
        context.update(
            int8_lines=int8_lines(qnet),
            input_qmin=inq.code.qmin,
            input_qmax=inq.code.qmax,
            input_zero=f"({inq.zero_point})" if inq.zero_point < 0 else str(inq.zero_point),
            input_zero_f=f"({float(inq.zero_point)!r}f)",
            input_scale=number_literal(inq.scale, "float"),
            output_zero=f"({outq.zero_point})" if outq.zero_point < 0 else str(outq.zero_point),
            output_scale=number_literal(outq.scale, "float"),
        )
    if isinstance(qnet.number, FixedFormat):
        fmt = qnet.number
        context.update(
            k=fmt.int_bits,
            l=fmt.frac_bits,
            rounding=fmt.rounding.value,
            overflow=fmt.overflow.value,
            rounding_macro=f"QV_ROUND_{fmt.rounding.name}",
            overflow_macro=f"QV_OVERFLOW_{fmt.overflow.name}",
        )
    return context
