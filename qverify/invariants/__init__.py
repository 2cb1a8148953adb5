"""Interval invariants of every neuron of the generated C, to inject as assumes.

`compute_bounds(qnet, prop, method)` bounds each neuron's accumulated value (`pre`) and output
(`post`) over the property's input region, in the implementation's units (words for fixed point,
values of the C type for float), with one of:
- `FRAMAC`: Frama-C EVA on a view of the network code (`qverify.invariants.framac`);
- `BUILTIN`: qverify's own analysis, intervals refined by linear bounds (`builtin`, `symbolic`);
- `AUTO` (default): the method that gives the tightest bounds for the least time. Measured
  (benchmarks/bench_framac_gain.py, docs/invariants.md "The auto rule"): on the code qverify
  generates, Frama-C EVA never gave a tighter bound than the built-in analysis (EVA is
  non-relational here and equals the built-in interval level, or is looser under `wrap`), at
  1-100 s against 0.01-1 s, so `AUTO` is the built-in analysis and never runs Frama-C;
- `NONE`: no invariants.
The result's `bounds` go to `qverify.codegen.render_harness(qnet, prop, bounds)`, which writes an
`__ESBMC_assume` after each neuron's accumulation and activation, and to the engine as they are.

>>> result = compute_bounds(qnet, prop, IntervalMethod.BUILTIN)          # doctest: +SKIP
>>> program = render_harness(qnet, prop, result.bounds)                  # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from qverify.codegen import NeuronBounds
from qverify.invariants.builtin import builtin_bounds
from qverify.invariants.framac import FramacOptions, FramacResult, FramacVersion, find_framac, framac_bounds
from qverify.invariants.region import (
    InputBox,
    first_non_finite,
    input_boxes,
    mean_width,
    stable_relus,
)
from qverify.invariants.symbolic import COST_BUDGET, symbolic_applies, symbolic_cost
from qverify.properties import Property
from qverify.quant import LayerBounds, QuantizedNetwork
from qverify.vocabulary import IntervalMethod

__all__ = [
    "BoundsResult",
    "BoundsStats",
    "FramacOptions",
    "FramacResult",
    "FramacVersion",
    "InputBox",
    "IntervalMethod",
    "builtin_bounds",
    "compute_bounds",
    "find_framac",
    "framac_bounds",
    "input_boxes",
    "mean_width",
    "stable_relus",
]

BUILTIN_ORIGIN = "built-in interval analysis"
SYMBOLIC_ORIGIN = "built-in interval analysis with symbolic (linear) bounds"


@dataclass(frozen=True, slots=True)
class BoundsStats:
    """Figures of one analysis, for reports and the benchmark."""

    boxes: int  # non-empty input boxes analysed
    mean_width: float  # mean of pre_hi - pre_lo at the last hidden layer, in real units
    stable_relus: int  # ReLUs with pre_lo >= 0 or pre_hi <= 0
    relus: int  # ReLUs in the network


@dataclass(frozen=True, slots=True)
class BoundsResult:
    """Invariants to inject (None: nothing to inject), how they were obtained, and what was said."""

    bounds: NeuronBounds | None
    method_used: IntervalMethod  # FRAMAC, BUILTIN or NONE (never AUTO)
    warnings: tuple[str, ...]
    time_s: float
    stats: BoundsStats

    @property
    def stable_relus(self) -> int:
        return self.stats.stable_relus


def _stats(qnet: QuantizedNetwork, layers: tuple[LayerBounds, ...] | None, boxes: int) -> BoundsStats:
    stable, total = stable_relus(qnet, layers)
    return BoundsStats(boxes, mean_width(qnet, layers), stable, total)


def _finite_or_warning(qnet: QuantizedNetwork, layers: tuple[LayerBounds, ...] | None) -> str | None:
    """Why float bounds cannot be injected: a neuron that may be infinite or NaN (NaN fails every
    comparison, so `lo <= v && v <= hi` would cut executions). None when they can."""
    if layers is None or qnet.is_fixed:
        return None
    site = first_non_finite(layers)
    if site is None:
        return None
    return (
        f"layer {site[0]}, neuron {site[1]} may be infinite or NaN for inputs in the region: "
        "no invariants injected"
    )


def _too_costly(qnet: QuantizedNetwork) -> str:
    return (
        f"symbolic bounds skipped: {symbolic_cost(qnet):,} multiply-adds per input box exceed "
        f"the budget of {COST_BUDGET:,}; interval bounds only"
    )


def compute_bounds(
    qnet: QuantizedNetwork,
    prop: Property,
    method: IntervalMethod = IntervalMethod.AUTO,
    *,
    framac_options: FramacOptions | None = None,
    symbolic: bool = True,
) -> BoundsResult:
    """Invariants of every neuron over the region of `prop` (normalised units), by `method`.

    `framac_options` defaults to `FramacOptions()`; `symbolic` enables the linear refinement of
    the built-in analysis (skipped, with a warning, when `symbolic_cost` exceeds `COST_BUDGET`).
    AUTO is the built-in analysis (see the module docstring). Returns bounds None for NONE, for an
    empty region (no representable input: nothing to inject), and for a float network that may
    produce inf or NaN (with a warning). Raises ToolMissingError (FRAMAC without frama-c installed),
    ToolFailedError (FRAMAC: crash, time-out, unknown or too old version, alarms, unparseable
    output), InputError (raw-unit property, wrong dimensions).
    """
    start = time.perf_counter()
    framac_options = framac_options or FramacOptions()
    if method is IntervalMethod.NONE:
        return BoundsResult(None, IntervalMethod.NONE, (), 0.0, _stats(qnet, None, 0))
    if method is IntervalMethod.FRAMAC:
        find_framac(framac_options)
    boxes = input_boxes(qnet, prop)
    warnings: list[str] = []
    symbolic = symbolic and symbolic_applies(qnet)
    if symbolic and method is not IntervalMethod.FRAMAC and symbolic_cost(qnet) > COST_BUDGET:
        symbolic = False
        warnings.append(_too_costly(qnet))
    if method is IntervalMethod.FRAMAC:
        framac = framac_bounds(qnet, boxes, framac_options)
        layers, used, origin = framac.bounds, IntervalMethod.FRAMAC, f"Frama-C EVA {framac.version.text}"
        warnings += framac.warnings
    else:  # BUILTIN, and AUTO (the auto rule: Frama-C adds nothing over the built-in analysis)
        layers, used = builtin_bounds(qnet, boxes, symbolic), IntervalMethod.BUILTIN
        origin = SYMBOLIC_ORIGIN if symbolic else BUILTIN_ORIGIN
    problem = _finite_or_warning(qnet, layers)
    if problem is not None:
        warnings.append(problem)
    bounds = None if layers is None or problem is not None else NeuronBounds(layers, origin)
    return BoundsResult(
        bounds, used, tuple(warnings), time.perf_counter() - start, _stats(qnet, layers, len(boxes))
    )
