"""Run a child process under a wall-clock timeout and a memory limit, leaving nothing behind.

The child gets its own session (process group). Memory is watched two ways: RLIMIT_AS at twice the
limit (a hard backstop the kernel enforces, set with prlimit just after the start) and the resident
set of the whole group, polled every 50 ms (the limit users mean; the group's members are listed
again every 0.5 s only: listing them reads every process of the machine, which cost the parent ~7 %
of a core for the whole run). On timeout or memory excess the whole group is killed (SIGTERM, then
SIGKILL), so no solver started by the child survives. If qverify itself is killed (even with
SIGKILL, when no `finally` runs), the child gets SIGKILL from the kernel (PR_SET_PDEATHSIG, see
qverify.interrupts), and the engine's solver forks die with the engine the same way.

The child is reaped with `wait4`, which also gives the CPU seconds it and the children it waited for
used (`ProcessOutcome.cpu_s`: what a comparison of whole processes counts). The same watch and kill
serve a child this process did not start itself (the warm engine's task processes, forked by an
engine host: `qverify.backends.engine_host`), through the small `Watched` interface.
"""

from __future__ import annotations

import itertools
import os
import resource
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import psutil

from qverify.backends.base import Limits
from qverify.interrupts import child_dies_with_us

POLL_S = 0.05
MEMBERS_EVERY = 10  # polls between two listings of the child's group
GRACE_S = 1.0


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """What happened to the child: its exit code (None if killed by us), output and resource use."""

    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    peak_memory_mb: float
    timed_out: bool
    memory_exceeded: bool
    limits: Limits
    cpu_s: float = 0.0  # user + system seconds of the child and of the children it waited for
    startup_s: float = 0.0  # of wall_s, the wait for a warm engine host still importing the engine

    @property
    def limit_reason(self) -> str:
        if self.timed_out:
            return f"timeout: {self.limits.timeout_s:g} s wall-clock limit reached"
        if self.memory_exceeded:
            return f"memory limit of {self.limits.memory_mb} MB exceeded (peak seen {self.peak_memory_mb:.0f} MB)"
        return ""


def address_space_bytes(memory_mb: int) -> int:
    """RLIMIT_AS for a memory limit: twice the limit (a backstop above the resident-set watch; a
    process's address space holds much that is never resident, such as thread stacks)."""
    return memory_mb * 2 * 1024 * 1024


def _limit_address_space(pid: int, memory_mb: int) -> None:
    """RLIMIT_AS on the running child (prlimit: no preexec_fn, which is unsafe with threads)."""
    limit = address_space_bytes(memory_mb)
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
    except (ProcessLookupError, PermissionError, OSError):
        pass  # the child already exited, or the platform refuses: RSS polling still applies


class Watched(Protocol):
    """A process under watch: its pid (and process group: it leads its own session) and a wait for
    its end that returns at once when it ended, else after at most `timeout_s`."""

    pid: int

    def wait_ended(self, timeout_s: float) -> bool: ...


class _Child:
    """A child of this process, watched through a pidfd (its end wakes the wait at once) and reaped
    with `wait4` (for its CPU time); the Popen's returncode is set from that."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self.pid = child.pid
        self.cpu_s = 0.0
        try:
            self._pidfd: int | None = os.pidfd_open(child.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3: sleep between the checks instead
            self._pidfd = None

    def wait_ended(self, timeout_s: float) -> bool:
        if self.child.returncode is not None:
            return True
        if self._reaped():
            return True
        if self._pidfd is not None:
            select.select([self._pidfd], [], [], timeout_s)
        else:
            time.sleep(min(timeout_s, POLL_S / 5))
        return self._reaped()

    def _reaped(self) -> bool:
        try:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (no CPU time then)
            self.child.returncode = self.child.returncode if self.child.returncode is not None else -1
            return True
        if pid == 0:
            return False
        self.child.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_s = usage.ru_utime + usage.ru_stime
        return True

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _group_members(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.Error:
        return []


def _rss_mb(members: list[psutil.Process]) -> float:
    total = 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            continue
    return total / (1024 * 1024)


def kill_group(watched: Watched) -> None:
    """SIGTERM then SIGKILL to the watched process's whole group, until it ended and its group is
    gone (whatever it started and left running goes too)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(watched.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if watched.wait_ended(POLL_S / 5) and not _group_alive(watched.pid):
                return
    while not watched.wait_ended(POLL_S):
        pass


def _group_alive(pgid: int) -> bool:
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(process.info["pid"]) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


OUT_OF_MEMORY_SIGNS = (
    "MemoryError",
    "bad_alloc",
    "Cannot allocate memory",
    "out of memory",
    "Out of memory",
    "Memory allocation still failed",  # OpenBLAS, when the address-space limit leaves it no room
    "failed to map segment from shared object",  # the dynamic loader, for the same reason
    "ensure that your address space and process count limits are big enough",  # OpenBLAS threads
)


def watch(watched: Watched, limits: Limits, start: float) -> tuple[float, bool, bool]:
    """Poll the process until it ends or exceeds a limit: (peak RSS in MB, timed out, out of memory).
    Each wait between two polls ends when the process does (not up to 50 ms later)."""
    try:
        process = psutil.Process(watched.pid)
    except psutil.Error:  # already gone
        watched.wait_ended(POLL_S)
        return 0.0, False, False
    peak = 0.0
    members = [process]  # its children are listed from the MEMBERS_EVERY-th poll on (a small
    # query, answered before, should not pay for a listing of every process of the machine)
    for poll in itertools.count():
        if poll and poll % MEMBERS_EVERY == 0:
            members = _group_members(process)
        peak = max(peak, _rss_mb(members))
        if peak > limits.memory_mb:
            return peak, False, True
        if time.monotonic() - start > limits.timeout_s:
            return peak, True, False
        if watched.wait_ended(POLL_S):
            break
    return peak, False, False


def outcome_of(
    returncode: int | None,
    stdout: str,
    stderr: str,
    start: float,
    watched: tuple[float, bool, bool],
    limits: Limits,
    cpu_s: float,
    startup_s: float = 0.0,
) -> ProcessOutcome:
    """The finished (or killed) process's outcome; `watched` is what `watch` returned."""
    peak, timed_out, memory_exceeded = watched
    killed = timed_out or memory_exceeded
    if not killed and returncode != 0 and any(sign in stderr for sign in OUT_OF_MEMORY_SIGNS):
        memory_exceeded = True  # the address-space limit made an allocation fail
    return ProcessOutcome(
        None if killed else returncode,
        stdout,
        stderr,
        time.monotonic() - start,
        peak,
        timed_out,
        memory_exceeded,
        limits,
        round(cpu_s, 6),
        round(startup_s, 6),
    )


def _outcome(
    child: _Child, out: IO[str], err: IO[str], start: float, watched: tuple[float, bool, bool], limits: Limits
) -> ProcessOutcome:
    """The outcome of a child of ours, its output read from the files it wrote."""
    out.seek(0)
    err.seek(0)
    return outcome_of(child.child.returncode, out.read(), err.read(), start, watched, limits, child.cpu_s)


def run_limited(
    command: Sequence[str],
    limits: Limits,
    stdin_text: str = "",
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> ProcessOutcome:
    """Run `command` to completion or until a limit is hit; never raises for the child's failures."""
    with (
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out,
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err,
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stdin,
    ):
        stdin.write(stdin_text)
        stdin.seek(0)
        start = time.monotonic()
        child = subprocess.Popen(
            list(command),
            stdin=stdin,
            stdout=out,
            stderr=err,
            cwd=cwd,
            env=env,
            start_new_session=True,
            # prctl only (no lock, no import; glibc keeps malloc fork-safe): safe with threads
            preexec_fn=child_dies_with_us(),  # noqa: PLW1509 - dies with us, even by SIGKILL
        )
        watched = _Child(child)
        try:
            _limit_address_space(child.pid, limits.memory_mb)
            result = watch(watched, limits, start)
        finally:
            # on a limit, on an interruption (Ctrl-C, SIGTERM: see qverify.interrupts), and also
            # whatever the child started and left running
            kill_group(watched)
            watched.close()
        return _outcome(watched, out, err, start, result, limits)
