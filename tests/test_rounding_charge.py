"""Issue 45, items 1 and 2, against brute force: what the network level now reads of the fixed-point and
int8 roundings must hold for every execution of enumerated boxes.

- per-operand product roundings (`operand_rounding`): the table's lower bound of lam . e is at most
  lam . e of every execution, e the statement's exact rounding term (simulated words against the
  exact real sum), in every fixed-point rounding and overflow mode; whole back-substitutions with
  the tables contain every execution;
- staircases with per-row slopes (`Staircase.sides`): a z + c <= value(z) <= s z + t at every
  domain point of random intervals for random slopes (int8 requantizations, lookup tables in fixed
  point and float, and against the exact formula in real arithmetic);
- alpha-CROWN and alpha-beta-CROWN over staircases (`bounds.optimised_bound`,
  `bounds.tighten_intermediate`, `beta.optimise_output_bounds`): every bound contains every
  execution (int8, lookup tables);
- the MILP's exact staircases in every layer (`lp._exact_steps`, `lp._exact_choice`): never
  infeasible where an execution of the box violates the clause;
- the search on networks of more than 8 inputs (the high-dimensional path these run in): verdicts
  equal brute force, counterexamples are violations.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from qverify.engine.netlevel import operand_rounding
from qverify.engine.netlevel.beta import optimise_output_bounds
from qverify.engine.netlevel.bounds import backsubstitute, node_bounds, optimised_bound, tighten_intermediate
from qverify.engine.netlevel.lookup import lut_staircase
from qverify.engine.netlevel.lp import _exact_choice, solve_node
from qverify.engine.netlevel.model import build_model
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, query_for
from qverify.engine.netlevel.search import Search, decide
from qverify.engine.result import EngineStatus, Recorder
from qverify.engine.solvers.base import CheckStatus
from qverify.errors import RangeError
from qverify.network import Activation
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Int8Format,
    Overflow,
    RequantMode,
    Rounding,
    quantize_network,
    simulate,
)
from tests.conftest import budgeted, random_network
from tests.netlevel_reference import exact_table
from tests.test_int8_oracle import random_int8_network

FIXED = [
    ImplementationOptions(FixedFormat(4, 6)),
    ImplementationOptions(FixedFormat(4, 6, Rounding.FLOOR, Overflow.WRAP)),
    ImplementationOptions(FixedFormat(5, 3, overflow=Overflow.WRAP)),
    ImplementationOptions(FixedFormat(4, 4, overflow=Overflow.DETECT)),
    ImplementationOptions(FixedFormat(3, 5, Rounding.FLOOR)),
]
INT8 = [ImplementationOptions(Int8Format(mode)) for mode in (RequantMode.ONNXRUNTIME, RequantMode.TFLITE)]


def _property(lo, hi, threshold: Fraction, output: int = 0) -> Property:
    atoms = (Atom(((output, Fraction(1)),), -threshold, Relation.GE),)
    return Property("charge", (Box(tuple(lo), tuple(hi)),), OutputCondition((Clause(atoms),)))


def _fixed_box(rng, scale: int, n: int, words: int):
    start = rng.integers(-scale, scale, n)
    return [Fraction(int(v), scale) for v in start], [Fraction(int(v) + words - 1, scale) for v in start]


def _fixed_case(rng, options, sizes, words):
    qnet = quantize_network(random_network(rng, sizes, Activation.RELU, scale=0.7), options)
    lo, hi = _fixed_box(rng, qnet.number.scale, sizes[0], words)
    query = query_for(qnet, _property(lo, hi, Fraction(0)))
    model = build_model(query)
    region = query.regions[0]
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    bounds = node_bounds(model, xl, xu, phases, region_words=(region.lo, region.hi))
    grid = enumerate_box(qnet, region.lo, region.hi)
    return qnet, model, bounds, xl, xu, grid, simulate(qnet, grid, trace=True)


@pytest.mark.parametrize("options", FIXED, ids=lambda o: o.key())
def test_operand_tables_bound_every_rounding_term(options):
    """RoundingTable.lower(lam) <= lam . e for every execution, e = z - (W h + b) exactly."""
    rng = np.random.default_rng(4501)
    built = 0
    for sizes, words in (((3, 5, 4, 2), 9), ((2, 6, 3, 2), 30)):
        qnet, model, bounds, xl, xu, grid, run = _fixed_case(rng, options, sizes, words)
        if bounds is None:
            continue
        frac = qnet.number.frac_bits
        operands = grid.astype(np.int64)
        for k, layer in enumerate(qnet.layers):
            table = bounds.operand_table(model, k, xl, xu)
            if k > 0:
                operands = run.layers[k - 1].post.astype(np.int64)
            if table is None:
                continue
            built += 1
            weights = np.asarray(layer.weights, dtype=np.int64)
            bias = np.asarray(layer.bias, dtype=np.int64)
            exact = operands @ weights.T + (bias << frac)  # the real sum, in units of 2^-2l
            error = run.layers[k].pre.astype(np.int64) * (1 << frac) - exact
            related = ~bounds.free[k]
            fine = ~run.overflowed  # (an overflowing run leaves the statement: its neurons are free)
            lam = rng.normal(0, 1, (12, layer.n_out))
            lam[:4] = np.eye(layer.n_out)[rng.integers(layer.n_out, size=4)]
            lam[4:8] = -lam[:4]
            lam = np.where(related, lam, 0.0)
            lower = table.lower(lam)
            for r in range(len(lam)):
                values = [
                    sum(Fraction(int(e)) * Fraction(float(c)) for e, c in zip(row, lam[r]) if c)
                    / 2 ** (2 * frac)
                    for row in error[fine]
                ]
                if values:
                    assert Fraction(float(lower[r])) <= min(values), (k, r)
    assert built


@pytest.mark.parametrize("options", FIXED, ids=lambda o: o.key())
def test_backsubstitution_with_operand_tables_contains_every_execution(options):
    rng = np.random.default_rng(4502)
    for sizes, words in (((3, 5, 4, 2), 9), ((2, 6, 3, 2), 30)):
        _, model, bounds, xl, xu, _, run = _fixed_case(rng, options, sizes, words)
        fine = ~run.overflowed
        if bounds is None:
            assert not fine.any()
            continue
        unit = model.unit
        for k, trace in enumerate(run.layers):
            values = trace.pre[fine].astype(np.float64) * unit
            assert np.all(values >= bounds.pre_lo[k]) and np.all(values <= bounds.pre_hi[k]), k
            n = model.layers[k].n_out
            rows = np.vstack([np.eye(n), -np.eye(n), rng.normal(0, 1, (4, n))])
            lower = backsubstitute(model, bounds, rows, k, False, xl, xu).lower
            pres = trace.pre[fine].astype(np.float64) * unit
            assert np.all(pres @ rows.T >= lower - 1e-12), k
            if k == 0 and fine.all() and options.number.overflow is not Overflow.WRAP:
                # the input layer's roundings and the input's linear part minimised together
                # (`RoundingTable.joint_lower`): z_0 = b + sum_i (w_i x_i + d_i(x_i)) is a sum of
                # functions of one input each, so its least value over the box is found exactly
                assert np.all(lower >= (pres @ rows.T).min(axis=0) - 1e-9), k


def _int8_net(rng, sizes):
    for _ in range(30):
        try:
            return quantize_network(random_int8_network(rng, sizes), INT8[int(rng.integers(2))])
        except RangeError:
            continue
    raise AssertionError("no int8 network")


def _stairs_cases(rng):
    """(name, staircase, grid: the domain's spacing (0: the reals), qnet, activation) cases."""
    qnet = _int8_net(rng, (3, 6, 2))
    yield (
        "int8",
        build_model(query_for(qnet, _property([Fraction(0)] * 3, [Fraction(0)] * 3, Fraction(0))))
        .layers[0]
        .stairs,
        1.0,
        None,
        None,
    )
    for options, activation in (
        (ImplementationOptions(FixedFormat(6, 8)), Activation.SIGMOID),
        (ImplementationOptions(FixedFormat(4, 6)), Activation.TANH),
        (ImplementationOptions(FloatFormat(FloatKind.FLOAT)), Activation.SIGMOID),
    ):
        table_net = quantize_network(random_network(rng, (2, 3, 1), activation, 0.8), options)
        stairs = lut_staircase(table_net, activation, False)
        yield f"{options.key()}-{activation.value}", stairs, stairs.grid, table_net, activation
    table_net = quantize_network(
        random_network(rng, (2, 3, 1), Activation.SIGMOID, 0.8),
        ImplementationOptions(FloatFormat(FloatKind.FLOAT)),
    )
    yield (
        "real-sigmoid",
        lut_staircase(table_net, Activation.SIGMOID, True),
        0.0,
        table_net,
        Activation.SIGMOID,
    )


def test_staircase_lines_of_any_slope_hold():
    """Staircase.sides: random per-row slopes (0, tiny, around the scale, large) on random intervals."""
    rng = np.random.default_rng(4503)
    checked = 0
    for name, stairs, grid, table_net, activation in _stairs_cases(rng):
        n = stairs.upper_table.shape[0] if stairs.thresholds is not None else 5
        reach = float(
            np.abs(
                stairs.upper_table[np.isfinite(stairs.upper_table) & (np.abs(stairs.upper_table) < 1e9)]
            ).max()
        )
        for width in (reach / 50, reach / 4, 2 * reach):
            lo = rng.uniform(-reach, reach, n)
            hi = lo + rng.uniform(0, width, n)
            if grid:
                lo, hi = np.floor(lo / grid) * grid, np.ceil(hi / grid) * grid
            scale = stairs.slope_scale(lo, hi)
            rho = np.stack(
                [np.zeros(n), np.full(n, 1e-3), rng.uniform(0, 2, n), np.full(n, 1.0), np.full(n, 3.0)]
            )
            lower, upper = rho * scale, rho[::-1] * scale
            c, t, _, _ = stairs.sides(lower, upper, lo, hi)
            for j in range(n):
                if grid:
                    steps = np.arange(lo[j] / grid, hi[j] / grid + 1)
                    if len(steps) > 4000:
                        ends = stairs.upper_table[min(j, stairs.upper_table.shape[0] - 1)] / grid
                        ends = ends[(ends >= steps[0]) & (ends <= steps[-1])]
                        steps = np.concatenate(
                            [rng.choice(steps, 2000), ends, ends - 1, [steps[0], steps[-1]]]
                        )
                    z = steps * grid
                else:
                    table = stairs.upper_table[0]
                    inside = table[(table >= lo[j]) & (table <= hi[j])][:10]
                    z = np.concatenate([rng.uniform(lo[j], hi[j], 30), inside, [lo[j], hi[j]]])
                    if name != "real-sigmoid":
                        z = np.concatenate([z, np.nextafter(inside, -np.inf)])
                        z = z.astype(np.float32).astype(np.float64)
                    z = z[(z >= lo[j]) & (z <= hi[j])]
                for r in range(len(rho)):
                    if name == "real-sigmoid":
                        for v in z:
                            value = exact_table(table_net, activation, Fraction(float(v)))
                            assert (
                                Fraction(float(lower[r, j])) * Fraction(float(v)) + Fraction(float(c[r, j]))
                                <= value
                            ), name
                            assert value <= Fraction(float(upper[r, j])) * Fraction(float(v)) + Fraction(
                                float(t[r, j])
                            ), name
                    else:
                        full = np.zeros((len(z), n))
                        full[:, j] = z
                        values = stairs.values(full)[:, j]
                        assert np.all(lower[r, j] * z + c[r, j] <= values), (name, r, j)
                        assert np.all(values <= upper[r, j] * z + t[r, j]), (name, r, j)
                    checked += len(z)
    assert checked > 5000


def _stair_networks(rng):
    """Queries on networks of staircases with boxes of a few thousand points: int8 (both
    requantizations) and sigmoid/tanh tables in fixed point and float."""
    for options in INT8:
        qnet = _int8_net(rng, (10, 6, 5, 3))
        code = qnet.input_quant
        lo_codes = rng.integers(code.code.qmin + 10, code.code.qmax - 10, 10)
        lo = [(int(a) - code.zero_point) * Fraction(code.scale) for a in lo_codes]
        hi = [(int(a) + 2 - code.zero_point) * Fraction(code.scale) for a in lo_codes]
        yield "int8", qnet, lo, hi
    for options, activation in (
        (ImplementationOptions(FixedFormat(6, 6)), Activation.SIGMOID),
        (ImplementationOptions(FixedFormat(5, 7, Rounding.FLOOR)), Activation.TANH),
    ):
        qnet = quantize_network(random_network(rng, (10, 6, 4, 2), activation, 0.8), options)
        lo, hi = _fixed_box(rng, qnet.number.scale, 10, 3)
        yield "table", qnet, lo, hi


def _pre_values(model, qnet, grid, run, k: int, scale: float) -> np.ndarray:
    """Layer k's pre-activation values of every execution in the model's units: the simulator's
    words, or for int8 the accumulators (the trace holds codes), W codes + bias exactly."""
    if not qnet.is_int8:
        return run.layers[k].pre.astype(np.float64) * scale
    codes = grid if k == 0 else run.layers[k - 1].post
    layer = model.layers[k]
    return layer.op.forward(codes.astype(np.float64)) + layer.bias


def test_optimised_staircase_bounds_contain_every_execution():
    rng = np.random.default_rng(4504)
    for kind, qnet, lo, hi in _stair_networks(rng):
        query = query_for(qnet, _property(lo, hi, Fraction(0)))
        model = build_model(query)
        region = query.regions[0]
        xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        words = (region.lo, region.hi) if qnet.is_fixed else None
        bounds = node_bounds(model, xl, xu, phases, region_words=words)
        bounds = tighten_intermediate(model, bounds, xl, xu, phases, 6, time.monotonic() + 600)
        grid = enumerate_box(qnet, region.lo, region.hi)
        run = simulate(qnet, grid, trace=True)
        scale = model.unit if qnet.is_fixed and not qnet.is_int8 else 1.0
        for k, trace in enumerate(run.layers):
            values = _pre_values(model, qnet, grid, run, k, scale)
            assert np.all(values >= bounds.pre_lo[k]) and np.all(values <= bounds.pre_hi[k]), (kind, k)
        outputs = run.outputs.astype(np.float64) * scale
        n = outputs.shape[1]
        rows = np.vstack([np.eye(n), -np.eye(n), rng.normal(0, 1, (3, n))])
        last = len(model.layers) - 1
        plain = backsubstitute(model, bounds, rows, last, True, xl, xu).lower
        optimised = optimised_bound(model, bounds, rows, xl, xu, 8).lower
        beta = optimise_output_bounds(model, bounds, rows, xl, xu, phases, 6).bound.lower
        truth = (outputs @ rows.T).min(axis=0)
        for found in (plain, optimised, beta):
            assert np.all(found <= truth + 1e-12), kind
        assert np.all(optimised >= plain - 1e-9)  # (the best per row: never below DeepPoly's)


def test_exact_staircases_in_every_layer_never_cut_an_execution():
    """The MILP with staircases exact in every layer (int8, tables): at the exact maximum of an
    output it is never infeasible; one code or word above it, infeasible (or unknown)."""
    rng = np.random.default_rng(4505)
    exact_layers = set()
    decided = 0
    for kind, qnet, lo, hi in _stair_networks(rng):
        probe = query_for(qnet, _property(lo, hi, Fraction(0)))
        grid = enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)
        outputs = simulate(qnet, grid).outputs
        top = qnet.output_reals(outputs[int(np.argmax(outputs[:, 0]))])[0]
        step = (
            Fraction(1, qnet.number.scale)
            if qnet.is_fixed and not qnet.is_int8
            else Fraction(qnet.output_quant.scale)
            if qnet.is_int8
            else None
        )
        for threshold, truth in ((top, True), (top + step, False)):
            query = query_for(qnet, _property(lo, hi, threshold))
            search = Search(query, budgeted(), time.monotonic() + 600, Recorder())
            model = search.model
            region = query.regions[0]
            xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
            phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
            words = (region.lo, region.hi) if qnet.is_fixed else None
            bounds = node_bounds(model, xl, xu, phases, region_words=words)
            if bounds is None:
                assert not truth
                continue
            exact_layers |= set(_exact_choice(model, bounds, search.by_clause[0], xl, xu))
            found = solve_node(model, bounds, xl, xu, search.by_clause[0], True, time.monotonic() + 60)
            if truth:
                assert found.status is not CheckStatus.UNSAT, (kind, found.reason)
            else:
                decided += found.status is CheckStatus.UNSAT
    assert len(exact_layers) >= 2  # (more than the first layer)
    assert decided


@pytest.mark.parametrize("kind", ["fixed", "int8", "table"])
def test_high_dimensional_verdicts_agree_with_brute_force(kind):
    """decide() on 10-input networks (alpha on staircases, operand tables, the MILP's exact
    staircases, splitting) at the exact maximum of Y_0 and just above it."""
    rng = np.random.default_rng(4506 + len(kind))
    cases = []
    if kind == "fixed":
        for options in FIXED[:3]:
            qnet = quantize_network(random_network(rng, (10, 6, 4, 2), Activation.RELU, 0.7), options)
            cases.append((qnet, *_fixed_box(rng, qnet.number.scale, 10, 3)))
    else:
        cases = [(qnet, lo, hi) for name, qnet, lo, hi in _stair_networks(rng) if name == kind]
    for qnet, lo, hi in cases:
        probe = query_for(qnet, _property(lo, hi, Fraction(0)))
        grid = enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)
        run = simulate(qnet, grid)
        fine = np.flatnonzero(~run.overflowed if run.detect_mode else np.ones(len(grid), dtype=bool))
        top = qnet.output_reals(run.outputs[fine[int(np.argmax(run.outputs[fine, 0]))]])[0]
        step = Fraction(qnet.output_quant.scale) if qnet.is_int8 else Fraction(1, qnet.number.scale)
        best = top if not run.detect_mode or len(fine) == len(grid) else None  # (an overflow: a violation)
        for threshold in (top, top + step):
            query = query_for(qnet, _property(lo, hi, threshold))
            truth = best is None or threshold <= best
            budget = budgeted(disable=("attack",))
            result = decide(query, budget, time.monotonic() + budget.timeout_s, Recorder())
            assert result.status is not EngineStatus.UNKNOWN, result.reason
            assert (result.status is EngineStatus.UNSAFE) == truth, (threshold, result.to_json())
            if result.status is EngineStatus.UNSAFE:
                assert query.violation(np.array(result.counterexample)) != NO_VIOLATION


def test_operand_tables_are_built_where_they_pay():
    """Tables for narrow operands (a box of 3 words per input at <5,11>), none for wide sums
    (one rounding per neuron) nor where the operands span more words than enumerated."""
    rng = np.random.default_rng(4507)
    _, model, bounds, xl, xu, _, _ = _fixed_case(rng, ImplementationOptions(FixedFormat(5, 11)), (4, 3, 2), 3)
    assert operand_rounding.applies(model, 0) and bounds.operand_table(model, 0, xl, xu) is not None
    wide = ImplementationOptions(FixedFormat(5, 11), accumulation=Accumulation.WIDE)
    _, model, bounds, xl, xu, _, _ = _fixed_case(rng, wide, (4, 3, 2), 3)
    assert not operand_rounding.applies(model, 0) and bounds.operand_table(model, 0, xl, xu) is None
    _, model, bounds, xl, xu, _, _ = _fixed_case(
        rng, ImplementationOptions(FixedFormat(16, 16)), (4, 3, 2), 3
    )
    operands = np.full(4, -1.0), np.full(4, 1.0)  # 131,073 words each
    assert operand_rounding.rounding_table(model, 0, *operands) is None
