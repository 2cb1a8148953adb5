"""The Jinja context of a network: every number the C needs, already as exact C literals.

The MAC order of the balanced layout comes from `qverify.quant.reduce_terms`, the routine the
simulator uses, so the two cannot add in different orders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify import __version__
from qverify.codegen.literals import array_rows, matrix_rows, number_literal
from qverify.network import Activation, Network
from qverify.quant import (
    Accumulation,
    FixedFormat,
    LayerBounds,
    Layout,
    QuantizedNetwork,
    reduce_terms,
)


@dataclass(frozen=True, slots=True)
class NeuronBounds:
    """Per-layer invariants to inject as assumes, in the implementation's units."""

    layers: tuple[LayerBounds, ...]
    origin: str  # e.g. "built-in interval analysis", "Frama-C EVA"


def _ctype(qnet: QuantizedNetwork) -> str:
    return "fxp_t" if qnet.is_fixed else qnet.number.c_type  # type: ignore[union-attr]


def _literal_type(qnet: QuantizedNetwork) -> str:
    return "int" if qnet.is_fixed else qnet.number.c_type  # type: ignore[union-attr]


def _tree_expression(qnet: QuantizedNetwork, index: int, n_in: int, input_name: str) -> str:
    weight = f"qv_w{index}[j]"
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


def _layers_context(qnet: QuantizedNetwork, bounds: NeuronBounds | None) -> list[dict]:
    literal_type = _literal_type(qnet)
    balanced = qnet.options.layout is Layout.BALANCED
    layers = []
    for index, layer in enumerate(qnet.layers, start=1):
        last = index == len(qnet.layers)
        input_name = "x" if index == 1 else f"h{index - 1}"
        layers.append(
            {
                "index": index,
                "n_in": layer.n_in,
                "n_out": layer.n_out,
                "activation": layer.activation.value,
                "weight_rows": matrix_rows(layer.weights, literal_type),
                "bias_rows": array_rows(layer.bias, literal_type),
                "input": input_name,
                "output": "y" if last else f"h{index}",
                "apply": _apply(layer.activation),
                "tree": _tree_expression(qnet, index, layer.n_in, input_name) if balanced else None,
                "bounds": _bounds_context(bounds.layers[index - 1], literal_type, bounds.origin)
                if bounds
                else None,
            }
        )
    return layers


def _luts_context(qnet: QuantizedNetwork) -> list[dict]:
    literal_type = _literal_type(qnet)
    result = []
    for lut in qnet.luts:
        entry = {
            "name": lut.activation.value,
            "n": lut.n_entries,
            "rows": array_rows(lut.table, literal_type),
            "half_range": f"{lut.half_range:.10g}",
            "eps": f"{lut.error_bound:.6g}",
            "sat_lo": number_literal(lut.sat_lo, literal_type),
            "sat_hi": number_literal(lut.sat_hi, literal_type),
        }
        if qnet.is_fixed:
            entry["qa"] = lut.half_range_q
        else:
            entry.update(
                a=number_literal(lut.half_range, literal_type),
                scale=number_literal(lut.float_scale, literal_type),
                half=number_literal(0.5, literal_type),
            )
        result.append(entry)
    return result


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
    context = {
        "version": __version__,
        "name": net.name,
        "source": net.source or net.name,
        "digest": net.digest(),
        "sizes": " -> ".join(map(str, net.sizes)),
        "activations": ", ".join(layer.activation.value for layer in net.layers),
        "is_fixed": qnet.is_fixed,
        "ctype": _ctype(qnet),
        "accumulation": qnet.options.accumulation.value,
        "layout": qnet.options.layout.value,
        "wide": qnet.options.accumulation is Accumulation.WIDE,
        "lut_design": qnet.options.lut.describe(),
        "luts": _luts_context(qnet),
        "layers": _layers_context(qnet, bounds),
        "uses_relu": any(layer.activation is Activation.RELU for layer in qnet.layers),
        "n_inputs": qnet.n_inputs,
        "n_outputs": qnet.n_outputs,
        "normalisation": normalisation_lines(net),
        "notes": list(notes),
    }
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
