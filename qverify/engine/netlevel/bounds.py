"""Network level: sound bounds by back-substitution over the whole network (DeepPoly / CROWN), in float64
numpy: one core for one node and for a batch of nodes.

A linear bound is carried as an exact inequality `target >= lam . v + const` whose coefficients
`lam` are the float64 numbers actually stored; every step that computes new coefficients or
constants in float64 charges its rounding error, bounded a priori, to a non-negative `slack` that is
subtracted at the end:
- lam W (any summation order, BLAS included): |error| <= gamma_n |lam| |W| elementwise, charged
  as gamma_n |lam| (|W| max|h|), one matrix-vector product (`operations.LinearOperation.magnitude`);
- elementwise products (activation slopes): one rounding, u |lam'| max|z|;
- the dot products that build the constant: gamma_n times the dot product of the magnitudes.
Activations are relaxed as exact inequalities on the stored floats, a z + c <= h <= s z + t
(`activations`: the ReLU triangle with c = 0, int8's requantization staircases); the constants'
rounding is charged as gamma_n of their magnitudes.

The arithmetic's rounding enters through `NetModel.error_terms` (the statement z = W h + b + e per
neuron, e in an interval); neurons without that statement (possible overflow) are free values in
their interval, from the implementation's own interval analysis (`qverify.quant.intervals`), and
the back-substitution reads them through their interval.
Each layer's bounds are the intersection of interval propagation, back-substitution, the parent
node's bounds (valid on a superset), the harness's invariants and the node's ReLU phase constraints.

Batches. At ACAS Xu size (6 layers of 50 ReLUs) one node's back-substitution is dozens of numpy
calls on 50x50 matrices: Python's overhead per call, not arithmetic, is the cost. Input splitting
makes nodes that differ only in their box, so B nodes share every call: every array of a node may
carry a leading batch axis (bounds, relaxations and error terms (B, n_k); rows lam (B, R, n)). The
soundness accounting is the same per box: every float64 product is charged gamma_n of its
magnitudes, which holds for any summation order, so a batched (BLAS) product is covered by the same
term. One code serves both: `layer_bounds` is the one loop over layers, `backsubstitute` /
`optimised_bound` the one substitution, each written over `...` leading axes (one node: none, a
batch: one; a node's own arrays skip the batch axis only because numpy's 2-D products cost less
per call than 3-D ones of a batch of one). ReLU splitting batches its nodes too (`batch`: each box
with its own phases, parent bounds and start layer, `layer_bounds`' `starts`; fixed point with
each box's own product-rounding tables, `operand_rounding.BoxTables`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from qverify.engine.netlevel import operand_rounding
from qverify.engine.netlevel.activations import Relaxation, relu_lower_slopes, scatter
from qverify.engine.netlevel.model import NetLayer, NetModel
from qverify.engine.netlevel.operand_rounding import BoxTables, RoundingTable, SpanReader, StreamedInput
from qverify.engine.netlevel.roundoff import TINY, U64, gamma
from qverify.engine.netlevel.staircase import SidesOn
from qverify.network import NETWORK_INPUT
from qverify.quant import LayerBounds
from qverify.quant.intervals import node_interval

REFINE_CHUNK_VALUES = 1 << 23  # one node's back-substitution rows x width at once (64 MB of float64)
# `tighten_intermediate`: rows x the neurons below them optimised at once (each row has its own
# slopes: a staircase layer's lines are six such arrays). digits28-avgpool int8's root had 4,000+
# rows over 12,000+ staircase neurons at once and passed the engine's 4 GB (3 of 32 instances)
INTERMEDIATE_CHUNK_VALUES = 1 << 22
STAIR_SLOPE_RANGE = 2.0  # a staircase's optimised slopes, in units of `Staircase.slope_scale`
# `optimised_bound`'s sign steps: a ReLU's alpha in [0, 1] from 0.5, a staircase's slope (in units of
# its slope scale) from 0.1, each step 0.7 and 0.85 of the last. A staircase's best slope is within a
# tenth or two of its nominal one (the line through its steps); steps of half a unit moved every line
# so far off that no step of six improved on DeepPoly's (digits32rgb-conv img07 eps 0.03 int8, the
# root's worst atom: -1.12 with six steps as before, -0.84 with these; img02 eps 0.04 after 20 steps
# -3.11 -> -2.15; digits28-avgpool img06 eps 0.08 -0.19 -> -0.06), while the ReLUs' alphas need the
# large first steps (digits784x4 <16,16> with the staircases' schedule for them: -5.29 -> -6.67)
ALPHA_STEP, ALPHA_STEP_DECAY = 0.5, 0.7
STAIR_STEP, STAIR_STEP_DECAY = 0.1, 0.85


class Undecidable(Exception):
    """The bounds cannot be made sound here (e.g. an IEEE overflow is possible): give up."""


@dataclass(slots=True, eq=False)
class Bounds:
    """Every layer's bounds, real units: pre-activation bounds, free neurons, error terms; of one
    node (arrays (n_k,)) or of a batch of nodes ((B, n_k), `box` gives one). `empty`: which boxes
    hold no execution (batches; `node_bounds` returns None instead). The relaxations and the
    statements' constants are computed once per layer, when first needed."""

    pre_lo: list[np.ndarray]
    pre_hi: list[np.ndarray]
    free: list[np.ndarray]
    err_lo: list[np.ndarray]
    err_hi: list[np.ndarray]
    overflow_possible: np.ndarray  # under `--overflow detect`: a possible overflow (per box)
    relaxations: dict[int, Relaxation] = dataclasses.field(default_factory=dict)
    affine: dict[int, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)
    empty: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((), dtype=bool))
    # one node, fixed point: per layer its products' roundings per operand (`operand_rounding`; None:
    # the statement's interval), and the statement's terms without its error term
    operands: dict[int, RoundingTable | BoxTables | None] = dataclasses.field(default_factory=dict)
    # a batch whose boxes read product roundings per operand as one node does (ReLU-split nodes
    # bounded together, `batch.split_batch_bounds`; input splitting's batches do not)
    box_tables: bool = False

    def relaxation(self, model: NetModel, index: int) -> Relaxation:
        """Layer `index`'s activation relaxation on its bounds (DeepPoly's slopes; cached)."""
        cached = self.relaxations.get(index)
        if cached is None:
            cached = model.layers[index].activation.relaxation(self.pre_lo[index], self.pre_hi[index])
            self.relaxations[index] = cached
        return cached

    def bias_terms(
        self, model: NetModel, j: int, xl: np.ndarray, xu: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`affine_terms` without the error term (the caller bounds lam . e itself): (b, the
        charge of b's and lam W's float64 rounding)."""
        h_lo, h_hi = self.inputs(model, j, xl, xu)
        zero = np.zeros(np.shape(self.err_lo[j]))
        return affine_charge(model.layers[j], zero, zero, h_lo, h_hi)

    def affine_terms(
        self, model: NetModel, j: int, xl: np.ndarray, xu: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(center, charge) of layer j's statement z = W h + b + e for back-substitution:
        lam . (b + e) >= lam . center - |lam| . (radius of e), and `charge` also covers the float64
        rounding of center, of lam @ center and of lam W (gamma |lam| (|W| max|h|)), so that
        lam . z >= (lam W) . h + lam . center - |lam| . charge holds for the stored floats."""
        cached = self.affine.get(j)
        if cached is None:
            h_lo, h_hi = self.inputs(model, j, xl, xu)
            cached = affine_charge(model.layers[j], self.err_lo[j], self.err_hi[j], h_lo, h_hi)
            self.affine[j] = cached
        return cached

    def operand_table(self, model: NetModel, j: int, xl: np.ndarray, xu: np.ndarray) -> RoundingTable | None:
        """Layer j's product roundings per operand on this node (`operand_rounding`), or None where
        that does not apply (input splitting's batches, floats, wide sums, pools, too wide
        operands); a batch with `box_tables`: each box's (`BoxTables`, None when no box has one)."""
        if j in self.operands:
            return self.operands[j]
        table = None
        if (xl.ndim == 1 or self.box_tables) and operand_rounding.applies(model, j):
            h_lo, h_hi = self.inputs(model, j, xl, xu)
            if xl.ndim == 1:
                table = operand_rounding.rounding_table(model, j, h_lo, h_hi)
            else:  # a batch of ReLU-split nodes: each box's own table (`operand_rounding.BoxTables`)
                table = BoxTables.of(model, j, h_lo, h_hi)
        self.operands[j] = table
        return table

    def post(self, model: NetModel, index: int) -> tuple[np.ndarray, np.ndarray]:
        return model.layers[index].post_bounds(self.pre_lo[index], self.pre_hi[index])

    def inputs(self, model: NetModel, index: int, xl: np.ndarray, xu: np.ndarray):
        """Bounds of node `index`'s input: its producers' post-activation bounds (the box for the
        network's input) joined in order."""
        producers = model.producers(index)
        if len(producers) == 1:
            p = producers[0]
            return (xl, xu) if p < 0 else self.post(model, p)
        pairs = [(xl, xu) if p < 0 else self.post(model, p) for p in producers]
        return np.concatenate([lo for lo, _ in pairs], axis=-1), np.concatenate(
            [hi for _, hi in pairs], axis=-1
        )

    def unstable(self, model: NetModel, index: int) -> np.ndarray:
        if not model.layers[index].relu:
            return np.zeros(np.shape(self.pre_lo[index]), dtype=bool)
        return (self.pre_lo[index] < 0) & (self.pre_hi[index] > 0)

    def prepare(self, model: NetModel, below: int, xl: np.ndarray, xu: np.ndarray) -> None:
        """Compute the caches a back-substitution from layer `below` reads (relaxations, the
        statements' terms or product-rounding tables of layers 0..below), so that `select`'s
        batches share them."""
        for j in range(below + 1):
            if j < below and model.layers[j].relaxed:
                self.relaxation(model, j)
            fixed = model.is_fixed and not model.real
            if not fixed or self.operand_table(model, j, xl, xu) is None:
                self.affine_terms(model, j, xl, xu)

    def select(self, boxes: np.ndarray) -> Bounds:
        """The boxes `boxes` of a batch, as a batch (the caches carried over)."""
        operands = {
            k: None if v is None else BoxTables(tuple(v.tables[b] for b in boxes))
            for k, v in self.operands.items()
        }
        return self._indexed(boxes, operands, self.box_tables)

    def box(self, b: int) -> Bounds:
        """Box b of a batch as one node's record (caches carried over as views)."""
        operands = (
            {k: None if v is None else v.tables[b] for k, v in self.operands.items()}
            if self.box_tables
            else {}
        )
        return self._indexed(b, operands, False)

    def _indexed(self, index, operands: dict, box_tables: bool) -> Bounds:
        """`select` and `box`: every per-box array indexed by `index` (boxes, or one box)."""
        return Bounds(
            [a[index] for a in self.pre_lo],
            [a[index] for a in self.pre_hi],
            [a[index] for a in self.free],
            [a[index] for a in self.err_lo],
            [a[index] for a in self.err_hi],
            self.overflow_possible[index],
            {k: value.select(index) for k, value in self.relaxations.items()},
            {k: (center[index], charge[index]) for k, (center, charge) in self.affine.items()},
            self.empty[index],
            operands,
            box_tables,
        )


def affine_charge(
    layer: NetLayer, err_lo: np.ndarray, err_hi: np.ndarray, h_lo: np.ndarray, h_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(center, charge) of `Bounds.affine_terms` from the layer's error terms and input bounds
    (elementwise: the arrays may carry a leading batch axis, one row per box)."""
    middle = (err_lo + err_hi) / 2
    center = layer.bias + middle
    h_max = np.maximum(np.abs(h_lo), np.abs(h_hi))
    magnitude = (
        np.abs(center)
        + np.abs(layer.bias)
        + np.maximum(np.abs(err_lo), np.abs(err_hi))
        + layer.op.magnitude(h_max)
    )
    charge = (err_hi - err_lo) / 2 * (1 + 4 * U64) + 4 * U64 * (np.abs(center) + np.abs(middle))
    products = 0.0 if layer.op.exact else gamma(layer.op.backward_terms + 3)  # lam W = lam exactly
    charge = (charge + products * magnitude) * (1 + 1e-9) + TINY
    return center, charge


def interval_error(lam: np.ndarray, err_lo: np.ndarray, err_hi: np.ndarray) -> np.ndarray:
    """A sound lower bound of lam . e per row over e in [err_lo, err_hi] (one node's arrays, or a
    batch's: lam (B, R, n), the intervals (B, n); the float64 sum's rounding charged)."""
    err_lo, err_hi = err_lo[..., None, :], err_hi[..., None, :]  # (per box: one row per box)
    terms = np.minimum(lam * err_lo, lam * err_hi)
    return terms.sum(axis=-1) * (1 + gamma(lam.shape[-1] + 2)) - TINY


def matvec(lam: np.ndarray, v: np.ndarray) -> np.ndarray:
    """lam @ v row by row: (..., R, n) @ (n,) -> (..., R), or per box (B, R, n) @ (B, n) -> (B, R)."""
    if v.ndim == 1:
        return lam @ v
    return (lam @ v[..., None])[..., 0]


@dataclass(slots=True, eq=False)
class BoundTerms:
    """The node's own bounds on hidden pre-activation values, z_j in [lo_j, hi_j], as Lagrangian
    terms of a back-substitution (the dual of the LP that has them as constraints). On the node,
    nu z <= nu+ hi - nu- lo for any nu (nu+ = max(nu, 0), nu- = max(-nu, 0)), so

        lam . z >= (lam + nu) . z - (nu+ . hi - nu- . lo):

    part of the coefficient on z is read through the bounds rather than substituted further down,
    where the relaxations below may be looser. A fixed ReLU phase is such a bound (active: lo >= 0,
    inactive: hi <= 0, settled into the node's bounds), so these terms are beta-CROWN's split
    constraints (beta = nu- on an active neuron, nu+ on an inactive one) and generalise them to
    every neuron: the relaxed network's value of a neuron can leave its bounds, and then a
    multiplier pays. Per layer `nus[k]` (rows, n_k), zero on free neurons (read through their
    interval anyway) and where nothing was chosen (then the terms change nothing, exactly)."""

    nus: dict[int, np.ndarray]

    @staticmethod
    def of(
        layers: list[int],
        rows: int,
        widths: list[int],
        start: dict[int, np.ndarray] | None = None,
        batch: tuple[int, ...] = (),
    ) -> BoundTerms:
        """Zero multipliers for `layers` (or `start`'s where it has them: a parent's); `batch`: the
        leading axes of a batch of nodes."""
        nus = {}
        for k in layers:
            given = None if start is None else start.get(k)
            shape = (*batch, rows, widths[k])
            nus[k] = np.zeros(shape) if given is None else np.array(given, dtype=np.float64)
        return BoundTerms(nus)

    def add(self, bounds: Bounds, j: int, lam, const, slack):
        """(lam + nu, const - (nu+ . hi - nu- . lo), slack): the float64 rounding of the new
        coefficients (one addition each: |lam' - (lam + nu)| <= u/(1-u) |lam'|, charged as
        2u |lam'| max |z|) and of the constant (gamma_n of its magnitudes) charged. (Elementwise,
        so that bounds and multipliers may carry a leading batch axis.)"""
        nu = np.where(bounds.free[j][..., None, :], 0.0, self.nus[j])
        moved = nu != 0
        if not moved.any():
            return lam, const, slack
        lo, hi = bounds.pre_lo[j][..., None, :], bounds.pre_hi[j][..., None, :]
        up, down = np.maximum(nu, 0.0), np.maximum(-nu, 0.0)
        value = (up * hi - down * lo).sum(axis=-1)
        magnitude = (up * np.abs(hi) + down * np.abs(lo)).sum(axis=-1)
        const = const - value - gamma(lo.shape[-1] + 2) * magnitude
        lam = lam + nu
        z_max = np.maximum(np.abs(lo), np.abs(hi))
        slack = slack + 2 * U64 * (np.where(moved, np.abs(lam), 0.0) * z_max).sum(axis=-1) + TINY
        return lam, const, slack


@dataclass(slots=True, eq=False)
class LinearBound:
    """lower[r] <= C[r] . (layer k's values) for every row r, and how the bound reads the input:
    the input coefficients `lam_input` and per hidden layer the coefficients on its post-activation
    values (for branching scores), when asked for. Per box with a leading batch axis: lower (B, R),
    lam_input (B, R, n), lam_post k -> (B, R, n_k), offset (B, R)."""

    lower: np.ndarray
    lam_input: np.ndarray
    lam_post: dict[int, np.ndarray]
    offset: np.ndarray  # C[r] . v >= lam_input[r] . x + offset[r] for every x of the node's box
    # (`input_statement`) the rows' coefficients on the input layer's statement and the interval
    # term its roundings added to `offset`: `exact_input_lower` reads them exactly instead
    input_rows: np.ndarray | None = None
    input_term: np.ndarray | None = None


def relaxed_constant(positive, negative, c, t):
    """positive @ c + negative @ t pushed down past its float64 rounding (gamma_n of the
    magnitudes; for a ReLU, c = 0 and t >= 0, this is (negative @ t) (1 + gamma)); per box with
    a leading batch axis, or per row (c, t shaped like the coefficients: `RowRelaxation`)."""
    n = c.shape[-1]
    if c.ndim == positive.ndim:  # one line per row
        value = (positive * c).sum(axis=-1) + (negative * t).sum(axis=-1)
        magnitude = (positive * np.abs(c)).sum(axis=-1) - (negative * np.abs(t)).sum(axis=-1)
        return value - gamma(n + 2) * magnitude
    value = matvec(positive, c) + matvec(negative, t)
    magnitude = matvec(positive, np.abs(c)) - matvec(negative, np.abs(t))
    return value - gamma(n + 2) * magnitude


class RowRelaxation(NamedTuple):
    """A staircase layer's relaxation per row of a back-substitution (alpha-CROWN's slopes for
    staircases, `stair_relaxation`): a z + c <= value(z) <= s z + t with every array (..., R, n);
    zeta and xi the points where the steps deviate least from the lower line and most from the
    upper one (d c / d a = -zeta, d t / d s = -xi: the gradient), `scale` (..., n) the slopes' unit."""

    a: np.ndarray
    c: np.ndarray
    s: np.ndarray
    t: np.ndarray
    zeta: np.ndarray
    xi: np.ndarray
    scale: np.ndarray


def stair_layers(model: NetModel, bounds: Bounds, below: int) -> list[int]:
    """The staircase layers (int8 requantizations, lookup tables) with open neurons among layers
    0..below-1: those whose slopes alpha-CROWN can optimise (one node's bounds only)."""
    return [
        k
        for k in range(below)
        if model.layers[k].stairs is not None
        and np.ndim(bounds.pre_lo[k]) == 1
        and model.layers[k].open_neurons(bounds.pre_lo[k], bounds.pre_hi[k]).any()
    ]


def stair_start(model: NetModel, bounds: Bounds, k: int, rows: int) -> np.ndarray:
    """The staircase layer k's slopes per row as `stair_relaxation`'s parameters (rows, 2 n): the
    node's own relaxation's slopes (`Staircase.relaxation`: the best of a few candidates) in units
    of `Staircase.slope_scale`, lower slopes first."""
    lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
    relaxation = bounds.relaxation(model, k)
    scale = model.layers[k].stairs.slope_scale(lo, hi)  # type: ignore[union-attr]
    unit = np.where(scale > 0, scale, 1.0)
    start = np.concatenate([relaxation.a / unit, relaxation.s / unit])
    return np.repeat(np.clip(start, 0.0, STAIR_SLOPE_RANGE)[None, :], rows, axis=0)


class StairSetup(NamedTuple):
    """What `stair_relaxation` reads of a staircase layer on one node whatever the slopes: the
    node's relaxation (kept where a neuron is not open), the open neurons, the slopes' unit per
    neuron and the open neurons' staircases on their intervals (`Staircase.on`)."""

    base: Relaxation
    opened: np.ndarray
    scale: np.ndarray
    lines: SidesOn | None


def stair_setup(model: NetModel, bounds: Bounds, k: int) -> StairSetup:
    """Layer k's `StairSetup` on the node `bounds`: found once for an optimisation's steps."""
    layer = model.layers[k]
    stairs = layer.stairs
    assert stairs is not None
    lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
    n = layer.n_out
    scale = np.zeros(n)
    opened = np.flatnonzero(layer.open_neurons(lo, hi))
    lines = None
    if len(opened):
        part = stairs._neurons(opened, n) if stairs.thresholds is not None else stairs
        scale[opened] = part.slope_scale(lo[opened], hi[opened])
        lines = part.on(lo[opened], hi[opened])
    return StairSetup(bounds.relaxation(model, k), opened, scale, lines)


def stair_relaxation(
    model: NetModel, bounds: Bounds, k: int, rho: np.ndarray, setup: StairSetup | None = None
) -> RowRelaxation:
    """Layer k's staircase relaxation per row for the parameters rho (rows, 2 n): slopes rho x
    `slope_scale` (clipped to [0, STAIR_SLOPE_RANGE] units), their intercepts exact for those
    slopes (`Staircase.sides`: sound whatever the slopes); neurons that are not open keep the
    node's relaxation (exact there). `setup`: the layer's `stair_setup` on this node, when the
    caller holds it."""
    setup = setup or stair_setup(model, bounds, k)
    n = model.layers[k].n_out
    rho = np.clip(rho, 0.0, STAIR_SLOPE_RANGE)
    base, opened = setup.base, setup.opened
    rows = rho.shape[0]
    a, c = np.repeat(base.a[None, :], rows, 0), np.repeat(base.c[None, :], rows, 0)
    s, t = np.repeat(base.s[None, :], rows, 0), np.repeat(base.t[None, :], rows, 0)
    zeta, xi = np.zeros((rows, n)), np.zeros((rows, n))
    if setup.lines is not None:
        part_scale = setup.scale[opened]
        lower = rho[:, opened] * part_scale
        upper = rho[:, n + opened] * part_scale
        found = setup.lines.sides(lower, upper)
        a[:, opened], s[:, opened] = lower, upper
        c[:, opened], t[:, opened], zeta[:, opened], xi[:, opened] = found
    return RowRelaxation(a, c, s, t, zeta, xi, setup.scale)


def backsubstitute(
    model: NetModel,
    bounds: Bounds,
    coefficients: np.ndarray,
    index: int,
    post: bool,
    xl: np.ndarray,
    xu: np.ndarray,
    alphas: dict[int, np.ndarray] | None = None,
    keep: bool = False,
    terms: BoundTerms | None = None,
    statements: dict[int, np.ndarray] | None = None,
    input_statement: bool = False,
) -> LinearBound:
    """Sound lower bounds of coefficients @ v over the node, v layer `index`'s pre-activation values
    (or post-activation with `post`), by substitution down to the input box [xl, xu]. A batch: xl
    (B, n), coefficients (R, n_k) shared or (B, R, n_k) per box; `alphas` (lower ReLU slopes per
    row: (R, n_j), or (B, R, n_j)) replace DeepPoly's. `terms`: the node's bounds (and so its fixed
    ReLU phases) as Lagrangian terms (`BoundTerms`, beta-CROWN), at every layer kind.

    The walk follows the wiring backwards (auto_LiRPA's order on a general graph): node j's
    coefficients go through its statement to its input, which splits into its producers' parts;
    a node read by several consumers collects the sum of their parts before its own turn (every
    consumer comes after it), each float64 addition's rounding charged as the others are.

    `statements` (measurement, `benchmarks/rounding_charge.py`): filled per layer j with the rows'
    coefficients on its statement z_j = W h + b + e_j ((..., R, n_j)), which its error term is
    charged by.

    `input_statement` (fixed point; one node, or a batch of ReLU-split nodes on one box): where the
    layer that alone reads the input has no operand table (too wide), its roundings are read as
    their interval term and the rows' coefficients on its statement kept with that term
    (`LinearBound.input_rows`), for `exact_input_lower` and `span_input_lower`."""
    lam = np.array(coefficients, dtype=np.float64, ndmin=2)
    if xl.ndim == 2 and lam.ndim == 2:
        lam = np.broadcast_to(lam, (xl.shape[0], *lam.shape))
    const = np.zeros(lam.shape[:-1])
    slack = np.zeros(lam.shape[:-1])
    lam_post: dict[int, np.ndarray] = {}
    pending: dict[int, np.ndarray] = {}  # per node, the coefficients on its post-activation values
    lam_input = None
    joint = None  # the input layer's operand table, its rows' coefficients and their term
    kept_input = None  # (`input_statement`) the input layer's rows and their interval term
    if post:
        pending[index] = lam
    for j in range(index, -1, -1):
        if j != index or post:
            if j not in pending:
                continue  # (not an ancestor of the bounded node)
            lam = pending.pop(j)
            if keep and j != index:
                lam_post[j] = lam
            lam, const, slack = _through_activation(model, bounds, j, lam, const, slack, alphas)
        layer = model.layers[j]
        if terms is not None and j in terms.nus:
            lam, const, slack = terms.add(bounds, j, lam, const, slack)
        free = bounds.free[j]
        if free.any():
            lam, const, slack = _free_terms(bounds, j, lam, const, slack)
        if statements is not None:
            statements[j] = lam
        table = bounds.operand_table(model, j, xl, xu) if model.is_fixed and not model.real else None
        streamed = table is None and input_statement and streams_input(model, j)
        if table is None and not streamed:
            center, charge = bounds.affine_terms(model, j, xl, xu)
            const = const + matvec(lam, center)
        else:  # the error term on its own: per operand (`operand_rounding`) or the interval, the better
            center, charge = bounds.bias_terms(model, j, xl, xu)
            term = interval_error(lam, bounds.err_lo[j], bounds.err_hi[j])
            if table is not None:
                term = np.maximum(table.lower(lam), term)
            const = const + matvec(lam, center) + term
            if streamed:
                kept_input = (lam, term)  # (read exactly by the caller: `exact_input_lower`)
            elif model.producers(j) == (NETWORK_INPUT,) and _input_readers(model) == 1:
                joint = (table, lam, term)  # (read with the input's own coefficients at the end)
        slack = slack + matvec(np.abs(lam), charge)
        lam = layer.op.backward(lam)
        for producer, part in model.split(j, lam):
            if producer < 0:
                if lam_input is None:
                    lam_input = part
                else:
                    lam_input, slack = _accumulate(lam_input, part, slack, np.maximum(np.abs(xl), np.abs(xu)))
            elif producer not in pending:
                pending[producer] = part
            else:
                h_lo, h_hi = bounds.post(model, producer)
                h_max = np.maximum(np.abs(h_lo), np.abs(h_hi))
                pending[producer], slack = _accumulate(pending[producer], part, slack, h_max)
    if lam_input is None:  # (the bounded node does not depend on the input: a constant)
        lam_input = np.zeros((*lam.shape[:-1], xl.shape[-1]))
    offset = const - (slack + 4 * U64 * np.abs(const)) * (1 + 1e-6)  # the additions that built const
    lower = linear_minimum(lam_input, offset, xl, xu)
    if joint is not None:
        # the input layer's roundings and the input's linear part minimised together, word by word
        # (`RoundingTable.joint_lower`): the rest of the bound is offset without that layer's term
        table, lam_first, term = joint
        lower = _with_joint(lower, offset, term, table.joint_lower(lam_first, lam_input, model.unit, xl, xu))
    if kept_input is not None:
        return LinearBound(lower, lam_input, lam_post, offset, *kept_input)
    return LinearBound(lower, lam_input, lam_post, offset)


def input_layer(model: NetModel) -> int | None:
    """The layer that alone reads the network's input, or None (several read it)."""
    if _input_readers(model) != 1:
        return None
    return next(k for k in range(len(model.layers)) if NETWORK_INPUT in model.producers(k))


def streams_input(model: NetModel, j: int) -> bool:
    """Is layer j the one that alone reads the network's input, with product roundings
    `operand_rounding` can read exactly (`backsubstitute(input_statement=True)`: one node, or a
    batch of ReLU-split nodes on one box)?"""
    return (
        model.producers(j) == (NETWORK_INPUT,)
        and _input_readers(model) == 1
        and operand_rounding.applies(model, j)
    )


def exact_input_lower(linear: LinearBound, reader: StreamedInput) -> np.ndarray:
    """`linear`'s bounds with the input layer's roundings read exactly, jointly with the input's
    linear part (`reader`, the node's box: `operand_rounding.StreamedInput`), where
    `backsubstitute` kept that layer's rows (`input_statement`); each row the better of the two
    readings."""
    if linear.input_rows is None:
        return linear.lower
    found = reader.joint_lower(linear.input_rows, linear.lam_input)
    return _with_joint(linear.lower, linear.offset, linear.input_term, found)


def span_input_lower(
    linear: LinearBound,
    reader: SpanReader,
    err_lo: np.ndarray,
    err_hi: np.ndarray,
    chosen: np.ndarray,
    own: np.ndarray,
) -> np.ndarray:
    """A batch's bounds (`linear`: (B, R), kept with `input_statement`) with the rows `chosen` read
    again through `reader` (the input layer's roundings jointly with the input, row r on basis row
    own[r]: `operand_rounding.SpanReader`; err_lo/err_hi the layer's error intervals (B, n)), each
    the better of the two readings."""
    lower = linear.lower.copy()
    boxes, rows = np.nonzero(chosen)
    if len(boxes):
        found = reader.joint_lower(
            linear.input_rows[boxes, rows],
            linear.lam_input[boxes, rows],
            own[rows],
            err_lo[boxes],
            err_hi[boxes],
        )
        lower[boxes, rows] = _with_joint(
            linear.lower[boxes, rows], linear.offset[boxes, rows], linear.input_term[boxes, rows], found
        )
    return lower


def _with_joint(lower: np.ndarray, offset: np.ndarray, term: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Each row's better bound: `lower`, or the input layer's roundings read jointly with the input
    (`found`) in place of the `term` that `offset` holds for them (the float64 subtraction and
    addition charged)."""
    together = offset - term + found
    together = together - 4 * U64 * (np.abs(offset) + np.abs(term) + np.abs(found)) - TINY
    return np.maximum(lower, together)


def _input_readers(model: NetModel) -> int:
    """How many nodes read the network's input (1 in a chain)."""
    return sum(NETWORK_INPUT in producers for producers in model.wiring)


def _accumulate(total: np.ndarray, part: np.ndarray, slack: np.ndarray, v_max: np.ndarray):
    """total + part, coefficients of one tensor from two consumers: the stored sum's rounding (at
    most u |sum| per entry, u/(1-u) |stored|, charged as 2u |stored| max |v|) added to the slack."""
    added = total + part
    return added, slack + 2 * U64 * matvec(np.abs(added), v_max) + TINY


def _free_terms(bounds: Bounds, j: int, lam, const, slack):
    """Neurons of layer j without the linear statement (possible overflow): lam . z over them is
    bounded by their interval, and their coefficients leave the substitution."""
    free = bounds.free[j][..., None, :]
    part = np.where(free, lam, 0.0)
    lo, hi = bounds.pre_lo[j][..., None, :], bounds.pre_hi[j][..., None, :]
    const = const + np.minimum(part * lo, part * hi).sum(axis=-1)
    count = int(bounds.free[j].sum(axis=-1).max())
    magnitude = np.maximum(np.abs(bounds.pre_lo[j]), np.abs(bounds.pre_hi[j]))
    slack = slack + gamma(count + 2) * matvec(np.abs(part), magnitude) + TINY
    return np.where(free, 0.0, lam), const, slack


def linear_minimum(lam: np.ndarray, offset: np.ndarray, xl: np.ndarray, xu: np.ndarray) -> np.ndarray:
    """Sound lower bounds of lam[r] . x + offset[r] over the box [xl, xu] (float64 error charged;
    with a leading batch axis on every argument, per box)."""
    positive, negative = np.maximum(lam, 0.0), np.minimum(lam, 0.0)
    value = matvec(positive, xl) + matvec(negative, xu) + offset
    x_max = np.maximum(np.abs(xl), np.abs(xu))
    slack = gamma(xl.shape[-1] + 3) * (matvec(np.abs(lam), x_max) + np.abs(offset)) + TINY
    return value - slack


def _through_activation(model: NetModel, bounds: Bounds, j: int, lam, const, slack, alphas):
    """Replace lam . h_j by a lower bound in z_j: the lower side of layer j's relaxation for
    positive coefficients, the upper side for negative ones (slopes and intercepts of box b apply
    to lam[b]; `alphas[j]`: lower ReLU slopes per row)."""
    layer = model.layers[j]
    if not layer.relaxed:
        return lam, const, slack
    relaxation = bounds.relaxation(model, j)
    override = None if alphas is None else alphas.get(j)
    if isinstance(override, RowRelaxation):  # a staircase's optimised lines, per row
        positive, negative = np.maximum(lam, 0.0), np.minimum(lam, 0.0)
        const = const + relaxed_constant(positive, negative, override.c, override.t)
        lam = positive * override.a + negative * override.s
        slack = slack + 2 * U64 * matvec(np.abs(lam), relaxation.z_max) + TINY
        return lam, const, slack
    a = relaxation.a[..., None, :]
    alpha = None if alphas is None or not layer.relu else alphas.get(j)
    if alpha is not None:
        a = relu_lower_slopes(bounds.pre_lo[j][..., None, :], bounds.pre_hi[j][..., None, :], a, alpha)
    positive, negative = np.maximum(lam, 0.0), np.minimum(lam, 0.0)
    const = const + relaxed_constant(positive, negative, relaxation.c, relaxation.t)
    if relaxation.lower_index is None:
        lam = positive * a + negative * relaxation.s[..., None, :]
        slack = slack + 2 * U64 * matvec(np.abs(lam), relaxation.z_max) + TINY
        return lam, const, slack
    # a pool: each side reads one input per output; the coefficients of an input shared by several
    # terms (overlapping windows, both sides) are sums, charged gamma_n of their magnitudes
    lower, upper = positive * a, negative * relaxation.s[..., None, :]
    reach = matvec(np.abs(lower), _gather(relaxation.z_max, relaxation.lower_index))
    reach = reach + matvec(np.abs(upper), _gather(relaxation.z_max, relaxation.upper_index))
    slack = slack + (2 * U64 + gamma(relaxation.sharing)) * reach + TINY
    n = relaxation.z_max.shape[-1]
    lam = scatter(lower, relaxation.lower_index, n) + scatter(upper, relaxation.upper_index, n)
    return lam, const, slack


def _gather(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values[..., index[..., o]] per box (values (..., n), index (..., n_out))."""
    return np.take_along_axis(values, index, axis=-1)


def interval_layer(model, index, h_lo, h_hi, err_lo, err_hi):
    """Interval propagation through layer `index` (per box with a leading batch axis)."""
    layer = model.layers[index]
    lo, hi = layer.op.interval(h_lo, h_hi)
    if layer.op.exact:  # z = h (bias and error terms are zero)
        return lo, hi
    lo = lo + layer.bias + err_lo
    hi = hi + layer.bias + err_hi
    h_max = np.maximum(np.abs(h_lo), np.abs(h_hi))
    margin = (
        gamma(layer.op.forward_terms + 3)
        * (layer.op.magnitude(h_max) + np.abs(layer.bias) + np.maximum(np.abs(err_lo), np.abs(err_hi)))
        + TINY
    )
    return lo - margin, hi + margin


def _free_interval(model: NetModel, index: int, h_lo: np.ndarray, h_hi: np.ndarray, region_words):
    """The C's own interval bounds of layer `index` (words -> real units) for neurons that may
    overflow, and which of them may (fixed point only; one box)."""
    qnet = model.qnet
    fmt = qnet.number
    if model.producers(index) == (-1,) and region_words is not None:
        lo_w, hi_w = region_words
    else:
        lo_w = np.clip(np.ceil(h_lo / model.unit), fmt.min_q, fmt.max_q).astype(np.int64)
        hi_w = np.clip(np.floor(h_hi / model.unit), fmt.min_q, fmt.max_q).astype(np.int64)
        hi_w = np.maximum(hi_w, lo_w)
    layer_bounds: LayerBounds = node_interval(qnet, qnet.layers[index], lo_w, hi_w)
    return (
        layer_bounds.pre_lo.astype(np.float64) * model.unit,
        layer_bounds.pre_hi.astype(np.float64) * model.unit,
        layer_bounds.may_overflow,
    )


def layer_bounds(
    model: NetModel,
    xl: np.ndarray,
    xu: np.ndarray,
    phases: list[np.ndarray] | None = None,
    known: Bounds | None = None,
    start: int = 0,
    parent_lo: list[np.ndarray] | None = None,
    parent_hi: list[np.ndarray] | None = None,
    invariants: tuple[LayerBounds, ...] | None = None,
    region_words: tuple[np.ndarray, np.ndarray] | None = None,
    starts: np.ndarray | None = None,
    rebound: bool = True,
) -> Bounds:
    """Every layer's bounds over one node (input box [xl, xu] in reals, (n,)) or B nodes ((B, n)),
    with ReLU phases per layer ((n_k,) or (B, n_k): +1 active, -1 inactive, 0 open), intersected
    with the parents' bounds (parent_lo[k], parent_hi[k]: valid on a superset; +-inf for none).
    Layers before `start` are `known`'s (their constraints did not change). `region_words`: the
    box in words (fixed point: the first layer's free neurons read it). Boxes that hold no
    execution are marked in `empty`; the loop stops early once every box is. `starts` (a batch
    with `known`, (B,)): box b's own start (ReLU-split nodes bounded together: each keeps `known`'s
    layers before its own, which are not re-bounded). `rebound` False: no back-substitution of the
    layers' own bounds (interval propagation intersected with the parents' bounds only)."""
    n_layers = len(model.layers)
    batch = xl.shape[:-1]  # () for one node
    if known is not None and starts is not None:
        start = int(starts.min())
    if known is not None and start > 0:
        bounds = Bounds(
            known.pre_lo[:start],
            known.pre_hi[:start],
            known.free[:start],
            known.err_lo[:start],
            known.err_hi[:start],
            np.zeros(batch, dtype=bool),
            {k: v for k, v in known.relaxations.items() if k < start},
            {k: v for k, v in known.affine.items() if k < start},
            np.zeros(batch, dtype=bool),
            {k: v for k, v in known.operands.items() if k < start},
            known.box_tables,
        )
    else:
        start = 0
        bounds = Bounds([], [], [], [], [], np.zeros(batch, dtype=bool), empty=np.zeros(batch, dtype=bool))
    for k in range(start, n_layers):
        layer = model.layers[k]
        shape = (*batch, layer.n_out)
        h_lo, h_hi = bounds.inputs(model, k, xl, xu)
        h_max = np.maximum(np.abs(h_lo), np.abs(h_hi))
        err_lo, err_hi, related = model.error_terms(k, h_max)
        free = ~related
        if free.any():
            if not model.is_fixed:
                raise Undecidable(f"netlevel: float overflow possible in layer {k + 1}")
            free = np.broadcast_to(free, shape)
            err_lo, err_hi = np.where(free, 0.0, err_lo), np.where(free, 0.0, err_hi)
        lo, hi = interval_layer(model, k, h_lo, h_hi, err_lo, err_hi)
        if free.any():
            lo, hi, free, err_lo, err_hi = _free_neurons(
                model, k, h_lo, h_hi, h_max, lo, hi, free, err_lo, err_hi, region_words
            )
        bounds.pre_lo.append(lo)
        bounds.pre_hi.append(hi)
        bounds.free.append(free)
        bounds.err_lo.append(err_lo)
        bounds.err_hi.append(err_hi)
        if parent_lo is not None and parent_hi is not None and k < len(parent_lo):
            lo, hi = np.maximum(lo, parent_lo[k]), np.minimum(hi, parent_hi[k])
        phase = None if phases is None or k >= len(phases) else phases[k]
        kept = None if starts is None else (starts > k)[:, None]  # boxes whose layer k is `known`'s
        first = model.reads_input_only(k)
        if (
            rebound
            and not first
            and layer.relaxed
            and not layer.op.exact
            and (k < n_layers - 1 or layer.stairs is not None)
        ):
            bounds.pre_lo[k], bounds.pre_hi[k] = lo, hi
            refine = layer.open_neurons(lo, hi) & ~free
            if phase is not None:
                refine &= phase == 0
            if kept is not None:
                refine &= ~kept
            lo, hi = _refine(model, bounds, k, lo, hi, refine, xl, xu)
        if invariants is not None and not model.real and not layer.op.exact:  # (a pool's bound its outputs)
            scale = model.unit if model.is_fixed else 1.0
            lo = np.maximum(lo, invariants[k].pre_lo.astype(np.float64) * scale)
            hi = np.minimum(hi, invariants[k].pre_hi.astype(np.float64) * scale)
        lo, hi = settle(model, k, lo, hi, phase)
        if kept is not None and kept.any():
            lo, hi = np.where(kept, known.pre_lo[k], lo), np.where(kept, known.pre_hi[k], hi)
            bounds.free[k] = np.where(kept, known.free[k], bounds.free[k])
            bounds.err_lo[k] = np.where(kept, known.err_lo[k], bounds.err_lo[k])
            bounds.err_hi[k] = np.where(kept, known.err_hi[k], bounds.err_hi[k])
        bounds.empty |= np.any(lo > hi, axis=-1)
        bounds.pre_lo[k], bounds.pre_hi[k] = lo, hi
        if bounds.empty.all():
            break
    # under `--overflow detect` a possible overflow is itself a possible violation
    if model.detect:
        bounds.overflow_possible = np.any([free.any(axis=-1) for free in bounds.free], axis=0)
    return bounds


def _free_neurons(model, k, h_lo, h_hi, h_max, lo, hi, free, err_lo, err_hi, region_words):
    """Fixed point, neurons whose sums may leave the word range: the C's own interval per box
    (`_free_interval`); those it shows cannot overflow keep the linear statement after all
    (cancellations), with their rounding terms. One node's arrays or a batch's."""
    shape = lo.shape
    lo, hi = lo.copy().reshape(-1, shape[-1]), hi.copy().reshape(-1, shape[-1])
    free = np.array(free).reshape(lo.shape)
    err_lo = np.array(np.broadcast_to(err_lo, shape)).reshape(lo.shape)
    err_hi = np.array(np.broadcast_to(err_hi, shape)).reshape(lo.shape)
    h_lo, h_hi = np.reshape(h_lo, (len(lo), -1)), np.reshape(h_hi, (len(lo), -1))
    h_max = np.reshape(h_max, (len(lo), -1))
    words = None if region_words is None else [np.reshape(w, (len(lo), -1)) for w in region_words]
    for b in np.flatnonzero(free.any(axis=1)):
        box_words = None if words is None else (words[0][b], words[1][b])
        free_lo, free_hi, may_overflow = _free_interval(model, k, h_lo[b], h_hi[b], box_words)
        lo[b], hi[b] = np.where(free[b], free_lo, lo[b]), np.where(free[b], free_hi, hi[b])
        fix = free[b] & ~may_overflow  # no overflow after all: the statement holds
        free[b] &= may_overflow
        if fix.any():
            count = model.rounding_count(k, h_max[b])
            err_lo[b] = np.where(fix, count * model.round_lo, err_lo[b])
            err_hi[b] = np.where(fix, count * model.round_hi, err_hi[b])
    return tuple(a.reshape(shape) for a in (lo, hi, free, err_lo, err_hi))


def _refine(model, bounds: Bounds, k, lo, hi, refine, xl, xu) -> tuple[np.ndarray, np.ndarray]:
    """Layer k's neurons marked in `refine` re-bounded by back-substitution: each box's own, as rows
    e_j and -e_j (boxes with fewer than the most are padded with zero rows). One node's arrays
    (n_k,) or a batch's (B, n_k)."""
    if refine.ndim == 1:
        lo, hi = lo.copy(), hi.copy()
        # the rows' coefficients (2 rows per neuron, each as wide as a layer below) a block at a
        # time, within REFINE_CHUNK_VALUES (each row's bound is its own: the blocks change nothing)
        widest = max([model.n_inputs, *(layer.n_post for layer in model.layers[:k])])
        block = max(1, REFINE_CHUNK_VALUES // (2 * widest))
        everything = np.flatnonzero(refine)
        for start in range(0, len(everything), block):
            rows = everything[start : start + block]
            eye = np.zeros((2 * len(rows), len(refine)))
            eye[np.arange(len(rows)), rows] = 1.0
            eye[len(rows) + np.arange(len(rows)), rows] = -1.0
            found = backsubstitute(model, bounds, eye, k, False, xl, xu).lower
            lo[rows] = np.maximum(lo[rows], found[: len(rows)])
            hi[rows] = np.minimum(hi[rows], -found[len(rows) :])
        return lo, hi
    counts = refine.sum(axis=1)
    if not counts.any():
        return lo, hi
    lo, hi = lo.copy(), hi.copy()
    groups = _box_groups(counts)
    if len(groups) > 1 or len(groups[0]) < len(counts):
        bounds.prepare(model, k, xl, xu)  # (every group reads the same caches)
    for group in groups:
        part = bounds if len(group) == len(counts) else bounds.select(group)
        mine = refine[group]
        width = int(counts[group].max())
        boxes, neurons = np.nonzero(mine)  # row-major: each box's neurons in order
        slots = np.arange(len(boxes)) - np.repeat(np.cumsum(counts[group]) - counts[group], counts[group])
        coefficients = np.zeros((len(group), 2 * width, refine.shape[1]))
        coefficients[boxes, slots, neurons] = 1.0
        coefficients[boxes, width + slots, neurons] = -1.0
        found = backsubstitute(model, part, coefficients, k, False, xl[group], xu[group]).lower
        owners = group[boxes]
        lo[owners, neurons] = np.maximum(lo[owners, neurons], found[boxes, slots])
        hi[owners, neurons] = np.minimum(hi[owners, neurons], -found[boxes, width + slots])
    return lo, hi


def _box_groups(counts: np.ndarray) -> list[np.ndarray]:
    """The boxes with rows to bound, in groups bounded together: each box's rows are padded to
    its group's most, so boxes are grouped by count (largest first) while the padding stays under
    half of a group's rows (ReLU-split children refine anything from none to hundreds of
    neurons; input splitting's boxes are alike: one group)."""
    order = np.argsort(-counts, kind="stable")
    order = order[counts[order] > 0]
    groups, first = [], 0
    for end in range(1, len(order) + 1):
        if (
            end == len(order)
            or counts[order[first]] * (end + 1 - first) > 2 * counts[order[first : end + 1]].sum()
        ):
            groups.append(np.sort(order[first:end]))
            first = end
    return groups


def node_bounds(
    model: NetModel,
    xl: np.ndarray,
    xu: np.ndarray,
    phases: list[np.ndarray],
    parent: Bounds | None = None,
    start: int = 0,
    invariants: tuple[LayerBounds, ...] | None = None,
    region_words: tuple[np.ndarray, np.ndarray] | None = None,
) -> Bounds | None:
    """`layer_bounds` of one node, or None when it holds no execution. Layers before `start` are
    the parent's (their constraints did not change); the others are intersected with the
    parent's."""
    found = layer_bounds(
        model,
        xl,
        xu,
        phases,
        parent,
        start,
        None if parent is None else parent.pre_lo,
        None if parent is None else parent.pre_hi,
        invariants,
        region_words,
    )
    return None if found.empty else found


def batch_bounds(
    model: NetModel,
    xl: np.ndarray,
    xu: np.ndarray,
    parent_lo: list[np.ndarray] | None,
    parent_hi: list[np.ndarray] | None,
    invariants: tuple[LayerBounds, ...] | None = None,
    region_words: tuple[np.ndarray, np.ndarray] | None = None,
) -> Bounds:
    """`layer_bounds` of B boxes (B, n) with no phase fixed (input splitting)."""
    return layer_bounds(model, xl, xu, None, None, 0, parent_lo, parent_hi, invariants, region_words)


def settle(
    model: NetModel, k: int, lo: np.ndarray, hi: np.ndarray, phase: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Layer k's bounds moved inward to what the node allows: whole words in fixed point (the
    implementation's values are multiples of the unit), and the ReLU phases `phase` of the layer
    (active: z >= 0, one word in fixed point; inactive: z <= 0)."""
    integer_grid = model.is_fixed and not model.real
    if integer_grid:
        lo, hi = np.ceil(lo / model.unit) * model.unit, np.floor(hi / model.unit) * model.unit
    if model.layers[k].relu and phase is not None:
        lo = np.where(phase > 0, np.maximum(lo, model.unit if integer_grid else 0.0), lo)
        hi = np.where(phase < 0, np.minimum(hi, 0.0), hi)
    return lo, hi


def tighten_intermediate(
    model: NetModel,
    bounds: Bounds,
    xl: np.ndarray,
    xu: np.ndarray,
    phases: list[np.ndarray],
    steps: int,
    deadline: float,
    exact_input: StreamedInput | None = None,
) -> Bounds | None:
    """alpha-CROWN on the hidden layers' own bounds of one node, first layer to last: each open
    (unstable, unsplit, not free) neuron's pre-activation bounds by `optimised_bound` with its own
    slopes (ReLUs' lower slopes, staircases' two), so each layer's tighter relaxations serve the
    next. On image-size networks DeepPoly's
    fixed slopes leave most deep ReLUs open where the optimised ones close many (digits784, eps
    0.015: a root margin of -1.1 becomes +1.4). The bounds shrink in place (intersected, settled to
    the node); None when they become empty (the node holds no execution). Stops between blocks of
    rows at `deadline` (what is done stays: every bound is sound on its own).

    `exact_input` (the node's box): each row's best bound is read again with the input layer's
    roundings exact (`exact_input_lower`), from the first layer on (its own neurons' bounds become
    exact)."""
    exact = exact_input is not None
    for k in range(0 if exact else 1, len(model.layers) - 1):
        if time.monotonic() > deadline:
            break
        layer = model.layers[k]
        if not (layer.relu or layer.stairs is not None):
            continue
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        opened = layer.open_neurons(lo, hi) & ~bounds.free[k]
        rows = np.flatnonzero(opened & (phases[k] == 0) if layer.relu else opened)
        if not len(rows):
            continue
        # each neuron's two rows side by side (+e_j, then -e_j): a block cut short by the
        # deadline leaves whole neurons as they were
        eye = np.zeros((2 * len(rows), len(lo)))
        eye[2 * np.arange(len(rows)), rows] = 1.0
        eye[2 * np.arange(len(rows)) + 1, rows] = -1.0
        # each row has its own slopes for every neuron below: a block of rows at a time (an even
        # number), and between blocks the deadline is read (digits28-avgpool int8: a layer's
        # blocks took 66 s of a 60 s run, so the root never reached its branching)
        below = sum(model.layers[j].n_out for j in range(k)) or 1
        chunk = 2 * max(1, INTERMEDIATE_CHUNK_VALUES // below // 2)
        found = np.full(len(eye), -np.inf)
        for i in range(0, len(eye), chunk):
            if i and time.monotonic() > deadline:
                break
            linear = optimised_bound(
                model, bounds, eye[i : i + chunk], xl, xu, steps, index=k, input_statement=exact
            )
            found[i : i + chunk] = exact_input_lower(linear, exact_input) if exact else linear.lower
        lo, hi = lo.copy(), hi.copy()
        lo[rows] = np.maximum(lo[rows], found[0::2])
        hi[rows] = np.minimum(hi[rows], -found[1::2])
        lo, hi = settle(model, k, lo, hi, phases[k])
        if np.any(lo > hi):
            return None
        bounds.pre_lo[k], bounds.pre_hi[k] = lo, hi
        bounds.relaxations.pop(k, None)
        for reader in model.consumers(k):
            bounds.affine.pop(reader, None)  # its charge reads this layer's max |h|
            bounds.operands.pop(reader, None)  # (and its operands' words)
            if model.is_fixed and not model.real:
                # neurons now inactive make the readers' products by them exact: fewer roundings
                keep = bounds.free[reader]
                h_lo, h_hi = bounds.inputs(model, reader, xl, xu)
                err_lo, err_hi, _ = model.error_terms(reader, np.maximum(np.abs(h_lo), np.abs(h_hi)))
                bounds.err_lo[reader] = np.where(
                    keep, bounds.err_lo[reader], np.maximum(bounds.err_lo[reader], err_lo)
                )
                bounds.err_hi[reader] = np.where(
                    keep, bounds.err_hi[reader], np.minimum(bounds.err_hi[reader], err_hi)
                )
    return bounds


def optimised_bound(
    model: NetModel,
    bounds: Bounds,
    coefficients: np.ndarray,
    xl: np.ndarray,
    xu: np.ndarray,
    steps: int,
    start: LinearBound | None = None,
    index: int | None = None,
    warm: dict[int, np.ndarray] | None = None,
    input_statement: bool = False,
) -> LinearBound:
    """alpha-CROWN on rows of the outputs (or, with `index`, of that layer's pre-activation
    values): the lower ReLU slopes of every hidden layer below, one set per row (and box, for a
    batch), and on one node both slopes of every staircase layer with open neurons (int8
    requantizations, lookup tables: `stair_relaxation`, the intercepts exact for the slopes),
    improved by projected sign-gradient ascent on the row's bound. The gradient is that of
    the bound with the relaxation choices held (d bound / d alpha = coefficient x the relaxed
    network's value of the neuron at the minimising input vertex; for a staircase's line, minus
    the point its intercept is set by); it only steers the search: every bound returned is a
    back-substitution result, sound for any slopes in [0, 1] (ReLU) or >= 0 (staircases). Per row,
    the best bound seen wins.

    `warm` (one node): the staircase layers' parameters (rows, 2 n) to start from, a parent's, where
    they have this node's shape; on return it holds the parameters of each row's best bound, for
    the node's children (a child's intervals lie inside its parent's, so its parent's slopes are
    a better start than its own DeepPoly lines).

    `input_statement`: every back-substitution keeps the input layer's rows (`backsubstitute`), so
    that the best rows can be read with `exact_input_lower` once, after the steps."""
    last = len(model.layers) - 1
    post = index is None
    index = last if index is None else index
    rows = np.atleast_2d(coefficients).shape[-2]
    hidden = [
        k for k in range(min(index + post, last)) if model.layers[k].relu and bounds.unstable(model, k).any()
    ]
    stairs = stair_layers(model, bounds, index + post) if np.ndim(xl) == 1 else []
    substitute = functools.partial(
        backsubstitute,
        model,
        bounds,
        coefficients,
        index,
        post,
        xl,
        xu,
        keep=True,
        input_statement=input_statement,
    )
    best = start or substitute()
    if not (hidden or stairs) or steps <= 0:
        return best
    alphas: dict[int, np.ndarray | RowRelaxation] = {}
    for k in hidden:
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        alphas[k] = np.repeat(np.where(hi >= -lo, 1.0, 0.0)[..., None, :], rows, axis=-2)
    own = {k: stair_start(model, bounds, k, rows) for k in stairs}
    rhos = dict(own)
    warmed = False
    for k in stairs:
        given = None if warm is None else warm.get(k)
        if given is not None and given.shape == own[k].shape:
            rhos[k], warmed = given, True
    setups = {k: stair_setup(model, bounds, k) for k in stairs}
    for k in stairs:
        alphas[k] = stair_relaxation(model, bounds, k, rhos[k], setups[k])
    output_rows = np.atleast_2d(coefficients) if post else None
    current = best
    best_rhos = dict(own)  # (kept only for `warm`)
    if warmed:  # the parent's slopes, where they bound a row better than this node's own lines
        current = substitute(alphas)
        better = current.lower > best.lower
        best = best_rows(best, current, better)
        best_rhos = {k: np.where(better[:, None], rhos[k], own[k]) for k in stairs}
    alpha_step, stair_step = ALPHA_STEP, STAIR_STEP
    for _ in range(steps):
        gradients = relaxed_gradients(model, bounds, current, alphas, xl, xu, index, None, output_rows)[0]
        # (a graph: a node below `index` but off every path to it has no gradient)
        for k in (k for k in hidden if k in gradients):
            alphas[k] = np.clip(alphas[k] + alpha_step * np.sign(gradients[k]), 0.0, 1.0)
        for k in (k for k in stairs if k in gradients):
            rhos[k] = np.clip(rhos[k] + stair_step * np.sign(gradients[k]), 0.0, STAIR_SLOPE_RANGE)
            alphas[k] = stair_relaxation(model, bounds, k, rhos[k], setups[k])
        alpha_step *= ALPHA_STEP_DECAY
        stair_step *= STAIR_STEP_DECAY
        current = substitute(alphas)
        better = current.lower > best.lower
        if better.any():
            best = best_rows(best, current, better)
            if warm is not None:
                for k in stairs:
                    best_rhos[k] = np.where(better[:, None], rhos[k], best_rhos[k])
    if warm is not None:
        warm.clear()
        warm.update(best_rhos)
    return best


def best_rows(best: LinearBound, current: LinearBound, better: np.ndarray) -> LinearBound:
    """Per row, `current`'s back-substitution result where `better` (its bound the higher), else
    `best`'s."""
    kept = current.input_rows is not None and best.input_rows is not None
    return LinearBound(
        np.where(better, current.lower, best.lower),
        np.where(better[..., None], current.lam_input, best.lam_input),
        {k: np.where(better[..., None], current.lam_post[k], best.lam_post[k]) for k in best.lam_post},
        np.where(better, current.offset, best.offset),
        np.where(better[..., None], current.input_rows, best.input_rows) if kept else None,
        np.where(better, current.input_term, best.input_term) if kept else None,
    )


def alpha_gradients(model, bounds, linear, alphas, xl, xu, stop: int | None = None):
    """d (row bound) / d alpha per hidden layer below `stop` (default: every one), with the
    relaxation choices of `linear` held (per box with a leading batch axis on the bounds,
    `linear`'s arrays, the alphas and the box)."""
    return relaxed_gradients(model, bounds, linear, alphas, xl, xu, stop)[0]


def relaxed_gradients(
    model, bounds, linear, alphas, xl, xu, stop: int | None = None, terms=None, output_rows=None
):
    """(d bound / d alpha, d bound / d nu) per layer below `stop`, the relaxation choices of
    `linear` held: the relaxed network (each open ReLU replaced by the side of its relaxation the
    row's coefficient chose) evaluated at the input vertex that minimises the row's bound. A
    row's bound moves by coefficient x z per unit of an open neuron's lower slope, and by z - hi
    (nu > 0) or z - lo (nu < 0) per unit of a bound multiplier (`BoundTerms`; at nu = 0 the side
    that pays, if z lies outside [lo, hi]). A staircase layer given per-row lines (`RowRelaxation`
    in `alphas`) moves the bound by coefficient x (z - zeta) per unit of its lower slope and
    coefficient x (z - xi) per unit of its upper slope (the intercepts' derivatives), reported in
    `stair_relaxation`'s parameters (lower slopes, then upper ones); the last layer's staircase
    (int8) with `output_rows`, the rows' coefficients on the outputs. These only steer the
    optimisation; every bound is recomputed."""
    x = np.where(linear.lam_input > 0, xl[..., None, :], xu[..., None, :])
    outputs: list[np.ndarray] = []
    gradients, split_gradients = {}, {}
    last = len(model.layers) - 1
    end = min(last, len(model.layers) if stop is None else stop)
    if (
        output_rows is not None
        and isinstance(alphas.get(last), RowRelaxation)
        and (stop is None or stop >= last)
    ):
        end = last + 1  # (the outputs' staircase: its rows are the coefficients themselves)
    for k in range(end):
        layer = model.layers[k]
        values = model.gather(k, x, outputs)
        z = layer.op.forward(values) + layer.bias
        if terms is not None and k in terms.nus:
            lo_k, hi_k, nu = bounds.pre_lo[k][..., None, :], bounds.pre_hi[k][..., None, :], terms.nus[k]
            above, below = z - hi_k, z - lo_k
            split_gradients[k] = np.where(
                nu > 0, above, np.where(nu < 0, below, np.where(above > 0, above, np.minimum(below, 0.0)))
            )
        override = alphas.get(k)
        if isinstance(override, RowRelaxation):
            lam = output_rows if k == last else linear.lam_post.get(k)
            if lam is None:
                outputs.append(layer.activation.forward(z))
                continue
            outputs.append(np.where(lam >= 0, override.a * z + override.c, override.s * z + override.t))
            lower = np.where(lam > 0, lam * (z - override.zeta), 0.0) * override.scale
            upper = np.where(lam < 0, lam * (z - override.xi), 0.0) * override.scale
            gradients[k] = np.concatenate([lower, upper], axis=-1)
            continue
        if not layer.relu:
            outputs.append(layer.activation.forward(z))
            continue
        lo, hi = bounds.pre_lo[k][..., None, :], bounds.pre_hi[k][..., None, :]
        lam = linear.lam_post.get(k)
        if lam is None:
            outputs.append(np.maximum(z, 0.0))
            continue
        unstable = (lo < 0) & (hi > 0)
        alpha = alphas.get(k)
        relaxation = bounds.relaxation(model, k)
        a, s, t = relaxation.a[..., None, :], relaxation.s[..., None, :], relaxation.t[..., None, :]
        if alpha is not None:
            a = relu_lower_slopes(lo, hi, a, alpha)
        lower_used = lam >= 0
        relaxed = np.where(lower_used, a * z, s * z + t)
        outputs.append(np.where(unstable, relaxed, np.where(lo >= 0, z, 0.0)))
        if k in alphas:
            gradients[k] = np.where(unstable & lower_used, lam * z, 0.0)
    return gradients, split_gradients


def with_phase(
    model: NetModel, bounds: Bounds, layer: int, neuron: int, phase: int, at: float | None = None
) -> Bounds | None:
    """The parent's bounds with one ReLU's phase fixed (active: z >= 0, one word for fixed point;
    inactive: z <= 0), or a max pool's, table's or requantization's input split at `at` (phase 1:
    z >= at, -1: z <= at; on a staircase's grid, moved inward to its points), every
    other layer's bounds kept (the parent's bounds hold on the child's subset; the search then bounds
    the layers after the split again with `node_bounds`, and every later node intersects its bounds
    with its parent's, so the split holds below). None when it contradicts the bounds."""
    lo, hi = bounds.pre_lo[layer].copy(), bounds.pre_hi[layer].copy()
    if at is not None:
        if phase > 0:
            lo[neuron] = max(lo[neuron], at)
        else:
            hi[neuron] = min(hi[neuron], at)
        stairs = model.layers[layer].stairs
        if stairs is not None:  # z is on the staircase's grid: whole points
            lo[neuron] = stairs._on_grid(lo[neuron], down=False)
            hi[neuron] = stairs._on_grid(hi[neuron], down=True)
    elif phase > 0:
        lo[neuron] = max(lo[neuron], model.unit if model.is_fixed and not model.real else 0.0)
    else:
        hi[neuron] = min(hi[neuron], 0.0)
    if lo[neuron] > hi[neuron]:
        return None
    pre_lo, pre_hi = list(bounds.pre_lo), list(bounds.pre_hi)
    pre_lo[layer], pre_hi[layer] = lo, hi
    relaxations = {k: v for k, v in bounds.relaxations.items() if k != layer}
    # the next layer's charge used max|h| of this layer, which can only have shrunk: still sound
    return Bounds(
        pre_lo,
        pre_hi,
        bounds.free,
        bounds.err_lo,
        bounds.err_hi,
        bounds.overflow_possible,
        relaxations,
        dict(bounds.affine),
        bounds.empty,
        dict(bounds.operands),
    )
