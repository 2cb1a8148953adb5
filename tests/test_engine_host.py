"""The warm engine (issue 33): an engine host imports the engine once and runs each task in a fresh
fork of itself, under the task's limits; a task killed at a limit leaves the host serving correct
verdicts, and a task on a warm host answers exactly as on a new one."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from fractions import Fraction

import psutil
import pytest

from qverify.backends import Limits, engine_host
from qverify.backends.engine_host import HOST_MODULE
from qverify.codegen import render_harness
from qverify.invariants import compute_bounds
from qverify.io import load_network
from qverify.properties import robustness
from qverify.quant import FixedFormat, ImplementationOptions, quantize_network
from qverify.suites import expand, read_suite, run_task
from tests.conftest import ROOT
from tests.test_suites_run import OPTIONS, TINY, expected_verdicts

ENDLESS = """int nondet_int(void);
void __ESBMC_assert(int cond, const char *message);
int main(void) {
  int x = nondet_int();
  for (int i = 0; i < 100000000; i++) x = x * 3 + i;
  __ESBMC_assert(x != 5, "x is not 5");
  return 0;
}
"""
# a 20,000,000-cell array: more memory than the task may have
HUNGRY = """int nondet_int(void);
void __ESBMC_assume(int cond);
void __ESBMC_assert(int cond, const char *message);
int a[20000000];
int main(void) {
  int i = nondet_int();
  __ESBMC_assume(i >= 0 && i < 20000000);
  __ESBMC_assert(a[i] == 0, "a[i] is 0");
  return 0;
}
"""


@pytest.fixture
def no_hosts():
    """Start and end without any host of this process (other tests leave theirs warm)."""
    engine_host.shutdown()
    yield
    engine_host.shutdown()


def _hosts_of_this_process() -> list[int]:
    return [
        child.pid
        for child in psutil.Process(os.getpid()).children()
        if HOST_MODULE in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE
    ]


def _tiny_specs(label: str = "8"):
    return expand(read_suite(TINY / "suite.toml"), (label,), OPTIONS, 20.0)


def test_a_task_that_times_out_or_exhausts_memory_is_followed_by_correct_verdicts_on_the_same_host(
    tmp_path, no_hosts
):
    (tmp_path / "endless.c").write_text(ENDLESS)
    (tmp_path / "hungry.c").write_text(HUNGRY)
    host = engine_host.acquire()
    assert host.wait_ready(300)
    # the engine's own budget (600 s) is far away: the host's watch must kill the task
    endless = host.run([str(tmp_path / "endless.c"), "--timeout", "600", "--json"], Limits(1.0, 4096))
    assert endless.timed_out and endless.returncode is None
    hungry = host.run([str(tmp_path / "hungry.c"), "--timeout", "600", "--json"], Limits(300.0, 150))
    # killed by the resident-set watch, or stopped by the address-space limit (the engine's MemoryError)
    assert hungry.memory_exceeded or '"reason": "out of memory"' in hungry.stdout, hungry
    assert host.alive
    engine_host.release(host)
    expected = expected_verdicts()
    for spec in _tiny_specs():
        record = run_task(spec)
        assert record.status.value == expected[spec.task], (spec.task, record.reason)
    assert _hosts_of_this_process() == [host.process.pid]  # every task ran on that one host


def test_a_task_answers_on_a_warm_host_as_on_a_new_one(no_hosts):
    """No state crosses from one task to the next: the same counts, verdicts and paths."""
    specs = _tiny_specs("float")
    first = run_task(specs[-1])  # on a new host
    for spec in specs:  # the host serves the others
        run_task(spec)
    warm = run_task(specs[-1])
    assert len(_hosts_of_this_process()) == 1
    for record in (first, warm):
        assert record.verdict is not None and record.verdict.cpu_s > 0
    seen = [
        (r.status, r.verdict.decided_by, dict(r.verdict.counts), _without_folders(r.verdict.notes))
        for r in (first, warm)
    ]
    assert seen[0] == seen[1]
    assert warm.counterexample == first.counterexample


def _without_folders(notes: tuple[str, ...]) -> list[str]:
    """The notes without the task's temporary folder (each task has its own)."""
    return [re.sub(r"\S*/harness\.c", "harness.c", note) for note in notes]


def test_a_host_taken_for_a_task_that_never_comes_waits_for_the_next(tmp_path, no_hosts):
    from qverify.backends import InternalBackend

    backend = InternalBackend()
    backend.prepare(Limits(timeout_s=10, memory_mb=1024), tmp_path)
    (host,) = _hosts_of_this_process()
    backend.close()  # no harness came: the host goes back to the pool, with no task of its own
    assert _hosts_of_this_process() == [host]
    assert psutil.Process(host).children() == []
    engine_host.shutdown()
    assert _hosts_of_this_process() == []


def test_the_host_runs_blas_on_one_thread_and_keeps_the_commands_environment(no_hosts, monkeypatch):
    """The engine computes on one BLAS thread; a host whose OpenBLAS started a pool anyway paid
    ~0.1 s of CPU at import, on the core the command imports on (benchmarks/bench_overhead.py)."""
    monkeypatch.setenv("QVERIFY_TEST_MARKER", "kept")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    host = engine_host.EngineHost()
    try:
        assert host.wait_ready(120.0)
        environ = psutil.Process(host.process.pid).environ()
        assert environ["OPENBLAS_NUM_THREADS"] == "1"
        assert environ["QVERIFY_TEST_MARKER"] == "kept"
    finally:
        host.close()


_FORKED_HOST = """
import json, os, sys, time
from qverify.backends import Limits, engine_host

engine_host.prewarm(one_task=True)  # a fork of this (single-threaded) process, as `qverify verify` has
host = engine_host.acquire()
assert isinstance(host.process, engine_host._ForkedHost), type(host.process)
outcome = host.run([sys.argv[1], "--json"], Limits(120.0, 2048))
print(json.dumps({"host": host.process.pid, "code": outcome.returncode, "stdout": outcome.stdout}), flush=True)
time.sleep(600)  # killed by the test
"""


def test_the_host_forked_for_one_task_answers_as_a_new_one_and_dies_with_its_parent(tmp_path, no_hosts):
    """`qverify verify`'s host is a fork of it (the interpreter and numpy not paid twice): a task
    answers there exactly as on a host started as a new interpreter, and killing the command with
    SIGKILL takes the host with it (PR_SET_PDEATHSIG)."""
    net = load_network(ROOT / "benchmarks" / "tiny" / "relu2.nnet")
    prop = robustness((Fraction("0.6"), Fraction("0.45")), Fraction("0.15"), 0, net.n_outputs)
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(8, 8)))
    harness = render_harness(qnet, prop, compute_bounds(qnet, prop).bounds).write(tmp_path)
    command = subprocess.Popen(
        [sys.executable, "-c", _FORKED_HOST, str(harness)], stdout=subprocess.PIPE, text=True
    )
    try:
        forked = json.loads(command.stdout.readline())
        new = engine_host.acquire()
        expected = new.run([str(harness), "--json"], Limits(120.0, 2048))
        engine_host.release(new)
        answer = {k: v for k, v in json.loads(forked["stdout"]).items() if k not in ("times_s", "stats")}
        assert forked["code"] == expected.returncode
        assert answer == {
            k: v for k, v in json.loads(expected.stdout).items() if k not in ("times_s", "stats")
        }
        assert psutil.pid_exists(forked["host"])
        command.send_signal(signal.SIGKILL)
        command.wait()
        deadline = time.monotonic() + 10
        while psutil.pid_exists(forked["host"]) and time.monotonic() < deadline:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(forked["host"]).status() == psutil.STATUS_ZOMBIE:
                    break
            time.sleep(0.05)
        gone = (
            not psutil.pid_exists(forked["host"])
            or psutil.Process(forked["host"]).status() == psutil.STATUS_ZOMBIE
        )
        assert gone, "the forked host outlived its parent"
    finally:
        command.kill()
        command.wait()
