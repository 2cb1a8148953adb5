"""`qverify impact` end to end on the digits CNN at int8 (a reduced grid, few images): the files, the
numbers reproducible under --seed, a report.html that renders in headless Chromium, and bad inputs
as one `error:` line with exit code 2."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from qverify.cli import main
from qverify.data.transforms import FAMILIES as KNOWN
from tests.chromium import assert_not_blank, needs_chromium, screenshot
from tests.conftest import ROOT

CNN = ROOT / "benchmarks" / "digits-cnn"
FLOAT = str(CNN / "digits_cnn.onnx")
INT8 = str(CNN / "digits_cnn.int8.onnx")
MLP = str(ROOT / "benchmarks" / "digits" / "digits.nnet")
IRIS = str(ROOT / "benchmarks" / "iris" / "iris.onnx")
SMALL = [
    "--data", "digits:test", "--samples", "90", "--resamples", "200", "--no-progress",
    "--families", "awgn,brownian,vertical-occlusion,contrast",
    "--grid", "awgn=0.2,0.6", "--grid", "brownian=0.1,0.3", "--grid", "vertical-occlusion=2,5",
    "--grid", "contrast=0.6,0.3",
]  # fmt: skip
FAMILIES = ("awgn", "brownian", "vertical-occlusion", "contrast")


def impact(*args: str) -> int:
    return main(["impact", *args])


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Two runs with seed 3 and one with seed 4 of the float CNN against its int8 model."""
    root = tmp_path_factory.mktemp("impact")
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        assert (
            impact(FLOAT, "--candidate", f"int8={INT8}", *SMALL, "--seed", seed, "-o", str(root / name)) == 0
        )
    return root


def test_writes_every_file_with_the_numbers(study, capsys):
    out = study / "a"
    names = {"impact.csv", "impact.json", "report.md", "report.html"} | {f"impact_{f}.png" for f in FAMILIES}
    assert names <= {path.name for path in out.iterdir()}
    record = json.loads((out / "impact.json").read_text())
    assert record["reference"]["label"] == "float" and record["candidates"][0]["label"] == "int8"
    assert record["images"] == 90 and record["classes"] == 10 and record["domain"] == [0.0, 1.0]
    assert len(record["cells"]) == 1 + 2 * len(FAMILIES)
    clean = record["cells"][0]
    assert clean["family"] == "clean" and clean["reference"]["top1"]["value"] > 0.9
    comparison = clean["comparisons"][0]
    assert comparison["kl"]["value"] < 0.01 and comparison["flip_rate"]["value"] < 0.05
    assert comparison["kl"]["low"] <= comparison["kl"]["value"] <= comparison["kl"]["high"]
    worst = next(c for c in record["cells"] if c["family"] == "awgn" and c["intensity"] == 0.6)
    assert worst["reference"]["top1"]["value"] < clean["reference"]["top1"]["value"]
    assert [t["label"] for t in record["throughput"]] == ["float", "int8"]
    assert all(t["per_second"] > 0 for t in record["throughput"])
    rows = list(csv.DictReader((out / "impact.csv").open()))
    assert len(rows) == len(record["cells"]) and rows[0]["family"] == "clean"
    assert {row["family"] for row in rows} == {"clean", *FAMILIES}
    report = (out / "report.md").read_text()
    assert "![awgn](impact_awgn.png)" in report and "KL(ref‖cand)" in report
    for family in FAMILIES:
        with Image.open(out / f"impact_{family}.png") as image:
            assert image.size[0] > 500 and len(image.getcolors(1 << 20)) > 20


def test_the_numbers_are_reproducible_under_the_seed(study):
    first, again, other = ((study / name / "impact.csv").read_bytes() for name in "abc")
    assert first == again
    assert first != other
    plots = [(study / name / "impact_awgn.png").read_bytes() for name in "ab"]
    assert plots[0] == plots[1]


def test_report_html_is_self_contained(study):
    page = (study / "a" / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert len(sources) == len(FAMILIES) and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "http://" not in page and "https://" not in page


# report.html's font: 0.85 of 16 px; a digit of a sans-serif font is 0.55-0.6 em wide (the wider, to be safe)
CHARACTER_PX = 0.6 * 0.85 * 16
CELL_PADDING_PX = 2 * 0.5 * 0.85 * 16 + 1


def _table_width_px(table: str) -> float:
    """An upper estimate of a table's rendered width: per column, its widest line of text (an
    interval `.ci` line at 0.85 of the size; headers wrap at 7 em) plus the padding."""
    widths: dict[int, float] = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.DOTALL):
        for column, (tag, cell) in enumerate(re.findall(r"<(td|th)>(.*?)</t[dh]>", row, re.DOTALL)):
            lines = []
            for part in cell.split("<br>"):
                scale = 0.85 if 'class="ci"' in part else 1.0
                lines.append(scale * len(re.sub(r"<[^>]+>", "", part)) * CHARACTER_PX)
            width = min(max(lines), 7 * 0.85 * 16) if tag == "th" else max(lines)
            widths[column] = max(widths.get(column, 0.0), width)
    return sum(width + CELL_PADDING_PX for width in widths.values())


def test_report_html_tables_fit_a_1920_pixel_screen(study):
    """Every table of report.html fits 1,920 px with the body's margins (twelve columns of
    `value [low, high]` on one line each used to overflow it)."""
    page = (study / "a" / "report.html").read_text()
    tables = re.findall(r"<table>.*?</table>", page, re.DOTALL)
    assert len(tables) == 2 + len(FAMILIES)  # throughput, clean, one per family
    assert '<span class="ci">[' in page
    assert max(_table_width_px(table) for table in tables) < 1920 - 2 * 2 * 16


def test_a_folder_holding_a_study_is_refused_or_replaced(study, tmp_path, capsys):
    """Like `suite run`: a non-empty output folder needs --overwrite, which removes the previous
    study's files (its other families' plots too) and nothing else."""
    import shutil

    out = tmp_path / "again"
    shutil.copytree(study / "c", out)
    (out / "notes.txt").write_text("mine")
    quick = ("--data", "digits:test", "--samples", "30", "--resamples", "0", "--no-progress",
             "--families", "awgn", "--grid", "awgn=0.2", "-o", str(out))  # fmt: skip
    assert impact(FLOAT, "--candidate", f"int8={INT8}", *quick) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not empty" in err and "--overwrite" in err and "--resume" in err
    assert impact(FLOAT, "--candidate", f"int8={INT8}", *quick, "--overwrite") == 0
    names = {path.name for path in out.iterdir()}
    assert names == {
        "impact.csv", "impact.json", "impact_awgn.png", "report.md", "report.html", "journal.jsonl", "notes.txt"
    }  # fmt: skip


@needs_chromium
def test_report_html_plots_render_in_headless_chromium(study, tmp_path):
    image = screenshot(study / "a" / "report.html", tmp_path, size=(1000, 3000))
    pixels = assert_not_blank(image)
    # the plots' lines: matplotlib's first candidate colour (tab:blue) and the reference's black
    blue = np.all(np.abs(pixels.astype(int) - (31, 119, 180)) < 12, axis=1).sum()
    assert blue > 500, f"no plotted candidate line visible ({blue} blue pixels)"


def test_the_mlp_on_raw_pixels_and_a_sweep_of_formats(tmp_path, capsys):
    code = impact(MLP, "--formats", "8.8,half", "--data", "digits-raw:test", "--samples", "60",
                  "--families", "salt-pepper,blur", "--grid", "salt-pepper=0.1", "--grid", "blur=1",
                  "--resamples", "50", "--no-progress", "-o", str(tmp_path))  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "domain [0, 16] (from the data set digits-raw:test" in out
    assert "throughput (images/s, simulation only): float" in out and "8.8" in out and "half" in out
    record = json.loads((tmp_path / "impact.json").read_text())
    assert [c["label"] for c in record["candidates"]] == ["8.8", "half"]
    assert len(record["cells"]) == 3 and all(len(cell["comparisons"]) == 2 for cell in record["cells"])


def _npz(tmp_path, name: str, x, y) -> str:
    path = tmp_path / name
    np.savez(path, x=np.asarray(x, dtype=float), y=np.asarray(y))
    return str(path)


def _error(capsys, *args: str) -> str:
    code = impact(*args, "--no-progress")
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_bad_inputs_are_one_error_line_and_exit_2(tmp_path, capsys):
    x = np.random.default_rng(0).random((10, 64))
    y = np.arange(10)
    cases = [
        ((_npz(tmp_path, "narrow.npz", x[:, :63], y),), "63 values per sample, the network takes 64"),
        ((_npz(tmp_path, "labels.npz", x, y + 3),), "label 12 out of range"),
        ((_npz(tmp_path, "nan.npz", np.where(np.eye(10, 64) == 1, np.nan, x), y),), "sample 0 holds NaN"),
        ((_npz(tmp_path, "empty.npz", np.zeros((0, 64)), np.zeros(0, dtype=int)),), "holds no samples"),
        (("digits:test", "--families", "fog"), "unknown perturbation family 'fog'"),
        (
            ("digits:test", "--grid", "salt-pepper=2", "--families", "salt-pepper"),
            "fraction 2 outside [0, 1]",
        ),
        (("digits:test", "--grid", "rotation=5"), "a grid is given for rotation"),
        (("digits-raw:test", "--domain", "0,1"), "outside the input domain [0, 1]"),
        (("digits:test", "--grid", "vertical-occlusion=9", "--families", "vertical-occlusion"), "do not fit"),
    ]
    for data, phrase in cases:
        assert phrase in _error(
            capsys, FLOAT, "--candidate", "8.8", "--data", *data, "-o", str(tmp_path / "o")
        )
    assert "--candidate int8=MODEL.onnx" in _error(
        capsys, FLOAT, "--candidate", "int8", "--data", "digits:test"
    )
    assert "name the candidate implementation" in _error(capsys, FLOAT, "--data", "digits:test")
    assert "do not fit together" in _error(
        capsys, FLOAT, "--candidate-network", IRIS, "--data", "digits:test"
    )
    assert "bad format" in _error(capsys, FLOAT, "--candidate", "int9", "--data", "digits:test")


def test_a_clean_error_from_the_command_line_process(tmp_path):
    """The same through `python -m qverify`: exit 2, one error line, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "qverify", "impact", FLOAT, "--candidate", "half", "--data", "digits:test",
         "--families", "rotation,fog"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"error: unknown perturbation family 'fog' (known: {', '.join(KNOWN)})"


def test_the_progress_bar_names_the_cell_whose_metrics_run(tmp_path, capsys):
    """Issue 42: the label named the last cell of a batch of simulated cells while the first ones'
    bootstraps ran. Each state of the bar: `metrics of CELL` is shown while CELL's metrics run, with
    the cells before it counted done; the batch's perturbation and simulation are named with its span
    of cells, the simulation with the images done (issue 44: a CIFAR-10 cell takes minutes)."""
    code = impact(MLP, "--formats", "8.8", "--data", "digits-raw:test", "--samples", "60",
                  "--families", "salt-pepper,blur", "--grid", "salt-pepper=0.1,0.2", "--grid", "blur=1",
                  "--resamples", "20", "-o", str(tmp_path))  # fmt: skip
    assert code == 0
    states = [part for part in capsys.readouterr().err.replace("\n", "\r").split("\r") if "impact:" in part]
    cells = ["clean", "salt-pepper 0.1", "salt-pepper 0.2", "blur 1"]
    shown = {}
    for state in states:
        label = re.search(r"metrics of ([^\]]+)\]", state)
        done = re.search(r"\| (\d+)/4 ", state)
        if label and done:
            shown.setdefault(label.group(1).strip(), int(done.group(1)))
    assert shown == {cell: index for index, cell in enumerate(cells)}, states
    assert any("perturbing clean .. blur 1 (4 cells)" in state for state in states)
    assert any("simulating clean .. blur 1 (4 cells): 240/240 images" in state for state in states)
    assert any("writing the report (2 plots" in state for state in states)
