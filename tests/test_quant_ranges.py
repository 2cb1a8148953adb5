"""Range analysis is sound: no sampled value ever leaves the computed bounds."""

from __future__ import annotations

import numpy as np
import pytest

from qverify.errors import RangeError
from qverify.io import load_network
from qverify.network import Activation, Dense, Network, apply_activation
from qverify.quant import (
    FixedFormat,
    ImplementationOptions,
    Layout,
    Overflow,
    Rounding,
    implementation_bounds,
    input_box_words,
    overflow_warnings,
    propose_int_bits,
    quantize_network,
    quantize_real,
    real_bounds,
    simulate,
)
from qverify.quant.ranges import OVERFLOW_IN_C, OVERFLOW_IN_VERDICT
from tests.conftest import ACAS_1_1, ACAS_NNETS, random_network

N_SAMPLES = 10_000


def sample_box(rng, lo, hi, n=N_SAMPLES):
    """Uniform points plus the box's corners-ish extremes (each coordinate at lo or hi)."""
    uniform = rng.uniform(lo, hi, size=(n, lo.size))
    extremes = np.where(rng.random((n // 10, lo.size)) < 0.5, lo, hi)
    return np.vstack([uniform, extremes])


@pytest.mark.parametrize("path", ACAS_NNETS, ids=lambda p: p.stem)
def test_real_bounds_are_sound_for_every_acas_network(path):
    net = load_network(path)
    lo, hi = net.default_input_box()
    x = sample_box(np.random.default_rng(1), lo, hi)
    values = x
    for layer, bounds in zip(net.layers, real_bounds(net, lo, hi)):
        pre = values @ layer.weights.T + layer.bias
        values = apply_activation(layer.activation, pre)
        assert np.all(pre >= bounds.pre_lo) and np.all(pre <= bounds.pre_hi)
        assert np.all(values >= bounds.post_lo) and np.all(values <= bounds.post_hi)


@pytest.mark.parametrize(
    "fmt",
    [
        FixedFormat(20, 12),
        FixedFormat(16, 16, overflow=Overflow.SATURATE),
        FixedFormat(16, 16, overflow=Overflow.WRAP),
    ],
    ids=lambda f: f"{f}-{f.overflow.value}",
)
def test_implementation_bounds_are_sound_on_acas(fmt):
    net = load_network(ACAS_1_1)
    lo, hi = net.default_input_box()
    qnet = quantize_network(net, ImplementationOptions(fmt))
    lo_q, hi_q = input_box_words(lo, hi, fmt)
    # 3,000 points (+300 extremes): the per-op simulation of ACAS Xu is the cost (10,000: 4 s a case)
    x_q = sample_box(np.random.default_rng(2), lo_q, hi_q, 3_000).round().astype(np.int64)
    result = simulate(qnet, x_q, trace=True)
    for trace, bounds in zip(result.layers, implementation_bounds(qnet, lo_q, hi_q)):
        assert np.all(trace.pre >= bounds.pre_lo) and np.all(trace.pre <= bounds.pre_hi)
        assert np.all(trace.post >= bounds.post_lo) and np.all(trace.post <= bounds.post_hi)


@pytest.mark.parametrize("activation", [Activation.RELU, Activation.SIGMOID, Activation.TANH])
@pytest.mark.parametrize("layout", list(Layout))
def test_proposed_int_bits_cannot_overflow(rng, activation, layout):
    net = random_network(rng, (4, 10, 6, 3), activation, scale=2.0)
    lo, hi = -np.ones(4), np.ones(4)
    proposal = propose_int_bits(net, lo, hi, 10, ImplementationOptions(layout=layout))
    fmt = FixedFormat(proposal.int_bits, 10, overflow=Overflow.DETECT)
    qnet = quantize_network(net, ImplementationOptions(fmt, layout=layout))
    x_q, _ = quantize_real(sample_box(rng, lo, hi), fmt)
    assert not simulate(qnet, x_q).overflowed.any()
    assert proposal.int_bits >= proposal.real_int_bits - 1


def test_proposal_for_acas_xu():
    net = load_network(ACAS_1_1)
    lo, hi = net.default_input_box()
    proposal = propose_int_bits(net, lo, hi, 12)
    assert proposal.int_bits == 20 and proposal.real_int_bits == 20
    assert "layer 6" in proposal.binding
    with pytest.raises(RangeError, match="no format with 16 fractional bits"):
        propose_int_bits(net, lo, hi, 16)


@pytest.mark.parametrize("overflow", list(Overflow))
def test_the_overflow_warning_says_what_the_c_does_and_that_the_verdict_covers_it(overflow):
    """Issue 42: printed next to SAFE, the warning said neither what happens on an overflow nor
    whether SAFE accounts for it. The C saturates, wraps or asserts (models_c/fxp.h), and the
    verdict is about that C in every mode."""
    net = Network((Dense(np.array([[7.0, 7.0]]), np.array([0.0]), Activation.IDENTITY),), name="big")
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(4, 4, Rounding.NEAREST, overflow)))
    lo, hi = np.zeros(2), np.ones(2)
    (plain,) = overflow_warnings(qnet, lo, hi)
    (with_verdict,) = overflow_warnings(qnet, lo, hi, verdict=True)
    assert plain.startswith("1 neuron can overflow <4,4> by interval bounds over the input box")
    assert plain.endswith(OVERFLOW_IN_C[overflow]) and "verdict" not in plain
    assert with_verdict == f"{plain}; {OVERFLOW_IN_VERDICT[overflow]}"
    expected = {
        Overflow.SATURATE: "saturation included",
        Overflow.WRAP: "wrap-around included",
        Overflow.DETECT: "an overflow is a violation",
    }
    assert expected[overflow] in with_verdict
