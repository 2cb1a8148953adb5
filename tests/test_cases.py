"""Verifying a property of cases (issue 43, `qverify.cases`), against brute force.

Tiny random networks in small fixed-point formats, properties of 2-4 cases (a box and an unsafe
set each, thresholds drawn from the outputs the case's own box reaches, so that SAFE and UNSAFE
cases are both common): the ground truth is every input word of every case's box through the
bit-exact simulator (an overflow under `detect` counts as a violation, as the harness asserts).
The verdict must be UNSAFE exactly when some case is violated, its counterexample naming a violated
case; the screening (a case settled SAFE by its harness's invariants) must never settle a case that
brute force violates -- checked on many more cases than are verified end to end."""

from __future__ import annotations

import itertools
import json
import shutil
from fractions import Fraction

import numpy as np
import pytest

from qverify.backends import Limits, Status
from qverify.cases import SCREENED, screen, verify_cases
from qverify.invariants import input_boxes
from qverify.network import Activation
from qverify.properties import (
    Atom,
    Box,
    Clause,
    OutputCondition,
    Property,
    PropertyCases,
    Relation,
    read_vnnlib_cases,
)
from qverify.quant import (
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Overflow,
    Rounding,
    quantize_network,
    simulate,
)
from qverify.verification import VerificationRecord, VerifyOptions
from qverify.vnncomp import RunnerConfig, run_instance
from tests.conftest import ROOT, SAFETY_NET_S, random_network
from tests.test_cli_basics import qverify

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

OPTIONS = VerifyOptions(limits=Limits(timeout_s=SAFETY_NET_S))
TINY = ROOT / "benchmarks" / "tiny"


def _box(rng: np.random.Generator, fmt: FixedFormat) -> Box:
    """A box on the format's grid, a few words wide per input, inside [-1, 1]."""
    lo, hi = [], []
    for _ in range(2):
        start = int(rng.integers(-fmt.scale, fmt.scale - 3))
        lo.append(Fraction(start, fmt.scale))
        hi.append(Fraction(start + int(rng.integers(1, 6)), fmt.scale))
    return Box(tuple(lo), tuple(hi))


def _points(qnet, case: Property) -> np.ndarray:
    boxes = input_boxes(qnet, case)
    return np.concatenate(
        [
            np.array(list(itertools.product(*(range(a, b + 1) for a, b in zip(box.lo, box.hi)))))
            for box in boxes
        ]
    )


def violated(qnet, case: Property) -> bool:
    """Brute force: does some input word of the case's boxes overflow under detect, or reach its unsafe set?"""
    words = _points(qnet, case)
    result = simulate(qnet, words)
    if np.any(result.detected):
        return True
    outputs = [qnet.output_reals(row) for row in result.outputs]
    return any(case.unsafe.violated_clause_exact(row) >= 0 for row in outputs)


def _case(rng: np.random.Generator, qnet, fmt: FixedFormat, index: int, safe: bool) -> Property:
    """A case whose threshold lies among the outputs its own box reaches (SAFE or UNSAFE, by a hair),
    or (`safe`) one or two words above them."""
    box = _box(rng, fmt)
    probe = Property("probe", (box,), OutputCondition(()))
    outputs = np.array([qnet.output_reals(row) for row in simulate(qnet, _points(qnet, probe)).outputs])
    output = int(rng.integers(qnet.n_outputs))
    offset = int(rng.integers(1, 3)) if safe else int(rng.integers(-2, 3))
    threshold = Fraction(outputs[:, output].max()) + Fraction(offset, fmt.scale)
    atom = Atom(((output, Fraction(1)),), -threshold, Relation.GE)
    return Property(f"case{index}", (box,), OutputCondition((Clause((atom,)),)))


def _instance(seed: int, cases: int):
    rng = np.random.default_rng(4300 + seed)
    overflow = [Overflow.SATURATE, Overflow.WRAP, Overflow.DETECT][seed % 3]
    fmt = FixedFormat(4, int(rng.integers(3, 5)), [Rounding.NEAREST, Rounding.FLOOR][seed % 2], overflow)
    hidden = [Activation.RELU, Activation.RELU, Activation.TANH][seed % 3]
    net = random_network(rng, (2, int(rng.integers(2, 5)), 2), hidden, scale=0.8)
    implementation = ImplementationOptions(fmt)
    qnet = quantize_network(net, implementation)
    prop = PropertyCases(
        "random",
        tuple(_case(rng, qnet, fmt, k, safe=seed % 2 == 0) for k in range(cases)),
        tuple(f"line {k + 1}" for k in range(cases)),
    )
    return net, qnet, implementation, prop


@pytest.mark.parametrize("seed", range(12))
def test_verdicts_of_properties_of_cases_agree_with_brute_force(seed):
    net, qnet, implementation, prop = _instance(seed, 2 + seed % 3)
    truth = [violated(qnet, case) for case in prop.cases]
    record = verify_cases(net, prop, implementation, OPTIONS)
    assert record.status is (Status.UNSAFE if any(truth) else Status.SAFE), (truth, record.reason)
    assert len(record.cases) == len(prop.cases)
    if record.status is Status.UNSAFE:
        case = next(k for k, outcome in enumerate(record.cases) if outcome.status is Status.UNSAFE)
        assert truth[case] and record.counterexample.violated.startswith(prop.describe(case))
        later = record.cases[case + 1 :]  # not run, or settled by the screening of every case at once
        assert all(o.status is Status.UNKNOWN or o.decided_by == SCREENED for o in later)
    else:
        assert all(outcome.status is Status.SAFE for outcome in record.cases)
    again = VerificationRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again.cases == record.cases


@pytest.mark.parametrize("seed", range(40))
def test_screening_never_settles_a_violated_case(seed):
    _, qnet, _, prop = _instance(seed, 6)
    for case in prop.cases:
        if screen(qnet, case) is not None:
            assert not violated(qnet, case), case


def test_cases_each_with_its_own_unsafe_set_are_not_merged(tmp_path):
    """relu2 on [0,1]^2: each case's unsafe set is reachable in the other case's box only, so the
    property holds (a reader that united boxes and unsafe sets would find a counterexample); in
    the second file the third case is violated, in float and in <8,8>, and the example names it."""
    net_path = TINY / "relu2.nnet"
    trap = tmp_path / "trap.vnnlib"
    trap.write_text(
        "(declare-const X_0 Real)\n(declare-const X_1 Real)\n(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n"
        "(assert (or (and (>= X_0 0.0) (<= X_0 0.5) (>= X_1 0.5) (<= X_1 1.0) (>= Y_0 0.6))\n"
        "            (and (>= X_0 0.5) (<= X_0 1.0) (>= X_1 0.0) (<= X_1 0.5) (>= Y_1 1.0))))\n"
    )
    unsafe = tmp_path / "unsafe.vnnlib"
    unsafe.write_text(
        "(declare-const X_0 Real)\n(declare-const X_1 Real)\n(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n"
        "(assert (or (and (>= X_0 0.0) (<= X_0 0.5) (>= X_1 0.0) (<= X_1 0.5) (>= Y_0 0.6))\n"
        "            (and (>= X_0 0.5) (<= X_0 1.0) (>= X_1 0.0) (<= X_1 0.5) (>= Y_1 0.2))\n"
        "            (and (>= X_0 0.0) (<= X_0 0.5) (>= X_1 0.5) (<= X_1 1.0) (>= Y_1 1.2))))\n"
    )
    from qverify.io import load_network

    net = load_network(net_path)
    for number in (FloatFormat(FloatKind.FLOAT), FixedFormat(8, 8)):
        implementation = ImplementationOptions(number)
        safe = verify_cases(net, read_vnnlib_cases(trap), implementation, OPTIONS)
        assert safe.status is Status.SAFE and len(safe.cases) == 2, safe.reason
        found = verify_cases(net, read_vnnlib_cases(unsafe), implementation, OPTIONS)
        assert found.status is Status.UNSAFE, found.reason
        assert found.counterexample.violated.startswith("case 3 of 3 (line 7): ")
        assert [outcome.decided_by == SCREENED for outcome in found.cases[:2]] == [True, True]
    result = run_instance(net_path, unsafe, 600, RunnerConfig())  # the competition's runner: sat, a witness
    assert result.result == "sat" and result.witness.x[0] <= 0.5 <= result.witness.x[1]
    _verify_on_the_command_line(net_path, unsafe, tmp_path / "record.json")


def _verify_on_the_command_line(net_path, unsafe, record_path) -> None:
    """`qverify verify` of a property of cases: UNSAFE naming case 3, the record's cases and times
    (the process, the screening, the pipeline), and `qverify show` of that record."""
    done = qverify("verify", str(net_path), "--property", str(unsafe), "--float", "--json", str(record_path))
    assert done.returncode == 10, done.stderr
    assert done.stdout.startswith("UNSAFE") and "case 3 of 3 (line 7)" in done.stdout
    data = json.loads(record_path.read_text())
    assert [case["decided_by"] == SCREENED for case in data["cases"]] == [True, True, False]
    assert {"process", "screening", "pipeline"} <= set(data["times_s"])
    shown = qverify("show", str(record_path)).stdout
    assert "screening" in shown and "case 3 of 3 (line 7)" in shown


def test_cases_left_without_time_make_a_timeout():
    """No time at all: no case runs, and the verdict is a timeout naming how many are open (the
    VNN-COMP runner reads `timeout` from its first word)."""
    net, _, implementation, prop = _instance(0, 3)
    record = verify_cases(net, prop, implementation, VerifyOptions(limits=Limits(timeout_s=1e-9)))
    assert record.status is Status.UNKNOWN
    assert record.reason.startswith("timeout: 3 of 3 cases undecided (case 1 of 3 (line 1): timeout: not run")
    assert [outcome.status for outcome in record.cases] == [Status.UNKNOWN] * 3
