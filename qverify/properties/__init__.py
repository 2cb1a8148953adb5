"""Properties and their readers: VNN-LIB 1.0 and robustness builders (spec files: qverify.tasks).

`Property` (model.py) is what every later stage consumes: a union of input boxes and an unsafe
output set, with exact rational constants, normally in the network's normalised units.
"""

from qverify.properties.builders import (
    default_domain,
    hyper_rectangle,
    hypercube,
    read_center,
    robustness,
    to_normalised,
)
from qverify.properties.model import (
    Atom,
    Box,
    Clause,
    OutputCondition,
    Property,
    Relation,
    RobustnessInfo,
    Units,
)
from qverify.properties.vnnlib import format_vnnlib, parse_vnnlib, read_vnnlib

__all__ = [
    "Atom",
    "Box",
    "Clause",
    "OutputCondition",
    "Property",
    "Relation",
    "RobustnessInfo",
    "Units",
    "default_domain",
    "format_vnnlib",
    "hyper_rectangle",
    "hypercube",
    "parse_vnnlib",
    "read_center",
    "read_vnnlib",
    "robustness",
    "to_normalised",
]
