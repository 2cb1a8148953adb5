"""`qverify verify` end to end on real networks: exit codes, --json fields, replayed counterexamples."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import numpy as np
import pytest

from qverify.codegen import render_harness
from qverify.counterexample import replay_candidate
from qverify.io import load_network
from qverify.properties import robustness
from qverify.quant import FixedFormat, ImplementationOptions, quantize_network, simulate
from tests.conftest import ROOT
from tests.test_cli_basics import qverify

TINY = ROOT / "benchmarks" / "tiny"
RELU2 = str(TINY / "relu2.nnet")
UNSAFE_ARGS = ("--center", "0.6,0.45", "--eps", "0.15", "--label", "0")
SAFE_ARGS = ("--center", "0.8,0.2", "--eps", "0.1", "--label", "0")


def test_exit_codes_and_verdict_lines(tmp_path):
    safe = qverify("verify", RELU2, *SAFE_ARGS, "--format", "8.8")
    assert (safe.returncode, safe.stdout.splitlines()[0]) == (0, "SAFE")
    unsafe = qverify("verify", RELU2, *UNSAFE_ARGS, "--format", "8.8")
    assert (unsafe.returncode, unsafe.stdout.splitlines()[0]) == (10, "UNSAFE")
    error = qverify("verify", RELU2, "--center", "0.1,0.2,0.3", "--eps", "0.1", "--label", "0")
    assert error.returncode == 2 and "Traceback" not in error.stderr


def test_unknown_on_timeout_exits_20():
    # 3_3 phi2: SAFE, among the hardest ACAS Xu instances (1_9 phi1 is decided within a second now)
    acas = str(ROOT / "benchmarks/acasxu/nnet/ACASXU_run2a_3_3_batch_2000.nnet")
    prop = str(ROOT / "benchmarks/acasxu/vnnlib/prop_2.vnnlib")
    result = qverify("verify", acas, "--property", prop, "--format", "16.16", "--timeout", "1")
    assert result.returncode == 20, result.stdout + result.stderr
    assert result.stdout.startswith("UNKNOWN: ") and "timeout" in result.stdout


def test_jobs_reach_the_engines_workers(tmp_path):
    """`verify --jobs 2` runs the network level's branch and bound in two worker processes forked
    in the task's process (itself a fork of the warm engine host): the record's stage times show
    the workers' start and their bounds; --jobs 0 is one error line."""
    acas = str(ROOT / "benchmarks/acasxu/nnet/ACASXU_run2a_3_3_batch_2000.nnet")
    prop = str(ROOT / "benchmarks/acasxu/vnnlib/prop_2.vnnlib")
    out = tmp_path / "r.json"
    common = ("--property", prop, "--format", "16.16", "--timeout", "10", "--json", str(out))
    result = qverify("verify", acas, *common, "--jobs", "2")
    assert result.returncode == 20, result.stdout + result.stderr  # (open after the level's share)
    times = json.loads(out.read_text())["times_s"]
    assert "backend.netlevel.workers_start" in times and times["backend.netlevel.bounds"] > 0
    refused = qverify("verify", RELU2, *SAFE_ARGS, "--jobs", "0")
    assert (
        refused.returncode == 2 and refused.stderr.startswith("error: ") and "Traceback" not in refused.stderr
    )


def test_json_record_fields(tmp_path):
    out = tmp_path / "r.json"
    result = qverify("verify", RELU2, *UNSAFE_ARGS, "--format", "6.10", "--json", str(out))
    assert result.returncode == 10
    record = json.loads(out.read_text())
    for key in (
        "status",
        "backend",
        "solver",
        "decided_by",
        "implementation",
        "format",
        "lut_eps",
        "times_s",
        "peak_memory_mb",
        "counterexample",
        "verdict",
        "network_digest",
        "options",
    ):
        assert key in record, key
    assert record["status"] == "UNSAFE" and record["format"] == "<6,10>" and record["backend"] == "internal"
    stages = {
        "process",
        "startup",
        "imports",
        "load",
        "quantize",
        "invariants",
        "codegen",
        "backend",
        "replay",
    }
    stages |= {"pipeline", "backend.startup", "backend.total", "replay.compile", "replay.run", "example"}
    assert stages <= set(record["times_s"]), set(record["times_s"])
    times = record["times_s"]
    parts = ("quantize", "invariants", "codegen", "backend", "replay")
    assert times["pipeline"] >= sum(times[stage] for stage in parts) - 1e-3  # the stages it sums
    before = times["startup"] + times["imports"] + times["load"] + times["pipeline"]
    assert times["process"] >= before - 0.02  # the whole process: /proc's start time has 10 ms ticks
    cex = record["counterexample"]
    assert len(cex["inputs_word"]) == 2 and all(isinstance(v, int) for v in cex["inputs_word"])
    assert cex["violated"].startswith("unsafe clause")
    shown = qverify("show", str(out))
    assert shown.returncode == 0 and "counterexample" in shown.stdout
    assert "stages: startup" in shown.stdout and "replay" in shown.stdout
    assert f"time {times['process']:.2f} s (the whole qverify verify process" in shown.stdout
    # a record written before the times had these names (`total` for `pipeline`, no `process`) still reads
    old = {key: value for key, value in record.items() if key != "format_resolved_from"}
    old["times_s"] = {("total" if key == "pipeline" else key): value for key, value in times.items()}
    del old["times_s"]["process"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    shown = qverify("show", str(tmp_path / "old.json"))
    assert shown.returncode == 0 and f"pipeline {times['pipeline']:.2f} s" in shown.stdout, shown.stdout
    assert f"time {before:.2f} s (startup + imports + load + pipeline" in shown.stdout, shown.stdout


def test_spec_file_and_image(tmp_path):
    spec = ROOT / "benchmarks/demo/vowel-A-L120.toml"
    out = tmp_path / "demo.json"
    result = qverify("verify", "--spec", str(spec), "--json", str(out))
    assert result.returncode == 10, result.stdout + result.stderr
    assert out.with_suffix(".png").is_file()
    assert json.loads(out.read_text())["counterexample"]["image_shape"] == [5, 5]


@pytest.fixture(scope="module")
def tiny_harness(tmp_path_factory):
    net = load_network(RELU2)
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(8, 8)))
    prop = robustness([Fraction("0.6"), Fraction("0.45")], Fraction("0.15"), label=0, n_outputs=2)
    harness = render_harness(qnet, prop).write(tmp_path_factory.mktemp("h"))
    return qnet, prop, harness


def test_replay_confirms_a_violating_input_and_rejects_others(tiny_harness):
    qnet, prop, harness = tiny_harness
    lo = [int(np.ceil(float(v) * 256)) for v in prop.boxes[0].lo]
    hi = [int(np.floor(float(v) * 256)) for v in prop.boxes[0].hi]
    grid = np.array([[a, b] for a in range(lo[0], hi[0] + 1, 3) for b in range(lo[1], hi[1] + 1, 3)])
    outputs = simulate(qnet, grid).outputs
    violating = grid[outputs[:, 1] >= outputs[:, 0]][0]
    holding = grid[outputs[:, 1] < outputs[:, 0]][0]
    confirmed = replay_candidate(qnet, prop, harness, tuple(int(v) for v in violating))
    assert confirmed.confirmed and confirmed.violated.startswith("unsafe clause 1")
    rejected = replay_candidate(qnet, prop, harness, tuple(int(v) for v in holding))
    assert not rejected.confirmed and rejected.c_outcome == "HOLDS" and "HOLDS" in rejected.problem
    outside = replay_candidate(qnet, prop, harness, (hi[0] + 5, lo[1]))
    assert not outside.confirmed and outside.c_outcome == "ASSUME-FAILED"
    short = replay_candidate(qnet, prop, harness, (1,))
    assert not short.confirmed and "1 values for 2 inputs" in short.problem


def test_a_word_length_format_and_records_without_temporary_paths(tmp_path):
    """`--format 8` as in suites (the split from range analysis over the input domain), and a
    verdict's notes and reason name files by their place in the run, not by the deleted temporary
    folder (a note of the scalar front end: `harness/harness.c:220: ...`)."""
    from qverify.backends.base import Status, Verdict
    from qverify.io import write_onnx
    from qverify.verification import _without_folder
    from tests.test_relu6 import relu6_network

    network = tmp_path / "relu6.onnx"
    write_onnx(relu6_network(), network, float32=True)
    out = tmp_path / "r.json"
    result = qverify("verify", str(network), "--center", "0,0,0", "--eps", "0.5", "--label", "0",
                     "--format", "16", "--json", str(out))  # fmt: skip
    assert result.returncode in (0, 10, 20), result.stderr
    record = json.loads(out.read_text())
    assert (
        re.fullmatch(r"<\d+,\d+>", record["format"])
        and sum(map(int, record["format"][1:-1].split(","))) == 16
    )
    notes = " ".join(record["verdict"]["notes"]) + record["reason"]
    assert "/tmp" not in notes and "qverify-" not in notes
    folder = tmp_path / "qverify-run"
    verdict = Verdict(
        Status.UNKNOWN,
        "internal",
        reason=f"{folder}/harness/harness.c:12: timeout",
        notes=(f"scalar front end: {folder}/harness/harness.c:220: not recognised",),
    )
    portable = _without_folder(verdict, folder)
    assert portable.reason == "harness/harness.c:12: timeout"
    assert portable.notes == ("scalar front end: harness/harness.c:220: not recognised",)


def test_show_refuses_a_picture_it_cannot_draw(tmp_path):
    """`show --png` on a record without an image counterexample is an error, not a silent exit 0."""
    out = tmp_path / "r.json"
    assert qverify("verify", RELU2, *SAFE_ARGS, "--format", "8.8", "--json", str(out)).returncode == 0
    shown = qverify("show", str(out), "--png", str(tmp_path / "p.png"))
    assert shown.returncode == 2 and shown.stderr.strip().splitlines() == [
        f"error: --png: {out} has no counterexample to picture (SAFE)"
    ]
    assert qverify("verify", RELU2, *UNSAFE_ARGS, "--format", "8.8", "--json", str(out)).returncode == 10
    shown = qverify("show", str(out), "--png", str(tmp_path / "p.png"))
    assert shown.returncode == 2 and "is not an image" in shown.stderr
    assert not (tmp_path / "p.png").exists()


def test_a_terminal_shows_the_stage_and_the_seconds(tmp_path):
    """A single verify is visibly alive on a terminal (stderr a pty): the stage and the seconds
    spent of the timeout, redrawn, then erased; nothing of it in a pipe."""
    import os
    import pty
    import select
    import subprocess
    import sys

    acas = str(ROOT / "benchmarks/acasxu/nnet/ACASXU_run2a_1_1_batch_2000.nnet")
    prop = str(ROOT / "benchmarks/acasxu/vnnlib/prop_1.vnnlib")
    command = [
        sys.executable,
        "-m",
        "qverify",
        "verify",
        acas,
        "--property",
        prop,
        "--certify",
        "--timeout",
        "2",
    ]
    main, secondary = pty.openpty()
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=secondary, text=True)
    os.close(secondary)
    shown = b""
    while True:
        if select.select([main], [], [], 0.2)[0]:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        elif child.poll() is not None:
            break
    os.close(main)
    child.wait(timeout=60)
    assert child.returncode in (0, 20)  # (UNKNOWN: the scalar path of --certify takes minutes)
    assert re.search(rb"\rverify: backend, \d+ s of 2 s", shown), shown[-300:]
    assert b"\r\x1b[K" in shown  # the line is erased before the verdict's warnings
    piped = qverify("verify", RELU2, *SAFE_ARGS, "--format", "8.8")
    assert "verify:" not in piped.stderr


def test_the_engine_is_stopped_at_the_task_s_timeout(tmp_path, tiny_harness):
    """An engine that overruns its own budget is killed when the task's time ends (it used to get
    ten seconds more: a suite task ran 67 s of 60). Here the engine never answers at all: its
    harness is a named pipe nobody writes, so reading it blocks for ever (the engine, and the
    preprocessor it starts, are killed with the task's process group)."""
    import os
    import time

    from qverify.backends import HarnessJob, InternalBackend, Limits, Status

    _, _, harness = tiny_harness
    stuck = tmp_path / "stuck.c"
    os.mkfifo(stuck)
    backend = InternalBackend()
    started = time.monotonic()
    verdict = backend.check(HarnessJob(stuck, tmp_path, False, 2), Limits(timeout_s=2.0))
    elapsed = time.monotonic() - started
    assert verdict.status is Status.UNKNOWN and verdict.reason.startswith("timeout"), verdict
    assert elapsed < 2.0 + 8.0  # the kill (SIGTERM, 1 s, SIGKILL), far below the old 2 + 10 s
    verdict = backend.check(HarnessJob(harness, harness.parent, False, 2), Limits(timeout_s=60.0))
    assert verdict.status is Status.SAFE or verdict.status is Status.UNSAFE, verdict  # the next task runs
