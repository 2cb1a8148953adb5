"""Lookup-table activations (sigmoid, tanh) read back by the lifter (`netlevel.lift.lut`).

For fixed point (several formats, both rounding modes, both table designs), float, double and half:
the lifted query equals `query_for`'s (layers, regions, atoms and every table: size, half range,
entries, saturation values, error bound); the lifted network computes what the compiled C computes,
bit for bit, on inputs that reach every part of the tables (both saturations and the inside); gcc's
replay of the harness ends as the lifted query says. Edited table functions are declined.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from lift_cases import assert_same_query, lifted_line, sample_inputs, split_property

from qverify.codegen import (
    CompiledNetwork,
    compile_replay,
    format_inputs,
    render_harness,
    render_network,
    run_lines,
)
from qverify.engine.netlevel.lift import lift_file
from qverify.network import Activation, Dense, Network
from qverify.quant import (
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Layout,
    LutDesign,
    Overflow,
    Rounding,
    quantize_network,
    simulate,
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

MODELS_C = Path(__file__).resolve().parents[1] / "models_c"
COARSE = LutDesign(resolution=1)
OPTIONS = [
    ("8.8-res1", ImplementationOptions(FixedFormat(8, 8), lut=COARSE)),
    ("16.16-res2-balanced", ImplementationOptions(FixedFormat(16, 16), layout=Layout.BALANCED)),
    ("6.6-floor-wrap-eps", ImplementationOptions(FixedFormat(6, 6, Rounding.FLOOR, Overflow.WRAP), lut=LutDesign(eps=0.02, resolution=None))),
    ("float-res2", ImplementationOptions(FloatFormat())),
    ("double-res1", ImplementationOptions(FloatFormat(FloatKind.DOUBLE), lut=COARSE)),
    ("half-res1", ImplementationOptions(FloatFormat(FloatKind.HALF), lut=COARSE)),
]  # fmt: skip


def table_network(seed: int, activations=(Activation.SIGMOID, Activation.TANH)) -> Network:
    """3 -> 5 (sigmoid) -> 4 (tanh) -> 3: weights large enough that both saturations are reached."""
    rng = np.random.default_rng(seed)
    sizes = (3, 5, 4, 3)
    layers = []
    for index, activation in enumerate((*activations, Activation.IDENTITY)):
        layers.append(
            Dense(
                rng.uniform(-3, 3, (sizes[index + 1], sizes[index])),
                rng.uniform(-2, 2, sizes[index + 1]),
                activation,
            )
        )
    return Network(tuple(layers), name=f"tables-{seed}")


def assert_same_tables(lifted, qnet) -> None:
    assert len(lifted.luts) == len(qnet.luts)
    for mine, theirs in zip(lifted.luts, qnet.luts):
        assert mine.activation is theirs.activation
        assert (mine.half_range, mine.half_range_q, mine.n_entries) == (
            theirs.half_range,
            theirs.half_range_q,
            theirs.n_entries,
        )
        assert mine.table.dtype == theirs.table.dtype and np.array_equal(mine.table, theirs.table)
        assert (mine.sat_lo, mine.sat_hi) == (theirs.sat_lo, theirs.sat_hi)
        assert mine.error_bound == theirs.error_bound


@pytest.mark.parametrize(("name", "options"), OPTIONS, ids=[case[0] for case in OPTIONS])
def test_table_harness_is_lifted(tmp_path, name, options):
    net = table_network(4)
    qnet = quantize_network(net, options)
    prop = split_property(net, -1.5, 1.0)
    harness = render_harness(qnet, prop).write(tmp_path)
    result = lift_file(harness, [MODELS_C])
    assert result.lifted, result.reason
    query = result.query
    assert_same_query(query, qnet, prop)
    assert_same_tables(query.qnet, qnet)
    x = sample_inputs(query, np.random.default_rng(7), 300)
    lifted = simulate(query.qnet, x, trace=True)
    compiled = CompiledNetwork(render_network(qnet), tmp_path / "network", qnet.is_fixed).run(x)
    assert np.array_equal(compiled.overflowed, lifted.detected)
    assert np.array_equal(
        compiled.outputs[~compiled.overflowed], lifted.outputs[~lifted.detected], equal_nan=True
    )
    reached = _table_regions(query.qnet, lifted)
    assert reached == {"below", "inside", "above"}, reached
    lines = run_lines(compile_replay(harness), format_inputs(x, exact_float=True))
    assert [line.startswith(lifted_line(query, row)) for row, line in zip(x, lines)] == [True] * len(x)


def _table_regions(qnet, run) -> set[str]:
    """Which parts of the first table the traced pre-activations of its layer reach."""
    lut = qnet.luts[0]
    bound = lut.half_range_q if qnet.is_fixed else lut.half_range
    pre = np.asarray(run.layers[0].pre, dtype=np.float64)
    found = set()
    found |= {"below"} if np.any(pre < -bound) else set()
    found |= {"above"} if np.any(pre > bound) else set()
    found |= {"inside"} if np.any(np.abs(pre) <= bound) else set()
    return found


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


FIXED_EDITS = [
    ("if (x < -1536)", "if (x < -1535)", "not the template's"),  # the saturation bound moved
    ("* 120 + 1536) / 3072", "* 120 + 1535) / 3072", "not the template's"),  # rounding offset
    ("* 120 + 1536) / 3072", "* 120 + 1536) / 3070", "not the template's"),  # divisor
    (
        "return 0;\n    }\n    if (x > 1536)",
        "return 3;\n    }\n    if (x > 1536)",
        "",
    ),  # saturation value kept
    ("qv_sigmoid_table[(((int64_t)", "qv_tanh_table[(((int64_t)", "not the template's"),  # other table
    ("h1[j] = qv_sigmoid(acc);", "h1[j] = qv_tanh(acc);", "defined but no layer"),
]
FLOAT_EDITS = [
    ("index = (int)((x + 0x1.8000000000000p+2f) * 0x1.4000000000000p+3f", "index = (int)((x + 0x1.8000000000000p+2f) * 0x1.4400000000000p+3f", "index scale"),
    ("+ 0x1.0000000000000p-1f);\n    if (index > 120)", "+ 0x1.0000000000000p-2f);\n    if (index > 120)", "one half"),
    ("    if (index > 120) {\n        index = 120;\n    }\n    return qv_sigmoid", "    return qv_sigmoid", "not the template's"),
]  # fmt: skip


def test_edited_table_functions_are_declined(tmp_path):
    """Every change to a table function that changes its meaning is declined with a reason; a
    changed saturation value is read as it is (the lifted table then returns it)."""
    net = table_network(5)
    for options, edits in ((ImplementationOptions(FixedFormat(8, 8), lut=COARSE), FIXED_EDITS),
                           (ImplementationOptions(FloatFormat(), lut=COARSE), FLOAT_EDITS)):  # fmt: skip
        qnet = quantize_network(net, options)
        for old, new, reason in edits:
            harness = render_harness(qnet, split_property(net, -1.0, 1.0)).write(tmp_path)
            _edit(harness, old, new)
            result = lift_file(harness, [MODELS_C])
            if not reason:
                assert result.lifted and result.query.qnet.luts[0].sat_lo == 3, result.reason
                continue
            assert not result.lifted and reason in result.reason, (old, result.reason)


@pytest.mark.parametrize("suite_name", ["iris", "vocalic"])
def test_thesis_table_suites_are_lifted(tmp_path, suite_name):
    """The thesis's tanh (iris) and sigmoid (vocalic) networks with their suites' table design, at
    <8,8> and <16,16>: the harnesses of their first tasks are lifted to `query_for`'s query."""
    from qverify.io import load_network
    from qverify.suites.suite_file import read_suite

    suite = read_suite(suite_name)
    for task in suite.tasks[:2]:
        net = load_network(task.network_path)
        for number in (FixedFormat(8, 8), FixedFormat(16, 16)):
            qnet = quantize_network(net, ImplementationOptions(number, lut=suite.implementation.lut))
            harness = render_harness(qnet, task.property).write(tmp_path / f"{task.name}-{number.label}")
            result = lift_file(harness, [MODELS_C])
            assert result.lifted, result.reason
            assert_same_query(result.query, qnet, task.property)
            assert_same_tables(result.query.qnet, qnet)
