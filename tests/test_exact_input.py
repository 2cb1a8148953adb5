"""Issue 45, item 2: an input layer too wide for an operand table has its product roundings read
exactly at an open root (`operand_rounding.StreamedInput`), against brute force:

- the closed form of the products' rounding errors equals `round_shift` in both roundings;
- the streamed reading is a lower bound of mu . x + lam . e over every word of the box, exact when
  every window is read (it meets the enumerated minimum), and still a lower bound when the windows
  are cut short (`STREAM_WINDOW_MAX`);
- the root's hidden layers tightened with it (`tighten_intermediate(exact_input=...)`) and the
  atoms read with it contain every execution, in every fixed-point rounding and overflow mode;
- the search that runs it decides as brute force does, and runs it;
- the root's reading carried to its ReLU-split children (`operand_rounding.SpanReader`: a row as
  a multiple of the same atom's root row, exact, plus a residual by its interval) is a lower bound
  of the enumerated minimum, meets it on the root's own rows, and the children's atom bounds read
  with it contain every execution with their phases.

The tables are switched off (`OPERAND_TABLE_VALUES` 0) so that these small networks take the path
of a 784-input layer at <16,16>.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from qverify.engine.netlevel import operand_rounding, search
from qverify.engine.netlevel.bounds import (
    exact_input_lower,
    input_layer,
    optimised_bound,
    tighten_intermediate,
)
from qverify.engine.netlevel.operand_rounding import SpanReader, StreamedInput, error_numerators
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, query_for
from qverify.engine.netlevel.search import decide
from qverify.engine.result import EngineStatus, Recorder
from qverify.network import Activation
from qverify.quant import FixedFormat, ImplementationOptions, Rounding, quantize_network, simulate
from qverify.quant.fixed import round_shift
from tests.conftest import budgeted, random_network
from tests.test_rounding_charge import FIXED, _fixed_box, _fixed_case, _property


@pytest.fixture
def no_tables(monkeypatch):
    monkeypatch.setattr(operand_rounding, "OPERAND_TABLE_VALUES", 0)


def test_error_numerators_are_round_shifts():
    rng = np.random.default_rng(4530)
    for frac_bits in (1, 4, 11, 16, 23):
        for rounding in Rounding:
            words = rng.integers(-(2**20), 2**20, 200)
            weights = rng.integers(-(2**20), 2**20, 40)
            products = words[:, None] * weights[None, :]
            expected = round_shift(products, frac_bits, rounding) * (1 << frac_bits) - products
            assert np.array_equal(error_numerators(words, weights, frac_bits, rounding), expected)


def _first_layer_values(qnet, grid, run, lam, mu) -> np.ndarray:
    """mu . x + lam . e per execution (rows: executions), exact rationals: e the first layer's
    rounding term z - (W x + b)."""
    frac = qnet.number.frac_bits
    words = grid.astype(np.int64)
    layer = qnet.layers[0]
    exact = words @ np.asarray(layer.weights, dtype=np.int64).T + (
        np.asarray(layer.bias, dtype=np.int64) << frac
    )
    error = run.layers[0].pre.astype(np.int64) * (1 << frac) - exact
    values = []
    for x, e in zip(words, error):
        row = []
        for r in range(len(lam)):
            linear = sum(Fraction(float(m)) * Fraction(int(v), qnet.number.scale) for m, v in zip(mu[r], x))
            rounding = sum(Fraction(float(c)) * int(d) for c, d in zip(lam[r], e)) / 2 ** (2 * frac)
            row.append(linear + rounding)
        values.append(row)
    return np.array(values, dtype=object)


@pytest.mark.parametrize("options", FIXED, ids=lambda o: o.key())
def test_streamed_reading_is_the_exact_minimum(options, monkeypatch):
    rng = np.random.default_rng(4531)
    checked = 0
    for sizes, words in (((3, 5, 2), 9), ((2, 6, 2), 40)):
        qnet, model, _, xl, xu, grid, run = _fixed_case(rng, options, sizes, words)
        fine = ~run.overflowed
        if not fine.all():
            continue  # (an overflowing execution leaves the statement)
        n_out = model.layers[0].n_out
        lam = rng.normal(0, 1, (10, n_out))
        lam[:3] = np.eye(n_out)[rng.integers(n_out, size=3)]
        weights = np.asarray(model.layers[0].op.rows().todense())
        mu = lam @ weights
        mu[8] *= 1e-3  # (a small linear part: the window covers most words)
        mu[9] = 0.0
        least = _first_layer_values(qnet, grid, run, lam, mu).min(axis=0)
        monkeypatch.setattr(operand_rounding, "STREAM_WINDOW_MAX", 1 << 20)
        exact = StreamedInput(model, 0, xl, xu).joint_lower(lam, mu)
        monkeypatch.setattr(operand_rounding, "STREAM_WINDOW_MAX", 2)
        cut = StreamedInput(model, 0, xl, xu).joint_lower(lam, mu)
        for r in range(len(lam)):
            assert Fraction(float(exact[r])) <= least[r], r
            assert Fraction(float(cut[r])) <= least[r], r
            # exact: the enumerated minimum, less the charge of its float32 and float64 sums
            assert float(least[r]) - exact[r] <= 1e-6 * (1 + abs(float(least[r]))), r
            assert cut[r] <= exact[r] + 1e-6 * (1 + abs(exact[r])), r  # (float32 sums apart)
        checked += 1
    assert checked


def test_a_reading_past_its_deadline_keeps_the_interval_reading(no_tables):
    rng = np.random.default_rng(4535)
    _, model, bounds, xl, xu, _, _ = _fixed_case(rng, FIXED[0], (4, 6, 2), 9)
    rows = rng.normal(0, 1, (5, model.layers[-1].n_out))
    linear = optimised_bound(model, bounds, rows, xl, xu, 2, input_statement=True)
    late = StreamedInput(model, input_layer(model), xl, xu, deadline=time.monotonic() - 1)
    assert np.all(late.joint_lower(linear.input_rows, linear.lam_input) == -np.inf)
    assert np.array_equal(exact_input_lower(linear, late), linear.lower)
    timely = StreamedInput(model, input_layer(model), xl, xu, deadline=time.monotonic() + 600)
    assert np.all(exact_input_lower(linear, timely) >= linear.lower)


@pytest.mark.parametrize("options", FIXED, ids=lambda o: o.key())
def test_root_read_exactly_contains_every_execution(options, no_tables):
    rng = np.random.default_rng(4532)
    tightened = 0
    for sizes, words in (((4, 6, 5, 2), 5), ((3, 8, 6, 3), 9), ((5, 6, 6, 2), 3)):
        _, model, bounds, xl, xu, _, run = _fixed_case(rng, options, sizes, words)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        fine = ~run.overflowed
        if bounds is None:
            assert not fine.any()
            continue
        before = [hi - lo for lo, hi in zip(bounds.pre_lo, bounds.pre_hi)]
        reader = StreamedInput(model, input_layer(model), xl, xu)
        bounds = tighten_intermediate(
            model, bounds, xl, xu, phases, 4, time.monotonic() + 600, exact_input=reader
        )
        if bounds is None:
            assert not fine.any()
            continue
        unit = model.unit
        for k, trace in enumerate(run.layers):
            values = trace.pre[fine].astype(np.float64) * unit
            assert np.all(values >= bounds.pre_lo[k]) and np.all(values <= bounds.pre_hi[k]), k
        tightened += sum(
            int(np.sum(hi - lo < width)) for lo, hi, width in zip(bounds.pre_lo, bounds.pre_hi, before)
        )
        last = len(model.layers) - 1
        rows = np.vstack([np.eye(model.layers[last].n_out), rng.normal(0, 1, (4, model.layers[last].n_out))])
        linear = optimised_bound(model, bounds, rows, xl, xu, 4, input_statement=True)
        assert linear.input_rows is not None
        lower = exact_input_lower(linear, reader)
        outputs = run.layers[last].post[fine].astype(np.float64) * unit
        assert np.all(outputs @ rows.T >= lower - 1e-12)
    assert tightened  # (the exact reading narrowed some bounds)


def _ten_inputs(rng, options, sizes, scale):
    """A random network on a 10-input box of 3 words an input, every execution of the box traced,
    which ones keep the statements (no overflow), and the largest Y_0 among them (None: none)."""
    qnet = quantize_network(random_network(rng, sizes, Activation.RELU, scale), options)
    lo, hi = _fixed_box(rng, qnet.number.scale, 10, 3)
    probe = query_for(qnet, _property(lo, hi, Fraction(0)))
    run = simulate(qnet, enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi), trace=True)
    fine = ~run.overflowed if run.detect_mode else np.ones(len(run.outputs), dtype=bool)
    if not fine.any():
        return qnet, lo, hi, run, fine, None
    top = qnet.output_reals(run.outputs[fine][int(np.argmax(run.outputs[fine, 0]))])[0]
    return qnet, lo, hi, run, fine, top


@pytest.mark.parametrize(
    "options", FIXED[:3] + [ImplementationOptions(FixedFormat(5, 11))], ids=lambda o: o.key()
)
def test_verdicts_with_the_exact_input_reading_agree_with_brute_force(
    options, no_tables, phase_splitting_above_8_inputs, monkeypatch
):
    """decide() on 10-input networks, thresholds at the exact maximum of Y_0 and one word above:
    the open roots read their input layer exactly (`netlevel.exact_input`; here from 10 roundings
    a neuron), and every verdict is brute force's."""
    monkeypatch.setattr(search, "EXACT_INPUT_MIN_ROUNDINGS", 1)
    rng = np.random.default_rng(4533)
    ran = 0
    for _ in range(2):
        qnet, lo, hi, _, fine, top = _ten_inputs(rng, options, (10, 8, 6, 2), 0.7)
        best = top if fine.all() else None  # (a detected overflow: a violation)
        for threshold in (top, top + Fraction(1, qnet.number.scale)):
            query = query_for(qnet, _property(lo, hi, threshold))
            recorder = Recorder()
            budget = budgeted(disable=("attack",))
            result = decide(query, budget, time.monotonic() + budget.timeout_s, recorder)
            assert result.status is not EngineStatus.UNKNOWN, result.reason
            assert (result.status is EngineStatus.UNSAFE) == (best is None or threshold <= best), threshold
            if result.status is EngineStatus.UNSAFE:
                assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
            ran += "netlevel.exact_input" in recorder.times
    assert ran


@pytest.mark.parametrize("options", FIXED, ids=lambda o: o.key())
def test_span_reading_is_a_lower_bound(options, monkeypatch):
    """SpanReader: a row on its basis row alone reads the enumerated minimum of mu . x + lam . e
    (one word a block, every word in the window) and a lower bound of it with blocks of 4 words
    and 2-word windows; rows off their basis row (a residual read by its interval, scaled rows,
    a negated row: c < 0) still bound it from below."""
    rng = np.random.default_rng(4536)
    checked = 0
    for sizes, words in (((3, 5, 2), 9), ((2, 6, 2), 40)):
        qnet, model, bounds, xl, xu, grid, run = _fixed_case(rng, options, sizes, words)
        if bounds is None or not (~run.overflowed).all():
            continue  # (an overflowing execution leaves the statement)
        n_out = model.layers[0].n_out
        basis = rng.normal(0, 1, (4, n_out)).astype(np.float32).astype(np.float64)
        own = np.array([0, 1, 2, 3, 0, 1, 2, 3])
        lam = basis[own].copy()
        lam[4] += rng.normal(0, 0.3, n_out)  # (a residual)
        lam[5] *= 2.5
        lam[6] *= -1.0
        lam[7] = rng.normal(0, 1, n_out)
        weights = np.asarray(model.layers[0].op.rows().todense())
        mu = lam @ weights
        mu[3] *= 1e-3  # (a small linear part: the minimum far from the range's end)
        least = _first_layer_values(qnet, grid, run, lam, mu).min(axis=0)
        err_lo = np.broadcast_to(bounds.err_lo[0], lam.shape)
        err_hi = np.broadcast_to(bounds.err_hi[0], lam.shape)
        readings = {}
        for block, window in ((1, 1 << 20), (4, 1 << 20), (4, 2)):
            monkeypatch.setattr(operand_rounding, "SPAN_BLOCK", block)
            monkeypatch.setattr(operand_rounding, "STREAM_WINDOW_MAX", window)
            reader = SpanReader(StreamedInput(model, 0, xl, xu), basis, bounds.err_lo[0], bounds.err_hi[0])
            readings[block, window] = reader.joint_lower(lam, mu, own, err_lo, err_hi)
        for r in range(len(lam)):
            for found in readings.values():
                assert Fraction(float(found[r])) <= least[r], r
        exact = readings[1, 1 << 20]
        for r in range(4):  # (on the basis row: the enumerated minimum less the float charges)
            assert float(least[r]) - exact[r] <= 1e-6 * (1 + abs(float(least[r]))), r
        checked += 1
    assert checked


@pytest.mark.parametrize("options", FIXED, ids=lambda o: o.key())
def test_split_nodes_read_on_the_span_contain_every_execution(
    options, no_tables, phase_splitting_above_8_inputs, monkeypatch
):
    """The root's exact stage run, then its ReLU-split children bounded as one batch with every open
    atom row read on the root's span (`SPAN_REACH` unbounded): each child's atom bounds lie below
    the margin of every enumerated execution with the child's phases."""
    monkeypatch.setattr(search, "EXACT_INPUT_MIN_ROUNDINGS", 1)
    monkeypatch.setattr(search, "SPAN_REACH", np.inf)
    rng = np.random.default_rng(4537)
    read = 0
    for _ in range(6):
        qnet, lo, hi, run, fine, top = _ten_inputs(rng, options, (10, 12, 8, 3), 1.0)
        if top is None:
            continue
        # (one word above the maximum: SAFE by a word, so the root stays open)
        query = query_for(qnet, _property(lo, hi, top + Fraction(1, qnet.number.scale)))
        recorder = Recorder()
        finder = search.Search(query, budgeted(disable=("attack",)), time.monotonic() + 600, recorder)
        model = finder.model
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        region = query.regions[0]
        verdict = finder.process(search.Node(0, region.lo.copy(), region.hi.copy(), phases, None, 0, 0))
        children = [child for child in verdict.children if child.split is not None]
        if finder.span is None or not children:
            continue
        found = search.split_batch_bounds(model, children, finder.invariants, search.REBOUND_AFTER_SPLIT)
        if found.bounds is None:
            continue
        members = [children[i] for i in found.members]
        lower = finder.split_batch_atoms(members, found.bounds, found.xl, found.xu)[0]
        margins = (run.outputs.astype(np.float64) * model.unit) @ finder.atom_matrix.T + finder.atom_constants
        for b, child in enumerate(members):
            inside = fine.copy()
            for k, phase in enumerate(child.phases):
                pre = run.layers[k].pre.astype(np.float64)
                inside &= np.all(
                    np.where(phase > 0, pre >= 0, True) & np.where(phase < 0, pre <= 0, True), axis=1
                )
            assert np.all(margins[inside] >= lower[b] - 1e-12)
        read += recorder.counts.get("netlevel.span_rows", 0)
    assert read  # (some child's rows were read on the span)
