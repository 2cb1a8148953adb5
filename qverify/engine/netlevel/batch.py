"""Network level: ReLU-split nodes bounded together, one batch of boxes (issue 45, item 3).

On an image-size network a ReLU-split node is a few back-substitutions of a handful of rows (the
open atoms) through 256-wide layers: dozens of numpy calls whose Python overhead, not arithmetic,
was most of a node's time (digits784x4: ~20 ms a node in real arithmetic). alpha-beta-CROWN bounds
a batch of domains with one matrix product per layer, on the CPU too; so does this module: the
children of the best open nodes, each with its own split, phases, bounds and warm-started
parameters, stacked along a leading batch axis, so that every product of `bounds.backsubstitute`
carries all their rows at once ((B x R, n) @ W).

Per box the arithmetic is the one node's:
- the bounds (`split_batch_bounds`): each child's parent bounds with its split fixed
  (`bounds.with_phase`), then the layers from the split's next on bounded again
  (`bounds.layer_bounds` with per-box `starts`: a box keeps its parent's layers before its own
  split, as `node_bounds` does), the float64 rounding charged per box as for one node; the search
  bounds those layers by intervals within the parent's bounds only (`rebound` False,
  `search.REBOUND_AFTER_SPLIT`: alpha-beta-CROWN's fixed intermediate bounds), which is looser and
  as sound;
- fixed point: each box reads its product roundings per operand from its own tables
  (`operand_rounding.BoxTables`), the tables its parent had for the layers it keeps;
- the atoms' alpha-beta-CROWN optimisation (`beta.optimise_output_bounds` over the batch: its steps
  are elementwise per row, so a box gets what it would get alone).
Only the float64 summation order of a product can differ (BLAS blocks a (B x R)-row product
differently), and every product's rounding is charged a priori, for any order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.bounds import Bounds, layer_bounds, with_phase
from qverify.engine.netlevel.model import NetModel
from qverify.engine.netlevel.operand_rounding import BoxTables
from qverify.quant import LayerBounds


@dataclass(slots=True, eq=False)
class SplitBatch:
    """The bounds of a batch of ReLU-split nodes: `members` the positions (in the nodes given)
    of the boxes of `bounds` (arrays (B, n_k)) and of the input boxes xl, xu (B, n); `closed` the
    positions whose split contradicts their parent's bounds or whose box holds no execution."""

    members: list[int]
    bounds: Bounds | None
    xl: np.ndarray
    xu: np.ndarray
    closed: list[int]


def split_batch_bounds(
    model: NetModel, nodes: list, invariants: tuple[LayerBounds, ...] | None = None, rebound: bool = True
) -> SplitBatch:
    """Every node's bounds (each a ReLU-split child: `parent`, `split`, `phases`, `lo`, `hi` in
    words), as `search.Search.process` computes them one node at a time, in one batch. `rebound`
    False: the layers after a split are not back-substituted again, only propagated by intervals
    and intersected with the parent's (alpha-beta-CROWN's fixed intermediate bounds; the split
    reaches the atoms' bounds through its multiplier, `beta`)."""
    children = [with_phase(model, node.parent, *node.split) for node in nodes]
    live = [i for i, child in enumerate(children) if child is not None]
    closed = [i for i, child in enumerate(children) if child is None]
    width = model.n_inputs
    if not live:
        return SplitBatch([], None, np.zeros((0, width)), np.zeros((0, width)), closed)
    members = [nodes[i] for i in live]
    starts = np.array([node.split[0] + 1 for node in members])
    known = stack([children[i] for i in live], int(starts.min()))
    phases = [np.stack([node.phases[k] for node in members]) for k in range(len(model.layers))]
    xl = np.stack([model.input_reals(node.lo) for node in members])
    xu = np.stack([model.input_reals(node.hi) for node in members])
    words = None
    if model.is_fixed:
        words = (np.stack([node.lo for node in members]), np.stack([node.hi for node in members]))
    bounds = layer_bounds(
        model, xl, xu, phases, known, 0, known.pre_lo, known.pre_hi, invariants, words, starts, rebound
    )
    full = np.flatnonzero(~bounds.empty)
    closed += [live[b] for b in np.flatnonzero(bounds.empty)]
    if len(full) < len(live):
        bounds, xl, xu = bounds.select(full), xl[full], xu[full]
    return SplitBatch([live[b] for b in full], bounds if len(full) else None, xl, xu, sorted(closed))


def stack(nodes: list[Bounds], start: int) -> Bounds:
    """One-node bounds stacked into a batch (arrays (B, n_k)); the product-rounding tables of the
    layers before `start` that every node has (its parent's: their inputs did not change)."""
    layers = range(len(nodes[0].pre_lo))

    def stacked(part: str) -> list[np.ndarray]:
        return [np.stack([getattr(node, part)[k] for node in nodes]) for k in layers]

    operands: dict[int, BoxTables | None] = {}
    for k in range(start):
        if all(k in node.operands for node in nodes):
            tables = tuple(node.operands[k] for node in nodes)
            operands[k] = None if all(t is None for t in tables) else BoxTables(tables)  # type: ignore[arg-type]
    return Bounds(
        stacked("pre_lo"),
        stacked("pre_hi"),
        stacked("free"),
        stacked("err_lo"),
        stacked("err_hi"),
        np.array([bool(node.overflow_possible) for node in nodes]),
        {},
        {},
        np.zeros(len(nodes), dtype=bool),
        operands,
        True,
    )


def warm_start(
    model: NetModel, bounds: Bounds, given: list[dict[int, np.ndarray] | None], rows: np.ndarray, alphas: bool
) -> dict[int, np.ndarray]:
    """The batch's starting lower slopes (`alphas`) or bound multipliers per layer ((B, R, n_k)):
    each node's own (its parent's optimised ones, rows `rows`) where it has them, else what
    `beta.optimise_output_bounds` starts one node from (DeepPoly's slopes; zero multipliers)."""
    last = len(model.layers) - 1
    start = {}
    for k in range(last):
        layer = model.layers[k]
        if not layer.relu or (alphas and not bounds.unstable(model, k).any()):
            continue
        if alphas:
            lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
            values = np.repeat(np.where(hi >= -lo, 1.0, 0.0)[:, None, :], len(rows), axis=1)
        else:
            values = np.zeros((len(given), len(rows), layer.n_out))
        for b, parameters in enumerate(given):
            if parameters is not None and k in parameters:
                values[b] = parameters[k][rows]
        start[k] = values
    return start
