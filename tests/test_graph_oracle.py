"""Networks as graphs (issue 41) against brute force: residual additions, concatenations, activation
nodes and permutations in every number format.

Each instance is a random tiny graph (2-3 inputs): a residual block (two dense layers and a
shortcut -- the input itself, or a dense projection -- joined by an addition with a ReLU), two
branches joined by a concatenation, a chain of both with an activation node and a permutation, or
ReLU6 layers (MobileNetV2's clamp) whose values cross both kinks.
Truths come from every input of the box: through the bit-exact simulator for the network level's
queries, and through the compiled harness (gcc) for the engine's end-to-end verdicts. The network
level's bounds must contain every simulated execution (with and without a ReLU phase fixed), its
verdicts must equal the truths, every counterexample must replay. The generated C must agree with
the simulator bit for bit, and the float C with the float64 reference within rounding.
"""

from __future__ import annotations

import itertools
import shutil
import time
from fractions import Fraction

import numpy as np
import pytest

from qverify.codegen import CompiledNetwork, compile_replay, render_harness, render_network, run_lines
from qverify.codegen.context import NeuronBounds
from qverify.engine import EngineStatus, check_file
from qverify.engine.netlevel.bounds import backsubstitute, node_bounds, optimised_bound
from qverify.engine.netlevel.lift import lift_file
from qverify.engine.netlevel.model import build_model
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, Arithmetic, query_for
from qverify.engine.netlevel.search import decide
from qverify.engine.result import Recorder
from qverify.network import Activation, Add, Concat, Dense, Network, Permute, evaluate_core
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
    simulate,
)
from qverify.quant.intervals import implementation_bounds
from tests.conftest import ROOT, budgeted

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

MODELS_C = ROOT / "models_c"
FIXED = [
    ImplementationOptions(FixedFormat(4, 4)),
    ImplementationOptions(FixedFormat(4, 4, Rounding.FLOOR, Overflow.WRAP)),
    ImplementationOptions(FixedFormat(6, 4, Rounding.FLOOR), accumulation=Accumulation.WIDE),
    ImplementationOptions(FixedFormat(5, 3, overflow=Overflow.WRAP)),
    ImplementationOptions(FixedFormat(4, 4, overflow=Overflow.DETECT)),
]
FLOATS = [
    ImplementationOptions(FloatFormat(kind)) for kind in (FloatKind.FLOAT, FloatKind.DOUBLE, FloatKind.HALF)
]
SHAPES = ("residual-identity", "residual-projection", "concat", "mixed", "relu6")


def _dense(rng: np.random.Generator, n_in: int, n_out: int, activation: Activation, scale: float) -> Dense:
    return Dense(rng.normal(0, scale, (n_out, n_in)), rng.normal(0, scale / 2, n_out), activation)


def random_graph(rng: np.random.Generator, shape: str, n_in: int, scale: float = 0.8) -> Network:
    """A tiny graph of the given shape (module docstring), two outputs."""
    relu, identity = Activation.RELU, Activation.IDENTITY
    if shape.startswith("residual"):
        width = n_in if shape == "residual-identity" else 3
        first = _dense(rng, n_in, width, relu, scale)
        second = _dense(rng, width, width, identity, scale)
        if shape == "residual-identity":
            layers = (first, second, Add((width,), 2, relu), _dense(rng, width, 2, identity, scale))
            wiring = ((-1,), (0,), (1, -1), (2,))
        else:
            shortcut = _dense(rng, n_in, width, identity, scale)
            layers = (first, second, shortcut, Add((width,), 2, relu), _dense(rng, width, 2, identity, scale))
            wiring = ((-1,), (0,), (-1,), (1, 2), (3,))
        return Network(layers, name=shape, wiring=wiring)
    if shape == "concat":
        left, right = _dense(rng, n_in, 2, relu, scale), _dense(rng, n_in, 3, relu, scale)
        layers = (left, right, Concat(((2,), (3,))), _dense(rng, 5, 2, identity, scale))
        return Network(layers, name=shape, wiring=((-1,), (-1,), (0, 1), (2,)))
    if shape == "relu6":  # MobileNetV2's clamp: weights large enough to cross both of its kinks
        wide = Dense(np.clip(rng.normal(0, 4, (3, n_in)), -7, 7), rng.uniform(-2, 7, 3), Activation.RELU6)
        layers = (
            wide,  # (every constant inside <4,4>'s range)
            _dense(rng, 3, 3, identity, scale),
            Add((3,), 1, Activation.RELU6),
            _dense(rng, 3, 2, identity, scale),
        )
        return Network(layers, name=shape)
    first = _dense(rng, n_in, 3, identity, scale)
    layers = (
        first,
        Add((3,), 1, relu),  # an activation node: the first layer's identity output is read raw too
        _dense(rng, 3, 3, relu, scale),
        Add((3,), 3, identity),
        Permute(rng.permutation(3), (3,), (3,)),
        _dense(rng, 3, 2, identity, scale),
    )
    return Network(layers, name=shape, wiring=((-1,), (0,), (1,), (2, 0, 1), (3,), (4,)))


def _threshold_property(lo, hi, threshold: Fraction, second: bool) -> Property:
    atoms = [Atom(((0, Fraction(1)),), -threshold, Relation.GE)]
    if second:
        atoms.append(Atom(((0, Fraction(1)), (1, Fraction(-1))), Fraction(0), Relation.GE))
    return Property("threshold", (Box(tuple(lo), tuple(hi)),), OutputCondition((Clause(tuple(atoms)),)))


def _box(rng: np.random.Generator, options: ImplementationOptions, n_in: int) -> tuple[list, list]:
    number = options.number
    if isinstance(number, FixedFormat):
        span = 40 if n_in == 2 else 14  # more inputs than one enumeration (1,024): bounds must work
        center = rng.integers(-8, 8, n_in)
        lo = [Fraction(int(c) - span // 2, number.scale) for c in center]
        hi = [Fraction(int(c) + span - span // 2, number.scale) for c in center]
        return lo, hi
    # a box of a few hundred values of the type per input: the truth enumerates them all
    dtype = number.dtype
    lo, hi = [], []
    for _ in range(n_in):
        start = dtype(rng.uniform(-1, 1))
        end = start
        for _ in range(int(rng.integers(12, 30)) if n_in == 3 else int(rng.integers(40, 120))):
            end = np.nextafter(end, dtype(np.inf))
        lo.append(Fraction(float(start)))
        hi.append(Fraction(float(end)))
    return lo, hi


def _truth(query) -> bool:
    region = query.regions[0]
    grid = enumerate_box(query.qnet, region.lo, region.hi)
    run = simulate(query.qnet, grid)
    if run.detect_mode and run.detected.any():
        return True
    return any(query.unsafe.violated_clause_exact(query.qnet.output_reals(row)) != -1 for row in run.outputs)


def _cases(rng: np.random.Generator, options: ImplementationOptions):
    """Queries at the exact maximum of Y_0 (UNSAFE) and just above it (SAFE), per graph shape."""
    for shape in SHAPES:
        n_in = int(rng.integers(2, 4))
        net = random_graph(rng, shape, n_in)
        qnet = quantize_network(net, options)
        lo, hi = _box(rng, options, n_in)
        probe = query_for(qnet, _threshold_property(lo, hi, Fraction(0), False))
        grid = enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)
        run = simulate(qnet, grid)
        tops = run.outputs[~run.overflowed, 0] if (~run.overflowed).any() else run.outputs[:, 0]
        top = qnet.output_reals(np.array([tops.max()]))[0]
        above = top + (
            Fraction(1, options.number.scale) if qnet.is_fixed else abs(top) / 2**30 + Fraction(1, 2**40)
        )
        for threshold, second in ((top, False), (above, False), (top, True)):
            yield shape, query_for(qnet, _threshold_property(lo, hi, threshold, second))


@pytest.mark.parametrize("options", FIXED + FLOATS, ids=lambda o: o.key())
def test_graph_verdicts_agree_with_brute_force(options):
    rng = np.random.default_rng(4100 + len(options.key()))
    wrong, decided = [], 0
    total = 0
    truths = set()
    for index, (shape, query) in enumerate(_cases(rng, options)):
        truth = _truth(query)
        truths.add(truth)
        # half of the queries without the attack: bounds and splitting alone must decide them
        budget = budgeted(disable=("attack",) if index % 2 else ())
        result = decide(query, budget, time.monotonic() + budget.timeout_s, Recorder())
        total += 1
        if result.status is EngineStatus.UNKNOWN:
            continue
        decided += 1
        if (result.status is EngineStatus.UNSAFE) != truth:
            wrong.append((shape, query.unsafe.clauses[0].text(), result.to_json()))
        if result.status is EngineStatus.UNSAFE:
            assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
    assert not wrong
    assert decided == total
    assert truths == {True, False}


def _enumerated_graphs(rng: np.random.Generator, options: ImplementationOptions):
    """Per shape: the model of a random graph on a small box, every execution of the box traced,
    the box in reals, the value of one word and the box's words (fixed point)."""
    for shape in SHAPES:
        qnet = quantize_network(random_graph(rng, shape, 3), options)
        lo, hi = _box(rng, options, 3)
        query = query_for(qnet, _threshold_property(lo, hi, Fraction(0), False))
        model = build_model(query)
        region = query.regions[0]
        run = simulate(qnet, enumerate_box(qnet, region.lo, region.hi), trace=True)
        xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
        scale = model.unit if model.is_fixed else 1.0
        words = (region.lo, region.hi) if model.is_fixed else None
        yield shape, model, run, xl, xu, scale, words


@pytest.mark.parametrize("options", FIXED[:2] + FLOATS[:1], ids=lambda o: o.key())
def test_graph_bounds_contain_every_execution(options):
    """node_bounds over a box (and with a ReLU phase of the residual block fixed) contains every
    simulated pre-activation value of the executions it describes."""
    for shape, model, run, xl, xu, scale, words in _enumerated_graphs(np.random.default_rng(4200), options):
        fine = ~run.overflowed
        for phase in (0, 1, -1):
            phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
            selected = fine.copy()
            if phase:
                phases[0][0] = phase  # the first layer's first neuron (a ReLU in every shape but mixed)
                if not model.layers[0].relu:
                    continue
                values = run.layers[0].pre[:, 0]
                selected &= values > 0 if phase > 0 else values <= 0
            bounds = node_bounds(model, xl, xu, phases, region_words=words)
            if bounds is None:
                assert not selected.any()
                continue
            for k, trace in enumerate(run.layers):
                values = trace.pre[selected].astype(np.float64) * scale
                assert np.all(values >= bounds.pre_lo[k] - 1e-12), (shape, k)
                assert np.all(values <= bounds.pre_hi[k] + 1e-12), (shape, k)
            # the outputs' linear bounds by back-substitution through every join, both signs
            last = len(model.layers) - 1
            rows = np.vstack([np.eye(2), -np.eye(2)])
            linear = backsubstitute(model, bounds, rows, last, True, xl, xu)
            outputs = run.outputs[selected].astype(np.float64) * scale
            assert np.all(outputs >= linear.lower[:2] - 1e-12), shape
            assert np.all(outputs <= -linear.lower[2:] + 1e-12), shape


@pytest.mark.parametrize("options", FIXED[:1] + FLOATS[:1], ids=lambda o: o.key())
def test_alpha_optimised_node_bounds_on_graphs_contain_every_execution(options):
    """alpha-CROWN on every node's pre-activation values (`optimised_bound` with `index`, as the
    search tightens intermediate bounds): on a graph, a ReLU below the node may lie on another
    branch, off every path to it (it has no gradient: SqueezeNet's fire modules stopped the engine
    with a KeyError); every bound still contains every execution."""
    for shape, model, run, xl, xu, scale, words in _enumerated_graphs(np.random.default_rng(4250), options):
        fine = ~run.overflowed
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        bounds = node_bounds(model, xl, xu, phases, region_words=words)
        for k, trace in enumerate(run.layers):
            size = model.layers[k].n_out
            rows = np.vstack([np.eye(size), -np.eye(size)])
            linear = optimised_bound(model, bounds, rows, xl, xu, 4, index=k)
            values = trace.pre[fine].astype(np.float64) * scale
            assert np.all(values >= linear.lower[:size] - 1e-9), (shape, k)
            assert np.all(values <= -linear.lower[size:] + 1e-9), (shape, k)


@pytest.mark.parametrize("options", FIXED[:1] + FIXED[2:3] + FLOATS, ids=lambda o: o.key())
def test_graph_c_is_the_simulator_and_lifts_back(options, tmp_path):
    """The generated C of every shape equals the simulator bit for bit on random inputs; the
    harness lifts back to the same network (wiring and values)."""
    rng = np.random.default_rng(4300)
    for shape in SHAPES:
        net = random_graph(rng, shape, 3)
        qnet = quantize_network(net, options)
        x = rng.uniform(-1, 1, (300, 3))
        inputs = (
            np.rint(x * options.number.scale).astype(np.int64) if qnet.is_fixed else options.number.round(x)
        )
        compiled = CompiledNetwork(render_network(qnet), tmp_path / shape, qnet.is_integer).run(inputs)
        simulated = simulate(qnet, inputs).outputs
        assert np.array_equal(compiled.outputs.astype(np.float64), simulated.astype(np.float64)), shape
        if not qnet.is_fixed:  # the float C against the float64 reference
            tolerance = 0.05 if qnet.number.is_half else 1e-4
            assert np.allclose(simulated, evaluate_core(net, inputs.astype(np.float64)), atol=tolerance), (
                shape
            )
        lo, hi = [Fraction(-1)] * 3, [Fraction(1)] * 3
        harness = render_harness(qnet, _threshold_property(lo, hi, Fraction(100), False)).write(
            tmp_path / f"h-{shape}"
        )
        lifted = lift_file(harness, [MODELS_C])
        assert lifted.lifted, lifted.reason
        assert lifted.query.qnet.wiring == qnet.wiring
        assert np.array_equal(simulate(lifted.query.qnet, inputs).outputs, simulated)


@pytest.mark.parametrize("options", [FIXED[0], FIXED[3], FLOATS[0]], ids=lambda o: o.key())
def test_graph_harness_verdicts_equal_the_compiled_c(options, tmp_path):
    """End to end through the engine's door (`check_file`: lift, network level, fallbacks), the
    harness holding the built-in invariants as assumes: no input of the box fails them, the verdict
    equals the compiled harness run on every input; counterexamples replay."""
    rng = np.random.default_rng(4400)
    for shape, query in _cases(rng, options):
        prop = Property(
            "p",
            (Box(tuple(map(Fraction, query.qnet.input_reals(query.regions[0].lo))), tuple(map(Fraction, query.qnet.input_reals(query.regions[0].hi)))),),
            query.unsafe,
        )  # fmt: skip
        region = query.regions[0]
        invariants = NeuronBounds(implementation_bounds(query.qnet, region.lo, region.hi), "built-in")
        harness = render_harness(query.qnet, prop, invariants).write(
            tmp_path / f"{shape}-{len(list(tmp_path.iterdir()))}"
        )
        executable = compile_replay(harness)
        grid = enumerate_box(query.qnet, region.lo, region.hi)
        rows = [
            " ".join(str(int(v)) if query.qnet.is_integer else float(v).hex() for v in row) for row in grid
        ]
        outcomes = run_lines(executable, rows)
        assert not [line for line in outcomes if line.startswith("ASSUME-FAILED")], shape  # sound invariants
        truth = any(line.startswith("VIOLATED") for line in outcomes)
        result = check_file(harness, [MODELS_C], budgeted())
        assert result.status.value == ("UNSAFE" if truth else "SAFE"), (shape, result.to_json())
        if result.status is EngineStatus.UNSAFE:
            values = " ".join(
                str(int(v)) if query.qnet.is_integer else float(v).hex() for v in result.counterexample
            )
            (line,) = run_lines(executable, [values])
            assert line == f"VIOLATED {result.violated}"


def test_real_arithmetic_on_graphs_agrees_with_exact_evaluation():
    """--semantics real on graphs: exact rational outputs of every point of small float boxes; the
    verdict at the real maximum and above it equals brute force."""
    rng = np.random.default_rng(4500)
    options = ImplementationOptions(FloatFormat(FloatKind.FLOAT))
    from qverify.engine.netlevel.exact import real_outputs

    for shape in SHAPES:
        net = random_graph(rng, shape, 2)
        qnet = quantize_network(net, options)
        lo, hi = _box(rng, options, 2)
        probe = query_for(qnet, _threshold_property(lo, hi, Fraction(0), False), Arithmetic.REAL)
        grid = enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)[::7]
        exact = [real_outputs(qnet, row)[0] for row in grid]
        reference = evaluate_core(net, grid)[:, 0]
        assert np.allclose([float(v) for v in exact], reference, atol=1e-4)
        box_lo = [Fraction(float(v)) for v in grid.min(axis=0)]
        box_hi = [Fraction(float(v)) for v in grid.max(axis=0)]
        full = enumerate_box(qnet, np.array([float(v) for v in box_lo]), np.array([float(v) for v in box_hi]))
        top = max(real_outputs(qnet, row)[0] for row in full)
        for threshold, expected in (
            (top, EngineStatus.UNSAFE),
            (top + Fraction(1, 2**20), EngineStatus.SAFE),
        ):
            query = query_for(qnet, _threshold_property(box_lo, box_hi, threshold, False), Arithmetic.REAL)
            budget = budgeted()
            result = decide(query, budget, time.monotonic() + budget.timeout_s, Recorder())
            assert result.status is expected, (shape, result.to_json())


def test_networks_as_graphs_are_checked():
    """The IR refuses what is not a graph of the network's nodes: a node read before it exists, a
    join of tensors of different sizes, a node whose output nothing reads."""
    from qverify.errors import InputError

    first = Dense(np.ones((3, 2)), np.zeros(3), Activation.RELU)
    with pytest.raises(InputError, match="only earlier nodes or the input"):
        Network((first, Add((3,), 2)), wiring=((-1,), (0, 1)))
    with pytest.raises(InputError, match="layer 1 has 3 outputs but layer 2 expects 2 inputs as input 2"):
        Network((first, Add((2,), 2)), wiring=((-1,), (-1, 0)))
    with pytest.raises(InputError, match="never used"):
        Network((first, Dense(np.ones((1, 2)), np.zeros(1), Activation.IDENTITY)), wiring=((-1,), (-1,)))
    assert [
        p for p in itertools.chain.from_iterable(random_graph(np.random.default_rng(0), "mixed", 2).wiring)
    ]
