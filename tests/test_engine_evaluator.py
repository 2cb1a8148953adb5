"""The SSA evaluator against gcc replay, bit for bit, on random inputs for many harness variants; the
scalar semantics against the vectorised evaluator; the simplifier and the fast lowered evaluator
against the evaluator."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qverify.codegen import NeuronBounds, compile_replay, format_inputs, render_harness, run_lines
from qverify.engine import c_types, cfront
from qverify.engine.scalar import semantics, ssa, symex
from qverify.engine.scalar.evaluate import ASSUME_FAILED, HOLDS, Evaluator, ProgramRunner, input_env
from qverify.engine.scalar.passes.simplify import simplify
from qverify.network import Activation, Dense, Network
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
    implementation_bounds,
    quantize_network,
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"
N_SAMPLES = 1200


def network(activation: Activation, seed: int, n_in: int = 3) -> Network:
    rng = np.random.default_rng(seed)
    sizes = (n_in, 5, 4, 3)
    layers = []
    for index in range(3):
        last = index == 2
        layers.append(
            Dense(
                rng.uniform(-2.5, 2.5, (sizes[index + 1], sizes[index])),
                rng.uniform(-1.5, 1.5, sizes[index + 1]),
                Activation.IDENTITY if last else activation,
            )
        )
    return Network(tuple(layers), name=f"eval-{activation.value}")


def prop(n_in: int, lo: float, hi: float, two_boxes: bool) -> Property:
    boxes = [Box(tuple(Fraction(lo) for _ in range(n_in)), tuple(Fraction(hi) for _ in range(n_in)))]
    if two_boxes:
        boxes.append(
            Box(tuple(Fraction(hi + 1) for _ in range(n_in)), tuple(Fraction(hi + 2) for _ in range(n_in)))
        )
    clauses = (
        Clause((Atom(((0, Fraction(1)), (1, Fraction(-1))), Fraction(0), Relation.GE),)),
        Clause(
            (
                Atom(((2, Fraction(1)),), Fraction(-1, 4), Relation.GT),
                Atom(((0, Fraction(1)),), Fraction(0), Relation.LE),
            )
        ),
    )
    return Property("eval", tuple(boxes), OutputCondition(clauses))


FIXED_VARIANTS = [
    (
        "4.4-nearest-saturate-seq-relu",
        FixedFormat(4, 4),
        Accumulation.PER_OP,
        Layout.SEQUENTIAL,
        Activation.RELU,
    ),
    (
        "4.4-floor-wrap-bal-relu",
        FixedFormat(4, 4, Rounding.FLOOR, Overflow.WRAP),
        Accumulation.PER_OP,
        Layout.BALANCED,
        Activation.RELU,
    ),
    (
        "5.3-nearest-detect-seq-sigmoid",
        FixedFormat(5, 3, overflow=Overflow.DETECT),
        Accumulation.PER_OP,
        Layout.SEQUENTIAL,
        Activation.SIGMOID,
    ),
    (
        "6.10-floor-saturate-wide-tanh",
        FixedFormat(6, 10, Rounding.FLOOR),
        Accumulation.WIDE,
        Layout.SEQUENTIAL,
        Activation.TANH,
    ),
    (
        "8.8-nearest-wrap-wide-bal-sigmoid",
        FixedFormat(8, 8, overflow=Overflow.WRAP),
        Accumulation.WIDE,
        Layout.BALANCED,
        Activation.SIGMOID,
    ),
    (
        "16.16-nearest-saturate-seq-tanh",
        FixedFormat(16, 16),
        Accumulation.PER_OP,
        Layout.SEQUENTIAL,
        Activation.TANH,
    ),
    (
        "10.22-floor-detect-bal-relu",
        FixedFormat(10, 22, Rounding.FLOOR, Overflow.DETECT),
        Accumulation.PER_OP,
        Layout.BALANCED,
        Activation.RELU,
    ),
]


def compare_with_gcc(program: ssa.Program, executable: Path, x: np.ndarray) -> None:
    lines = run_lines(executable, format_inputs(x, exact_float=True))
    outcome = ProgramRunner(program).run(x)
    messages = [step.message for step in program.asserts]
    mismatches = []
    for row, line, status, violated in zip(x, lines, outcome.status, outcome.violated):
        mine = {HOLDS: "HOLDS", ASSUME_FAILED: "ASSUME-FAILED"}.get(
            int(status)
        ) or f"VIOLATED {messages[violated]}"
        if mine != line:
            mismatches.append((row, mine, line))
    assert not mismatches, mismatches[:5]
    # the outcomes should not all be the same (the samples reach every kind of ending)
    assert len(set(lines)) > 1, set(lines)


@pytest.mark.parametrize(
    ("name", "fmt", "accumulation", "layout", "activation"),
    FIXED_VARIANTS,
    ids=[v[0] for v in FIXED_VARIANTS],
)
@pytest.mark.parametrize("invariants", [False, True])
def test_fixed_point_evaluator_matches_gcc(tmp_path, name, fmt, accumulation, layout, activation, invariants):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    qnet = quantize_network(
        network(activation, 7), ImplementationOptions(fmt, accumulation=accumulation, layout=layout)
    )
    real_hi = min(2.0, (fmt.max_q - 2) / fmt.scale)
    prop_ = prop(3, -real_hi, real_hi / 2, two_boxes=not invariants)
    bounds = None
    if invariants:
        lo = np.full(3, int(np.ceil(-real_hi * fmt.scale)))
        hi = np.full(3, int(np.floor(real_hi / 2 * fmt.scale)))
        bounds = NeuronBounds(layers=implementation_bounds(qnet, lo, hi), origin="test")
    harness = render_harness(qnet, prop_, bounds).write(tmp_path)
    executable = compile_replay(harness)
    program = symex.execute(cfront.parse_file(harness, [MODELS_C]))
    span = min(fmt.max_q, int(3 * real_hi * fmt.scale))
    x = np.vstack(
        [
            rng.integers(-span, span + 1, size=(N_SAMPLES // 2, 3)),
            rng.integers(
                int(-real_hi * fmt.scale), int(real_hi / 2 * fmt.scale) + 1, size=(N_SAMPLES // 2, 3)
            ),
            [[fmt.min_q] * 3, [fmt.max_q] * 3, [0, 0, 0]],
        ]
    )
    compare_with_gcc(program, executable, x)
    # the simplified program ends the same way on every input
    simplified = simplify(program)
    a, b = ProgramRunner(program).run(x), ProgramRunner(simplified.program).run(x)
    assert np.array_equal(a.status, b.status)
    message_a = [program.asserts[i].message if i >= 0 else "" for i in a.violated]
    message_b = [simplified.program.asserts[i].message if i >= 0 else "" for i in b.violated]
    assert message_a == message_b


FLOAT_VARIANTS = [
    ("float-seq-relu", FloatFormat(), Layout.SEQUENTIAL, Activation.RELU),
    ("float-bal-sigmoid", FloatFormat(), Layout.BALANCED, Activation.SIGMOID),
    ("double-seq-tanh", FloatFormat(FloatKind.DOUBLE), Layout.SEQUENTIAL, Activation.TANH),
    ("double-bal-relu", FloatFormat(FloatKind.DOUBLE), Layout.BALANCED, Activation.RELU),
]


@pytest.mark.parametrize(
    ("name", "number", "layout", "activation"), FLOAT_VARIANTS, ids=[v[0] for v in FLOAT_VARIANTS]
)
def test_float_evaluator_matches_gcc(tmp_path, name, number, layout, activation):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    qnet = quantize_network(network(activation, 11), ImplementationOptions(number, layout=layout))
    harness = render_harness(qnet, prop(3, -2.0, 1.0, two_boxes=True)).write(tmp_path)
    executable = compile_replay(harness)
    program = symex.execute(cfront.parse_file(harness, [MODELS_C]))
    x = rng.uniform(-3, 4, size=(N_SAMPLES, 3))
    if number.kind is FloatKind.FLOAT:
        x = x.astype(np.float32).astype(np.float64)
    x = np.vstack([x, [[-2.0, -2.0, -2.0], [1.0, 1.0, 1.0], [3.0, 3.0, 3.0]]])
    compare_with_gcc(program, executable, x)


# ------------------------------------------------------------------------------ scalar vs vector

INT_TYPES = [
    c_types.I8,
    c_types.I16,
    c_types.I32,
    c_types.I64,
    c_types.U8,
    c_types.U32,
    c_types.U64,
    c_types.int_type(12),
]
OPS = ["add", "sub", "mul", "div", "rem", "shl", "shr", "shr_rna", "band", "bor", "bxor", "max", "min"]


@given(
    st.sampled_from(INT_TYPES),
    st.sampled_from(OPS),
    st.lists(st.integers(-(2**64), 2**64), min_size=2, max_size=2),
    st.integers(0, 70),
)
def test_scalar_semantics_match_the_evaluator(ty, op, raw, shift):
    manager = ssa.NodeManager()
    a, b = (semantics.wrap(ty, v) for v in raw)
    if op in ("shl", "shr", "shr_rna"):
        b = shift % (ty.bits + 2)
    x, y = manager.input(ty, 0, "x"), manager.input(ty, 1, "y")
    node = manager.binary(op, x, y)
    expected = semantics.binary(op, ty, a, b, ty)
    values = Evaluator([node]).evaluate(input_env([x, y], _column(ty, a, b)), 1, keep=[node])
    got = int(values[node.id][0])
    if ty.bits == 64 and not ty.signed:
        got &= (1 << 64) - 1
    assert got == expected, (ty, op, a, b)


def _column(ty, a, b):
    """Inputs as an int64 array (a u64 value by its bit pattern)."""

    def bits(v):
        return v - (1 << 64) if v >= 1 << 63 else v

    return np.array([[bits(a), bits(b)]], dtype=np.int64)


@given(
    st.sampled_from(INT_TYPES),
    st.sampled_from(INT_TYPES + [c_types.F32, c_types.F64, c_types.BOOL]),
    st.integers(-(2**63), 2**63 - 1),
)
def test_scalar_casts_match_the_evaluator(source, target, raw):
    manager = ssa.NodeManager()
    value = semantics.wrap(source, raw)
    x = manager.input(source, 0, "x")
    node = manager.cast(target, x)
    expected = semantics.cast(target, source, value)
    values = Evaluator([node]).evaluate(input_env([x], _column(source, value, 0)[:, :1]), 1, keep=[node])
    got = values[node.id][0]
    if target.is_float:
        assert float(got) == expected
    else:
        got = int(got)
        if target.bits == 64 and not target.signed:
            got &= (1 << 64) - 1
        assert got == expected


def test_float_to_int_truncates_like_c():
    manager = ssa.NodeManager()
    x = manager.input(c_types.F32, 0, "x")
    node = manager.cast(c_types.I32, x)
    samples = np.array([[-2.5], [-0.5], [0.0], [0.99999994], [1234.75], [-7.0]])
    values = Evaluator([node]).evaluate(input_env([x], samples), len(samples), keep=[node])[node.id]
    assert list(values) == [-2, 0, 0, 0, 1234, -7]
