"""The engine's front end: preprocessing, parsing and symbolic execution of generated harnesses (every
variant qverify emits) and of hand-written C, and errors naming file:line for unsupported C."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from qverify.codegen import NeuronBounds, render_harness
from qverify.engine import EngineStatus, cfront, check_file
from qverify.engine.scalar import ssa, symex
from qverify.engine.scalar.evaluate import ASSUME_FAILED, HOLDS, VIOLATED, run
from qverify.errors import InputError, UnsupportedError
from qverify.network import Activation, Dense, Network
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Layout,
    Overflow,
    Rounding,
    implementation_bounds,
    quantize_network,
    simulate,
)
from tests.conftest import budgeted

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc (the preprocessor) not installed")

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"
FIXTURES = ROOT / "tests" / "fixtures" / "engine"


def tiny_network(activation: Activation, seed: int = 3) -> Network:
    rng = np.random.default_rng(seed)
    return Network(
        (
            Dense(rng.uniform(-2, 2, (3, 2)), rng.uniform(-1, 1, 3), activation),
            Dense(rng.uniform(-2, 2, (2, 3)), rng.uniform(-1, 1, 2), Activation.IDENTITY),
        ),
        name=f"tiny-{activation.value}",
    )


def two_clause_property(boxes: int = 1, empty: bool = False) -> Property:
    """`empty`: a box whose X_0 lies strictly between two words of coarse formats."""
    box_list = [Box((Fraction(-1), Fraction(-1)), (Fraction(1), Fraction(1)))]
    if boxes > 1:
        box_list.append(Box((Fraction(2), Fraction(2)), (Fraction(3), Fraction(3))))
    if empty:
        box_list = [Box((Fraction(1, 100), Fraction(0)), (Fraction(2, 100), Fraction(1)))]
    clauses = (
        Clause((Atom(((0, Fraction(1)), (1, Fraction(-1))), Fraction(0), Relation.GE),)),
        Clause((Atom(((0, Fraction(1)),), Fraction(-1, 2), Relation.LE),)),
    )
    return Property("p", tuple(box_list), OutputCondition(clauses))


VARIANTS = {
    "fixed-seq-relu": (Activation.RELU, ImplementationOptions(FixedFormat(4, 4))),
    "fixed-bal-floor-wrap": (
        Activation.RELU,
        ImplementationOptions(FixedFormat(5, 3, Rounding.FLOOR, Overflow.WRAP), layout=Layout.BALANCED),
    ),
    "fixed-detect-wide": (
        Activation.SIGMOID,
        ImplementationOptions(FixedFormat(6, 6, overflow=Overflow.DETECT), accumulation=Accumulation.WIDE),
    ),
    "fixed-wide-balanced-tanh": (
        Activation.TANH,
        ImplementationOptions(FixedFormat(8, 8), accumulation=Accumulation.WIDE, layout=Layout.BALANCED),
    ),
    "fixed-16-16-sigmoid": (Activation.SIGMOID, ImplementationOptions(FixedFormat(16, 16))),
    "float-seq-sigmoid": (Activation.SIGMOID, ImplementationOptions(FloatFormat())),
    "double-bal-tanh": (
        Activation.TANH,
        ImplementationOptions(FloatFormat(FloatKind.DOUBLE), layout=Layout.BALANCED),
    ),
    "float-relu": (Activation.RELU, ImplementationOptions(FloatFormat())),
}


def parse(path: Path) -> ssa.Program:
    return symex.execute(cfront.parse_file(path, [MODELS_C]))


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("boxes", [1, 2])
def test_generated_harnesses_parse(tmp_path, name, boxes):
    activation, options = VARIANTS[name]
    qnet = quantize_network(tiny_network(activation), options)
    harness = render_harness(qnet, two_clause_property(boxes)).write(tmp_path)
    program = parse(harness)
    assert len(program.inputs) == 2
    kinds = {node.ty.kind for node in program.inputs}
    assert kinds == ({"float"} if not qnet.is_fixed else {"int"})
    messages = [step.message for step in program.asserts]
    assert "unsafe clause 1: (Y_0 - Y_1 >= 0)" in messages
    assert "unsafe clause 2: (Y_0 <= 0.5)" in messages
    if options.number.__class__ is FixedFormat and options.number.overflow is Overflow.DETECT:
        assert "fixed-point overflow" in messages
    assert all(
        step.coord is not None and step.coord.file.endswith(("harness.c", "fxp.h")) for step in program.steps
    )
    # the input order is the nondet call order
    assert [node.index for node in program.inputs] == [0, 1]


def test_injected_invariants_become_assumes(tmp_path):
    qnet = quantize_network(tiny_network(Activation.RELU), ImplementationOptions(FixedFormat(4, 4)))
    lo, hi = np.array([-16, -16]), np.array([16, 16])
    bounds = NeuronBounds(layers=implementation_bounds(qnet, lo, hi), origin="test")
    harness = render_harness(qnet, two_clause_property(), bounds).write(tmp_path)
    program = parse(harness)
    # 2 input assumes + per neuron a pre- and a post-activation assume (3 + 2 neurons)
    assert len(program.assumes) == 2 + 2 * (3 + 2)


def test_a_box_between_two_words_is_the_nearest_word(tmp_path):
    """X_0 in [0.01, 0.02] holds no word of <4,2> (quarters): the input stage rounds both ends to
    the word 0, and the engine decides that input (issue 40: it used to be 'vacuously' SAFE)."""
    qnet = quantize_network(tiny_network(Activation.RELU), ImplementationOptions(FixedFormat(4, 2)))
    prop = two_clause_property(empty=True)
    harness = render_harness(qnet, prop).write(tmp_path)
    result = check_file(harness, [MODELS_C], budgeted())
    inputs = np.array([[0, w] for w in range(5)], dtype=np.int64)  # X_0 = 0, X_1 in [0, 1]
    outputs = simulate(qnet, inputs).outputs
    violating = [prop.unsafe.violated_clause_exact(qnet.output_reals(row)) >= 0 for row in outputs]
    assert result.status is (EngineStatus.UNSAFE if any(violating) else EngineStatus.SAFE), result.to_json()
    if result.status is EngineStatus.UNSAFE:
        assert result.counterexample[0] == 0 and 0 <= result.counterexample[1] <= 4


def test_sequential_loops_are_unrolled_and_tables_read_symbolically(tmp_path):
    activation, options = VARIANTS["fixed-16-16-sigmoid"]
    qnet = quantize_network(tiny_network(activation), options)
    program = parse(render_harness(qnet, two_clause_property()).write(tmp_path))
    nodes = ssa.topological(program.roots())
    reads = [node for node in nodes if isinstance(node, ssa.Read)]
    assert reads and all(read.table.name == "qv_sigmoid_table" for read in reads)
    assert len(reads[0].table) == qnet.luts[0].n_entries


# ------------------------------------------------------------------------------ hand-written C


def handwritten(tmp_path: Path, threshold: int) -> Path:
    source = (FIXTURES / "handwritten_net.c").read_text()
    target = tmp_path / f"net_{threshold}.c"
    target.write_text(f"#define THRESHOLD {threshold}\n" + source)
    return target


def test_handwritten_network_symbolic_execution(tmp_path):
    program = parse(handwritten(tmp_path, 800))
    assert len(program.inputs) == 2
    assert [step.message for step in program.asserts] == ["output above the threshold"]
    points = np.array([[255, -256], [256, -256], [0, 0], [300, 0], [-256, 256]])
    outcome = run(program, points)
    assert list(outcome.status) == [HOLDS, HOLDS, HOLDS, ASSUME_FAILED, HOLDS]
    outcome = run(parse(handwritten(tmp_path, 799)), points)
    assert list(outcome.status) == [VIOLATED, VIOLATED, HOLDS, ASSUME_FAILED, HOLDS]


@pytest.mark.parametrize(("threshold", "expected"), [(800, EngineStatus.SAFE), (799, EngineStatus.UNSAFE)])
def test_handwritten_network_verdicts(tmp_path, threshold, expected):
    shutil.copy(MODELS_C / "fxp.h", tmp_path / "fxp.h")
    shutil.copy(MODELS_C / "verifier.h", tmp_path / "verifier.h")
    for disable in ((), ("attack",), ("attack", "bounds", "split")):
        result = check_file(handwritten(tmp_path, threshold), [tmp_path], budgeted(disable=disable))
        assert result.status is expected, (disable, result.to_json())
        if expected is EngineStatus.UNSAFE:
            assert result.counterexample in ((255, -256), (256, -256))


# ------------------------------------------------------------------------------ errors


def expected_location(path: Path) -> tuple[str, str]:
    """From the fixture's first line `/* expected: file.c:LINE: text */`."""
    first = path.read_text().splitlines()[0]
    body = first.split("expected:", 1)[1].rsplit("*/", 1)[0].strip()
    location, text = body.split(": ", 1)
    return location, text


@pytest.mark.parametrize("name", ["pointer", "loop", "recursion", "printf", "syntax", "whiletrue"])
def test_unsupported_c_is_an_error_naming_file_and_line(name):
    path = FIXTURES / "unsupported" / f"{name}.c"
    location, text = expected_location(path)
    result = check_file(path, [MODELS_C], budgeted())
    assert result.status is EngineStatus.ERROR, result.to_json()
    assert location in result.reason, result.reason
    assert text in result.reason, result.reason
    assert result.decided_by == "front-end"


def test_errors_are_typed_in_the_front_end_api():
    with pytest.raises(UnsupportedError, match=r"recursion\.c:8: recursive call"):
        parse(FIXTURES / "unsupported" / "recursion.c")
    with pytest.raises(InputError, match=r"syntax\.c:5: syntax error"):
        parse(FIXTURES / "unsupported" / "syntax.c")
    with pytest.raises(InputError, match="no such file"):
        cfront.parse_file(FIXTURES / "missing.c")


def test_c_constructs(tmp_path):
    """Control flow under input-dependent guards, early returns, arrays, pointers, compound
    assignment, casts and integer promotion, against gcc."""
    source = r"""
#include "verifier.h"
#include <stdint.h>
static int table[5] = {3, -1, 4, 1, -5};
static int pick(const int *row, int k) { return row[k] + row[k + 1]; }
static int clamp(int v) { if (v > 10) { return 10; } if (v < -10) return -10; return v; }
int main(void)
{
    int a = nondet_int();
    int b = nondet_int();
    int arr[3];
    int i, total = 0;
    unsigned char small;
    int64_t wide;
    __ESBMC_assume(-20 <= a && a <= 20 && -3 <= b && b <= 3);
    for (i = 0; i < 3; i++) {
        arr[i] = a * (i + 1) - b;
    }
    for (i = 0; i < 3; i++) {
        if (arr[i] > 0) { total += arr[i]; continue; }
        total -= 1;
        if (total < -5) break;
    }
    small = (unsigned char)(a * 13);
    wide = ((int64_t)a << 40) >> 38;
    total += clamp(total) + pick(table, 1) + table[(b + 3) % 5] + small % 7 + (int)(wide / 3);
    total ^= b & 6;
    __ESBMC_assert(total != 17, "total is 17");
    __ESBMC_assert(total < 60 || b != 2, "large with b = 2");
    return 0;
}
"""
    path = tmp_path / "constructs.c"
    path.write_text(source)
    shutil.copy(MODELS_C / "verifier.h", tmp_path / "verifier.h")
    program = symex.execute(cfront.parse_file(path, [tmp_path]))
    points = np.array([[a, b] for a in range(-22, 23) for b in range(-4, 5)])
    ours = run(program, points)
    replay = tmp_path / "replay.c"
    replay.write_text(
        source.replace("int main(void)", "int harness_main(void)")
        + r"""
#include <stdio.h>
int main(void) { long a, b; while (scanf("%ld %ld", &a, &b) == 2) { qv_a = (int)a; qv_b = (int)b;
  qv_reads = 0; qv_result = 0; qv_message = ""; if (setjmp(qv_jump) == 0) harness_main();
  if (qv_result == 1) printf("ASSUME-FAILED\n"); else if (qv_result == 2) printf("VIOLATED %s\n", qv_message);
  else printf("HOLDS\n"); } return 0; }
"""
    )
    shim = tmp_path / "verifier.h"
    shim.write_text(
        r"""
#include <setjmp.h>
static jmp_buf qv_jump; static int qv_a, qv_b, qv_reads, qv_result; static const char *qv_message;
static int nondet_int(void) { return qv_reads++ == 0 ? qv_a : qv_b; }
static void __ESBMC_assume(int c) { if (!c) { qv_result = 1; longjmp(qv_jump, 1); } }
static void __ESBMC_assert(int c, const char *m) { if (!c) { qv_result = 2; qv_message = m; longjmp(qv_jump, 1); } }
"""
    )
    executable = tmp_path / "replay"
    subprocess.run(
        ["gcc", "-std=c99", "-O0", "-I", str(tmp_path), str(replay), "-o", str(executable)], check=True
    )
    lines = subprocess.run(
        [str(executable)],
        input="\n".join(f"{a} {b}" for a, b in points),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    messages = [step.message for step in program.asserts]
    for row, line, status, violated in zip(points, lines, ours.status, ours.violated):
        mine = {HOLDS: "HOLDS", ASSUME_FAILED: "ASSUME-FAILED"}.get(
            int(status)
        ) or f"VIOLATED {messages[violated]}"
        assert mine == line, (row, mine, line)


# ------------------------------------------------------------------------------ command line


def test_command_line_prints_one_json_line(tmp_path):
    qnet = quantize_network(tiny_network(Activation.RELU), ImplementationOptions(FixedFormat(4, 4)))
    harness = render_harness(qnet, two_clause_property()).write(tmp_path)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "qverify.engine",
            str(harness),
            "-I",
            str(MODELS_C),
            "--json",
            "--timeout",
            "30",
            "--disable",
            "lift",  # the scalar front end's stages
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["status"] in ("SAFE", "UNSAFE")
    assert set(record) >= {
        "status",
        "reason",
        "counterexample",
        "violated",
        "decided_by",
        "times_s",
        "counts",
    }
    assert {"parse", "symex", "simplify", "total"} <= set(record["times_s"])


def test_command_line_usage_errors_exit_2(tmp_path):
    for arguments in (
        ["--solver", "cplex", "x.c"],
        ["x.c", "--timeout", "-1"],
        ["x.c", "--disable", "magic"],
    ):
        completed = subprocess.run(
            [sys.executable, "-m", "qverify.engine", *arguments],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        assert completed.returncode == 2, (arguments, completed.stdout, completed.stderr)


def test_command_line_error_result_exits_0(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "qverify.engine",
            str(FIXTURES / "unsupported" / "printf.c"),
            "-I",
            str(MODELS_C),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0
    record = json.loads(completed.stdout)
    assert record["status"] == "ERROR" and "printf.c:8:" in record["reason"]
