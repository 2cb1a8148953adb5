"""Hand-edited or unsupported harnesses are declined with a reason (the caller then uses the scalar
front end): the lifter never guesses what a changed program means."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from lift_cases import small_network, split_property

from qverify.codegen import render_harness
from qverify.engine.netlevel.lift import lift_file
from qverify.engine.netlevel.query import Arithmetic
from qverify.errors import InputError
from qverify.network import Activation, Conv2D, Dense, Network
from qverify.quant import FixedFormat, FloatFormat, FloatKind, ImplementationOptions, Layout, quantize_network

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"


def _harness(tmp_path: Path, options: ImplementationOptions, net: Network | None = None) -> Path:
    qnet = quantize_network(net or small_network(3), options)
    return render_harness(qnet, split_property(qnet.source, -1.0, 0.5)).write(tmp_path)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


FIXED = ImplementationOptions(FixedFormat(8, 8))
HALF = ImplementationOptions(FloatFormat(FloatKind.HALF), layout=Layout.BALANCED)

EDITS = [
    ("relu-body", FIXED, "return x < 0 ? 0 : x;", "return x <= 0 ? 1 : x;", "qv_relu"),
    (
        "extra-statement",
        FIXED,
        "            acc = fxp_add(acc, fxp_mult(qv_w1[j][i], x[i]));\n        }\n",
        "            acc = fxp_add(acc, fxp_mult(qv_w1[j][i], x[i]));\n        }\n        acc = fxp_add(acc, 1);\n",
        "OUT[j]",
    ),
    ("non-constant-bound", FIXED, "for (i = 0; i < 3; i++)", "for (i = 0; i < j + 1; i++)", "loop bound"),
    ("operand-order", FIXED, "fxp_mult(qv_w1[j][i], x[i])", "fxp_mult(x[i], qv_w1[j][i])", "product"),
    ("weight-index", FIXED, "fxp_mult(qv_w1[j][i], x[i])", "fxp_mult(qv_w1[j][0], x[i])", "indices differ"),
    (
        "extra-macro",
        FIXED,
        "#define QV_HARNESS 1\n",
        "#define QV_HARNESS 1\n#define fxp_add fxp_sub\n",
        "fxp_add",
    ),
    ("undef", FIXED, '#include "fxp.h"\n', '#include "fxp.h"\n#undef QV_K\n#define QV_K 8\n', "undef"),
    ("half-cast-dropped", HALF, "(qv_num)(qv_w1[j][0] * x[0])", "(qv_w1[j][0] * x[0])", "half"),
    (
        "decimal-literal",
        FIXED,
        "static const qv_num qv_b1[5] = {\n    ",
        "static const qv_num qv_b1[5] = {\n    07, ",
        "initialiser",
    ),
    ("input-unbounded", HALF, "-0x1.0000000000000p+0f <= x[0] && ", "", "bounded"),
    ("line-directive", FIXED, "void qv_network(", '#line 1 "fxp.h"\nvoid qv_network(', "#line"),
    ("assert-changed", FIXED, "__ESBMC_assert(!(", "__ESBMC_assert((", "assert"),
    (
        "extra-call",
        FIXED,
        "    qv_network(x, y);\n",
        "    qv_network(x, y);\n    qv_network(x, y);\n",
        "assert",
    ),
]


@pytest.mark.parametrize(("name", "options", "old", "new", "reason"), EDITS, ids=[e[0] for e in EDITS])
def test_edited_harness_falls_back(tmp_path, name, options, old, new, reason):
    harness = _harness(tmp_path, options)
    assert lift_file(harness, [MODELS_C]).lifted  # the unedited harness is lifted
    _edit(harness, old, new)
    result = lift_file(harness, [MODELS_C])
    assert not result.lifted
    assert reason in result.reason, result.reason
    assert str(harness) in result.reason or "line" in result.reason, result.reason


def test_changed_header_falls_back(tmp_path):
    harness = _harness(tmp_path, FIXED)
    header = tmp_path / "fxp.h"
    header.write_text(header.read_text().replace("(FXP_ONE >> 1)", "(FXP_ONE >> 2)"))
    result = lift_file(harness, [MODELS_C])
    assert not result.lifted and "fxp.h" in result.reason and "byte for byte" in result.reason


def test_edited_convolution_falls_back(tmp_path):
    rng = np.random.default_rng(4)
    conv = Conv2D(
        rng.uniform(-1, 1, (2, 1, 2, 2)),
        rng.uniform(-1, 1, 2),
        Activation.RELU,
        (1, 4, 4),
        (1, 1),
        (1, 1, 0, 0),
    )
    dense = Dense(rng.uniform(-1, 1, (3, conv.n_out)), rng.uniform(-1, 1, 3), Activation.IDENTITY)
    harness = _harness(tmp_path, ImplementationOptions(FloatFormat()), Network((conv, dense)))
    assert lift_file(harness, [MODELS_C]).lifted
    for old, new, reason in (
        ("iy >= 0 && iy < 4 && ", "", "bounds test"),  # the padding test weakened
        ("iy < 4", "iy < 5", "different sizes"),  # a test that lets a read pass the input
        ("[oc][ic][ky][kx]", "[oc][ic][kx][ky]", "indexed"),  # a transposed kernel
    ):
        _harness(tmp_path, ImplementationOptions(FloatFormat()), Network((conv, dense)))
        _edit(harness, old, new)
        result = lift_file(harness, [MODELS_C])
        assert not result.lifted and reason in result.reason, (old, result.reason)


def test_int8_harness_is_lifted_over_codes(tmp_path):
    """An int8 harness is lifted (no longer declined): its unsafe set over the output codes gives
    the codegen query's verdict (over (code - zero) * scale) on every input tried; its
    invariant-free twin with an edited requantization call is declined (tests/test_netlevel_int8.py
    covers the int8 loop's other edits)."""
    from qverify.engine.netlevel.query import query_for
    from qverify.io import load_network
    from qverify.properties import read_vnnlib, to_normalised
    from qverify.quant import Int8Format

    net = load_network(ROOT / "benchmarks" / "acasxu-int8" / "onnx" / "ACASXU_run2a_1_1_batch_2000.int8.onnx")
    prop = to_normalised(read_vnnlib(ROOT / "benchmarks" / "acasxu" / "vnnlib" / "prop_3.vnnlib"), net)
    qnet = quantize_network(net, ImplementationOptions(Int8Format()))
    harness = render_harness(qnet, prop).write(tmp_path)
    result = lift_file(harness, [MODELS_C])
    assert result.lifted, result.reason
    expected = query_for(qnet, prop)
    region = expected.regions[0]
    assert np.array_equal(result.query.regions[0].lo, region.lo)
    assert np.array_equal(result.query.regions[0].hi, region.hi)
    rng = np.random.default_rng(5)
    for x in rng.integers(region.lo, region.hi + 1, size=(40, qnet.n_inputs)):
        assert result.query.violation(x) == expected.violation(x)
    _edit(harness, "qv_requant(acc, qv_t2[j])", "qv_requant(acc, qv_t2[i])")
    declined = lift_file(harness, [MODELS_C])
    assert not declined.lifted and "T[j] or T[0]" in declined.reason


def test_renamed_locals_are_still_lifted(tmp_path):
    """Hand-written C in the same style (other names for loop variables, accumulator, layer
    arrays) is recognised as the same query."""
    options = ImplementationOptions(FixedFormat(8, 8))
    harness = _harness(tmp_path, options)
    expected = lift_file(harness, [MODELS_C]).query
    text = harness.read_text()
    for old, new in (("acc", "total"), ("h1", "hidden"), ("int j, i;", "int row, col;")):
        text = text.replace(old, new)
    text = text.replace("[j]", "[row]").replace("[i]", "[col]").replace("j = 0; j <", "row = 0; row <")
    text = (
        text.replace("i = 0; i <", "col = 0; col <")
        .replace("; j++)", "; row++)")
        .replace("; i++)", "; col++)")
    )
    harness.write_text(text)
    result = lift_file(harness, [MODELS_C])
    assert result.lifted, result.reason
    for mine, theirs in zip(result.query.qnet.layers, expected.qnet.layers):
        assert np.array_equal(mine.weights, theirs.weights) and np.array_equal(mine.bias, theirs.bias)
    assert [(r.lo.tolist(), r.hi.tolist()) for r in result.query.regions] == [
        (r.lo.tolist(), r.hi.tolist()) for r in expected.regions
    ]


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        lift_file(tmp_path / "absent.c", [MODELS_C])


def test_real_semantics_is_carried(tmp_path):
    harness = _harness(tmp_path, FIXED)
    query = lift_file(harness, [MODELS_C], Arithmetic.REAL).query
    assert query is not None and query.arithmetic is Arithmetic.REAL


def test_input_lines_in_an_excluded_branch_fall_back(tmp_path):
    """The input lines read as text (`lift.inputs`) count only where the C compiles them."""
    harness = _harness(tmp_path, FIXED)
    text = harness.read_text()
    start, end = text.index("    x[0] = nondet_int();"), text.index("    qv_network(x, y);")
    harness.write_text(text[:start] + "#if 0\n" + text[start:end] + "#endif\n" + text[end:])
    result = lift_file(harness, [MODELS_C])
    assert not result.lifted and "nondet value" in result.reason, result.reason


def test_decimal_input_bounds_are_read_by_the_parser(tmp_path):
    """Input lines the text reader does not take (a decimal literal) go through the C parser and
    give the same regions."""
    harness = _harness(tmp_path, HALF)
    expected = lift_file(harness, [MODELS_C]).query
    _edit(harness, "0x1.0000000000000p-1f", "0.5f")
    result = lift_file(harness, [MODELS_C])
    assert result.lifted, result.reason
    assert [(r.lo.tolist(), r.hi.tolist()) for r in result.query.regions] == [
        (r.lo.tolist(), r.hi.tolist()) for r in expected.regions
    ]
