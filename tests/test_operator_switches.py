"""One place per operator (issue 41): no stage switches on the kind of a node.

What a kind of node means at every stage lives in its operator class (`qverify.operators`); the
readers (`qverify.io`) build nodes of each kind. Anywhere else, an `isinstance` test, a `type(x)`
comparison or a class-keyed table on a node's kind -- the IR's (`Dense`, `Conv2D`, ...), or the
network level's statements (`MaxPool`, `DenseOperation`, ...) -- is a switch that adding a kind
would have to find: the stage asks the operator (`qverify.network.operators.operator_of`), or a
trait the kind's class declares. Read from the source with `ast`: nothing is imported.
"""

from __future__ import annotations

import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "qverify"
# where kinds are defined or built: the operator classes, their registry, the readers
ALLOWED = ("qverify/operators/", "qverify/io/", "qverify/network/operators.py")
KINDS = {
    # the IR's nodes (`qverify.network`) and their unions
    "Dense",
    "Conv2D",
    "MaxPool2D",
    "AveragePool2D",
    "_Pool2D",
    "Pool2D",
    "SpatialLayer",
    "Add",
    "Concat",
    "Permute",
    "Join",
    "Layer",
    # the network level's statements (`engine.netlevel.operations`, `.activations`)
    "MaxPool",
    "Relu",
    "Identity",
    "Stairs",
    "Clamp",
    "Elementwise",
    "DenseOperation",
    "SparseOperation",
    "AveragePoolOperation",
    "IdentityOperation",
    "SumOperation",
    "PermuteOperation",
}


def _names(node: ast.expr) -> set[str]:
    """The class names an isinstance's second argument (a name, `module.Name`, a tuple) lists."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(item) for item in node.elts))
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.BinOp):  # X | Y
        return _names(node.left) | _names(node.right)
    return set()


def switches(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every switch on a node's kind in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2:
            if node.func.id in ("isinstance", "issubclass") and _names(node.args[1]) & KINDS:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            typed = any(
                isinstance(side, ast.Call) and isinstance(side.func, ast.Name) and side.func.id == "type"
                for side in sides
            )
            if typed and set().union(*(_names(side) for side in sides)) & KINDS:
                found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Dict)
            and {n for key in node.keys if key is not None for n in _names(key)} & KINDS
        ):
            found.append((node.lineno, "a table keyed by node kinds"))
    return found


def all_switches() -> list[str]:
    lines = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(ALLOWED):
            continue
        tree = ast.parse(path.read_text(), relative)
        lines.extend(f"{relative}:{line}: {what}" for line, what in switches(tree))
    return lines


def test_no_stage_switches_on_a_node_kind():
    found = all_switches()
    assert found == [], "switch on a node's kind outside qverify/operators and qverify/io:\n" + "\n".join(
        found
    )


def test_the_scan_finds_each_form_of_switch():
    source = (
        "if isinstance(layer, Dense): pass\n"
        "if isinstance(node.source, (network.Conv2D, Add)): pass\n"
        "if type(layer) is MaxPool2D: pass\n"
        "if isinstance(act, MaxPool): pass\n"
        "TABLE = {Concat: 1, Permute: 2}\n"
        "if isinstance(number, FixedFormat): pass\n"  # (a number format: no node kind)
    )
    assert [line for line, _ in switches(ast.parse(source))] == [1, 2, 3, 4, 5]


def test_the_operator_classes_cover_every_node_kind():
    """Every IR node class has its operator, and every operator answers the stages' questions."""
    from qverify.network import Add, AveragePool2D, Concat, Conv2D, Dense, MaxPool2D, Permute
    from qverify.network.operators import operator_of
    from qverify.operators.base import Operator

    kinds = {operator_of_kind.kind for operator_of_kind in map(operator_of, _examples())}
    assert kinds == {"dense", "conv", "maxpool", "avgpool", "add", "concat", "permute"}
    assert all(isinstance(operator_of(node), Operator) for node in _examples())
    assert {type(node) for node in _examples()} == {
        Dense,
        Conv2D,
        MaxPool2D,
        AveragePool2D,
        Add,
        Concat,
        Permute,
    }


def _examples() -> list:
    import numpy as np

    from qverify.network import Activation, Add, AveragePool2D, Concat, Conv2D, Dense, MaxPool2D, Permute

    return [
        Dense(np.ones((2, 3)), np.zeros(2), Activation.RELU),
        Conv2D(np.ones((1, 1, 2, 2)), np.zeros(1), Activation.RELU, (1, 3, 3)),
        MaxPool2D((1, 4, 4), (2, 2), (2, 2)),
        AveragePool2D((1, 4, 4), (2, 2), (2, 2)),
        Add((4,)),
        Concat(((2,), (3,))),
        Permute(np.array([1, 0]), (2,), (2,)),
    ]
