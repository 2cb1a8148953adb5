"""Input splitting's choice of the input to bisect: the relaxation error that the bounds paid at
unstable ReLUs is shared among the inputs that drive them, so splitting narrows what is loose."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from qverify.codegen import render_harness
from qverify.engine import EngineOptions, EngineStatus, check_file
from qverify.engine.scalar.relax import RelaxedModel, _relu_gaps, bounds
from qverify.io import load_network
from qverify.network import Activation
from qverify.properties.builders import to_normalised
from qverify.properties.vnnlib import read_vnnlib
from qverify.quant import FixedFormat, ImplementationOptions, Layout, quantize_network
from tests.conftest import ACAS, budgeted
from tests.test_engine_passes import MODELS_C, first_assertion_query, harness_program

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


def test_relu_gaps_are_the_largest_distances_of_the_relaxation_sides():
    """The upper side's and DeepPoly's lower side's furthest distance from the ReLU over [l, u],
    against a dense sample of the interval; stable units have no gap."""
    rng = np.random.default_rng(11)
    lo = np.concatenate([-rng.uniform(0.01, 5, 40), rng.uniform(0, 3, 5), -rng.uniform(1, 3, 5)])
    hi = np.concatenate([rng.uniform(0.01, 5, 40), lo[40:45] + 1, lo[45:] + rng.uniform(0, 1, 5)])
    gap_u, gap_l = _relu_gaps(lo, hi)
    for low, high, up, down in zip(lo, hi, gap_u, gap_l):
        z = np.append(np.linspace(low, high, 2001), 0.0)  # the kink: where the sides are furthest
        relu = np.maximum(z, 0)
        if low >= 0 or high <= 0:
            assert up == down == 0
            continue
        upper_side = high / (high - low) * (z - low)
        lower_side = z if high > -low else 0 * z
        assert np.isclose(up, (upper_side - relu).max(), rtol=1e-6)
        assert np.isclose(down, (relu - lower_side).max(), rtol=1e-6)


def _model_and_rows(tmp_path):
    program = harness_program(tmp_path, FixedFormat(8, 8), Activation.RELU, Layout.SEQUENTIAL)
    _, _, lowering, (conjunction, *_) = first_assertion_query(program)
    model = RelaxedModel.build(lowering)
    return model, [model.row_of(lit.expr) for lit in conjunction.literals]


@needs_gcc
def test_split_gain_adds_the_relaxation_error_only_where_relus_are_unstable(tmp_path):
    """The split gain is the bound's |coefficient| x width plus a non-negative share of the
    relaxation error; on boxes where no ReLU's argument crosses 0 the share is exactly 0."""
    model, rows = _model_and_rows(tmp_path)
    rng = np.random.default_rng(4)
    lo = rng.integers(-256, 200, size=(64, 2)).astype(np.float64)
    hi = lo + rng.integers(0, 120, size=(64, 2))
    result = bounds(model, lo, hi, rows)
    inputs = [model.input_kept[i] for i in sorted(model.input_kept)]
    width = result.ub[:, inputs] - result.lb[:, inputs]  # the box within the inputs' range
    linear_part = np.abs(result.row_input_coef) * width[:, None, :]
    extra = result.row_spread - linear_part
    assert np.all(extra >= -1e-9 * (1 + linear_part))
    relus = np.flatnonzero(np.isfinite(result.arg_lo[0]))
    crossing = ((result.arg_lo[:, relus] < 0) & (result.arg_hi[:, relus] > 0)).any(axis=1)
    assert crossing.any() and (~crossing).any()
    assert np.allclose(extra[~crossing], 0.0)
    assert np.all(extra[crossing].sum(axis=(1, 2)) > 0)


@needs_gcc
def test_acas_xu_phi1_splits_along_the_inputs_that_drive_the_unstable_relus(tmp_path):
    """ACAS Xu 1_4 phi1 at <16,16>, splitting only: a split rule that sees only the bound's input
    coefficients needed 9,375 boxes here (and more than 290,000 on 2_4); sharing the relaxation
    error among the inputs decides it in about a hundred. A deterministic count, not a timing."""
    net = load_network(ACAS / "nnet" / "ACASXU_run2a_1_4_batch_2000.nnet")
    prop = to_normalised(read_vnnlib(ACAS / "vnnlib" / "prop_1.vnnlib"), net)
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(16, 16)))
    harness = render_harness(qnet, prop).write(tmp_path)
    options = budgeted(disable=("lift", "attack", "milp", "smt"))  # the scalar path
    result = check_file(harness, [MODELS_C], options)
    assert result.status is EngineStatus.SAFE, result.reason
    assert result.decided_by == "split"
    assert result.counts["boxes"] <= 1_000


def test_box_points_of_a_64_input_box():
    """A box of few points over more inputs than numpy's meshgrid takes (32): every point, first
    input slowest (a digits robustness query at <5,3> failed here)."""
    from qverify.engine.scalar.branch import box_points

    lo = np.zeros(64)
    hi = np.zeros(64)
    hi[[0, 40]] = [1, 2]
    points = box_points(lo, hi)
    assert points.shape == (6, 64)
    assert [tuple(p[[0, 40]]) for p in points] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert not points[:, [i for i in range(64) if i not in (0, 40)]].any()
