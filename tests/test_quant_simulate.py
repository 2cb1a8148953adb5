"""The bit-exact simulator: tracks the float reference within an independently derived error bound,
and gives the same words in both layouts when nothing can overflow."""

from __future__ import annotations

import numpy as np
import pytest

from qverify.network import Activation, evaluate_core
from qverify.quant import (
    Accumulation,
    FixedFormat,
    ImplementationOptions,
    Layout,
    LutDesign,
    Overflow,
    Rounding,
    quantize_network,
    quantize_real,
    real_bounds,
    simulate,
)
from qverify.quant.lut import LIPSCHITZ
from tests.conftest import random_network


def error_bound(qnet, lo, hi) -> np.ndarray:
    """|simulated - real| per output, derived from the format alone (not from the simulator)."""
    fmt: FixedFormat = qnet.number
    r = 2.0**-fmt.frac_bits if fmt.rounding is Rounding.FLOOR else 2.0 ** -(fmt.frac_bits + 1)
    wide = qnet.options.accumulation is Accumulation.WIDE
    error = np.full(qnet.n_inputs, r)
    magnitude = np.maximum(np.abs(lo), np.abs(hi)) + error
    for layer, bounds in zip(qnet.source.layers, real_bounds(qnet.source, lo, hi)):
        abs_w = np.abs(layer.weights)
        rounding = r if wide else layer.n_in * r
        pre = abs_w @ error + r * magnitude.sum() + rounding + r
        if layer.activation in LIPSCHITZ:
            error = LIPSCHITZ[layer.activation] * pre + qnet.lut_for(layer.activation).error_bound
        else:
            error = pre
        magnitude = np.maximum(np.abs(bounds.post_lo), np.abs(bounds.post_hi)) + error
    return error


@pytest.mark.parametrize("activation", [Activation.RELU, Activation.SIGMOID, Activation.TANH])
@pytest.mark.parametrize(
    "fmt",
    [FixedFormat(16, 16), FixedFormat(12, 20, Rounding.FLOOR), FixedFormat(8, 24), FixedFormat(32, 0)],
    ids=str,
)
@pytest.mark.parametrize("accumulation", list(Accumulation))
def test_wide_formats_track_float_within_the_quantisation_bound(rng, activation, fmt, accumulation):
    scale = 64.0 if fmt.frac_bits == 0 else 1.0  # an integer format needs integer-sized values
    net = random_network(rng, (4, 12, 8, 3), activation, scale=scale)
    lo, hi = -np.ones(4) * scale, np.ones(4) * scale
    options = ImplementationOptions(
        fmt, accumulation, Layout.SEQUENTIAL, LutDesign(eps=1e-3, resolution=None)
    )
    qnet = quantize_network(net, options)
    x = rng.uniform(lo, hi, size=(2000, 4))
    x_q, _ = quantize_real(x, fmt)
    result = simulate(qnet, x_q)
    assert not result.overflowed.any()
    deviation = np.abs(result.outputs / fmt.scale - evaluate_core(net, x)).max(axis=0)
    assert np.all(deviation <= error_bound(qnet, lo, hi))


@pytest.mark.parametrize("activation", [Activation.RELU, Activation.TANH])
@pytest.mark.parametrize("fmt", [FixedFormat(16, 8), FixedFormat(10, 6, Rounding.FLOOR)], ids=str)
def test_layouts_agree_without_overflow(rng, activation, fmt):
    net = random_network(rng, (6, 9, 5), activation)
    x_q = rng.integers(-(1 << fmt.frac_bits), 1 << fmt.frac_bits, size=(3000, 6))
    outputs = []
    for layout in Layout:
        qnet = quantize_network(net, ImplementationOptions(fmt, layout=layout))
        result = simulate(qnet, x_q)
        assert not result.overflowed.any()
        outputs.append(result.outputs)
    assert np.array_equal(outputs[0], outputs[1])


@pytest.mark.parametrize("overflow", [Overflow.WRAP, Overflow.SATURATE])
def test_layouts_differ_only_through_saturation(rng, overflow):
    """Wrapped addition is associative modulo 2^w, so only saturation makes the order visible."""
    fmt = FixedFormat(4, 3, overflow=overflow)
    net = random_network(rng, (8, 6, 2), Activation.RELU, scale=1.5)
    x_q = rng.integers(fmt.min_q, fmt.max_q + 1, size=(3000, 8))
    results = [
        simulate(quantize_network(net, ImplementationOptions(fmt, layout=layout)), x_q) for layout in Layout
    ]
    detect = simulate(
        quantize_network(net, ImplementationOptions(FixedFormat(4, 3, overflow=Overflow.DETECT))), x_q
    )
    differ = np.any(results[0].outputs != results[1].outputs, axis=1)
    assert differ.any() == (overflow is Overflow.SATURATE)
    assert not np.any(differ & ~detect.overflowed)


def test_detect_reports_the_first_overflowing_neuron():
    from qverify.network import Dense, Network
    from qverify.quant import neuron_name

    net = Network(
        (
            Dense(np.array([[1.0], [3.0]]), np.zeros(2), Activation.RELU),
            Dense(np.array([[1.0, 1.0]]), np.zeros(1), Activation.IDENTITY),
        )
    )
    qnet = quantize_network(net, ImplementationOptions(FixedFormat(4, 0, overflow=Overflow.DETECT)))
    result = simulate(qnet, np.array([[1], [2], [3]]))
    assert result.overflowed.tolist() == [False, True, True]
    assert neuron_name(qnet, int(result.overflow_site[1])) == "layer 2, neuron 0"  # 2 + 3*2 = 8 > 7
    assert neuron_name(qnet, int(result.overflow_site[2])) == "layer 1, neuron 1"  # 3*3 = 9 > 7
