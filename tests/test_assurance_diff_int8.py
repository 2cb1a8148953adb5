"""Proof mode with an int8 side: networks quantized by onnxruntime (QOperator) whose int8 input codes
the harness ties to the shared double input exactly (`qverify.assurance.diff.codes`). A disagreement
that provably exists -> UNSAFE, replayed in both compiled C programs and simulators; regions where none
can exist -> SAFE; and the verdicts agree with brute-force enumeration of each region on the
simulators (a dense grid plus every code step inside the region and the double just below it)."""

from __future__ import annotations

import numpy as np
import pytest

from qverify.assurance import ImplementationPair, make_implementation
from qverify.assurance.diff.codes import code_thresholds
from qverify.assurance.diff.criteria import Criterion
from qverify.assurance.diff.inputs import SeedSource
from qverify.assurance.diff.proof import ProofSettings, Replayer, _confirm, make_regions, prove_regions
from qverify.codegen import compile_replay
from qverify.data.transforms import Canvas
from qverify.network import Network
from qverify.network.model import Activation, Dense
from qverify.network.qparams import CodeType, TensorQuant
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from tests.test_assurance_diff import BOUNDARY, needs_esbmc

GRID = 20001  # grid points per input of a region in the brute-force cross-check


def int8_pair(net: Network, tmp_path, codes: CodeType = CodeType.INT8) -> ImplementationPair:
    """`net` as float32 against its onnxruntime int8 model (QOperator, calibrated on [0, 1]^n)."""
    calibration = np.random.default_rng(0).random((200, net.n_inputs))
    calibration[:2] = [[0.0] * net.n_inputs, [1.0] * net.n_inputs]
    settings = QuantizeSettings(QuantFormat.QOP, activations=codes)
    quantized = quantize_with_onnxruntime(
        net, calibration, settings, tmp_path / f"{net.name}.{codes.value}.onnx"
    )
    return ImplementationPair(make_implementation(net, "float"), make_implementation(quantized, "int8"))


def boundary_net() -> Network:
    """y0 = 0.29, y1 = x: the int8 model reads x as a code (step 1/255) and 0.29 as the code nearest it."""
    return Network((Dense(np.array([[0.0], [1.0]]), np.array([BOUNDARY, 0.0]), Activation.IDENTITY),),
                   name="boundary")  # fmt: skip


@pytest.fixture(scope="module")
def boundary(tmp_path_factory) -> ImplementationPair:
    return int8_pair(boundary_net(), tmp_path_factory.mktemp("int8"))


@pytest.fixture(scope="module")
def boundary_uint8(tmp_path_factory) -> ImplementationPair:
    return int8_pair(boundary_net(), tmp_path_factory.mktemp("uint8"), CodeType.UINT8)


@pytest.fixture(scope="module")
def crossing(tmp_path_factory) -> ImplementationPair:
    """y0 = x0, y1 = x1: the reference says 1 iff x1 > x0; the int8 model compares codes (a tie goes to 0)."""
    net = Network((Dense(np.eye(2), np.zeros(2), Activation.IDENTITY),), name="crossing")
    return int8_pair(net, tmp_path_factory.mktemp("crossing"))


def unit_source(seed: np.ndarray) -> SeedSource:
    return SeedSource("t", seed[None, :], None, Canvas(0.0, 1.0), lambda x: np.asarray(x, float))


# per region: 10-30 times what one takes on a busy machine; not the 600 s safety net, because the
# engine divides its time by shares (its attack gets 5 % of what remains) and larger limits only cost
# more CPU where a step cannot succeed (the distance criterion: 3.3 s at 60 s, 7.7 s at 600 s)
REGION_S = 60.0


def prove(pair, seed, radius, tmp_path, backend="internal", criterion=None, stability=True, **box):
    """One region, without sampling: decided by the stability proofs (default) or the two-network harness."""
    seed = np.atleast_1d(np.asarray(seed, dtype=np.float64))
    settings = ProofSettings(backend, REGION_S, radius=radius, sample=False, stability=stability, **box)
    source = unit_source(seed)
    return prove_regions(pair, criterion or Criterion(), source, seed[None, :], settings, tmp_path, False)[0]


def brute_force(pair: ImplementationPair, seed: float, radius: float) -> bool:
    """Does any grid point of [seed - radius, seed + radius] (clipped to [0, 1]) disagree? The grid holds
    every code step of the int8 side inside the region and the double just below each."""
    lo, hi = max(seed - radius, 0.0), min(seed + radius, 1.0)
    steps = np.array([t for t in code_thresholds(pair.candidate.qnet.input_quant).values() if lo <= t <= hi])
    x = np.concatenate([np.linspace(lo, hi, GRID), steps, np.nextafter(steps, -np.inf)])[:, None]
    x = x[(x[:, 0] >= lo) & (x[:, 0] <= hi)]
    reference, candidate = pair.reference.run(x).outputs, pair.candidate.run(x).outputs
    return bool(np.any(Criterion().disagrees(reference, candidate)))


@pytest.mark.parametrize(
    "quant",
    [
        TensorQuant(np.float32(1 / 255), -128, CodeType.INT8),
        TensorQuant(np.float32(0.1), 3, CodeType.UINT8),
        TensorQuant(np.float32(3e-30), 7, CodeType.INT8),
    ],
)
def test_code_steps_are_quantize_linears(quant):
    """c >= k <=> x >= T_k for every double: checked at each step, just below it, and on random doubles."""
    steps = code_thresholds(quant)
    codes, t = np.array(list(steps)), np.array(list(steps.values()))
    assert np.all(np.diff(t) > 0) and len(codes) == quant.code.qmax - quant.code.qmin
    assert np.array_equal(quant.quantize(t), codes)
    assert np.array_equal(quant.quantize(np.nextafter(t, -np.inf)), codes - 1)
    x = np.random.default_rng(1).uniform(1.1 * t[0] - abs(t[0]), 1.1 * t[-1] + abs(t[-1]), 100_000)
    assert np.array_equal(quant.code.qmin + (x[:, None] >= t[None, :]).sum(axis=1), quant.quantize(x))


@pytest.mark.parametrize("stability", [False, True])
def test_int8_disagreement_unsafe_replayed_in_both_c_programs(boundary, tmp_path, stability):
    verdict = prove(boundary, 0.291, 0.005, tmp_path, stability=stability)
    assert verdict.status == "UNSAFE", verdict.reason
    origin = "the reference's stability counterexample" if stability else "internal"
    assert verdict.reason.startswith(f"found by {origin}, replayed")
    (x,) = verdict.x
    assert BOUNDARY < x < 0.2925  # the flip zone: above 0.29, below the next code step
    assert int(np.argmax(verdict.reference)) == 1 and int(np.argmax(verdict.candidate)) == 0
    assert Criterion().disagrees(boundary.reference.run(verdict.x[None, :]).outputs,
                                 boundary.candidate.run(verdict.x[None, :]).outputs)[0]  # fmt: skip
    for role in ("reference", "candidate"):
        assert (tmp_path / f"{role}_network" / "network").exists()
    harness = (tmp_path / "region000" / "diff_harness.c").read_text()
    assert "nondet_char() for qb_x[0..0] (input codes, tied to x)" in harness


def test_a_counterexample_that_does_not_replay_is_unknown(boundary, tmp_path):
    """The replay guard: values outside the flip zone hold in the harness -> UNKNOWN, never UNSAFE."""
    assert prove(boundary, 0.291, 0.005, tmp_path).status == "UNSAFE"
    region = make_regions(unit_source(np.array([0.291])), np.array([[0.291]]), ProofSettings(radius=0.005))[0]
    outcome = _confirm(boundary, Criterion(), unit_source(np.array([0.291])), region,
                       tmp_path / "region000" / "diff_harness.c", Replayer(boundary, tmp_path), [0.287], 1,
                       "a made-up back end", lambda status, reason="", **found: (status, reason))  # fmt: skip
    assert outcome == (
        "UNKNOWN",
        "the counterexample of a made-up back end does not replay in the harness: HOLDS",
    )


@pytest.mark.parametrize(
    "seed, radius, expected",
    [
        (0.1, 0.05, "SAFE"),
        (0.285, 0.0049, "SAFE"),  # ends just below 0.29
        (0.2965, 0.004, "SAFE"),  # starts at 0.2925, above the flip zone
        (0.29, 0.0003, "UNSAFE"),
        (0.2935, 0.0012, "SAFE"),  # starts at 0.2923, beyond the last disagreeing code step
        (0.2921, 0.0002, "UNSAFE"),
        (0.0, 0.01, "SAFE"),  # from code -128, the saturation end (no range check the type makes moot)
        (1.0, 0.01, "SAFE"),  # to code 127
    ],
)
def test_verdicts_agree_with_brute_force(boundary, tmp_path, seed, radius, expected):
    assert brute_force(boundary, seed, radius) == (expected == "UNSAFE")  # the region is what we think
    verdict = prove(boundary, seed, radius, tmp_path)
    assert verdict.status == expected, verdict.reason
    compile_replay(tmp_path / "region000" / "diff_harness.c")  # gcc -Wall -Wextra -Werror takes it


@pytest.mark.parametrize("seed, radius", [(0.291, 0.005), (0.2935, 0.0012)])
def test_uint8_codes_agree_with_brute_force(boundary_uint8, tmp_path, seed, radius):
    verdict = prove(boundary_uint8, seed, radius, tmp_path)
    assert verdict.status == ("UNSAFE" if brute_force(boundary_uint8, seed, radius) else "SAFE"), (
        verdict.reason
    )
    assert "nondet_uchar()" in (tmp_path / "region000" / "diff_harness.c").read_text()


def test_two_inputs_unsafe_on_the_diagonal_safe_away_from_it(crossing, tmp_path):
    unsafe = prove(crossing, [0.5, 0.5], 0.01, tmp_path / "u")
    assert unsafe.status == "UNSAFE", unsafe.reason
    x0, x1 = unsafe.x
    codes = crossing.candidate.inputs(unsafe.x[None, :])[0]
    assert x1 > x0 and codes[0] == codes[1]  # the reference sees x1 above x0, the int8 model a tie
    assert prove(crossing, [0.2, 0.7], 0.05, tmp_path / "s").status == "SAFE"


def test_distance_criterion_reads_the_codes_affinely(boundary, tmp_path):
    """|y_ref - y_cand| is at most half a code step (1/510) plus 0.29's own rounding, far below 0.01;
    x's distance to its code reaches 1/510 > 0.001 in [0.4, 0.6]."""
    assert (
        prove(boundary, 0.5, 0.1, tmp_path / "s", criterion=Criterion("distance", delta=0.01)).status
        == "SAFE"
    )
    unsafe = prove(boundary, 0.5, 0.1, tmp_path / "u", criterion=Criterion("distance", delta=0.001))
    assert unsafe.status == "UNSAFE", unsafe.reason
    assert np.max(np.abs(unsafe.reference - unsafe.candidate)) > 0.001


def test_brightness_box_with_an_int8_candidate(boundary, tmp_path):
    unsafe = prove(boundary, 0.25, 0.0, tmp_path / "u", brightness=(0.0, 0.1))
    assert unsafe.status == "UNSAFE", unsafe.reason
    assert BOUNDARY < unsafe.x[0] < 0.2925
    assert prove(boundary, 0.25, 0.0, tmp_path / "s", brightness=(-0.1, 0.0)).status == "SAFE"


@needs_esbmc
def test_esbmc_reads_the_int8_harness(boundary, tmp_path):
    unsafe = prove(boundary, 0.291, 0.005, tmp_path / "u", "esbmc")
    assert unsafe.status == "UNSAFE", unsafe.reason
    assert BOUNDARY < unsafe.x[0] < 0.2925
    assert prove(boundary, 0.1, 0.05, tmp_path / "s", "esbmc").status == "SAFE"
