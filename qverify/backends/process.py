"""Run a child process under a wall-clock timeout and a memory limit, leaving nothing behind.

The child gets its own session (process group). Memory is watched two ways: RLIMIT_AS at twice the
limit (a hard backstop the kernel enforces, set with prlimit just after the start) and the resident
set of the whole group, polled every 50 ms (the limit users mean; the group's members are listed
again every 0.5 s only: listing them reads every process of the machine, which cost the parent ~7 %
of a core for the whole run). On timeout or memory excess the whole group is killed (SIGTERM, then
SIGKILL), so no solver started by the child survives. If qverify itself is killed (even with
SIGKILL, when no `finally` runs), the child gets SIGKILL from the kernel (PR_SET_PDEATHSIG, see
qverify.interrupts), and the engine's solver forks die with the engine the same way.
"""

from __future__ import annotations

import itertools
import os
import resource
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from qverify.backends.base import Limits
from qverify.errors import InternalError
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

    @property
    def limit_reason(self) -> str:
        if self.timed_out:
            return f"timeout: {self.limits.timeout_s:g} s wall-clock limit reached"
        if self.memory_exceeded:
            return f"memory limit of {self.limits.memory_mb} MB exceeded (peak seen {self.peak_memory_mb:.0f} MB)"
        return ""


def _limit_address_space(pid: int, memory_mb: int) -> None:
    """RLIMIT_AS on the running child (prlimit: no preexec_fn, which is unsafe with threads)."""
    limit = memory_mb * 2 * 1024 * 1024
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
    except (ProcessLookupError, PermissionError, OSError):
        pass  # the child already exited, or the platform refuses: RSS polling still applies


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


def _kill_group(child: subprocess.Popen) -> None:
    """SIGTERM then SIGKILL to the child's whole process group; reaps the child."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if child.poll() is not None and not _group_alive(child.pid):
                return
            time.sleep(POLL_S / 5)
    child.wait()


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


def _watch(child: subprocess.Popen, limits: Limits, start: float) -> tuple[float, bool, bool]:
    """Poll the child until it exits or exceeds a limit: (peak RSS in MB, timed out, out of memory)."""
    watched = psutil.Process(child.pid)
    peak = 0.0
    members: list[psutil.Process] = []
    for poll in itertools.count():
        if child.poll() is not None:
            break
        if poll % MEMBERS_EVERY == 0:
            members = _group_members(watched)
        peak = max(peak, _rss_mb(members))
        if peak > limits.memory_mb:
            return peak, False, True
        if time.monotonic() - start > limits.timeout_s:
            return peak, True, False
        try:  # a sleep that ends when the child does (not up to 50 ms later: every answer waited for it)
            child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
    return peak, False, False


def _outcome(
    child: subprocess.Popen,
    out: IO[str],
    err: IO[str],
    start: float,
    peak: float,
    timed_out: bool,
    memory_exceeded: bool,
    limits: Limits,
) -> ProcessOutcome:
    """The finished (or killed) child's outcome, its output read from the files it wrote."""
    wall = time.monotonic() - start
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
    killed = timed_out or memory_exceeded
    if not killed and child.returncode != 0 and any(sign in stderr for sign in OUT_OF_MEMORY_SIGNS):
        memory_exceeded = True  # the address-space limit made an allocation fail
    return ProcessOutcome(
        None if killed else child.returncode,
        stdout,
        stderr,
        wall,
        peak,
        timed_out,
        memory_exceeded,
        limits,
    )


class WaitingProcess:
    """A child started before its input is known, that reads it on stdin when `finish` gives it: its interpreter start and imports overlap with the parent's work. It runs
    under the same rules as `run_limited` (own session, dies with us, RLIMIT_AS from the start; the
    wall-clock limit and the RSS watch from `finish` on). `cancel` kills it when no input comes."""

    def __init__(self, command: Sequence[str], memory_mb: int, cwd: Path | None = None) -> None:
        # closed by finish or cancel: the files live as long as the child, across two calls
        self._out = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._err = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._child: subprocess.Popen | None = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=self._out,
            stderr=self._err,
            cwd=cwd,
            start_new_session=True,
            text=True,
            preexec_fn=child_dies_with_us(),  # noqa: PLW1509 - dies with us, even by SIGKILL
        )
        _limit_address_space(self._child.pid, memory_mb)

    def finish(self, stdin_text: str, limits: Limits) -> ProcessOutcome:
        """Give the child its input and run it to completion or until a limit is hit."""
        child = self._child
        if child is None:
            raise InternalError("this process was already finished or cancelled")
        start = time.monotonic()
        try:
            try:
                child.stdin.write(stdin_text)  # type: ignore[union-attr]
                child.stdin.close()  # type: ignore[union-attr]
            except (BrokenPipeError, OSError):
                pass  # it already exited: its output says why
            peak, timed_out, memory_exceeded = _watch(child, limits, start)
        finally:
            _kill_group(child)
            self._child = None
        try:
            return _outcome(child, self._out, self._err, start, peak, timed_out, memory_exceeded, limits)
        finally:
            self._close_files()

    def cancel(self) -> None:
        """Kill the child (no input will come); a no-op after `finish`."""
        if self._child is not None:
            _kill_group(self._child)
            self._child = None
            self._close_files()

    def _close_files(self) -> None:
        self._out.close()
        self._err.close()


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
        try:
            _limit_address_space(child.pid, limits.memory_mb)
            peak, timed_out, memory_exceeded = _watch(child, limits, start)
        finally:
            # on a limit, on an interruption (Ctrl-C, SIGTERM: see qverify.interrupts), and also
            # whatever the child started and left running
            _kill_group(child)
        return _outcome(child, out, err, start, peak, timed_out, memory_exceeded, limits)
