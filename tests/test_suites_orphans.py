"""No orphans (issue 20, finding 4): a suite run killed with SIGKILL, which runs no cleanup of its
own, leaves no worker, resource tracker, verifier or solver behind (each dies with its parent:
PR_SET_PDEATHSIG), and `--resume` then finishes every task exactly once with the verdicts of an
uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from qverify.backends.engine_host import HOST_MODULE
from tests.conftest import ROOT
from tests.test_suites_run import TINY, expected_verdicts

MARK = "QVERIFY_DRILL_MARK"


def marked_processes(mark: str) -> list[psutil.Process]:
    """Live processes whose environment carries `mark` (everything the drill's run started)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() != psutil.STATUS_ZOMBIE and process.environ().get(MARK) == mark:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _is_engine_task(process: psutil.Process) -> bool:
    """A task's process of the warm engine: forked by an engine host, so both name the host's module."""
    try:
        parent = process.parent()
        return parent is not None and all(HOST_MODULE in " ".join(p.cmdline()) for p in (process, parent))
    except psutil.Error:
        return False


def journal_keys(out: Path) -> list[str]:
    journal = out / "journal.jsonl"
    if not journal.is_file():
        return []
    return [json.loads(line)["key"] for line in journal.read_text().splitlines() if line.endswith("}")]


def start(command: list[str], mark: str) -> subprocess.Popen:
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, MARK: mark},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for(condition, what: str, child: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert child.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_at_three_moments_leaves_nothing_and_resume_finishes_once(tmp_path):
    out = tmp_path / "run"
    mark = str(tmp_path)
    command = [sys.executable, "-m", "qverify", "suite", "run", str(TINY / "suite.toml"), "--jobs", "2"]
    command += ["--format", "8", "--format", "float", "--out", str(out), "--no-progress"]
    engine_running = lambda: any(_is_engine_task(p) for p in marked_processes(mark))
    moments = [
        ("a verifier running, nothing journaled", engine_running),
        ("two more tasks journaled", lambda: len(journal_keys(out)) >= 2),
        ("five tasks journaled", lambda: len(journal_keys(out)) >= 5),
    ]
    for index, (moment, reached) in enumerate(moments):
        child = start(command + (["--resume"] if index else []), mark)
        wait_for(reached, moment, child)
        os.kill(child.pid, signal.SIGKILL)  # the main process only: the rest must follow by itself
        child.wait()
        deadline = time.monotonic() + 15
        while marked_processes(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [" ".join(p.cmdline())[:120] for p in marked_processes(mark)]
        assert not left, f"after SIGKILL at '{moment}': {left}"
    finished = subprocess.run(
        command + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert finished.returncode == 0, finished.stderr
    keys = journal_keys(out)
    assert len(keys) == len(set(keys)) == 12  # every task exactly once
    expected = expected_verdicts()  # the uninterrupted run's verdicts (the same in every format)
    for line in (out / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert row["record"]["status"] == expected[row["task"]], row["task"]
