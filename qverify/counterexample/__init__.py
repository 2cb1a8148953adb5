"""Counterexamples: replay (gcc + simulator), adversarial examples, and pictures of them."""

from qverify.counterexample.example import AdversarialExample, build_example
from qverify.counterexample.replay import (
    ReplayPrograms,
    ReplayResult,
    inputs_from_values,
    replay_candidate,
    simulator_outcome,
)

__all__ = [
    "AdversarialExample",
    "ReplayPrograms",
    "ReplayResult",
    "build_example",
    "inputs_from_values",
    "replay_candidate",
    "simulator_outcome",
]
