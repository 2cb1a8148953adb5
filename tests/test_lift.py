"""The array-level front end (`qverify.engine.netlevel.lift`) against the codegen's own inputs (`query_for`),
the compiled C (gcc replay, verdict per line) and the simulator of the original network (outputs
bit for bit), for every implementation option; and the scalar engine's evaluator on small nets."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from lift_cases import assert_same_query, lifted_line, sample_inputs, small_network, split_property

from qverify.codegen import (
    CompiledNetwork,
    compile_replay,
    format_inputs,
    render_harness,
    render_network,
    run_lines,
)
from qverify.engine import cfront
from qverify.engine.netlevel.lift import lift_file
from qverify.engine.scalar import symex
from qverify.engine.scalar.evaluate import ASSUME_FAILED, HOLDS, ProgramRunner
from qverify.invariants import IntervalMethod, compute_bounds
from qverify.io import load_network
from qverify.properties import read_vnnlib, robustness, to_normalised
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

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"
ACAS = ROOT / "benchmarks" / "acasxu"

VARIANTS = [
    ("16.16-nearest-saturate-seq", FixedFormat(16, 16), Accumulation.PER_OP, Layout.SEQUENTIAL),
    (
        "8.8-floor-wrap-bal",
        FixedFormat(8, 8, Rounding.FLOOR, Overflow.WRAP),
        Accumulation.PER_OP,
        Layout.BALANCED,
    ),
    (
        "6.4-nearest-detect-seq",
        FixedFormat(6, 4, overflow=Overflow.DETECT),
        Accumulation.PER_OP,
        Layout.SEQUENTIAL,
    ),
    (
        "6.4-floor-wrap-seq",
        FixedFormat(6, 4, Rounding.FLOOR, Overflow.WRAP),
        Accumulation.PER_OP,
        Layout.SEQUENTIAL,
    ),
    ("8.8-nearest-saturate-wide-seq", FixedFormat(8, 8), Accumulation.WIDE, Layout.SEQUENTIAL),
    (
        "8.8-floor-wrap-wide-bal",
        FixedFormat(8, 8, Rounding.FLOOR, Overflow.WRAP),
        Accumulation.WIDE,
        Layout.BALANCED,
    ),
    (
        "16.16-floor-detect-bal",
        FixedFormat(16, 16, Rounding.FLOOR, Overflow.DETECT),
        Accumulation.PER_OP,
        Layout.BALANCED,
    ),
    ("float-seq", FloatFormat(), Accumulation.PER_OP, Layout.SEQUENTIAL),
    ("float-bal", FloatFormat(), Accumulation.PER_OP, Layout.BALANCED),
    ("double-seq", FloatFormat(FloatKind.DOUBLE), Accumulation.PER_OP, Layout.SEQUENTIAL),
    ("double-bal", FloatFormat(FloatKind.DOUBLE), Accumulation.PER_OP, Layout.BALANCED),
    ("half-seq", FloatFormat(FloatKind.HALF), Accumulation.PER_OP, Layout.SEQUENTIAL),
    ("half-bal", FloatFormat(FloatKind.HALF), Accumulation.PER_OP, Layout.BALANCED),
]


def _replay(harness: Path, x: np.ndarray) -> list[str]:
    return run_lines(compile_replay(harness), format_inputs(x, exact_float=True))


def _assert_lines_agree(query, x: np.ndarray, lines: list[str]) -> None:
    mismatches = []
    for row, line in zip(x, lines):
        mine = lifted_line(query, row)
        if not line.startswith(mine):
            mismatches.append((row, mine, line))
    assert not mismatches, mismatches[:5]
    assert len({line.split(":")[0] for line in lines}) >= 4, set(lines)  # every kind of ending


# with invariants (a few variants; the verdict check assumes invariants no overflow can break)
WITH_INVARIANTS = ("16.16-nearest-saturate-seq", "8.8-nearest-saturate-wide-seq", "float-bal", "half-seq")
CASES = [(*variant, False) for variant in VARIANTS] + [
    (*variant, True) for variant in VARIANTS if variant[0] in WITH_INVARIANTS
]


@pytest.mark.parametrize(
    ("name", "number", "accumulation", "layout", "intervals"),
    CASES,
    ids=[f"{case[0]}{'-invariants' if case[4] else ''}" for case in CASES],
)
def test_lifted_query_is_the_harness(tmp_path, name, number, accumulation, layout, intervals):
    """(a) same network, regions, atoms and invariants as `query_for`; (b) gcc's replay verdict on
    every sampled input equals the lifted query's, and the lifted network computes the original
    network's outputs bit for bit."""
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    # narrow formats: weights and inputs large enough for overflows (wrap, saturate, detect)
    narrow = isinstance(number, FixedFormat) and number.word_bits <= 10
    net = small_network(3, scale=4.0 if narrow else 1.5)
    qnet = quantize_network(net, ImplementationOptions(number, accumulation, layout))
    prop = split_property(net, -3.0 if narrow else -1.0, 0.5, two_boxes=not intervals)
    bounds = compute_bounds(qnet, prop, IntervalMethod.BUILTIN, symbolic=False).bounds if intervals else None
    harness = render_harness(qnet, prop, bounds).write(tmp_path)
    result = lift_file(harness, [MODELS_C])
    assert result.lifted, result.reason
    assert set(result.times_s) == {"read", "arrays", "parse", "match"}
    query = result.query
    assert_same_query(query, qnet, prop, bounds.layers if bounds else None)
    x = sample_inputs(query, rng, 400)
    original, lifted = simulate(qnet, x), simulate(query.qnet, x)
    assert np.array_equal(original.outputs, lifted.outputs, equal_nan=True)
    assert np.array_equal(original.detected, lifted.detected)
    _assert_lines_agree(query, x, _replay(harness, x))


@pytest.mark.parametrize(
    ("number", "accumulation", "layout"),
    [
        (FixedFormat(6, 4, Rounding.FLOOR, Overflow.DETECT), Accumulation.WIDE, Layout.BALANCED),
        (FixedFormat(8, 8, overflow=Overflow.WRAP), Accumulation.PER_OP, Layout.SEQUENTIAL),
        (FloatFormat(FloatKind.HALF), Accumulation.PER_OP, Layout.BALANCED),
    ],
    ids=["6.4-detect-wide-bal", "8.8-wrap-seq", "half-bal"],
)
def test_lifted_query_agrees_with_the_scalar_evaluator(tmp_path, number, accumulation, layout):
    """(c) the scalar front end's program, run by its evaluator, ends as the lifted query says; and
    the lifted network's outputs are those of the original network's compiled C, bit for bit."""
    rng = np.random.default_rng(5)
    net = small_network(8, scale=4.0)
    qnet = quantize_network(net, ImplementationOptions(number, accumulation, layout))
    harness = render_harness(qnet, split_property(net, -3.0, 0.5)).write(tmp_path)
    query = lift_file(harness, [MODELS_C]).query
    assert query is not None
    program = symex.execute(cfront.parse_file(harness, [MODELS_C]))
    x = sample_inputs(query, rng, 300)
    outcome = ProgramRunner(program).run(x)
    messages = [step.message for step in program.asserts]
    for row, status, violated in zip(x, outcome.status, outcome.violated):
        scalar = {HOLDS: "HOLDS", ASSUME_FAILED: "ASSUME-FAILED"}.get(
            int(status)
        ) or f"VIOLATED {messages[violated]}"
        assert scalar.startswith(lifted_line(query, row)), (row, scalar)
    compiled = CompiledNetwork(render_network(qnet), tmp_path / "network", qnet.is_fixed).run(x)
    lifted = simulate(query.qnet, x)
    assert np.array_equal(compiled.overflowed, lifted.detected)
    assert np.array_equal(compiled.outputs[~compiled.overflowed], lifted.outputs[~lifted.detected])


@pytest.mark.parametrize(
    "number",
    [FixedFormat(16, 16), pytest.param(FloatFormat(), marks=pytest.mark.slow)],
    ids=["16.16", "float"],
)
def test_acas_xu_harness_is_lifted(tmp_path, number):
    """ACAS Xu 1_9 phi_3 with the built-in invariants: lifted exactly, replays agree with gcc."""
    net = load_network(ACAS / "nnet" / "ACASXU_run2a_1_9_batch_2000.nnet")
    prop = to_normalised(read_vnnlib(ACAS / "vnnlib" / "prop_3.vnnlib"), net)
    qnet = quantize_network(net, ImplementationOptions(number))
    bounds = compute_bounds(qnet, prop, IntervalMethod.BUILTIN, symbolic=False).bounds
    harness = render_harness(qnet, prop, bounds).write(tmp_path)
    result = lift_file(harness, [MODELS_C])
    assert result.lifted, result.reason
    assert_same_query(result.query, qnet, prop, bounds.layers)
    x = sample_inputs(result.query, np.random.default_rng(1), 200)
    assert np.array_equal(simulate(qnet, x).outputs, simulate(result.query.qnet, x).outputs)
    lines = _replay(harness, x)
    assert [line.startswith(lifted_line(result.query, row)) for row, line in zip(x, lines)] == [True] * len(x)


CONV_OPTIONS = [
    ImplementationOptions(FixedFormat(8, 8)),
    ImplementationOptions(FixedFormat(6, 4, Rounding.FLOOR, Overflow.DETECT), Accumulation.WIDE),
    ImplementationOptions(FloatFormat()),
    ImplementationOptions(FloatFormat(FloatKind.HALF)),
]


@pytest.mark.parametrize("options", CONV_OPTIONS, ids=[options.key() for options in CONV_OPTIONS])
def test_convolutional_harness_is_lifted(tmp_path, options):
    """Convolution (padded, strided, grouped), max and average pools (padded) and a dense layer:
    the same query as `query_for` (geometry and product order included) and gcc's verdicts."""
    from test_codegen_conv import conv_network

    net = conv_network(3)
    qnet = quantize_network(net, options)
    centre = np.random.default_rng(2).uniform(-0.5, 0.5, net.n_inputs)
    prop = robustness([str(v) for v in centre], "0.25", label=0, n_outputs=net.n_outputs)
    harness = render_harness(qnet, prop).write(tmp_path)
    result = lift_file(harness, [MODELS_C])
    assert result.lifted, result.reason
    assert_same_query(result.query, qnet, prop)
    x = sample_inputs(result.query, np.random.default_rng(3), 200)
    original, lifted = simulate(qnet, x), simulate(result.query.qnet, x)
    assert np.array_equal(original.outputs, lifted.outputs) and np.array_equal(
        original.detected, lifted.detected
    )
    lines = _replay(harness, x)
    assert [line.startswith(lifted_line(result.query, row)) for row, line in zip(x, lines)] == [True] * len(x)
