"""The built-in engine as a back end: `python -m qverify.engine` in a child process under limits.

The engine stops itself at its own budget (the task's timeout minus a start-up margin) and answers
UNKNOWN with a reason; the child-process limits are the backstop that also bounds memory.
`prepare` starts the child before the harness exists (`qverify.backends.engine_process`), so that its
start and imports overlap with the harness generation; `check` then gives it its command line.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from qverify.backends.base import Backend, HarnessJob, Limits, Status, Verdict
from qverify.backends.process import WaitingProcess, run_limited

STARTUP_MARGIN_S = 3.0  # interpreter start and imports, left out of the engine's own budget
HARD_GRACE_S = 10.0  # after the engine's budget, before the child is killed


@dataclass(frozen=True, slots=True)
class InternalOptions:
    solver: str = "milp"  # milp | bitwuzla | z3
    semantics: str = "ieee"  # ieee | real (float harnesses)
    certify: bool = False
    seed: int = 0
    jobs: int = 0  # processes of the network level's search; 0: every core this process may use


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def core_share(tasks_in_parallel: int) -> int:
    """The engine processes each of `tasks_in_parallel` tasks may use, so that tasks x processes
    stay within the usable cores (a suite's --jobs 2 on 2 cores: one each)."""
    return max(1, usable_cores() // max(1, tasks_in_parallel))


def engine_arguments(job: HarnessJob, options: InternalOptions, budget_s: float) -> list[str]:
    """The engine's command line after `python -m qverify.engine`."""
    return [
        str(job.harness),
        "-I",
        str(job.include_dir),
        "--solver",
        options.solver,
        "--semantics",
        options.semantics,
        "--timeout",
        f"{budget_s:.3f}",
        "--seed",
        str(options.seed),
        "--jobs",
        str(options.jobs or usable_cores()),
        "--json",
        *(["--certify"] if options.certify else []),
    ]


def engine_command(job: HarnessJob, options: InternalOptions, budget_s: float) -> list[str]:
    return [sys.executable, "-m", "qverify.engine", *engine_arguments(job, options, budget_s)]


class InternalBackend(Backend):
    """qverify's own bounded model checker (qverify.engine)."""

    name = "internal"

    def __init__(self, options: InternalOptions | None = None) -> None:
        self.options = options or InternalOptions()
        self._waiting: WaitingProcess | None = None

    def prepare(self, limits: Limits, workdir: Path) -> None:
        """Start the engine's process now: it imports the engine while the harness is made."""
        if self._waiting is None:
            command = [sys.executable, "-m", "qverify.backends.engine_process", str(workdir)]
            self._waiting = WaitingProcess(command, limits.memory_mb)

    def close(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None

    def check(self, job: HarnessJob, limits: Limits) -> Verdict:
        budget = max(1.0, limits.timeout_s - STARTUP_MARGIN_S)
        hard = Limits(timeout_s=limits.timeout_s + HARD_GRACE_S, memory_mb=limits.memory_mb)
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            line = json.dumps(engine_arguments(job, self.options, budget)) + "\n"
            outcome = waiting.finish(line, hard)
        else:
            outcome = run_limited(engine_command(job, self.options, budget), hard)
        if outcome.limit_reason:
            return self._verdict(Status.UNKNOWN, outcome.limit_reason, outcome.peak_memory_mb)
        try:
            data = json.loads(outcome.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            stderr_tail = outcome.stderr.strip().splitlines()[-3:]
            return self._verdict(
                Status.ERROR,
                f"the engine exited with {outcome.returncode} and no result: " + " | ".join(stderr_tail),
                outcome.peak_memory_mb,
            )
        return self._from_engine(data, outcome.peak_memory_mb)

    def _verdict(self, status: Status, reason: str, peak: float) -> Verdict:
        return Verdict(
            status=status, backend=self.name, solver=self.options.solver, reason=reason, peak_memory_mb=peak
        )

    def _from_engine(self, data: dict, peak: float) -> Verdict:
        """The engine's JSON result (its fields are those of a Verdict) as this back end's verdict."""
        verdict = Verdict.from_json({**data, "backend": self.name, "peak_memory_mb": peak})
        return replace(verdict, solver=verdict.solver or self.options.solver)
