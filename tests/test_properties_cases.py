"""VNN-LIB's case form (issue 43): a disjunction of input boxes, each with its own output condition,
as VNN-COMP's nn4sys writes it, and the gzipped files the competition ships.

The reading is checked against an evaluator of the VNN-LIB formula itself (below, independent of
the reader: it evaluates the asserts' s-expressions at a point), on random files of the form and
random points; and on files in the competition's own shape (nn4sys' lindex: pairs of disjuncts
sharing a box, `Y_0 <= a` or `Y_0 >= b`)."""

from __future__ import annotations

import gzip
import re
from fractions import Fraction

import numpy as np
import pytest

from qverify.errors import InputError, UnsupportedError
from qverify.io import load_network, save_network
from qverify.properties import (
    Property,
    PropertyCases,
    format_vnnlib,
    parse_vnnlib,
    parse_vnnlib_cases,
    read_vnnlib_cases,
)
from tests.conftest import ROOT

DECLARE = (
    "(declare-const X_0 Real)\n(declare-const X_1 Real)\n(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n"
)


def lindex_like(boxes: list[tuple[float, float]], low: list[float], high: list[float]) -> str:
    """nn4sys' lindex files: per box two disjuncts, `Y_0 <= low` or `Y_0 >= high` (one input)."""
    lines = ["(declare-const X_0 Real)", "(declare-const Y_0 Real)", "(assert (or"]
    for (a, b), y_low, y_high in zip(boxes, low, high):
        lines.append(f"  (and (>= X_0 {a!r}) (<= X_0 {b!r}) (<= Y_0 {y_low!r}))")
        lines.append(f"  (and (>= X_0 {a!r}) (<= X_0 {b!r}) (>= Y_0 {y_high!r}))")
    return "\n".join([*lines, "))"]) + "\n"


def test_nn4sys_shape_gives_one_case_per_box_with_both_clauses():
    text = lindex_like([(0.25, 0.5), (0.5, 0.75), (0.0, 0.125)], [0.1, 0.2, 0.3], [0.6, 0.7, 0.8])
    prop = parse_vnnlib_cases(text, "lindex_3.vnnlib")
    assert isinstance(prop, PropertyCases) and len(prop.cases) == 3
    second = prop.cases[1]
    assert second.name == "lindex_3.case2" and second.boxes[0].lo == (Fraction(1, 2),)
    atoms = [clause.atoms[0] for clause in second.unsafe.clauses]
    assert [(atom.relation.value, -atom.constant) for atom in atoms] == [
        ("<=", Fraction("0.2")),
        (">=", Fraction("0.7")),
    ]
    assert prop.labels[1] == "lines 6, 7" and prop.describe(1) == "case 2 of 3 (lines 6, 7)"
    assert prop.declared_outputs == 1 and prop.n_inputs == 1


def test_one_box_or_one_unsafe_set_is_an_ordinary_property():
    """Disjuncts sharing one box unite their unsafe sets (nn4sys' lindex_1); disjuncts sharing one
    unsafe set unite their boxes: both are one input region with one unsafe set."""
    one_box = parse_vnnlib_cases(lindex_like([(0.25, 0.5)], [0.1], [0.6]), "lindex_1.vnnlib")
    assert isinstance(one_box, Property) and len(one_box.boxes) == 1 and len(one_box.unsafe.clauses) == 2
    assert one_box == parse_vnnlib(lindex_like([(0.25, 0.5)], [0.1], [0.6]), "lindex_1.vnnlib")
    text = DECLARE + (
        "(assert (or (and (>= X_0 0) (<= X_0 1) (>= X_1 0) (<= X_1 1) (>= Y_0 2))\n"
        "            (and (>= X_0 2) (<= X_0 3) (>= X_1 0) (<= X_1 1) (>= Y_0 2))))\n"
    )
    one_unsafe = parse_vnnlib_cases(text)
    assert isinstance(one_unsafe, Property) and len(one_unsafe.boxes) == 2


def test_the_strict_reader_refuses_the_case_form_naming_its_line_and_the_commands_that_take_it():
    text = DECLARE + (
        "(assert (>= X_1 0))\n(assert (<= X_1 1))\n"
        "(assert (or (and (>= X_0 0) (<= X_0 1) (>= Y_0 2)) (and (>= X_0 2) (<= X_0 3) (>= Y_1 2))))\n"
    )
    with pytest.raises(
        UnsupportedError, match=r"p.vnnlib:7: its disjuncts give 2 input boxes .*qverify verify"
    ):
        parse_vnnlib(text, "p.vnnlib")
    prop = parse_vnnlib_cases(text, "p.vnnlib")
    assert [case.boxes[0].lo for case in prop.cases] == [(0, 0), (2, 0)]  # X_1's bounds in every case
    assert [case.boxes[0].hi for case in prop.cases] == [(1, 1), (3, 1)]


def test_disjuncts_with_an_empty_box_are_dropped_or_refused():
    base = DECLARE + "(assert (>= X_1 0))\n(assert (<= X_1 1))\n"
    dropped = parse_vnnlib_cases(
        base + "(assert (or (and (>= X_0 2) (<= X_0 1) (>= Y_0 2)) (and (>= X_0 0) (<= X_0 1) (>= Y_1 2))"
        " (and (>= X_0 1) (<= X_0 2) (>= Y_0 5))))\n"
    )
    assert len(dropped.cases) == 2 and any(
        "disjunct 1 of 3" in note and "dropped" in note for note in dropped.notes
    )
    with pytest.raises(InputError, match="empty input box"):
        parse_vnnlib_cases(
            base
            + "(assert (or (and (>= X_0 2) (<= X_0 1) (>= Y_0 2)) (and (>= X_0 3) (<= X_0 1) (>= Y_1 2))))\n"
        )
    with pytest.raises(InputError, match=r"X_0 has no upper bound \(disjunct 2 of 2\)"):
        parse_vnnlib_cases(
            base + "(assert (or (and (>= X_0 0) (<= X_0 1) (>= Y_0 2)) (and (>= X_0 3) (>= Y_1 2))))\n"
        )


def test_declarations_beyond_the_network_are_refused_as_they_are_read():
    text = DECLARE + "(declare-const X_2 Real)\n(assert (>= Y_0 1))\n"
    with pytest.raises(InputError, match=r"p:5: declares X_2, but the network has 2 inputs \(X_0 .. X_1\)"):
        parse_vnnlib_cases(text, "p", n_inputs=2, n_outputs=2)
    with pytest.raises(InputError, match=r"declares Y_1, but the network has 1 outputs"):
        parse_vnnlib_cases(DECLARE, "p", n_inputs=2, n_outputs=1)


# ---------------------------------------------------------------- the meaning, against the formula


def _tokens(text: str) -> list:
    """The asserts of a VNN-LIB text as nested lists (comments dropped)."""
    stack: list[list] = [[]]
    for token in re.findall(r"\(|\)|[^\s()]+", re.sub(r";[^\n]*", "", text)):
        if token == "(":
            stack.append([])
        elif token == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(token)
    return [item[1] for item in stack[0] if item[0] == "assert"]


def _holds(formula, values: dict[str, float]) -> bool:
    """The formula at a point, as the competition's checker reads it (numbers as floats)."""
    head, *args = formula
    if head == "and":
        return all(_holds(arg, values) for arg in args)
    if head == "or":
        return any(_holds(arg, values) for arg in args)
    left, right = (values[a] if a in values else float(a) for a in args)
    return {"<=": left <= right, ">=": left >= right, "<": left < right, ">": left > right}[head]


def _random_case_form(rng: np.random.Generator) -> str:
    disjuncts = []
    for _ in range(rng.integers(2, 6)):
        atoms = []
        for i in range(2):
            lo = round(float(rng.uniform(-1, 1)), 2)
            atoms += [f"(>= X_{i} {lo})", f"(<= X_{i} {round(lo + float(rng.uniform(0, 1)), 2)})"]
        for _ in range(rng.integers(1, 3)):
            atoms.append(
                f"({rng.choice(['<=', '>='])} Y_{rng.integers(2)} {round(float(rng.uniform(-1, 1)), 2)})"
            )
        disjuncts.append(f"(and {' '.join(atoms)})")
    repeated = disjuncts[0].split("(>= Y")[0].split("(<= Y")[0]  # a disjunct sharing the first one's box
    disjuncts.append(repeated + f"(>= Y_1 {round(float(rng.uniform(-1, 1)), 2)}))")
    return DECLARE + f"(assert (or {' '.join(disjuncts)}))\n"


@pytest.mark.parametrize("seed", range(40))
def test_the_cases_mean_what_the_formula_says(seed):
    """At random points (x, y): the property's cases are violated exactly where the file's formula
    holds, and format_vnnlib's text reads back to the same cases."""
    rng = np.random.default_rng(seed)
    text = _random_case_form(rng)
    prop = parse_vnnlib_cases(text, "random.vnnlib")
    formula = ("and", *_tokens(text))
    x = rng.uniform(-1.2, 2.2, size=(400, 2)).round(2)  # on the bounds' grid too
    y = rng.uniform(-1.2, 1.2, size=(400, 2)).round(2)
    expected = [_holds(formula, {"X_0": a, "X_1": b, "Y_0": c, "Y_1": d}) for (a, b), (c, d) in zip(x, y)]
    assert list(prop.violated_by(x, y)) == expected, text
    again = parse_vnnlib_cases(format_vnnlib(prop), prop.source, prop.name)
    assert (again.cases if isinstance(again, PropertyCases) else (again,)) == (
        prop.cases if isinstance(prop, PropertyCases) else (prop,)
    )


# ---------------------------------------------------------------- gzipped files, as the competition ships them


def test_gzipped_networks_and_properties_read_as_the_plain_ones(tmp_path):
    acas = ROOT / "benchmarks" / "acasxu" / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx"
    (tmp_path / "net.onnx.gz").write_bytes(gzip.compress(acas.read_bytes()))
    nnet = ROOT / "benchmarks" / "tiny" / "relu2.nnet"
    (tmp_path / "relu2.nnet.gz").write_bytes(gzip.compress(nnet.read_bytes()))
    plain, packed = load_network(acas), load_network(tmp_path / "net.onnx.gz")
    assert packed.name == "net" and packed.digest() == plain.digest()
    assert load_network(tmp_path / "relu2.nnet.gz").digest() == load_network(nnet).digest()
    text = lindex_like([(0.25, 0.5), (0.5, 0.75)], [0.1, 0.2], [0.6, 0.7])
    (tmp_path / "lindex_2.vnnlib.gz").write_bytes(gzip.compress(text.encode()))
    path = tmp_path / "lindex_2.vnnlib.gz"
    assert read_vnnlib_cases(path) == parse_vnnlib_cases(text, str(path))
    with pytest.raises(InputError, match="unsupported network file suffix '.onnx.gz'"):
        save_network(plain, tmp_path / "out.onnx.gz")


def test_damaged_and_oversized_gzip_files_are_one_error(tmp_path, monkeypatch):
    (tmp_path / "bad.onnx.gz").write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="bad.onnx.gz: not a gzip file"):
        load_network(tmp_path / "bad.onnx.gz")
    cut = gzip.compress((ROOT / "benchmarks" / "tiny" / "relu2.nnet").read_bytes())[:-20]
    (tmp_path / "cut.nnet.gz").write_bytes(cut)
    with pytest.raises(InputError, match="cut.nnet.gz: not a gzip file, or a damaged one"):
        load_network(tmp_path / "cut.nnet.gz")
    monkeypatch.setenv("QVERIFY_MAX_FILE_MB", "1")
    (tmp_path / "bomb.onnx.gz").write_bytes(gzip.compress(bytes(3_000_000)))
    with pytest.raises(
        InputError, match=r"bomb.onnx.gz \(decompressed\): more than the input file size limit"
    ):
        load_network(tmp_path / "bomb.onnx.gz")
