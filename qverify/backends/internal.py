"""The built-in engine as a back end: `python -m qverify.engine`'s command line, run in a process of
its own under limits, forked from a warm engine host (`qverify.backends.engine_host`).

The engine stops itself at its own budget (the task's timeout minus a start-up margin) and answers
UNKNOWN with a reason; the process limits are the backstop that also bounds memory,
at the task's own time: an engine step that overruns its budget by more than the margin is killed
when the task's timeout ends (it used to get 10 s more, and a suite task ran 67 s of 60). `prepare` takes
a host before the harness exists (a new one imports the engine while the harness is generated; one
kept from an earlier task is ready at once); `check` runs the task in it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from qverify.backends import engine_host
from qverify.backends.base import Backend, HarnessJob, Limits, Status, Verdict
from qverify.backends.process import ProcessOutcome, outcome_of

STARTUP_MARGIN_S = 3.0  # interpreter start and imports, left out of the engine's own budget


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


class InternalBackend(Backend):
    """qverify's own bounded model checker (qverify.engine)."""

    name = "internal"

    def __init__(self, options: InternalOptions | None = None) -> None:
        self.options = options or InternalOptions()
        self._host: engine_host.EngineHost | None = None

    def prepare(self, limits: Limits, workdir: Path) -> None:
        """Take an engine host now: a new one imports the engine while the harness is made."""
        if self._host is None:
            self._host = engine_host.acquire()

    def close(self) -> None:
        if self._host is not None:
            engine_host.release(self._host)
            self._host = None

    def check(self, job: HarnessJob, limits: Limits) -> Verdict:
        budget = max(1.0, limits.timeout_s - STARTUP_MARGIN_S)
        outcome = self._run(engine_arguments(job, self.options, budget), limits)
        if outcome.limit_reason:
            return self._verdict(Status.UNKNOWN, outcome.limit_reason, outcome)
        try:
            data = json.loads(outcome.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            stderr_tail = outcome.stderr.strip().splitlines()[-3:]
            return self._verdict(
                Status.ERROR,
                f"the engine exited with {outcome.returncode} and no result: " + " | ".join(stderr_tail),
                outcome,
            )
        return self._from_engine(data, outcome)

    def _run(self, argv: list[str], limits: Limits) -> ProcessOutcome:
        """The engine's command line in a fork of a host; a second host if the first one ended
        before it started the task (killed by someone, or by the machine's out-of-memory killer)."""
        self.prepare(limits, Path())
        host, self._host = self._host, None
        assert host is not None
        try:
            try:
                return host.run(argv, limits)
            except engine_host.HostEnded:
                engine_host.discard(host)
                host = engine_host.acquire()
                return host.run(argv, limits)
        except engine_host.HostEnded as error:
            engine_host.discard(host)
            return outcome_of(
                None,
                "",
                f"the engine host ended: {error}",
                time.monotonic(),
                (0.0, False, False),
                limits,
                0.0,
            )
        finally:
            engine_host.release(host)

    def _verdict(self, status: Status, reason: str, outcome: ProcessOutcome) -> Verdict:
        return Verdict(
            status=status,
            backend=self.name,
            solver=self.options.solver,
            reason=reason,
            peak_memory_mb=outcome.peak_memory_mb,
            cpu_s=outcome.cpu_s,
        )

    def _from_engine(self, data: dict, outcome: ProcessOutcome) -> Verdict:
        """The engine's JSON result (its fields are those of a Verdict) as this back end's verdict,
        with `host` in its times: the wait for the engine host's imports (0 on a warm host)."""
        times = {**data.get("times_s", {}), "host": outcome.startup_s}
        verdict = Verdict.from_json(
            {
                **data,
                "backend": self.name,
                "times_s": times,
                "peak_memory_mb": outcome.peak_memory_mb,
                "cpu_s": outcome.cpu_s,
            }
        )
        return replace(verdict, solver=verdict.solver or self.options.solver)
