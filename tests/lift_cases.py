"""Shared helpers of the lifted front end's tests: harnesses from the real codegen, the comparison
with `query_for`, and the verdict the lifted query gives a replay line."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from qverify.codegen.conditions import implementation_atom
from qverify.engine.netlevel.query import NO_VIOLATION, OVERFLOW_ASSERTION, NetworkQuery, query_for
from qverify.network import Activation, Dense, Network, evaluate_core
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import QuantizedNetwork


def small_network(seed: int, sizes: tuple[int, ...] = (3, 5, 4, 3), scale: float = 1.5) -> Network:
    rng = np.random.default_rng(seed)
    layers = []
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        last = index == len(sizes) - 2
        layers.append(
            Dense(
                rng.uniform(-scale, scale, (n_out, n_in)),
                rng.uniform(-scale, scale, n_out),
                Activation.IDENTITY if last else Activation.RELU,
            )
        )
    return Network(tuple(layers), name=f"lift-{seed}")


def split_property(net: Network, lo: float, hi: float, two_boxes: bool = True) -> Property:
    """Boxes [lo, hi]^n (and [hi, hi + 1]^n); unsafe: (Y0 >= m0 and Y0 - Y1 >= 0) or Y2 > m2, with
    m0, m2 the medians of the real outputs over the first box, so that samples end every way."""
    n_in = net.n_inputs
    boxes = [Box(tuple(Fraction(lo) for _ in range(n_in)), tuple(Fraction(hi) for _ in range(n_in)))]
    if two_boxes:
        boxes.append(
            Box(tuple(Fraction(hi) for _ in range(n_in)), tuple(Fraction(hi + 1) for _ in range(n_in)))
        )
    outputs = evaluate_core(net, np.random.default_rng(0).uniform(lo, hi, (200, n_in)))
    m0, m2 = (Fraction(float(np.median(outputs[:, k]))).limit_denominator(64) for k in (0, 2))
    clauses = (
        Clause(
            (
                Atom(((0, Fraction(1)),), -m0, Relation.GE),
                Atom(((0, Fraction(1)), (1, Fraction(-1))), Fraction(0), Relation.GE),
            )
        ),
        Clause((Atom(((2, Fraction(1)),), -m2, Relation.GT),)),
    )
    return Property("lift", tuple(boxes), OutputCondition(clauses))


def atom_codes(qnet: QuantizedNetwork, unsafe: OutputCondition) -> list[list[str]]:
    """The C comparison of every atom, as the codegen writes it (an exact normal form)."""
    return [[implementation_atom(qnet, atom).code for atom in clause.atoms] for clause in unsafe.clauses]


def assert_same_query(lifted: NetworkQuery, qnet: QuantizedNetwork, prop: Property, invariants=None) -> None:
    """The lifted query states what `query_for` builds from the network and property."""
    expected = query_for(qnet, prop, invariants=invariants)
    got = lifted.qnet
    assert got.options.number == qnet.options.number
    assert got.options.accumulation is qnet.options.accumulation
    assert got.options.layout is qnet.options.layout
    assert len(got.layers) == len(qnet.layers)
    for mine, theirs in zip(got.layers, qnet.layers):
        assert type(mine.source) is type(theirs.source)
        assert mine.source.input_shape == theirs.source.input_shape
        assert mine.source.output_shape == theirs.source.output_shape
        order_mine = mine.source.taps() if mine.is_mac else mine.source.windows()
        order_theirs = theirs.source.taps() if theirs.is_mac else theirs.source.windows()
        for name in ("inputs", "weights", "count"):  # the products (window elements) in C order
            assert np.array_equal(getattr(order_mine, name), getattr(order_theirs, name))
        assert mine.activation is theirs.activation
        assert mine.weights.dtype == theirs.weights.dtype
        assert np.array_equal(mine.weights, theirs.weights)
        assert np.array_equal(mine.bias, theirs.bias)
    assert len(lifted.regions) == len(expected.regions)
    for mine, theirs in zip(lifted.regions, expected.regions):
        assert np.array_equal(mine.lo, theirs.lo) and np.array_equal(mine.hi, theirs.hi)
        assert mine.lo.dtype == theirs.lo.dtype
    assert atom_codes(got, lifted.unsafe) == atom_codes(qnet, expected.unsafe)
    assert lifted.arithmetic is expected.arithmetic
    if invariants is None:
        assert lifted.invariants is None
    else:
        assert lifted.invariants is not None
        for mine, theirs in zip(lifted.invariants, invariants):
            for name in ("pre_lo", "pre_hi", "post_lo", "post_hi"):
                assert np.array_equal(getattr(mine, name), getattr(theirs, name))


def lifted_line(query: NetworkQuery, x: np.ndarray) -> str:
    """What the harness's replay prints for x, according to the lifted query (the invariants are
    sound for the tests' inputs, so only the region's assumes can fail)."""
    inside = any(np.all((x >= region.lo) & (x <= region.hi)) for region in query.regions)
    if not inside:
        return "ASSUME-FAILED"
    outcome = query.violation(x)
    if outcome == NO_VIOLATION:
        return "HOLDS"
    if outcome == OVERFLOW_ASSERTION:
        return "VIOLATED fixed-point overflow"
    return f"VIOLATED unsafe clause {outcome + 1}:"


def sample_inputs(query: NetworkQuery, rng: np.random.Generator, n: int) -> np.ndarray:
    """Inputs in the regions (most), around them and at their corners, in the input domain."""
    regions = query.regions
    dim = query.n_inputs
    rows = []
    integer = query.qnet.is_integer
    for index in range(n):
        region = regions[index % len(regions)]
        lo, hi = region.lo.astype(np.float64), region.hi.astype(np.float64)
        width = hi - lo
        if index % 4 == 3:  # a little outside
            lo, hi = lo - 0.2 * width - 1, hi + 0.2 * width + 1
        rows.append(rng.uniform(lo, hi + (1 if integer else 0), size=dim))
    rows += [region.lo.astype(np.float64) for region in regions] + [
        region.hi.astype(np.float64) for region in regions
    ]
    x = np.array(rows)
    if integer:
        fmt = query.qnet.number
        return np.clip(np.floor(x), fmt.min_q, fmt.max_q).astype(np.int64)
    return x.astype(query.qnet.number.dtype).astype(np.float64)
