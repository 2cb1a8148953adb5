"""The input stage (issue 40): a real box becomes what the implementation's input conversion makes of
it -- never an empty set for a box that is not empty as real numbers.

Unit checks of the conversions against numpy's casts and the C's fixed-point conversion, then the
issue's shape end to end in every number format: most inputs pinned to one value written in decimal
(no float, double, half or fixed-point word equals it) next to two perturbed inputs, with an unsafe
set the network reaches on the whole box (UNSAFE, replayed in gcc, and the float network's outputs
checked against onnxruntime) and one it never reaches (SAFE, checked on samples of the image).
"""

from __future__ import annotations

import shutil
from fractions import Fraction

import numpy as np
import pytest

from qverify.backends import InternalOptions, Limits, Status
from qverify.codegen.conditions import fixed_box, float_box, implementation_box, int8_box
from qverify.errors import InputError
from qverify.io import load_network
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Int8Format,
    Rounding,
    quantize_network,
    quantize_real,
    simulate,
)
from qverify.quant.inputs import fixed_word, nearest_float
from qverify.verification import VerifyOptions, input_bounds_moved, verify_property
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

CNN = ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.onnx"
CNN_INT8 = ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.int8.onnx"
IMAGE = ROOT / "benchmarks" / "digits-cnn" / "img00-digit2.txt"
SAFETY_NET_S = 600.0  # far above what these easy queries take: only a hang ends here
FLOATS = [FloatKind.HALF, FloatKind.FLOAT, FloatKind.DOUBLE]


# ------------------------------------------------------------------------------ the conversions


@pytest.mark.parametrize("kind", FLOATS)
def test_nearest_float_is_the_cast_of_every_double(kind):
    """For float64 values (every decimal a parser reads) the conversion is numpy's cast: round to
    nearest, ties to even; exact midpoints between two values of the type included."""
    number = FloatFormat(kind)
    rng = np.random.default_rng(40)
    values = np.concatenate([rng.normal(0, 1, 3000), rng.normal(0, 1e3, 500), rng.normal(0, 1e-6, 500)])
    if kind is FloatKind.HALF:
        values = values[np.abs(values) < 60000]
    typed = values.astype(number.dtype)
    neighbours = np.nextafter(typed, number.dtype(np.inf))
    midpoints = (typed.astype(np.float64) + neighbours.astype(np.float64)) / 2  # exact in float64
    if kind is FloatKind.DOUBLE:
        midpoints = values  # a double's midpoints are not doubles: the cast is the identity
    for value in np.concatenate([values, midpoints]):
        converted, clipped = nearest_float(Fraction(float(value)), number)
        assert not clipped
        assert converted == float(np.float64(value).astype(number.dtype)), value


@pytest.mark.parametrize("kind", FLOATS)
def test_nearest_float_of_a_decimal_between_two_values(kind):
    """A decimal strictly between two values of the type goes to the nearer, decided exactly (no
    double rounding through float64), and beyond the largest value it saturates."""
    number = FloatFormat(kind)
    dtype = number.dtype
    low = dtype(0.4328822419884990)
    high = np.nextafter(low, dtype(np.inf))
    gap = Fraction(float(high)) - Fraction(float(low))
    just_below_half = Fraction(float(low)) + gap / 2 - gap / 10**30
    just_above_half = Fraction(float(low)) + gap / 2 + gap / 10**30
    assert nearest_float(just_below_half, number) == (float(low), False)
    assert nearest_float(just_above_half, number) == (float(high), False)
    assert nearest_float(-just_above_half, number) == (-float(high), False)
    largest = float(np.finfo(dtype).max)
    assert nearest_float(Fraction(10) ** 400, number) == (largest, True)
    assert nearest_float(-(Fraction(10) ** 400), number) == (-largest, True)


@pytest.mark.parametrize("rounding", list(Rounding))
def test_fixed_word_is_the_c_conversion(rounding):
    """The word of a real is the harness's fxp_from_double (nearest: ties away from zero; floor),
    saturated to the word range."""
    fmt = FixedFormat(4, 4, rounding)
    rng = np.random.default_rng(41)
    values = np.concatenate([rng.uniform(-8.5, 8.5, 2000), np.arange(-128.5, 128, 0.5) / 16])
    words, _ = quantize_real(values, FixedFormat(4, 4, rounding))
    for value, word in zip(values, words):
        assert fixed_word(Fraction(float(value)), fmt)[0] == int(word), value
    assert fixed_word(Fraction(1, 32), FixedFormat(4, 4)) == (1, False)  # half a word: away from zero
    assert fixed_word(Fraction(-1, 32), FixedFormat(4, 4)) == (-1, False)
    assert fixed_word(Fraction(1, 32), FixedFormat(4, 4, Rounding.FLOOR)) == (0, False)
    assert fixed_word(Fraction(100), fmt) == (127, True)
    assert fixed_word(Fraction(-100), fmt) == (-128, True)


def test_sub_word_boxes_are_never_empty():
    """The issue's bound, `X_0 = -0.432882241988499`, as a point box: each format's box holds the one
    value the input stage gives, where inward rounding held none."""
    value = Fraction("-0.432882241988499")
    point = Box((value,), (value,))
    for kind in FLOATS:
        converted = float_box(point, FloatFormat(kind))
        assert converted.lo == converted.hi and converted.moved == 2
        expected = np.float64(float(value)).astype(FloatFormat(kind).dtype)
        assert float.fromhex(converted.lo[0].removesuffix("f")) == float(expected)
    for fmt in (FixedFormat(16, 16), FixedFormat(4, 4, Rounding.FLOOR)):
        converted = fixed_box(point, fmt)
        assert converted.lo == converted.hi == (str(fixed_word(value, fmt)[0]),)
    qnet = quantize_network(load_network(CNN_INT8), ImplementationOptions(Int8Format()))
    wide = Box((value,) * qnet.n_inputs, (value,) * qnet.n_inputs)
    converted = int8_box(wide, qnet.input_quant)
    codes = qnet.input_quant.quantize(np.full(qnet.n_inputs, float(value), dtype=np.float32))
    assert converted.lo == converted.hi == tuple(map(str, codes))


def test_a_box_empty_as_written_is_an_error_naming_the_input():
    with pytest.raises(InputError, match="X_1 has lower bound 0.5 > upper bound 0.25"):
        Box((Fraction(0), Fraction(1, 2)), (Fraction(1), Fraction(1, 4)))


# ------------------------------------------------------------------------------ end to end


def _centre() -> np.ndarray:
    rows = [line for line in IMAGE.read_text().splitlines() if line and not line.startswith("#")]
    return np.array([float(v) for row in rows for v in row.split(",")])


def _pinned_box(centre: np.ndarray, perturbed: tuple[int, ...], radius: float) -> Box:
    """Every input pinned to a decimal of 16 significant digits near its pixel (no value of any
    format equals it: a third of a level added), the `perturbed` ones within `radius` of it."""
    values = [Fraction(f"{v + 1 / 3 / 16:.16g}") for v in centre]
    lo = [v - Fraction(radius) if i in perturbed else v for i, v in enumerate(values)]
    hi = [v + Fraction(radius) if i in perturbed else v for i, v in enumerate(values)]
    return Box(tuple(lo), tuple(hi))


def _property(box: Box, label: int, n_outputs: int, reached: bool) -> Property:
    """reached: 'the network predicts `label`' (one clause of n-1 atoms: every output at most
    Y_label), which holds on the whole box; else 'another class wins' (robustness), which never
    holds there."""

    def difference(a: int, b: int) -> Atom:
        return Atom(((a, Fraction(1)), (b, Fraction(-1))), Fraction(0), Relation.GE)

    others = [j for j in range(n_outputs) if j != label]
    if reached:
        clauses = (Clause(tuple(difference(label, j) for j in others)),)
    else:
        clauses = tuple(Clause((difference(j, label),)) for j in others)
    return Property("pinned-" + ("reached" if reached else "robust"), (box,), OutputCondition(clauses))


FORMATS = {
    "float": (FloatFormat(FloatKind.FLOAT), "ieee"),
    "double": (FloatFormat(FloatKind.DOUBLE), "ieee"),
    "half": (FloatFormat(FloatKind.HALF), "ieee"),
    "real": (FloatFormat(FloatKind.FLOAT), "real"),
    "16.16": (FixedFormat(16, 16), "ieee"),
    "8.8-floor": (FixedFormat(8, 8, Rounding.FLOOR), "ieee"),
    "int8": (Int8Format(), "ieee"),
}


def _verify(name: str, reached: bool, tmp_path):
    number, semantics = FORMATS[name]
    net = load_network(CNN_INT8 if name == "int8" else CNN)
    centre = _centre()
    qnet_float = quantize_network(load_network(CNN), ImplementationOptions(FloatFormat(FloatKind.DOUBLE)))
    label = int(np.argmax(simulate(qnet_float, centre[None, :]).outputs[0]))
    box = _pinned_box(centre, perturbed=(19, 20), radius=0.05)
    prop = _property(box, label, net.n_outputs, reached)
    options = VerifyOptions(
        limits=Limits(timeout_s=SAFETY_NET_S), internal=InternalOptions(semantics=semantics), workdir=tmp_path
    )
    return net, prop, verify_property(net, prop, ImplementationOptions(number), options)


@pytest.mark.parametrize("name", list(FORMATS))
def test_pinned_inputs_written_in_decimal_are_unsafe_where_the_network_reaches_the_set(name, tmp_path):
    import onnxruntime as ort

    net, prop, record = _verify(name, reached=True, tmp_path=tmp_path)
    assert record.status is Status.UNSAFE, record.to_json()
    assert not any("vacuous" in w for w in record.warnings)
    assert any("between two values" in w for w in record.warnings), record.warnings
    example = record.counterexample
    assert example is not None and example.violated.startswith("unsafe clause 1")  # replayed in gcc
    # the input the C ran is the input stage's image of the pinned values
    qnet = quantize_network(net, ImplementationOptions(FORMATS[name][0]))
    converted = implementation_box(qnet, prop.boxes[0])
    read = int if qnet.is_integer else (lambda t: float.fromhex(t.removesuffix("f")))
    words = example.inputs_word
    pinned = [i for i in range(qnet.n_inputs) if i not in (19, 20)]
    assert all(read(converted.lo[i]) == float(words[i]) == read(converted.hi[i]) for i in pinned)
    # and onnxruntime agrees with the float network's outputs there
    model = CNN_INT8 if name == "int8" else CNN
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feed = np.asarray(example.inputs_real, dtype=np.float32).reshape(1, 1, 8, 8)
    (ort_out,) = session.run(None, {session.get_inputs()[0].name: feed})
    if name == "int8":  # its C is the model's own arithmetic: onnxruntime's outputs, exactly
        assert np.array_equal(ort_out[0], np.asarray(example.outputs_c, dtype=np.float32))
    else:
        assert np.allclose(ort_out[0], example.outputs_float, rtol=1e-5, atol=1e-5)
    assert prop.unsafe.violated_clause(ort_out)[0] >= 0


@pytest.mark.parametrize("name", list(FORMATS))
def test_pinned_inputs_written_in_decimal_are_safe_where_the_network_is_robust(name, tmp_path):
    net, prop, record = _verify(name, reached=False, tmp_path=tmp_path)
    assert record.status is Status.SAFE, record.to_json()
    assert not any("vacuous" in w for w in record.warnings)
    # the image of the box, sampled: no point violates (a SAFE over the non-empty input set)
    qnet = quantize_network(net, ImplementationOptions(FORMATS[name][0]))
    converted = implementation_box(qnet, prop.boxes[0])
    read = int if qnet.is_integer else (lambda t: float.fromhex(t.removesuffix("f")))
    lo = np.array([read(t) for t in converted.lo], dtype=np.float64)
    hi = np.array([read(t) for t in converted.hi], dtype=np.float64)
    assert np.all(lo <= hi)
    rng = np.random.default_rng(42)
    points = rng.uniform(lo, hi, size=(500, qnet.n_inputs))
    points = np.rint(points).astype(np.int64) if qnet.is_integer else qnet.number.round(points)
    outputs = simulate(qnet, points).outputs
    assert all(prop.unsafe.violated_clause_exact(qnet.output_reals(row)) < 0 for row in outputs)


def test_moved_bounds_are_said_in_one_line():
    qnet = quantize_network(load_network(CNN), ImplementationOptions(FixedFormat(16, 16)))
    on_grid = Box((Fraction(1, 4),) * qnet.n_inputs, (Fraction(1, 2),) * qnet.n_inputs)
    prop = _property(on_grid, 0, 10, True)
    assert input_bounds_moved(qnet, prop) == ""
    off_grid = _pinned_box(_centre(), (0,), 0.1)
    line = input_bounds_moved(qnet, _property(off_grid, 0, 10, True))
    assert line.startswith("128 input bounds lie between two values of <16,16>'s inputs")
