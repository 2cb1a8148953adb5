"""Shared by both paths: the engine's options, results and per-stage record: what `check_file` takes and
returns (shared by both paths: each fills a `Recorder`)."""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

from qverify.errors import InputError

SOLVERS = ("milp", "bitwuzla", "z3")
SEMANTICS = ("ieee", "real")
STEPS = ("lift", "attack", "bounds", "split", "milp", "smt")


class EngineStatus(enum.Enum):
    SAFE = "SAFE"
    UNSAFE = "UNSAFE"
    UNKNOWN = "UNKNOWN"
    ERROR = "ERROR"


@dataclass(frozen=True)
class EngineOptions:
    """How to decide a harness.

    solver: the exact decision procedure for fixed-point programs (milp, bitwuzla, z3); float
    programs use SMT floating point (ieee) or the MILP over reals (real).
    semantics: ieee (the C's float arithmetic) or real (ideal arithmetic, for comparisons with
    real-valued verifiers; not a claim about the C).
    certify: re-check every SAFE query with exact SMT (bit-vectors / floating point).
    timeout_s: the whole run's budget; query_timeout_s: per solver query (default: what remains).
    disable: steps to skip (lift: the array-level front end and network-level strategy, attack,
    bounds, split, milp, smt), for ablations and tests.
    jobs: processes the network level's branch and bound may use (`netlevel.workers`).
    max_nodes: a budget of work instead of time: at most this many branch-and-bound boxes per
    query (scalar splitting) or nodes (network level), then UNKNOWN. With it, the steps that divide
    their time by the clock use work limits instead (the box MILP a HiGHS node limit, not 0.2 s;
    the network level's LP at every node, not while LPs take under half the time), so the same
    budget gives the same answer on a busy machine and an idle one, and the timeout is only a
    safety net. Tests decide within such budgets; a run on the command line has none.
    """

    solver: str = "milp"
    semantics: str = "ieee"
    certify: bool = False
    timeout_s: float = 60.0
    query_timeout_s: float | None = None
    seed: int = 0
    attack_samples: int = 4096
    disable: tuple[str, ...] = ()
    jobs: int = 1
    max_nodes: int | None = None

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise InputError(f"--solver {self.solver}: expected one of {', '.join(SOLVERS)}")
        if self.semantics not in SEMANTICS:
            raise InputError(f"--semantics {self.semantics}: expected one of {', '.join(SEMANTICS)}")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise InputError(f"--timeout {self.timeout_s}: must be a positive number of seconds")
        if self.query_timeout_s is not None and not self.query_timeout_s > 0:
            raise InputError(f"query timeout {self.query_timeout_s}: must be positive")
        if self.jobs < 1:
            raise InputError(f"--jobs {self.jobs}: must be at least 1")
        if self.attack_samples < 0:
            raise InputError("attack_samples must be >= 0")
        if self.max_nodes is not None and self.max_nodes < 1:
            raise InputError(f"max_nodes {self.max_nodes}: must be at least 1")
        unknown = [step for step in self.disable if step not in STEPS]
        if unknown:
            raise InputError(f"--disable {','.join(unknown)}: steps are {', '.join(STEPS)}")

    def enabled(self, step: str) -> bool:
        return step not in self.disable


@dataclass(frozen=True)
class EngineResult:
    status: EngineStatus
    reason: str = ""
    counterexample: tuple[int | float, ...] | None = None
    violated: str = ""
    decided_by: str = ""
    solver: str = ""
    times_s: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # how the run went where it matters (e.g. why the scalar path ran)

    def to_json(self) -> dict:
        return {
            "status": self.status.value,
            "reason": self.reason,
            "counterexample": list(self.counterexample) if self.counterexample is not None else None,
            "violated": self.violated,
            "decided_by": self.decided_by,
            "solver": self.solver,
            "times_s": {key: round(value, 6) for key, value in self.times_s.items()},
            "counts": dict(self.counts),
            "notes": list(self.notes),
        }


class Recorder:
    """Per-stage times and counts for the verdict record."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.notes: tuple[str, ...] = ()

    def note(self, text: str) -> None:
        self.notes += (text,)

    def add_time(self, stage: str, seconds: float) -> None:
        self.times[stage] = self.times.get(stage, 0.0) + seconds

    def add(self, name: str, value: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(value)

    def peak(self, name: str, value: int) -> None:
        self.counts[name] = max(self.counts.get(name, 0), int(value))

    class _Timer:
        def __init__(self, recorder: Recorder, stage: str) -> None:
            self.recorder, self.stage = recorder, stage

        def __enter__(self) -> None:
            self.start = time.monotonic()

        def __exit__(self, *exc: object) -> None:
            self.recorder.add_time(self.stage, time.monotonic() - self.start)

    def timer(self, stage: str) -> Recorder._Timer:
        return Recorder._Timer(self, stage)
