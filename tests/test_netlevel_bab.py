"""The network level's branch and bound on ReLU phases: the node's bounds and split phases as
Lagrangian terms of the back-substitution (beta-CROWN, `bounds.BoundTerms`,
`beta.optimise_output_bounds`), the LP's rigorous refutations, and the search's worker processes
(`EngineOptions.jobs`), against executions and brute force.

A node fixes some ReLU phases; its bounds must contain every execution of its box that has those
phases (simulated bit-exactly for the implementation's arithmetic, or the real network in float64),
for any multipliers >= 0 and for the optimised ones. Verdicts with worker processes must agree
with brute force as the serial search's do, and every UNSAFE is confirmed on the exact semantics.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from qverify.engine.netlevel import search as search_module
from qverify.engine.netlevel.attack import surrogate_forward
from qverify.engine.netlevel.beta import optimise_output_bounds
from qverify.engine.netlevel.bounds import BoundTerms, backsubstitute, node_bounds
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, Arithmetic, query_for
from qverify.engine.netlevel.search import Search, decide
from qverify.engine.result import EngineOptions, EngineStatus, Recorder
from qverify.engine.solvers.base import CheckStatus
from qverify.network import Activation
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Rounding,
    quantize_network,
    simulate,
)
from tests.conftest import budgeted, random_network

IMPLEMENTATION, REAL = Arithmetic.IMPLEMENTATION, Arithmetic.REAL
CASES = [
    (ImplementationOptions(FixedFormat(8, 8)), IMPLEMENTATION),
    (
        ImplementationOptions(FixedFormat(8, 8, Rounding.FLOOR), accumulation=Accumulation.WIDE),
        IMPLEMENTATION,
    ),
    (ImplementationOptions(FloatFormat(FloatKind.FLOAT)), IMPLEMENTATION),
    (ImplementationOptions(FloatFormat(FloatKind.HALF)), IMPLEMENTATION),
    (ImplementationOptions(FloatFormat(FloatKind.FLOAT)), REAL),
]
SIZES = (4, 8, 8, 8, 3)


def _property(n_inputs: int, lo: float = -1.0, hi: float = 1.0) -> Property:
    """Unsafe: Y_0 >= Y_1 and Y_0 >= Y_2."""
    atoms = tuple(
        Atom(((0, Fraction(1)), (other, Fraction(-1))), Fraction(0), Relation.GE) for other in (1, 2)
    )
    box = Box(tuple([Fraction(lo)] * n_inputs), tuple([Fraction(hi)] * n_inputs))
    return Property("bab", (box,), OutputCondition((Clause(atoms),)))


def _executions(query, model, rng, count: int = 3000):
    """Sampled executions of the query's box (corners included): pre-activation values per layer in
    real units, the real outputs, and which rows the bounds describe (no overflow)."""
    region = query.regions[0]
    lo, hi = region.lo, region.hi
    n = len(lo)
    corners = np.array(np.meshgrid(*[[0, 1]] * n, indexing="ij")).reshape(n, -1).T
    if query.qnet.is_fixed:
        points = np.vstack([lo + corners * (hi - lo), rng.integers(lo, hi + 1, (count, n))]).astype(np.int64)
    else:
        inside = rng.uniform(lo, hi, (count, n)).astype(query.qnet.number.dtype).astype(np.float64)
        points = np.vstack([lo + corners * (hi - lo), np.clip(inside, lo, hi)])
    if query.arithmetic is REAL:
        outputs, pres = surrogate_forward(model, model.input_reals(points))
        return pres, outputs, np.ones(len(points), dtype=bool)
    run = simulate(query.qnet, points, trace=True)
    scale = model.unit if model.is_fixed else 1.0
    pres = [trace.pre.astype(np.float64) * scale for trace in run.layers]
    return pres, run.outputs.astype(np.float64) * scale, ~np.asarray(run.overflowed)


def _phases_of_an_execution(model, bounds, pres, fine, rng, splits: int):
    """Phases fixed on `splits` open neurons of the hidden layers, as one sampled execution has
    them (so that executions of the node exist), and which executions share them."""
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    row = int(rng.choice(np.flatnonzero(fine)))
    chosen = fine.copy()
    candidates = [
        (k, j) for k in range(len(model.layers) - 1) for j in np.flatnonzero(bounds.unstable(model, k))
    ]
    for index in rng.permutation(len(candidates))[:splits]:
        k, j = candidates[index]
        phase = 1 if pres[k][row, j] > 0 else -1
        phases[k][j] = phase
        chosen &= pres[k][:, j] > 0 if phase > 0 else pres[k][:, j] <= 0
    return phases, chosen


@pytest.mark.parametrize("options, arithmetic", CASES, ids=lambda c: getattr(c, "key", lambda: c.value)())
def test_split_bounds_contain_every_execution_with_the_phases(options, arithmetic, rng):
    """Output and intermediate bounds with the bound terms (any multipliers, and the optimised
    ones) hold at every sampled execution with the node's phases; zero multipliers give the
    bounds without them; the optimised multipliers tighten some bound."""
    tolerance = 1e-9 if arithmetic is REAL else 0.0  # REAL: executions in float64
    checked = tightened = 0
    for _ in range(4):
        net = random_network(rng, SIZES, Activation.RELU, scale=0.7)
        query = query_for(quantize_network(net, options), _property(SIZES[0]), arithmetic)
        search = Search(query, EngineOptions(), time.monotonic() + 60, Recorder())
        model, region = search.model, query.regions[0]
        xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
        words = (region.lo, region.hi) if model.is_fixed else None
        empty = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        root = node_bounds(model, xl, xu, empty, region_words=words)
        pres, outputs, fine = _executions(query, model, rng)
        for splits in (1, 3):
            phases, chosen = _phases_of_an_execution(model, root, pres, fine, rng, splits)
            bounds = node_bounds(model, xl, xu, phases, region_words=words)
            assert bounds is not None  # an execution has these phases
            matrix, last = search.atom_matrix, len(model.layers) - 1
            margins = outputs[chosen] @ matrix.T
            plain = backsubstitute(model, bounds, matrix, last, True, xl, xu)
            widths = [layer.n_out for layer in model.layers]
            hidden = list(range(last))
            zero = backsubstitute(
                model, bounds, matrix, last, True, xl, xu, terms=BoundTerms.of(hidden, 2, widths)
            )
            np.testing.assert_array_equal(zero.lower, plain.lower)
            for scale in (0.1, 1.0, 10.0):
                # multipliers of either sign on every neuron's bounds (the split phases among them)
                nus = {k: rng.normal(0, scale, (2, widths[k])) for k in hidden}
                lower = backsubstitute(model, bounds, matrix, last, True, xl, xu, terms=BoundTerms(nus)).lower
                assert np.all(margins >= lower - tolerance)
                # a hidden layer's own bounds, read through the terms of the layers below it
                k = 2
                eye = np.vstack([np.eye(widths[k]), -np.eye(widths[k])])
                below = BoundTerms({j: rng.normal(0, scale, (2 * widths[k], widths[j])) for j in range(k)})
                inner = backsubstitute(model, bounds, eye, k, False, xl, xu, terms=below).lower
                values = np.hstack([pres[k][chosen], -pres[k][chosen]])
                assert np.all(values >= inner - tolerance)
            best = optimise_output_bounds(model, bounds, matrix, xl, xu, phases, 10)
            assert np.all(margins >= best.bound.lower - tolerance)
            assert np.all(best.bound.lower >= plain.lower - 1e-12 * np.abs(plain.lower))
            # the children's warm start: their first bound with the parent's parameters is as sound
            again = optimise_output_bounds(model, bounds, matrix, xl, xu, phases, 0, best.alphas, best.betas)
            np.testing.assert_allclose(again.bound.lower, best.bound.lower, rtol=1e-12, atol=1e-12)
            tightened += int(np.sum(best.bound.lower > plain.lower + 1e-9))
            checked += int(chosen.sum())
    assert checked > 100
    assert tightened > 0


def _threshold_query(qnet, lo, hi, threshold: Fraction):
    atoms = (Atom(((0, Fraction(1)),), -threshold, Relation.GE),)
    prop = Property("threshold", (Box(tuple(lo), tuple(hi)),), OutputCondition((Clause(atoms),)))
    return query_for(qnet, prop)


def _decide(query, jobs: int = 1):
    """Decided within a budget of nodes (`tests.conftest.budgeted`), the attack off."""
    options = budgeted(disable=("attack",), jobs=jobs)
    return decide(query, options, time.monotonic() + options.timeout_s, Recorder())


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.usefixtures("phase_splitting_above_8_inputs")
def test_relu_split_verdicts_with_workers_agree_with_brute_force(jobs, rng, monkeypatch):
    """ReLU splitting with split constraints (10 inputs: more than input splitting takes), thresholds
    a few words below the true maximum of Y_0 (UNSAFE) and one word above it (SAFE), the attack
    off so that the branch and bound decides; with two workers from the first node on. Every
    verdict agrees with brute force and every UNSAFE input violates the property exactly."""
    monkeypatch.setattr(search_module, "PARALLEL_AFTER_S", 0.0)
    options = ImplementationOptions(FixedFormat(6, 4))
    outcomes = []
    for _ in range(3):
        net = random_network(rng, (10, 8, 8, 2), Activation.RELU, scale=0.6)
        qnet = quantize_network(net, options)
        center = rng.integers(-6, 6, 10)
        lo = [Fraction(int(c) - 1, 16) for c in center]
        hi = [Fraction(int(c) + 1, 16) for c in center]  # 3 words per input: 59,049 inputs
        probe = _threshold_query(qnet, lo, hi, Fraction(0))
        top = int(
            simulate(qnet, enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)).outputs[:, 0].max()
        )
        for offset in (-4, 1):  # words (one above the maximum: per-operand roundings read the
            # products of these 3-word boxes nearly exactly, and one unit above closed at the root)
            query = _threshold_query(qnet, lo, hi, Fraction(top + offset, 16))
            result = _decide(query, jobs)
            assert result.status is not EngineStatus.UNKNOWN, result.reason
            assert (result.status is EngineStatus.UNSAFE) == (offset < 0)
            if result.status is EngineStatus.UNSAFE:
                assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
            outcomes.append(result)
    assert any(r.status is EngineStatus.SAFE and r.counts.get("netlevel.nodes", 0) > 1 for r in outcomes)
    if jobs > 1:
        assert all(
            r.counts.get("netlevel.workers") == jobs
            for r in outcomes
            if r.counts.get("netlevel.nodes", 0) > 1
        )


def test_lp_refutes_nothing_an_execution_reaches_on_digits784():
    """The LP of a 784-256x6 node (the committed digits784 network, image 4 of the suite at
    eps 0.015, real arithmetic, at the root): HiGHS's presolve once called this relaxation
    infeasible although the centre's execution satisfies every row to 1e-14, and the search read
    that as SAFE. The LP's refutations now come from a rigorous dual bound: a clause that the
    relaxation cannot exclude (g <= 1e6 holds everywhere) is never refuted, and a refuted clause
    holds nowhere among sampled executions."""
    import importlib.util
    import sys

    from qverify.engine.netlevel.lp import solve_node
    from qverify.io import load_network
    from tests.conftest import ROOT

    folder = ROOT / "benchmarks" / "digits784"
    spec = importlib.util.spec_from_file_location("digits784_train", folder / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, train)
    spec.loader.exec_module(train)
    net = load_network(folder / "digits784.onnx")
    x, y, _, test_idx = train.dataset()
    chosen = train.chosen_images(net, x, y, test_idx)
    _, prop = next(iter(train.properties(x, y, chosen[4:5], ("0.015",))))
    query = query_for(quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT))), prop, REAL)
    search = Search(query, EngineOptions(), time.monotonic() + 600, Recorder())
    model, region = search.model, query.regions[0]
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    bounds = node_bounds(model, xl, xu, phases)
    rng = np.random.default_rng(0)
    points = np.vstack([(xl + xu) / 2, xl + rng.random((200, len(xl))) * (xu - xl)])
    outputs, _ = surrogate_forward(model, points)
    loose = search.forms[0]
    everywhere = type(loose)(loose.clause, loose.coefficients, loose.constant - 1e6, loose.strict)
    assert solve_node(model, bounds, xl, xu, [everywhere], False, time.monotonic() + 120).status is not (
        CheckStatus.UNSAT
    )
    for clause, forms in enumerate(search.by_clause):
        solution = solve_node(model, bounds, xl, xu, forms, False, time.monotonic() + 120)
        if solution.status is CheckStatus.UNSAT:
            margins = outputs @ np.array([f.coefficients for f in forms]).T + [f.constant for f in forms]
            assert np.all(margins.max(axis=1) > 0), clause
