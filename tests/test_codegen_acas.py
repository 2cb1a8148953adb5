"""ACAS Xu through codegen: fixed-point C equals the simulator, float C tracks the NNet reference."""

from __future__ import annotations

import numpy as np
import pytest

from qverify.codegen import CompiledNetwork, render_network
from qverify.io import load_network
from qverify.network import evaluate, evaluate_core
from qverify.quant import (
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Layout,
    Overflow,
    input_box_words,
    quantize_network,
    simulate,
)
from tests.conftest import ACAS_1_1, ACAS_NNETS

N_SAMPLES = 1000


def check_network(path, tmp_path):
    net = load_network(path)
    lo, hi = net.default_input_box()
    rng = np.random.default_rng(3)
    for fmt, layout in (
        (FixedFormat(20, 12), Layout.SEQUENTIAL),
        (FixedFormat(16, 16, overflow=Overflow.WRAP), Layout.BALANCED),
    ):
        qnet = quantize_network(net, ImplementationOptions(fmt, layout=layout))
        lo_q, hi_q = input_box_words(lo, hi, fmt)
        x_q = rng.integers(lo_q, hi_q + 1, size=(N_SAMPLES, net.n_inputs))
        run = CompiledNetwork(render_network(qnet), tmp_path / f"{fmt.label}", True).run(x_q)
        assert np.array_equal(run.outputs, simulate(qnet, x_q).outputs)
    x = rng.uniform(lo, hi, size=(N_SAMPLES, net.n_inputs))
    for kind, tolerance in ((FloatKind.FLOAT, 1e-5), (FloatKind.DOUBLE, 1e-12)):
        number = FloatFormat(kind)
        x_typed = number.round(x).astype(np.float64)
        qnet = quantize_network(net, ImplementationOptions(number))
        run = CompiledNetwork(render_network(qnet), tmp_path / kind.value, False).run(x_typed)
        reference = evaluate_core(net, x_typed)
        assert np.max(np.abs(run.outputs - reference) / np.maximum(1, np.abs(reference))) <= tolerance
        assert np.array_equal(run.outputs, simulate(qnet, x_typed).outputs.astype(np.float64))
    raw = net.input_norm.to_raw(x)
    assert np.allclose(net.output_norm.apply(evaluate_core(net, x)), evaluate(net, raw), rtol=1e-12)


def test_acas_1_1(tmp_path):
    check_network(ACAS_1_1, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("path", ACAS_NNETS, ids=lambda p: p.stem)
def test_every_acas_network(tmp_path, path):
    check_network(path, tmp_path)
