"""Where a stage finds what an IR node means: `operator_of(node)`, the node's operator class
(`qverify.operators`: one class per kind of node, holding what the kind means at every stage).

The stages sit below the operator classes in the import order (an operator class uses the
stages' types and helpers: quantized layers, the simulator's loops, the network level's
statements), so they reach them through this registry, which is the one table from a node's
class to its operator. The classes register themselves when `qverify.operators` is imported, and
`operator_of` imports that package by name on its first call: a plugin load, the dependency
inverted, so no stage module imports an operator module and the import graph stays acyclic
(tests/test_import_graph.py)."""

from __future__ import annotations

import importlib
from typing import Any

from qverify.errors import UnsupportedError

OPERATORS_PACKAGE = "qverify.operators"
_OPERATORS: dict[type, Any] = {}


def register_operator(node_class: type, operator: Any) -> None:
    """Make `operator` (an instance of a `qverify.operators.base.Operator` class) the meaning of
    every node of `node_class`."""
    _OPERATORS[node_class] = operator


def operator_of(node: object) -> Any:
    """The operator (`qverify.operators.base.Operator`) of an IR node: a layer or a join.

    :raises UnsupportedError: a node of a kind no operator class describes."""
    found = _OPERATORS.get(type(node))
    if found is None and not _OPERATORS:
        importlib.import_module(OPERATORS_PACKAGE)  # (the classes register themselves)
        found = _OPERATORS.get(type(node))
    if found is None:
        raise UnsupportedError(f"no operator describes a node of kind {type(node).__name__}")
    return found
