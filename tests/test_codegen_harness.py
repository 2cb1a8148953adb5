"""Harnesses: compiled with gcc, replayed on random inputs, they agree with the parsed property
evaluated exactly on the simulator's outputs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from qverify.codegen import compile_replay, format_inputs, render_harness, run_lines
from qverify.codegen.conditions import fixed_atom, fixed_box, float_atom, float_box
from qverify.io import load_network
from qverify.properties import Atom, Box, Relation, read_vnnlib
from qverify.quant import (
    FixedFormat,
    FloatFormat,
    ImplementationOptions,
    Overflow,
    quantize_network,
    simulate,
)
from qverify.quant.inputs import fixed_word, nearest_float
from tests.conftest import ACAS, ACAS_1_1

# random words per format and property inside the boxes (plus 200 just outside and 200 corners): the
# bit-exact simulator's per-op arithmetic on ACAS Xu costs about 0.35 ms of CPU per input, and 10,000
# made each of the twelve cases 4.8 s
N_RUNS = 2_500


def expected_outcomes(qnet, prop, x, words_in):
    """HOLDS / VIOLATED <clause> / ASSUME-FAILED from exact arithmetic on the simulator's outputs."""
    result = simulate(qnet, x)
    fmt = qnet.number
    outcomes = []
    # the input stage's image of each box (issue 40: the words or floats its bounds round to)
    convert = (lambda v: fixed_word(v, fmt)[0]) if words_in else (lambda v: nearest_float(v, fmt)[0])
    images = [([convert(v) for v in box.lo], [convert(v) for v in box.hi]) for box in prop.boxes]
    for row, outputs, detected in zip(x, result.outputs, result.detected):
        inputs = [int(v) if words_in else float(v) for v in row]
        if not any(all(lo <= v <= hi for v, lo, hi in zip(inputs, low, high)) for low, high in images):
            outcomes.append("ASSUME-FAILED")
            continue
        if detected:
            outcomes.append("VIOLATED fixed-point overflow")
            continue
        reals = [Fraction(int(v), fmt.scale) if words_in else Fraction(float(v)) for v in outputs]
        clause = prop.unsafe.violated_clause_exact(reals)
        outcomes.append("HOLDS" if clause < 0 else f"VIOLATED unsafe clause {clause + 1}")
    return outcomes


def sample_words(prop, fmt, rng):
    """Mostly inside the property's boxes, some just outside (assume failures)."""
    boxes = [fixed_box(box, fmt) for box in prop.boxes]
    lo = np.array([min(int(b.lo[i]) for b in boxes) for i in range(prop.n_inputs)])
    hi = np.array([max(int(b.hi[i]) for b in boxes) for i in range(prop.n_inputs)])
    inside = rng.integers(lo, hi + 1, size=(N_RUNS, prop.n_inputs))
    outside = inside[:200].copy()
    coordinate = rng.integers(0, prop.n_inputs, size=200)
    below = rng.random(200) < 0.5
    outside[np.arange(200), coordinate] = np.where(
        below, lo[coordinate] - rng.integers(1, 4, 200), hi[coordinate] + rng.integers(1, 4, 200)
    )
    corners = np.where(rng.random((200, prop.n_inputs)) < 0.5, lo, hi)
    return np.clip(np.vstack([inside, outside, corners]), fmt.min_q, fmt.max_q)


def replay(program, tmp_path, x, exact_float=False):
    executable = compile_replay(program.write(tmp_path))
    return [line.split(": ")[0] for line in run_lines(executable, format_inputs(x, exact_float))]


@pytest.mark.parametrize("number", [1, 2, 3, 4])
@pytest.mark.parametrize(
    "fmt",
    [
        FixedFormat(16, 16),
        FixedFormat(20, 12, overflow=Overflow.WRAP),
        FixedFormat(8, 8, overflow=Overflow.DETECT),
    ],
    ids=lambda f: f"{f}-{f.overflow.value}",
)
def test_acas_fixed_harness_agrees_with_simulator(tmp_path, number, fmt):
    net = load_network(ACAS_1_1)
    prop = read_vnnlib(ACAS / "vnnlib" / f"prop_{number}.vnnlib")
    if fmt.overflow is Overflow.DETECT:  # <8,8> cannot hold ACAS Xu's weights: saturate them explicitly
        net = net.__class__(
            tuple(
                layer.__class__(np.clip(layer.weights, -127, 127), layer.bias, layer.activation)
                for layer in net.layers
            ),
            net.input_norm,
            net.output_norm,
            net.name,
        )
    qnet = quantize_network(net, ImplementationOptions(fmt))
    x = sample_words(prop, fmt, np.random.default_rng(number))
    got = replay(render_harness(qnet, prop), tmp_path, x)
    assert got == [line.split(": ")[0] for line in expected_outcomes(qnet, prop, x, True)]
    assert "HOLDS" in got and "ASSUME-FAILED" in got


@pytest.mark.parametrize("number", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
def test_acas_float_harness_agrees_with_simulator(tmp_path, number):
    net = load_network(ACAS_1_1)
    prop = read_vnnlib(ACAS / "vnnlib" / f"prop_{number}.vnnlib")
    number_format = FloatFormat()
    qnet = quantize_network(net, ImplementationOptions(number_format))
    rng = np.random.default_rng(number)
    box = prop.boxes[0]
    x = number_format.round(rng.uniform(box.lo_array(), box.hi_array(), size=(2000, prop.n_inputs))).astype(
        float
    )
    got = replay(render_harness(qnet, prop), tmp_path, x, exact_float=True)
    assert got == [line.split(": ")[0] for line in expected_outcomes(qnet, prop, x, False)]


def test_violation_shows_the_clause_text(tmp_path):
    from qverify.properties import parse_vnnlib

    qnet = quantize_network(load_network(ACAS_1_1), ImplementationOptions(FixedFormat(16, 16)))
    declarations = "".join(f"(declare-const X_{i} Real)" for i in range(5))
    declarations += "".join(f"(declare-const Y_{j} Real)" for j in range(5))
    bounds = "".join(f"(assert (>= X_{i} -0.5)) (assert (<= X_{i} 0.5))" for i in range(5))
    prop = parse_vnnlib(declarations + bounds + "(assert (or (and (>= Y_0 -100) (<= Y_1 Y_0)) (>= Y_2 Y_0)))")
    executable = compile_replay(render_harness(qnet, prop).write(tmp_path))
    lines = run_lines(
        executable, format_inputs(sample_words(prop, qnet.number, np.random.default_rng(0))[:3000], False)
    )
    assert "VIOLATED unsafe clause 1: (Y_0 >= -100) and (-Y_0 + Y_1 <= 0)" in lines
    assert "VIOLATED unsafe clause 2: (-Y_0 + Y_2 >= 0)" in lines


Q = FixedFormat(8, 4)  # words are sixteenths


@pytest.mark.parametrize(
    "relation, constant, threshold_code",
    [
        (Relation.GE, Fraction(-1), ">= 16"),  # Y_0 - 1 >= 0: exactly on the grid
        (Relation.GE, Fraction(-1) - Fraction(1, 1000), ">= 17"),  # just above a grid point
        (Relation.GE, Fraction(-1) + Fraction(1, 1000), ">= 16"),  # just below
        (Relation.GT, Fraction(-1), ">= 17"),
        (Relation.LE, Fraction(-1) - Fraction(1, 1000), "<= 16"),
        (Relation.LT, Fraction(-1), "<= 15"),
        (Relation.GE, Fraction(1) + Fraction(1, 1000), ">= -16"),  # negative threshold just above -1
        (Relation.GE, Fraction(1) - Fraction(1, 1000), ">= -15"),
        (Relation.LE, Fraction(1) + Fraction(1, 1000), "<= -17"),
        (Relation.LE, Fraction(1), "<= -16"),
    ],
)
def test_fixed_thresholds_round_in_the_exact_direction(relation, constant, threshold_code):
    atom = Atom(((0, Fraction(1)),), constant, relation)
    assert fixed_atom(atom, Q).code == f"(int64_t)y[0] {threshold_code}"
    for word in range(-40, 40):  # the C comparison agrees with the real one on every word
        threshold = int(threshold_code.split()[1])
        c_holds = word >= threshold if ">=" in threshold_code else word <= threshold
        assert c_holds == atom.holds_exact([Fraction(word, Q.scale)])


def test_float_thresholds_round_in_the_exact_direction():
    number = FloatFormat()
    tenth = Fraction(1, 10)  # not a float: 0.1f is above it
    assert float(np.float32(0.1)) > tenth
    ge = float_atom(Atom(((0, Fraction(1)),), -tenth, Relation.GE), number).code
    le = float_atom(Atom(((0, Fraction(1)),), -tenth, Relation.LE), number).code
    assert ge == f"y[0] >= {float(np.float32(0.1)).hex()}f"
    assert le == f"y[0] <= {float(np.nextafter(np.float32(0.1), np.float32(0))).hex()}f"
    diff = float_atom(Atom(((1, Fraction(1)), (0, Fraction(-1))), 0, Relation.GE), number).code
    assert diff == "y[1] >= y[0]"


@pytest.mark.parametrize("relation", list(Relation))
@pytest.mark.parametrize("sign", [1, -1])
def test_float_thresholds_beyond_the_type_compare_with_its_largest_value(relation, sign):
    """Y_0 >= 1e39 in float: only +inf is beyond it, `y > FLT_MAX` says exactly that (it used to be an
    internal error converting infinity); the C comparison agrees with the exact one on the extremes."""
    number = FloatFormat()
    threshold = sign * Fraction(10) ** 39
    atom = Atom(((0, Fraction(1)),), -threshold, relation)
    code = float_atom(atom, number).code
    operator, literal = code.split()[1:]
    limit = np.float32(float.fromhex(literal.removesuffix("f")))
    assert abs(float(limit)) == float(np.finfo(np.float32).max)
    compare = {">=": np.greater_equal, ">": np.greater, "<=": np.less_equal, "<": np.less}[operator]
    above = relation in (Relation.GE, Relation.GT)
    for y in (np.float32(np.inf), np.float32(-np.inf), limit, -limit, np.float32(0)):
        if np.isfinite(y):
            real = atom.holds_exact([Fraction(float(y))])
        else:  # +inf is above every threshold, -inf below
            real = above if y > 0 else not above
        assert bool(compare(y, limit)) == real, (y, code)


def test_boxes_are_the_input_stages_image():
    """A bound between two words or floats becomes the nearer one (issue 40): a box of reals is
    never empty for the implementation, and a point written in decimal is its nearest value."""
    box = Box((Fraction(1, 10), Fraction(-3, 16)), (Fraction(2, 10), Fraction(-3, 16)))
    cbox = fixed_box(box, Q)
    assert (cbox.lo, cbox.hi, cbox.moved) == (("2", "-3"), ("3", "-3"), 2)
    point = fixed_box(Box((Fraction(1, 100),), (Fraction(2, 100),)), Q)
    assert (point.lo, point.hi) == (("0",), ("0",))
    fbox = float_box(Box((Fraction(1, 10),), (Fraction(1, 10),)), FloatFormat())
    assert fbox.lo == fbox.hi == (f"{float(np.float32(0.1)).hex()}f",)  # the float nearest 1/10


def test_moved_bounds_are_announced(tmp_path):
    from qverify.properties import robustness

    qnet = quantize_network(load_network(ACAS_1_1), ImplementationOptions(FixedFormat(24, 4)))
    prop = robustness([0.01] * 5, 0.001, label=0, n_outputs=5)
    text = render_harness(qnet, prop).text
    assert "EMPTY" not in text and "vacuous" not in text
    assert "10 bound(s) between two representable values, rounded to the nearer" in text
