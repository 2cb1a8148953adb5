"""The network level on int8 networks (requantization staircases), and int8 harnesses lifted.

Random small int8 models as a quantizer states them (`test_int8_oracle.random_int8_network`: int8 or
uint8 codes, per-tensor or per-channel weights, ReLU clamps) in both requantization modes:
- the staircase relaxation holds at every integer accumulator of its interval (checked exactly);
- every layer's bounds (one box, and a batch of boxes) contain every simulated execution of the box;
- `decide`'s verdicts agree with brute force (every input code of the box through `simulate`), and
  every UNSAFE is an exact violation;
- the codegen's own int8 harnesses are lifted to the query `query_for` builds: the same network and
  tables, the same verdict on every input (and the compiled C's), atoms over the output codes; an
  edited harness is declined; `check_file` decides them on the lifted path.
"""

from __future__ import annotations

import math
import shutil
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from qverify.codegen import run_lines
from qverify.engine import EngineStatus, check_file
from qverify.engine.netlevel import search
from qverify.engine.netlevel.attack import _lattice
from qverify.engine.netlevel.bounds import batch_bounds, node_bounds, with_phase
from qverify.engine.netlevel.lift import lift_file
from qverify.engine.netlevel.model import build_model, unsupported_reason
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, Arithmetic, NetworkQuery, query_for
from qverify.engine.netlevel.search import decide
from qverify.engine.result import Recorder
from qverify.errors import RangeError
from qverify.network import Activation, CodeType, Conv2D, Dense, MaxPool2D, Network
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    ImplementationOptions,
    Int8Format,
    QuantizedNetwork,
    RequantMode,
    quantize_network,
    simulate,
)
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from tests.conftest import budgeted
from tests.test_engine_oracle import seeded_instances
from tests.test_int8_oracle import make_instance, random_int8_network

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"
MODES = (RequantMode.ONNXRUNTIME, RequantMode.TFLITE)


def _int8_net(rng: np.random.Generator, sizes: tuple[int, ...], mode: RequantMode) -> QuantizedNetwork:
    for _ in range(20):
        try:
            return quantize_network(random_int8_network(rng, sizes), ImplementationOptions(Int8Format(mode)))
        except RangeError:  # an accumulator that could leave int32: draw again
            continue
    raise RuntimeError("no int8 network")


def _code_box(rng: np.random.Generator, qnet: QuantizedNetwork, span: int) -> tuple[list[int], list[int]]:
    code = qnet.input_quant.code
    lo = [int(rng.integers(code.qmin, code.qmax - span + 1)) for _ in range(qnet.n_inputs)]
    return lo, [a + span for a in lo]


def _query(qnet: QuantizedNetwork, lo: list[int], hi: list[int], clauses: tuple[Clause, ...]) -> NetworkQuery:
    """The query of the real box whose points quantize to exactly the codes [lo, hi]."""
    quant = qnet.input_quant
    box = Box(
        tuple((a - quant.zero_point) * Fraction(quant.scale) for a in lo),
        tuple((b - quant.zero_point) * Fraction(quant.scale) for b in hi),
    )
    query = query_for(qnet, Property("int8", (box,), OutputCondition(clauses)))
    assert list(query.regions[0].lo) == lo and list(query.regions[0].hi) == hi
    return query


def _output_real(qnet: QuantizedNetwork, code: int) -> Fraction:
    out = qnet.output_quant
    return (code - out.zero_point) * Fraction(out.scale)


def _truth(query: NetworkQuery) -> bool:
    """Brute force: some input code of the box violates (outputs compared exactly: each distinct
    output vector once)?"""
    region = query.regions[0]
    outputs = simulate(query.qnet, enumerate_box(query.qnet, region.lo, region.hi)).outputs
    rows = np.unique(outputs, axis=0)
    return any(query.unsafe.violated_clause_exact(query.qnet.output_reals(row)) != -1 for row in rows)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_staircase_relaxation_holds_at_every_accumulator(mode, rng):
    """a acc + c <= code(acc) <= s acc + t at every integer of [L, U], exactly (a float64 slack
    near 0 is re-checked in rationals), on wide intervals and on narrow ones around thresholds; the
    same for every line of the convex hull the LP adds (`Staircase.hull_lines`)."""
    checked = 0
    for sizes in ((3, 6, 4), (2, 5, 3)):
        qnet = _int8_net(rng, sizes, mode)
        model = build_model(_query(qnet, *_code_box(rng, qnet, 1), ()))
        for layer, source in zip(model.layers, qnet.layers):
            stairs = layer.stairs
            table = stairs.table
            finite = table[(table > -(2.0**31)) & (table < 2.0**31 - 1)]
            for _ in range(6):
                centre = float(rng.choice(finite)) if finite.size else 0.0
                width = float(rng.choice([3, 40, 600, 3000]))
                lo = np.floor(centre - rng.uniform(0, width, layer.n_out))
                hi = lo + np.floor(rng.uniform(0, width, layer.n_out))
                a, c, s, t = stairs.relaxation(lo, hi)
                owner, slopes, offsets, upper = stairs.hull_lines(lo, hi, np.arange(layer.n_out))
                for j in range(layer.n_out):
                    acc = np.arange(lo[j], hi[j] + 1)
                    codes = stairs.codes(np.broadcast_to(acc[:, None], (len(acc), layer.n_out)))[:, j]
                    exact = simulate_codes(source, j, acc)
                    assert np.array_equal(codes, exact)
                    lines = [(a[j], c[j], 1), (s[j], t[j], -1)]
                    mine = owner == j
                    lines += [
                        (m, o, -1 if up else 1) for m, o, up in zip(slopes[mine], offsets[mine], upper[mine])
                    ]
                    for slope, intercept, sign in lines:
                        gap = sign * (codes - (slope * acc + intercept))
                        assert np.all(gap > -1e-6)
                        for z, code in zip(acc[gap < 1e-6], codes[gap < 1e-6]):
                            value = Fraction(slope) * int(z) + Fraction(intercept)
                            assert sign * (Fraction(int(code)) - value) >= 0
                    checked += len(acc)
    assert checked > 10_000


def simulate_codes(layer, neuron: int, acc: np.ndarray) -> np.ndarray:
    """The codes the simulator's table gives the neuron's accumulators."""
    from qverify.quant.affine import apply_thresholds

    table = layer.int8.table
    row = table[neuron if table.shape[0] > 1 else 0]
    return apply_thresholds(acc.astype(np.int64)[:, None], row[None, :], layer.int8.code.qmin)[:, 0]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_int8_bounds_contain_every_execution(mode, rng):
    """node_bounds and batch_bounds over code boxes contain every simulated accumulator and code."""
    for sizes, span in (((3, 6, 6, 3), 12), ((2, 5, 4, 2), 60)):
        for _ in range(3):
            qnet = _int8_net(rng, sizes, mode)
            boxes = [_code_box(rng, qnet, span) for _ in range(3)]
            model = build_model(_query(qnet, *boxes[0], ()))
            xl = np.array([lo for lo, _ in boxes], dtype=np.float64)
            xu = np.array([hi for _, hi in boxes], dtype=np.float64)
            batch = batch_bounds(model, xl, xu, None, None)
            assert not batch.empty.any() and not any(free.any() for free in batch.free)
            for b, (lo, hi) in enumerate(boxes):
                grid = enumerate_box(qnet, np.array(lo), np.array(hi))
                run = simulate(qnet, grid, trace=True)
                phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
                single = node_bounds(model, xl[b], xu[b], phases)
                h = grid.astype(np.float64)
                for k, layer in enumerate(model.layers):
                    acc = h @ layer.weights.T + layer.bias
                    codes = run.layers[k].post.astype(np.float64)
                    assert np.array_equal(layer.stairs.codes(acc), codes)
                    for pre_lo, pre_hi, post in (
                        (single.pre_lo[k], single.pre_hi[k], single.post(model, k)),
                        (batch.pre_lo[k][b], batch.pre_hi[k][b], batch.box(b).post(model, k)),
                    ):
                        assert np.all(acc >= pre_lo) and np.all(acc <= pre_hi)
                        assert np.all(codes >= post[0]) and np.all(codes <= post[1])
                    h = codes


def _decide(query: NetworkQuery):
    options = budgeted()
    return decide(query, options, time.monotonic() + options.timeout_s, Recorder())


# (10 inputs: more than input splitting's batched range, still input splitting for int8)
VERDICT_SHAPES = (((2, 5, 3), 255), ((3, 6, 6, 2), 30), ((4, 8, 8, 3), 12), ((10, 8, 3), 2))


def _verdict_cases(rng: np.random.Generator, count: int, shapes=VERDICT_SHAPES):
    """Queries around the true maximum of output 0 (at it: UNSAFE; one code above: SAFE), and
    robustness-style clauses (Y_k > Y_label), on boxes with more inputs than one enumeration."""
    for index in range(count):
        sizes, span = shapes[index % len(shapes)]
        qnet = _int8_net(rng, sizes, MODES[(index // len(shapes)) % 2])
        lo, hi = _code_box(rng, qnet, span)
        grid = enumerate_box(qnet, np.array(lo), np.array(hi))
        outputs = simulate(qnet, grid).outputs
        top = int(outputs[:, 0].max())
        for offset in (0, 1):
            threshold = _output_real(qnet, top + offset)
            yield _query(qnet, lo, hi, (Clause((Atom(((0, Fraction(1)),), -threshold, Relation.GE),)),))
        label = int(np.argmax(outputs[len(outputs) // 2]))
        clauses = tuple(
            Clause((Atom(((k, Fraction(1)), (label, Fraction(-1))), Fraction(0), Relation.GT),))
            for k in range(qnet.n_outputs)
            if k != label
        )
        yield _query(qnet, lo, hi, clauses)


def _check_verdicts(rng: np.random.Generator, count: int, shapes=VERDICT_SHAPES) -> Counter:
    """(the verdicts' counts summed: MILPs, value splits)"""
    wrong, split, verdicts, counts = [], 0, set(), Counter()
    for query in _verdict_cases(rng, count, shapes):
        assert unsupported_reason(query) is None
        result = _decide(query)
        assert result.status is not EngineStatus.UNKNOWN, result.reason
        verdicts.add(result.status)
        split += result.counts.get("netlevel.nodes", 0) > 1
        counts.update(result.counts)
        if (result.status is EngineStatus.UNSAFE) != _truth(query):
            wrong.append((query.unsafe.clauses[0].text(), result))
        if result.status is EngineStatus.UNSAFE:
            assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
    assert not wrong
    assert verdicts == {EngineStatus.SAFE, EngineStatus.UNSAFE}
    # some verdicts needed the branch and bound (or the root's MILP)
    assert split > 0 or counts["netlevel.milp"] > 0
    return counts


@pytest.mark.slow
def test_int8_root_milp_verdicts_agree_with_brute_force(rng, monkeypatch, phase_splitting_above_8_inputs):
    """High-dimensional int8 roots (10 and 12 inputs: above the pinned input-splitting range) with
    the MILP of `Search.by_stepped_milp` made to run on every open root whatever its gap: the
    verdicts agree with brute force, and the MILP did run (~3 min under load: slow;
    `test_int8_milp_is_exact_on_conv_pool_dense` checks the encoding itself in the default run)."""
    monkeypatch.setattr(search, "STEPPED_MILP_CODES", np.inf)
    assert _check_verdicts(rng, 6, (((10, 8, 8, 3), 3), ((11, 12, 8, 3), 2)))["netlevel.milp"] > 0


# (9-14 inputs: above the pinned input-splitting range; boxes of 2^12 to 3^10 input codes)
THRESHOLD_SPLIT_SHAPES = (
    ((9, 8, 6, 3), 2),
    ((10, 8, 8, 3), 2),
    ((12, 10, 6, 3), 1),
    ((10, 12, 8, 3), 2),
    ((14, 6, 3), 1),
    ((9, 16, 3), 2),
)


def test_int8_threshold_splitting_verdicts_agree_with_brute_force(
    rng, monkeypatch, phase_splitting_above_8_inputs
):
    """High-dimensional int8 queries searched by splitting requantizations at thresholds (the box
    never split while a staircase can be: `TABLE_SPLIT_MIN_POINTS` made small, as an image's box is
    too large to enumerate): every verdict agrees with brute force over every input code, every
    UNSAFE is an exact violation, and threshold splits decided some SAFE queries. A query may end
    at the node budget: where a neuron's interval spans many steps, making it exact costs about a
    child per step (what it does on these random networks' wide accumulators)."""
    monkeypatch.setattr(search, "TABLE_SPLIT_MIN_POINTS", 16)
    options = budgeted(max_nodes=400)
    wrong, decided_by_splits = [], 0
    for query in _verdict_cases(rng, 39, THRESHOLD_SPLIT_SHAPES):
        result = decide(query, options, time.monotonic() + options.timeout_s, Recorder())
        if result.status is EngineStatus.UNKNOWN:
            assert "node budget" in result.reason
            continue
        if (result.status is EngineStatus.UNSAFE) != _truth(query):
            wrong.append((query.unsafe.clauses[0].text(), result))
        if result.status is EngineStatus.UNSAFE:
            assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
        decided_by_splits += result.counts.get("netlevel.value_splits", 0) > 0
    assert not wrong
    assert decided_by_splits >= 2


def test_lattice_refutation_is_exact_on_the_margins_values(rng):
    """`OnLattice.refutes` against exact rationals: for margins sum c_i q_i + d over integer q
    (coefficients multiples of a scale, constants on and off the lattice, strict and not), a bound
    L refutes iff the least value g can take at or above L is > 0 (>= 0 strict); never wrongly, and
    always where L is not within 1e-6 of a unit from one of g's values."""
    checked = 0
    for _ in range(150):
        scale = Fraction(int(rng.integers(1, 1000)), int(rng.choice([7, 64, 997])))
        multiples = [int(rng.integers(-2, 3)) for _ in range(3)]
        if not any(multiples):
            continue
        exact = [m * scale for m in multiples]
        unit = math.gcd(*multiples) * scale
        constant = (
            int(rng.integers(-40, 40)) * scale
            if rng.random() < 0.5
            else Fraction(int(rng.integers(-9000, 9000)), 977)
        )
        strict = bool(rng.random() < 0.5)
        lattice = _lattice(exact, constant, strict)
        values = [constant + k * unit for k in range(-60, 60)]
        bounds = [float(constant + unit * Fraction(float(x))) for x in rng.uniform(-50, 50, 20)]
        for bound in [*bounds, *(float(v) for v in values[50:70])]:
            least = min(v for v in values if v >= Fraction(bound))
            truth = least >= 0 if strict else least > 0
            refuted = bool(lattice.refutes(np.array([bound]))[0])
            assert truth or not refuted
            near = min(abs(Fraction(bound) - v) for v in values) < unit * Fraction(1, 10**6)
            assert refuted == truth or near
            checked += 1
    assert checked > 4_000


def test_int8_thresholds_between_codes_agree_with_brute_force(rng):
    """Thresholds half a code above and below output 0's largest value, and strict atoms at it and
    one code below (where `OnLattice` moves a bound to the next value the margin takes): the
    verdicts agree with brute force and every UNSAFE replays."""
    wrong, cases = [], 0
    for index in range(6):
        sizes, span = VERDICT_SHAPES[index % 3]
        qnet = _int8_net(rng, sizes, MODES[index % 2])
        lo, hi = _code_box(rng, qnet, span)
        outputs = simulate(qnet, enumerate_box(qnet, np.array(lo), np.array(hi))).outputs
        top = int(outputs[:, 0].max())
        half = Fraction(qnet.output_quant.scale) / 2
        for threshold, relation in (
            (_output_real(qnet, top) + half, Relation.GE),
            (_output_real(qnet, top) - half, Relation.GE),
            (_output_real(qnet, top), Relation.GT),
            (_output_real(qnet, top - 1), Relation.GT),
        ):
            query = _query(qnet, lo, hi, (Clause((Atom(((0, Fraction(1)),), -threshold, relation),)),))
            result = _decide(query)
            assert result.status is not EngineStatus.UNKNOWN, result.reason
            if (result.status is EngineStatus.UNSAFE) != _truth(query):
                wrong.append((query.unsafe.clauses[0].text(), result))
            if result.status is EngineStatus.UNSAFE:
                assert query.violation(np.array(result.counterexample)) != NO_VIOLATION
            cases += 1
    assert not wrong and cases == 24


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_threshold_split_children_hold_their_executions(mode, rng):
    """A requantization neuron split at `Stairs.split_value` (half a unit below a threshold in its
    interval): the children's intervals at the neuron are the parent's integers below and from
    that threshold of the neuron's own table, and each child's bounds, the layers after the split
    bounded again, contain every simulated execution on its side."""
    checked = 0
    for sizes, span in (((3, 6, 6, 3), 12), ((2, 5, 4, 2), 60)):
        qnet = _int8_net(rng, sizes, mode)
        lo, hi = _code_box(rng, qnet, span)
        model = build_model(_query(qnet, lo, hi, ()))
        xl, xu = np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        parent = node_bounds(model, xl, xu, phases)
        grid = enumerate_box(qnet, np.array(lo), np.array(hi))
        run = simulate(qnet, grid, trace=True)
        accumulators, h = [], grid.astype(np.float64)
        for k, layer in enumerate(model.layers):
            accumulators.append(h @ layer.weights.T + layer.bias)
            h = run.layers[k].post.astype(np.float64)
        for k, layer in enumerate(model.layers):
            pre_lo, pre_hi = parent.pre_lo[k], parent.pre_hi[k]
            at = layer.activation.split_value(pre_lo, pre_hi, layer.stairs.grid)
            for j in np.flatnonzero(layer.open_neurons(pre_lo, pre_hi)):
                threshold = at[j] + 0.5
                assert threshold == np.floor(threshold)
                assert pre_lo[j] < threshold <= pre_hi[j] and threshold in layer.stairs.table[j]
                for phase, side in (
                    (-1, accumulators[k][:, j] < threshold),
                    (1, accumulators[k][:, j] >= threshold),
                ):
                    child = with_phase(model, parent, k, int(j), phase, float(at[j]))
                    if child is None:
                        assert not side.any()
                        continue
                    if phase < 0:
                        assert child.pre_hi[k][j] == threshold - 1
                    else:
                        assert child.pre_lo[k][j] == threshold
                    child = node_bounds(model, xl, xu, phases, child, k + 1)
                    assert child is not None or not side.any()
                    if child is None:
                        continue
                    for later in range(k, len(model.layers)):
                        acc = accumulators[later][side]
                        assert np.all(acc >= child.pre_lo[later]) and np.all(acc <= child.pre_hi[later])
                    checked += int(side.sum())
    assert checked > 1_000


def test_int8_verdicts_agree_with_brute_force(rng):
    _check_verdicts(rng, 8)


@pytest.mark.slow
def test_int8_verdicts_agree_with_brute_force_more(rng):
    _check_verdicts(np.random.default_rng(99), 60)


def test_int8_in_real_arithmetic_is_declined(rng):
    qnet = _int8_net(rng, (2, 3, 2), RequantMode.ONNXRUNTIME)
    query = _query(qnet, *_code_box(rng, qnet, 4), ())
    real = NetworkQuery(qnet, query.regions, query.unsafe, Arithmetic.REAL)
    assert "int8" in unsupported_reason(real)


# ------------------------------------------------------------------ lifted harnesses

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
LIFT_SEEDS = range(6)


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory):
    return seeded_instances(tmp_path_factory.mktemp("int8-lift"), make_instance)


def _codes_sample(query: NetworkQuery, rng: np.random.Generator, n: int) -> np.ndarray:
    """Input codes in the box (most) and anywhere in the code range."""
    code = query.qnet.input_quant.code
    region = query.regions[0]
    inside = rng.integers(region.lo, region.hi + 1, size=(n, query.n_inputs))
    anywhere = rng.integers(code.qmin, code.qmax + 1, size=(n // 4, query.n_inputs))
    return np.vstack([inside, anywhere, region.lo[None], region.hi[None]])


@needs_gcc
@pytest.mark.parametrize("seed", LIFT_SEEDS)
@pytest.mark.parametrize("annotated", [False, True], ids=["plain", "invariants"])
def test_lifted_int8_harness_is_the_codegen_query(harnesses, seed, annotated, rng):
    instance = harnesses(seed)
    lifted = lift_file(instance.annotated if annotated else instance.harness, [MODELS_C])
    assert lifted.lifted, lifted.reason
    query = lifted.query
    expected = query_for(instance.qnet, instance.prop)
    qnet, original = query.qnet, expected.qnet
    assert qnet.input_quant.code is original.input_quant.code
    for mine, theirs in zip(qnet.layers, original.layers, strict=True):
        assert np.array_equal(mine.weights, theirs.weights) and np.array_equal(mine.bias, theirs.bias)
        assert np.array_equal(mine.int8.table, theirs.int8.table)
        assert mine.int8.input_zero == theirs.int8.input_zero
    assert [(r.lo.tolist(), r.hi.tolist()) for r in query.regions] == [
        (r.lo.tolist(), r.hi.tolist()) for r in expected.regions
    ]
    assert (query.invariants is not None) == annotated
    x = _codes_sample(query, rng, 120)
    assert np.array_equal(simulate(qnet, x).outputs, simulate(original, x).outputs)
    mine = [query.violation(row) for row in x]
    assert mine == [expected.violation(row) for row in x]
    lines = run_lines(instance.executable, [" ".join(map(str, row)) for row in x])
    for row, outcome, line in zip(x, mine, lines):
        inside = bool(np.all((row >= query.regions[0].lo) & (row <= query.regions[0].hi)))
        if not inside:
            assert line == "ASSUME-FAILED"
        elif outcome == NO_VIOLATION:
            assert line == "HOLDS"
        else:
            assert line == f"VIOLATED {query.violation_message(outcome)}"


@needs_gcc
@pytest.mark.parametrize("seed", LIFT_SEEDS)
def test_int8_harnesses_are_decided_on_the_lifted_path(harnesses, seed):
    """check_file lifts the harness and the network level decides it (the verdicts themselves are
    the brute-force oracle's, tests/test_int8_oracle.py)."""
    instance = harnesses(seed)
    result = check_file(instance.harness, [MODELS_C], budgeted())
    assert result.counts.get("front_end") == 1, result.notes
    assert result.decided_by.startswith("netlevel"), (result.decided_by, result.notes)
    assert result.status.value == instance.truth


@needs_gcc
@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("qv_requant(acc, qv_t1[", "qv_requant(acc + 1, qv_t1[", "qv_requant"),
        ("((int32_t)x[i] - ", "((int32_t)x[0] - ", "IN[i]"),
        ("(qv_num)(", "(int8_t)(", "cast to qv_num"),
        ("int32_t acc = qv_b1[j];", "int32_t acc = qv_b1[0];", "B[j]"),
    ],
)
def test_edited_int8_harness_falls_back(harnesses, old, new, reason, tmp_path):
    instance = harnesses(0)
    text = instance.harness.read_text()
    assert old in text
    edited = tmp_path / "harness.c"
    edited.write_text(text.replace(old, new, 1))
    result = lift_file(edited, [MODELS_C])
    assert not result.lifted and reason in result.reason, result.reason


@needs_gcc
def test_unsorted_int8_table_falls_back(harnesses, tmp_path):
    instance = harnesses(0)
    text = instance.harness.read_text()
    table = text.index("static const int32_t qv_t1")
    start = text.index("{", text.index("{", table) + 1) + 1
    end = text.index("}", start)
    values = [part.strip() for part in text[start:end].split(",")]
    assert len(set(values)) > 1
    edited = tmp_path / "harness.c"
    edited.write_text(text[:start] + ", ".join(reversed(values)) + text[end:])
    result = lift_file(edited, [MODELS_C])
    assert not result.lifted and "not sorted" in result.reason, result.reason


def _int8_conv_model(tmp_path: Path, per_channel: bool, codes: CodeType) -> QuantizedNetwork:
    """Conv (padded, stride 2) + ReLU -> max pool (padded) -> grouped conv -> dense, quantized by
    onnxruntime's static quantizer (QOperator) on uniform calibration samples."""
    rng = np.random.default_rng(11)
    first = Conv2D(
        rng.uniform(-1, 1, (4, 2, 3, 3)),
        rng.uniform(-0.5, 0.5, 4),
        Activation.RELU,
        (2, 7, 7),
        (2, 2),
        (1, 1, 1, 1),
    )
    pool = MaxPool2D(first.output_shape, (2, 2), (1, 1), (1, 1, 0, 0))
    second = Conv2D(
        rng.uniform(-1, 1, (4, 2, 2, 2)),
        rng.uniform(-0.5, 0.5, 4),
        Activation.IDENTITY,
        pool.output_shape,
        groups=2,
    )
    dense = Dense(rng.uniform(-1, 1, (3, second.n_out)), rng.uniform(-1, 1, 3), Activation.IDENTITY)
    net = Network((first, pool, second, dense), name="int8-conv")
    settings = QuantizeSettings(QuantFormat.QOP, per_channel, codes)
    model = quantize_with_onnxruntime(
        net, rng.uniform(0, 1, (200, net.n_inputs)), settings, tmp_path / "m.onnx"
    )
    return quantize_network(model, ImplementationOptions(Int8Format()))


INT8_CNNS = [
    ("digits-cnn", "digits_cnn.int8.onnx"),
    ("digits-cnn-per-channel", "digits_cnn.int8-pc.onnx"),
    ("grouped-int8", (False, CodeType.INT8)),
    ("grouped-uint8-per-channel", (True, CodeType.UINT8)),
]


@needs_gcc
@pytest.mark.parametrize(("name", "model"), INT8_CNNS, ids=[case[0] for case in INT8_CNNS])
@pytest.mark.parametrize("annotated", [False, True], ids=["plain", "invariants"])
def test_int8_cnn_harness_is_lifted(tmp_path, name, model, annotated):
    """int8 convolutions (padded, strided, grouped; per tensor and per channel; int8 and uint8 codes)
    and max pools are lifted: the same integers, tables, zero points and geometry as the codegen's
    network, the same outputs and violations on sampled codes, and gcc's replay agrees."""
    from qverify.codegen import compile_replay, render_harness
    from qverify.invariants import IntervalMethod, compute_bounds
    from qverify.io import load_network
    from qverify.properties import robustness

    if isinstance(model, str):
        qnet = quantize_network(
            load_network(ROOT / "benchmarks" / "digits-cnn" / model), ImplementationOptions(Int8Format())
        )
    else:
        qnet = _int8_conv_model(tmp_path, *model)
    centre = np.random.default_rng(3).uniform(0.3, 0.7, qnet.n_inputs)
    prop = robustness([str(v) for v in centre], "0.06", 0, qnet.n_outputs)
    bounds = compute_bounds(qnet, prop, IntervalMethod.BUILTIN, symbolic=False).bounds if annotated else None
    harness = render_harness(qnet, prop, bounds).write(tmp_path)
    result = lift_file(harness, [MODELS_C])
    assert result.lifted, result.reason
    query, expected = result.query, query_for(qnet, prop)
    for mine, theirs in zip(query.qnet.layers, qnet.layers, strict=True):
        assert type(mine.source) is type(theirs.source)
        assert mine.source.describe() == theirs.source.describe()
        assert np.array_equal(mine.weights, theirs.weights) and np.array_equal(mine.bias, theirs.bias)
        if theirs.int8.table is None:
            assert mine.int8.table is None
            continue
        assert np.array_equal(mine.int8.table, theirs.int8.table)
        assert mine.int8.input_zero == theirs.int8.input_zero
        assert np.array_equal(mine.int8.acc_lo, theirs.int8.acc_lo) and np.array_equal(
            mine.int8.acc_hi, theirs.int8.acc_hi
        )
    assert [(r.lo.tolist(), r.hi.tolist()) for r in query.regions] == [
        (r.lo.tolist(), r.hi.tolist()) for r in expected.regions
    ]
    assert (query.invariants is not None) == annotated
    x = _codes_sample(query, np.random.default_rng(4), 160)
    assert np.array_equal(simulate(query.qnet, x).outputs, simulate(qnet, x).outputs)
    outcomes = [query.violation(row) for row in x]
    assert outcomes == [expected.violation(row) for row in x]
    assert len(set(outcomes)) >= 2, "the sample must end both ways"
    lines = run_lines(compile_replay(harness), [" ".join(map(str, row)) for row in x])
    for row, outcome, line in zip(x, outcomes, lines):
        inside = bool(np.all((row >= query.regions[0].lo) & (row <= query.regions[0].hi)))
        want = (
            "ASSUME-FAILED"
            if not inside
            else "HOLDS"
            if outcome == NO_VIOLATION
            else f"VIOLATED {query.violation_message(outcome)}"
        )
        assert line == want


@needs_gcc
def test_edited_int8_cnn_harness_falls_back(tmp_path):
    """Edited int8 convolution and pool loops are declined with the reason."""
    from qverify.codegen import render_harness
    from qverify.io import load_network
    from qverify.properties import robustness

    qnet = quantize_network(
        load_network(ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.int8-pc.onnx"),
        ImplementationOptions(Int8Format()),
    )
    prop = robustness([str(0.5)] * qnet.n_inputs, "0.05", 0, qnet.n_outputs)
    edits = [
        ("qv_requant(acc, qv_t1[oc])", "qv_requant(acc, qv_t1[ox])", "T[j] or T[0]"),
        ("iy = oy * 1 + ky - 0;", "iy = oy * 1 + ky - 1;", "reads outside its input"),
        ("(int32_t)qv_w1[oc][ic][ky][kx]", "(int32_t)qv_w1[oc][ic][kx][ky]", "indexed"),
        ("int32_t acc = qv_b1[oc];", "int32_t acc = qv_b1[0];", "B[oc]"),
        ("} else if (v > acc) {", "} else if (v >= acc + 1) {", "max pool"),
    ]
    for old, new, reason in edits:
        harness = render_harness(qnet, prop).write(tmp_path)
        text = harness.read_text()
        assert old in text, old
        harness.write_text(text.replace(old, new, 1))
        result = lift_file(harness, [MODELS_C])
        assert not result.lifted and reason in result.reason, (old, result.reason)


def test_int8_x86_pair_saturating_sums_are_declined(rng):
    """`--format int8-x86`: a layer whose pair sums can saturate at int16 has no exact accumulator,
    so the network level declines it (the scalar path executes `qv_sat16`)."""
    from qverify.quant import Int8Kernel

    for _ in range(40):
        net = random_int8_network(rng, (4, 6, 3))
        try:
            qnet = quantize_network(net, ImplementationOptions(Int8Format(kernel=Int8Kernel.X86)))
        except RangeError:
            continue
        if any(layer.int8.paired is not None for layer in qnet.layers):
            query = _query(qnet, *_code_box(rng, qnet, 2), ())
            assert "int8-x86" in unsupported_reason(query)
            return
    pytest.fail("no random network with pair-saturating sums")


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_staircase_sides_are_the_exact_extreme_deviations(mode, rng):
    """`Staircase.sides` (alpha-CROWN's per-row lines, read through each neuron's window of
    thresholds): for random slopes per row, c and t are the least and largest deviation of the
    codes from the lines over every integer of [L, U] (less or plus the float64 charge, far below
    one code), and zeta, xi points of [L, U] where they are reached."""
    checked = 0
    qnet = _int8_net(rng, (3, 6, 4), mode)
    model = build_model(_query(qnet, *_code_box(rng, qnet, 1), ()))
    for layer in model.layers:
        stairs = layer.stairs
        table = stairs.table
        finite = table[(table > -(2.0**31)) & (table < 2.0**31 - 1)]
        for width in (3, 40, 600, 3000):
            centre = float(rng.choice(finite)) if finite.size else 0.0
            lo = np.floor(centre - rng.uniform(0, width, layer.n_out))
            hi = lo + np.floor(rng.uniform(0, width, layer.n_out))
            scale = stairs.slope_scale(lo, hi)
            lower = rng.uniform(0, 2, (5, layer.n_out)) * scale
            upper = rng.uniform(0, 2, (5, layer.n_out)) * scale
            c, t, zeta, xi = stairs.sides(lower, upper, lo, hi)
            for j in range(layer.n_out):
                acc = np.arange(lo[j], hi[j] + 1)
                codes = stairs.codes(np.broadcast_to(acc[:, None], (len(acc), layer.n_out)))[:, j]
                for row in range(5):
                    below = codes - lower[row, j] * acc
                    above = codes - upper[row, j] * acc
                    assert below.min() - 1e-6 <= c[row, j] <= below.min()
                    assert above.max() <= t[row, j] <= above.max() + 1e-6
                    assert lo[j] <= zeta[row, j] <= hi[j] and lo[j] <= xi[row, j] <= hi[j]
                    at = np.searchsorted(acc, [zeta[row, j], xi[row, j]])
                    assert below[at[0]] == pytest.approx(below.min(), abs=1e-6)
                    assert above[at[1]] == pytest.approx(above.max(), abs=1e-6)
                checked += len(acc)
    assert checked > 5_000


def test_staircase_relaxation_of_a_batch_is_each_box_s(rng, monkeypatch):
    """A batch of boxes (bounds (B, n)) gets each box's own lines, also when the thresholds'
    windows are found a few neurons at a time (`RELAXATION_CHUNK_VALUES` made small)."""
    from qverify.engine.netlevel import staircase

    qnet = _int8_net(rng, (3, 6, 4), RequantMode.ONNXRUNTIME)
    model = build_model(_query(qnet, *_code_box(rng, qnet, 1), ()))
    stairs = model.layers[0].stairs
    finite = stairs.table[(stairs.table > -(2.0**31)) & (stairs.table < 2.0**31 - 1)]
    centre = float(np.median(finite))
    lo = np.floor(centre - rng.uniform(0, 600, (5, model.layers[0].n_out)))
    hi = lo + np.floor(rng.uniform(0, 600, lo.shape))
    alone = [stairs.relaxation(lo[b], hi[b]) for b in range(len(lo))]
    for chunk in (staircase.RELAXATION_CHUNK_VALUES, 300):
        monkeypatch.setattr(staircase, "RELAXATION_CHUNK_VALUES", chunk)
        together = stairs.relaxation(lo, hi)
        for b, lines in enumerate(alone):
            for mine, theirs in zip(lines, together):
                assert np.array_equal(mine, theirs[b])


def _output_differences_case(rng: np.random.Generator, mode: RequantMode):
    """A random 3-16-16-4 int8 network on a box of 25 codes per input: (qnet, lo, hi, model, xl,
    xu, phases, the root's bounds, the rows Y_i - Y_j of every ordered pair of outputs)."""
    qnet = _int8_net(rng, (3, 16, 16, 4), mode)
    lo, hi = _code_box(rng, qnet, 24)
    model = build_model(_query(qnet, lo, hi, ()))
    xl, xu = np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    bounds = node_bounds(model, xl, xu, phases)
    eye = np.eye(model.layers[-1].n_out)
    rows = np.array([eye[i] - eye[j] for i in range(len(eye)) for j in range(len(eye)) if i != j])
    return qnet, lo, hi, model, xl, xu, phases, bounds, rows


def test_optimised_staircase_slopes_improve_on_deeppoly_within_a_nodes_steps():
    """alpha-CROWN over the staircases' slopes (`optimised_bound`, the search's `ALPHA_STEPS` a
    node): every output difference's bound stays below its true minimum over every input code, and
    improves on DeepPoly's lines on nearly every row. Sign steps of half a slope unit, as the
    ReLUs' alphas take, improved 69 of these 102 rows (none on digits32rgb-conv's root); the
    staircases' own schedule (`STAIR_STEP`) improves 97."""
    from qverify.engine.netlevel.bounds import backsubstitute, optimised_bound

    rng = np.random.default_rng(1)  # the figures above are of these networks
    improved = rows_open = 0
    for mode in MODES:
        for _ in range(6):
            qnet, lo, hi, model, xl, xu, _, bounds, rows = _output_differences_case(rng, mode)
            last = len(model.layers) - 1
            deeppoly = backsubstitute(model, bounds, rows, last, True, xl, xu, keep=True)
            optimised = optimised_bound(model, bounds, rows, xl, xu, search.ALPHA_STEPS, deeppoly)
            outputs = simulate(qnet, enumerate_box(qnet, np.array(lo), np.array(hi))).outputs
            truth = (outputs.astype(np.float64) @ rows.T).min(axis=0)
            assert np.all(optimised.lower <= truth) and np.all(optimised.lower >= deeppoly.lower)
            gap = truth - deeppoly.lower > 1e-6
            rows_open += int(gap.sum())
            improved += int((optimised.lower > deeppoly.lower + 1e-9)[gap].sum())
    assert rows_open > 80
    assert improved >= 0.9 * rows_open


def test_children_warm_started_from_their_parents_slopes():
    """int8 nodes start alpha-CROWN from their parent's optimised staircase slopes
    (`optimised_bound`'s `warm`, carried on `Node.alphas`). Children of a threshold split bounded
    both ways: every bound lies below the minimum over the child's own executions, and the warm
    start bounds more rows better than worse (on these networks 345 against 128)."""
    from qverify.engine.netlevel.bounds import optimised_bound

    rng = np.random.default_rng(2)  # the figures above are of these networks
    better = worse = children = 0
    for mode in MODES:
        for _ in range(6):
            qnet, lo, hi, model, xl, xu, phases, root, rows = _output_differences_case(rng, mode)
            warm: dict[int, np.ndarray] = {}
            optimised_bound(model, root, rows, xl, xu, search.ALPHA_STEPS, warm=warm)
            assert warm and all(v.shape == (len(rows), 2 * model.layers[k].n_out) for k, v in warm.items())
            grid = enumerate_box(qnet, np.array(lo), np.array(hi))
            outputs = simulate(qnet, grid).outputs.astype(np.float64)
            layer = model.layers[0]
            accumulators = grid.astype(np.float64) @ layer.weights.T + layer.bias
            at = layer.activation.split_value(root.pre_lo[0], root.pre_hi[0], layer.stairs.grid)
            for j in np.flatnonzero(layer.open_neurons(root.pre_lo[0], root.pre_hi[0]))[:3]:
                threshold = at[j] + 0.5
                for phase, side in (
                    (-1, accumulators[:, j] < threshold),
                    (1, accumulators[:, j] >= threshold),
                ):
                    child = with_phase(model, root, 0, int(j), phase, float(at[j]))
                    child = None if child is None else node_bounds(model, xl, xu, phases, child, 1)
                    if child is None or not side.any():
                        continue
                    cold = optimised_bound(model, child, rows, xl, xu, search.ALPHA_STEPS)
                    hot = optimised_bound(model, child, rows, xl, xu, search.ALPHA_STEPS, warm=dict(warm))
                    truth = (outputs[side] @ rows.T).min(axis=0)
                    assert np.all(hot.lower <= truth) and np.all(cold.lower <= truth)
                    better += int((hot.lower > cold.lower + 1e-9).sum())
                    worse += int((hot.lower < cold.lower - 1e-9).sum())
                    children += 1
    assert children > 40
    assert better > 2 * worse
