"""The network level on convolutional layers and pools (`netlevel.operations`, `netlevel.activations`)
against brute force.

Small networks of the field's shapes (convolutions with strides, padding, groups and depthwise;
average pools padded, with and without the padding in the divisor; dense heads), in fixed point
(per-operation and wide accumulation, both roundings, saturate, wrap and detect), IEEE float and half,
and real arithmetic:
- every layer's bounds over a box (with and without a ReLU phase fixed, and over a batch of boxes)
  contain every execution of the box: the bit-exact simulator on every input word (implementation
  arithmetic) or the exact rational network (real);
- `decide` agrees with the true verdict: thresholds at the true maximum of an output over an
  enumerable box (UNSAFE) and one word above it (SAFE), through input splitting (<= 8 inputs) and
  ReLU splitting (more: the limit pinned at 8, `phase_splitting_above_8_inputs`); in real arithmetic the maximum comes from a MILP over the exact ReLU
  network (scipy), thresholds a clear margin on either side; every UNSAFE is an exact violation,
  and a sample is replayed through the compiled C;
- `exact.real_outputs` is exact on these layers;
- int8 convolutions and max pools on codes (both requantization modes): bounds contain every
  execution's accumulators and codes, verdicts agree with brute force over the codes.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import Bounds as ScipyBounds
from scipy.optimize import LinearConstraint, milp

from qverify.codegen import CompiledNetwork, render_network
from qverify.engine.netlevel import attack, staircase
from qverify.engine.netlevel import bounds as netlevel_bounds
from qverify.engine.netlevel.activations import MaxPool
from qverify.engine.netlevel.attack import atom_forms
from qverify.engine.netlevel.beta import optimise_output_bounds
from qverify.engine.netlevel.bounds import BoundTerms, backsubstitute, batch_bounds, node_bounds, with_phase
from qverify.engine.netlevel.exact import real_outputs
from qverify.engine.netlevel.lp import solve_node
from qverify.engine.netlevel.model import build_model, unsupported_reason
from qverify.engine.netlevel.operations import SparseOperation
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, Arithmetic, NetworkQuery, query_for
from qverify.engine.netlevel.search import decide
from qverify.engine.result import EngineOptions, EngineStatus, Recorder
from qverify.engine.solvers.base import CheckStatus
from qverify.errors import RangeError
from qverify.network import (
    Activation,
    AffineQuantization,
    AveragePool2D,
    CodeType,
    Conv2D,
    Dense,
    MacQuant,
    MaxPool2D,
    Network,
    PoolQuant,
    TensorQuant,
)
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Int8Format,
    Overflow,
    QuantizedNetwork,
    RequantMode,
    Rounding,
    quantize_network,
    simulate,
)

# the 9-16-input networks here exercise ReLU and max-pool splitting (`tests.conftest`)
pytestmark = pytest.mark.usefixtures("phase_splitting_above_8_inputs")
from tests.netlevel_reference import exact_point, layer_matrix, reference_outputs

IMPLEMENTATION, REAL = Arithmetic.IMPLEMENTATION, Arithmetic.REAL


def conv_average(rng: np.random.Generator) -> Network:
    """1x3x3 -> conv 2x2 (padded on top and left) -> 2x3x3 ReLU -> average pool 2x2 padded on the
    left (divisor: the valid positions) -> dense 2: 9 inputs (ReLU splitting)."""
    conv = Conv2D(
        rng.uniform(-1, 1, (2, 1, 2, 2)),
        rng.uniform(-0.5, 0.5, 2),
        Activation.RELU,
        (1, 3, 3),
        (1, 1),
        (1, 1, 0, 0),
    )
    pool = AveragePool2D(conv.output_shape, (2, 2), (1, 1), (0, 1, 0, 0))
    dense = Dense(rng.uniform(-1, 1, (2, pool.n_out)), rng.uniform(-0.5, 0.5, 2), Activation.IDENTITY)
    return Network((conv, pool, dense), name="conv-average")


def grouped_strided(rng: np.random.Generator) -> Network:
    """2x2x2 -> grouped conv (2 groups) 2x2, padded all round -> 4x3x3 ReLU -> average pool 2x2
    stride 2 counting the padding -> conv 4->2 1x1 ReLU -> dense 2: 8 inputs (input splitting)."""
    conv = Conv2D(
        rng.uniform(-1, 1, (4, 1, 2, 2)),
        rng.uniform(-0.5, 0.5, 4),
        Activation.RELU,
        (2, 2, 2),
        (1, 1),
        (1, 1, 1, 1),
        2,
    )
    pool = AveragePool2D(conv.output_shape, (2, 2), (2, 2), (0, 0, 1, 1), count_include_pad=True)
    mix = Conv2D(
        rng.uniform(-1, 1, (2, 4, 1, 1)), rng.uniform(-0.5, 0.5, 2), Activation.RELU, pool.output_shape
    )
    dense = Dense(rng.uniform(-1, 1, (2, mix.n_out)), rng.uniform(-0.5, 0.5, 2), Activation.IDENTITY)
    return Network((conv, pool, mix, dense), name="grouped-strided")


def depthwise(rng: np.random.Generator) -> Network:
    """2x2x3 -> depthwise conv 2x2 stride 2 padded -> 2x2x2 ReLU -> conv 2->3 2x2 ReLU -> dense 2:
    12 inputs (ReLU splitting)."""
    conv = Conv2D(
        rng.uniform(-1, 1, (2, 1, 2, 2)),
        rng.uniform(-0.5, 0.5, 2),
        Activation.RELU,
        (2, 2, 3),
        (2, 2),
        (1, 1, 1, 0),
        2,
    )
    second = Conv2D(
        rng.uniform(-1, 1, (3, 2, 2, 2)), rng.uniform(-0.5, 0.5, 3), Activation.RELU, conv.output_shape
    )
    dense = Dense(rng.uniform(-1, 1, (2, second.n_out)), rng.uniform(-0.5, 0.5, 2), Activation.IDENTITY)
    return Network((conv, second, dense), name="depthwise")


def conv_max(rng: np.random.Generator) -> Network:
    """1x4x4 -> conv 2x2 -> 2x3x3 ReLU -> max pool 2x2 stride 1 (overlapping windows) -> dense 2:
    16 inputs (ReLU and pool splitting)."""
    conv = Conv2D(rng.uniform(-1, 1, (2, 1, 2, 2)), rng.uniform(-0.5, 0.5, 2), Activation.RELU, (1, 4, 4))
    pool = MaxPool2D(conv.output_shape, (2, 2), (1, 1))
    dense = Dense(rng.uniform(-1, 1, (2, pool.n_out)), rng.uniform(-0.5, 0.5, 2), Activation.IDENTITY)
    return Network((conv, pool, dense), name="conv-max")


def signed_max(rng: np.random.Generator) -> Network:
    """1x2x4 -> conv 1x2 without activation (negative values) -> 2x2x3 -> max pool 2x2 stride 2
    padded on the right -> dense 3 ReLU -> dense 2: 8 inputs (input splitting)."""
    conv = Conv2D(rng.uniform(-1, 1, (2, 1, 1, 2)), rng.uniform(-0.5, 0.5, 2), Activation.IDENTITY, (1, 2, 4))
    pool = MaxPool2D(conv.output_shape, (2, 2), (2, 2), (0, 0, 0, 1))
    hidden = Dense(rng.uniform(-1, 1, (3, pool.n_out)), rng.uniform(-0.5, 0.5, 3), Activation.RELU)
    dense = Dense(rng.uniform(-1, 1, (2, 3)), rng.uniform(-0.5, 0.5, 2), Activation.IDENTITY)
    return Network((conv, pool, hidden, dense), name="signed-max")


NETWORKS = (conv_average, grouped_strided, depthwise, conv_max, signed_max)
OPTIONS = [
    ImplementationOptions(FixedFormat(8, 8)),
    ImplementationOptions(FixedFormat(6, 6, Rounding.FLOOR), accumulation=Accumulation.WIDE),
    ImplementationOptions(FixedFormat(3, 6, overflow=Overflow.WRAP)),  # sums may leave the range
    ImplementationOptions(FixedFormat(3, 6, overflow=Overflow.DETECT)),
    ImplementationOptions(FloatFormat(FloatKind.FLOAT)),
    ImplementationOptions(FloatFormat(FloatKind.HALF)),
]


def _threshold(n_inputs: int, lo, hi, threshold: Fraction, second: bool) -> Property:
    """Unsafe: Y_0 >= threshold (and Y_0 >= Y_1 with `second`)."""
    atoms = [Atom(((0, Fraction(1)),), -threshold, Relation.GE)]
    if second:
        atoms.append(Atom(((0, Fraction(1)), (1, Fraction(-1))), Fraction(0), Relation.GE))
    return Property("layers", (Box(tuple(lo), tuple(hi)),), OutputCondition((Clause(tuple(atoms)),)))


def _box(
    qnet: QuantizedNetwork, rng: np.random.Generator, words: int
) -> tuple[list[Fraction], list[Fraction]]:
    """A box of `words` implementation values per input near the origin (reals) on at most 12
    inputs (the others pinned to one value): enumerable, but more than one enumeration's worth."""
    n = qnet.n_inputs
    varying = np.zeros(n, dtype=bool)
    varying[rng.permutation(n)[:12]] = True
    if qnet.is_fixed:
        scale = qnet.number.scale
        start = rng.integers(-scale // 4, scale // 4, n)
        end = start + np.where(varying, words - 1, 0)
        return [Fraction(int(v), scale) for v in start], [Fraction(int(v), scale) for v in end]
    dtype = qnet.number.dtype
    start = rng.uniform(-0.25, 0.25, n).astype(dtype)
    ends = start.copy()
    for _ in range(words - 1):
        ends = np.where(varying, np.nextafter(ends, dtype(np.inf)), ends)
    return [Fraction(float(v)) for v in start], [Fraction(float(v)) for v in ends]


def _words(qnet: QuantizedNetwork) -> int:
    return 3 if qnet.n_inputs <= 9 else 2  # at most 3^9 or 2^12 inputs per box


def _decide(query: NetworkQuery, disable: tuple[str, ...] = ()):
    return decide(query, EngineOptions(timeout_s=120, disable=disable), time.monotonic() + 120, Recorder())


def _replay_in_c(qnet: QuantizedNetwork, query: NetworkQuery, point: np.ndarray, tmp_path) -> None:
    """The compiled C's outputs on the counterexample are the simulator's and violate the query."""
    compiled = CompiledNetwork(render_network(qnet), tmp_path, qnet.is_integer)
    run = compiled.run(point[None, :])
    expected = simulate(qnet, point[None, :])
    assert np.array_equal(run.overflowed, expected.detected)
    if not expected.detected[0]:
        assert np.array_equal(run.outputs, expected.outputs)
        assert query.unsafe.violated_clause_exact(qnet.output_reals(run.outputs[0])) != -1


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: o.key())
@pytest.mark.parametrize("network", NETWORKS, ids=lambda f: f.__name__)
def test_verdicts_agree_with_brute_force(network, options, rng, tmp_path):
    net = network(rng)
    qnet = quantize_network(net, options)
    replayed = 0
    for second in (False, True):
        lo, hi = _box(qnet, rng, _words(qnet))
        probe = query_for(qnet, _threshold(net.n_inputs, lo, hi, Fraction(0), second))
        assert unsupported_reason(probe) is None
        grid = enumerate_box(qnet, probe.regions[0].lo, probe.regions[0].hi)
        run = simulate(qnet, grid)
        fine = ~run.detected
        # every output is a word or a value of the C type: exact in float64, as are the thresholds
        scale = 1.0 / qnet.number.scale if qnet.is_fixed else 1.0
        outputs = run.outputs[fine].astype(np.float64) * scale
        reach = outputs[outputs[:, 0] >= outputs[:, 1]] if second else outputs
        top = Fraction(float(reach[:, 0].max())) if len(reach) else Fraction(0)
        if qnet.is_fixed:
            above = top + Fraction(1, qnet.number.scale)
        else:
            dtype = qnet.number.dtype
            above = Fraction(float(np.nextafter(dtype(float(top)), dtype(np.inf))))
        for threshold, disable in ((top, ()), (top, ("attack",)), (above, ()), (above, ("attack",))):
            query = query_for(qnet, _threshold(net.n_inputs, lo, hi, threshold, second))
            truth = bool(run.detected.any()) or bool(np.any(reach[:, 0] >= float(threshold)))
            result = _decide(query, disable)
            assert result.status is not EngineStatus.UNKNOWN, result.reason
            assert (result.status is EngineStatus.UNSAFE) == truth, (threshold, second, disable, result)
            if result.status is EngineStatus.UNSAFE:
                point = np.array(result.counterexample)
                assert query.violation(point) != NO_VIOLATION
                if replayed < 1 and disable:
                    _replay_in_c(qnet, query, point, tmp_path)
                    replayed += 1


@pytest.mark.parametrize("options", OPTIONS + ["real"], ids=lambda o: o if isinstance(o, str) else o.key())
@pytest.mark.parametrize("network", NETWORKS, ids=lambda f: f.__name__)
def test_bounds_contain_every_execution(network, options, rng):
    """node_bounds (no phase; a ReLU phase of the first layer fixed either way; a max pool's input
    split at its `split_value` either way) and a batch of three boxes contain every execution of
    their boxes, layer by layer, before and after the activation; so do each node's output bounds
    with its bounds and phases as Lagrangian terms (beta-CROWN's split constraints)."""
    arithmetic = REAL if options == "real" else IMPLEMENTATION
    options = ImplementationOptions(FloatFormat(FloatKind.FLOAT)) if options == "real" else options
    net = network(rng)
    qnet = quantize_network(net, options)
    boxes = [_box(qnet, rng, _words(qnet)) for _ in range(3)]
    queries = [
        query_for(qnet, _threshold(net.n_inputs, lo, hi, Fraction(0), False), arithmetic) for lo, hi in boxes
    ]
    model = build_model(queries[0])
    regions = [query.regions[0] for query in queries]
    xl = np.stack([model.input_reals(region.lo) for region in regions])
    xu = np.stack([model.input_reals(region.hi) for region in regions])
    words = (np.stack([r.lo for r in regions]), np.stack([r.hi for r in regions])) if qnet.is_fixed else None
    batch = batch_bounds(model, xl, xu, None, None, region_words=words)
    tolerance = 1e-9 if arithmetic is REAL else 0.0
    pools = [k for k, layer in enumerate(model.layers) if isinstance(layer.activation, MaxPool)]
    for b, region in enumerate(regions):
        grid = enumerate_box(qnet, region.lo, region.hi)
        pres, posts, fine = _executions(model, qnet, arithmetic, grid)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        plain = node_bounds(model, xl[b], xu[b], phases, region_words=(region.lo, region.hi))
        cases = [(phases, fine, plain)]
        for phase in (1, -1):
            fixed = [p.copy() for p in phases]
            fixed[0][1] = phase
            selected = fine & (pres[0][:, 1] > 0 if phase > 0 else pres[0][:, 1] <= 0)
            cases.append(
                (
                    fixed,
                    selected,
                    node_bounds(model, xl[b], xu[b], fixed, region_words=(region.lo, region.hi)),
                )
            )
        for k in pools if plain is not None else ():
            inputs, at, gap = model.layers[k].activation.split_value(plain.pre_lo[k], plain.pre_hi[k])
            if not (gap > 0).any():
                continue
            o = int(np.argmax(gap))
            for phase in (1, -1):
                child = with_phase(model, plain, k, int(inputs[o]), phase, float(at[o]))
                split = [p.copy() for p in phases]
                split[k][inputs[o]] = phase
                values = pres[k][:, inputs[o]]
                selected = fine & (values >= at[o] if phase > 0 else values <= at[o])
                if child is not None:
                    child = node_bounds(
                        model, xl[b], xu[b], split, child, k + 1, None, (region.lo, region.hi)
                    )
                cases.append((split, selected, child))
        for split_phases, selected, bounds in cases:
            if bounds is None:
                assert not selected.any()
                continue
            for k in range(len(model.layers)):
                post_lo, post_hi = bounds.post(model, k)
                assert np.all(pres[k][selected] >= bounds.pre_lo[k] - tolerance)
                assert np.all(pres[k][selected] <= bounds.pre_hi[k] + tolerance)
                assert np.all(posts[k][selected] >= post_lo - tolerance)
                assert np.all(posts[k][selected] <= post_hi + tolerance)
            _check_split_terms(model, bounds, xl[b], xu[b], split_phases, posts[-1][selected], rng, tolerance)
        assert not batch.empty[b] or not fine.any()
        for k in range(len(model.layers)):
            assert np.all(pres[k][fine] >= batch.pre_lo[k][b] - tolerance)
            assert np.all(pres[k][fine] <= batch.pre_hi[k][b] + tolerance)


def _check_split_terms(model, bounds, xl, xu, phases, outputs, rng, tolerance) -> None:
    """The output bounds with the node's bounds as Lagrangian terms (`BoundTerms`: random
    multipliers of either sign on every layer -- convolutions, pools' identity layers, dense --,
    and alpha-beta-CROWN's optimised ones on its ReLU layers) hold at every execution of the node."""
    last = len(model.layers) - 1
    n_out = model.layers[-1].n_post
    rows = np.vstack([np.eye(n_out), -np.eye(n_out)])
    values = np.hstack([outputs, -outputs])
    nus = {k: rng.normal(0, 1.0, (len(rows), model.layers[k].n_out)) for k in range(last)}
    lower = backsubstitute(model, bounds, rows, last, True, xl, xu, terms=BoundTerms(nus)).lower
    assert np.all(values >= lower - tolerance)
    best = optimise_output_bounds(model, bounds, rows, xl, xu, phases, 4)
    assert np.all(values >= best.bound.lower - tolerance)


def _executions(model, qnet: QuantizedNetwork, arithmetic: Arithmetic, grid: np.ndarray):
    """Every model layer's values before and after its activation (real units: a max pool's layer
    reads its inputs, its activation gives the pooled values) and which rows the bounds describe
    (no overflow): the simulator's, or the real network's in float64 (exact to ~1e-15 here)."""
    if arithmetic is REAL:
        values = grid.astype(np.float64)
        pres, posts = [], []
        for layer in qnet.layers:
            if isinstance(layer.source, MaxPool2D):
                windows = layer.source.windows()
                pres.append(values)
                values = np.where(windows.valid, values[:, windows.inputs], -np.inf).max(axis=2)
                posts.append(values)
                continue
            matrix, bias = layer_matrix(layer)
            pre = values @ matrix.astype(np.float64).T + bias.astype(np.float64)
            pres.append(pre)
            values = np.maximum(pre, 0.0) if layer.activation is Activation.RELU else pre
            posts.append(values)
        return pres, posts, np.ones(len(grid), dtype=bool)
    run = simulate(qnet, grid, trace=True)
    scale = 1.0 / qnet.number.scale if qnet.is_fixed else 1.0
    pres, posts = [], []
    inputs = grid.astype(np.float64) * scale
    for layer, trace in zip(qnet.layers, run.layers):
        pooled = isinstance(layer.source, MaxPool2D)
        pres.append(inputs if pooled else trace.pre.astype(np.float64) * scale)
        posts.append(trace.post.astype(np.float64) * scale)
        inputs = posts[-1]
    return pres, posts, ~np.asarray(run.overflowed)


def _milp_maximum(qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray) -> float:
    """max Y_0 of the real network (the C's constants as reals, conv and pools as their matrices)
    over the box: a big-M MILP (scipy's HiGHS) with bounds from interval propagation; stable ReLUs
    are linear, each unstable one has a binary. (An oracle to a relative 1e-6: the tests' margins
    are 1e-3.)"""
    rows: list[tuple[dict[int, float], float, float]] = []
    col_lo, col_hi, integrality = list(lo), list(hi), [0] * len(lo)

    def columns(low, high, integer=0) -> list[int]:
        first = len(col_lo)
        col_lo.extend(low)
        col_hi.extend(high)
        integrality.extend([integer] * len(low))
        return list(range(first, len(col_lo)))

    previous = list(range(len(lo)))
    value_lo, value_hi = np.asarray(lo, float), np.asarray(hi, float)
    for layer in qnet.layers:
        if isinstance(layer.source, MaxPool2D):  # y >= x_i, y <= x_i + (U - l_i)(1 - d_i), sum d = 1
            windows = layer.source.windows()
            inside = [windows.inputs[o, : windows.count[o]] for o in range(layer.n_out)]
            y_lo = np.array([value_lo[members].max() for members in inside])
            y_hi = np.array([value_hi[members].max() for members in inside])
            y = columns(y_lo, y_hi)
            for o, members in enumerate(inside):
                chosen = columns([0.0] * len(members), [1.0] * len(members), 1)
                rows.append(({d: 1.0 for d in chosen}, 1.0, 1.0))
                for i, d in zip(members, chosen):
                    big = y_hi[o] - value_lo[i]
                    rows.append(({y[o]: 1.0, previous[i]: -1.0}, 0.0, np.inf))
                    rows.append(({y[o]: 1.0, previous[i]: -1.0, d: big}, -np.inf, big))
            previous, value_lo, value_hi = y, y_lo, y_hi
            continue
        matrix, bias = (part.astype(np.float64) for part in layer_matrix(layer))
        pos, neg = np.maximum(matrix, 0), np.minimum(matrix, 0)
        z_lo = pos @ value_lo + neg @ value_hi + bias
        z_hi = pos @ value_hi + neg @ value_lo + bias
        z_lo, z_hi = z_lo - 1e-9 * (1 + np.abs(z_lo)), z_hi + 1e-9 * (1 + np.abs(z_hi))
        z = columns(z_lo, z_hi)
        for j in range(len(bias)):  # z_j - W_j h = b_j
            row = {z[j]: 1.0}
            for i in np.flatnonzero(matrix[j]):
                row[previous[i]] = row.get(previous[i], 0.0) - matrix[j, i]
            rows.append((row, bias[j], bias[j]))
        if layer.activation is not Activation.RELU:
            previous, value_lo, value_hi = z, z_lo, z_hi
            continue
        h = columns(np.maximum(z_lo, 0), np.maximum(z_hi, 0))
        for j in range(len(bias)):
            if z_lo[j] >= 0:
                rows.append(({h[j]: 1.0, z[j]: -1.0}, 0.0, 0.0))
            elif z_hi[j] > 0:
                (d,) = columns([0.0], [1.0], 1)
                rows.append(({h[j]: 1.0, z[j]: -1.0}, 0.0, np.inf))  # h >= z
                rows.append(({h[j]: 1.0, z[j]: -1.0, d: -z_lo[j]}, -np.inf, -z_lo[j]))  # h <= z - lo (1 - d)
                rows.append(({h[j]: 1.0, d: -z_hi[j]}, -np.inf, 0.0))  # h <= hi d
        previous, value_lo, value_hi = h, np.maximum(z_lo, 0), np.maximum(z_hi, 0)
    matrix = np.zeros((len(rows), len(col_lo)))
    for r, (row, _, _) in enumerate(rows):
        for column, value in row.items():
            matrix[r, column] = value
    cost = np.zeros(len(col_lo))
    cost[previous[0]] = -1.0
    solution = milp(
        cost,
        constraints=LinearConstraint(matrix, [r[1] for r in rows], [r[2] for r in rows]),
        integrality=np.array(integrality),
        bounds=ScipyBounds(col_lo, col_hi),
    )
    assert solution.status == 0, solution.message
    return float(-solution.fun)


@pytest.mark.parametrize("network", NETWORKS, ids=lambda f: f.__name__)
def test_real_arithmetic_agrees_with_milp(network, rng):
    net = network(rng)
    qnet = quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT)))
    lo = rng.uniform(-0.5, 0, net.n_inputs).astype(np.float32).astype(np.float64)
    hi = lo + 0.25
    top = _milp_maximum(qnet, lo, hi)
    margin = 1e-3 * (1 + abs(top))
    box = ([Fraction(v) for v in lo], [Fraction(v) for v in hi])
    for threshold, expected in ((top - margin, EngineStatus.UNSAFE), (top + margin, EngineStatus.SAFE)):
        for disable in ((), ("attack",)):
            query = query_for(qnet, _threshold(net.n_inputs, *box, Fraction(threshold), False), REAL)
            result = _decide(query, disable)
            assert result.status is expected, (threshold, top, disable, result)
            if expected is EngineStatus.UNSAFE:
                assert query.violation(np.array(result.counterexample)) == 0


def test_real_outputs_are_exact_on_convolutions_and_pools(rng):
    for network in NETWORKS:
        net = network(rng)
        for number in (FixedFormat(8, 8), FloatFormat(FloatKind.FLOAT)):
            qnet = quantize_network(net, ImplementationOptions(number))
            x, reals = exact_point(qnet, rng)
            assert real_outputs(qnet, x) == reference_outputs(qnet, reals)


def test_convolutions_stay_sparse(rng):
    """A CIFAR-size convolution is a sparse operation (its taps), and its products equal the dense
    matrix's."""
    conv = Conv2D(
        rng.normal(0, 0.1, (8, 3, 4, 4)),
        rng.normal(0, 0.1, 8),
        Activation.RELU,
        (3, 32, 32),
        (2, 2),
        (1, 1, 1, 1),
    )
    net = Network((conv, Dense(rng.normal(0, 0.01, (10, conv.n_out)), np.zeros(10), Activation.IDENTITY)))
    qnet = quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT)))
    box = Box(tuple([Fraction(0)] * 3072), tuple([Fraction(1, 64)] * 3072))
    query = query_for(
        qnet,
        Property(
            "cifar",
            (box,),
            OutputCondition((Clause((Atom(((0, Fraction(1)),), Fraction(-100), Relation.GE),)),)),
        ),
    )
    model = build_model(query)
    op = model.layers[0].op
    assert isinstance(op, SparseOperation) and op.sparse.nnz == int(conv.taps().count.sum())
    assert op.forward_terms == 48 and op.backward_terms <= 8 * 4
    h = rng.normal(size=(2, 3072))
    dense = conv.matrix.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(op.forward(h), h @ dense.T, rtol=1e-12, atol=1e-12)
    lam = rng.normal(size=(3, op.n_out))
    np.testing.assert_allclose(op.backward(lam), lam @ dense, rtol=1e-12, atol=1e-12)
    assert _decide(query).status is EngineStatus.SAFE


def test_max_pool_relaxation_and_splits_hold_on_wide_boxes(rng):
    """The max pool's relaxation holds at random points of random input boxes (overlapping and
    padded windows, negative inputs, ties); the children of a pool split (`with_phase` at the
    split value, later layers bounded again) contain every sampled execution on their side."""
    pool = MaxPool2D((2, 3, 3), (2, 2), (1, 1), (0, 0, 1, 0))
    windows = pool.windows()
    activation = MaxPool(windows.inputs, windows.valid)
    for _ in range(200):
        lo = rng.normal(0, 1, 18)
        hi = lo + rng.exponential(1, 18) * (rng.random(18) > 0.2)
        lo[rng.random(18) < 0.1] = hi.max()  # ties at the top
        hi = np.maximum(lo, hi)
        relaxation = activation.relaxation(lo, hi)
        z = lo + rng.random((64, 18)) * (hi - lo)
        h = activation.forward(z)
        low = relaxation.a * z[:, relaxation.lower_index] + relaxation.c
        high = relaxation.s * z[:, relaxation.upper_index] + relaxation.t
        assert np.all(low <= h) and np.all(h <= high)
        post_lo, post_hi = activation.post_bounds(lo, hi)
        assert np.all(post_lo <= h) and np.all(h <= post_hi)
    checked = 0
    for options in (
        ImplementationOptions(FixedFormat(8, 8)),
        ImplementationOptions(FloatFormat(FloatKind.FLOAT)),
    ):
        net = conv_max(rng)
        qnet = quantize_network(net, options)
        lo, hi = [Fraction(-1, 2)] * 16, [Fraction(1, 2)] * 16
        query = query_for(qnet, _threshold(16, lo, hi, Fraction(0), False))
        model = build_model(query)
        region = query.regions[0]
        xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
        grid = rng.integers(region.lo, region.hi + 1, (4000, 16)) if qnet.is_fixed else None
        if grid is None:
            grid = rng.uniform(-0.5, 0.5, (4000, 16)).astype(np.float32).astype(np.float64)
        pres, posts, fine = _executions(model, qnet, IMPLEMENTATION, grid)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        words = (region.lo, region.hi) if qnet.is_fixed else None
        plain = node_bounds(model, xl, xu, phases, region_words=words)
        inputs, at, gap = model.layers[1].activation.split_value(plain.pre_lo[1], plain.pre_hi[1])
        for o in np.flatnonzero(gap > 0)[:6]:
            for phase in (1, -1):
                split = [p.copy() for p in phases]
                split[1][inputs[o]] = phase
                child = with_phase(model, plain, 1, int(inputs[o]), phase, float(at[o]))
                values = pres[1][:, inputs[o]]
                selected = fine & (values >= at[o] if phase > 0 else values <= at[o])
                if child is not None:
                    child = node_bounds(model, xl, xu, split, child, 2, None, words)
                if child is None:
                    assert not selected.any()
                    continue
                for k in range(len(model.layers)):
                    post_lo, post_hi = child.post(model, k)
                    assert np.all(pres[k][selected] >= child.pre_lo[k]) and np.all(
                        pres[k][selected] <= child.pre_hi[k]
                    )
                    assert np.all(posts[k][selected] >= post_lo) and np.all(posts[k][selected] <= post_hi)
                checked += 1
    assert checked > 0


# ------------------------------------------------------------------ int8 convolutions and pools


def int8_cnn(rng: np.random.Generator, mode: RequantMode) -> QuantizedNetwork:
    """A random int8 model as a quantizer states it: 1x3x3 codes -> conv 2x2 (2 channels, padded
    right and bottom) with the ReLU clamp -> max pool 2x2 stride 1 on codes -> dense 2; int8 or
    uint8 codes, per-tensor or per-channel weights (9 inputs)."""
    for _ in range(20):
        code = CodeType.INT8 if rng.random() < 0.5 else CodeType.UINT8
        per_channel = rng.random() < 0.5

        quant_in, output = _tensor(rng, code, "input"), _tensor(rng, code, "output")
        hidden = _tensor(rng, code, "hidden", rng.random() < 0.5)
        weights = rng.integers(-127, 128, size=(2, 1, 2, 2))
        scales = np.array(
            [float(np.float32(rng.uniform(0.002, 0.05))) for _ in range(2 if per_channel else 1)]
        )
        bias = rng.integers(-3000, 3000, size=2)
        conv = Conv2D(
            weights * np.broadcast_to(scales, (2,))[:, None, None, None],
            bias * quant_in.scale * np.broadcast_to(scales, (2,)),
            Activation.RELU,
            (1, 3, 3),
            (1, 1),
            (0, 0, 1, 1),
        )
        conv_quant = MacQuant(quant_in, weights, scales, bias, hidden, True, "conv")
        pool = MaxPool2D(conv.output_shape, (2, 2), (1, 1))
        pool_quant = PoolQuant(hidden, hidden, "pool")
        dense_weights = rng.integers(-127, 128, size=(2, pool.n_out))
        dense_scales = np.array(
            [float(np.float32(rng.uniform(0.002, 0.05))) for _ in range(2 if per_channel else 1)]
        )
        dense_bias = rng.integers(-3000, 3000, size=2)
        dense = Dense(
            dense_weights * np.broadcast_to(dense_scales, (2,))[:, None],
            dense_bias * hidden.scale * np.broadcast_to(dense_scales, (2,)),
            Activation.IDENTITY,
        )
        dense_quant = MacQuant(hidden, dense_weights, dense_scales, dense_bias, output, False, "dense")
        net = Network(
            (conv, pool, dense),
            name="int8-cnn",
            quantization=AffineQuantization(quant_in, (conv_quant, pool_quant, dense_quant)),
        )
        try:
            return quantize_network(net, ImplementationOptions(Int8Format(mode)))
        except RangeError:
            continue
    raise RuntimeError("no int8 network")


def _tensor(rng: np.random.Generator, code: CodeType, what: str, relu: bool = False) -> TensorQuant:
    """A random tensor quantization (a ReLU range starts at the code's minimum)."""
    zero = code.qmin if relu else int(rng.integers(code.qmin + 20, code.qmax - 20))
    scale = float(np.float32(np.exp(rng.uniform(np.log(0.005), np.log(0.1)))))
    return TensorQuant(scale, zero, code, what)


def _int8_query(
    qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray, threshold_code: int | None
) -> NetworkQuery:
    """Codes [lo, hi] (the real box whose points quantize to them) and Y_0 >= the real value of an
    output code (None: no clause)."""
    quant = qnet.input_quant
    box = Box(
        tuple((int(a) - quant.zero_point) * Fraction(quant.scale) for a in lo),
        tuple((int(b) - quant.zero_point) * Fraction(quant.scale) for b in hi),
    )
    clauses: tuple[Clause, ...] = ()
    if threshold_code is not None:
        out = qnet.output_quant
        threshold = (threshold_code - out.zero_point) * Fraction(out.scale)
        clauses = (Clause((Atom(((0, Fraction(1)),), -threshold, Relation.GE),)),)
    query = query_for(qnet, Property("int8", (box,), OutputCondition(clauses)))
    assert np.array_equal(query.regions[0].lo, lo) and np.array_equal(query.regions[0].hi, hi)
    return query


@pytest.mark.parametrize("mode", [RequantMode.ONNXRUNTIME, RequantMode.TFLITE], ids=lambda m: m.value)
def test_int8_convolutions_and_pools(mode, rng, tmp_path):
    """int8 conv + max pool on codes: every layer's bounds (one box and a batch) contain every
    execution's accumulators and codes, and `decide` agrees with brute force at the true maximum
    of output code 0 (UNSAFE) and one code above (SAFE); a counterexample replayed in the C."""
    replayed = 0
    for _ in range(3):
        qnet = int8_cnn(rng, mode)
        code = qnet.input_quant.code
        lo = rng.integers(code.qmin, code.qmax - 3, 9)
        hi = lo + 2
        query = _int8_query(qnet, lo, hi, None)
        assert unsupported_reason(query) is None
        model = build_model(query)
        grid = enumerate_box(qnet, lo, hi)  # 3^9 codes
        run = simulate(qnet, grid, trace=True)
        accumulators = _int8_accumulators(qnet, grid)
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        single = node_bounds(model, lo.astype(float), hi.astype(float), phases)
        batch = batch_bounds(
            model, np.stack([lo, lo]).astype(float), np.stack([hi, hi]).astype(float), None, None
        )
        for bounds in (single, batch.box(1)):
            for k, layer in enumerate(model.layers):
                pre = run.layers[k - 1].post if isinstance(layer.activation, MaxPool) else accumulators[k]
                post_lo, post_hi = bounds.post(model, k)
                assert np.all(pre >= bounds.pre_lo[k]) and np.all(pre <= bounds.pre_hi[k])
                assert np.all(run.layers[k].post >= post_lo) and np.all(run.layers[k].post <= post_hi)
        top = int(run.outputs[:, 0].max())
        for threshold in (top, top + 1):
            if threshold > qnet.output_quant.code.qmax:
                continue
            query = _int8_query(qnet, lo, hi, threshold)
            result = _decide(query, ("attack",))
            assert result.status is not EngineStatus.UNKNOWN, result.reason
            assert (result.status is EngineStatus.UNSAFE) == (threshold == top), result
            if result.status is EngineStatus.UNSAFE:
                point = np.array(result.counterexample)
                assert query.violation(point) != NO_VIOLATION
                if not replayed:
                    _replay_in_c(qnet, query, point, tmp_path)
                    replayed += 1


@pytest.mark.parametrize("mode", [RequantMode.ONNXRUNTIME, RequantMode.TFLITE], ids=lambda m: m.value)
def test_int8_milp_is_exact_on_conv_pool_dense(mode, rng):
    """int8 conv -> max pool -> dense: the MILP (`lp.solve_node`, integer) encodes the first and
    the last layer's staircases exactly (a binary per threshold the accumulator's range crosses)
    and the pool exactly, so here it is exact: output code 0 >= its true maximum over the box is
    feasible (a solution, which rounds to a violation or not: only a candidate), one code above
    is infeasible; and the LP with the staircases' hull lines never refutes the first."""
    for _ in range(4):
        qnet = int8_cnn(rng, mode)
        code = qnet.input_quant.code
        lo = rng.integers(code.qmin, code.qmax - 3, 9)
        hi = lo + 2
        top = int(simulate(qnet, enumerate_box(qnet, lo, hi)).outputs[:, 0].max())
        for threshold in (top, top + 1):
            if threshold > qnet.output_quant.code.qmax:
                continue
            query = _int8_query(qnet, lo, hi, threshold)
            model = build_model(query)
            xl, xu = model.input_reals(lo), model.input_reals(hi)
            phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
            bounds = node_bounds(model, xl, xu, phases)
            if bounds is None:  # (the bounds alone: no execution reaches the threshold)
                assert threshold == top + 1
                continue
            forms = atom_forms(query)
            deadline = time.monotonic() + 60
            exact = solve_node(model, bounds, xl, xu, forms, True, deadline)
            relaxed = solve_node(model, bounds, xl, xu, forms, False, deadline)
            if threshold == top:
                assert exact.status is not CheckStatus.UNSAT, exact
                assert relaxed.status is not CheckStatus.UNSAT, relaxed
            else:
                assert exact.status is CheckStatus.UNSAT, exact


def test_int8_chunked_paths_agree(rng, monkeypatch):
    """The int8 paths' memory bounds -- the staircase relaxation a block of neurons at a time, one
    node's refinement rows a block at a time, the surrogate's outputs a chunk of points at a time
    -- change no number: with blocks of one neuron, one row and one point, the bounds and the
    relaxations are those of one pass, and the outputs are the simulator's on every input."""
    for _ in range(3):
        qnet = int8_cnn(rng, RequantMode.ONNXRUNTIME)
        code = qnet.input_quant.code
        lo = rng.integers(code.qmin, code.qmax - 3, 9)
        hi = lo + 2
        model = build_model(_int8_query(qnet, lo, hi, None))
        phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
        grid = enumerate_box(qnet, lo, hi)

        def passes(model=model, lo=lo, hi=hi, phases=phases, grid=grid):
            found = node_bounds(model, lo.astype(float), hi.astype(float), phases)
            lines = [found.relaxation(model, k) for k, layer in enumerate(model.layers) if layer.stairs]
            return found, lines, attack.surrogate_outputs(model, model.input_reals(grid))

        whole = passes()
        with monkeypatch.context() as patch:
            patch.setattr(staircase, "RELAXATION_CHUNK_VALUES", 1)
            patch.setattr(netlevel_bounds, "REFINE_CHUNK_VALUES", 1)
            patch.setattr(attack, "SURROGATE_CHUNK_VALUES", 1)
            chunked = passes()
        for k in range(len(model.layers)):
            np.testing.assert_array_equal(whole[0].pre_lo[k], chunked[0].pre_lo[k])
            np.testing.assert_array_equal(whole[0].pre_hi[k], chunked[0].pre_hi[k])
        for one, other in zip(whole[1], chunked[1]):
            for part, again in zip(one[:4], other[:4]):
                np.testing.assert_array_equal(part, again)
        np.testing.assert_array_equal(chunked[2], simulate(qnet, grid).outputs)
        np.testing.assert_array_equal(whole[2], chunked[2])


def _int8_accumulators(qnet: QuantizedNetwork, grid: np.ndarray) -> list[np.ndarray | None]:
    """Each MAC layer's exact int32 accumulators (bias + sum w (x - z_in) over the valid taps)."""
    values = grid.astype(np.int64)
    run = simulate(qnet, grid, trace=True)
    result = []
    for layer, trace in zip(qnet.layers, run.layers):
        if layer.is_mac:
            taps = layer.source.taps()
            gathered = values[:, taps.inputs] - layer.int8.input_zero
            result.append(
                layer.expanded_bias()[None, :] + np.einsum("bjt,jt->bj", gathered, layer.tap_weights())
            )
        else:
            result.append(None)
        values = trace.post.astype(np.int64)
    return result
