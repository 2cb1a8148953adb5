"""Generated C, compiled with gcc, against the Python simulator (bit for bit) and the float reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from qverify.codegen import CompiledNetwork, render_network
from qverify.network import Activation, Dense, Network, evaluate_core
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Layout,
    LutDesign,
    Overflow,
    Rounding,
    quantize_network,
    simulate,
)

ACTIVATIONS = [Activation.RELU, Activation.SIGMOID, Activation.TANH]
FORMATS = [FixedFormat(4, 4), FixedFormat(6, 10), FixedFormat(10, 22)]
N_SAMPLES = 1000


def small_network(seed: int, hidden: Activation) -> Network:
    """Weights in [-3, 3] so every constant fits <4,4> (detect mode needs that)."""
    rng = np.random.default_rng(seed)
    sizes = (4, 7, 5, 3)
    layers = [
        Dense(
            rng.uniform(-3, 3, (n_out, n_in)),
            rng.uniform(-2, 2, n_out),
            hidden if index < len(sizes) - 2 else Activation.IDENTITY,
        )
        for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes))
    ]
    return Network(tuple(layers), name=f"small-{hidden.value}")


def provoking_inputs(fmt: FixedFormat, rng: np.random.Generator) -> np.ndarray:
    """Half the rows anywhere in the word range (overflows), half within [-2, 2] (mostly not)."""
    wide = rng.integers(fmt.min_q, fmt.max_q + 1, size=(N_SAMPLES // 2, 4))
    narrow_bound = min(fmt.max_q, 2 * fmt.scale)
    narrow = rng.integers(-narrow_bound, narrow_bound + 1, size=(N_SAMPLES - N_SAMPLES // 2, 4))
    corners = np.array([[fmt.min_q] * 4, [fmt.max_q] * 4, [0] * 4])
    return np.vstack([corners, wide, narrow])


def assert_c_matches_simulator(qnet, tmp_path, x):
    compiled = CompiledNetwork(render_network(qnet), tmp_path, qnet.is_fixed)
    c_run = compiled.run(x)
    expected = simulate(qnet, x)
    assert np.array_equal(c_run.overflowed, expected.detected)
    ok = ~expected.detected
    assert np.array_equal(c_run.outputs[ok], expected.outputs[ok])
    return c_run, expected


FIXED_CASES = list(
    itertools.product(ACTIVATIONS, FORMATS, list(Rounding), list(Overflow), list(Layout), list(Accumulation))
)


@pytest.mark.parametrize(
    "activation, fmt, rounding, overflow, layout, accumulation",
    FIXED_CASES,
    ids=lambda v: str(getattr(v, "value", v)),
)
def test_fixed_point_c_equals_simulator(tmp_path, activation, fmt, rounding, overflow, layout, accumulation):
    fmt = FixedFormat(fmt.int_bits, fmt.frac_bits, rounding, overflow)
    net = small_network(7, activation)
    qnet = quantize_network(net, ImplementationOptions(fmt, accumulation, layout, LutDesign(resolution=2)))
    rng = np.random.default_rng(hash((activation.value, fmt.word_bits)) % 2**32)
    _, expected = assert_c_matches_simulator(qnet, tmp_path, provoking_inputs(fmt, rng))
    if overflow is Overflow.DETECT:
        assert expected.detected.any() and not expected.detected.all()
    else:
        assert expected.overflowed.any(), "the inputs were chosen to provoke overflow"


@pytest.mark.parametrize("kind", list(FloatKind))
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("layout", list(Layout))
def test_float_c_equals_simulator_and_tracks_reference(tmp_path, kind, activation, layout):
    net = small_network(11, activation)
    qnet = quantize_network(
        net, ImplementationOptions(FloatFormat(kind), layout=layout, lut=LutDesign(resolution=3))
    )
    rng = np.random.default_rng(5)
    x = FloatFormat(kind).round(rng.uniform(-2, 2, size=(N_SAMPLES, 4))).astype(np.float64)
    c_run, _ = assert_c_matches_simulator(qnet, tmp_path, x)
    reference = evaluate_core(net, x)
    # relative rounding error of the whole network: a few units of roundoff per layer and product
    tolerance = {FloatKind.FLOAT: 1e-5, FloatKind.DOUBLE: 1e-12, FloatKind.HALF: 0.15}[kind]
    deviation = np.abs(c_run.outputs - reference) / np.maximum(1.0, np.abs(reference))
    if activation is Activation.RELU:
        assert deviation.max() <= tolerance
    else:  # the tables' error, propagated through the output layer's weights
        lut_error = qnet.lut_error_bound * np.abs(net.layers[-1].weights).sum(axis=1).max() * 4
        assert deviation.max() <= lut_error + tolerance


def test_real_valued_replay_quantises_like_the_simulator(tmp_path):
    from qverify.quant import quantize_real

    fmt = FixedFormat(6, 10, Rounding.NEAREST, Overflow.WRAP)
    qnet = quantize_network(small_network(3, Activation.TANH), ImplementationOptions(fmt))
    rng = np.random.default_rng(9)
    x_real = np.vstack([rng.uniform(-40, 40, size=(500, 4)), (rng.integers(-64, 64, (100, 4)) + 0.5) / 1024])
    words, _ = quantize_real(x_real, fmt)
    compiled = CompiledNetwork(render_network(qnet), tmp_path, True)
    real_run = compiled.run(x_real, raw=False)
    assert np.array_equal(
        np.round(real_run.outputs * fmt.scale).astype(np.int64), simulate(qnet, words).outputs
    )
