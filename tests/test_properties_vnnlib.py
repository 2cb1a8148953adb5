"""Tests for `qverify.properties.vnnlib`: the ACAS Xu files, semantics, round trips, bad files."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qverify.errors import InputError, UnsupportedError
from qverify.properties import (
    Atom,
    Box,
    Clause,
    OutputCondition,
    Property,
    Relation,
    Units,
    format_vnnlib,
    parse_vnnlib,
    read_vnnlib,
)
from qverify.properties.vnnlib import format_number

ROOT = Path(__file__).resolve().parents[1]
VNNLIB = ROOT / "benchmarks" / "acasxu" / "vnnlib"
PROPS = [VNNLIB / f"prop_{i}.vnnlib" for i in range(1, 11)]
F = Fraction

HEADER = (
    "".join(f"(declare-const X_{i} Real)\n" for i in range(2))
    + "(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n"
)
BOUNDS = "(assert (>= X_0 0))\n(assert (<= X_0 1))\n(assert (>= X_1 -1))\n(assert (<= X_1 1))\n"
# HEADER is lines 1-4 and BOUNDS lines 5-8, so a defect appended after them is on line 9.


def parse(body: str, header: str = HEADER) -> Property:
    return parse_vnnlib(header + body, source="t.vnnlib")


def outputs(*rows: list[float]) -> np.ndarray:
    return np.array(rows, dtype=np.float64)


# ---------------------------------------------------------------- the ACAS Xu files


@pytest.mark.parametrize("path", PROPS, ids=lambda p: p.stem)
def test_every_acas_property_parses_and_round_trips(path: Path) -> None:
    prop = read_vnnlib(path)
    assert prop.name == path.stem and prop.source == str(path)
    assert prop.units is Units.NORMALISED and prop.n_inputs == 5 and prop.notes == ()
    text = format_vnnlib(prop)
    assert parse_vnnlib(text, source=prop.source, name=prop.name) == prop
    assert format_vnnlib(parse_vnnlib(text, source=prop.source)) == text  # stable


def test_prop_1_bounds_are_the_exact_decimals_of_the_file() -> None:
    prop = read_vnnlib(VNNLIB / "prop_1.vnnlib")
    (box,) = prop.boxes
    assert box.lo == (F("0.6"), F("-0.5"), F("-0.5"), F("0.45"), F("-0.5"))
    assert box.hi == (F("0.679857769"), F("0.5"), F("0.5"), F("0.5"), F("-0.45"))
    (clause,) = prop.unsafe.clauses
    assert clause.atoms == (Atom(((0, F(1)),), -F("3.991125645861615"), Relation.GE),)


def test_prop_2_is_one_clause_coc_maximal() -> None:
    """The file asserts (<= Y_j Y_0) for j = 1..4, all conjoined: one clause of four atoms."""
    (clause,) = read_vnnlib(VNNLIB / "prop_2.vnnlib").unsafe.clauses
    assert clause.atoms == tuple(Atom(((0, F(-1)), (j, F(1))), 0, Relation.LE) for j in range(1, 5))


def test_prop_5_and_prop_10_are_disjunctions_of_single_atoms() -> None:
    prop_5 = read_vnnlib(VNNLIB / "prop_5.vnnlib").unsafe
    assert [c.atoms for c in prop_5.clauses] == [
        (Atom(((j, F(1)), (4, F(-1))), 0, Relation.LE),) for j in range(4)
    ]
    prop_10 = read_vnnlib(VNNLIB / "prop_10.vnnlib").unsafe
    assert [c.atoms for c in prop_10.clauses] == [
        (Atom(((0, F(-1)), (j, F(1))), 0, Relation.LE),) for j in range(1, 5)
    ]


def test_prop_6_has_two_boxes_differing_in_x1() -> None:
    first, second = read_vnnlib(VNNLIB / "prop_6.vnnlib").boxes
    assert (first.lo[1], first.hi[1]) == (F("0.11140846"), F("0.499999896"))
    assert (second.lo[1], second.hi[1]) == (F("-0.499999896"), F("-0.11140846"))
    assert first.lo[0] == second.lo[0] == F("-0.129289109")


def test_semantics_on_hand_made_outputs() -> None:
    prop_1 = read_vnnlib(VNNLIB / "prop_1.vnnlib")
    inside = np.array([[0.65, 0.0, 0.0, 0.47, -0.47]] * 3)
    coc = outputs([3.99, 0, 0, 0, 0], [3.991125645861615, 0, 0, 0, 0], [4.5, 9, 9, 9, 9])
    assert prop_1.violated_by(inside, coc).tolist() == [False, True, True]
    outside = inside + np.array([1.0, 0, 0, 0, 0])
    assert not prop_1.violated_by(outside, coc).any()
    prop_7 = read_vnnlib(VNNLIB / "prop_7.vnnlib").unsafe  # strong left or strong right minimal
    scores = outputs([0, 1, 2, 3, 4], [5, 5, 5, -1, 0], [5, 5, 5, 6, -1], [5, 5, 5, -1, -1])
    assert prop_7.violated_clause(scores).tolist() == [-1, 0, 1, 0]
    assert prop_7.violated_clause_exact([F(5), F(5), F(5), F(6), F(5)]) == 1


# ---------------------------------------------------------------- the accepted fragment


def test_numbers_are_exact_in_every_spelling() -> None:
    prop = parse(
        "(assert (>= X_0 1e-3))\n(assert (<= X_0 (- 0.5 -0.5)))\n(assert (>= X_1 (- 0.25)))\n"
        "(assert (<= X_1 (/ 1 3)))\n(assert (>= Y_0 (+ 1.5E+1 .5 3.)))\n"
    )
    assert prop.boxes[0].lo == (F(1, 1000), F(-1, 4))
    assert prop.boxes[0].hi == (F(1), F(1, 3))
    assert prop.unsafe.clauses[0].atoms[0].constant == F(-37, 2)


def test_linear_terms_and_scaled_bounds() -> None:
    prop = parse(
        "(assert (>= (* 2 X_0) -1))\n(assert (<= (* -4 X_0) 2))\n(assert (<= X_1 0.5))\n(assert (>= X_1 0))\n"
        "(assert (<= (+ Y_0 (* 2 Y_1) 1) (- Y_1 3)))\n",
        HEADER + "(assert (<= X_0 1))\n",
    )
    assert prop.boxes[0].lo == (F(-1, 2), F(0)) and prop.boxes[0].hi == (F(1), F(1, 2))
    # Y_0 + 2 Y_1 + 1 - (Y_1 - 3) = Y_0 + Y_1 + 4 <= 0
    assert prop.unsafe.clauses[0].atoms == (Atom(((0, F(1)), (1, F(1))), F(4), Relation.LE),)


def test_multiple_bounds_intersect() -> None:
    prop = parse(
        "(assert (and (>= X_0 0.25) (<= X_0 0.75) (>= X_0 0.5)))\n(assert (>= Y_0 0))\n", HEADER + BOUNDS
    )
    assert prop.boxes[0].lo[0] == F(1, 2) and prop.boxes[0].hi[0] == F(3, 4)


def test_top_level_bounds_distribute_into_each_box() -> None:
    body = (
        "(assert (>= X_0 0))\n(assert (<= X_0 1))\n"
        "(assert (or (and (>= X_1 -1) (<= X_1 0)) (and (>= X_1 0.5) (<= X_1 1))))\n(assert (>= Y_0 0))\n"
    )
    boxes = parse(body).boxes
    assert [(b.lo, b.hi) for b in boxes] == [((0, -1), (1, 0)), ((0, F(1, 2)), (1, 1))]


def test_output_conjunct_distributes_over_output_disjunction() -> None:
    body = BOUNDS + "(assert (>= Y_0 1))\n(assert (or (>= Y_1 2) (and (<= Y_1 -2) (> Y_0 5))))\n"
    clauses = parse(body).unsafe.clauses
    assert [len(c.atoms) for c in clauses] == [2, 3]
    assert clauses[1].atoms[2] == Atom(((0, F(1)),), F(-5), Relation.GT)  # strict kept exactly


def test_strict_input_bound_is_relaxed_with_a_note() -> None:
    prop = parse(
        "(assert (> X_0 0))\n(assert (< X_0 1))\n(assert (>= X_1 0))\n(assert (<= X_1 1))\n(assert (< Y_0 Y_1))\n"
    )
    assert prop.boxes[0].lo[0] == 0 and prop.boxes[0].hi[0] == 1
    assert len(prop.notes) == 2 and "relaxed to >=" in prop.notes[0]
    assert prop.unsafe.clauses[0].atoms[0].relation is Relation.LT


def test_equality_and_chained_comparisons() -> None:
    prop = parse("(assert (= X_0 0.5))\n(assert (<= -1 X_1 1))\n(assert (= Y_0 Y_1))\n")
    assert prop.boxes[0] == Box((F(1, 2), -1), (F(1, 2), 1))
    assert [a.relation for a in prop.unsafe.clauses[0].atoms] == [Relation.LE, Relation.GE]


def test_no_output_assert_means_every_output_is_unsafe() -> None:
    prop = parse(BOUNDS)
    assert prop.unsafe.clauses == (Clause(()),)
    assert prop.unsafe.violated_clause(outputs([1.0, 2.0])).tolist() == [0]


def test_a_disjunct_with_an_empty_box_is_dropped_with_a_note() -> None:
    body = (
        "(assert (>= X_0 0.5))\n(assert (<= X_0 1))\n(assert (<= X_1 1))\n(assert (>= X_1 0))\n"
        "(assert (or (<= X_0 0.25) (>= X_0 0.75)))\n"
    )
    prop = parse(body)
    assert len(prop.boxes) == 1 and prop.boxes[0].lo[0] == F(3, 4)
    assert "dropped" in prop.notes[0]


def test_disjunctive_normal_form_size_is_bounded() -> None:
    disjunction = "(assert (or " + " ".join(f"(>= Y_0 {k})" for k in range(10)) + "))\n"
    assert len(parse(BOUNDS + disjunction * 2).unsafe.clauses) == 100
    with pytest.raises(UnsupportedError, match="more than 500000 clauses"):
        parse(BOUNDS + disjunction * 6)


def test_comments_and_ignored_commands() -> None:
    text = "; c\n(set-logic QF_LRA) ; more\n" + HEADER + BOUNDS + "(assert (>= Y_0 0)) ; tail\n(check-sat)\n"
    assert parse_vnnlib(text).name == "property"


def test_read_gzip_file(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "p.vnnlib.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(HEADER + BOUNDS)
    assert read_vnnlib(path).name == "p"


def test_a_decompression_bomb_is_refused_in_plain_words(tmp_path: Path, monkeypatch) -> None:
    """Reading stops at the limit: the message says "more than" the limit (it used to print a size
    equal to the limit as exceeding it: "1 MB exceeds ... limit of 1 MB")."""
    import gzip

    monkeypatch.setenv("QVERIFY_MAX_FILE_MB", "1")
    path = tmp_path / "bomb.vnnlib.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b";" * 3_000_000)
    with pytest.raises(InputError) as error:
        read_vnnlib(path)
    assert str(error.value) == (
        f"{path} (decompressed): more than the input file size limit of 1 MB (set QVERIFY_MAX_FILE_MB to raise it)"
    )


# ---------------------------------------------------------------- writer


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (F(1, 2), "0.5"),
        (F(-3), "-3.0"),
        (F(0), "0.0"),
        (F("-0.000125"), "-0.000125"),
        (F("3.991125645861615"), "3.991125645861615"),
        (F(1, 3), "(/ 1 3)"),
        (F(-2, 3), "(/ -2 3)"),
        (F(0.1), "0.1000000000000000055511151231257827021181583404541015625"),
    ],
)
def test_format_number_is_exact(value: Fraction, text: str) -> None:
    assert format_number(value) == text


def test_round_trip_of_unusual_properties() -> None:
    atoms = (
        Atom(((0, F(-2, 3)), (1, F(5))), F(7, 9), Relation.LT),
        Atom(((1, F(-1)),), F(0), Relation.GT),
        Atom(((0, F(1)),), F(1, 3), Relation.GE),
    )
    boxes = (Box((F(-1, 3), 0), (F(1, 7), F(1, 2))), Box((0, 0), (1, 1)))
    for unsafe in (
        OutputCondition((Clause(atoms),)),
        OutputCondition((Clause(atoms[:1]), Clause(atoms[1:]))),
        OutputCondition(()),
    ):
        for box_set in (boxes, boxes[:1]):
            prop = Property("odd", box_set, unsafe, units=Units.RAW, source="odd.vnnlib")
            back = parse_vnnlib(format_vnnlib(prop), source="odd.vnnlib", units=Units.RAW)
            assert back == prop


# ---------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    ("body", "error", "fragments"),
    [
        (
            "(assert (>= Y_0 0)\n(assert (>= Y_1 0))\n",
            InputError,
            ["t.vnnlib:9:", "opened on line 9", "never closed"],
        ),
        ("(assert (>= Y_0 0)))\n", InputError, ["t.vnnlib:9:", "')' without"]),
        ("(assert (>= Y_7 0))\n", InputError, ["t.vnnlib:9:", "unknown variable 'Y_7'"]),
        ("(assert (<= X_0 abc))\n", InputError, ["t.vnnlib:9:", "expected a number", "'abc'"]),
        ("(assert (<= X_0 0.5.1))\n", InputError, ["t.vnnlib:9:", "'0.5.1'"]),
        ("(assert (>= X_1 2))\n", InputError, ["t.vnnlib:9:", "empty input box", "X_1"]),
        ("(assert (foo Y_0 0))\n", InputError, ["t.vnnlib:9:", "unknown operator 'foo'"]),
        ("(assert (>= (sqrt Y_0) 0))\n", InputError, ["t.vnnlib:9:", "unknown operator 'sqrt'"]),
        ("(assert (>= Y_0))\n", InputError, ["t.vnnlib:9:", "takes at least 2"]),
        ("(assert (>= Y_0 0) (>= Y_1 0))\n", InputError, ["t.vnnlib:9:", "'assert' takes 1"]),
        ("(assert (>= Y_0 (/ 1 0)))\n", InputError, ["t.vnnlib:9:", "division by zero"]),
        ("(assert (>= Y_0 1e99999))\n", InputError, ["t.vnnlib:9:", "1e99999"]),
        ("(push 1)\n", InputError, ["t.vnnlib:9:", "unknown command 'push'"]),
        ("(declare-const Z Real)\n", InputError, ["t.vnnlib:9:", "X_<i> or Y_<j>"]),
        ("(declare-const X_0 Real)\n", InputError, ["t.vnnlib:9:", "declared twice", "line 1"]),
        ("(assert (>= X_0 Y_0))\n", UnsupportedError, ["t.vnnlib:9:", "mixes input (X) and output (Y)"]),
        ("(assert (or (>= X_0 0.5) (>= Y_0 0)))\n", UnsupportedError, ["t.vnnlib:9:", "case form"]),
        ("(assert (<= X_0 X_1))\n", UnsupportedError, ["t.vnnlib:9:", "X_0 and X_1", "not a simple bound"]),
        ("(assert (>= (* Y_0 Y_1) 0))\n", UnsupportedError, ["t.vnnlib:9:", "not linear"]),
        ("(assert (not (>= Y_0 0)))\n", UnsupportedError, ["t.vnnlib:9:", "'not'"]),
        ("(assert (<= 0 1))\n", UnsupportedError, ["t.vnnlib:9:", "between constants"]),
        ("(assert Y_0)\n", InputError, ["t.vnnlib:9:", "expected a comparison"]),
    ],
)
def test_malformed_files_name_the_line(body: str, error: type, fragments: list[str]) -> None:
    with pytest.raises(error) as caught:
        parse(BOUNDS + body)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_missing_bound_points_at_the_declaration() -> None:
    with pytest.raises(InputError, match=r"t\.vnnlib:2: X_1 has no upper bound"):
        parse("(assert (>= X_0 0))\n(assert (<= X_0 1))\n(assert (>= X_1 0))\n")


def test_missing_bound_in_one_of_several_boxes() -> None:
    with pytest.raises(InputError, match=r"X_1 has no lower bound \(input box 2 of 2\)"):
        parse("(assert (and (<= X_0 1) (>= X_0 0) (<= X_1 1)))\n(assert (or (>= X_1 0) (<= X_0 0.5)))\n")


def test_empty_box_message_names_both_lines() -> None:
    with pytest.raises(
        InputError, match=r"t\.vnnlib:10: empty input box: X_0 >= 2 \(line 10\) and X_0 <= 1 \(line 6\)"
    ):
        parse(BOUNDS + "(assert (>= X_0 1.5))\n(assert (>= X_0 2))\n")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "<string>:1: empty file"),
        ("; only a comment\n\n", "<string>:1: empty file"),
        ("(declare-const X_0 Real)\n", "<string>:1: no (assert ...)"),
        ("(declare-const Y_0 Real)\n(assert (>= Y_0 0))\n", "no input variable declared"),
        ("(declare-const X_1 Real)\n(assert (>= X_1 0))\n", "X_1 is declared but X_0 is not"),
        ("(declare-const X_0 Int)\n", "only sort Real"),
        ("(declare-const X_0 Real))", "')' without a matching '('"),
        ("(" * 100, "nested deeper"),
        ("assert", "expected a command"),
    ],
)
def test_degenerate_texts(text: str, fragment: str) -> None:
    with pytest.raises((InputError, UnsupportedError)) as caught:
        parse_vnnlib(text)
    assert fragment in str(caught.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_vnnlib(tmp_path / "missing.vnnlib")
    binary = tmp_path / "bin.vnnlib"
    binary.write_bytes(b"\xff\xfe\x00(")
    with pytest.raises(InputError, match="cannot read"):
        read_vnnlib(binary)


# ---------------------------------------------------------------- robustness of the reader itself

_FUZZ_BASE = (VNNLIB / "prop_6.vnnlib").read_text()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(_FUZZ_BASE)), st.sampled_from(list("()X_1.-; \n<=a")), st.booleans()),
        min_size=1,
        max_size=4,
    )
)
def test_mangled_files_raise_only_qverify_errors(edits: list[tuple[int, str, bool]]) -> None:
    """Deleting or inserting a few characters never lets a bare Python exception escape."""
    text = _FUZZ_BASE
    for position, char, insert in edits:
        text = text[:position] + char + text[position:] if insert else text[:position] + text[position + 1 :]
    try:
        parse_vnnlib(text)
    except (InputError, UnsupportedError):
        pass
