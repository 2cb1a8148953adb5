"""Shared by both paths: the decision-procedure interface: `check(problem, deadline) -> CheckResult`.

Each back end lives in its own module and is the only importer of its library; a missing library
raises `ToolMissingError` (qverify.errors) at construction, for the caller to fall back.
"""

from __future__ import annotations

import enum
import math
import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self, TypeVar

from qverify.interrupts import die_with_parent


class CheckStatus(enum.Enum):
    SAT = "sat"  # a candidate solution (to be confirmed by the exact evaluator)
    UNSAT = "unsat"  # no solution (see docs/engine.md for when this is trusted)
    UNKNOWN = "unknown"  # timeout, solver gave up: `reason` says which


@dataclass
class CheckResult:
    status: CheckStatus
    reason: str = ""
    inputs: dict[int, float | int] = field(default_factory=dict)  # program input index -> value
    time_s: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)


class DecisionProcedure:
    """A solver back end. `name` is reported in verdicts."""

    name = ""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Free native resources (default: nothing)."""


class SmtProcedure(DecisionProcedure):
    """An exact SMT back end: `_check` encodes and solves one query in this process; `check_query`
    runs it in a forked child so that the deadline holds whatever the solver does."""

    def __init__(self, narrow: bool = True) -> None:
        self.narrow = narrow  # interval-narrowed bit widths (False: every integer at its C width)

    def check_query(self, simplified, p: int, deadline: float) -> CheckResult:
        """Is there an execution that passes every step before p and fails assertion p?"""
        if deadline - time.monotonic() <= 0.05:
            return CheckResult(CheckStatus.UNKNOWN, "timeout before the SMT query")
        return isolated(lambda: self._check(simplified, p, deadline), deadline)

    def _check(self, simplified, p: int, deadline: float) -> CheckResult:
        raise NotImplementedError


GRACE_S = 0.5
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """An isolated run that gave no result, and why (its deadline came first, or the child died)."""

    reason: str
    timed_out: bool


def run_isolated(work: Callable[[], T], deadline: float) -> T | NoAnswer:
    """Run `work` in a forked child process and return what it returns, or `NoAnswer` when it has
    not finished by `deadline` (time.monotonic()) plus `GRACE_S` -- the child is then killed by
    its pid -- or died without a result.

    Solvers do not always honour their own time limits: bit-blasting a large product can take
    minutes between two checks of an SMT solver's terminator, and HiGHS's MIP does not treat an LP
    time-out in its root cut separation as a stop (docs/engine.md, "Deadlines"). A child process
    can always be stopped. The fork copies the caller's state (a built model is not pickled on the
    way in); the result comes back pickled through a pipe. A child's CPU time is counted with this
    process's once it is reaped, as a task's children are."""
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()  # (not multiprocessing: the network level's daemonic workers may not have children)
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            die_with_parent(signal.SIGKILL, parent)  # a killed engine leaves no solver behind
            try:
                result: object = work()
            except BaseException as error:  # noqa: BLE001 - reported to the parent as no answer
                result = NoAnswer(f"solver failed: {type(error).__name__}: {error}", timed_out=False)
            view = memoryview(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
            while view:
                view = view[os.write(write_end, view) :]
            code = 0
        finally:
            os._exit(code)  # never the parent's exit handlers
    os.close(write_end)
    try:
        payload = _read_all(read_end, deadline + GRACE_S)
    finally:
        os.close(read_end)
    if payload is None:
        _kill(pid)
        return NoAnswer("timeout", timed_out=True)
    os.waitpid(pid, 0)
    try:
        return pickle.loads(payload)
    except (pickle.UnpicklingError, EOFError):
        return NoAnswer("the solver process died (out of memory?)", timed_out=False)


def _read_all(fd: int, stop_at: float) -> bytes | None:
    """Every byte from `fd` up to its end, or None when `stop_at` (time.monotonic()) comes first."""
    chunks: list[bytes] = []
    while True:
        left = stop_at - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left if math.isfinite(left) else None)
        if not ready:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def isolated(work: Callable[[], CheckResult], deadline: float) -> CheckResult:
    """`work`'s result from a forked child (`run_isolated`), or UNKNOWN with the reason it gave none."""
    start = time.monotonic()
    result = run_isolated(work, deadline)
    if isinstance(result, NoAnswer):
        result = CheckResult(CheckStatus.UNKNOWN, result.reason)
    result.time_s = time.monotonic() - start
    return result
