"""The SSA factory and passes: each rewrite rule fires, the passes handle every node kind, simplifying
is stable, intervals contain every value the evaluator computes, and the lowering's relaxation and
its fast evaluator agree with the program."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from qverify.codegen import render_harness
from qverify.engine import c_types, cfront
from qverify.engine.scalar import ssa, symex
from qverify.engine.scalar.evaluate import Evaluator, ProgramRunner, input_env
from qverify.engine.scalar.fasteval import LoweredEvaluator
from qverify.engine.scalar.linear import Lowering, conjunctions
from qverify.engine.scalar.passes import intervals as iv
from qverify.engine.scalar.passes.simplify import simplify
from qverify.engine.scalar.relax import RelaxedModel, bounds
from qverify.engine.scalar.smt.bitvec import SmtEncoder
from qverify.network import Activation, Dense, Network
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import FixedFormat, ImplementationOptions, Layout, Overflow, Rounding, quantize_network

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"


def program_of(m: ssa.NodeManager, inputs, steps) -> ssa.Program:
    return ssa.Program(tuple(inputs), tuple(steps), "test", m)


def simplified_root(m, inputs, assumes, root):
    """Simplify a program asserting `root != z` (z a fresh input, so the assertion stays) and
    return the rebuilt root node."""
    z = m.input(root.ty, len(inputs), "z")
    steps = [ssa.Assume(cond) for cond in assumes] + [ssa.Assert(m.compare("ne", root, z), "x")]
    result = simplify(program_of(m, [*inputs, z], steps))
    compare = result.program.steps[-1].cond
    return (compare.a if compare.b is z else compare.b), result


def test_factory_folds_and_interns():
    m = ssa.NodeManager()
    x = m.input(c_types.I32, 0, "x")
    one, two = m.const(c_types.I32, 1), m.const(c_types.I32, 2)
    assert m.binary("add", one, two) is m.const(c_types.I32, 3)  # constants fold
    assert m.binary("add", x, one) is m.binary("add", one, x)  # commutative operands ordered
    assert m.binary("add", x, m.const(c_types.I32, 0)) is x  # x + 0 -> x
    assert m.binary("mul", x, m.const(c_types.I32, 0)) is m.const(c_types.I32, 0)  # x * 0 -> 0
    assert m.ite(m.true, x, one) is x  # ite(true, a, b) -> a
    assert m.ite(m.compare("lt", x, one), x, x) is x  # ite(c, a, a) -> a
    assert m.binary("land", m.compare("lt", x, one), m.false) is m.false
    assert m.lnot(m.lnot(m.compare("lt", x, one))) is m.compare("lt", x, one)
    assert m.lnot(m.compare("lt", x, one)) is m.compare("ge", x, one)  # ints: negated comparison
    assert m.binary("add", m.const(c_types.I8, 127), m.const(c_types.I8, 1)).value == -128  # wraps


def test_rule_compare_and_ite_decided_by_intervals():
    m = ssa.NodeManager()
    x = m.input(c_types.I32, 0, "x")
    box = [m.land(m.compare("ge", x, m.const(c_types.I32, 0)), m.compare("le", x, m.const(c_types.I32, 10)))]
    node = m.ite(m.compare("lt", x, m.const(c_types.I32, 20)), x, m.const(c_types.I32, 7))
    root, _ = simplified_root(m, [x], box, node)
    assert root is x


def test_rule_always_active_relu_stays_max_and_inactive_becomes_zero():
    """An always-active ReLU is kept as max(x, 0) (the relaxation bounds its products' rounding
    per box); an always-inactive one is 0."""
    m = ssa.NodeManager()
    x = m.input(c_types.I32, 0, "x")
    zero = m.const(c_types.I32, 0)
    relu = m.ite(m.compare("lt", x, zero), zero, x)
    active = [
        m.land(m.compare("ge", x, m.const(c_types.I32, 3)), m.compare("le", x, m.const(c_types.I32, 9)))
    ]
    root, _ = simplified_root(m, [x], active, relu)
    assert isinstance(root, ssa.Binary) and root.op == "max" and root.a is x and root.b is zero
    inactive = [
        m.land(m.compare("ge", x, m.const(c_types.I32, -9)), m.compare("le", x, m.const(c_types.I32, -3)))
    ]
    root, _ = simplified_root(m, [x], inactive, relu)
    assert root is zero


def test_rule_relu_becomes_max():
    m = ssa.NodeManager()
    x = m.input(c_types.I32, 0, "x")
    zero = m.const(c_types.I32, 0)
    box = [m.land(m.compare("ge", x, m.const(c_types.I32, -5)), m.compare("le", x, m.const(c_types.I32, 5)))]
    root, _ = simplified_root(m, [x], box, m.ite(m.compare("lt", x, zero), zero, x))
    assert isinstance(root, ssa.Binary) and root.op == "max"
    y = m.input(c_types.I32, 1, "y")
    root, _ = simplified_root(m, [x, y], box, m.ite(m.compare("gt", x, y), y, x))
    assert isinstance(root, ssa.Binary) and root.op == "min"


def test_rule_max_of_cast_branches_becomes_cast_of_max():
    """An int8 max pool compares int-promoted values and keeps the int8 ones: still a max."""
    m = ssa.NodeManager()
    x, y = m.input(c_types.I32, 0, "x"), m.input(c_types.I32, 1, "y")
    box = [
        m.land(m.compare("ge", v, m.const(c_types.I32, -300)), m.compare("le", v, m.const(c_types.I32, 300)))
        for v in (x, y)
    ]
    node = m.ite(m.compare("gt", x, y), m.cast(c_types.I8, x), m.cast(c_types.I8, y))
    root, _ = simplified_root(m, [x, y], box, node)
    assert isinstance(root, ssa.Cast) and root.ty == c_types.I8
    assert isinstance(root.a, ssa.Binary) and root.a.op == "max"
    node = m.ite(m.compare("lt", x, y), m.cast(c_types.I8, x), m.cast(c_types.I8, y))
    root, result = simplified_root(m, [x, y], box, node)
    assert isinstance(root.a, ssa.Binary) and root.a.op == "min"
    rng = np.random.default_rng(0)  # same outcome as the original program, wrap-around included
    points = np.column_stack([rng.integers(-300, 301, (2000, 2)), rng.integers(-128, 128, 2000)])
    original = ProgramRunner(result.original).run(points)
    simplified = ProgramRunner(result.program).run(points)
    assert np.array_equal(original.status, simplified.status)
    assert (original.status == 2).any() and (original.status == 0).any()


def test_rule_saturation_and_its_removal():
    m = ssa.NodeManager()
    v = m.input(c_types.I64, 0, "v")
    lo, hi = m.const(c_types.I64, -128), m.const(c_types.I64, 127)
    clamp = m.ite(m.compare("lt", v, lo), lo, m.ite(m.compare("gt", v, hi), hi, v))
    wide = [
        m.land(
            m.compare("ge", v, m.const(c_types.I64, -1000)), m.compare("le", v, m.const(c_types.I64, 1000))
        )
    ]
    root, _ = simplified_root(m, [v], wide, clamp)
    assert isinstance(root, ssa.Binary) and root.op == "max" and root.a.op == "min"  # max(min(v, 127), -128)
    narrow = [
        m.land(m.compare("ge", v, m.const(c_types.I64, -10)), m.compare("le", v, m.const(c_types.I64, 10)))
    ]
    root, _ = simplified_root(m, [v], narrow, clamp)
    assert root is v  # in range: the saturation disappears


def test_rule_fxp_shift_patterns():
    for rounding, expected in (("nearest", "shr_rna"), ("floor", "shr")):
        m = ssa.NodeManager()
        v = m.input(c_types.I64, 0, "v")
        l = m.const(c_types.I32, 4)
        zero = m.const(c_types.I64, 0)
        offset = 8 if rounding == "nearest" else 15
        if rounding == "nearest":
            positive = m.binary("shr", m.binary("add", v, m.const(c_types.I64, 8)), l)
        else:
            positive = m.binary("shr", v, l)
        negative = m.unary(
            "neg", m.binary("shr", m.binary("add", m.unary("neg", v), m.const(c_types.I64, offset)), l)
        )
        node = m.ite(m.compare("ge", v, zero), positive, negative)
        box = [
            m.land(
                m.compare("ge", v, m.const(c_types.I64, -300)), m.compare("le", v, m.const(c_types.I64, 300))
            )
        ]
        root, _ = simplified_root(m, [v], box, node)
        assert isinstance(root, ssa.Binary) and root.op == expected and root.a is v


def test_rule_wrap_pattern():
    m = ssa.NodeManager()
    v = m.input(c_types.I64, 0, "v")
    bits = m.binary("band", m.cast(c_types.U64, v), m.const(c_types.U64, 0xFF))
    flipped = m.binary("bxor", bits, m.const(c_types.U64, 0x80))
    node = m.binary("sub", m.cast(c_types.I64, flipped), m.const(c_types.I64, 0x80))
    box = [
        m.land(
            m.compare("ge", v, m.const(c_types.I64, -1000)), m.compare("le", v, m.const(c_types.I64, 1000))
        )
    ]
    root, _ = simplified_root(m, [v], box, node)
    assert isinstance(root, ssa.Cast) and isinstance(root.a, ssa.Cast) and root.a.ty == c_types.int_type(8)


def test_rule_cast_chain():
    m = ssa.NodeManager()
    v = m.input(c_types.I64, 0, "v")
    node = m.cast(c_types.I64, m.cast(c_types.I32, v))
    box = [
        m.land(m.compare("ge", v, m.const(c_types.I64, -10)), m.compare("le", v, m.const(c_types.I64, 10)))
    ]
    root, _ = simplified_root(m, [v], box, node)
    assert root is v


def test_rule_table_lookup_is_tabulated():
    m = ssa.NodeManager()
    x = m.input(c_types.I32, 0, "x")
    table = ssa.Table("t", c_types.I32, tuple(range(0, 40, 2)))
    index = m.binary(
        "div", m.binary("add", m.cast(c_types.I64, x), m.const(c_types.I64, 10)), m.const(c_types.I64, 1)
    )
    read = m.read(table, index)
    node = m.ite(m.compare("lt", x, m.const(c_types.I32, -10)), m.const(c_types.I32, -1), read)
    box = [
        m.land(m.compare("ge", x, m.const(c_types.I32, -50)), m.compare("le", x, m.const(c_types.I32, 50)))
    ]
    root, result = simplified_root(m, [x], box, node)
    assert isinstance(root, ssa.Step) and root.a is x
    assert result.stats["tabulated"] >= 1
    xs = np.arange(-50, 51)
    want = np.where(xs < -10, -1, np.array(table.values)[np.clip(xs + 10, 0, len(table) - 1)])
    got = Evaluator([root]).evaluate(input_env([x], xs[:, None]), len(xs), keep=[root])[root.id]
    assert np.array_equal(got, want)


def every_kind(m: ssa.NodeManager) -> tuple[list, list[ssa.Node]]:
    """One node of each kind (over two inputs), for the every-pass-handles-every-kind test."""
    x, y = m.input(c_types.I32, 0, "x"), m.input(c_types.I32, 1, "y")
    table = ssa.Table("t", c_types.I32, (5, 1, 4, 1, 5))
    nodes = [
        m.const(c_types.I32, 3),
        x,
        m.unary("neg", x),
        m.binary("add", x, y),
        m.compare("lt", x, y),
        m.ite(m.compare("lt", x, y), x, y),
        m.cast(c_types.I64, x),
        m.read(table, m.cast(c_types.I64, y)),
        m.step(c_types.I32, x, (-100, 0, 3), (1, 2, 3)),
    ]
    return [x, y], nodes


def test_every_pass_handles_every_kind():
    m = ssa.NodeManager()
    inputs, nodes = every_kind(m)
    kinds = {type(node) for node in nodes}
    assert kinds == set(ssa.iter_kinds())
    box = [
        m.land(m.compare("ge", v, m.const(c_types.I32, -4)), m.compare("le", v, m.const(c_types.I32, 4)))
        for v in inputs
    ]
    steps = [ssa.Assume(cond) for cond in box]
    steps += [
        ssa.Assert(
            m.compare("ne", m.cast(c_types.I32, n), m.const(c_types.I32, 99)),
            f"k{i}",
        )
        for i, n in enumerate(nodes)
    ]
    program = program_of(m, inputs, steps)
    simplified = simplify(program)
    points = np.array([[a, b] for a in range(-4, 5) for b in range(-4, 5)])
    ProgramRunner(program).run(points)
    for node in nodes:
        iv.transfer(node, lambda child: iv.type_range(child.ty))
    lowering = Lowering(simplified.getter(len(simplified.program.steps)))
    for node in nodes:
        lowering.affine(node)

    class Recording:
        def __getattr__(self, name):
            return lambda *args, **kwargs: (name, args)

    encoder = SmtEncoder(Recording(), simplified.getter(len(simplified.program.steps)))
    for node in nodes:
        encoder.term(node)


def harness_program(tmp_path: Path, fmt: FixedFormat, activation: Activation, layout: Layout) -> ssa.Program:
    rng = np.random.default_rng(5)
    net = Network(
        (
            Dense(rng.uniform(-2, 2, (4, 2)), rng.uniform(-1, 1, 4), activation),
            Dense(rng.uniform(-2, 2, (2, 4)), rng.uniform(-1, 1, 2), Activation.IDENTITY),
        )
    )
    return program_of_network(tmp_path, quantize_network(net, ImplementationOptions(fmt, layout=layout)))


def program_of_network(tmp_path: Path, qnet) -> ssa.Program:
    """The symbolically executed harness of a 2-input network on [-1, 1]^2, unsafe where output 0
    is at least output 1."""
    prop = Property(
        "p",
        (Box((Fraction(-1), Fraction(-1)), (Fraction(1), Fraction(1))),),
        OutputCondition((Clause((Atom(((0, Fraction(1)), (1, Fraction(-1))), Fraction(0), Relation.GE),)),)),
    )
    return symex.execute(cfront.parse_file(render_harness(qnet, prop).write(tmp_path), [MODELS_C]))


def first_assertion_query(program: ssa.Program):
    """The program simplified, its first assertion's step, that assertion's lowering, and the
    conjunctions under which it fails given the assumptions before it."""
    simplified = simplify(program)
    steps = simplified.program.steps
    p = next(i for i, step in enumerate(steps) if isinstance(step, ssa.Assert))
    conds = [(s.cond, True) for s in steps[:p] if isinstance(s, ssa.Assume)] + [(steps[p].cond, False)]
    lowering = Lowering(simplified.getter(p))
    return simplified, steps[p], lowering, conjunctions(lowering, conds)


CASES = [
    (FixedFormat(4, 4), Activation.RELU, Layout.SEQUENTIAL),
    (FixedFormat(4, 4, Rounding.FLOOR, Overflow.WRAP), Activation.SIGMOID, Layout.BALANCED),
    (FixedFormat(3, 5, overflow=Overflow.DETECT), Activation.TANH, Layout.SEQUENTIAL),
]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
@pytest.mark.parametrize(("fmt", "activation", "layout"), CASES)
def test_simplify_is_stable_and_intervals_hold(tmp_path, fmt, activation, layout):
    program = harness_program(tmp_path, fmt, activation, layout)
    once = simplify(program)
    twice = simplify(once.program)
    assert [s.cond for s in twice.program.steps] == [s.cond for s in once.program.steps]
    assert ssa.count_nodes(twice.program.roots()) == ssa.count_nodes(once.program.roots())
    # every value of every node lies in its interval after the last step, for every input that
    # passes every step (a fact from a step holds for the executions that pass it)
    points = np.array(
        [[a, b] for a in range(fmt.min_q, fmt.max_q + 1) for b in range(fmt.min_q, fmt.max_q + 1)]
    )
    runner = ProgramRunner(once.program)
    reaching = points[runner.run(points).status == 0]
    if len(reaching) == 0:
        return
    nodes = [n for n in ssa.topological(once.program.roots()) if not n.ty.is_float]
    values = Evaluator(nodes).evaluate(input_env(once.program.inputs, reaching), len(reaching), keep=nodes)
    end = len(once.program.steps)
    for node in nodes:
        lo, hi = once.interval(node, end)
        got = values[node.id].astype(np.int64)
        assert got.min() >= lo and got.max() <= hi, (node, lo, hi, got.min(), got.max())


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
@pytest.mark.parametrize(("fmt", "activation", "layout"), CASES)
def test_lowering_relaxation_and_fast_evaluator_agree_with_the_program(tmp_path, fmt, activation, layout):
    program = harness_program(tmp_path, fmt, activation, layout)
    simplified, assertion, lowering, alternatives = first_assertion_query(program)
    fast = LoweredEvaluator(lowering)
    points = np.array(
        [[a, b] for a in range(fmt.min_q, fmt.max_q + 1) for b in range(fmt.min_q, fmt.max_q + 1)]
    )
    outcome = ProgramRunner(simplified.program).run(points)
    violates = outcome.status == 2
    holds = np.zeros(len(points), dtype=bool)
    for conjunction in alternatives:
        holds |= fast.holds(conjunction, points)
    assert np.array_equal(holds, violates) or assertion.message == "fixed-point overflow"
    # symbolic bounds of every kept variable contain its value at every point of the box
    model = RelaxedModel.build(lowering)
    order = sorted(model.input_kept)
    lo = np.array([model.lo[model.input_kept[i]] for i in order])
    hi = np.array([model.hi[model.input_kept[i]] for i in order])
    result = bounds(model, lo[None], hi[None], [])
    values = fast.values(points)
    inside = np.all((points >= lo) & (points <= hi), axis=1)
    for var_index, kept in model.plp_to_kept.items():
        column = values[inside, var_index]
        assert column.min() >= result.lb[0, kept] - 1e-6 and column.max() <= result.ub[0, kept] + 1e-6


def test_literals_remember_whether_they_were_assumed():
    """The splitter may drop assumed literals on intermediate values (never the violation's)."""
    m = ssa.NodeManager()
    i16 = c_types.I16
    x, y = m.input(i16, 0, "x"), m.input(i16, 1, "y")
    total = m.binary("add", x, y)
    conds = [
        (m.compare("ge", x, m.const(i16, -5)), True),
        (m.compare("le", total, m.const(i16, 20)), True),
        (m.compare("lt", total, m.const(i16, 30)), False),
    ]
    lowering = Lowering(lambda node: (-(1 << 15), (1 << 15) - 1))
    (conjunction,) = conjunctions(lowering, conds)
    assert [lit.assumed for lit in conjunction.literals] == [True, True, False]


def test_pairwise_combinations_use_only_the_tightest_literals():
    from qverify.engine.scalar.combine import fixed_weights, tightest_literals

    chosen = tightest_literals(np.array([5.0, -1.0, 3.0, 0.5, 9.0]), limit=3)
    assert chosen.tolist() == [1, 2, 3]
    weights = fixed_weights(5, chosen)
    assert weights.shape == (3 * 3 + 1, 5)  # 3 pairs at 3 weights, and the uniform one
    assert np.allclose(weights.sum(axis=1), 1.0)
    assert not weights[:, [0, 4]].any()


@pytest.mark.parametrize("mode", [0, 1, 2])  # floor, rna, trunc
def test_rounding_noise_intervals_contain_every_error(mode):
    """NoiseTable: per box, the summed error interval of alpha * e((c z + k) / d) contains the exact
    error at every integer z of the box (zero band, generic, single points, both signs of c and
    alpha, boxes on either side of 0)."""
    from qverify.engine.scalar.relax import NoiseTable, _quotients

    rng = np.random.default_rng(mode)
    entries = []
    for row in range(6):
        for _ in range(4):
            d = float(2 ** int(rng.integers(1, 6)))
            c = float(rng.choice([-1, 1]) * rng.integers(1, 40))
            k = float(rng.choice([0.0, d / 2, float(rng.integers(-50, 50))]))
            entries.append(
                (row, (float(rng.choice([-1.0, 1.0, 0.5])), int(rng.integers(0, 3)), c, k, d, mode))
            )
    table = NoiseTable(entries, 6)
    lo = rng.integers(-40, 40, size=(64, 3)).astype(np.float64)
    hi = lo + rng.integers(0, 6, size=(64, 3))
    lo[:4] = hi[:4] = 0.0  # single points, including z = 0
    low, high = table.intervals(lo, hi)
    for box in range(len(lo)):
        grids = [np.arange(lo[box, i], hi[box, i] + 1) for i in range(3)]
        for row in range(6):
            z = np.array(np.meshgrid(*grids, indexing="ij")).reshape(3, -1)
            total = np.zeros(z.shape[1])
            for r, (alpha, source, c, k, d, m) in entries:
                if r == row:
                    a = c * z[source] + k
                    total += alpha * (_quotients(a, d, m) - a / d)
            assert total.min() >= low[box, row] - 1e-12 and total.max() <= high[box, row] + 1e-12
    points = np.all(lo == hi, axis=1)
    assert np.allclose(low[points], high[points])  # a single point: the error exactly


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_tabulated_first_layer_bounds_are_exact_on_every_sub_box(tmp_path):
    """A first per-op layer over small-domain inputs is a sum of exact functions of single inputs:
    its tables give, per box, exactly the least and greatest argument over the box's points; the
    rows' upper bounds hold at every point, and their maximisers lie in the box."""
    program = harness_program(tmp_path, FixedFormat(4, 4), Activation.RELU, Layout.SEQUENTIAL)
    _, _, lowering, (conjunction, *_) = first_assertion_query(program)
    model = RelaxedModel.build(lowering)
    first = model.levels[0]
    assert first.separable is not None and first.separable.any()
    kept_to_var = {kept: var for var, kept in model.plp_to_kept.items()}
    rows = [model.row_of(lit.expr) for lit in conjunction.literals]
    rng = np.random.default_rng(3)
    lo = rng.integers(-16, 12, size=(24, 2)).astype(np.float64)
    hi = lo + rng.integers(0, 6, size=(24, 2))
    result = bounds(model, lo, hi, rows)
    fast = LoweredEvaluator(lowering)
    order = sorted(model.input_kept)
    for box in range(len(lo)):
        grid = (
            np.array(np.meshgrid(*[np.arange(lo[box, i], hi[box, i] + 1) for i in range(2)])).reshape(2, -1).T
        )
        points = np.zeros_like(grid, dtype=np.int64)
        points[:, order] = grid
        values = fast.values(points)

        def value_of(expr, points=points, values=values):
            total = np.full(len(points), float(expr.const))
            for index, coef in expr.terms.items():
                total += float(coef) * values[:, index]
            return total

        for u in np.flatnonzero(first.separable):
            kept = int(first.units[u])
            argument = value_of(lowering.vars[kept_to_var[kept]].args[0])
            assert argument.min() == result.arg_lo[box, kept] and argument.max() == result.arg_hi[box, kept]
        for r, lit in enumerate(conjunction.literals):
            assert value_of(lit.expr).max() <= result.row_ub[box, r]
            assert np.all(result.row_argmax[box, r] >= lo[box]) and np.all(
                result.row_argmax[box, r] <= hi[box]
            )
