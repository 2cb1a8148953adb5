"""Quantization assurance beside the verifier: comparing implementations of one network.

`implementations` holds the pair the commands compare (`qverify diff`, `impact`, `repair`); the
input transformations they share live in `qverify.data`.
"""

from qverify.assurance.implementations import (
    REAL,
    Implementation,
    ImplementationPair,
    ImplementationRun,
    make_implementation,
    normalised_inputs,
)

__all__ = [
    "REAL",
    "Implementation",
    "ImplementationPair",
    "ImplementationRun",
    "make_implementation",
    "normalised_inputs",
]
