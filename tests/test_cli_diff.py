"""`qverify diff` end to end: search mode on the digits MLP (float vs <6,4>) writes every file and
reproduces under --seed; proof mode on ACAS Xu's unit-coordinate seeds; bad pairs and bad options are
one `error:` line with exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from qverify.cli import main
from qverify.data import load_dataset
from qverify.io import write_onnx
from qverify.network import Network
from qverify.network.model import Activation, Dense
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from tests.conftest import ROOT

MLP = str(ROOT / "benchmarks" / "digits" / "digits.nnet")
IRIS = str(ROOT / "benchmarks" / "iris" / "iris.onnx")
CNN_FLOAT = str(ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.onnx")
CNN_INT8 = str(ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.int8.onnx")
SMALL = ["--data", "digits-raw:test", "--seeds", "4", "--budget", "120", "--no-progress", "--keep", "5"]


def diff(*args: str) -> int:
    return main(["diff", *args])


def _stable(path) -> dict:
    data = json.loads((path / "diff.json").read_text())
    for method in data["methods"]:
        method.pop("wall_s"), method.pop("first_s")
        for seed in method["per_seed"]:
            seed.pop("first_s"), seed.pop("seconds")
    return data


@pytest.fixture(scope="module")
def search_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("diff")
    assert diff(MLP, "--candidate", "6.4", *SMALL, "--seed", "3", "-o", str(out)) == 0
    return out


def test_search_writes_every_file(search_run, capsys):
    for name in ("diis.npz", "diis.png", "sr_dir.png", "report.md", "diff.json"):
        assert (search_run / name).stat().st_size > 0
    data = json.loads((search_run / "diff.json").read_text())
    assert [m["method"] for m in data["methods"]] == ["ga", "distortion", "random", "random-distortion"]
    assert all(m["queries"] == 4 * 120 for m in data["methods"])
    with np.load(search_run / "diis.npz") as diis:
        assert diis["x"].shape[1] == 64 and len(diis["x"]) == len(diis["method"]) == len(diis["reference"])
        assert np.all(np.argmax(diis["reference"], axis=1) != np.argmax(diis["candidate"], axis=1))
    with Image.open(search_run / "sr_dir.png") as image:
        assert image.size[0] > 500
    report = (search_run / "report.md").read_text()
    assert "| ga |" in report and "![SR and DiR per method](sr_dir.png)" in report


def test_search_is_reproducible_under_the_seed(search_run, tmp_path):
    assert diff(MLP, "--candidate", "6.4", *SMALL, "--seed", "3", "-o", str(tmp_path / "again")) == 0
    assert _stable(search_run) == _stable(tmp_path / "again")
    with np.load(search_run / "diis.npz") as a, np.load(tmp_path / "again" / "diis.npz") as b:
        assert all(np.array_equal(a[key], b[key], equal_nan=a[key].dtype.kind == "f") for key in a.files)


def test_search_resumes_from_its_journal(search_run, tmp_path, capsys):
    """Each finished (method, seed) is journalled: a rerun into the same folder with --resume reuses
    every one, a last line cut by a crash is dropped with a warning and that seed searched again, with
    the same result (query budget: deterministic); changed settings search again."""
    import shutil

    out = tmp_path / "resumed"
    shutil.copytree(search_run, out)
    journal = out / "search.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4 * 4  # 4 methods x 4 seeds
    journal.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])  # the last record cut mid-write
    capsys.readouterr()
    assert diff(MLP, "--candidate", "6.4", *SMALL, "--seed", "3", "-o", str(out), "--resume") == 0
    captured = capsys.readouterr()
    assert "reused 15 seed results" in captured.out and "dropped an incomplete last line" in captured.err
    assert _stable(out) == _stable(search_run)
    assert len(journal.read_bytes().splitlines()) == 16
    assert diff(MLP, "--candidate", "6.4", *SMALL, "--seed", "4", "-o", str(out), "--resume") == 0
    assert "reused" not in capsys.readouterr().out


def test_first_dii_is_recorded_and_resumed_apart(search_run, tmp_path, capsys):
    """--first-dii: every seed stops at its first DII (at most one per seed, fewer queries than the
    full run of the same seeds); the option is in diff.json and report.md; a resumed --first-dii run
    reuses its own journalled seeds, never a full run's (nor a full run a --first-dii one's)."""
    out = tmp_path / "first"
    args = (MLP, "--candidate", "6.4", *SMALL, "--methods", "ga,random", "--seed", "3", "-o", str(out))
    assert diff(*args, "--first-dii") == 0
    data = json.loads((out / "diff.json").read_text())
    full = {m["method"]: m for m in json.loads((search_run / "diff.json").read_text())["methods"]}
    assert data["settings"]["first_dii"] is True and full["ga"]["sr"] > 0
    for method in data["methods"]:
        assert method["sr"] == full[method["method"]]["sr"]
        assert method["queries"] < full[method["method"]]["queries"]
        for seed, whole in zip(method["per_seed"], full[method["method"]]["per_seed"], strict=True):
            assert seed["dii"] == min(whole["dii"], 1) and seed["first_query"] == whole["first_query"]
            assert seed["queries"] == (120 if whole["dii"] == 0 else whole["first_query"] + 1)
    assert "stopped at its first DII (--first-dii" in (out / "report.md").read_text()
    capsys.readouterr()
    assert diff(*args, "--first-dii", "--resume") == 0
    assert "reused 8 seed results" in capsys.readouterr().out
    assert diff(*args, "--resume") == 0
    assert "reused" not in capsys.readouterr().out
    assert json.loads((out / "diff.json").read_text())["settings"]["first_dii"] is False


def test_a_folder_holding_a_run_is_refused_or_replaced(search_run, tmp_path, capsys):
    """Like `suite run`: a non-empty folder needs --overwrite (the previous run's files go, the
    user's stay) or --resume; the count of files written is what the folder holds."""
    import shutil

    out = tmp_path / "again"
    shutil.copytree(search_run, out)
    (out / "notes.txt").write_text("mine")
    (out / "sr_dir.png").write_bytes(b"stale")
    capsys.readouterr()
    assert diff(MLP, "--candidate", "6.4", *SMALL, "--seed", "3", "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not empty" in err and "--overwrite" in err and "--resume" in err
    args = (MLP, "--candidate", "6.4", *SMALL, "--methods", "random", "--seed", "3", "-o", str(out))
    assert diff(*args, "--overwrite") == 0
    written = capsys.readouterr().out.splitlines()[-1]
    assert not (out / "sr_dir.png").exists() or (out / "sr_dir.png").read_bytes() != b"stale"
    assert (out / "notes.txt").read_text() == "mine"
    files = sorted(path.name for path in out.iterdir() if path.name != "notes.txt")
    assert written.startswith(f"wrote {len(files)} files to {out}: ")
    assert sorted(written.split(": ", 1)[1].split(", ")) == files
    assert diff(*args, "--overwrite", "--resume") == 2
    assert "exclude each other" in capsys.readouterr().err


def test_search_on_acas_works_in_unit_coordinates(tmp_path, capsys):
    acas = str(ROOT / "benchmarks" / "acasxu" / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet")
    code = diff(acas, "--candidate", "4.6", "--methods", "random,distortion", "--seeds", "3", "--budget", "60",
                "--no-progress", "-o", str(tmp_path))  # fmt: skip
    assert code == 0 and "network's input box" in capsys.readouterr().out
    data = json.loads((tmp_path / "diff.json").read_text())
    assert data["settings"]["families"] == [
        "contrast",
        "brightness",
        "awgn",
        "salt-pepper",
    ]  # no image families
    with np.load(tmp_path / "diis.npz") as diis:
        low, high = -3.141593, 3.141593  # the NNet's range of input 1 (theta, radians)
        assert len(diis["x"]) > 0 and np.all((diis["x"] >= 0) & (diis["x"] <= 1))
        assert np.all((diis["x_raw"][:, 1] >= low) & (diis["x_raw"][:, 1] <= high))
        assert np.ptp(diis["x_raw"][:, 0]) > 100  # input 0 (rho, feet) spans its own range


def test_proof_mode_writes_verdicts_per_region(tmp_path, capsys):
    """Two regions through the CLI, decided by the stability proofs (about a second each)."""
    test = load_dataset("digits-raw:test")
    np.savez(
        tmp_path / "two.npz", x=test.x[1:3], y=test.y[1:3]
    )  # images whose regions the engine decides in seconds
    code = diff(MLP, "--candidate", "8.8", "--data", str(tmp_path / "two.npz"), "--domain", "0,16", "--image-shape", "8x8",
                "--seeds", "2", "--methods", "none",
                "--prove", "--radius", "0.01", "--timeout", "120", "--no-progress", "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 0
    out = tmp_path / "out"
    data = json.loads((out / "diff.json").read_text())
    assert [r["status"] for r in data["regions"]] == ["SAFE", "SAFE"]
    assert [r["method"] for r in data["regions"]] == ["stability", "stability"]
    assert data["settings"]["stability"] is True and data["settings"]["sampling"] is True
    assert (out / "harnesses" / "region000" / "diff_harness.c").exists()
    assert (out / "harnesses" / "region000" / "stability-candidate" / "harness" / "harness.c").exists()
    assert "decided (SAFE or UNSAFE): 100% of 2 regions" in (out / "report.md").read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        ([MLP, "--candidate-network", IRIS], "do not fit together"),
        ([MLP, "--candidate", "9.x"], "format"),
        ([MLP, "--candidate", "8.8", "--methods", "dance"], "unknown search method"),
        ([MLP, "--candidate", "8.8", "--criterion", "targeted"], "--target"),
        ([MLP, "--candidate", "8.8", "--criterion", "targeted", "--target", "12"], "10 outputs"),
        ([MLP, "--candidate", "8.8", "--budget", "0"], "--budget"),
        (
            [MLP, "--candidate", "8.8", "--families", "twirl", "--data", "digits-raw"],
            "unknown perturbation family",
        ),
        ([MLP], "name the candidate"),
        (
            [MLP, "--reference", "real", "--candidate", "8.8", "--prove", "--methods", "none"],
            "float64 network",
        ),
        ([MLP, "--candidate", "8.8", "--methods", "none"], "nothing to do"),
    ],
)
def test_bad_pairs_and_options_exit_2(args, message, capsys, tmp_path):
    assert diff(*args, "--seeds", "2", "--budget" if "--budget" not in args else "--seed", "5" if "--budget" not in args else "0",
                "--no-progress", "-o", str(tmp_path)) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_proof_mode_takes_int8_candidates(tmp_path, capsys):
    """y0 = 0.29, y1 = x against its onnxruntime int8 model: the region around 0.2945 holds inputs the
    int8 model reads as the code of 0.29 (UNSAFE, replayed), the one around 0.1 none (SAFE)."""
    net = Network(
        (Dense(np.array([[0.0], [1.0]]), np.array([0.29, 0.0]), Activation.IDENTITY),), name="boundary"
    )
    write_onnx(net, tmp_path / "boundary.onnx")
    calibration = np.linspace(0.0, 1.0, 101)[:, None]
    settings = QuantizeSettings(QuantFormat.QOP)
    quantize_with_onnxruntime(net, calibration, settings, tmp_path / "boundary.int8.onnx")
    np.savez(tmp_path / "seeds.npz", x=np.array([[0.2945], [0.1]]), y=np.array([1, 0]))
    code = diff(str(tmp_path / "boundary.onnx"), "--candidate", f"int8={tmp_path / 'boundary.int8.onnx'}",
                "--data", str(tmp_path / "seeds.npz"), "--domain", "0,1", "--seeds", "2", "--methods", "none",
                "--prove", "--radius", "0.005", "--no-sampling", "--timeout", "120", "--no-progress", "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "out" / "diff.json").read_text())
    assert [r["status"] for r in data["regions"]] == ["UNSAFE", "SAFE"]
    assert 0.29 < data["regions"][0]["x"][0] < 0.2925
