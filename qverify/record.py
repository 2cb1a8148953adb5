"""The record of one verification: what `qverify verify --json` writes, suites journal and `qverify
show` reads. Plain data (the verdict, the counterexample, the stage times: `qverify.stage_times`), so
that reading a record imports neither the pipeline nor numpy (`qverify.verification` builds them and
re-exports this class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from qverify import __version__
from qverify.backends.base import Status, Verdict
from qverify.counterexample.example import AdversarialExample
from qverify.errors import EXIT_SAFE, EXIT_UNKNOWN, EXIT_UNSAFE, EXIT_USAGE
from qverify.stage_times import named_times

EXIT_BY_STATUS = {
    Status.SAFE: EXIT_SAFE,
    Status.UNSAFE: EXIT_UNSAFE,
    Status.UNKNOWN: EXIT_UNKNOWN,
    Status.ERROR: EXIT_USAGE,
}


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    """What one case of a property of cases answered (`qverify.cases`; `label` names the case)."""

    label: str
    status: Status
    reason: str
    time_s: float
    decided_by: str = ""

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "status": self.status.value,
            "reason": self.reason,
            "time_s": self.time_s,
            "decided_by": self.decided_by,
        }

    @classmethod
    def from_json(cls, data: dict) -> CaseOutcome:
        return cls(
            data["label"],
            Status(data["status"]),
            data.get("reason", ""),
            float(data.get("time_s", 0.0)),
            data.get("decided_by", ""),
        )


@dataclass(frozen=True, slots=True)
class VerificationRecord:
    """The full result of one verification, as `--json` writes it."""

    name: str
    network: str
    network_digest: str
    property: str
    implementation: str
    number_format: str  # what is verified: "int8-x86", "<16,16>", ...
    lut_eps: float
    status: Status
    reason: str
    verdict: Verdict | None
    counterexample: AdversarialExample | None
    times_s: dict[str, float]
    peak_memory_mb: float
    warnings: tuple[str, ...] = ()
    invariants: str = ""
    options: str = ""
    harness: str = ""
    version: str = __version__
    origins: Mapping[str, str] = field(default_factory=dict)  # option -> where its value came from
    format_resolved_from: str = ""  # the label `number_format` was resolved from: "int8-ort" (the probe)
    cases: tuple[CaseOutcome, ...] = ()  # a property of cases: what each case answered (qverify.cases)

    @property
    def exit_code(self) -> int:
        return EXIT_BY_STATUS[self.status]

    def summary_line(self) -> str:
        """`SAFE`, `UNSAFE`, `UNKNOWN: reason`, `ERROR: msg` (what `qverify verify` prints)."""
        if self.status in (Status.UNKNOWN, Status.ERROR):
            return f"{self.status.value}: {self.reason}"
        return self.status.value

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "status": self.status.value,
            "reason": self.reason,
            "network": self.network,
            "network_digest": self.network_digest,
            "property": self.property,
            "implementation": self.implementation,
            "format": self.number_format,
            "format_resolved_from": self.format_resolved_from,
            "lut_eps": self.lut_eps,
            "backend": self.verdict.backend if self.verdict else "",
            "solver": self.verdict.solver if self.verdict else "",
            "decided_by": self.verdict.decided_by if self.verdict else "",
            "verdict": self.verdict.to_json() if self.verdict else None,
            "counterexample": self.counterexample.to_json() if self.counterexample else None,
            "times_s": self.times_s,
            "peak_memory_mb": self.peak_memory_mb,
            "warnings": list(self.warnings),
            "invariants": self.invariants,
            "options": self.options,
            "harness": self.harness,
            "qverify_version": self.version,
            "origins": dict(self.origins),
            "cases": [outcome.to_json() for outcome in self.cases],
        }

    @classmethod
    def from_json(cls, data: dict) -> VerificationRecord:
        cex = data.get("counterexample")
        return cls(
            name=data["name"],
            network=data["network"],
            network_digest=data.get("network_digest", ""),
            property=data["property"],
            implementation=data["implementation"],
            number_format=data["format"],
            lut_eps=float(data.get("lut_eps", 0.0)),
            status=Status(data["status"]),
            reason=data.get("reason", ""),
            verdict=Verdict.from_json(data["verdict"]) if data.get("verdict") else None,
            counterexample=AdversarialExample.from_json(cex) if cex else None,
            times_s=named_times(data.get("times_s", {})),
            peak_memory_mb=float(data.get("peak_memory_mb", 0.0)),
            warnings=tuple(data.get("warnings", [])),
            invariants=data.get("invariants", ""),
            options=data.get("options", ""),
            harness=data.get("harness", ""),
            version=data.get("qverify_version", ""),
            origins=dict(data.get("origins", {})),
            format_resolved_from=data.get("format_resolved_from", ""),
            cases=tuple(CaseOutcome.from_json(item) for item in data.get("cases", [])),
        )
