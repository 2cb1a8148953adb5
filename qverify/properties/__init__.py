"""Properties and their readers: VNN-LIB 1.0 and robustness builders (spec files: qverify.tasks).

`Property` (model.py) is what every later stage consumes: a union of input boxes and an unsafe
output set, with exact rational constants, normally in the network's normalised units. A VNN-LIB
file in the case form (input boxes with output conditions of their own) is a `PropertyCases` of
such properties (`read_vnnlib_cases`; `qverify.cases` verifies it).
"""

from qverify.properties.builders import (
    default_domain,
    hyper_rectangle,
    hypercube,
    read_center,
    robustness,
    to_normalised,
    to_raw,
)
from qverify.properties.model import (
    AnyProperty,
    Atom,
    Box,
    Clause,
    OutputCondition,
    Property,
    PropertyCases,
    Relation,
    RobustnessInfo,
    Units,
)
from qverify.properties.vnnlib import (
    format_vnnlib,
    parse_vnnlib,
    parse_vnnlib_cases,
    read_vnnlib,
    read_vnnlib_cases,
)

__all__ = [
    "AnyProperty",
    "Atom",
    "Box",
    "Clause",
    "OutputCondition",
    "Property",
    "PropertyCases",
    "Relation",
    "RobustnessInfo",
    "Units",
    "default_domain",
    "format_vnnlib",
    "hyper_rectangle",
    "hypercube",
    "parse_vnnlib",
    "parse_vnnlib_cases",
    "read_center",
    "read_vnnlib",
    "read_vnnlib_cases",
    "robustness",
    "to_normalised",
    "to_raw",
]
