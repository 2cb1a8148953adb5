"""The exact-ReLU MILP that input splitting asks about boxes with few unstable ReLUs (`boxmilp`):
it must never refute a box that holds a violation (checked against enumeration of every integer
input of the box on the program), and it decides boxes that symbolic bounds cannot."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from qverify.codegen import render_harness
from qverify.engine import EngineOptions, EngineStatus, Recorder, cfront, check_file
from qverify.engine.api import smt_factory
from qverify.engine.scalar import symex
from qverify.engine.scalar.boxmilp import BoxMilp
from qverify.engine.scalar.branch import literal_rows
from qverify.engine.scalar.evaluate import ProgramRunner
from qverify.engine.scalar.passes.simplify import simplify
from qverify.engine.scalar.relax import RelaxedModel, bounds
from qverify.engine.scalar.strategy import Strategy
from qverify.engine.solvers.base import CheckStatus
from qverify.engine.solvers.highs import HighsSolver
from qverify.io import load_network
from qverify.network import Activation, Dense, Network
from qverify.properties.builders import to_normalised
from qverify.properties.vnnlib import read_vnnlib
from qverify.quant import FixedFormat, ImplementationOptions, Rounding, quantize_network
from qverify.quant.network import Accumulation
from tests.conftest import ACAS, budgeted
from tests.test_engine_passes import MODELS_C, first_assertion_query, program_of_network

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
VIOLATED = 2  # ProgramRunner's status of an input that fails an assertion
BOXES = 64  # the splitting budget of the ACAS Xu box (each run needed 5 or fewer when written)


def _two_layer_program(tmp_path, seed: int, fmt: FixedFormat, accumulation: Accumulation):
    """A 2-input network with two ReLU layers of 6 units; unsafe when output 0 >= output 1."""
    rng = np.random.default_rng(seed)
    net = Network(
        (
            Dense(rng.uniform(-2, 2, (6, 2)), rng.uniform(-1, 1, 6), Activation.RELU),
            Dense(rng.uniform(-1.5, 1.5, (6, 6)), rng.uniform(-1, 1, 6), Activation.RELU),
            Dense(rng.uniform(-2, 2, (2, 6)), rng.uniform(-1, 1, 2), Activation.IDENTITY),
        )
    )
    return program_of_network(
        tmp_path, quantize_network(net, ImplementationOptions(fmt, accumulation=accumulation))
    )


CASES = [
    (1, FixedFormat(6, 6), Accumulation.PER_OP),
    (5, FixedFormat(6, 6, Rounding.FLOOR), Accumulation.WIDE),
    (3, FixedFormat(5, 7), Accumulation.PER_OP),
    (6, FixedFormat(6, 6, Rounding.FLOOR), Accumulation.PER_OP),
    (7, FixedFormat(6, 6), Accumulation.WIDE),
]


@needs_gcc
@pytest.mark.parametrize(("seed", "fmt", "accumulation"), CASES)
def test_box_milp_never_refutes_a_box_with_a_violation(tmp_path, seed, fmt, accumulation):
    """On random sub-boxes: UNSAT only where enumeration of the box finds no violating input, and
    every violating box is answered SAT (a candidate) or left UNKNOWN; both kinds of box occur."""
    program = _two_layer_program(tmp_path, seed, fmt, accumulation)
    simplified, _, lowering, (conjunction, *_) = first_assertion_query(program)
    model = RelaxedModel.build(lowering)
    big = np.full(2, 2.0**20)
    rows, senses, lo, hi, _ = literal_rows(model, lowering, conjunction, -big, big)
    milp = BoxMilp(model, rows, senses, HighsSolver())
    runner = ProgramRunner(simplified.program)
    rng = np.random.default_rng(seed)
    lo, hi = lo.astype(np.int64), hi.astype(np.int64)
    starts = rng.integers(lo, hi + 1, size=(60, 2))
    ends = np.minimum(starts + rng.integers(0, 24, size=(60, 2)), hi)
    result = bounds(model, starts.astype(np.float64), ends.astype(np.float64), rows)
    seen = {"refuted": 0, "violating": 0}
    for box in range(len(starts)):
        grid = np.stack(
            np.meshgrid(*[np.arange(a, b + 1) for a, b in zip(starts[box], ends[box])], indexing="ij"),
            axis=-1,
        ).reshape(-1, 2)
        violating = bool((runner.run(grid).status == VIOLATED).any())
        answer = milp.check(result, box, deadline=float("inf"))
        if violating:
            seen["violating"] += 1
            assert answer.status is not CheckStatus.UNSAT, (starts[box], ends[box])
        elif answer.status is CheckStatus.UNSAT:
            seen["refuted"] += 1
    assert seen["refuted"] > 0 and seen["violating"] > 0, seen


@needs_gcc
def test_box_milp_decides_an_acas_xu_box_that_bounds_leave_open(tmp_path):
    """ACAS Xu 3_3 phi2 at <16,16> on a box of 2 x 256 units per input around the point closest
    to a violation (margin 60 units): the symbolic bounds of the literals stay positive there, and
    splitting with the box MILP proves it SAFE in fewer boxes than bounds alone (1 against 5 when
    written). Both runs have the same budget of boxes, so the comparison is one of work, whatever
    the machine's load (it used to be two 60 s timeouts, which a busy machine spent simplifying)."""
    centre = np.array([39323, -2044, 23725, 30705, -29492]) / 65536
    text = (ACAS / "vnnlib" / "prop_2.vnnlib").read_text()
    lines = [line for line in text.splitlines() if not line.startswith("(assert (") or "Y_" in line]
    for i, value in enumerate(centre):
        low, high = max(value - 256 / 65536, 0.6 if i == 0 else -1.0), value + 256 / 65536
        lines += [f"(assert (>= X_{i} {low:.9f}))", f"(assert (<= X_{i} {high:.9f}))"]
    vnnlib = tmp_path / "box.vnnlib"
    vnnlib.write_text("\n".join(lines) + "\n")
    net = load_network(ACAS / "nnet" / "ACASXU_run2a_3_3_batch_2000.nnet")
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(16, 16)))
    harness = render_harness(qnet, to_normalised(read_vnnlib(vnnlib), net)).write(tmp_path)
    # the scalar path's front end once (parse, symbolic execution, simplification: 8 s of CPU), then its
    # strategy twice: splitting without and with the box MILP, within the same budget of boxes
    simplified = simplify(symex.execute(cfront.parse_file(harness, [MODELS_C])))

    def split(*disable: str):
        options = budgeted(max_nodes=BOXES, disable=("lift", "attack", "smt", *disable))
        recorder = Recorder()
        result = Strategy(
            simplified, options, time.monotonic() + options.timeout_s, recorder, smt_factory
        ).run()
        return result, {**recorder.counts, **result.counts}

    _, without_counts = split("milp")
    with_milp, counts = split()
    assert with_milp.status is EngineStatus.SAFE, with_milp.reason
    assert with_milp.decided_by == "split"
    assert counts["box_milps_refuted"] > 0
    assert counts["boxes"] < without_counts["boxes"]
