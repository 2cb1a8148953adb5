"""The built-in interval analysis: sound bounds of every neuron of the generated C, no external tool.

Two levels, both sound for the implemented arithmetic (each rounding, each overflow mode, IEEE
float):
- `interval`: `qverify.quant.implementation_bounds`, monotone per-operation interval propagation in
  the C's order (per-op or wide accumulation, sequential or balanced layout, tables);
- `symbolic` (default): the same, layer by layer, intersected with linear bounds in terms of the
  inputs (`qverify.invariants.symbolic`), which keep the correlations that intervals lose.
Bounds are computed per input box and joined (elementwise min/max) over the region's boxes.
"""

from __future__ import annotations

from qverify.invariants.region import InputBox, join_boxes
from qverify.invariants.symbolic import symbolic_bounds
from qverify.quant import LayerBounds, QuantizedNetwork, implementation_bounds


def box_bounds(qnet: QuantizedNetwork, box: InputBox, symbolic: bool = True) -> tuple[LayerBounds, ...]:
    """Bounds of every neuron for inputs in one box (words for fixed point, values for float)."""
    if symbolic:
        return symbolic_bounds(qnet, box.lo, box.hi)
    return implementation_bounds(qnet, box.lo, box.hi)


def builtin_bounds(
    qnet: QuantizedNetwork, boxes: list[InputBox], symbolic: bool = True
) -> tuple[LayerBounds, ...] | None:
    """Bounds over the union of `boxes`; None when there is no box (an empty region)."""
    return join_boxes([box_bounds(qnet, box, symbolic) for box in boxes])
