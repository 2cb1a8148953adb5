"""IEEE float completeness: the engine against every float point of tiny boxes, through the compiled C.

Each instance is a random ReLU network (2-8-8-2 and smaller) rendered by qverify's own code
generator in float32, double or half, and an input box holding only a few thousand values of the
type (per input: a value and the next k values, k + 1 <= 61; some boxes around zero, with
subnormals and both zeros). Every point of the box goes through the compiled network (gcc, the
replay main of network.c, outputs printed exactly with %a) to find the exact maximum of Y_0.
Thresholds, exact rationals written to VNN-LIB and read back:
    at the maximum                                          UNSAFE
    half an ulp above it (strictly between it and the next value of the type)   SAFE
    one ulp below it                                        UNSAFE
and again with the box's ends written between two values of the type, and with one input pinned to
such a real (degenerate and sub-ulp boxes: the input stage rounds them to the nearest value).
The truth of each property is the property's own compiled harness run on every point; the
engine's verdict must equal it (100 % decided and right), and every counterexample must be a value
of the type that the harness reports as violating.
"""

from __future__ import annotations

import itertools
import shutil
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from qverify.codegen import CompiledNetwork, compile_replay, render_harness, render_network, run_lines
from qverify.engine import EngineOptions, EngineResult, EngineStatus, check_file, floatgrid
from qverify.engine.netlevel import points
from qverify.network import Activation, Dense, Network
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation, read_vnnlib
from qverify.properties.vnnlib import format_vnnlib
from qverify.quant import FloatFormat, FloatKind, ImplementationOptions, quantize_network, simulate
from tests.conftest import budgeted

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"
BITS = {FloatKind.HALF: 16, FloatKind.FLOAT: 32, FloatKind.DOUBLE: 64}
SHAPES = [(2, 8, 8, 2), (2, 8, 2), (2, 4, 4, 2), (2, 4, 2)]


@dataclass
class FloatInstance:
    seed: int
    kind: FloatKind
    directory: Path
    qnet: object
    sizes: tuple[int, ...]
    lo: np.ndarray  # the box's ends, values of the type
    hi: np.ndarray
    points: np.ndarray  # every point of the box (the two zeros counted once)
    y0: np.ndarray  # Y_0 on them, from the compiled C

    @property
    def description(self) -> str:
        count = len(self.points)
        return (
            f"seed {self.seed} {self.kind.value} sizes {self.sizes} box {self.lo}..{self.hi} ({count} points)"
        )


def make_instance(seed: int, kind: FloatKind, directory: Path, per_input: int = 61) -> FloatInstance:
    """A random ReLU network and a box of at most per_input values per input, Y_0 enumerated
    through the compiled C (and checked against the bit-exact simulator)."""
    rng = np.random.default_rng(7100 + seed)
    bits = BITS[kind]
    number = FloatFormat(kind)
    sizes = SHAPES[seed % len(SHAPES)]
    scale = float(rng.choice([0.5, 1.0, 2.0]))
    layers = [
        Dense(
            rng.normal(0, scale, (b, a)),
            rng.normal(0, scale / 2, b),
            Activation.RELU if k < len(sizes) - 2 else Activation.IDENTITY,
        )
        for k, (a, b) in enumerate(itertools.pairwise(sizes))
    ]
    qnet = quantize_network(
        Network(tuple(layers), name=f"float-oracle-{seed}"), ImplementationOptions(number)
    )
    lo, hi = [], []
    for _ in range(sizes[0]):
        count = int(rng.integers(per_input // 2, per_input + 1))
        magnitude = float(rng.choice([1.0, 1.0, 100.0])) if seed % 5 else 0.0  # every fifth: at zero
        start = floatgrid.ordinal(
            np.array(number.round(rng.uniform(-magnitude, magnitude)), dtype=np.float64), bits
        )
        start -= int(rng.integers(0, count)) if magnitude == 0 else 0
        lo.append(float(floatgrid.from_ordinal(start, bits)))
        hi.append(float(floatgrid.from_ordinal(start + count - 1, bits)))
    axes = [floatgrid.values(a, b, bits) for a, b in zip(lo, hi)]
    points = np.array(list(itertools.product(*axes)), dtype=np.float64)
    compiled = CompiledNetwork(render_network(qnet), directory / f"net-{kind.value}-{seed}", False)
    run = compiled.run(points)
    assert np.array_equal(run.outputs, simulate(qnet, points).outputs.astype(np.float64))
    return FloatInstance(
        seed, kind, directory, qnet, sizes, np.array(lo), np.array(hi), points, run.outputs[:, 0]
    )


def thresholds(instance: FloatInstance) -> list[tuple[str, Fraction]]:
    """(name, exact threshold on Y_0): at the maximum, half an ulp above it, one ulp below it."""
    bits = BITS[instance.kind]
    top = float(instance.y0.max())
    above = float(floatgrid.from_ordinal(floatgrid.ordinal(np.array(top), bits) + 1, bits))
    below = float(floatgrid.from_ordinal(floatgrid.ordinal(np.array(top), bits) - 1, bits))
    return [
        ("max", Fraction(top)),
        ("half-ulp-above", (Fraction(top) + Fraction(above)) / 2),
        ("ulp-below", Fraction(below)),
    ]


def sub_ulp(value: float, kind: FloatKind, fraction: Fraction) -> Fraction:
    """`value` moved towards a neighbour by `fraction` (|fraction| < 1/2) of the gap to it: a real
    between two values of the type whose nearest value is still `value` (issue 40)."""
    bits = BITS[kind]
    step = 1 if fraction > 0 else -1
    neighbour = float(floatgrid.from_ordinal(floatgrid.ordinal(np.array(value), bits) + step, bits))
    return Fraction(value) + abs(fraction) * (Fraction(neighbour) - Fraction(value))


def property_for(instance: FloatInstance, name: str, threshold: Fraction, box: Box | None = None) -> Property:
    """Y_0 >= threshold on the box (by default the instance's), through a VNN-LIB file (threshold
    and bounds as exact decimals)."""
    box = box or Box(tuple(Fraction(v) for v in instance.lo), tuple(Fraction(v) for v in instance.hi))
    atom = Atom(((0, Fraction(1)),), -threshold, Relation.GE)
    prop = Property(name, (box,), OutputCondition((Clause((atom,)),)))
    text = format_vnnlib(prop, instance.qnet.n_outputs)
    if max(map(len, text.split())) > 900:
        return prop  # subnormal doubles: exact decimals of ~1,000 digits, over VNN-LIB's literal limit
    path = instance.directory / f"{instance.kind.value}-{instance.seed}-{name}.vnnlib"
    path.write_text(text)
    read = read_vnnlib(path)
    assert read.unsafe.clauses[0].atoms[0].constant == -threshold  # exact through the text
    return read


def check(
    instance: FloatInstance, name: str, threshold: Fraction, options: EngineOptions, box: Box | None = None
) -> EngineResult:
    """The engine's verdict against the property's compiled harness on every point."""
    folder = instance.directory / f"{instance.kind.value}-{instance.seed}-{name}"
    harness = render_harness(instance.qnet, property_for(instance, name, threshold, box)).write(folder)
    executable = compile_replay(harness)
    lines = run_lines(executable, [" ".join(float(v).hex() for v in row) for row in instance.points])
    truth = "UNSAFE" if any(line.startswith("VIOLATED") for line in lines) else "SAFE"
    assert truth == ("SAFE" if name.endswith("half-ulp-above") else "UNSAFE"), instance.description
    start = time.monotonic()
    result = check_file(harness, [MODELS_C], options)
    context = (instance.description, name, threshold, round(time.monotonic() - start, 3), result.to_json())
    assert result.status.value == truth, context
    if result.status is EngineStatus.UNSAFE:
        values = np.array(result.counterexample, dtype=np.float64)
        typed = FloatFormat(instance.kind).round(values).astype(np.float64)
        assert np.array_equal(typed, values), context  # values of the input type
        (line,) = run_lines(executable, [" ".join(float(v).hex() for v in values)])
        assert line == f"VIOLATED {result.violated}", (context, line)
    return result


def check_all(instance: FloatInstance, options: EngineOptions) -> None:
    for name, threshold in thresholds(instance):
        check(instance, name, threshold, options)


def check_sub_ulp(instance: FloatInstance, options: EngineOptions) -> None:
    """The same truths with the box's ends written between two values of the type (less than half
    a gap from the instance's ends, which the input stage's rounding gives back), then with input 0
    pinned to one such real (a degenerate box of one value of the type: the points are the rows
    holding that value)."""
    rng = np.random.default_rng(9100 + instance.seed)

    def fraction() -> Fraction:
        return Fraction(int(rng.integers(1, 49)) * int(rng.choice([-1, 1])), 100)

    lo = tuple(sub_ulp(v, instance.kind, fraction()) for v in instance.lo)
    hi = tuple(sub_ulp(v, instance.kind, fraction()) for v in instance.hi)
    for name, threshold in thresholds(instance):
        check(instance, f"sub-ulp-{name}", threshold, options, Box(lo, hi))
    pinned_value = float(instance.points[len(instance.points) // 2, 0])
    rows = instance.points[:, 0] == pinned_value
    pinned = replace(instance, points=instance.points[rows], y0=instance.y0[rows])
    point = sub_ulp(pinned_value, instance.kind, fraction())
    box = Box((point,) + lo[1:], (point,) + hi[1:])
    for name, threshold in thresholds(pinned):
        check(pinned, f"pinned-{name}", threshold, options, box)


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return tmp_path_factory.mktemp("float-oracle")


@pytest.mark.parametrize(
    "kind, seed",
    [(FloatKind.FLOAT, seed) for seed in range(8)]
    + [(FloatKind.DOUBLE, seed) for seed in range(3)]
    + [(FloatKind.HALF, seed) for seed in range(2)],
)
def test_float_oracle_tiny_boxes(directory, kind, seed):
    check_all(make_instance(seed, kind, directory), budgeted())


@pytest.mark.parametrize(
    "kind, seed", [(FloatKind.FLOAT, 0), (FloatKind.FLOAT, 3), (FloatKind.DOUBLE, 1), (FloatKind.HALF, 0)]
)
def test_float_oracle_sub_ulp_and_degenerate_boxes(directory, kind, seed):
    check_sub_ulp(make_instance(seed, kind, directory), budgeted())


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, seed",
    [(FloatKind.FLOAT, seed) for seed in range(8, 60)]
    + [(FloatKind.DOUBLE, seed) for seed in range(3, 24)]
    + [(FloatKind.HALF, seed) for seed in range(2, 16)],
)
def test_float_oracle_tiny_boxes_slow(directory, kind, seed):
    """Every other instance with boxes of up to 301 x 301 values: more than the attack enumerates,
    so bounds and splitting must isolate the points near the maximum."""
    per_input = 301 if seed % 2 else 61
    check_all(make_instance(seed, kind, directory, per_input), budgeted())


@pytest.mark.parametrize("path", ["network level", "scalar"])
def test_float_oracle_without_attack(directory, path):
    """Bounds and splitting alone decide (bisection on values of the type, boxes of few points
    enumerated, probes at the bounds' maximisers), not only the attack's enumeration: on the
    network-level path (lifted harness) and on the scalar path."""
    instance = make_instance(1, FloatKind.FLOAT, directory)
    disable = ("attack",) if path == "network level" else ("lift", "attack")
    for name, threshold in thresholds(instance):
        result = check(instance, name, threshold, budgeted(disable=disable))
        decided = (
            ("bounds", "split") if path == "scalar" else ("netlevel bounds", "netlevel branch and bound")
        )
        assert result.decided_by in decided, result.to_json()


# ------------------------------------------------------------------------------ floatgrid


@pytest.mark.parametrize("bits, dtype", [(16, np.float16), (32, np.float32), (64, np.float64)])
def test_ordinals_are_consecutive_integers(bits, dtype):
    """Ordinals increase with the value, by one from a value to the next; the zeros share 0."""
    info = np.finfo(dtype)
    values = np.array(
        [-np.inf, -info.max, -1.0, -info.tiny, -info.smallest_subnormal, -0.0, 0.0]
        + [info.smallest_subnormal, info.tiny, 1.0, info.max, np.inf],
        dtype=dtype,
    ).astype(np.float64)
    ordinals = floatgrid.ordinal(values, bits)
    assert np.all(np.diff(ordinals[[0, 1, 2, 3, 4, 5]]) > 0) and ordinals[5] == ordinals[6] == 0
    assert np.all(np.diff(ordinals[6:]) > 0)
    with np.errstate(over="ignore"):
        following = np.nextafter(values[1:-1].astype(dtype), dtype(np.inf)).astype(np.float64)
    assert np.array_equal(floatgrid.ordinal(following, bits), ordinals[1:-1] + 1)
    back = floatgrid.from_ordinal(ordinals, bits)
    assert np.array_equal(back, values) and not np.signbit(back[5])  # -0.0 comes back as +0.0
    assert (
        floatgrid.count(np.array([-info.smallest_subnormal]), np.array([info.smallest_subnormal]), bits)[0]
        == 3
    )
    assert list(floatgrid.values(-0.0, 0.0, bits)) == [0.0]


@pytest.mark.parametrize("bits, dtype", [(16, np.float16), (32, np.float32), (64, np.float64)])
def test_split_point_halves_hold_every_value_once(bits, dtype):
    rng = np.random.default_rng(bits)
    lo = rng.normal(0, 10, 400).astype(dtype).astype(np.float64)
    widths = rng.integers(1, 6, 400)
    widths[:100] = 1  # two neighbours: the rounded middle of a double pair is one of them
    hi = floatgrid.from_ordinal(floatgrid.ordinal(lo, bits) + widths, bits)
    last_low, first_high = floatgrid.split_point(lo, hi, bits)
    assert np.all(lo <= last_low) and np.all(last_low < hi)
    assert np.array_equal(floatgrid.ordinal(first_high, bits), floatgrid.ordinal(last_low, bits) + 1)
    huge = np.array([-np.finfo(dtype).max]), np.array([np.finfo(dtype).max])
    middle, after = floatgrid.split_point(*huge, bits)
    assert middle[0] == 0.0 and after[0] == np.finfo(dtype).smallest_subnormal  # no overflow


@pytest.mark.parametrize("kind", [FloatKind.HALF, FloatKind.FLOAT, FloatKind.DOUBLE])
def test_counting_a_wide_box_of_every_float_type(kind):
    """Both paths count a box's values by ordinals; a double box such as [-2, 2] spans 2^63 of them,
    which an int64 difference overflows (it made such a box count as empty or as a few points)."""
    bits = 8 * np.dtype(FloatFormat(kind).dtype).itemsize
    qnet = quantize_network(
        Network((Dense(np.ones((1, 2)), np.zeros(1), Activation.IDENTITY),)),
        ImplementationOptions(FloatFormat(kind)),
    )
    for lo, hi in ((-2.0, 2.0), (-np.inf, np.inf), (-1e-30, 1e-30), (1.0, 1.0)):
        below, above = floatgrid.ordinal(np.array([lo, hi]), bits)
        expected = int(above) - int(below) + 1  # Python ints
        assert floatgrid.count(np.array([lo]), np.array([hi]), bits)[0] == float(expected)
        assert points.count(qnet, np.array([lo, lo]), np.array([hi, hi])) == expected * expected
    assert floatgrid.count(np.array([1.0]), np.array([-1.0]), bits)[0] == 0.0
