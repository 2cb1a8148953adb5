"""The network-level strategy (qverify.engine.netlevel) against brute force.

Tiny random networks in many implementation options: every input word (or float value) of the
region is run through the bit-exact simulator, which gives the true verdict; `decide` must never
disagree with it. The bounds themselves are checked to contain every simulated value. REAL
arithmetic is compared with an exact enumeration of ReLU patterns (scipy LPs, thresholds with a
clear margin), and ACAS Xu / a 784-input network are decided end to end.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import linprog

from qverify.engine.netlevel.bounds import node_bounds, tighten_intermediate
from qverify.engine.netlevel.exact import real_outputs
from qverify.engine.netlevel.model import build_model
from qverify.engine.netlevel.points import count, enumerate_box, ordinals, values_of
from qverify.engine.netlevel.query import NO_VIOLATION, Arithmetic, NetworkQuery, query_for
from qverify.engine.netlevel.search import Search, decide
from qverify.engine.result import EngineStatus, Recorder
from qverify.network import Activation
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation, robustness
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
from tests.conftest import ACAS, NODE_BUDGET, SAFETY_NET_S, budgeted, random_network


def _decide(query: NetworkQuery, disable: tuple[str, ...] = (), max_nodes: int = NODE_BUDGET):
    """The network level's verdict within a budget of nodes (the timeout only a safety net)."""
    options = budgeted(disable=disable, max_nodes=max_nodes)
    return decide(query, options, time.monotonic() + options.timeout_s, Recorder())


RELU_SPLIT_NODES = 1500  # per query of test_relu_splitting_agrees_with_brute_force


def _threshold_property(box_lo, box_hi, output: int, threshold: Fraction, second: int | None) -> Property:
    """Unsafe: Y_output >= threshold (and Y_output >= Y_second when given)."""
    atoms = [Atom(((output, Fraction(1)),), -threshold, Relation.GE)]
    if second is not None:
        atoms.append(Atom(((output, Fraction(1)), (second, Fraction(-1))), Fraction(0), Relation.GE))
    return Property(
        "threshold", (Box(tuple(box_lo), tuple(box_hi)),), OutputCondition((Clause(tuple(atoms)),))
    )


def _truth(query: NetworkQuery) -> bool:
    """Brute force: does some input of the region violate? (every input through the simulator,
    outputs compared exactly)."""
    region = query.regions[0]
    grid = enumerate_box(query.qnet, region.lo, region.hi)
    run = simulate(query.qnet, grid)
    if run.detect_mode and run.detected.any():
        return True
    outputs = query.qnet.output_reals
    for row in range(len(grid)):
        if query.unsafe.violated_clause_exact(outputs(run.outputs[row])) != -1:
            return True
    return False


FIXED_OPTIONS = [
    ImplementationOptions(FixedFormat(4, 4)),
    ImplementationOptions(FixedFormat(4, 4, Rounding.FLOOR, Overflow.WRAP), layout=Layout.BALANCED),
    ImplementationOptions(FixedFormat(6, 4, Rounding.FLOOR), accumulation=Accumulation.WIDE),
    ImplementationOptions(FixedFormat(6, 4, overflow=Overflow.WRAP)),
    ImplementationOptions(FixedFormat(8, 8), layout=Layout.BALANCED),
    ImplementationOptions(FixedFormat(8, 8, Rounding.FLOOR), accumulation=Accumulation.WIDE),
    ImplementationOptions(FixedFormat(4, 4, overflow=Overflow.DETECT)),
]


def _fixed_cases(rng: np.random.Generator, options: ImplementationOptions, sizes: tuple[int, ...]):
    """Queries around the true maximum of Y_0: at it (UNSAFE), one word above (SAFE), with and
    without a second atom."""
    net = random_network(rng, sizes, Activation.RELU, scale=0.8)
    qnet = quantize_network(net, options)
    fmt = options.number
    span = 48 if sizes[0] == 2 else 14  # more inputs than one enumeration: bounds must split
    center = rng.integers(-8, 8, sizes[0])
    lo = [Fraction(int(c) - span // 2, fmt.scale) for c in center]
    hi = [Fraction(int(c) + span - span // 2, fmt.scale) for c in center]
    probe = query_for(qnet, _threshold_property(lo, hi, 0, Fraction(0), None))
    grid = enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)
    top = int(simulate(qnet, grid).outputs[:, 0].max())
    for offset, second in itertools.product((0, 1), (None, 1)):
        threshold = Fraction(top + offset, fmt.scale)
        yield query_for(qnet, _threshold_property(lo, hi, 0, threshold, second))


@pytest.mark.parametrize("options", FIXED_OPTIONS, ids=lambda o: o.key())
def test_fixed_point_verdicts_agree_with_brute_force(options, rng):
    wrong, decided, total, split = [], 0, 0, 0
    for sizes in ((2, 4, 4, 2), (3, 5, 5, 3)):
        for index, query in enumerate(_fixed_cases(rng, options, sizes)):
            truth = _truth(query)
            for disable in [("attack",) if index % 2 else ()]:
                result = _decide(query, disable=disable)
                total += 1
                if result.status is EngineStatus.UNKNOWN:
                    continue
                decided += 1
                split += result.counts.get("netlevel.nodes", 0) > 1
                if (result.status is EngineStatus.UNSAFE) != truth:
                    wrong.append((sizes, query.unsafe.clauses[0].text(), disable, result))
                if result.status is EngineStatus.UNSAFE:
                    assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
    assert not wrong
    assert decided == total
    assert split > 0  # some verdicts needed the branch and bound, not only the attack


@pytest.mark.parametrize("options", FIXED_OPTIONS[:2] + FIXED_OPTIONS[4:5], ids=lambda o: o.key())
def test_bounds_contain_every_execution(options, rng):
    """node_bounds over a box (with and without a ReLU phase fixed) contains every simulated
    pre-activation value of the executions it describes."""
    for _ in range(4):
        net = random_network(rng, (3, 5, 5, 3), Activation.RELU, scale=0.8)
        qnet = quantize_network(net, options)
        fmt = options.number
        lo = rng.integers(-20, 0, 3)
        hi = lo + rng.integers(0, 9, 3)
        query = query_for(
            qnet,
            _threshold_property(
                [Fraction(int(v), fmt.scale) for v in lo],
                [Fraction(int(v), fmt.scale) for v in hi],
                0,
                Fraction(0),
                None,
            ),
        )
        model = build_model(query)
        grid = enumerate_box(qnet, query.regions[0].lo, query.regions[0].hi)
        run = simulate(qnet, grid, trace=True)
        fine = ~run.overflowed
        xl, xu = model.input_reals(query.regions[0].lo), model.input_reals(query.regions[0].hi)
        for phase_layer, phase in ((None, 0), (1, 1), (1, -1)):
            phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
            selected = fine.copy()
            if phase_layer is not None:
                phases[phase_layer][2] = phase
                values = run.layers[phase_layer].pre[:, 2]
                selected &= values > 0 if phase > 0 else values <= 0
            bounds = node_bounds(
                model, xl, xu, phases, region_words=(query.regions[0].lo, query.regions[0].hi)
            )
            if bounds is None:
                assert not selected.any()
                continue
            for k, trace in enumerate(run.layers):
                values = trace.pre[selected].astype(np.float64) * model.unit
                assert np.all(values >= bounds.pre_lo[k] - 1e-12)
                assert np.all(values <= bounds.pre_hi[k] + 1e-12)


def test_float_boxes_end_at_single_values(rng):
    """float32: 61 x 61 values, thresholds at the exact maximum of Y_0 and one float above it."""
    for _ in range(3):
        net = random_network(rng, (2, 8, 8, 2), Activation.RELU)
        qnet = quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT)))
        start = np.float32(rng.uniform(-1, 1, 2))
        lo_numbers = ordinals(qnet, start.astype(np.float64))
        lo = values_of(qnet, lo_numbers)
        hi = values_of(qnet, lo_numbers + 60)
        box = ([Fraction(float(v)) for v in lo], [Fraction(float(v)) for v in hi])
        probe = query_for(qnet, _threshold_property(*box, 0, Fraction(0), None))
        assert count(qnet, probe.regions[0].lo, probe.regions[0].hi) == 61 * 61
        grid = enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)
        top = np.float32(simulate(qnet, grid).outputs[:, 0].max())
        above = np.nextafter(top, np.float32(np.inf))
        for threshold, expected in ((top, EngineStatus.UNSAFE), (above, EngineStatus.SAFE)):
            query = query_for(qnet, _threshold_property(*box, 0, Fraction(float(threshold)), None))
            result = _decide(query, disable=("attack",))
            assert result.status is expected, result


def _real_maximum(net, lo: np.ndarray, hi: np.ndarray) -> float:
    """max Y_0 of a one-hidden-layer... any small ReLU net over a box: one LP per ReLU pattern."""
    layers = net.layers
    hidden = sum(layer.n_out for layer in layers[:-1])
    best = -np.inf
    for pattern in itertools.product((0, 1), repeat=hidden):
        # express each layer affinely in x under the pattern, with sign constraints
        a_rows, b_rows = [], []
        weights, bias = np.eye(len(lo)), np.zeros(len(lo))
        used = 0
        for layer in layers[:-1]:
            pre_w, pre_b = layer.weights @ weights, layer.weights @ bias + layer.bias
            mask = np.array(pattern[used : used + layer.n_out], dtype=float)
            used += layer.n_out
            for j in range(layer.n_out):
                sign = -1.0 if mask[j] else 1.0  # active: pre >= 0 -> -pre <= 0
                a_rows.append(sign * pre_w[j])
                b_rows.append(-sign * pre_b[j])
            weights, bias = pre_w * mask[:, None], pre_b * mask
        out = layers[-1]
        c_w, c_b = (out.weights @ weights)[0], (out.weights @ bias + out.bias)[0]
        solution = linprog(-c_w, A_ub=np.array(a_rows), b_ub=np.array(b_rows), bounds=list(zip(lo, hi)))
        if solution.status == 0:
            best = max(best, float(c_w @ solution.x + c_b))
    return best


def test_real_arithmetic_agrees_with_pattern_enumeration(rng):
    for _ in range(4):
        net = random_network(rng, (3, 4, 4, 2), Activation.RELU)
        qnet = quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT)))
        real_net = type(net)(
            tuple(
                type(layer)(
                    qlayer.weights.astype(np.float64), qlayer.bias.astype(np.float64), layer.activation
                )
                for layer, qlayer in zip(net.layers, qnet.layers)
            )
        )
        lo, hi = np.array([-1.0, -0.5, 0.0]), np.array([0.5, 1.0, 1.0])
        top = _real_maximum(real_net, lo, hi)
        margin = 1e-3 * (1 + abs(top))
        box = ([Fraction(v) for v in lo], [Fraction(v) for v in hi])
        for threshold, expected in ((top - margin, EngineStatus.UNSAFE), (top + margin, EngineStatus.SAFE)):
            prop = _threshold_property(*box, 0, Fraction(threshold), None)
            query = query_for(qnet, prop, Arithmetic.REAL)
            result = _decide(query, disable=("attack",))
            assert result.status is expected, (threshold, top, result)


def test_real_outputs_are_exact(rng):
    net = random_network(rng, (3, 6, 2), Activation.RELU)
    for number in (FixedFormat(8, 8), FloatFormat(FloatKind.FLOAT), FloatFormat(FloatKind.DOUBLE)):
        qnet = quantize_network(net, ImplementationOptions(number))
        x = rng.uniform(-1, 1, 3)
        x = (
            np.round(x * 256).astype(np.int64)
            if qnet.is_fixed
            else x.astype(qnet.number.dtype).astype(np.float64)
        )
        reals = [Fraction(int(v), 256) for v in x] if qnet.is_fixed else [Fraction(float(v)) for v in x]
        for layer in qnet.layers:
            constant = (lambda v: Fraction(int(v), 256)) if qnet.is_fixed else (lambda v: Fraction(float(v)))
            pre = [
                sum(
                    (constant(layer.weights[j, i]) * reals[i] for i in range(len(reals))),
                    constant(layer.bias[j]),
                )
                for j in range(layer.n_out)
            ]
            reals = [max(v, Fraction(0)) for v in pre] if layer.activation is Activation.RELU else pre
        assert real_outputs(qnet, x) == reals


def test_unsupported_networks_fall_back_with_a_reason(rng):
    """A table that is not a monotone staircase (hand-edited: reversed) is declined with a reason
    (the scalar path then executes it); the table as designed is decided at network level, and so
    is ReLU6 (issue 41: `activations.Clamp`), with brute force's verdict."""
    net = random_network(rng, (2, 3, 2), Activation.TANH)
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(8, 8)))
    prop = _threshold_property([0, 0], [Fraction(1, 2)] * 2, 0, Fraction(0), None)
    assert _decide(query_for(qnet, prop)).status is not EngineStatus.UNKNOWN
    (lut,) = qnet.luts
    edited = dataclasses.replace(qnet, luts=(dataclasses.replace(lut, table=lut.table[::-1].copy()),))
    result = _decide(query_for(edited, prop))
    assert result.status is EngineStatus.UNKNOWN
    assert result.reason.startswith("netlevel: ") and "tanh table is not monotone" in result.reason
    clipped = quantize_network(
        random_network(rng, (2, 3, 2), Activation.RELU6), ImplementationOptions(FixedFormat(8, 8))
    )
    query = query_for(clipped, prop)
    result = _decide(query)
    region = query.regions[0]
    outputs = simulate(clipped, enumerate_box(clipped, region.lo, region.hi)).outputs
    truth = any(query.unsafe.violated_clause_exact(clipped.output_reals(row)) != -1 for row in outputs)
    assert result.status is (EngineStatus.UNSAFE if truth else EngineStatus.SAFE), result.reason


@pytest.mark.parametrize("arithmetic", [Arithmetic.IMPLEMENTATION, Arithmetic.REAL])
def test_acas_phi3_counterexample(arithmetic):
    from qverify.io import load_network
    from qverify.properties import read_vnnlib

    net = load_network(ACAS / "onnx" / "ACASXU_run2a_1_9_batch_2000.onnx")
    prop = read_vnnlib(ACAS / "vnnlib" / "prop_3.vnnlib")
    number = FixedFormat(16, 16) if arithmetic is Arithmetic.IMPLEMENTATION else FloatFormat(FloatKind.FLOAT)
    query = query_for(quantize_network(net, ImplementationOptions(number)), prop, arithmetic)
    result = _decide(query)
    assert result.status is EngineStatus.UNSAFE
    assert query.violation(np.array(result.counterexample)) == 0
    assert "netlevel.attack" in result.times_s


def test_acas_phi1_safe_in_real_arithmetic():
    from qverify.io import load_network
    from qverify.properties import read_vnnlib

    net = load_network(ACAS / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx")
    prop = read_vnnlib(ACAS / "vnnlib" / "prop_1.vnnlib")
    query = query_for(
        quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT))), prop, Arithmetic.REAL
    )
    result = _decide(query)
    assert result.status is EngineStatus.SAFE
    assert result.counts["netlevel.nodes"] > 0


def test_image_size_linf_queries(rng):
    """784 inputs (input splitting is hopeless): a small radius proved, a large one refuted."""
    net = random_network(rng, (784, 24, 16, 10), Activation.RELU, scale=0.05)
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(16, 16)))
    center = rng.uniform(0, 1, 784)
    label = int(np.argmax(simulate(qnet, np.round(center * 65536).astype(np.int64)[None]).outputs[0]))
    domain = ([0] * 784, [1] * 784)
    small = query_for(qnet, robustness(center.tolist(), "0.001", label, 10, domain=domain))
    assert _decide(small).status is EngineStatus.SAFE
    large = query_for(qnet, robustness(center.tolist(), "0.5", label, 10, domain=domain))
    result = _decide(large)
    assert result.status is EngineStatus.UNSAFE
    assert large.violation(np.array(result.counterexample)) != NO_VIOLATION


def test_search_reports_stage_times(rng):
    net = random_network(rng, (2, 4, 2), Activation.RELU)
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(8, 8)))
    query = query_for(qnet, _threshold_property([0, 0], [Fraction(1, 2)] * 2, 0, Fraction(1000), None))
    recorder = Recorder()
    search = Search(query, budgeted(), time.monotonic() + SAFETY_NET_S, recorder)
    result = search.run()
    assert result.status is EngineStatus.SAFE
    assert "netlevel.bounds" in result.times_s or "netlevel.enumerate" in result.times_s


@pytest.mark.parametrize("number", [FixedFormat(6, 4), FloatFormat(FloatKind.FLOAT)], ids=str)
def test_enumerate_box_of_many_inputs_few_varying(number, rng):
    """A 64-input box that holds few points (most inputs pinned to one value) is enumerated: numpy's
    meshgrid takes at most 32 axes, so only the varying inputs enter the grid (an image-sized stability
    box of `qverify diff` failed here)."""
    qnet = quantize_network(
        random_network(rng, (64, 4, 2), Activation.RELU), ImplementationOptions(number=number)
    )
    lo = values_of(qnet, ordinals(qnet, np.linspace(-1.0, 1.0, 64)))
    hi = lo.copy()
    varying = ordinals(qnet, lo[[3, 40]]) + np.array([2, 1])
    hi[[3, 40]] = values_of(qnet, varying)
    grid = enumerate_box(qnet, lo, hi)
    assert grid.shape == (6, 64) == (count(qnet, lo, hi), 64)
    assert len({row.tobytes() for row in grid}) == 6
    assert np.all((grid >= lo) & (grid <= hi)) and np.array_equal(
        np.delete(grid, [3, 40], axis=1), np.tile(np.delete(lo, [3, 40]), (6, 1))
    )


@pytest.mark.parametrize("options", FIXED_OPTIONS[:1] + FIXED_OPTIONS[4:5], ids=lambda o: o.key())
def test_optimised_intermediate_bounds_contain_every_execution(options, rng):
    """`tighten_intermediate` (alpha-CROWN on the hidden layers' own bounds) only shrinks the
    bounds, and they still contain every simulated pre-activation value, with and without a ReLU
    phase fixed (on a deeper network, so that optimised slopes of one layer serve the next)."""
    shrunk = 0
    for _ in range(3):
        net = random_network(rng, (3, 6, 6, 6, 2), Activation.RELU, scale=0.8)
        qnet = quantize_network(net, options)
        fmt = options.number
        words_per_unit = fmt.scale // 16  # boxes about one unit wide: many ReLUs open
        lo = rng.integers(-24, 0, 3) * words_per_unit
        hi = lo + rng.integers(10, 20, 3) * words_per_unit
        box = [[Fraction(int(v), fmt.scale) for v in ends] for ends in (lo, hi)]
        query = query_for(qnet, _threshold_property(*box, 0, Fraction(0), None))
        model = build_model(query)
        region = query.regions[0]
        inputs = rng.integers(region.lo, region.hi + 1, (4000, 3))  # (8.8: too many to enumerate)
        run = simulate(qnet, inputs, trace=True)
        xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
        for phase_layer, phase in ((None, 0), (2, 1), (2, -1)):
            phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
            selected = ~run.overflowed
            if phase_layer is not None:
                phases[phase_layer][1] = phase
                values = run.layers[phase_layer].pre[:, 1]
                selected &= values > 0 if phase > 0 else values <= 0
            words = (region.lo, region.hi)
            plain = node_bounds(model, xl, xu, phases, region_words=words)
            bounds = node_bounds(model, xl, xu, phases, region_words=words)
            if bounds is not None:
                bounds = tighten_intermediate(
                    model, bounds, xl, xu, phases, 8, time.monotonic() + SAFETY_NET_S
                )
            if bounds is None:
                assert not selected.any()
                continue
            for k, trace in enumerate(run.layers):
                assert np.all(bounds.pre_lo[k] >= plain.pre_lo[k]) and np.all(
                    bounds.pre_hi[k] <= plain.pre_hi[k]
                )
                shrunk += int(np.sum(bounds.pre_hi[k] - bounds.pre_lo[k] < plain.pre_hi[k] - plain.pre_lo[k]))
                values = trace.pre[selected].astype(np.float64) * model.unit
                assert np.all(values >= bounds.pre_lo[k] - 1e-12)
                assert np.all(values <= bounds.pre_hi[k] + 1e-12)
    assert shrunk > 0  # the optimisation did tighten something


def test_intermediate_bounds_row_by_row_are_the_same(rng, monkeypatch):
    """`tighten_intermediate` optimises a block of rows at a time (`INTERMEDIATE_CHUNK_VALUES`):
    each row has its own slopes, so one row at a time gives the same bounds (to float64 noise of
    the products' blocking) as all rows at once."""
    from qverify.engine.netlevel import bounds as bounds_module

    options = FIXED_OPTIONS[0]
    net = random_network(rng, (3, 6, 6, 6, 2), Activation.RELU, scale=0.8)
    qnet = quantize_network(net, options)
    words_per_unit = options.number.scale // 16
    lo = rng.integers(-24, 0, 3) * words_per_unit
    hi = lo + rng.integers(10, 20, 3) * words_per_unit
    box = [[Fraction(int(v), options.number.scale) for v in ends] for ends in (lo, hi)]
    query = query_for(qnet, _threshold_property(*box, 0, Fraction(0), None))
    model = build_model(query)
    region = query.regions[0]
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    found = []
    for chunk in (bounds_module.INTERMEDIATE_CHUNK_VALUES, 1):
        monkeypatch.setattr(bounds_module, "INTERMEDIATE_CHUNK_VALUES", chunk)
        start = node_bounds(model, xl, xu, phases, region_words=(region.lo, region.hi))
        found.append(tighten_intermediate(model, start, xl, xu, phases, 8, time.monotonic() + SAFETY_NET_S))
    together, alone = found
    for k in range(len(model.layers)):
        assert np.allclose(together.pre_lo[k], alone.pre_lo[k], rtol=1e-9, atol=1e-9)
        assert np.allclose(together.pre_hi[k], alone.pre_hi[k], rtol=1e-9, atol=1e-9)


@pytest.mark.usefixtures("phase_splitting_above_8_inputs")
def test_relu_splitting_agrees_with_brute_force(rng):
    """More inputs than input splitting takes (ReLU phase splitting, with the root's optimised
    intermediate bounds, the layers after a split bounded again and the parent's atom bounds kept;
    once every phase is fixed the box is split down to enumerable boxes) but few enough values to
    enumerate: thresholds at the true maximum of Y_0 (UNSAFE) and one word above it (SAFE), with
    the attack off so that the branch and bound decides. Each query has a budget of nodes, not of
    seconds (10 s each decided 5 of 8 on a busy machine, 7 of 8 on an idle one): when written, the
    UNSAFE ones needed 2, 253, 1,361 and 13,451 nodes, the SAFE ones at most 27."""
    options = ImplementationOptions(FixedFormat(6, 4))
    wrong, decided, total, split_safe = [], 0, 0, 0
    for _ in range(4):
        net = random_network(rng, (10, 8, 8, 2), Activation.RELU, scale=0.6)
        qnet = quantize_network(net, options)
        center = rng.integers(-6, 6, 10)
        lo = [Fraction(int(c) - 1, 16) for c in center]
        hi = [Fraction(int(c) + 1, 16) for c in center]  # 3 words per input: 59,049 inputs
        probe = query_for(qnet, _threshold_property(lo, hi, 0, Fraction(0), None))
        grid = enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)
        top = int(simulate(qnet, grid).outputs[:, 0].max())
        for offset in (0, 1):  # the true maximum, and one word above it
            query = query_for(qnet, _threshold_property(lo, hi, 0, Fraction(top + offset, 16), None))
            result = _decide(query, disable=("attack",), max_nodes=RELU_SPLIT_NODES)
            total += 1
            if result.status is EngineStatus.UNKNOWN:
                continue
            decided += 1
            if (result.status is EngineStatus.UNSAFE) != (offset == 0):
                wrong.append((top, offset, result))
            if result.status is EngineStatus.UNSAFE:
                assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
            else:
                split_safe += result.counts.get("netlevel.nodes", 0) > 1
    assert not wrong
    assert decided >= total - 2
    assert split_safe > 0  # a SAFE verdict needed the branch and bound, not only the root


def test_products_by_zero_do_not_round(rng):
    """Per-operation fixed point: a product by a zero weight or of an input that is exactly zero
    is exact, so a neuron's rounding term counts only the others (the wide sum rounds once); and
    every simulated execution still lies in the bounds built from those terms."""
    net = random_network(rng, (4, 6, 3), Activation.RELU)
    weights = np.array(net.layers[1].weights)
    weights[0, :3] = 0.0  # neuron 0 of the second layer reads only hidden neurons 3..5
    net = type(net)(
        (net.layers[0], type(net.layers[1])(weights, net.layers[1].bias, net.layers[1].activation))
    )
    for accumulation in (Accumulation.PER_OP, Accumulation.WIDE):
        options = ImplementationOptions(FixedFormat(8, 8), accumulation=accumulation)
        qnet = quantize_network(net, options)
        query = query_for(qnet, _threshold_property([0] * 4, [Fraction(1, 16)] * 4, 0, Fraction(0), None))
        model = build_model(query)
        hmax = np.array([0.0, 1.0, 2.0, 0.0, 1.0, 1.0])  # hidden neurons 0 and 3 exactly zero
        count = model.rounding_count(1, hmax)
        if accumulation is Accumulation.WIDE:
            assert np.array_equal(count, np.ones(3))
        else:
            nonzero_weights = np.array(qnet.layers[1].weights) != 0
            assert np.array_equal(count, (nonzero_weights & (hmax > 0)).sum(axis=1))
            assert count[0] <= 2
    region = query.regions[0]
    run = simulate(qnet, enumerate_box(qnet, region.lo, region.hi), trace=True)  # 17^4 inputs
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    bounds = node_bounds(model, xl, xu, phases, region_words=(region.lo, region.hi))
    for k, trace in enumerate(run.layers):
        values = trace.pre.astype(np.float64) * model.unit
        assert np.all(values >= bounds.pre_lo[k] - 1e-12) and np.all(values <= bounds.pre_hi[k] + 1e-12)
