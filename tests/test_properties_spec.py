"""Tests for `qverify.tasks.spec_file`: valid specs of every kind, and one test per defect."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType

import pytest

from qverify.errors import InputError
from qverify.properties import Units, read_vnnlib
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Layout,
    LutDesign,
    Overflow,
    Rounding,
)
from qverify.tasks import Backend, Solver, Spec, TaskOptions, read_spec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "properties"
ACAS_1_1 = ROOT / "benchmarks" / "acasxu" / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet"
PROP_1 = ROOT / "benchmarks" / "acasxu" / "vnnlib" / "prop_1.vnnlib"
NETWORK = f'network = "{ACAS_1_1}"\n'
VNNLIB_PROPERTY = f'[property]\nvnnlib = "{PROP_1}"\n'
CENTER = "center = [0.1, 0.0, 0.0, 0.2, -0.1]\nlabel = 0\n"


def write_spec(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def spec_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(InputError) as caught:
        read_spec(write_spec(tmp_path, text))
    return str(caught.value)


# ---------------------------------------------------------------- valid specs


def test_fixture_with_every_key_spelled_out() -> None:
    spec = read_spec(FIXTURES / "acas_1_1_phi1.toml")
    assert isinstance(spec, Spec) and spec.name == "acas-1-1-phi1"
    assert spec.network_path == ACAS_1_1  # relative to the spec file, resolved
    expected = read_vnnlib(PROP_1)
    assert spec.property.boxes == expected.boxes and spec.property.unsafe == expected.unsafe
    assert spec.property.name == "prop_1"
    assert spec.implementation == ImplementationOptions()
    assert isinstance(spec.given, MappingProxyType)
    assert replace(spec.options, lut_res=None) == TaskOptions()  # every key spelled out, at its default
    assert spec.image_shape == (5, 1)


def test_minimal_spec_gets_the_defaults(tmp_path: Path) -> None:
    spec = read_spec(write_spec(tmp_path, NETWORK + VNNLIB_PROPERTY, "minimal.toml"))
    assert spec.name == "minimal" and spec.image_shape is None
    assert spec.implementation == ImplementationOptions()
    assert spec.given == {} and spec.options.backend is Backend.INTERNAL and spec.options.timeout == 60


def test_raw_fixture_robustness_is_converted_to_normalised_units() -> None:
    spec = read_spec(FIXTURES / "acas_robustness.toml")
    prop = spec.property
    assert prop.units is Units.NORMALISED and prop.robustness.label == 0
    assert spec.implementation.number == FloatFormat(FloatKind.DOUBLE)
    assert -0.33 < float(prop.boxes[0].lo[0]) < float(prop.boxes[0].hi[0]) < 0.68  # normalised rho
    assert len(prop.unsafe.clauses) == 4


@pytest.mark.parametrize(
    ("kind", "radius", "width"),
    [
        ("robustness", "eps = 0.05", Fraction(0.05) * 2),
        ("hyperrectangle", "percent = 10", None),
        ("hypercube", 'side = "1/10"', Fraction(1, 10)),
    ],
)
def test_every_builder_kind_loads(tmp_path: Path, kind: str, radius: str, width: Fraction | None) -> None:
    text = NETWORK + f'[property]\nkind = "{kind}"\n{CENTER}{radius}\ntarget = 3\n'
    prop = read_spec(write_spec(tmp_path, text)).property
    assert prop.robustness.target == 3 and len(prop.unsafe.clauses) == 1
    box = prop.boxes[0]
    if width is not None:
        assert box.hi[1] - box.lo[1] == width
    else:  # 10% of the normalised range of X_1 (about 1.0000001)
        assert abs(float(box.hi[1] - box.lo[1]) - 0.1) < 1e-6


def test_builder_with_explicit_domain_and_center_file(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("0.1,0,0\n0.2,-0.1\n")
    text = (
        NETWORK + '[property]\nkind = "robustness"\ncenter = "c.csv"\nlabel = 2\neps = 0.5\n'
        "domain = [[0, -1, -1, -1, -1], [0.3, 1, 1, 1, 1]]\n"
    )
    box = read_spec(write_spec(tmp_path, text)).property.boxes[0]
    assert box.lo[0] == 0 and box.hi[0] == Fraction(0.3)
    text_none = text.replace("domain = [[0, -1, -1, -1, -1], [0.3, 1, 1, 1, 1]]", 'domain = "none"')
    assert read_spec(write_spec(tmp_path, text_none)).property.boxes[0].lo[0] == Fraction("0.1") - Fraction(
        "0.5"
    )


def test_raw_vnnlib_property(tmp_path: Path) -> None:
    raw = PROP_1.read_text().split("; Unscaled Input 0")[0]
    bounds = [(55947.691, 60760), (-3.14, 3.14), (-3.14, 3.14), (1145, 1200), (0, 60)]
    raw += "".join(
        f"(assert (>= X_{i} {lo}))\n(assert (<= X_{i} {hi}))\n" for i, (lo, hi) in enumerate(bounds)
    )
    raw += "(assert (>= Y_0 1500))\n"
    (tmp_path / "raw.vnnlib").write_text(raw)
    text = NETWORK + '[property]\nvnnlib = "raw.vnnlib"\nunits = "raw"\n'
    prop = read_spec(write_spec(tmp_path, text)).property
    (atom,) = prop.unsafe.clauses[0].atoms
    assert abs(float(-atom.constant / atom.terms[0][1]) - 3.991125645861615) < 1e-9


def test_implementation_and_verify_options(tmp_path: Path) -> None:
    text = (
        NETWORK
        + VNNLIB_PROPERTY
        + (
            '[implementation]\nformat = "8.8"\nrounding = "floor"\noverflow = "wrap"\naccumulate = "wide"\n'
            'layout = "balanced"\nlut_eps = 0.01\nlut_range = 4\n'
            '[verify]\nbackend = "esbmc"\ntimeout = 2.5\nmemory_mb = 512\nintervals = "none"\nsolver = "z3"\n'
            'certify = true\nesbmc = "tools/esbmc"\nesbmc_args = ["--k-induction"]\n'
        )
    )
    spec = read_spec(write_spec(tmp_path, text))
    assert spec.implementation == ImplementationOptions(
        FixedFormat(8, 8, Rounding.FLOOR, Overflow.WRAP),
        Accumulation.WIDE,
        Layout.BALANCED,
        LutDesign(eps=0.01, resolution=None, half_range=4.0),
    )
    assert spec.options.timeout == 2.5 and spec.options.certify is True
    assert spec.options.esbmc == str(tmp_path.resolve() / "tools" / "esbmc")
    assert spec.options.esbmc_args == ("--k-induction",)
    assert spec.options.solver is Solver.Z3 and spec.options.memory_mb == 512
    float_spec = read_spec(
        write_spec(tmp_path, NETWORK + VNNLIB_PROPERTY + '[implementation]\nformat = "float"\n')
    )
    assert float_spec.implementation.number == FloatFormat(FloatKind.FLOAT)


# ---------------------------------------------------------------- defects, one each


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("colour = 1\n" + NETWORK + VNNLIB_PROPERTY, ["spec.toml: colour: unknown key"]),
        (NETWORK + VNNLIB_PROPERTY + "speed = 1\n", ["[property] speed: unknown key with vnnlib"]),
        (
            NETWORK + VNNLIB_PROPERTY + "[implementation]\nfromat = '8.8'\n",
            ["[implementation] fromat: unknown key"],
        ),
        (NETWORK + VNNLIB_PROPERTY + "[verify]\ntimout = 5\n", ["[verify] timout: unknown key"]),
        (NETWORK + VNNLIB_PROPERTY + "[extra]\n", ["spec.toml: extra: unknown key"]),
        (
            NETWORK + VNNLIB_PROPERTY + '[implementation]\nformat = "0.8"\n',
            ["[implementation] format:", "0.8"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + "[implementation]\nformat = 16.16\n",
            ["[implementation] format: expected a string", "16.16 (float)"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + '[implementation]\nformat = "abc"\n',
            ["[implementation] format: bad format 'abc'"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + '[implementation]\nformat = "float"\nrounding = "floor"\n',
            ["[implementation] rounding: applies to fixed-point"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + '[implementation]\nrounding = "up"\n',
            ["[implementation] rounding: 'up' is not one of nearest | floor"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + '[implementation]\nformat = "float"\naccumulate = "wide"\n',
            ["[implementation] accumulate:", "fixed-point formats only"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + "[implementation]\nlut_res = 2\nlut_eps = 0.1\n",
            ["[implementation] lut_res, lut_eps: give at most one"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + "[implementation]\nlut_res = 9\n",
            ["[implementation] lut_res:", "0..5"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + "[implementation]\nlut_range = 100\n",
            ["[implementation] lut_range:", "(0, 64]"],
        ),
        (NETWORK + VNNLIB_PROPERTY + "[verify]\ntimeout = -1\n", ["[verify] timeout: must be a positive"]),
        (
            NETWORK + VNNLIB_PROPERTY + '[verify]\ncertify = "yes"\n',
            ["[verify] certify: expected true or false"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + "[verify]\nmemory_mb = true\n",
            ["[verify] memory_mb: expected an integer"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + '[verify]\nsolver = "cvc5"\n',
            ["[verify] solver: 'cvc5' is not one of milp | bitwuzla | z3"],
        ),
        (
            NETWORK + VNNLIB_PROPERTY + "[verify]\nesbmc_args = [1]\n",
            ["[verify] esbmc_args: expected an array of strings"],
        ),
        (
            'network = "missing.nnet"\n' + VNNLIB_PROPERTY,
            ["spec.toml: network: no such file", "missing.nnet"],
        ),
        (VNNLIB_PROPERTY, ["spec.toml: network: missing"]),
        (NETWORK, ["spec.toml: property: missing"]),
        (NETWORK + "property = 3\n", ["spec.toml: property: expected a table"]),
        (NETWORK + '[property]\nvnnlib = "nope.vnnlib"\n', ["[property] vnnlib: no such file"]),
        (NETWORK + VNNLIB_PROPERTY + 'kind = "robustness"\n', ["[property] vnnlib, kind: give exactly one"]),
        (NETWORK + "[property]\nunits = 'raw'\n", ["[property] vnnlib, kind: give exactly one"]),
        (
            NETWORK + VNNLIB_PROPERTY + 'units = "metric"\n',
            ["[property] units: 'metric' is not one of normalised | raw"],
        ),
        (NETWORK + '[property]\nkind = "ball"\n', ["[property] kind: 'ball' is not one of"]),
        (
            NETWORK + '[property]\nkind = "hypercube"\n' + CENTER + "eps = 0.1\n",
            ["[property] eps: unknown key for kind 'hypercube'"],
        ),
        (NETWORK + '[property]\nkind = "hypercube"\n' + CENTER, ["[property] side: missing"]),
        (
            NETWORK + '[property]\nkind = "robustness"\ncenter = [0.1]\nlabel = 0\neps = 0.1\n',
            ["[property] center: 1 values, the network has 5 inputs"],
        ),
        (
            NETWORK
            + '[property]\nkind = "robustness"\ncenter = [0.1, 0, 0, 0, true]\nlabel = 0\neps = 0.1\n',
            ["[property] center: expected numbers"],
        ),
        (
            NETWORK + '[property]\nkind = "robustness"\ncenter = "c.txt"\nlabel = 0\neps = 0.1\n',
            ["[property] center: no such file"],
        ),
        (
            NETWORK + '[property]\nkind = "robustness"\ncenter = [0.1, 0, 0, 0, 0]\neps = 0.1\n',
            ["[property] label: missing"],
        ),
        (
            NETWORK
            + '[property]\nkind = "robustness"\n'
            + CENTER.replace("label = 0", "label = 7")
            + "eps = 0.1\n",
            ["[property] label: label 7 is not an output index 0..4"],
        ),
        (
            NETWORK + '[property]\nkind = "robustness"\n' + CENTER + "eps = -0.1\n",
            ["[property] eps: eps -0.1 is negative"],
        ),
        (
            NETWORK + '[property]\nkind = "robustness"\n' + CENTER + 'eps = "1/0"\n',
            ["[property] eps:", "not a number"],
        ),
        (
            NETWORK + '[property]\nkind = "robustness"\n' + CENTER + "eps = 0.1\ndomain = [[0], [1]]\n",
            ["[property] domain: expected [[lo, ...], [hi, ...]] with 5"],
        ),
        (
            NETWORK + "image_shape = [2, 2]\n" + VNNLIB_PROPERTY,
            ["spec.toml: image_shape: [2, 2] holds 4 pixels, the network has 5"],
        ),
        (
            NETWORK + "image_shape = [5, 0]\n" + VNNLIB_PROPERTY,
            ["spec.toml: image_shape: expected an array of positive integers"],
        ),
        (NETWORK + "name = 5\n" + VNNLIB_PROPERTY, ["spec.toml: name: expected a string, got 5 (integer)"]),
        (NETWORK + "[property\n", ["spec.toml: TOML syntax error", "line 2"]),
        (NETWORK + "network = 'twice'\n" + VNNLIB_PROPERTY, ["spec.toml: TOML syntax error", "line 2"]),
    ],
    ids=lambda case: case[0].split(": ", 1)[-1][:40] if isinstance(case, list) else "",
)
def test_spec_defects_name_the_key(tmp_path: Path, text: str, fragments: list[str]) -> None:
    message = spec_error(tmp_path, text)
    for fragment in fragments:
        assert fragment in message, message


def test_property_errors_keep_the_vnnlib_line(tmp_path: Path) -> None:
    (tmp_path / "bad.vnnlib").write_text("(declare-const X_0 Real)\n(assert (<= X_0 1)\n")
    message = spec_error(tmp_path, NETWORK + '[property]\nvnnlib = "bad.vnnlib"\n')
    assert message.startswith(f"{tmp_path / 'spec.toml'}: [property] vnnlib: ")
    assert "bad.vnnlib:2: unbalanced parentheses" in message


def test_property_must_fit_the_network(tmp_path: Path) -> None:
    (tmp_path / "small.vnnlib").write_text(
        "(declare-const X_0 Real)\n(assert (<= X_0 1))\n(assert (>= X_0 0))\n"
    )
    message = spec_error(tmp_path, NETWORK + '[property]\nvnnlib = "small.vnnlib"\n')
    assert "[property] vnnlib: property small has 1 inputs, the network 5" in message


def test_unreadable_spec_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nope.toml: no such file"):
        read_spec(tmp_path / "nope.toml")
    bad_network = tmp_path / "bad.nnet"
    bad_network.write_text("garbage\n")
    message = spec_error(tmp_path, f'network = "bad.nnet"\n{VNNLIB_PROPERTY}')
    assert "spec.toml: network: " in message and "bad.nnet" in message
