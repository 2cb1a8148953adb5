"""The suite journal and output-folder lock (issue 20, findings 3, 5 and 7): whole-record appends,
a cut-off last line dropped on resume without gluing the next record onto it, corrupt records
refused with their line, a second run into a locked folder refused naming the holder's pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from qverify.errors import InputError
from qverify.suites import InProcessExecutor, read_suite, run_suite
from qverify.suites.journal import FolderLock, Journal
from tests.test_cli_basics import assert_clean_error, qverify
from tests.test_suites_run import OPTIONS, TASK_S, TINY


def two_task_suite(folder) -> str:
    """Two quick tiny tasks (the whole tiny suite takes ~20 s)."""
    path = folder / "suite.toml"
    path.write_text(
        'name = "two"\nformats = ["float"]\ntimeout = 20\n'
        + "".join(
            f'[[task]]\nname = "t{i}"\nnetwork = "{TINY / "relu2.nnet"}"\n[task.property]\n'
            f'kind = "robustness"\ncenter = [0.8, 0.2]\neps = "0.{i + 1}"\nlabel = 0\n'
            for i in range(2)
        )
    )
    return str(path)


def entry(key: str, status: str = "SAFE") -> dict:
    return {"key": key, "suite": "s", "task": key, "format": "8", "record": {"status": status}}


def test_cut_off_last_line_is_dropped_and_the_next_append_starts_a_new_line(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append(entry("a"))
    journal.append(entry("b"))
    whole = journal.path.read_bytes()
    journal.path.write_bytes(whole + json.dumps(entry("c")).encode()[:25])  # power loss mid-write
    entries, warning = journal.load()
    assert [e["key"] for e in entries] == ["a", "b"]
    assert "dropped an incomplete last line" in warning and "runs again" in warning
    assert journal.path.read_bytes() == whole  # the fragment is cut off the file
    journal.append(entry("c"))
    entries, warning = journal.load()  # the record after the fragment is not glued onto it
    assert [e["key"] for e in entries] == ["a", "b", "c"] and warning == ""


@pytest.mark.parametrize(
    ("line", "phrase"),
    [
        ("[1, 2]", "not a journal record"),
        ('{"record": {"status": "SAFE"}}', "not a journal record"),
        ('{"key": "a"}', "not a journal record \\(no 'record'"),
        ("{not json", "corrupt journal line"),
    ],
)
def test_corrupt_complete_lines_are_refused_with_their_line_number(tmp_path, line, phrase):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append(entry("a"))
    with journal.path.open("a") as handle:
        handle.write(line + "\n")
    journal.append(entry("b"))
    with pytest.raises(InputError, match=f"journal.jsonl:2: {phrase}"):
        journal.load()


def test_corrupt_journal_is_exit_2_on_resume(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "journal.jsonl").write_text("[1, 2]\n")
    result = qverify("suite", "run", str(TINY / "suite.toml"), "--out", str(out), "--resume", "--no-progress")
    assert_clean_error(result, "journal.jsonl:1: not a journal record")


def test_resume_after_a_torn_line_runs_that_task_once(tmp_path):
    suite = read_suite(two_task_suite(tmp_path))
    out = tmp_path / "run"
    first = run_suite(suite, ("float",), OPTIONS, InProcessExecutor(), out, TASK_S, progress=False)
    journal = out / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:-1]) + lines[-1][:40])
    resumed = run_suite(
        suite, ("float",), OPTIONS, InProcessExecutor(), out, TASK_S, resume=True, progress=False
    )
    assert resumed.ran == 1
    keys = [json.loads(line)["key"] for line in journal.read_text().splitlines()]
    assert len(keys) == len(set(keys)) == len(suite.tasks)
    assert [e["record"]["status"] for e in resumed.entries] == [e["record"]["status"] for e in first.entries]


def test_a_second_run_into_a_locked_folder_is_refused_naming_the_holder(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pathlib import Path; "
                "from qverify.suites.journal import FolderLock; lock = FolderLock(Path(sys.argv[1])); "
                "print('locked', flush=True); time.sleep(60)"
            ),
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=TINY.parents[1],
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(InputError, match=f"in use by another qverify run \\(pid {holder.pid}\\)"):
            FolderLock(tmp_path)
        result = qverify("suite", "run", str(TINY / "suite.toml"), "--out", str(tmp_path), "--resume")
        assert_clean_error(result, f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    with FolderLock(tmp_path):  # the kernel released the dead holder's lock: no stale lock
        pass


def test_an_output_path_that_cannot_be_a_folder_is_refused_before_any_task(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    started = time.monotonic()
    result = qverify("suite", "run", str(TINY / "suite.toml"), "--out", str(blocker / "run"), "--no-progress")
    assert_clean_error(result, "is not writable")
    assert time.monotonic() - started < 30


def test_two_concurrent_runs_run_each_task_once(tmp_path):
    command = ["suite", "run", two_task_suite(tmp_path), "--jobs", "1"]
    command += ["--out", str(tmp_path / "run"), "--no-progress"]
    first = subprocess.Popen(
        [sys.executable, "-m", "qverify", *command], cwd=TINY.parents[1], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    lock = tmp_path / "run" / ".qverify.lock"
    while not lock.is_file() or not os.path.getsize(lock):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = qverify(*command, "--resume")
    first.communicate(timeout=300)
    assert first.returncode == 0
    assert_clean_error(second, "in use by another qverify run")
    keys = [json.loads(line)["key"] for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 2
