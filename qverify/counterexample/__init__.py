"""Counterexamples: replay (gcc + simulator), adversarial examples, and pictures of them.

The names are imported when first used (as `qverify.backends` does): reading a record's
`AdversarialExample` (`qverify show`) needs neither the simulator nor gcc's replay.
"""

import importlib

_LAZY = {
    "AdversarialExample": "qverify.counterexample.example",
    "build_example": "qverify.counterexample.example",
    "ReplayPrograms": "qverify.counterexample.replay",
    "ReplayResult": "qverify.counterexample.replay",
    "inputs_from_values": "qverify.counterexample.replay",
    "replay_candidate": "qverify.counterexample.replay",
    "simulator_outcome": "qverify.counterexample.replay",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AdversarialExample",
    "ReplayPrograms",
    "ReplayResult",
    "build_example",
    "inputs_from_values",
    "replay_candidate",
    "simulator_outcome",
]
