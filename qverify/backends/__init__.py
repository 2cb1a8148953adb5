"""Back ends: one interface (`Backend.check(job, limits) -> Verdict`), the internal engine and ESBMC."""

from qverify.backends.base import Backend, HarnessJob, Limits, Status, Value, Verdict
from qverify.backends.internal import InternalBackend, InternalOptions
from qverify.backends.process import ProcessOutcome, run_limited

BACKEND_NAMES = ("internal", "esbmc")

__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "HarnessJob",
    "InternalBackend",
    "InternalOptions",
    "Limits",
    "ProcessOutcome",
    "Status",
    "Value",
    "Verdict",
    "run_limited",
]
