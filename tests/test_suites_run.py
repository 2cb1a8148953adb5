"""Suite runs end to end on the tiny suite: parallel jobs, kill -9 and --resume, Dask, sweeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from qverify.backends import Limits
from qverify.suites import DaskExecutor, InProcessExecutor, LocalExecutor, read_suite, run_suite
from qverify.verification import VerifyOptions
from tests.conftest import ROOT, SAFETY_NET_S

TINY = ROOT / "benchmarks" / "tiny"
OPTIONS = VerifyOptions(limits=Limits(timeout_s=SAFETY_NET_S, memory_mb=2048))
# the tasks' timeout: tiny networks decided in a second or two, whatever the machine's load (the
# suite file's own 20 s is what a user's run gets)
TASK_S = SAFETY_NET_S


def expected_verdicts() -> dict[str, str]:
    rows = (TINY / "expected.csv").read_text().splitlines()
    header = rows[0].split(",")
    task_column, verdict_column = header.index("task"), header.index("expected")
    return {row.split(",")[task_column]: row.split(",")[verdict_column] for row in rows[1:] if row}


def first_tasks(count: int):
    """The tiny suite cut to its first `count` tasks (relu2's robust SAFE and UNSAFE ones first): each
    task costs a verifier process, and a test of the runner's machinery needs few."""
    suite = read_suite(TINY / "suite.toml")
    return replace(suite, tasks=suite.tasks[:count])


def outcomes(result) -> dict[tuple[str, str], str]:
    return {(entry["task"], entry["format"]): entry["record"]["status"] for entry in result.entries}


def test_tiny_suite_with_two_jobs(tmp_path):
    suite = read_suite(TINY / "suite.toml")
    formats = ("8", "float")  # a word length and a float format (16 adds six tasks and nothing new)
    result = run_suite(suite, formats, OPTIONS, LocalExecutor(2), tmp_path, TASK_S, progress=False)
    expected = expected_verdicts()
    assert len(result.entries) == len(suite.tasks) * len(formats)
    for (task, label), status in outcomes(result).items():
        assert status == expected[task], (task, label)
    for name in ("results.jsonl", "results.csv", "summary.md", "time_per_task.png", "cactus.png"):
        assert (tmp_path / name).is_file(), name
    assert "| tiny | 8 (" in (tmp_path / "summary.md").read_text()
    unsafe = [e for e in result.entries if e["record"]["status"] == "UNSAFE"]
    assert unsafe and all((tmp_path / e["cex_json"]).is_file() for e in unsafe)
    # the workers' typed records came back through pickling, with where each value came from (the
    # timeout is the run's: TASK_S)
    origins = result.entries[0]["record"]["origins"]
    assert origins["network"] == origins["format"] == "suite file" and origins["timeout"] == "command line"


def test_records_cross_process_boundaries_typed(tmp_path):
    """A worker returns the VerificationRecord itself (its read-only mappings pickle)."""
    import pickle

    from qverify.suites import expand, run_task

    suite = read_suite(TINY / "suite.toml")
    spec = expand(suite, ("float",), OPTIONS, 15.0, formats_given=True)[0]
    record = run_task(spec)
    copy = pickle.loads(pickle.dumps(record))
    assert copy.to_json() == record.to_json()
    assert copy.verdict is not None and dict(copy.verdict.times_s) == dict(record.verdict.times_s)
    assert record.origins["format"] == record.origins["timeout"] == "command line"
    assert record.origins["property"] == "suite file"


def test_suite_files_are_read_under_the_time_limit(tmp_path):
    """Reading a suite (and every property it lists) is bounded by --timeout like a task's inputs."""
    from tests.test_cli_basics import qverify

    folder = tmp_path / "big"
    (folder / "props").mkdir(parents=True)
    body = "".join(f"(declare-const X_{i} Real)\n" for i in range(2)) + "(declare-const Y_0 Real)\n"
    body += "(declare-const Y_1 Real)\n" + "(assert (>= X_0 0.0))(assert (<= X_0 1.0))\n" * 20_000
    body += "(assert (>= X_1 0.0))(assert (<= X_1 1.0))(assert (>= Y_0 1.0))\n"
    (folder / "relu2.nnet").write_bytes((TINY / "relu2.nnet").read_bytes())
    rows = []
    for index in range(20):
        (folder / "props" / f"p{index}.vnnlib").write_text(body)
        rows.append(f"relu2.nnet,props/p{index}.vnnlib,20")
    (folder / "tasks.csv").write_text("\n".join(rows) + "\n")
    (folder / "suite.toml").write_text('name = "big"\nformats = ["float"]\ninstances = "tasks.csv"\n')
    started = time.monotonic()
    result = qverify(
        "suite", "run", str(folder / "suite.toml"), "--timeout", "1", "--out", str(tmp_path / "o")
    )
    assert time.monotonic() - started < 30
    assert result.returncode == 20, (result.stdout, result.stderr)
    assert "reading suite" in result.stderr and "Traceback" not in result.stderr


def test_dask_local_cluster_gives_the_local_results(tmp_path):
    suite = first_tasks(2)  # a SAFE and an UNSAFE one: the cluster's start is what this costs
    local = run_suite(suite, ("8",), OPTIONS, InProcessExecutor(), tmp_path / "local", TASK_S, progress=False)
    dask = run_suite(suite, ("8",), OPTIONS, DaskExecutor(2), tmp_path / "dask", TASK_S, progress=False)
    assert outcomes(dask) == outcomes(local)


def test_kill_then_resume_runs_nothing_twice(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "qverify",
        "suite",
        "run",
        str(TINY / "suite.toml"),
        "--format",
        "float",
        "--jobs",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]
    child = subprocess.Popen(
        command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    journal = out / "journal.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if journal.is_file() and len(journal.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    before = [json.loads(line)["key"] for line in journal.read_text().splitlines() if line.strip()]
    assert 2 <= len(before) < 6, "the run was meant to be killed in the middle"
    resumed = subprocess.run(
        command + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    after = [json.loads(line)["key"] for line in journal.read_text().splitlines() if line.strip()]
    assert after[: len(before)] == before
    assert len(after) == len(set(after)) == 6  # nothing twice, nothing lost
    assert f"({6 - len(before)} run now)" in resumed.stdout
    rows = (out / "results.jsonl").read_text().splitlines()
    assert len(rows) == 6


def _is_engine(process) -> bool:
    """The engine's processes: an engine host, `python -m qverify.backends.engine_process FOLDER`
    (its folder in the run's temporary directory), and the task processes it forks (the same
    command line)."""
    command = " ".join(process.cmdline())
    return "qverify.engine" in command or "qverify.backends.engine_process" in command


def _verifier_processes(marker: str) -> list:
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


@pytest.mark.parametrize("jobs", [1, 2])
def test_sigterm_stops_the_verifiers_and_says_how_to_resume(tmp_path, jobs):
    """SIGTERM (a batch scheduler, `timeout`) stops qverify *and* its verifier children, which run
    in their own sessions; the exit code is 130 and the message names --resume."""
    onnx, vnnlib = ROOT / "benchmarks" / "acasxu" / "onnx", ROOT / "benchmarks" / "acasxu" / "vnnlib"
    rows = [f"{onnx / 'ACASXU_run2a_1_1_batch_2000.onnx'},{vnnlib / f'prop_{p}.vnnlib'},116" for p in (3, 4)]
    (tmp_path / "instances.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "suite.toml").write_text(
        'name = "slow"\ndescription = "two slow ACAS Xu tasks"\nformats = ["16.16"]\n'
        'timeout = 116\ninstances = "instances.csv"\n'
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = [sys.executable, "-m", "qverify", "suite", "run", str(tmp_path / "suite.toml")]
    command += [
        "--jobs",
        str(jobs),
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
        "--intervals",
        "builtin",
    ]
    child = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, "TMPDIR": str(scratch)}, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not any(_is_engine(p) for p in _verifier_processes(str(scratch))):
        assert time.monotonic() < deadline and child.poll() is None, "no verifier started"
        time.sleep(0.2)
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 130, stderr
    assert "interrupted: 0 of 2 tasks are journaled" in stderr and "--resume" in stderr, stderr
    deadline = time.monotonic() + 10
    while _verifier_processes(str(scratch)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _verifier_processes(str(scratch)), "verifier processes outlived qverify"


def test_existing_run_needs_resume_or_overwrite(tmp_path):
    suite = first_tasks(1)
    run_suite(suite, ("float",), OPTIONS, InProcessExecutor(), tmp_path, progress=False)
    from qverify.errors import InputError

    with pytest.raises(InputError, match="--resume"):
        run_suite(suite, ("float",), OPTIONS, InProcessExecutor(), tmp_path, progress=False)


def test_sweep_on_a_tiny_network():
    from tests.test_cli_basics import qverify

    result = qverify(
        "sweep",
        str(TINY / "relu2.nnet"),
        "--center",
        "0.8,0.2",
        "--eps",
        "0.1",
        "--label",
        "0",
        "--bits",
        "4..12:2",
        "--timeout",
        "20",
    )
    assert result.returncode == 0, result.stderr
    assert "minimum word length:" in result.stdout
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()[:2].isdigit()]
    widths = [int(parts[0]) for parts in lines]
    assert widths == sorted(widths) and widths[-1] == 12


def test_the_progress_bar_names_the_verdicts():
    from collections import Counter

    from qverify.suites.runner import _progress_text

    assert _progress_text(Counter(SAFE=3, UNSAFE=1)) == "SAFE=3 UNSAFE=1 UNKNOWN=0 ERROR=0"


def test_results_csv_paths_are_relative_to_the_working_directory(monkeypatch):
    from qverify.suites.report import record_row

    monkeypatch.chdir(ROOT)
    entry = {
        "suite": "s",
        "task": "t",
        "format": "8",
        "record": {"status": "SAFE", "network": str(TINY / "relu2.nnet")},
    }
    assert record_row(entry)["network"] == "benchmarks/tiny/relu2.nnet"
    entry["record"]["network"] = "/elsewhere/n.nnet"  # outside the working directory: as it is
    assert record_row(entry)["network"] == "/elsewhere/n.nnet"


def test_an_interruption_while_the_reports_are_written_counts_the_journal(tmp_path, monkeypatch):
    """Every task is journaled when the signal comes during the reports: the message says so (it
    used to be a bare `error: interrupted`) and --resume writes them."""
    from qverify.errors import InterruptedRunError
    from qverify.suites import runner

    def interrupted(*args) -> None:
        raise KeyboardInterrupt("signal 15")

    suite = first_tasks(2)
    monkeypatch.setattr(runner, "write_plots", interrupted)
    with pytest.raises(
        InterruptedRunError, match="2 of 2 tasks are journaled .* --resume to write the reports"
    ):
        run_suite(suite, ("float",), OPTIONS, InProcessExecutor(), tmp_path, progress=False)
    monkeypatch.undo()
    resumed = run_suite(
        suite, ("float",), OPTIONS, InProcessExecutor(), tmp_path, resume=True, progress=False
    )
    assert resumed.ran == 0 and (tmp_path / "time_per_task.png").is_file()


def test_sigterm_late_in_a_run_is_one_line_with_the_journal_s_count(tmp_path):
    """SIGTERM when most tasks are done: one worker is idle and must end without a traceback, and the
    count said is the journal's (both used to go wrong: a multiprocessing traceback from the idle
    worker, "Exception ignored in sys.unraisablehook", a count one short)."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "qverify", "suite", "run", str(TINY / "suite.toml"), "--format", "float",
               "--jobs", "2", "--out", str(out), "--no-progress"]  # fmt: skip
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    journal = out / "journal.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None:
        if journal.is_file() and len(journal.read_text().splitlines()) >= 5:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=120)
    if child.returncode == 0:
        pytest.skip("the run finished before the signal (nothing to interrupt)")
    kept = len(journal.read_text().splitlines())
    assert child.returncode == 130
    assert stderr.splitlines() == [
        f"error: interrupted: {kept} of 6 tasks are journaled in {journal}; run the same command with --resume "
        + ("to finish the others" if kept < 6 else "to write the reports")
    ], stderr


def test_suite_list_reads_the_suite_files_alone(monkeypatch, capsys):
    """`qverify suite list` counts tasks from the TOML and instances.csv: no network is loaded and no
    VNN-LIB file parsed (all 588 of them took 25-48 s to print nine lines)."""
    from qverify.cli import main
    from qverify.suites import suite_file

    def refuse(*args, **kwargs):
        raise AssertionError("suite list read a network or a property")

    digits = len(read_suite("digits").tasks)
    monkeypatch.setattr(suite_file, "read_vnnlib_cases", refuse)
    monkeypatch.setattr(suite_file, "load_network", refuse)
    assert main(["suite", "list"]) == 0
    rows = {line.split()[0]: line.split()[1:3] for line in capsys.readouterr().out.splitlines()}
    assert rows["acasxu"] == ["186", "tasks"] and rows["tiny"] == ["6", "tasks"]
    assert rows["digits"] == [str(digits), "tasks"]
