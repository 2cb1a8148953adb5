"""ESBMC on the harnesses of int8, half and convolutional networks: it reads them, and its verdicts
equal the internal engine's (every UNSAFE replayed in gcc and the simulator by the pipeline)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from qverify.backends import Limits, Status
from qverify.backends.esbmc import EsbmcOptions
from qverify.network import Activation, Conv2D, Dense, MaxPool2D, Network
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import FixedFormat, FloatFormat, FloatKind, ImplementationOptions, Int8Format
from qverify.verification import VerifyOptions, verify_property
from tests.test_backends_esbmc import live_solver, needs_esbmc
from tests.test_int8_oracle import random_int8_network


def _threshold_property(n_inputs: int, lo: float, hi: float, output: int, threshold: Fraction) -> Property:
    box = Box((Fraction(lo),) * n_inputs, (Fraction(hi),) * n_inputs)
    atom = Atom(((output, Fraction(1)),), -threshold, Relation.GE)
    return Property("threshold", (box,), OutputCondition((Clause((atom,)),)))


def _both_back_ends(net, prop, implementation, solver: str | None = None) -> tuple:
    limits = Limits(timeout_s=120, memory_mb=4096)
    internal = verify_property(net, prop, implementation, VerifyOptions(limits=limits))
    options = VerifyOptions(
        backend="esbmc", limits=limits, esbmc=EsbmcOptions(solver=solver or live_solver())
    )
    return internal, verify_property(net, prop, implementation, options)


def _tiny_conv() -> Network:
    rng = np.random.default_rng(3)
    conv = Conv2D(rng.uniform(-1, 1, (2, 1, 2, 2)), rng.uniform(-0.5, 0.5, 2), Activation.RELU, (1, 3, 3))
    pool = MaxPool2D((2, 2, 2), (2, 2), (2, 2))
    dense = Dense(rng.uniform(-1, 1, (2, 2)), rng.uniform(-0.5, 0.5, 2), Activation.IDENTITY)
    return Network((conv, pool, dense), name="tiny-conv")


@needs_esbmc
@pytest.mark.parametrize("seed", [1, 4])
def test_int8_harnesses(seed):
    net = random_int8_network(np.random.default_rng(9000 + seed))
    quant = net.quantization
    real_lo = (quant.input.code.qmin + 40 - quant.input.zero_point) * quant.input.scale
    real_hi = real_lo + 30 * quant.input.scale
    out = quant.output
    for code in (out.code.qmax, out.zero_point):  # one threshold above everything reachable, one within
        threshold = (code - out.zero_point) * Fraction(out.scale)
        prop = _threshold_property(2, real_lo, real_hi, 0, threshold)
        internal, esbmc = _both_back_ends(net, prop, ImplementationOptions(Int8Format()))
        assert esbmc.status in (Status.SAFE, Status.UNSAFE), esbmc.reason
        assert esbmc.status is internal.status, (esbmc.reason, internal.reason)


def _conv_threshold_runs(number, solver: str | None) -> None:
    net = _tiny_conv()
    for threshold in (Fraction(1, 2), Fraction(40)):  # one reachable, one above every output
        prop = _threshold_property(9, 0.0, 0.25, 1, threshold)
        internal, esbmc = _both_back_ends(net, prop, ImplementationOptions(number), solver)
        assert esbmc.status in (Status.SAFE, Status.UNSAFE), esbmc.reason
        assert esbmc.status is internal.status, (esbmc.reason, internal.reason)


@needs_esbmc
def test_fixed_point_conv_harness():
    _conv_threshold_runs(FixedFormat(8, 8), None)


@needs_esbmc
def test_half_dense_harness():
    """ESBMC 8.4 with Bitwuzla aborts on _Float16 programs ("Bitwuzla error encountered"); Z3 reads them."""
    rng = np.random.default_rng(5)
    dense = Dense(rng.uniform(-1, 1, (2, 2)), rng.uniform(-0.5, 0.5, 2), Activation.RELU)
    net = Network((dense, Dense(rng.uniform(-1, 1, (1, 2)), np.zeros(1), Activation.IDENTITY)), name="half")
    for threshold in (Fraction(1, 8), Fraction(10)):
        prop = _threshold_property(2, 0.0, 0.5, 0, threshold)
        internal, esbmc = _both_back_ends(net, prop, ImplementationOptions(FloatFormat(FloatKind.HALF)), "z3")
        assert esbmc.status in (Status.SAFE, Status.UNSAFE), esbmc.reason
        assert esbmc.status is internal.status, (esbmc.reason, internal.reason)


@needs_esbmc
@pytest.mark.slow
def test_half_conv_harness():
    _conv_threshold_runs(FloatFormat(FloatKind.HALF), "z3")
