"""Shared by both paths: the decision-procedure interface: `check(problem, deadline) -> CheckResult`.

Each back end lives in its own module and is the only importer of its library; a missing library
raises `ToolMissingError` (qverify.errors) at construction, for the caller to fall back.
"""

from __future__ import annotations

import enum
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

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


def isolated(work: Callable[[], CheckResult], deadline: float) -> CheckResult:
    """Run `work` in a forked child process and return its result, or UNKNOWN("timeout") if it
    has not finished by `deadline` (time.monotonic()): the child is then killed by its pid.

    SMT solvers do not always honour their own time limits (bit-blasting a large product can take
    minutes between two checks of a terminator); a child process can always be stopped."""
    start = time.monotonic()
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)

    parent = os.getpid()

    def child() -> None:
        die_with_parent(signal.SIGKILL, parent)  # a killed engine leaves no solver behind
        try:
            result = work()
        except BaseException as error:  # noqa: BLE001 - reported to the parent as UNKNOWN
            result = CheckResult(CheckStatus.UNKNOWN, f"solver failed: {type(error).__name__}: {error}")
        sender.send(result)
        sender.close()

    process = context.Process(target=child, daemon=True)
    process.start()
    sender.close()
    result = None
    try:
        if receiver.poll(max(deadline - time.monotonic(), 0.0) + GRACE_S):
            result = receiver.recv()
    except (EOFError, OSError):
        result = CheckResult(CheckStatus.UNKNOWN, "the solver process died (out of memory?)")
    finally:
        receiver.close()
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=5)
    if result is None:
        result = CheckResult(CheckStatus.UNKNOWN, "timeout")
    result.time_s = time.monotonic() - start
    return result
