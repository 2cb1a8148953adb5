"""The batched bounds of the network-level input splitting (`bounds.batch_bounds`, the one loop of
`bounds.layer_bounds` over many boxes): per box they equal the per-node bounds (`node_bounds`, a
batch of one; `Search.atom_bounds`), and hold every execution the simulator (implementation
arithmetic) or the real network produces in the box, boxes with neurons that may overflow (fixed
point: free values in the C's own interval) included. A node alone also reads fixed-point product
roundings per operand (`operand_rounding`: no tables in a batch): its bounds with them hold every
execution too."""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from qverify.engine.netlevel import operand_rounding
from qverify.engine.netlevel.attack import surrogate_forward
from qverify.engine.netlevel.bounds import backsubstitute, batch_bounds, node_bounds, optimised_bound
from qverify.engine.netlevel.model import build_model
from qverify.engine.netlevel.query import Arithmetic, query_for
from qverify.engine.netlevel.search import Search, combination_refutes
from qverify.engine.result import Recorder
from qverify.network import Activation
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Layout,
    Overflow,
    Rounding,
    quantize_network,
    simulate,
)
from tests.conftest import SAFETY_NET_S, budgeted, random_network

IMPLEMENTATION, REAL = Arithmetic.IMPLEMENTATION, Arithmetic.REAL
OVERFLOWING = ImplementationOptions(FixedFormat(3, 6, overflow=Overflow.WRAP))  # sums may leave the range
CASES = [
    (ImplementationOptions(FixedFormat(8, 8)), IMPLEMENTATION),
    (
        ImplementationOptions(FixedFormat(8, 8, Rounding.FLOOR), accumulation=Accumulation.WIDE),
        IMPLEMENTATION,
    ),
    (ImplementationOptions(FixedFormat(6, 6), layout=Layout.BALANCED), IMPLEMENTATION),
    (OVERFLOWING, IMPLEMENTATION),
    (ImplementationOptions(FloatFormat(FloatKind.FLOAT)), IMPLEMENTATION),
    (ImplementationOptions(FloatFormat(FloatKind.HALF)), IMPLEMENTATION),
    (ImplementationOptions(FloatFormat(FloatKind.FLOAT)), REAL),
    (ImplementationOptions(FixedFormat(8, 8)), REAL),
]
SIZES = (4, 8, 8, 8, 3)


def _property(n_inputs: int) -> Property:
    """Unsafe: Y_0 >= Y_1 and Y_0 >= Y_2 (two atoms: the combination check has work to do)."""
    atoms = tuple(
        Atom(((0, Fraction(1)), (other, Fraction(-1))), Fraction(0), Relation.GE) for other in (1, 2)
    )
    box = Box(tuple([Fraction(-2)] * n_inputs), tuple([Fraction(2)] * n_inputs))
    return Property("batch", (box,), OutputCondition((Clause(atoms),)))


def _random_boxes(qnet, rng, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Implementation input boxes (words, or values of the input type) inside [-1, 1]."""
    n = qnet.n_inputs
    if qnet.is_fixed:
        scale = qnet.number.scale
        lo = rng.integers(-scale, scale // 2, (count, n))
        return lo, np.minimum(lo + rng.integers(0, scale // 2, (count, n)), scale)
    dtype = qnet.number.dtype
    lo = rng.uniform(-1, 0.5, (count, n)).astype(dtype).astype(np.float64)
    hi = (lo + rng.uniform(0, 0.5, (count, n))).astype(dtype).astype(np.float64)
    return lo, np.maximum(lo, hi)


def _executions(query, model, lo: np.ndarray, hi: np.ndarray, rng, count: int = 300):
    """Sampled executions of a box (corners included): the inputs, pre-activation values per layer
    in real units, the real outputs, and which rows are executions the bounds describe (no
    overflow)."""
    qnet = query.qnet
    n = len(lo)
    corners = np.array(np.meshgrid(*[[0, 1]] * n, indexing="ij")).reshape(n, -1).T
    if qnet.is_fixed:
        inside = rng.integers(lo, hi + 1, (count, n))
        points = np.vstack([lo + corners * (hi - lo), inside]).astype(np.int64)
    else:
        inside = rng.uniform(lo, hi, (count, n)).astype(qnet.number.dtype).astype(np.float64)
        points = np.vstack([lo + corners * (hi - lo), np.clip(inside, lo, hi)])
    if query.arithmetic is REAL:
        outputs, pres = surrogate_forward(model, model.input_reals(points))
        return points, pres, outputs, np.ones(len(points), dtype=bool)
    run = simulate(qnet, points, trace=True)
    scale = model.unit if model.is_fixed else 1.0
    pres = [trace.pre.astype(np.float64) * scale for trace in run.layers]
    return points, pres, run.outputs.astype(np.float64) * scale, ~np.asarray(run.overflowed)


@pytest.mark.parametrize("options, arithmetic", CASES, ids=lambda c: getattr(c, "key", lambda: c.value)())
def test_batch_bounds_equal_per_node_bounds_and_hold_every_execution(options, arithmetic, rng, monkeypatch):
    tolerance = 1e-9 if arithmetic is REAL else 0.0  # REAL: executions sampled in float64
    compared = overflowing = 0
    for _ in range(2):
        net = random_network(rng, SIZES, Activation.RELU, scale=0.7)
        qnet = quantize_network(net, options)
        query = query_for(qnet, _property(SIZES[0]), arithmetic)
        search = Search(query, budgeted(), time.monotonic() + SAFETY_NET_S, Recorder())
        model = search.model
        lo, hi = _random_boxes(qnet, rng, 6)
        xl, xu = model.input_reals(lo), model.input_reals(hi)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        singles = [node_bounds(model, xl[b], xu[b], phases, region_words=(lo[b], hi[b])) for b in range(6)]
        # the children of every box, with the per-node bounds of their parent
        middle = lo.copy()
        middle[:, 0] = (lo[:, 0] + hi[:, 0]) // 2 if qnet.is_fixed else lo[:, 0]
        child_lo, child_hi = lo, np.where(np.arange(SIZES[0]) == 0, np.maximum(middle, lo), hi)
        cl, cu = model.input_reals(child_lo), model.input_reals(child_hi)
        for parents in (None, singles):
            if parents is None:
                words = (lo, hi) if qnet.is_fixed else None
                boxes, reals = (lo, hi), (xl, xu)
                batch = batch_bounds(model, xl, xu, None, None, region_words=words)
            else:
                if any(p is None for p in parents):
                    continue
                stacked_lo = [np.stack([p.pre_lo[k] for p in parents]) for k in range(len(model.layers))]
                stacked_hi = [np.stack([p.pre_hi[k] for p in parents]) for k in range(len(model.layers))]
                boxes, reals = (child_lo, child_hi), (cl, cu)
                words = (child_lo, child_hi) if qnet.is_fixed else None
                batch = batch_bounds(model, cl, cu, stacked_lo, stacked_hi, region_words=words)
            lower, lam_input, lam_post, offset = search.batch_atom_bounds(batch, *reals)
            search.batch_alpha_steps = 6  # alpha-CROWN: at least as tight, as sound
            optimised = search.batch_atom_bounds(batch, *reals)
            search.batch_alpha_steps = 0
            assert np.all(optimised[0] >= lower)
            for b in range(6):
                box_lo, box_hi = boxes[0][b], boxes[1][b]
                box_xl, box_xu = reals[0][b], reals[1][b]
                parent = None if parents is None else parents[b]
                tabled = node_bounds(model, box_xl, box_xu, phases, parent, region_words=(box_lo, box_hi))
                with monkeypatch.context() as untabled:  # the batch's reading: no per-operand tables
                    untabled.setattr(operand_rounding, "applies", lambda model, layer_index: False)
                    single = node_bounds(model, box_xl, box_xu, phases, parent, region_words=(box_lo, box_hi))
                    one_lower = None if single is None else search.atom_bounds(single, box_xl, box_xu)[0]
                overflowing += any(free[b].any() for free in batch.free)
                points, pres, outputs, fine = _executions(query, model, box_lo, box_hi, rng)
                if single is None or batch.empty[b]:
                    assert single is None and tabled is None and batch.empty[b]
                    assert not fine.any()  # no execution at all in an empty box
                    continue
                if tabled is None:  # (the tables alone found the box empty)
                    assert not fine.any()
                    tabled = single
                one = batch.box(b)  # the per-node record the LP/MILP and the children read
                for k in range(len(model.layers)):
                    for mine, theirs in (
                        (one.pre_lo, single.pre_lo),
                        (one.pre_hi, single.pre_hi),
                        (one.err_lo, single.err_lo),
                        (one.err_hi, single.err_hi),
                        (one.free, single.free),
                    ):
                        assert mine[k].shape == theirs[k].shape
                        np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-12, atol=1e-12)
                    np.testing.assert_allclose(batch.pre_lo[k][b], single.pre_lo[k], rtol=1e-12, atol=1e-12)
                    np.testing.assert_allclose(batch.pre_hi[k][b], single.pre_hi[k], rtol=1e-12, atol=1e-12)
                    assert np.all(pres[k][fine] >= batch.pre_lo[k][b] - tolerance)
                    assert np.all(pres[k][fine] <= batch.pre_hi[k][b] + tolerance)
                    assert np.all(pres[k][fine] >= tabled.pre_lo[k] - tolerance)
                    assert np.all(pres[k][fine] <= tabled.pre_hi[k] + tolerance)
                np.testing.assert_allclose(lower[b], one_lower, rtol=1e-9, atol=1e-12)
                margins = outputs[fine] @ search.atom_matrix.T + search.atom_constants
                assert np.all(margins >= lower[b] - tolerance)
                assert np.all(margins >= optimised[0][b] - tolerance)
                assert np.all(margins >= search.atom_bounds(tabled, box_xl, box_xu)[0] - tolerance)
                # the linear bounds behind the combination check hold at every execution too
                linear = model.input_reals(points[fine]) @ lam_input[b].T + offset[b]
                assert np.all(linear <= margins + tolerance + 1e-12 * np.abs(margins))
                assert set(lam_post) == set(range(len(model.layers) - 1))
                compared += 1
    assert compared >= (4 if options is OVERFLOWING else 8)
    assert (overflowing > 0) == (options is OVERFLOWING)


def test_combination_refutes_only_what_every_point_refutes(rng):
    """Random linear bounds on random boxes: a box is refuted only if at every sampled point some
    bound is positive; the batch answer equals one box at a time."""
    batch, atoms, n = 40, 3, 4
    lam = rng.normal(0, 1, (batch, atoms, n))
    offset = rng.normal(0.5, 1.5, (batch, atoms))
    xl = rng.uniform(-1, 0, (batch, n))
    xu = xl + rng.uniform(0, 1, (batch, n))
    refuted = combination_refutes(lam, offset, xl, xu)
    assert 0 < refuted.sum() < batch
    for b in range(batch):
        assert (
            combination_refutes(lam[b : b + 1], offset[b : b + 1], xl[b : b + 1], xu[b : b + 1])[0]
            == refuted[b]
        )
        if refuted[b]:
            x = rng.uniform(xl[b], xu[b], (2000, n))
            assert np.all((x @ lam[b].T + offset[b]).max(axis=1) > 0)


def test_batch_alpha_crown_tightens_and_stays_sound(rng):
    """alpha-CROWN over a batch (every row optimised, no gating): never looser than DeepPoly's
    slopes, strictly tighter on some rows, and below every sampled execution."""
    net = random_network(rng, SIZES, Activation.RELU, scale=0.7)
    qnet = quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT)))
    query = query_for(qnet, _property(SIZES[0]), REAL)
    model = build_model(query)
    lo, hi = _random_boxes(qnet, rng, 16)
    xl, xu = model.input_reals(lo), model.input_reals(hi)
    bounds = batch_bounds(model, xl, xu, None, None)
    matrix = np.eye(SIZES[-1])
    last = len(model.layers) - 1
    start = backsubstitute(model, bounds, matrix, last, True, xl, xu, keep=True)
    optimised = optimised_bound(model, bounds, matrix, xl, xu, 8, start)
    assert np.all(optimised.lower >= start.lower)
    assert np.any(optimised.lower > start.lower + 1e-6)
    for b in range(16):
        _, _, outputs, _ = _executions(query, model, lo[b], hi[b], rng)
        assert np.all(outputs >= optimised.lower[b] - 1e-9)
