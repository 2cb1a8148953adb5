"""Convolutional networks in every fixed-point and float format: the generated C (gcc) equals the
simulator bit for bit, float formats track the float64 reference, and the interval analysis bounds
what the C computes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from qverify.codegen import CompiledNetwork, render_network
from qverify.errors import UnsupportedError
from qverify.network import Activation, AveragePool2D, Conv2D, Dense, MaxPool2D, Network, evaluate_core
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
    implementation_bounds,
    quantize_network,
    simulate,
)

N_SAMPLES = 600


def conv_network(seed: int, activation: Activation = Activation.RELU) -> Network:
    """Conv (padding, stride 2) -> max pool -> grouped conv -> average pool (padded) -> dense."""
    rng = np.random.default_rng(seed)
    first = Conv2D(
        rng.uniform(-1, 1, (4, 2, 3, 3)), rng.uniform(-1, 1, 4), activation, (2, 9, 9), (2, 2), (1, 1, 1, 1)
    )
    pool = MaxPool2D(first.output_shape, (2, 2), (1, 1))
    second = Conv2D(
        rng.uniform(-0.5, 0.5, (4, 2, 2, 2)),
        rng.uniform(-0.25, 0.25, 4),
        activation,
        pool.output_shape,
        groups=2,
    )
    average = AveragePool2D(second.output_shape, (2, 2), (2, 2), (1, 1, 0, 0))
    dense = Dense(rng.uniform(-1, 1, (3, average.n_out)), rng.uniform(-1, 1, 3), Activation.IDENTITY)
    return Network((first, pool, second, average, dense), name=f"conv{seed}")


def _check(qnet, tmp_path, x) -> np.ndarray:
    compiled = CompiledNetwork(render_network(qnet), tmp_path, qnet.is_integer)
    run = compiled.run(x)
    expected = simulate(qnet, x)
    ok = ~expected.detected
    assert np.array_equal(run.overflowed, expected.detected)
    assert ok.any(), "some inputs must run through"
    assert np.array_equal(run.outputs[ok], expected.outputs[ok])
    return run.outputs


FIXED = list(
    itertools.product(
        [FixedFormat(4, 6), FixedFormat(6, 10)], list(Rounding), list(Overflow), list(Accumulation)
    )
)


@pytest.mark.parametrize(
    "fmt, rounding, overflow, accumulation", FIXED, ids=lambda v: str(getattr(v, "value", v))
)
def test_fixed_point_conv_c_equals_simulator(tmp_path, fmt, rounding, overflow, accumulation):
    fmt = FixedFormat(fmt.int_bits, fmt.frac_bits, rounding, overflow)
    qnet = quantize_network(conv_network(1), ImplementationOptions(fmt, accumulation))
    rng = np.random.default_rng(fmt.word_bits)
    wide = rng.integers(fmt.min_q, fmt.max_q + 1, size=(N_SAMPLES // 2, qnet.n_inputs))
    narrow = rng.integers(-fmt.scale // 8, fmt.scale // 8 + 1, size=(N_SAMPLES // 2, qnet.n_inputs))
    x = np.vstack([wide, narrow])
    _check(qnet, tmp_path, x)
    expected = simulate(qnet, x)
    if overflow is not Overflow.DETECT:
        assert expected.overflowed.any()
    bounds = implementation_bounds(
        qnet, np.full(qnet.n_inputs, -fmt.scale), np.full(qnet.n_inputs, fmt.scale)
    )
    inside = simulate(qnet, narrow, trace=True)
    fine = ~inside.overflowed
    for layer_bounds, trace in zip(bounds, inside.layers):
        assert np.all(trace.post[fine] >= layer_bounds.post_lo) and np.all(
            trace.post[fine] <= layer_bounds.post_hi
        )


@pytest.mark.parametrize("kind", list(FloatKind))
@pytest.mark.parametrize("activation", [Activation.RELU, Activation.TANH])
def test_float_conv_c_equals_simulator_and_tracks_reference(tmp_path, kind, activation):
    net = conv_network(2, activation)
    qnet = quantize_network(net, ImplementationOptions(FloatFormat(kind), lut=LutDesign(resolution=3)))
    rng = np.random.default_rng(3)
    x = FloatFormat(kind).round(rng.uniform(-1, 1, size=(N_SAMPLES, net.n_inputs))).astype(np.float64)
    outputs = _check(qnet, tmp_path, x)
    deviation = np.abs(outputs - evaluate_core(net, x)).max()
    tolerance = {FloatKind.DOUBLE: 1e-12, FloatKind.FLOAT: 1e-5, FloatKind.HALF: 0.1}[kind]
    if activation is Activation.TANH:
        tolerance += 0.05  # the table's error, through two layers
    assert deviation <= tolerance


def test_balanced_layout_is_refused_for_convolutions():
    with pytest.raises(UnsupportedError, match="balanced is implemented for dense layers only"):
        quantize_network(conv_network(1), ImplementationOptions(FixedFormat(8, 8), layout=Layout.BALANCED))
