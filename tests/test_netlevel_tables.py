"""The network level on sigmoid and tanh (`netlevel.lookup`: the C's lookup tables as staircases)
against brute force.

- the staircase is the simulator's table function (`lut_fixed`, `lut_float`) at every word of the
  table's range and at every float around its thresholds, for several table designs;
- its relaxation a z + c <= value(z) <= s z + t holds at every word of random intervals (fixed
  point), at the floats of random intervals and around every threshold in them (IEEE), and at
  random reals and the thresholds' neighbours against the exact formula (real arithmetic);
- random sigmoid/tanh networks: every layer's bounds contain every execution of enumerated boxes
  (with a table neuron split either way), `decide` agrees with brute force (input splitting and,
  past 8 inputs, splits of table neurons), every UNSAFE is an exact violation and a sample is
  replayed through the compiled C; in real arithmetic, thresholds at the best exact output of a
  dense sample are UNSAFE and every SAFE verdict holds on the sample;
- `exact.real_outputs` reads the tables' formula exactly.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from qverify.codegen import CompiledNetwork, render_network
from qverify.engine.netlevel.bounds import node_bounds, with_phase
from qverify.engine.netlevel.exact import real_outputs
from qverify.engine.netlevel.lookup import lut_staircase
from qverify.engine.netlevel.model import build_model, unsupported_reason
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, Arithmetic, NetworkQuery, query_for
from qverify.engine.netlevel.search import decide
from qverify.engine.result import EngineOptions, EngineStatus, Recorder
from qverify.network import Activation
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    LutDesign,
    QuantizedNetwork,
    Rounding,
    quantize_network,
    simulate,
)
from qverify.quant.lut import lut_fixed, lut_float
from tests.conftest import random_network
from tests.netlevel_reference import exact_point, exact_table, reference_outputs

# the 10- and 12-input networks here exercise table splitting (`tests.conftest`)
pytestmark = pytest.mark.usefixtures("phase_splitting_above_8_inputs")

ACTIVATIONS = (Activation.SIGMOID, Activation.TANH)
FORMATS = [
    ImplementationOptions(FixedFormat(8, 8)),
    ImplementationOptions(FixedFormat(6, 6, Rounding.FLOOR), accumulation=Accumulation.WIDE),
    ImplementationOptions(FixedFormat(16, 16), lut=LutDesign(resolution=1)),
    ImplementationOptions(FloatFormat(FloatKind.FLOAT)),
    ImplementationOptions(FloatFormat(FloatKind.DOUBLE)),  # (ordinals span more than int64's range)
    ImplementationOptions(FloatFormat(FloatKind.HALF), lut=LutDesign(eps=0.01, resolution=None)),
]


def _qnet(rng, sizes, activation, options) -> QuantizedNetwork:
    return quantize_network(random_network(rng, sizes, activation, scale=0.8), options)


@pytest.mark.parametrize("options", FORMATS, ids=lambda o: o.key())
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a.value)
def test_staircase_is_the_simulators_table(activation, options, rng):
    qnet = _qnet(rng, (2, 2, 1), activation, options)
    lut = qnet.lut_for(activation)
    stairs = lut_staircase(qnet, activation, False)
    if qnet.is_fixed:
        words = np.arange(-lut.half_range_q - 3, lut.half_range_q + 4)
        z = words / qnet.number.scale
        expected = lut_fixed(lut, words) / qnet.number.scale
    else:
        dtype = qnet.number.dtype
        thresholds = stairs.upper_table[0].astype(dtype)
        z = np.concatenate(
            [
                rng.uniform(-lut.half_range - 2, lut.half_range + 2, 20000).astype(dtype),
                thresholds,
                np.nextafter(thresholds, dtype(-np.inf)),
                np.nextafter(thresholds, dtype(np.inf)),
            ]
        ).astype(np.float64)
        expected = lut_float(lut, z, qnet.number).astype(np.float64)
    assert np.array_equal(stairs.values(z[:, None])[:, 0], expected)


@pytest.mark.parametrize("options", FORMATS + ["real"], ids=lambda o: o if isinstance(o, str) else o.key())
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a.value)
def test_table_relaxation_holds(activation, options, rng):
    real = options == "real"
    qnet = _qnet(
        rng, (2, 2, 1), activation, ImplementationOptions(FloatFormat(FloatKind.FLOAT)) if real else options
    )
    stairs = lut_staircase(qnet, activation, real)
    lut = qnet.lut_for(activation)
    reach = lut.half_range + 1
    checked = 0
    for width in (0.05, 0.5, 3.0, 2 * reach):
        neurons = 4 if real else 16
        lo = rng.uniform(-reach - 1, reach, neurons)
        hi = lo + rng.uniform(0, width, neurons)
        a, c, s, t = stairs.relaxation(lo, hi)
        for j in range(neurons):
            if qnet.is_fixed and not real:  # every word (a sample and the steps' ends on wide intervals)
                scale = qnet.number.scale
                words = np.arange(np.ceil(lo[j] * scale), np.floor(hi[j] * scale) + 1)
                if len(words) > 20000:
                    ends = stairs.upper_table[0] * scale
                    ends = ends[(ends >= words[0]) & (ends <= words[-1])]
                    words = np.concatenate([rng.choice(words, 20000), ends, np.maximum(ends - 1, words[0])])
                z = words / scale
            else:
                inside = stairs.upper_table[0][
                    (stairs.upper_table[0] >= lo[j]) & (stairs.upper_table[0] <= hi[j])
                ]
                if real:  # (exact rationals: a sample of the thresholds)
                    inside = rng.permutation(inside)[:12]
                z = np.concatenate(
                    [
                        rng.uniform(lo[j], hi[j], 40 if real else 500),
                        inside,
                        np.nextafter(inside, -np.inf),
                        [lo[j], hi[j]],
                    ]
                )
                z = z[(z >= lo[j]) & (z <= hi[j])]
                if not real:
                    dtype = qnet.number.dtype
                    z = z.astype(dtype).astype(np.float64)
                    z = z[(z >= lo[j]) & (z <= hi[j])]
            if real:
                values = [exact_table(qnet, activation, Fraction(float(v))) for v in z]
                for v, value in zip(z, values):
                    assert Fraction(a[j]) * Fraction(float(v)) + Fraction(c[j]) <= value
                    assert value <= Fraction(s[j]) * Fraction(float(v)) + Fraction(t[j])
            else:
                values = stairs.values(np.broadcast_to(z[:, None], (len(z), neurons)))[:, j]
                assert np.all(a[j] * z + c[j] <= values) and np.all(values <= s[j] * z + t[j])
            checked += len(z)
    assert checked > 400


def _threshold(n: int, lo, hi, threshold: Fraction) -> Property:
    atoms = (Atom(((0, Fraction(1)),), -threshold, Relation.GE),)
    return Property("table", (Box(tuple(lo), tuple(hi)),), OutputCondition((Clause(atoms),)))


def _box(qnet: QuantizedNetwork, rng, words: int):
    n = qnet.n_inputs
    if qnet.is_fixed:
        scale = qnet.number.scale
        start = rng.integers(-scale // 2, scale // 2, n)
        return [Fraction(int(v), scale) for v in start], [Fraction(int(v) + words - 1, scale) for v in start]
    dtype = qnet.number.dtype
    start = rng.uniform(-0.5, 0.5, n).astype(dtype)
    end = start.copy()
    for _ in range(words - 1):
        end = np.nextafter(end, dtype(np.inf))
    return [Fraction(float(v)) for v in start], [Fraction(float(v)) for v in end]


def _decide(query: NetworkQuery, disable=()):
    return decide(query, EngineOptions(timeout_s=120, disable=disable), time.monotonic() + 120, Recorder())


@pytest.mark.parametrize("options", FORMATS[:2] + FORMATS[3:], ids=lambda o: o.key())
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a.value)
def test_table_networks_agree_with_brute_force(activation, options, rng, tmp_path):
    replayed = 0
    for sizes, words in (((3, 5, 4, 2), 12), ((12, 6, 2), 2)):
        qnet = _qnet(rng, sizes, activation, options)
        lo, hi = _box(qnet, rng, words)
        probe = query_for(qnet, _threshold(sizes[0], lo, hi, Fraction(0)))
        assert unsupported_reason(probe) is None
        region = probe.regions[0]
        grid = enumerate_box(qnet, region.lo, region.hi)
        run = simulate(qnet, grid, trace=True)
        scale = 1.0 / qnet.number.scale if qnet.is_fixed else 1.0
        outputs = run.outputs[:, 0].astype(np.float64) * scale
        # bounds: every execution, and a table neuron of the first layer split either way
        model = build_model(probe)
        xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        words_box = (region.lo, region.hi) if qnet.is_fixed else None
        plain = node_bounds(model, xl, xu, phases, region_words=words_box)
        cases = [(plain, np.ones(len(grid), dtype=bool))]
        pres = [trace.pre.astype(np.float64) * scale for trace in run.layers]
        at = float(np.floor((plain.pre_lo[0][0] + plain.pre_hi[0][0]) / 2 / scale) * scale)
        for phase in (1, -1):
            child = with_phase(model, plain, 0, 0, phase, at)
            if child is not None:
                child = node_bounds(model, xl, xu, phases, child, 1, None, words_box)
            selected = pres[0][:, 0] >= at if phase > 0 else pres[0][:, 0] <= at
            cases.append((child, selected))
        for bounds, selected in cases:
            if bounds is None:
                assert not selected.any()
                continue
            for k, trace in enumerate(run.layers):
                post_lo, post_hi = bounds.post(model, k)
                assert np.all(pres[k][selected] >= bounds.pre_lo[k]) and np.all(
                    pres[k][selected] <= bounds.pre_hi[k]
                )
                posts = trace.post[selected].astype(np.float64) * scale
                assert np.all(posts >= post_lo) and np.all(posts <= post_hi)
        # verdicts at the true maximum of Y_0 and one implementation value above it
        top = Fraction(float(outputs.max()))
        if qnet.is_fixed:
            above = top + Fraction(1, qnet.number.scale)
        else:
            dtype = qnet.number.dtype
            above = Fraction(float(np.nextafter(dtype(float(top)), dtype(np.inf))))
        for threshold in (top, above):
            query = query_for(qnet, _threshold(sizes[0], lo, hi, threshold))
            truth = bool(np.any(outputs >= float(threshold)))
            result = _decide(query, ("attack",))
            assert result.status is not EngineStatus.UNKNOWN, result.reason
            assert (result.status is EngineStatus.UNSAFE) == truth, (threshold, result)
            if result.status is EngineStatus.UNSAFE:
                point = np.array(result.counterexample)
                assert query.violation(point) != NO_VIOLATION
                if not replayed:
                    compiled = CompiledNetwork(render_network(qnet), tmp_path, qnet.is_integer)
                    replay = compiled.run(point[None, :])
                    assert np.array_equal(replay.outputs, simulate(qnet, point[None, :]).outputs)
                    replayed += 1


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a.value)
def test_real_arithmetic_tables_against_dense_sampling(activation, rng):
    """Real arithmetic has no enumeration: thresholds at the best exact output of 400 sampled
    inputs must be UNSAFE (that input violates), and one above it must not be contradicted by any
    sample when SAFE."""
    for sizes in ((3, 5, 2), (10, 6, 2)):
        qnet = _qnet(rng, sizes, activation, ImplementationOptions(FloatFormat(FloatKind.FLOAT)))
        lo = rng.uniform(-1, 0, sizes[0]).astype(np.float32).astype(np.float64)
        hi = (lo + 0.5).astype(np.float32).astype(np.float64)
        points = lo + rng.random((400, sizes[0])) * (hi - lo)
        points = np.clip(points.astype(np.float32).astype(np.float64), lo, hi)
        exact = [real_outputs(qnet, point)[0] for point in points]
        best = max(exact)
        box = ([Fraction(v) for v in lo], [Fraction(v) for v in hi])
        query = query_for(qnet, _threshold(sizes[0], *box, best), Arithmetic.REAL)
        result = _decide(query)
        assert result.status is EngineStatus.UNSAFE, result
        assert query.violation(np.array(result.counterexample)) == 0
        above = query_for(qnet, _threshold(sizes[0], *box, best + Fraction(1, 1000)), Arithmetic.REAL)
        verdict = _decide(above)
        if verdict.status is EngineStatus.SAFE:
            assert all(value < best + Fraction(1, 1000) for value in exact)


def test_real_outputs_read_the_tables_exactly(rng):
    for activation in ACTIVATIONS:
        for number in (FixedFormat(8, 8), FloatFormat(FloatKind.FLOAT)):
            qnet = _qnet(rng, (3, 4, 2), activation, ImplementationOptions(number))
            x, reals = exact_point(qnet, rng)
            assert real_outputs(qnet, x) == reference_outputs(qnet, reals)
