"""Back ends: one interface (`Backend.check(job, limits) -> Verdict`), the internal engine and ESBMC.

The interface's types are imported with the package; the back ends and the process control (psutil)
when first named: the warm engine's host (`python -m qverify.backends.engine_process`) lives in
this package and needs none of them (it would pay ~0.05 s of CPU for them at every start).
"""

import importlib

from qverify.backends.base import Backend, HarnessJob, Limits, Status, Value, Verdict

BACKEND_NAMES = ("internal", "esbmc")

_LAZY = {
    "InternalBackend": "qverify.backends.internal",
    "InternalOptions": "qverify.backends.internal",
    "ProcessOutcome": "qverify.backends.process",
    "run_limited": "qverify.backends.process",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
