"""The simulator's sequential MACs at once (`simulate._fixed_sequential`, `_float_sequential`) give
the slot-by-slot loop's words bit for bit: outputs, every layer's trace and the first overflow, in
every fixed-point format and overflow mode (running sums that overflow fall back to the loop),
in float32, float64 and float16 with infinities, NaN and signed zeros, and in padded
convolutions, whose empty slots leave the sums as they are."""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

from qverify.network import Activation, Dense, Network
from qverify.quant import (
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Overflow,
    Rounding,
    quantize_network,
    simulate,
)
from tests.test_codegen_conv import conv_network

# (the package exports the function `simulate` under the module's name)
simulate_module = importlib.import_module("qverify.quant.simulate")


def _dense(seed: int, scale: float, sizes: tuple[int, ...] = (6, 9, 7, 3), spread: float = 0.0) -> Network:
    """Random dense ReLU layers; `spread`: weights' magnitudes over 10^-spread..10^spread (float
    sums whose rounding depends on the order of the additions)."""
    rng = np.random.default_rng(seed)
    return Network(
        tuple(
            Dense(
                rng.uniform(-scale, scale, (n_out, n_in))
                * 10.0 ** rng.uniform(-spread, spread, (n_out, n_in)),
                rng.uniform(-1, 1, n_out),
                Activation.RELU if index < len(sizes) - 2 else Activation.IDENTITY,
            )
            for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes))
        ),
        name=f"sequential{seed}",
    )


def _slot_by_slot(qnet, x, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(simulate_module, "AT_ONCE_PRODUCTS", 0)
        return simulate(qnet, x)


def _same(left: np.ndarray, right: np.ndarray) -> bool:
    """Equal bit for bit (floats by their bits: -0.0 is not 0.0, NaN equals the same NaN)."""
    if np.issubdtype(left.dtype, np.floating):
        width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[left.dtype.itemsize]
        return left.dtype == right.dtype and np.array_equal(left.view(width), right.view(width))
    return np.array_equal(left, right)


def _assert_same(qnet, x, monkeypatch) -> None:
    at_once, loop = simulate(qnet, x), _slot_by_slot(qnet, x, monkeypatch)
    assert _same(at_once.outputs, loop.outputs)
    assert np.array_equal(at_once.overflow_site, loop.overflow_site)
    for fast, slow in zip(at_once.layers, loop.layers, strict=True):
        assert _same(fast.pre, slow.pre) and _same(fast.post, slow.post)


FIXED_FORMATS = [
    FixedFormat(int_bits, frac_bits, rounding, overflow)
    for (int_bits, frac_bits), rounding, overflow in itertools.product(
        [(4, 4), (8, 8), (16, 16)], list(Rounding), list(Overflow)
    )
]


@pytest.mark.parametrize("fmt", FIXED_FORMATS, ids=str)
@pytest.mark.parametrize("scale", [0.5, 3.0, 7.5])  # 3, 7.5: products and running sums overflow <4,4>, <8,8>
def test_fixed_point_at_once_equals_the_slot_loop(fmt, scale, monkeypatch):
    qnet = quantize_network(_dense(3, scale), ImplementationOptions(fmt))
    rng = np.random.default_rng(4)
    x = rng.integers(fmt.min_q, fmt.max_q + 1, size=(300, 6))
    _assert_same(qnet, x, monkeypatch)
    if scale == 7.5 and fmt.word_bits <= 16:
        assert simulate(qnet, x).overflowed.any()  # (the case where the loop takes over is exercised)


@pytest.mark.parametrize("kind", [FloatKind.FLOAT, FloatKind.DOUBLE, FloatKind.HALF])
def test_float_at_once_equals_the_slot_loop_with_specials(kind, monkeypatch):
    qnet = quantize_network(
        _dense(5, 2.0, (6, 48, 48, 3), spread=3.0), ImplementationOptions(FloatFormat(kind))
    )
    dtype = qnet.number.dtype
    rng = np.random.default_rng(6)
    x = rng.uniform(-4, 4, size=(300, 6)).astype(dtype)
    x[:20] *= np.finfo(dtype).max / 8  # sums that reach infinity (and inf - inf: NaN)
    x[20:30] = 0.0
    x[30:40] = -0.0  # signed zeros through the sums
    x[40, 0], x[41, 1], x[42, 2] = np.inf, -np.inf, np.nan
    _assert_same(qnet, x.astype(np.float64), monkeypatch)


@pytest.mark.parametrize(
    "options",
    [
        ImplementationOptions(FixedFormat(6, 10)),
        ImplementationOptions(FixedFormat(4, 6, Rounding.FLOOR, Overflow.WRAP)),
        ImplementationOptions(FloatFormat(FloatKind.FLOAT)),
        ImplementationOptions(FloatFormat(FloatKind.HALF)),
    ],
    ids=["fixed-6-10", "fixed-4-6-wrap", "float", "half"],
)
def test_padded_convolutions_at_once_equal_the_slot_loop(options, monkeypatch):
    qnet = quantize_network(conv_network(7), options)
    rng = np.random.default_rng(8)
    if qnet.is_fixed:
        x = rng.integers(-4 * qnet.number.scale, 4 * qnet.number.scale + 1, size=(64, qnet.n_inputs))
    else:
        x = rng.uniform(-2, 2, size=(64, qnet.n_inputs))
    _assert_same(qnet, x, monkeypatch)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_sums_at_once_are_the_c_loop(dtype):
    """`_float_sequential` against the C's loop written out here: `acc = acc + w * x` from the bias,
    one rounding per operation, an empty slot skipped; a bias of -0.0 keeps its sign through
    empty slots and zero products of either sign."""
    rng = np.random.default_rng(9)
    batch, neurons, width = 40, 5, 33
    weights = (rng.uniform(-1, 1, (neurons, width)) * 10.0 ** rng.uniform(-3, 3, (neurons, width))).astype(
        dtype
    )
    inputs = (
        rng.uniform(-1, 1, (batch, neurons, width)) * 10.0 ** rng.uniform(-3, 3, (batch, neurons, width))
    ).astype(dtype)
    inputs[:10] = rng.choice(np.array([0.0, -0.0], dtype=dtype), size=(10, neurons, width))
    valid = rng.random((neurons, width)) < 0.7
    valid[0] = False  # a neuron whose slots are all empty: its sum is its bias, -0.0 included
    bias = np.where(np.arange(batch)[:, None] < 20, dtype(-0.0), rng.uniform(-1, 1, (batch, neurons))).astype(
        dtype
    )
    expected = bias.copy()
    for t in range(width):
        with np.errstate(over="ignore"):
            total = (expected + (weights[None, :, t] * inputs[:, :, t]).astype(dtype)).astype(dtype)
        expected = np.where(valid[None, :, t], total, expected)
    with np.errstate(over="ignore"):  # (as in the simulator: products may overflow to infinity)
        got = simulate_module._float_sequential(bias, inputs, valid, weights, dtype)
    assert _same(got, expected)
    assert np.signbit(expected[:20, 0]).all()  # (the signed zeros are there to be kept)


@pytest.mark.parametrize("overflow", list(Overflow))
def test_a_product_that_overflows_inside_sums_that_do_not_is_reported(overflow, monkeypatch):
    """<4,4>: 7.875 * 7.875 does not fit (a product's overflow) while every running sum fits: the
    sums are computed at once, and the overflow is still the first neuron's."""
    fmt = FixedFormat(4, 4, Rounding.NEAREST, overflow)
    layer = Dense(np.array([[7.875, 0.625], [0.5, 0.5]]), np.array([-6.25, 0.0]), Activation.IDENTITY)
    qnet = quantize_network(Network((layer,), name="product-overflow"), ImplementationOptions(fmt))
    x = np.array([[126, 10], [16, 16]])  # 7.875, 0.625 / 1.0, 1.0
    result = simulate(qnet, x)
    assert result.overflowed.tolist() == [True, False]
    _assert_same(qnet, x, monkeypatch)
