"""VNN-COMP runner: vnncomp/prepare_instance.sh and run_instance.sh with the competition's arguments,
on real instances (ACAS Xu, the tiny tanh network); witnesses are checked against the VNN-LIB file
with onnxruntime, as the competition's scoring does."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from qverify.errors import InputError
from qverify.io import load_network
from qverify.properties import Units, read_vnnlib
from qverify.vnncomp import Witness, format_result, parse_result
from tests.conftest import ACAS, ROOT

RUN = ROOT / "vnncomp" / "run_instance.sh"
PREPARE = ROOT / "vnncomp" / "prepare_instance.sh"
TANH3 = ROOT / "benchmarks" / "tiny" / "tanh3.onnx"
needs_venv = pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "qverify").exists(), reason="no .venv: the scripts need `make setup`"
)


def acas(network: str) -> Path:
    return ACAS / "onnx" / f"ACASXU_run2a_{network}_batch_2000.onnx"


def prop(number: int) -> Path:
    return ACAS / "vnnlib" / f"prop_{number}.vnnlib"


def run_script(script: Path, *args, env: dict | None = None, timeout: float = 300):
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [str(script), *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )


def onnx_outputs(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    declared = next(i for i in session.get_inputs() if i.name == "input")
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in declared.shape]
    dtype = np.float64 if declared.type == "tensor(double)" else np.float32
    return session.run(None, {"input": x.astype(dtype).reshape(shape)})[0].reshape(-1)


def assert_witness_violates(onnx: Path, vnnlib: Path, witness: Witness, units: Units) -> None:
    """What the competition checks: X inside an input box, and the ONNX outputs at X in the unsafe set."""
    spec = read_vnnlib(vnnlib, units=units)
    x = np.array(witness.x)
    assert len(x) == spec.n_inputs
    boxes = [box for box in spec.boxes if bool(np.all(box.contains(x)))]
    assert boxes, f"X = {witness.x} is outside every input box"
    y = onnx_outputs(onnx, x)
    assert len(witness.y) == len(y)
    np.testing.assert_allclose(witness.y, y, rtol=1e-3, atol=1e-5)  # the competition's tolerance
    assert spec.unsafe.violated_clause(y.astype(np.float64))[0] >= 0, f"ONNX outputs {y} are safe"


def test_result_file_round_trip():
    witness = Witness((0.5, -0.25), (1.0, 2.0, -3.5e-7))
    text = format_result("sat", witness)
    assert text.splitlines() == [
        "sat",
        "((X_0 0.5)",
        " (X_1 -0.25)",
        " (Y_0 1.0)",
        " (Y_1 2.0)",
        " (Y_2 -3.5e-07))",
    ]
    assert parse_result(text) == ("sat", witness)
    for word in ("unsat", "timeout", "unknown", "error"):
        assert format_result(word, None) == f"{word}\n" and parse_result(word) == (word, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "first line"), ("maybe\n", "first line"), ("sat\nX_0 1)", "one parenthesised"), ("sat\n(X_0 1)", "malformed witness entry"),
     ("sat\n((X_1 1))", "unexpected witness variable"), ("sat\n((X_0 one))", "has no number")],
)  # fmt: skip
def test_malformed_result_files(text, message):
    with pytest.raises(InputError, match=message):
        parse_result(text)


def test_scripts_say_when_make_setup_was_not_run(tmp_path):
    copy = tmp_path / "checkout" / "vnncomp"
    shutil.copytree(ROOT / "vnncomp", copy)
    results = tmp_path / "out.txt"
    done = run_script(copy / "run_instance.sh", "v1", "acasxu", acas("1_1"), prop(1), results, 60)
    assert done.returncode == 2
    checkout = tmp_path / "checkout"
    expected = (
        f"error: {checkout / '.venv' / 'bin' / 'qverify'} not found: run 'make setup' in {checkout} first"
    )
    assert done.stderr.strip().splitlines() == [f"{expected} (it creates .venv)"]
    assert results.read_text() == "error\n"
    assert run_script(copy / "prepare_instance.sh", "v1", "acasxu", acas("1_1"), prop(1)).returncode == 2


@needs_venv
def test_bad_input_writes_error_and_one_error_line(tmp_path):
    results = tmp_path / "out.txt"
    done = run_script(RUN, "v1", "acasxu", tmp_path / "missing.onnx", prop(1), results, 60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "missing.onnx" in lines[0]
    assert results.read_text() == "error\n"
    wrong_version = run_script(RUN, "v2", "acasxu", acas("1_1"), prop(1), results, 60)
    assert wrong_version.returncode == 2 and "expected the interface version 'v1'" in wrong_version.stderr
    usage = run_script(RUN, "v1", "acasxu")
    assert usage.returncode == 2 and usage.stderr.startswith("error: usage:")


@needs_venv
def test_prepare_checks_the_instance():
    done = run_script(PREPARE, "v1", "acasxu", acas("1_1"), prop(1))
    assert done.returncode == 0, done.stderr
    assert "ACASXU_run2a_1_1_batch_2000: 5 inputs, 5 outputs; prop_1" in done.stdout
    mismatch = run_script(PREPARE, "v1", "tiny", TANH3, prop(1))
    assert mismatch.returncode == 2 and mismatch.stderr.startswith("error: ")


@needs_venv
def test_acas_phi1_on_1_1_is_unsat(tmp_path):
    results = tmp_path / "out.txt"
    done = run_script(RUN, "v1", "acasxu", acas("1_1"), prop(1), results, 116)
    assert done.returncode == 0, done.stderr
    assert results.read_text() == "unsat\n"


@needs_venv
def test_acas_phi3_on_1_7_is_sat_with_a_witness_the_vnnlib_accepts(tmp_path):
    results = tmp_path / "out.txt"
    done = run_script(RUN, "v1", "acasxu", acas("1_7"), prop(3), results, 116)
    assert done.returncode == 0, done.stderr
    result, witness = parse_result(results.read_text())
    assert result == "sat" and witness is not None
    assert_witness_violates(acas("1_7"), prop(3), witness, Units.NORMALISED)


@needs_venv
@pytest.mark.parametrize("semantics", ["real", "quantized"])
def test_graph_normalisation_means_raw_units_in_both_semantics(tmp_path, semantics):
    """tanh3.onnx normalises its inputs in the graph: the VNN-LIB's X are its raw inputs."""
    net = load_network(TANH3)
    assert net.input_norm is not None
    lo, hi = np.full(3, 5.0), np.full(3, 10.0)  # raw: normalised [0, 0.5]; y0 = 2.37 at the top corner
    lines = [f"(declare-const X_{i} Real)" for i in range(3)] + [
        "(declare-const Y_0 Real)",
        "(declare-const Y_1 Real)",
    ]
    lines += [f"(assert (>= X_{i} {lo[i]}))\n(assert (<= X_{i} {hi[i]}))" for i in range(3)]
    vnnlib = tmp_path / "raw.vnnlib"
    vnnlib.write_text("\n".join([*lines, "(assert (>= Y_0 2.0))"]) + "\n")
    results = tmp_path / "out.txt"
    env = {"QVERIFY_SEMANTICS": semantics, "QVERIFY_FORMAT": "8.8"}
    done = run_script(RUN, "v1", "tiny", TANH3, vnnlib, results, 60, env=env)
    assert done.returncode == 0, done.stderr
    result, witness = parse_result(results.read_text())
    assert result == "sat", results.read_text()
    assert all(5.0 <= value <= 10.0 for value in witness.x)
    if semantics == "real":
        assert_witness_violates(TANH3, vnnlib, witness, Units.RAW)


@needs_venv
def test_bad_script_arguments_still_write_error(tmp_path):
    """The result file says `error` whatever was wrong: a TIMEOUT that is not a number, a bogus
    QVERIFY_SEMANTICS, a missing argument (the file is the fifth one)."""
    results = tmp_path / "out.txt"
    for args, env in (
        (("v1", "acasxu", acas("1_1"), prop(1), results, "abc"), None),
        (("v1", "acasxu", acas("1_1"), prop(1), results, 60), {"QVERIFY_SEMANTICS": "bogus"}),
        (("v1", "acasxu", acas("1_1"), prop(1), results), None),
    ):
        results.unlink(missing_ok=True)
        done = run_script(RUN, *args, env=env)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert done.stderr.startswith("error: ") and results.read_text() == "error\n"


@needs_venv
def test_install_tool_runs_the_readme_set_up():
    """VNN-COMP's third script: `install_tool.sh v1` is `make setup` (nothing to do on a set-up
    checkout); other arguments are one error line."""
    install = ROOT / "vnncomp" / "install_tool.sh"
    up_to_date = subprocess.run(["make", "-q", "-C", str(ROOT), "setup"], capture_output=True, check=False)
    if up_to_date.returncode != 0:  # it would install packages now: `make test` runs `make setup` first
        pytest.skip("make setup is not up to date in this checkout (run it, then this test)")
    done = run_script(install, "v1")
    assert done.returncode == 0, done.stderr
    for args in ((), ("v2",), ("v1", "extra")):
        wrong = run_script(install, *args)
        assert wrong.returncode == 2 and wrong.stderr.strip().splitlines() == [
            f"error: usage: {install} v1 (the interface version)"
        ]
