"""VNN-COMP categories (issue 43, `qverify.competition`, `qverify vnncomp category`).

- The scoring reproduces a published table from the competition's own files: VNN-COMP 2022's ACAS
  Xu results (tests/fixtures/vnncomp2022_results, from ChristopherBrix/vnncomp2022_results) give
  every tool's counts of correct, incorrect and open answers, its fastest answers and its score as
  SCORING/latex/unscored.tex prints them, the 7 disagreements settled by checking the witnesses.
- The category runner on real rows: this project's case-form category (benchmarks/lindex-cases,
  gzipped networks and properties) and a project suite run as a category; the results CSV, the
  witnesses (checked as the competition checks them), the journal and --resume.
- The case-form category decided through vnncomp/run_instance.sh itself.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from qverify.cli import main
from qverify.competition.category import read_instances
from qverify.competition.results import Answer, answer, read_results
from qverify.competition.witness import WitnessCheck, check_witness, read_witness_file
from tests.conftest import ACAS, ROOT
from tests.test_vnncomp import needs_venv, run_script

FIXTURES = ROOT / "tests" / "fixtures" / "vnncomp2022_results"
LINDEX = ROOT / "benchmarks" / "lindex-cases"
RUN = ROOT / "vnncomp" / "run_instance.sh"
# SCORING/latex/unscored.tex, "Benchmark acasxu": Verified, Falsified, Fastest, Penalty, Score
PUBLISHED = {
    "nnenum": (139, 47, 174, 0, 2218),
    "alpha_beta_crown": (139, 46, 59, 0, 2021),
    "mn_bab": (110, 46, 52, 0, 1664),
    "cgdtest": (85, 30, 115, 7, 680),
}
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


def category(*argv: str) -> int:
    return main(["vnncomp", "category", *argv])


def test_the_2022_acas_xu_table_is_reproduced_from_the_competition_files(tmp_path, capsys):
    code = category(str(ACAS / "instances.csv"), "--out", str(tmp_path), "--score-only",
                    "--compare", str(FIXTURES), "--penalty", "100", "--time-bonus")  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0 and "| 1 | nnenum | 186 | 139 | 47 | 0 | 0 | 174 | 2218 | 100.0% |" in printed
    data = json.loads((tmp_path / "score.json").read_text())
    tools = {tool["name"]: tool for tool in data["tools"]}
    assert set(tools) == set(PUBLISHED) and data["absent"] == ["debona"] and data["instances"] == 186
    for name, (verified, falsified, fastest, penalty, score) in PUBLISHED.items():
        tool = tools[name]
        assert (tool["holds"], tool["violated"], tool["fastest"], tool["incorrect"], tool["score"]) == (
            verified, falsified, fastest, penalty, score,
        ), name  # fmt: skip
        assert (
            tool["correct"] == verified + falsified and tool["open"] == 186 - verified - falsified - penalty
        )
    assert len(data["disagreements"]) == 7
    assert all(text.endswith("incorrect: cgdtest") for text in data["disagreements"])
    settled = [text for text in data["disagreements"] if "ACASXU_run2a_3_1_batch_2000 prop_2" in text]
    assert "mn_bab: correct, nnenum: correct" in settled[0] and "-> sat" in settled[0]


def test_the_default_rules_score_150_per_incorrect_answer_without_time_bonus(tmp_path, capsys):
    assert category(str(ACAS / "instances.csv"), "--out", str(tmp_path), "--score-only", "--compare",
                    str(FIXTURES)) == 0  # fmt: skip
    tools = {tool["name"]: tool for tool in json.loads((tmp_path / "score.json").read_text())["tools"]}
    assert {name: tool["score"] for name, tool in tools.items()} == {
        "nnenum": 1860, "alpha_beta_crown": 1850, "mn_bab": 1560, "cgdtest": 1150 - 7 * 150,
    }  # fmt: skip


def test_result_words_are_read_as_the_competition_reads_them():
    words = {
        "unsat": Answer.HOLDS, "sat": Answer.VIOLATED, "UNSAT": Answer.HOLDS, "timeout": Answer.TIMEOUT,
        "timeout(X_00 ...": Answer.TIMEOUT, "run_instance_timeout": Answer.TIMEOUT, "error": Answer.ERROR,
        "error_exit_code_1": Answer.ERROR, "prepare_instance_error_1": Answer.UNKNOWN, "": Answer.UNKNOWN,
        "no_result_in_file": Answer.UNKNOWN, "error_nonmaximal": Answer.UNKNOWN, "unknown": Answer.UNKNOWN,
    }  # fmt: skip
    assert {word: answer(word) for word in words} == words
    rows = read_results(FIXTURES / "nnenum" / "acasxu" / "results.csv")
    assert (
        len(rows) == 187
        and rows[-1].is_test
        and rows[0].instance == ("ACASXU_run2a_1_1_batch_2000", "prop_1")
    )


def test_witnesses_are_checked_as_the_competition_checks_them(tmp_path):
    onnx, vnnlib = ACAS / "onnx" / "ACASXU_run2a_3_1_batch_2000.onnx", ACAS / "vnnlib" / "prop_2.vnnlib"
    good = read_witness_file(
        FIXTURES / "nnenum" / "acasxu" / "ACASXU_run2a_3_1_batch_2000_prop_2.counterexample"
    )
    assert check_witness(good, onnx, vnnlib).check is WitnessCheck.CORRECT
    moved = re.sub(
        r"\(Y_0 ([-0-9.e]+)\)", lambda m: f"(Y_0 {float(m.group(1)) + 1e-3!r})", good
    )  # onnxruntime's Y_0 + 1e-3
    assert check_witness(moved, onnx, vnnlib).check is WitnessCheck.EXEC_DOESNT_MATCH
    empty = read_witness_file(
        FIXTURES / "alpha_beta_crown" / "acasxu" / "ACASXU_run2a_3_1_batch_2000_prop_2.counterexample"
    )
    assert check_witness(empty, onnx, vnnlib).check is WitnessCheck.NO_CE
    other = read_witness_file(
        FIXTURES / "cgdtest" / "acasxu" / "ACASXU_run2a_3_3_batch_2000_prop_2.counterexample"
    )
    wrong = check_witness(other, ACAS / "onnx" / "ACASXU_run2a_3_3_batch_2000.onnx", vnnlib)
    assert wrong.check is WitnessCheck.SPEC_NOT_VIOLATED


def _rows(folder: Path, rows: list[str]) -> Path:
    (folder / "instances.csv").write_text("\n".join(rows) + "\n")
    return folder / "instances.csv"


def test_a_case_form_category_runs_journals_and_resumes(tmp_path, capsys):
    """Two rows of benchmarks/lindex-cases named as the competition names them (`x.onnx`, only
    `x.onnx.gz` present): unsat and sat, the witness correct by the competition's check."""
    here = tmp_path / "cat"
    here.mkdir()
    for name in ("onnx", "vnnlib"):
        (here / name).symlink_to(LINDEX / name)
    csv_path = _rows(here, ["onnx/lindex_small.onnx,vnnlib/lindex_small_10_safe.vnnlib,60",
                            "onnx/lindex_small.onnx,vnnlib/lindex_small_100_unsafe.vnnlib,60"])  # fmt: skip
    assert [i.onnx.name for i in read_instances(csv_path)] == ["lindex_small.onnx.gz"] * 2
    out = tmp_path / "out"
    assert category(str(csv_path), "--out", str(out), "--no-progress") == 0
    printed = capsys.readouterr().out
    assert "cat: 2 of 2 instances (2 run now): sat 1, unsat 1" in printed
    rows = list(csv.reader((out / "results.csv").open()))
    assert [row[:3] + [row[4]] for row in rows] == [
        ["cat", "onnx/lindex_small.onnx", "vnnlib/lindex_small_10_safe.vnnlib", "unsat"],
        ["cat", "onnx/lindex_small.onnx", "vnnlib/lindex_small_100_unsafe.vnnlib", "sat"],
    ]
    witness = read_witness_file(out / "lindex_small_lindex_small_100_unsafe.counterexample")
    assert check_witness(witness, LINDEX / "onnx" / "lindex_small.onnx.gz",
                         LINDEX / "vnnlib" / "lindex_small_100_unsafe.vnnlib.gz").check is WitnessCheck.CORRECT  # fmt: skip
    assert category(str(csv_path), "--out", str(out), "--no-progress") == 2
    assert "--resume" in capsys.readouterr().err
    assert category(str(csv_path), "--out", str(out), "--resume", "--no-progress") == 0
    assert "(0 run now)" in capsys.readouterr().out


def test_a_project_suite_runs_as_a_category(tmp_path, capsys):
    """The tiny suite (NNet and ONNX networks, the ONNX one normalising in its graph: its property
    written in raw units) answers as its expected verdicts say."""
    assert category("tiny", "--out", str(tmp_path), "--no-progress") == 0
    expected = dict(csv.reader((ROOT / "benchmarks" / "tiny" / "expected.csv").open()))
    rows = list(csv.reader((tmp_path / "results.csv").open()))
    answers = {Path(row[2]).stem: row[4] for row in rows}
    assert answers == {
        task: "unsat" if verdict == "SAFE" else "sat" for task, verdict in expected.items() if task != "task"
    }
    assert "| 1 | **qverify** | 6 |" in capsys.readouterr().out


@needs_venv
def test_the_case_form_category_is_decided_through_run_instance_sh(tmp_path):
    for network, prop, word in (("lindex_deep", "lindex_deep_100_safe", "unsat"),
                                ("lindex_deep", "lindex_deep_100_unsafe", "sat")):  # fmt: skip
        onnx, vnnlib = LINDEX / "onnx" / f"{network}.onnx.gz", LINDEX / "vnnlib" / f"{prop}.vnnlib.gz"
        done = run_script(RUN, "v1", "lindex-cases", onnx, vnnlib, tmp_path / "out.txt", 60)
        assert done.returncode == 0, done.stderr
        text = (tmp_path / "out.txt").read_text()
        assert text.split()[0] == word
        if word == "sat":
            assert check_witness(text, onnx, vnnlib).check is WitnessCheck.CORRECT
