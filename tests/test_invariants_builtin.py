"""The built-in interval analysis (plain and symbolic): every simulated neuron value of an input of
the region lies within the bounds; the annotated harness compiles and its replay never fails an
injected assume; the API's choices (none, builtin, empty region, inf/NaN floats)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from qverify.codegen import compile_replay, format_inputs, render_harness, run_lines
from qverify.errors import InputError, RangeError
from qverify.invariants import IntervalMethod, compute_bounds, input_boxes
from qverify.invariants.builtin import box_bounds, builtin_bounds
from qverify.invariants.region import InputBox, mean_width, stable_relus
from qverify.invariants.symbolic import symbolic_bounds
from qverify.invariants.symbolic_exact import exact_symbolic_bounds
from qverify.io import load_network
from qverify.network import Activation, Dense, Network
from qverify.properties import Box, Property, Units, read_vnnlib, robustness
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
    simulate,
)
from tests.conftest import ACAS, ACAS_1_1, random_network

N_SAMPLES = 3000

# ---------------------------------------------------------------- helpers (also used by test_invariants_framac)


def sample_box(qnet, box: InputBox, rng, n: int = N_SAMPLES) -> np.ndarray:
    """Random points of the box, its corners, and points next to its ends (in the C's units)."""
    if qnet.is_fixed:
        inside = rng.integers(box.lo, box.hi + 1, size=(n, box.lo.size))
    else:
        dtype = qnet.number.dtype
        inside = rng.uniform(box.lo.astype(float), box.hi.astype(float), size=(n, box.lo.size)).astype(dtype)
        inside = np.clip(inside, box.lo, box.hi)
    corners = np.where(rng.random((min(n, 256), box.lo.size)) < 0.5, box.lo, box.hi)
    return np.vstack([inside, corners.astype(inside.dtype)])


def violations(qnet, layers, x) -> list[str]:
    """Where a simulated value (of an execution that does not stop at a detected overflow) leaves
    the bounds: 'layer L neuron j pre: v not in [lo, hi]'."""
    result = simulate(qnet, x, trace=True)
    keep = ~result.detected
    found = []
    for index, (trace, bounds) in enumerate(zip(result.layers, layers, strict=True), start=1):
        for kind, values, lo, hi in (
            ("pre", trace.pre, bounds.pre_lo, bounds.pre_hi),
            ("post", trace.post, bounds.post_lo, bounds.post_hi),
        ):
            outside = ((values < lo) | (values > hi)) & keep[:, None]
            for sample, neuron in zip(*np.nonzero(outside)):
                found.append(
                    f"layer {index} neuron {neuron} {kind}: {values[sample, neuron]} not in "
                    f"[{lo[neuron]}, {hi[neuron]}]"
                )
    return found


def assert_sound(qnet, prop, layers, rng, n: int = N_SAMPLES) -> None:
    for box in input_boxes(qnet, prop):
        bad = violations(qnet, layers, sample_box(qnet, box, rng, n))
        assert not bad, bad[:5]


def acas_net():
    return load_network(ACAS_1_1)


def acas_prop(number: int):
    return read_vnnlib(ACAS / "vnnlib" / f"prop_{number}.vnnlib")


def replay_outcomes(qnet, prop, bounds, tmp_path, rng, n: int = 2000) -> set[str]:
    """Compile the annotated harness and replay random in-region inputs: the set of outcomes."""
    executable = compile_replay(render_harness(qnet, prop, bounds).write(tmp_path))
    outcomes = set()
    for box in input_boxes(qnet, prop):
        x = sample_box(qnet, box, rng, n)
        lines = run_lines(executable, format_inputs(x.astype(np.float64) if not qnet.is_fixed else x, True))
        outcomes |= {line.split(" ")[0] for line in lines}
    return outcomes


SIGMOID_TANH_FORMATS = [
    FixedFormat(4, 4, overflow=Overflow.SATURATE),
    FixedFormat(4, 4, overflow=Overflow.WRAP),
    FixedFormat(4, 4, Rounding.FLOOR, Overflow.DETECT),
    FixedFormat(8, 8, overflow=Overflow.WRAP),
    FixedFormat(6, 10, Rounding.FLOOR, Overflow.SATURATE),
    FixedFormat(16, 16, overflow=Overflow.SATURATE),
    FixedFormat(20, 12, overflow=Overflow.WRAP),
    FloatFormat(),
    FloatFormat(FloatKind.DOUBLE),
]


def format_id(number) -> str:
    if isinstance(number, FixedFormat):
        return f"{number.label}-{number.rounding.value}-{number.overflow.value}"
    return number.label


def small_net(rng, activation: Activation, sizes=(3, 10, 8, 2), scale: float = 1.5) -> Network:
    return random_network(rng, sizes, activation, scale=scale)


def small_prop(n_inputs: int, n_outputs: int, radius: float = 0.75) -> Property:
    return robustness([0.25, -0.5, 0.125][:n_inputs], radius, label=0, n_outputs=n_outputs)


# ---------------------------------------------------------------- soundness


@pytest.mark.parametrize("symbolic", [False, True], ids=["interval", "symbolic"])
@pytest.mark.parametrize(
    "number",
    [
        FixedFormat(8, 8, overflow=Overflow.SATURATE),
        FixedFormat(8, 8, overflow=Overflow.WRAP),
        FixedFormat(20, 12, overflow=Overflow.SATURATE),
        FixedFormat(20, 12, Rounding.FLOOR, Overflow.WRAP),
        FloatFormat(),
        FloatFormat(FloatKind.DOUBLE),
    ],
    ids=format_id,
)
def test_acas_phi1_bounds_hold_for_random_inputs(rng, number, symbolic):
    qnet = quantize_network(acas_net(), ImplementationOptions(number))
    prop = acas_prop(1)
    layers = builtin_bounds(qnet, input_boxes(qnet, prop), symbolic)
    assert_sound(qnet, prop, layers, rng)


MAC_CHOICES = [
    (number, accumulation, layout)
    for number in SIGMOID_TANH_FORMATS
    for accumulation, layout in (
        (Accumulation.PER_OP, Layout.SEQUENTIAL),
        (Accumulation.PER_OP, Layout.BALANCED),
        (Accumulation.WIDE, Layout.SEQUENTIAL),
    )
    if isinstance(number, FixedFormat) or accumulation is Accumulation.PER_OP  # wide: fixed point only
]


@pytest.mark.parametrize("activation", [Activation.SIGMOID, Activation.TANH, Activation.RELU])
@pytest.mark.parametrize(
    "number, accumulation, layout",
    MAC_CHOICES,
    ids=[f"{format_id(n)}-{a.value}-{lay.value}" for n, a, lay in MAC_CHOICES],
)
def test_small_networks_bounds_hold_for_random_inputs(rng, activation, number, accumulation, layout):
    net = small_net(rng, activation)
    qnet = quantize_network(net, ImplementationOptions(number, accumulation, layout))
    prop = small_prop(3, 2)
    for symbolic in (False, True):
        assert_sound(qnet, prop, builtin_bounds(qnet, input_boxes(qnet, prop), symbolic), rng, 1500)


@given(
    seed=st.integers(0, 2**32 - 1),
    activation=st.sampled_from([Activation.RELU, Activation.SIGMOID, Activation.TANH]),
    rounding=st.sampled_from(list(Rounding)),
    overflow=st.sampled_from(list(Overflow)),
    accumulation=st.sampled_from(list(Accumulation)),
    frac_bits=st.integers(0, 4),
)
def test_tiny_fixed_networks_bounds_hold_for_every_input(
    seed, activation, rounding, overflow, accumulation, frac_bits
):
    """Exhaustive: every input word of a random box of a 2-input network at <3+?, l> (8-bit words)."""
    rng = np.random.default_rng(seed)
    fmt = FixedFormat(8 - frac_bits, frac_bits, rounding, overflow)
    net = random_network(rng, (2, 5, 4, 2), activation, scale=2.0)
    try:
        qnet = quantize_network(net, ImplementationOptions(fmt, accumulation))
    except RangeError:  # a constant does not fit under detect: not this test's business
        assume(False)
    lo = rng.integers(fmt.min_q, fmt.max_q, size=2)
    hi = np.minimum(lo + rng.integers(0, 40, size=2), fmt.max_q)
    words = np.array(list(itertools.product(*(range(a, b + 1) for a, b in zip(lo, hi)))), dtype=np.int64)
    for symbolic in (False, True):
        layers = box_bounds(qnet, InputBox(lo, hi), symbolic)
        assert not violations(qnet, layers, words)


@pytest.mark.parametrize(
    "number",
    [FixedFormat(16, 16), FixedFormat(16, 16, Rounding.FLOOR), FloatFormat(), FloatFormat(FloatKind.DOUBLE)],
    ids=format_id,
)
@pytest.mark.parametrize("activation", [Activation.RELU, Activation.TANH])
def test_bounds_hold_on_boxes_so_small_that_rounding_dominates(rng, number, activation):
    """A box a few ulps wide: the symbolic bounds' rounding-error terms are all that separate them
    from the simulated values, so an error term that is too small shows up here."""
    net = random_network(rng, (4, 16, 16, 16, 3), activation, scale=1.0)
    qnet = quantize_network(net, ImplementationOptions(number, layout=Layout.BALANCED))
    step = 2.0**-16 if isinstance(number, FixedFormat) else 2.0**-20
    for center in rng.uniform(-1, 1, size=(5, 4)):
        prop = robustness(list(center), 3 * step, label=0, n_outputs=3)
        layers = builtin_bounds(qnet, input_boxes(qnet, prop), symbolic=True)
        assert_sound(qnet, prop, layers, rng, 2000)


EXACT_ORACLE_CHOICES = [
    (number, accumulation)
    for number in (
        FixedFormat(8, 8),
        FixedFormat(8, 8, Rounding.FLOOR, Overflow.WRAP),
        FixedFormat(16, 16),
        FixedFormat(16, 16, Rounding.FLOOR),
        FixedFormat(4, 4, overflow=Overflow.SATURATE),
        FloatFormat(),
        FloatFormat(FloatKind.DOUBLE),
    )
    for accumulation in (Accumulation.PER_OP, Accumulation.WIDE)
    if isinstance(number, FixedFormat) or accumulation is Accumulation.PER_OP
]


@pytest.mark.parametrize(
    "number, accumulation",
    EXACT_ORACLE_CHOICES,
    ids=[f"{format_id(n)}-{a.value}" for n, a in EXACT_ORACLE_CHOICES],
)
@pytest.mark.parametrize("activation", [Activation.RELU, Activation.TANH])
def test_float64_symbolic_bounds_contain_the_exact_ones_and_stay_within_rounding(
    rng, number, accumulation, activation
):
    """The float64 back-substitution (every rounding charged) against the same relations in exact
    rational arithmetic: never tighter (a tighter bound would be unsound), looser by at most a few
    units of the C's last place, and every simulated execution inside."""
    for trial in range(4):
        net = random_network(rng, (3, 12, 10, 8, 2), activation, scale=1.0 + trial)
        qnet = quantize_network(net, ImplementationOptions(number, accumulation))
        prop = small_prop(3, 2, radius=0.25 * (trial + 1))
        (box,) = input_boxes(qnet, prop)
        fast, exact = symbolic_bounds(qnet, box.lo, box.hi), exact_symbolic_bounds(qnet, box.lo, box.hi)
        for ours, oracle in zip(fast, exact):
            assert np.all(ours.pre_lo <= oracle.pre_lo) and np.all(ours.pre_hi >= oracle.pre_hi)
            assert np.all(ours.may_overflow == oracle.may_overflow)
            for a, b in ((ours.pre_lo, oracle.pre_lo), (oracle.pre_hi, ours.pre_hi)):
                gap = b.astype(np.float64) - a.astype(np.float64)
                if isinstance(number, FixedFormat):
                    assert np.all(gap <= 1)  # a word: outward rounding of a bound a rounding apart
                else:
                    ulp = np.spacing(np.abs(b)).astype(np.float64)
                    assert np.all(gap <= 4 * ulp + 1e-9 * (1 + np.abs(b.astype(np.float64))))
        assert not violations(qnet, fast, sample_box(qnet, box, rng, 300))


def test_symbolic_is_never_looser_and_pays_off_on_acas():
    qnet = quantize_network(acas_net(), ImplementationOptions(FixedFormat(20, 12)))
    for number in (1, 3, 4):
        boxes = input_boxes(qnet, acas_prop(number))
        plain, symbolic = builtin_bounds(qnet, boxes, False), builtin_bounds(qnet, boxes, True)
        for a, b in zip(plain, symbolic):
            assert np.all(b.pre_lo >= a.pre_lo) and np.all(b.pre_hi <= a.pre_hi)
            assert np.all(b.post_lo >= a.post_lo) and np.all(b.post_hi <= a.post_hi)
        assert mean_width(qnet, symbolic) < 0.7 * mean_width(qnet, plain)
        assert stable_relus(qnet, symbolic)[0] > stable_relus(qnet, plain)[0]


def test_a_union_of_boxes_is_the_hull_of_the_per_box_bounds(rng):
    net = small_net(rng, Activation.RELU)
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(8, 8)))
    first, second = Box((0, 0, 0), (Fraction(1, 4),) * 3), Box((-1, -1, -1), (Fraction(-1, 2),) * 3)
    union = Property("union", (first, second), small_prop(3, 2).unsafe)
    boxes = input_boxes(qnet, union)
    joined = builtin_bounds(qnet, boxes)
    parts = [box_bounds(qnet, box) for box in boxes]
    for index, bounds in enumerate(joined):
        assert np.array_equal(bounds.pre_lo, np.minimum(parts[0][index].pre_lo, parts[1][index].pre_lo))
        assert np.array_equal(bounds.post_hi, np.maximum(parts[0][index].post_hi, parts[1][index].post_hi))
    assert_sound(qnet, union, joined, rng)


# ---------------------------------------------------------------- injection


@pytest.mark.parametrize(
    "number",
    [FixedFormat(8, 8), FixedFormat(20, 12, overflow=Overflow.WRAP), FloatFormat()],
    ids=format_id,
)
def test_annotated_acas_harness_never_fails_an_injected_assume(tmp_path, rng, number):
    qnet = quantize_network(acas_net(), ImplementationOptions(number))
    prop = acas_prop(1)
    result = compute_bounds(qnet, prop, IntervalMethod.BUILTIN)
    assert result.bounds is not None and "qv_pre7_lo" in render_harness(qnet, prop, result.bounds).text
    outcomes = replay_outcomes(qnet, prop, result.bounds, tmp_path, rng)
    assert outcomes <= {"HOLDS", "VIOLATED"} and "HOLDS" in outcomes


@pytest.mark.parametrize("activation", [Activation.SIGMOID, Activation.TANH])
@pytest.mark.parametrize(
    "number",
    [
        FixedFormat(4, 4, overflow=Overflow.WRAP),
        FixedFormat(4, 4, overflow=Overflow.DETECT),
        FloatFormat(FloatKind.DOUBLE),
    ],
    ids=format_id,
)
def test_annotated_small_harness_never_fails_an_injected_assume(tmp_path, rng, activation, number):
    qnet = quantize_network(small_net(rng, activation), ImplementationOptions(number, layout=Layout.BALANCED))
    prop = small_prop(3, 2)
    result = compute_bounds(qnet, prop, IntervalMethod.BUILTIN)
    outcomes = replay_outcomes(qnet, prop, result.bounds, tmp_path, rng)
    assert "ASSUME-FAILED" not in outcomes and outcomes


# ---------------------------------------------------------------- the API


def test_none_gives_no_bounds(rng):
    qnet = quantize_network(small_net(rng, Activation.RELU), ImplementationOptions(FixedFormat(8, 8)))
    result = compute_bounds(qnet, small_prop(3, 2), IntervalMethod.NONE)
    assert result.bounds is None and result.method_used is IntervalMethod.NONE and not result.warnings


def test_builtin_reports_origin_and_statistics():
    qnet = quantize_network(acas_net(), ImplementationOptions(FixedFormat(20, 12)))
    result = compute_bounds(qnet, acas_prop(3), IntervalMethod.BUILTIN)
    assert result.method_used is IntervalMethod.BUILTIN and not result.warnings
    assert "built-in" in result.bounds.origin
    assert result.stats.relus == 300 and 0 < result.stable_relus <= 300
    assert result.stats.boxes == 1 and result.stats.mean_width > 0
    plain = compute_bounds(qnet, acas_prop(3), IntervalMethod.BUILTIN, symbolic=False)
    assert plain.stable_relus < result.stable_relus


def test_a_region_between_two_words_is_the_nearer_word():
    """No multiple of 1/16 lies in [0.009, 0.011]: the input stage rounds the box to the word 0 in
    every input (issue 40; it used to be an empty region with nothing to inject)."""
    qnet = quantize_network(acas_net(), ImplementationOptions(FixedFormat(24, 4)))
    prop = robustness([0.01] * 5, 0.001, label=0, n_outputs=5)
    (box,) = input_boxes(qnet, prop)
    assert box.lo.tolist() == box.hi.tolist() == [0] * 5
    result = compute_bounds(qnet, prop, IntervalMethod.BUILTIN)
    assert result.bounds is not None and result.stats.boxes == 1
    outputs = simulate(qnet, np.zeros((1, 5), dtype=np.int64)).outputs[0]
    last = result.bounds.layers[-1]
    assert np.all(last.post_lo <= outputs) and np.all(outputs <= last.post_hi)


def test_raw_unit_properties_are_refused(rng):
    qnet = quantize_network(small_net(rng, Activation.RELU), ImplementationOptions(FixedFormat(8, 8)))
    raw = robustness([0.0, 0.0, 0.0], 1, label=0, n_outputs=2, units=Units.RAW)
    with pytest.raises(InputError, match="raw units"):
        compute_bounds(qnet, raw, IntervalMethod.BUILTIN)


def test_float_networks_that_may_overflow_to_inf_get_no_invariants():
    """inf - inf is NaN, and NaN fails every comparison: such bounds must not become assumes."""
    huge = Network(
        (
            Dense(np.array([[1e30, -1e30], [1.0, 2.0]]), np.array([0.0, 1.0]), Activation.RELU),
            Dense(np.array([[1.0, 1.0]]), np.array([0.0]), Activation.IDENTITY),
        ),
        name="overflowing",
    )
    qnet = quantize_network(huge, ImplementationOptions(FloatFormat()))
    prop = robustness([5e9, 5e9], 5e9, label=0, n_outputs=1)
    result = compute_bounds(qnet, prop, IntervalMethod.BUILTIN)
    assert result.bounds is None
    assert len(result.warnings) == 1 and "layer 1, neuron 0 may be infinite or NaN" in result.warnings[0]
    x = np.array([[1e10, 0.0], [0.0, 1e10], [1e10, 1e10]], dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(simulate(qnet, x).outputs).any()  # NaN is really reachable


def test_interval_level_equals_implementation_bounds(rng):
    qnet = quantize_network(small_net(rng, Activation.TANH), ImplementationOptions(FixedFormat(8, 8)))
    (box,) = input_boxes(qnet, small_prop(3, 2))
    ours = box_bounds(qnet, box, symbolic=False)
    for a, b in zip(ours, implementation_bounds(qnet, box.lo, box.hi)):
        assert np.array_equal(a.pre_lo, b.pre_lo) and np.array_equal(a.post_hi, b.post_hi)


def test_symbolic_bounds_are_skipped_with_a_warning_when_too_costly(rng):
    from qverify.invariants.symbolic import COST_BUDGET, symbolic_cost

    net = random_network(rng, (100, 400, 400, 10), Activation.RELU, scale=0.05)
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(16, 16)))
    assert symbolic_cost(qnet) > COST_BUDGET
    prop = robustness([0.0] * 100, 0.01, label=0, n_outputs=10)
    result = compute_bounds(qnet, prop, IntervalMethod.BUILTIN)
    assert result.bounds is not None and result.bounds.origin == "built-in interval analysis"
    assert len(result.warnings) == 1 and result.warnings[0].startswith("symbolic bounds skipped")
