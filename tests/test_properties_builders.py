"""Tests for `qverify.properties.builders`: robustness boxes, R_s / L_s, units, centres."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from qverify.errors import InputError
from qverify.io import load_network
from qverify.network import Activation, Dense, InputNormalisation, Network, OutputNormalisation
from qverify.properties import (
    Atom,
    Box,
    Clause,
    OutputCondition,
    Property,
    Relation,
    Units,
    default_domain,
    hyper_rectangle,
    hypercube,
    read_center,
    read_vnnlib,
    robustness,
    to_normalised,
)

ROOT = Path(__file__).resolve().parents[1]
ACAS_1_1 = ROOT / "benchmarks" / "acasxu" / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet"
FIXTURES = ROOT / "tests" / "fixtures" / "properties"
F = Fraction
UNIT = ([0, 0, 0], [1, 1, 1])


@pytest.fixture(scope="module")
def acas() -> Network:
    return load_network(ACAS_1_1)


def plain_network(n_in: int = 2, n_out: int = 2) -> Network:
    return Network((Dense(np.ones((n_out, n_in)), np.zeros(n_out), Activation.IDENTITY),))


# ---------------------------------------------------------------- robustness


def test_robustness_box_is_exact_and_clipped_to_the_domain() -> None:
    prop = robustness([0.02, 0.5, 0.99], 0.05, label=1, n_outputs=3, domain=UNIT)
    (box,) = prop.boxes
    assert box.lo == (0, F(0.5) - F(0.05), F(0.99) - F(0.05))  # the floats' exact binary values
    assert box.hi == (F(0.02) + F(0.05), F(0.5) + F(0.05), 1)
    assert prop.units is Units.NORMALISED
    assert prop.robustness.label == 1 and prop.robustness.radius == "linf eps=0.05"
    assert prop.robustness.center == (0.02, 0.5, 0.99)


def test_robustness_without_domain_and_with_fractions() -> None:
    (box,) = robustness([F(1, 3), F(-2)], F(1, 6), label=0, n_outputs=2).boxes
    assert box == Box((F(1, 6), F(-13, 6)), (F(1, 2), F(-11, 6)))


def test_untargeted_unsafe_set_counts_ties_as_violations() -> None:
    unsafe = robustness([0.5], 0.1, label=1, n_outputs=3).unsafe
    assert unsafe.clauses == (
        Clause((Atom(((0, F(1)), (1, F(-1))), 0, Relation.GE),)),
        Clause((Atom(((1, F(-1)), (2, F(1))), 0, Relation.GE),)),
    )
    scores = np.array([[0.0, 2.0, 1.0], [2.0, 2.0, 1.0], [0.0, 2.0, 3.0]])
    assert unsafe.violated_clause(scores).tolist() == [-1, 0, 1]


def test_targeted_unsafe_set_has_only_the_target() -> None:
    prop = robustness([0.5, 0.5], 0.1, label=2, n_outputs=4, target=0, domain=([0, 0], [1, 1]))
    assert prop.unsafe.clauses == (Clause((Atom(((0, F(1)), (2, F(-1))), 0, Relation.GE),)),)
    assert prop.robustness.target == 0 and "target0" in prop.name
    scores = np.array([[0.0, 9.0, 1.0, 9.0], [1.0, 0.0, 1.0, 0.0]])
    assert prop.unsafe.violated_clause(scores).tolist() == [-1, 0]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"label": 3}, "label 3 is not an output index 0..2"),
        ({"target": 1}, "target 1 equals the label"),
        ({"target": -1}, "target -1"),
        ({"eps": -0.1}, "eps -0.1 is negative"),
        ({"center": [2.0, 0.5]}, "input 0: centre 2.0 is farther than the radius"),
        ({"domain": ([0], [1])}, "domain lo has 1 values, expected 2"),
        ({"domain": ([0, 1], [1, 0])}, "input 1 has lo 1.0 > hi 0.0"),
        ({"center": [0.5, float("nan")]}, "center[1]: nan is not finite"),
        ({"eps": "abc"}, "eps: 'abc' is not a number"),
    ],
)
def test_robustness_rejects_bad_arguments(kwargs: dict, fragment: str) -> None:
    arguments = {"center": [0.5, 0.5], "eps": 0.1, "label": 1, "n_outputs": 3, "domain": ([0, 0], [1, 1])}
    arguments.update(kwargs)
    with pytest.raises(InputError) as caught:
        robustness(**arguments)
    assert fragment in str(caught.value)


# ---------------------------------------------------------------- R_s and L_s


def test_hyper_rectangle_width_is_a_share_of_the_range() -> None:
    (box,) = hyper_rectangle([0.5, 0.5, 0.97], 10, label=0, n_outputs=2, domain=UNIT).boxes
    assert box.lo == (F(9, 20), F(9, 20), F(0.97) - F(1, 20))
    assert box.hi == (F(11, 20), F(11, 20), 1)  # clipped
    (wide,) = hyper_rectangle([100], 10, label=0, n_outputs=2, domain=([0], [255])).boxes
    assert (wide.lo, wide.hi) == ((F(8725, 100),), (F(11275, 100),))  # width 25.5 centred on 100
    assert hyper_rectangle([0.5], 0, 0, 2, ([0], [1])).boxes[0] == Box((F(1, 2),), (F(1, 2),))


def test_hyper_rectangle_needs_a_domain_and_a_percentage() -> None:
    with pytest.raises(InputError, match="needs a domain"):
        hyper_rectangle([0.5], 10, 0, 2, None)
    with pytest.raises(InputError, match="percent 150.0 is outside"):
        hyper_rectangle([0.5], 150, 0, 2, ([0], [1]))


def test_hypercube_side_in_pixel_levels() -> None:
    prop = hypercube([100, 0, 255], 4, label=1, n_outputs=10, domain=([0] * 3, [255] * 3), units=Units.RAW)
    (box,) = prop.boxes
    assert box.lo == (98, 0, 253) and box.hi == (102, 2, 255)
    assert prop.units is Units.RAW and prop.robustness.radius == "L_s side=4"
    assert len(prop.unsafe.clauses) == 9
    (free,) = hypercube([0.5], F(1, 3), 0, 2).boxes
    assert free == Box((F(1, 3),), (F(2, 3),))
    with pytest.raises(InputError, match="side -1.0 is negative"):
        hypercube([0.5], -1.0, 0, 2)


# ---------------------------------------------------------------- units


ACAS_RAW_PHI1 = (
    # prop_1's comments: the unscaled input box
    (55947.691, 0.0, 0.0, 1145.0, 0.0),
    (60760.0, 0.0, 0.0, 1200.0, 60.0),
)


def raw_phi1() -> Property:
    lo, hi = ACAS_RAW_PHI1
    return Property(
        "phi1-raw",
        (Box(tuple(F(v) for v in lo), tuple(F(v) for v in hi)),),
        OutputCondition((Clause((Atom(((0, F(1)),), F(-1500), Relation.GE),)),)),  # COC >= 1500
        units=Units.RAW,
    )


def test_to_normalised_matches_the_float_normalisation(acas: Network) -> None:
    prop = to_normalised(raw_phi1(), acas)
    assert prop.units is Units.NORMALISED and "converted from raw units" in prop.notes[-1]
    lo, hi = (np.array(v) for v in ACAS_RAW_PHI1)
    norm = acas.input_norm
    assert np.allclose(prop.boxes[0].lo_array(), (lo - norm.mean) / norm.range, rtol=0, atol=1e-12)
    assert np.allclose(prop.boxes[0].hi_array(), (hi - norm.mean) / norm.range, rtol=0, atol=1e-12)
    (atom,) = prop.unsafe.clauses[0].atoms
    ((index, coefficient),) = atom.terms
    threshold = -atom.constant / coefficient
    assert index == 0 and abs(float(threshold) - 3.991125645861615) < 1e-9  # prop_1's comment
    file_box = read_vnnlib(ROOT / "benchmarks" / "acasxu" / "vnnlib" / "prop_1.vnnlib").boxes[0]
    assert np.allclose(prop.boxes[0].lo_array()[[0, 3, 4]], file_box.lo_array()[[0, 3, 4]], atol=1e-8)


def test_to_normalised_is_exact_with_fraction_arithmetic(acas: Network) -> None:
    prop = to_normalised(raw_phi1(), acas)
    mean, scale = F(float(acas.input_norm.mean[3])), F(float(acas.input_norm.range[3]))
    assert prop.boxes[0].lo[3] == (F(1145) - mean) / scale
    (atom,) = prop.unsafe.clauses[0].atoms
    assert atom.terms == ((0, F(float(acas.output_norm.range[0]))),)
    assert atom.constant == F(-1500) + F(float(acas.output_norm.mean[0]))


def test_to_normalised_clips_first(acas: Network) -> None:
    """A raw box beyond the NNet maximum collapses onto the clipped boundary (NNet semantics)."""
    norm = acas.input_norm
    above = [float(norm.maximum[i]) + 100 for i in range(5)]
    prop = Property(
        "above",
        (Box(tuple(F(v) for v in above), tuple(F(v + 1) for v in above)),),
        OutputCondition(()),
        units=Units.RAW,
    )
    box = to_normalised(prop, acas).boxes[0]
    assert box.lo == box.hi == default_domain(acas)[1]


def test_to_normalised_identity_cases(acas: Network) -> None:
    normalised = read_vnnlib(ROOT / "benchmarks" / "acasxu" / "vnnlib" / "prop_1.vnnlib")
    assert to_normalised(normalised, acas) is normalised
    raw = hypercube([0.5, 0.5], 0.25, label=0, n_outputs=2, units=Units.RAW)
    converted = to_normalised(raw, plain_network())
    assert converted.boxes == raw.boxes and converted.unsafe == raw.unsafe
    assert converted.units is Units.NORMALISED
    with pytest.raises(InputError, match="3 inputs, the network 2"):
        to_normalised(hypercube([0.5] * 3, 0.25, 0, 2, units=Units.RAW), plain_network())


def test_to_normalised_broadcasts_a_single_output_scale() -> None:
    net = Network(
        (Dense(np.ones((2, 1)), np.zeros(2), Activation.IDENTITY),),
        input_norm=InputNormalisation([-np.inf], [np.inf], [1.0], [2.0]),
        output_norm=OutputNormalisation([10.0], [4.0]),
    )
    prop = robustness([5.0], 1.0, label=0, n_outputs=2, units=Units.RAW)
    converted = to_normalised(prop, net)
    assert converted.boxes[0] == Box((F(3, 2),), (F(5, 2),))  # no clipping at +-inf
    # y1_raw - y0_raw >= 0  ->  4 y1 - 4 y0 >= 0 (the means cancel)
    assert converted.unsafe.clauses[0].atoms[0] == Atom(((0, F(-4)), (1, F(4))), 0, Relation.GE)
    assert converted.robustness.center == (2.0,)


def test_default_domain(acas: Network) -> None:
    lo, hi = default_domain(acas)
    float_lo, float_hi = acas.default_input_box()
    assert np.allclose([float(v) for v in lo], float_lo, rtol=0, atol=1e-15)
    assert np.allclose([float(v) for v in hi], float_hi, rtol=0, atol=1e-15)
    assert default_domain(plain_network(3)) == ((0, 0, 0), (1, 1, 1))


# ---------------------------------------------------------------- centres


def test_read_center_from_text() -> None:
    assert read_center("0.1, 0.2 0.3", 3) == (F(1, 10), F(1, 5), F(3, 10))
    assert read_center("1/255;2e-1", 2) == (F(1, 255), F(1, 5))
    long_text = ", ".join(["0.5"] * 784)  # longer than any file name: parsed, never stat'ed as a path
    assert len(read_center(long_text, 784)) == 784


def test_read_center_from_files(tmp_path: Path) -> None:
    assert read_center(FIXTURES / "acas_center.txt", 5) == (30000, F(1, 2), F(-1, 4), 700, 600)
    csv = tmp_path / "image.csv"
    csv.write_text("0,0.5\n1,0.25\n")
    assert read_center(str(csv), 4) == (0, F(1, 2), 1, F(1, 4))
    npy = tmp_path / "image.npy"
    np.save(npy, np.array([[0.1, 0.2], [0.3, 0.4]], dtype=np.float32))
    assert read_center(npy, 4)[0] == F(float(np.float32(0.1)))


@pytest.mark.parametrize(
    ("argument", "fragment"),
    [
        ("0.1, 0.2", "center: 2 values, the network has 3 inputs"),
        ("0.1, x, 0.3", "center: value 2: 'x' is not a number"),
        ("missing.txt", "missing.txt: no such file"),
        (Path("/nonexistent/c.npy"), "no such file"),
    ],
)
def test_read_center_errors(argument: str | Path, fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        read_center(argument, 3)
    assert fragment in str(caught.value)


def test_read_center_rejects_bad_files(tmp_path: Path) -> None:
    text = tmp_path / "c.txt"
    text.write_text("# header\n0.1 0.2\nnan\n")
    with pytest.raises(InputError, match=r"c\.txt:3: value 1: 'nan' is not a number"):
        read_center(text, 3)
    npy = tmp_path / "c.npy"
    np.save(npy, np.array(["a", "b"]))
    with pytest.raises(InputError, match="numeric array"):
        read_center(npy, 2)
    garbage = tmp_path / "g.npy"
    garbage.write_bytes(b"not numpy")
    with pytest.raises(InputError, match="cannot read as .npy"):
        read_center(garbage, 2)
