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
  ReLU splitting (more); in real arithmetic the maximum comes from a MILP over the exact ReLU
  network (scipy), thresholds a clear margin on either side; every UNSAFE is an exact violation,
  and a sample is replayed through the compiled C;
- `exact.real_outputs` is exact on these layers.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import Bounds as ScipyBounds
from scipy.optimize import LinearConstraint, milp

from qverify.codegen import CompiledNetwork, render_network
from qverify.engine.netlevel.bounds import batch_bounds, node_bounds
from qverify.engine.netlevel.exact import real_outputs
from qverify.engine.netlevel.model import build_model, unsupported_reason
from qverify.engine.netlevel.operations import SparseOperation
from qverify.engine.netlevel.points import enumerate_box
from qverify.engine.netlevel.query import NO_VIOLATION, Arithmetic, NetworkQuery, query_for
from qverify.engine.netlevel.search import decide
from qverify.engine.result import EngineOptions, EngineStatus, Recorder
from qverify.network import Activation, AveragePool2D, Conv2D, Dense, Network
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Overflow,
    QuantizedNetwork,
    Rounding,
    quantize_network,
    simulate,
)

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


NETWORKS = (conv_average, grouped_strided, depthwise)
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
    """A box of `words` implementation values per input near the origin (reals)."""
    n = qnet.n_inputs
    if qnet.is_fixed:
        scale = qnet.number.scale
        start = rng.integers(-scale // 4, scale // 4, n)
        return [Fraction(int(v), scale) for v in start], [Fraction(int(v) + words - 1, scale) for v in start]
    dtype = qnet.number.dtype
    start = rng.uniform(-0.25, 0.25, n).astype(dtype)
    ends = start.copy()
    for _ in range(words - 1):
        ends = np.nextafter(ends, dtype(np.inf))
    return [Fraction(float(v)) for v in start], [Fraction(float(v)) for v in ends]


def _words(qnet: QuantizedNetwork) -> int:
    return 3 if qnet.n_inputs <= 9 else 2


def _layer_matrix(layer) -> tuple[np.ndarray, np.ndarray]:
    """A layer's linear map as a dense matrix and bias, in the implementation's numbers (an average
    pool: each neuron's reciprocal on its window)."""
    if isinstance(layer.source, AveragePool2D):
        windows = layer.source.windows()
        matrix = np.zeros((layer.n_out, layer.n_in), dtype=layer.weights.dtype)
        rows = np.repeat(np.arange(layer.n_out), windows.count)
        matrix[rows, windows.inputs[windows.valid]] = layer.weights[rows]
        return matrix, np.zeros(layer.n_out, dtype=layer.weights.dtype)
    return layer.matrix, layer.expanded_bias()


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
    """node_bounds (no phase, and a ReLU phase of the first layer fixed either way) and a batch of
    three boxes contain every execution of their boxes, layer by layer."""
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
    for b, region in enumerate(regions):
        grid = enumerate_box(qnet, region.lo, region.hi)
        pres, fine = _executions(qnet, arithmetic, grid)
        for phase in (0, 1, -1):
            phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
            selected = fine.copy()
            if phase:
                phases[0][1] = phase
                selected &= pres[0][:, 1] > 0 if phase > 0 else pres[0][:, 1] <= 0
            bounds = node_bounds(model, xl[b], xu[b], phases, region_words=(region.lo, region.hi))
            if bounds is None:
                assert not selected.any()
                continue
            for k, values in enumerate(pres):
                assert np.all(values[selected] >= bounds.pre_lo[k] - 1e-9 * (arithmetic is REAL))
                assert np.all(values[selected] <= bounds.pre_hi[k] + 1e-9 * (arithmetic is REAL))
        assert not batch.empty[b] or not fine.any()
        for k, values in enumerate(pres):
            assert np.all(values[fine] >= batch.pre_lo[k][b] - 1e-9 * (arithmetic is REAL))
            assert np.all(values[fine] <= batch.pre_hi[k][b] + 1e-9 * (arithmetic is REAL))


def _executions(qnet: QuantizedNetwork, arithmetic: Arithmetic, grid: np.ndarray):
    """Every layer's pre-activation values (real units) and which rows the bounds describe (no
    overflow): the simulator's, or the real network's in float64 (exact to ~1e-15 here)."""
    if arithmetic is REAL:
        values = grid.astype(np.float64)
        pres = []
        for layer in qnet.layers:
            matrix, bias = _layer_matrix(layer)
            pre = values @ matrix.astype(np.float64).T + bias.astype(np.float64)
            pres.append(pre)
            values = np.maximum(pre, 0.0) if layer.activation is Activation.RELU else pre
        return pres, np.ones(len(grid), dtype=bool)
    run = simulate(qnet, grid, trace=True)
    scale = 1.0 / qnet.number.scale if qnet.is_fixed else 1.0
    return [trace.pre.astype(np.float64) * scale for trace in run.layers], ~np.asarray(run.overflowed)


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
        matrix, bias = (part.astype(np.float64) for part in _layer_matrix(layer))
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
            x = rng.uniform(-1, 1, net.n_inputs)
            if qnet.is_fixed:
                x = np.round(x * 256).astype(np.int64)
                reals = [Fraction(int(v), 256) for v in x]
                constant = lambda v: Fraction(int(v), 256)
            else:
                x = x.astype(np.float32).astype(np.float64)
                reals = [Fraction(float(v)) for v in x]
                constant = lambda v: Fraction(float(v))
            for layer in qnet.layers:
                matrix, bias = _layer_matrix(layer)
                pre = [
                    sum(
                        (constant(matrix[j, i]) * reals[i] for i in range(len(reals)) if matrix[j, i]),
                        constant(bias[j]),
                    )
                    for j in range(layer.n_out)
                ]
                reals = [max(v, Fraction(0)) for v in pre] if layer.activation is Activation.RELU else pre
            assert real_outputs(qnet, x) == reals


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
