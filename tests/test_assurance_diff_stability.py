"""Proof mode's cheaper strategies before the two-network harness: the stability proofs (each side keeps
the seed's class, checked by the ordinary single-network pipeline) and the bisection between
differently classified points. Their boxes must be exactly what each side receives from the region;
their verdicts are cross-checked against brute force on small random networks in every number format
the pair harness takes, and ACAS Xu (whose two-network harness the engine cannot decide in 60 s) is
decided by them."""

from __future__ import annotations

import numpy as np
import pytest

from qverify.assurance import ImplementationPair, make_implementation
from qverify.assurance.diff.boundary import find_disagreement_between
from qverify.assurance.diff.criteria import Criterion
from qverify.assurance.diff.inputs import SeedSource
from qverify.assurance.diff.proof import ProofSettings, prove_regions
from qverify.assurance.diff.stability import leaves_class, predicts_class, side_box
from qverify.codegen.conditions import implementation_box
from qverify.data.transforms import Canvas
from qverify.io import load_network
from qverify.network import Network
from qverify.network.model import Activation, Dense
from tests.conftest import ROOT, SAFETY_NET_S
from tests.test_assurance_diff import BOUNDARY, boundary_pair, prove
from tests.test_assurance_diff_int8 import boundary_net, int8_pair

ACAS = ROOT / "benchmarks" / "acasxu" / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet"


def _domain_values(side, texts: tuple[str, ...]) -> np.ndarray:
    if side.qnet.is_integer:
        return np.array([int(t) for t in texts], dtype=np.int64)
    return np.array([float.fromhex(t.rstrip("f")) for t in texts])


@pytest.mark.parametrize("label", ["4.4", "6.4", "16.16", "half", "float", "double", "int8"])
@pytest.mark.parametrize("widen", [False, True])
def test_side_box_is_exactly_what_the_side_receives(label, widen, tmp_path):
    """For random regions: the harness generator's conversion of the box gives the side's inputs of the
    region's two corners as its ends (one more word/code/value each side when widened), and every
    random point of the region lands inside."""
    net = boundary_net()
    side = int8_pair(net, tmp_path).candidate if label == "int8" else make_implementation(net, label)
    rng = np.random.default_rng(3)
    for _ in range(25):
        lo = rng.random(1) * 0.9
        hi = lo + rng.random(1) * 0.1
        box = side_box(side, lo, hi, widen)
        assert box is not None
        converted = implementation_box(side.qnet, box)
        low, high = _domain_values(side, converted.lo), _domain_values(side, converted.hi)
        corner_low, corner_high = side.inputs(np.stack([lo, hi]))
        if widen and side.qnet.is_integer:
            assert np.array_equal(low, corner_low - 1) and np.array_equal(high, corner_high + 1)
        elif widen:
            assert np.all(low < corner_low) and np.all(high > corner_high)
            dtype = side.qnet.number.dtype
            assert np.array_equal(np.nextafter(low.astype(dtype), dtype(np.inf)), corner_low.astype(dtype))
        else:
            assert np.array_equal(low, corner_low) and np.array_equal(high, corner_high)
        inside = side.inputs(lo + rng.random((200, 1)) * (hi - lo))
        assert np.all((inside >= low) & (inside <= high))


def test_class_conditions_are_the_argmax_scan():
    """`leaves_class` holds exactly where np.argmax (first maximum) differs from the label, and
    `predicts_class` exactly where it equals it -- ties included."""
    rng = np.random.default_rng(0)
    outputs = rng.integers(-2, 3, size=(4000, 4)).astype(np.float64)  # many ties
    top = np.argmax(outputs, axis=1)
    for label in range(4):
        leaves = leaves_class(label, 4).violated_clause(outputs) >= 0
        predicts = predicts_class(label, 4).violated_clause(outputs) >= 0
        assert np.array_equal(leaves, top != label) and np.array_equal(predicts, top == label)


def _small_relu(seed: int) -> Network:
    rng = np.random.default_rng(seed)
    w1, b1 = rng.normal(0, 1, (6, 2)), rng.normal(0, 0.3, 6)
    w2, b2 = rng.normal(0, 0.7, (3, 6)), rng.normal(0, 0.3, 3)
    return Network((Dense(w1, b1, Activation.RELU), Dense(w2, b2, Activation.IDENTITY)), name=f"small{seed}")


def _brute_force_disagrees(pair: ImplementationPair, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Any disagreement on a 301 x 301 grid of the region plus every fixed-point cell edge of the
    candidate inside it (and the doubles either side of each)?"""
    axes = []
    for i in range(2):
        grid = np.linspace(lo[i], hi[i], 301)
        if pair.candidate.qnet.is_fixed:
            step = 1.0 / pair.candidate.qnet.number.scale
            edges = (np.arange(np.floor(lo[i] / step), np.ceil(hi[i] / step) + 1) + 0.5) * step
            edges = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
            grid = np.concatenate([grid, edges[(edges >= lo[i]) & (edges <= hi[i])]])
        axes.append(grid)
    x = np.stack(np.meshgrid(*axes), axis=-1).reshape(-1, 2)
    reference, candidate = pair.run(x)
    return bool(np.any(Criterion().disagrees(reference.outputs, candidate.outputs)))


def _cross_check(candidate: str, networks: range, tmp_path) -> None:
    """Small random ReLU networks, float against `candidate`, regions around random seeds: a SAFE is
    never contradicted by the grid, an UNSAFE is replayed (in both compiled programs, by construction)
    and lies in its region; and the strategies decide most regions without the pair harness."""
    decided_without_harness = total = 0
    for seed in networks:
        net = _small_relu(seed)
        pair = ImplementationPair(make_implementation(net, "float"), make_implementation(net, candidate))
        centres = np.random.default_rng(seed + 10).random((3, 2)) * 0.8 + 0.1
        source = SeedSource("t", centres, None, Canvas(0.0, 1.0), lambda v: np.asarray(v, float))
        settings = ProofSettings("internal", SAFETY_NET_S, radius=0.04)
        verdicts = prove_regions(pair, Criterion(), source, centres, settings, tmp_path / f"n{seed}", False)
        for centre, verdict in zip(centres, verdicts):
            lo, hi = np.clip(centre - 0.04, 0, 1), np.clip(centre + 0.04, 0, 1)
            total += 1
            if verdict.status == "SAFE":
                assert not _brute_force_disagrees(pair, lo, hi), (seed, centre, verdict.reason)
            if verdict.status == "UNSAFE":
                assert np.all((verdict.x >= lo) & (verdict.x <= hi))
                assert np.argmax(verdict.reference) != np.argmax(verdict.candidate)
            decided_without_harness += (
                verdict.status in ("SAFE", "UNSAFE") and verdict.method != "pair harness"
            )
    assert decided_without_harness >= total // 2


@pytest.mark.parametrize(
    ("candidate", "networks"), [("4.4", range(2)), ("6.4", range(1)), ("half", range(1))]
)  # (two networks at <4,4>, which has both verdicts; the slow variant below takes twenty per format)
def test_stability_and_bisection_agree_with_brute_force(candidate, networks, tmp_path):
    _cross_check(candidate, networks, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("candidate", ["4.4", "6.4", "8.8", "half"])
def test_stability_and_bisection_agree_with_brute_force_many(candidate, tmp_path):
    _cross_check(candidate, range(2, 22), tmp_path)


def test_bisection_finds_a_disagreement_narrower_than_a_word():
    """<16,16> against float on y0 = 0.29, y1 = x: the two disagree only within one word (2^-16) of
    0.29; bisection from a class-0 point to a class-1 point lands there."""
    pair = boundary_pair("16.16")
    point = find_disagreement_between(pair, Criterion(), lambda v: v, np.array([0.2]), np.array([0.4]))
    assert point is not None and abs(point[0] - BOUNDARY) < 2.0**-16
    reference, candidate = pair.run(point[None, :])
    assert Criterion().disagrees(reference.outputs, candidate.outputs)[0]
    same = find_disagreement_between(pair, Criterion(), lambda v: v, np.array([0.1]), np.array([0.2]))
    assert same is None  # one class at both ends: nothing to bisect


def test_bisection_refutes_where_sampling_misses(tmp_path):
    """The same pair, a region of radius 0.1 around 0.3: 2,000 samples miss the one-word flip zone, the
    bisection between differently classified samples finds it, and the harness replays it."""
    pair = boundary_pair("16.16")
    source = SeedSource("t", np.array([[0.3]]), None, Canvas(0.0, 1.0), lambda v: np.asarray(v, float))
    settings = ProofSettings("internal", SAFETY_NET_S, radius=0.1, stability=False)
    verdict = prove_regions(pair, Criterion(), source, np.array([[0.3]]), settings, tmp_path, False)[0]
    assert verdict.status == "UNSAFE" and verdict.method == "bisection", verdict.reason
    assert abs(verdict.x[0] - BOUNDARY) < 2.0**-16


def test_acas_region_decided_by_stability(tmp_path):
    """ACAS Xu 1_1, float against <16,16>: the two-network harness leaves such regions UNKNOWN at 60 s;
    the stability proofs (network-level bounds on each side's own harness) decide it."""
    net = load_network(ACAS)
    pair = ImplementationPair(make_implementation(net, "float"), make_implementation(net, "16.16"))
    seeds = np.array([[0.3, -0.2, 0.1, 0.2, -0.1]])
    source = SeedSource("acas", seeds, None, Canvas(-0.5, 0.5), lambda v: np.asarray(v, float))
    settings = ProofSettings("internal", SAFETY_NET_S, radius=0.001, sample=False)
    for verdict in prove_regions(pair, Criterion(), source, seeds, settings, tmp_path, False):
        assert verdict.status == "SAFE" and verdict.method == "stability", verdict.reason
        assert "both implementations predict class" in verdict.reason and "netlevel" in verdict.reason


def test_two_fixed_point_formats_are_decided_without_a_shared_program(tmp_path):
    """<6,4> against <8,8> on y0 = 0.29, y1 = x: one C program cannot hold both formats, so the region
    goes through sampling, bisection and the stability proofs only, and an UNSAFE is confirmed in both
    compiled networks and simulators. They disagree exactly for x in [0.291015625, 0.34375): <8,8>
    says 1 from x = 74.5/256 on, <6,4> from 5.5/16 on."""
    net = boundary_pair().reference.network
    pair = ImplementationPair(make_implementation(net, "6.4"), make_implementation(net, "8.8"))
    unsafe = prove(pair, 0.3, tmp_path=tmp_path / "u", stability=True, radius=0.05)
    assert unsafe.status == "UNSAFE" and unsafe.method == "stability", unsafe.reason
    assert 0.291015625 <= unsafe.x[0] < 0.34375
    assert not (tmp_path / "u" / "region000" / "diff_harness.c").exists()
    safe = prove(pair, 0.1, tmp_path=tmp_path / "s", stability=True, radius=0.1)
    assert safe.status == "SAFE" and safe.method == "stability", safe.reason
    sampled = prove(pair, 0.3, tmp_path=tmp_path / "p", sample=True, stability=True, radius=0.05)
    assert sampled.status == "UNSAFE" and sampled.method == "sampling"
    alone = prove(pair, 0.3, tmp_path=tmp_path / "a", radius=0.05)  # the harness alone: there is none
    assert alone.status == "UNKNOWN" and "no two-network harness" in alone.reason
