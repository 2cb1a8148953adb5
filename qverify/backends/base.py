"""One interface for every back end: `Backend.check(job, limits) -> Verdict`.

A back end decides one harness. Its counterexample is *unconfirmed* until the counterexample stage
has replayed it through gcc and the simulator; only then is an UNSAFE reported to the user.
"""

from __future__ import annotations

import abc
import copyreg
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType


def read_only(mapping: dict) -> MappingProxyType:
    """A read-only view of `mapping` (a named function: pickle finds it, unlike the builtin type)."""
    return MappingProxyType(mapping)


def _pickle_mapping_proxy(proxy: MappingProxyType) -> tuple:
    return read_only, (dict(proxy),)


# Records hold read-only mappings (verdict times and counts, option origins) and cross process
# boundaries (suite workers, Dask): pickle a MappingProxyType as a proxy of a copy of its dict.
copyreg.pickle(MappingProxyType, _pickle_mapping_proxy)


class Status(enum.Enum):
    SAFE = "SAFE"
    UNSAFE = "UNSAFE"
    UNKNOWN = "UNKNOWN"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-task limits, enforced on the child process that does the work."""

    timeout_s: float = 60.0
    memory_mb: int = 4096


@dataclass(frozen=True, slots=True)
class HarnessJob:
    """What a back end checks: a generated harness and the folder holding its headers."""

    harness: Path
    include_dir: Path
    is_float: bool
    n_inputs: int
    options: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))


Value = int | float


@dataclass(frozen=True, slots=True)
class Verdict:
    """A back end's answer. `counterexample` holds the nondet values in call order (UNSAFE only)."""

    status: Status
    backend: str
    solver: str = ""
    reason: str = ""  # why UNKNOWN, or the ERROR message
    counterexample: tuple[Value, ...] | None = None
    violated: str = ""  # the text of the violated assertion, as the checker printed it
    decided_by: str = ""  # e.g. attack, bounds, milp, smt, esbmc
    times_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    counts: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    peak_memory_mb: float = 0.0
    notes: tuple[str, ...] = ()  # e.g. why the engine decided on its scalar path
    cpu_s: float = 0.0  # user + system seconds of the back end's process (and the children it waited for)

    def to_json(self) -> dict:
        return {
            "status": self.status.value,
            "backend": self.backend,
            "solver": self.solver,
            "reason": self.reason,
            "counterexample": list(self.counterexample) if self.counterexample is not None else None,
            "violated": self.violated,
            "decided_by": self.decided_by,
            "times_s": dict(self.times_s),
            "counts": dict(self.counts),
            "peak_memory_mb": self.peak_memory_mb,
            "notes": list(self.notes),
            "cpu_s": self.cpu_s,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> Verdict:
        counterexample = data.get("counterexample")
        return cls(
            status=Status(data["status"]),
            backend=data["backend"],
            solver=data.get("solver", ""),
            reason=data.get("reason", ""),
            counterexample=tuple(counterexample) if counterexample is not None else None,
            violated=data.get("violated", ""),
            decided_by=data.get("decided_by", ""),
            times_s=MappingProxyType(dict(data.get("times_s", {}))),
            counts=MappingProxyType(dict(data.get("counts", {}))),
            peak_memory_mb=float(data.get("peak_memory_mb", 0.0)),
            notes=tuple(str(note) for note in data.get("notes", ())),
            cpu_s=float(data.get("cpu_s", 0.0)),
        )


class Backend(abc.ABC):
    """A decision procedure for harnesses."""

    name: str = ""

    def prepare(self, limits: Limits, workdir: Path) -> None:
        """Get ready before the harness exists in `workdir` (e.g. start a process); `check` or
        `close` follows. Most back ends need nothing."""

    def close(self) -> None:
        """Release what `prepare` took, when `check` did not run."""

    @abc.abstractmethod
    def check(self, job: HarnessJob, limits: Limits) -> Verdict:
        """Decide the harness within the limits; never raises for a verdict-worthy failure
        (a crash, a timeout, a garbled output are UNKNOWN/ERROR verdicts)."""
