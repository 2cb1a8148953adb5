"""FSB's children estimates (`branching._children_bounds`): the batch that walks the layers above a
candidate once, for all candidates (a base walk, each candidate's two children joining at its
layer), gives each child the bound of its own whole walk with its phase fixed -- on a deep MLP and on
the residual graphs, where coefficients wait for a producer that several consumers read. The batch
computes in float32 (an estimate that only chooses), the reference walk here in float64."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from qverify.engine.netlevel.activations import relu_relaxation
from qverify.engine.netlevel.branching import _children_bounds
from qverify.engine.netlevel.query import query_for
from qverify.network import Activation
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import FixedFormat, FloatFormat, FloatKind, ImplementationOptions, quantize_network
from tests.conftest import random_network, root_bounds
from tests.test_graph_oracle import random_graph


def _one_child(model, bounds, k, j, phase, rows, coefficients, constants, xl, xu, alphas, nus) -> float:
    """The estimate of one child, by its own walk from the outputs to the inputs (the definition)."""
    lam = coefficients[rows][None].astype(np.float64)
    const = np.zeros((1, len(rows)))
    pending: dict[int, np.ndarray] = {}
    lam_input = np.zeros((1, len(rows), len(xl)))
    last = len(model.layers) - 1
    for depth in range(last, -1, -1):
        if depth != last:
            if depth not in pending:
                continue
            lam = pending.pop(depth)
            if model.layers[depth].relu:
                lo, hi = bounds.pre_lo[depth][None, None].copy(), bounds.pre_hi[depth][None, None].copy()
                if depth == k:
                    (lo if phase == 0 else hi)[0, 0, j] = 0.0
                alpha = None if alphas is None else alphas[depth][rows][None]
                a, s, t = relu_relaxation(lo, hi, alpha)
                const = const + (np.minimum(lam, 0.0) * t).sum(axis=-1)
                lam = np.maximum(lam, 0.0) * a + np.minimum(lam, 0.0) * s
        if nus is not None and depth in nus:
            nu = nus[depth][rows][None]
            lo, hi = bounds.pre_lo[depth], bounds.pre_hi[depth]
            const = const - (np.maximum(nu, 0.0) * hi - np.maximum(-nu, 0.0) * lo).sum(axis=-1)
            lam = lam + nu
        layer = model.layers[depth]
        centre = layer.bias + (bounds.err_lo[depth] + bounds.err_hi[depth]) / 2
        radius = (bounds.err_hi[depth] - bounds.err_lo[depth]) / 2
        const = const + lam @ centre - np.abs(lam) @ radius
        lam = layer.op.backward(lam)
        for producer, part in model.split(depth, lam):
            if producer < 0:
                lam_input = lam_input + part
            else:
                pending[producer] = pending[producer] + part if producer in pending else part
    lower = (np.maximum(lam_input, 0.0) * xl).sum(axis=-1) + (np.minimum(lam_input, 0.0) * xu).sum(axis=-1)
    return float((lower + const + constants[rows]).min(axis=1)[0])


def _property(n_inputs: int, n_outputs: int, lo: Fraction, hi: Fraction) -> Property:
    clauses = tuple(
        Clause((Atom(((0, Fraction(1)), (other, Fraction(-1))), Fraction(0), Relation.GE),))
        for other in range(1, n_outputs)
    )
    return Property("fsb", (Box((lo,) * n_inputs, (hi,) * n_inputs),), OutputCondition(clauses))


def _models(rng):
    deep = random_network(rng, (6, 10, 10, 10, 10, 4), Activation.RELU)
    yield "mlp", deep, 6, 4
    for shape in ("residual-identity", "residual-projection", "concat"):
        yield shape, random_graph(rng, shape, 3), 3, 2


@pytest.mark.parametrize(
    "options",
    [ImplementationOptions(FloatFormat(FloatKind.FLOAT)), ImplementationOptions(FixedFormat(8, 8))],
    ids=lambda o: o.key(),
)
def test_shared_walks_give_each_child_its_own_bound(options):
    rng = np.random.default_rng(4500)
    checked = 0
    for name, network, n_in, n_out in _models(rng):
        qnet = quantize_network(network, options)
        query = query_for(qnet, _property(n_in, n_out, Fraction(-1), Fraction(1)))
        model, xl, xu, _, bounds = root_bounds(query)
        candidates = [
            (k, int(j))
            for k, layer in enumerate(model.layers)
            if layer.relu
            for j in np.flatnonzero((bounds.pre_lo[k] < 0) & (bounds.pre_hi[k] > 0))[:3]
        ]
        assert len({k for k, _ in candidates}) >= 2, name  # children joining at several layers
        n_outputs = model.layers[-1].n_out
        coefficients = np.zeros((n_outputs - 1, n_outputs))
        coefficients[:, 0] = 1.0
        coefficients[np.arange(n_outputs - 1), np.arange(1, n_outputs)] = -1.0
        constants = rng.normal(0, 0.1, n_outputs - 1)
        rows = list(range(n_outputs - 1))
        # the node's optimised slopes and multipliers, as the search hands them (random here)
        alphas = {
            k: rng.uniform(0, 1, (len(rows), layer.n_out))
            for k, layer in enumerate(model.layers)
            if layer.relu
        }
        nus = {
            k: rng.normal(0, 0.1, (len(rows), layer.n_out))
            for k, layer in enumerate(model.layers)
            if layer.relu
        }
        for a, n in ((None, None), (alphas, nus)):
            shared = _children_bounds(model, bounds, candidates, rows, coefficients, constants, xl, xu, a, n)
            own = [
                _one_child(model, bounds, k, j, phase, rows, coefficients, constants, xl, xu, a, n)
                for k, j in candidates
                for phase in (0, 1)
            ]
            scale = max(1.0, float(np.max(np.abs(own))))
            np.testing.assert_allclose(shared, own, rtol=1e-5, atol=1e-5 * scale, err_msg=name)
            checked += len(own)
    assert checked >= 40
