"""The `onnxruntime` implementation (a float ONNX file run by onnxruntime itself: the reference of
`qverify impact` at CIFAR-10 scale) and `impact`'s journal: a stopped study resumes with the cells it
finished, and those cells come back exactly as they were computed. Real files, real onnxruntime."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from qverify.assurance import make_implementation
from qverify.assurance.impact.journal import cell_from_record, cell_record
from qverify.assurance.impact.records import Cell, Comparison, Estimate, Scores
from qverify.cli import main
from qverify.errors import InputError
from qverify.io import load_network
from tests.conftest import ROOT

pytest.importorskip("onnxruntime")

CNN = ROOT / "benchmarks" / "digits-cnn"
FLOAT = str(CNN / "digits_cnn.onnx")
INT8 = str(CNN / "digits_cnn.int8.onnx")
ZOO = ROOT / "benchmarks" / "cifar10" / "models"


@pytest.mark.parametrize(
    "name",
    [
        "resnet2b.onnx",  # NCHW, PyTorch export (batch 1 declared: made symbolic)
        "keras_cnn.onnx",  # NHWC, tf2onnx: a Reshape to [1, 1024] pins the batch: one sample per call
        "squeeze.onnx",  # Concat branches, GlobalAveragePool
    ],
)
def test_onnxruntime_computes_the_float_network(name):
    """On the network's own input order, onnxruntime's float32 outputs equal the float64 network's
    within float32 rounding, and the classes agree."""
    net = load_network(ZOO / name)
    x = np.random.default_rng(0).uniform(0, 1, (40, net.n_inputs))
    runtime = make_implementation(net, "onnxruntime")
    real = make_implementation(net, "real")
    ours, theirs = real.run(x).outputs, runtime.run(x).outputs
    assert runtime.label == "onnxruntime" and theirs.shape == (40, net.n_outputs)
    assert np.max(np.abs(ours - theirs)) < 1e-4
    assert np.array_equal(np.argmax(ours, axis=1), np.argmax(theirs, axis=1))
    assert runtime.run(x[:0]).outputs.shape == (0, net.n_outputs)


def test_onnxruntime_takes_onnx_files_only():
    net = load_network(ZOO / "squeeze.int8.tflite")
    with pytest.raises(InputError, match="runs .onnx files only"):
        make_implementation(net, "onnxruntime")


def test_the_study_records_the_runtime_reference(tmp_path):
    out = tmp_path / "ort"
    args = [
        "impact", FLOAT, "--reference", "onnxruntime", "--candidate", f"int8={INT8}", "--data", "digits:test",
        "--samples", "60", "--resamples", "20", "--families", "awgn", "--grid", "awgn=0.3", "--no-progress",
        "-o", str(out),
    ]  # fmt: skip
    assert main(args) == 0
    record = json.loads((out / "impact.json").read_text())
    assert record["reference"]["label"] == "onnxruntime"
    assert record["cells"][0]["reference"]["top1"]["value"] > 0.9  # the digits CNN, clean


def test_a_journalled_cell_reads_back_as_it_was():
    nan = Estimate(math.nan, math.nan, math.nan)
    scores = Scores(Estimate(0.5, 0.4, 0.6), None, Estimate(0.25, 0.2, 0.3))
    cell = Cell(
        "awgn", 0.1, scores, (Comparison("int8", scores, nan, Estimate(1e-3, 0.0, 2e-3), nan, nan, 3),)
    )
    back = cell_from_record(json.loads(json.dumps(cell_record(cell))))
    assert repr(back) == repr(cell)  # NaN != NaN: compare the printed records


def _rows(path):
    with path.open() as handle:
        return {(row["family"], row["intensity"]): row for row in csv.DictReader(handle)}


def test_a_stopped_study_resumes_from_its_journal(tmp_path, capsys):
    """A study of two AWGN levels, then the same study grown by a level with --resume: the journal
    gains one line (the new cell; the clean data and the two levels are taken from it), and every
    cell's row equals the uninterrupted study's."""
    common = [FLOAT, "--candidate", f"int8={INT8}", "--data", "digits:test", "--samples", "60",
              "--resamples", "50", "--families", "awgn", "--no-progress"]  # fmt: skip
    first, whole = tmp_path / "first", tmp_path / "whole"
    assert main(["impact", *common, "--grid", "awgn=0.2,0.5", "-o", str(first)]) == 0
    assert len((first / "journal.jsonl").read_text().splitlines()) == 3
    assert main(["impact", *common, "--grid", "awgn=0.2,0.5", "-o", str(first)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["impact", *common, "--grid", "awgn=0.2,0.5,0.8", "-o", str(first), "--resume"]) == 0
    assert len((first / "journal.jsonl").read_text().splitlines()) == 4
    assert main(["impact", *common, "--grid", "awgn=0.2,0.5,0.8", "-o", str(whole)]) == 0
    assert _rows(first / "impact.csv") == _rows(whole / "impact.csv")
    record = json.loads((first / "impact.json").read_text())
    assert [cell["intensity"] for cell in record["cells"]] == [None, 0.2, 0.5, 0.8]
    assert record["throughput"][0]["images"] == 60  # this run simulated the new cell only
    # another seed is another study: nothing is taken from the journal
    assert main(["impact", *common, "--grid", "awgn=0.2", "--seed", "1", "-o", str(first), "--resume"]) == 0
    assert len((first / "journal.jsonl").read_text().splitlines()) == 6
