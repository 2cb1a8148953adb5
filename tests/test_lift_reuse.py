"""A harness the lifter declines after parsing it goes to the scalar front end with that parse
(`LiftResult.parsed`, issue 33): the tree is pycparser's tree of the whole file, node for node,
and the engine's answers are those of a second, full parse."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from lift_cases import small_network, split_property
from pycparser import c_ast
from test_lift_fallback import EDITS, MODELS_C, _edit, _harness

from qverify.codegen import render_harness
from qverify.engine.api import check_file
from qverify.engine.cfront import float_literal, int_literal, parse_text, preprocess
from qverify.engine.netlevel.lift import lift_file
from qverify.engine.result import EngineOptions
from qverify.invariants import compute_bounds
from qverify.network import Activation, Dense, Network
from qverify.quant import FixedFormat, FloatFormat, FloatKind, ImplementationOptions, quantize_network

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

FORMATS = {
    "fixed-8.8": ImplementationOptions(FixedFormat(8, 8)),
    "fixed-4.12": ImplementationOptions(FixedFormat(4, 12)),
    "float": ImplementationOptions(FloatFormat()),
    "double": ImplementationOptions(FloatFormat(FloatKind.DOUBLE)),
    "half": ImplementationOptions(FloatFormat(FloatKind.HALF)),
}


def _table_network(activation: Activation) -> Network:
    rng = np.random.default_rng(7)
    return Network(
        (
            Dense(rng.uniform(-2, 2, (4, 3)), rng.uniform(-1, 1, 4), activation),
            Dense(rng.uniform(-2, 2, (3, 4)), rng.uniform(-1, 1, 3), Activation.IDENTITY),
        ),
        name="table",
    )


def _table_harness(folder: Path, options: ImplementationOptions, activation: Activation) -> Path:
    """A lookup-table network's harness with its invariants (what the thesis suites generate)."""
    qnet = quantize_network(_table_network(activation), options)
    prop = split_property(qnet.source, -0.5, 0.25, two_boxes=False)
    return render_harness(qnet, prop, compute_bounds(qnet, prop).bounds).write(folder)


def _edited_table_harness(folder: Path, options: ImplementationOptions, activation: Activation) -> Path:
    """The same with its table's lower saturation test edited (`x <= -a`): another program, which
    the lifter declines after parsing it (lift.lut)."""
    harness = _table_harness(folder, options, activation)
    _edit(harness, "if (x < -", "if (x <= -")
    return harness


def _literal_value(node: c_ast.Constant) -> tuple:
    if node.type in ("float", "double", "long double"):
        value, kind = float_literal(node.value, node)
        return Fraction(value), kind, bool(np.signbit(value))
    if node.type == "string":
        return (node.value,)
    return int_literal(node.value, node)


def assert_same_tree(mine: c_ast.Node, theirs: c_ast.Node, in_initialiser: bool = False) -> None:
    """Node for node: the same kinds, attributes and children; literals by their value and type;
    lines outside initialisers (an initialiser's nodes carry its declaration's line)."""
    assert type(mine) is type(theirs), (mine, theirs)
    if isinstance(mine, c_ast.Constant):
        assert mine.type == theirs.type and _literal_value(mine) == _literal_value(theirs), (mine, theirs)
    else:
        for name in mine.attr_names:
            assert getattr(mine, name) == getattr(theirs, name), (name, mine, theirs)
    if not in_initialiser and mine.coord is not None and theirs.coord is not None:
        assert Path(mine.coord.file).name == Path(theirs.coord.file).name
        assert mine.coord.line == theirs.coord.line, (mine, mine.coord, theirs.coord)
    children, expected = mine.children(), theirs.children()
    assert [name for name, _ in children] == [name for name, _ in expected], (mine, theirs)
    for (_, child), (_, other) in zip(children, expected):
        assert_same_tree(child, other, in_initialiser or isinstance(child, c_ast.InitList))


def _full_parse(harness: Path) -> c_ast.FileAST:
    return parse_text(preprocess(harness, [MODELS_C]), str(harness))


@pytest.mark.parametrize("label", list(FORMATS))
@pytest.mark.parametrize("activation", [Activation.SIGMOID, Activation.TANH])
def test_a_table_harness_is_parsed_once_and_decided_as_with_a_second_parse(tmp_path, label, activation):
    harness = _edited_table_harness(tmp_path, FORMATS[label], activation)
    declined = lift_file(harness, [MODELS_C])
    assert not declined.lifted and declined.parsed is not None, declined.reason
    assert_same_tree(declined.parsed.tree(), _full_parse(harness))
    reused = check_file(harness, [MODELS_C], EngineOptions(timeout_s=120))
    parsed_twice = check_file(harness, [MODELS_C], EngineOptions(timeout_s=120, disable=("lift",)))
    assert reused.status is parsed_twice.status, (reused.reason, parsed_twice.reason)
    assert reused.counterexample == parsed_twice.counterexample
    for count in ("nodes_symex", "nodes", "steps"):
        assert reused.counts.get(count) == parsed_twice.counts.get(count), count


@pytest.mark.parametrize("label", list(FORMATS))
def test_a_lifted_harness_carries_its_parse(tmp_path, label):
    """A lifted table harness keeps the lifter's parse too: the scalar front end takes it when the
    network level does not cover the lifted query."""
    harness = _table_harness(tmp_path, FORMATS[label], Activation.SIGMOID)
    lifted = lift_file(harness, [MODELS_C])
    assert lifted.lifted and lifted.parsed is not None, lifted.reason
    assert_same_tree(lifted.parsed.tree(), _full_parse(harness))


@pytest.mark.parametrize(("name", "options", "old", "new", "reason"), EDITS, ids=[e[0] for e in EDITS])
def test_an_edited_harness_declined_after_its_parse_keeps_the_files_tree(
    tmp_path, name, options, old, new, reason
):
    harness = _harness(tmp_path, options)
    _edit(harness, old, new)
    declined = lift_file(harness, [MODELS_C])
    assert not declined.lifted
    if name == "extra-macro":  # a macro of the harness's own could rename what was read as text
        assert declined.parsed is None
    if declined.parsed is not None:
        assert_same_tree(declined.parsed.tree(), _full_parse(harness))


def test_input_lines_in_an_excluded_branch_stay_out_of_the_tree(tmp_path):
    harness = _harness(tmp_path, FORMATS["fixed-8.8"], small_network(3))
    text = harness.read_text()
    start, end = text.index("    x[0] = nondet_int();"), text.index("    qv_network(x, y);")
    harness.write_text(text[:start] + "#if 0\n" + text[start:end] + "#endif\n" + text[end:])
    declined = lift_file(harness, [MODELS_C])
    assert declined.parsed is not None
    assert_same_tree(declined.parsed.tree(), _full_parse(harness))
