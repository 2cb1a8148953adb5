"""ReLU-split nodes bounded as one batch (`batch.split_batch_bounds`, `Search.split_batch_atoms`; issue
45 item 3): per box the bounds equal what `Search.process` computes for the node alone (its parent's
bounds with the split fixed, the layers after the split bounded again; fixed point with the product
roundings per operand), the atoms' alpha-beta-CROWN bounds equal the node's own, and both hold at
every sampled execution of the node (the implementation's arithmetic simulated bit-exactly, or
the real network in float64), in every number format; so do the looser bounds the search uses
(no back-substitution of the layers after the split: `REBOUND_AFTER_SPLIT`)."""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from qverify.engine.netlevel.batch import split_batch_bounds
from qverify.engine.netlevel.bounds import node_bounds, with_phase
from qverify.engine.netlevel.operand_rounding import BoxTables
from qverify.engine.netlevel.query import Arithmetic, query_for
from qverify.engine.netlevel.search import Node, Search
from qverify.engine.result import Recorder
from qverify.network import Activation
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Overflow,
    Rounding,
    quantize_network,
)
from tests.conftest import SAFETY_NET_S, budgeted, random_network
from tests.test_netlevel_bab import _executions

IMPLEMENTATION, REAL = Arithmetic.IMPLEMENTATION, Arithmetic.REAL
CASES = [
    (ImplementationOptions(FixedFormat(8, 8)), IMPLEMENTATION),
    (ImplementationOptions(FixedFormat(5, 11)), IMPLEMENTATION),  # narrow boxes: per-operand tables
    (
        ImplementationOptions(FixedFormat(8, 8, Rounding.FLOOR), accumulation=Accumulation.WIDE),
        IMPLEMENTATION,
    ),
    (ImplementationOptions(FixedFormat(3, 6, overflow=Overflow.WRAP)), IMPLEMENTATION),  # free neurons
    (ImplementationOptions(FloatFormat(FloatKind.FLOAT)), IMPLEMENTATION),
    (ImplementationOptions(FloatFormat(FloatKind.HALF)), IMPLEMENTATION),
    (ImplementationOptions(FloatFormat(FloatKind.FLOAT)), REAL),
]
SIZES = (4, 8, 8, 8, 3)


def _property(n_inputs: int, lo: Fraction, hi: Fraction) -> Property:
    """Unsafe: Y_0 >= Y_1, or Y_0 >= Y_2 (two clauses: nodes inherit refuted clauses)."""
    clauses = tuple(
        Clause((Atom(((0, Fraction(1)), (other, Fraction(-1))), Fraction(0), Relation.GE),))
        for other in (1, 2)
    )
    return Property("split-batch", (Box((lo,) * n_inputs, (hi,) * n_inputs),), OutputCondition(clauses))


def _with_phases(model, pres, fine, phases):
    """The executions that have the node's fixed phases (active: z > 0, inactive: z <= 0)."""
    chosen = fine.copy()
    for k, layer in enumerate(model.layers):
        if layer.relu:
            chosen &= np.all(np.where(phases[k] > 0, pres[k] > 0, True), axis=1)
            chosen &= np.all(np.where(phases[k] < 0, pres[k] <= 0, True), axis=1)
    return chosen


def _children(search, node: Node, bounds, rng, count: int) -> list[Node]:
    """Both children of `count` random open neurons of `node` (as `Search.branch` makes them)."""
    model = search.model
    opened = [
        (k, int(j))
        for k in range(len(model.layers) - 1)
        if model.layers[k].relu
        for j in np.flatnonzero(bounds.unstable(model, k) & (node.phases[k] == 0))
    ]
    children = []
    for index in rng.permutation(len(opened))[:count]:
        k, j = opened[index]
        for phase in (1, -1):
            phases = [p.copy() if i == k else p for i, p in enumerate(node.phases)]
            phases[k][j] = phase
            child = Node(
                node.region, node.lo, node.hi, phases, bounds, k, node.depth + 1, (k, j, phase, None)
            )
            child.alphas, child.betas = node.alphas, node.betas
            children.append(child)
    return children


def _restore(nodes: list[Node], warm: list) -> None:
    """The nodes' warm starts as they were (a batch's optimisation keeps its own on the nodes)."""
    for node, (alphas, betas) in zip(nodes, warm):
        node.alphas, node.betas = alphas, betas


def _alone(search: Search, node: Node):
    """The node's bounds as `Search.process` computes them, one node."""
    model, region = search.model, search.query.regions[node.region]
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    words = (region.lo, region.hi) if model.is_fixed else None
    bounds = with_phase(model, node.parent, *node.split)
    if bounds is not None:
        bounds = node_bounds(model, xl, xu, node.phases, bounds, node.split[0] + 1, search.invariants, words)
    return bounds


@pytest.mark.parametrize("options, arithmetic", CASES, ids=lambda c: getattr(c, "key", lambda: c.value)())
def test_split_batch_equals_each_node_alone_and_holds_every_execution(options, arithmetic, rng):
    tolerance = 1e-9 if arithmetic is REAL else 0.0  # REAL: executions in float64
    compared = checked = tabled = 0
    for _ in range(3):
        net = random_network(rng, SIZES, Activation.RELU, scale=0.7)
        qnet = quantize_network(net, options)
        narrow = getattr(options.number, "frac_bits", 0) == 11
        span = Fraction(96, 2048) if narrow else Fraction(1)
        query = query_for(qnet, _property(SIZES[0], -span, span), arithmetic)
        search = Search(query, budgeted(), time.monotonic() + SAFETY_NET_S, Recorder())
        search.beta_steps = 4
        model, region = search.model, query.regions[0]
        xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
        words = (region.lo, region.hi) if model.is_fixed else None
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        root_node = Node(0, region.lo, region.hi, phases, None, 0, 0)
        root = node_bounds(model, xl, xu, phases, region_words=words)
        if root is None:
            continue
        lower, _, _, refuted = search.node_atoms(root_node, root, xl, xu)
        children = _children(search, root_node, root, rng, 3)
        for child in children:
            child.inherited_lower, child.inherited_refuted = lower, refuted
        # grandchildren: a second split under the first child that holds executions
        first = next((c for c in children if _alone(search, c) is not None), None)
        if first is not None:
            first_bounds = _alone(search, first)
            first_lower, _, _, first_refuted = search.node_atoms(first, first_bounds, xl, xu)
            for grandchild in _children(search, first, first_bounds, rng, 2):
                grandchild.inherited_lower, grandchild.inherited_refuted = first_lower, first_refuted
                children.append(grandchild)
        if not children:
            continue
        if narrow:
            assert any(t is not None for t in root.operands.values())  # (the tables are exercised)
        pres, outputs, fine = _executions(query, model, rng)
        warm = [(n.alphas, n.betas) for n in children]
        found = split_batch_bounds(model, children, search.invariants)
        # the search's default: the layers after a split by intervals and the parent's bounds only
        loose = split_batch_bounds(model, children, search.invariants, rebound=False)
        batch_atoms = None
        if found.bounds is not None:
            members = [children[i] for i in found.members]
            batch_atoms = search.split_batch_atoms(members, found.bounds, found.xl, found.xu)
            tabled += any(isinstance(v, BoxTables) for v in found.bounds.operands.values())
            _restore(children, warm)  # (each node alone starts where it did)
        for position, node in enumerate(children):
            alone = _alone(search, node)
            chosen = _with_phases(model, pres, fine, node.phases)
            if position in found.closed:
                assert alone is None or alone.empty
                assert not chosen.any()  # the node holds no execution
                continue
            assert alone is not None
            b = found.members.index(position)
            for k in range(len(model.layers)):
                for mine, theirs in (
                    (found.bounds.pre_lo, alone.pre_lo),
                    (found.bounds.pre_hi, alone.pre_hi),
                ):
                    np.testing.assert_allclose(mine[k][b], theirs[k], rtol=1e-9, atol=1e-12)
                for mine, theirs in (
                    (found.bounds.err_lo, alone.err_lo),
                    (found.bounds.err_hi, alone.err_hi),
                ):
                    np.testing.assert_allclose(mine[k][b], theirs[k], rtol=1e-12, atol=0)
                np.testing.assert_array_equal(found.bounds.free[k][b], alone.free[k])
                assert np.all(pres[k][chosen] >= found.bounds.pre_lo[k][b] - tolerance)
                assert np.all(pres[k][chosen] <= found.bounds.pre_hi[k][b] + tolerance)
            if position in loose.members:
                c = loose.members.index(position)
                for k in range(len(model.layers)):  # (no back-substitution: looser, as sound)
                    assert np.all(pres[k][chosen] >= loose.bounds.pre_lo[k][c] - tolerance)
                    assert np.all(pres[k][chosen] <= loose.bounds.pre_hi[k][c] + tolerance)
                    assert np.all(loose.bounds.pre_lo[k][c] <= found.bounds.pre_lo[k][b] + 1e-12)
                    assert np.all(loose.bounds.pre_hi[k][c] >= found.bounds.pre_hi[k][b] - 1e-12)
                loose_lower = search.split_batch_atoms(
                    [node], loose.bounds.select(np.array([c])), xl[None], xu[None]
                )[0]
                _restore(children, warm)
                margins = outputs[chosen] @ search.atom_matrix.T + search.atom_constants
                assert np.all(margins >= loose_lower[0] - tolerance)
            else:
                assert not chosen.any()
            own_lower = search.node_atoms(node, alone, xl, xu)[0]
            lower_b = batch_atoms[0][b]
            np.testing.assert_allclose(lower_b, own_lower, rtol=1e-6, atol=1e-9)
            margins = outputs[chosen] @ search.atom_matrix.T + search.atom_constants
            assert np.all(margins >= lower_b - tolerance)
            compared += 1
            checked += int(chosen.sum())
    assert compared >= 6
    assert tabled or not narrow  # (boxes read their own product-rounding tables)
    assert checked > 100
