"""alpha-beta-CROWN's answers as `benchmarks/bench_marabou.py` reads them (issue 32's side by side).

alpha-beta-CROWN is not installed by this project (a checkout and an environment of its own, named
with `--abcrown`), so its runs are not part of the test suite. What the benchmark makes of them is:
the results files in tests/fixtures/abcrown were written by real runs of alpha-beta-CROWN (December
2025 release, CPU) on ACAS Xu instances of benchmarks/acasxu, and are read here into verdicts and
counterexamples; its float32 counterexample is checked in float64 against the property, also when
rounding puts it just outside the box; malformed files are ERRORs, never verdicts; a missing
installation is named with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_marabou import (
    FLOAT32_SLACK,
    Instance,
    _float32_witness,
    _violates,
    abcrown_missing,
    main,
    read_abcrown_results,
)
from qverify.io import load_network
from qverify.properties import read_vnnlib
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "abcrown"
ACAS = ROOT / "benchmarks" / "acasxu"
SAT = Instance(
    "acasxu",
    "2_3-prop_2",
    ACAS / "onnx" / "ACASXU_run2a_2_3_batch_2000.onnx",
    ACAS / "vnnlib" / "prop_2.vnnlib",
)


def _sat_witness() -> np.ndarray:
    answer = read_abcrown_results((FIXTURES / "acasxu-2_3-prop_2.sat.txt").read_text())
    assert answer.verdict == "UNSAFE"
    return np.array(answer.witness)


def test_sat_file_gives_an_unsafe_with_its_counterexample():
    witness = _sat_witness()
    assert witness.shape == (5,)
    assert _float32_witness(SAT, witness) == {"witness_violates": True}


@pytest.mark.parametrize(
    ("fixture", "verdict"),
    [("acasxu-2_3-prop_3.unsat.txt", "SAFE"), ("acasxu-3_3-prop_2.timeout.txt", "UNKNOWN")],
)
def test_unsat_and_timeout_files(fixture: str, verdict: str):
    answer = read_abcrown_results((FIXTURES / fixture).read_text())
    assert (answer.verdict, answer.witness) == (verdict, ())


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty results file"),
        ("unknown-verdict\n", "results file says"),
        ("sat\n", "without a complete counterexample"),
        ("sat\n((X_0 0.1)\n(X_2 0.3)\n(Y_0 1.0))\n", "without a complete counterexample"),
    ],
)
def test_malformed_results_are_errors(text: str, why: str):
    answer = read_abcrown_results(text)
    assert answer.verdict == "ERROR"
    assert why in answer.reason


def test_counterexample_rounded_outside_the_box_is_moved_in_and_checked():
    """A float32 input at a box bound may round beyond it: within FLOAT32_SLACK it is moved back
    in (and says by how much); farther out it is not a counterexample of this property."""
    witness = _sat_witness()
    prop = read_vnnlib(SAT.vnnlib)
    network = load_network(SAT.network)
    hi = prop.boxes[0].hi_array()
    coordinate = next(
        i for i in range(5) if _violates(network, prop, np.where(np.arange(5) == i, hi, witness))
    )
    at_bound = np.where(np.arange(5) == coordinate, hi, witness)
    scale = max(1.0, float(np.max(np.abs(at_bound))))
    rounded_out = at_bound.copy()
    rounded_out[coordinate] += FLOAT32_SLACK * scale / 2
    checked = _float32_witness(SAT, rounded_out)
    assert checked["witness_violates"] is True
    assert 0 < checked["witness_outside_box"] <= FLOAT32_SLACK * scale
    far_out = at_bound.copy()
    far_out[coordinate] += 2 * FLOAT32_SLACK * scale  # beyond what rounding explains
    assert _float32_witness(SAT, far_out) == {"witness_violates": False}
    assert _float32_witness(SAT, witness[:4]) == {"witness_violates": False}


def test_missing_installation_is_named(tmp_path: Path):
    assert "--abcrown" in abcrown_missing(None, sys.executable)
    assert "no such file" in abcrown_missing(tmp_path / "abcrown.py", sys.executable)
    script = tmp_path / "abcrown.py"
    script.write_text("")
    assert "cannot import torch and auto_LiRPA" in abcrown_missing(script, "/bin/false")
    assert "does not run" in abcrown_missing(script, str(tmp_path / "no-python"))


def test_epsilons_apply_to_digits784_alone(capsys):
    assert main(["--suite", "acasxu", "--epsilons", "0.015", "--no-marabou"]) == 2
    assert "--epsilons applies to --suite digits784 alone" in capsys.readouterr().err
