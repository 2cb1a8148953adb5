"""`qverify repair` end to end: a repair that breaks a proven property is reported as broken (with
its counterexample), the files are written, and bad inputs end with one error line and exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from qverify.cli import main
from qverify.io import write_nnet
from qverify.properties import format_vnnlib
from qverify.properties.builders import robustness
from tests.test_assurance_repair import constructed_case


def repair(*args: str) -> int:
    return main(["repair", *args])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The constructed case (tests/test_assurance_repair.py) as files, and a property the repair
    must break: around (0.0625, 0.3125) +- 0.0625 class 1 wins before (o0 = x0 <= 0.125 < 0.25 <=
    x1 = o1), not after (o0 = x0 + 0.25 reaches 0.375 > 0.25)."""
    folder = tmp_path_factory.mktemp("repair")
    float_net, quant_net, x, y = constructed_case()
    write_nnet(float_net, folder / "float.nnet")
    write_nnet(quant_net, folder / "quant.nnet")
    np.savez(folder / "set.npz", x=x, y=y)
    np.savez(folder / "wide.npz", x=np.zeros((2, 3)), y=y)
    np.savez(folder / "passing.npz", x=x[:1], y=y[:1])
    prop = robustness([0.0625, 0.3125], 0.0625, label=1, n_outputs=2, name="box")
    (folder / "box.vnnlib").write_text(format_vnnlib(prop, 2))
    return folder


def base_args(folder, *extra: str) -> list[str]:
    return [
        str(folder / "float.nnet"), "--quantized", str(folder / "quant.nnet"), "--format", "4.4",
        "--accumulate", "wide", "--repair-set", str(folder / "set.npz"), "--validation", str(folder / "set.npz"),
        "--neurons", "1", "--metrics", "tarantula", "--random-runs", "0", "--no-progress", *extra,
    ]  # fmt: skip


def test_a_repair_that_breaks_a_proven_property_is_reported(files, capsys, tmp_path):
    out = tmp_path / "out"
    args = base_args(files, "--properties", str(files / "box.vnnlib"), "--timeout", "600", "-o", str(out))
    assert repair(*args) == 0
    printed = capsys.readouterr().out
    assert "BROKEN by the repair: box: SAFE -> UNSAFE" in printed
    assert "counterexample input" in printed
    record = json.loads((out / "repair.json").read_text())
    (verdict,) = record["reverification"]
    assert (
        verdict["broken"] and verdict["before"]["status"] == "SAFE" and verdict["after"]["status"] == "UNSAFE"
    )
    assert verdict["after"]["counterexample"] is not None
    (outcome,) = record["outcomes"]
    assert outcome["changes"] == [{"neuron": 0, "input": -1, "old": 0, "new": 4, "real_delta": 0.25}]
    assert outcome["accuracy_after"]["repair"] == 1.0
    assert (out / "repaired.nnet").is_file() and (out / "c" / "network.c").is_file()
    assert "BROKEN" in (out / "report.md").read_text()
    with Image.open(out / "repair.png") as picture:
        assert picture.width > 300 and len(picture.getcolors(1 << 16) or []) > 3  # not blank


def test_resume_takes_finished_milps_from_the_journal(files, capsys, tmp_path):
    out = tmp_path / "out"
    args = base_args(files, "--metrics", "tarantula,random", "--random-runs", "1", "-o", str(out))
    assert repair(*args) == 0
    first = json.loads((out / "repair.json").read_text())
    distinct = len({tuple(o["neurons"]) for o in first["outcomes"]})
    assert len((out / "journal.jsonl").read_text().splitlines()) == distinct
    model = (out / "repaired.nnet").read_text()
    capsys.readouterr()
    assert repair(*args, "--resume") == 0
    assert f"{distinct} MILPs taken from the journal" in capsys.readouterr().out
    again = json.loads((out / "repair.json").read_text())
    assert [o["changes"] for o in again["outcomes"]] == [o["changes"] for o in first["outcomes"]]
    assert (out / "repaired.nnet").read_text() == model  # rebuilt from the journalled integers


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--layer", "3"], "out of range"),
        (["--repair-set", "wide.npz"], "3 values per sample"),
        (["--repair-set", "passing.npz"], "nothing to repair"),
        (["--metrics", "tarantula,nope"], "unknown metric"),
        (["--format", "half"], "fixed-point"),
        (["--neurons", "0"], "at least 1"),
        (["--properties", "nothing.vnnlib"], "no suite"),
    ],
)
def test_bad_inputs_exit_2(files, capsys, tmp_path, extra, message):
    args = base_args(files, "-o", str(tmp_path / "out"))
    for flag, value in zip(extra[::2], extra[1::2]):
        value = str(files / value) if value.endswith(".npz") else value
        index = args.index(flag) if flag in args else None
        if index is None:
            args += [flag, value]
        else:
            args[index + 1] = value
    assert repair(*args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and "Traceback" not in err
