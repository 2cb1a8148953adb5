"""Implementations on real inputs: the same outputs as the generated C's real-input replay, and pairs
that refuse to compare networks of different shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qverify.assurance import ImplementationPair, make_implementation
from qverify.codegen import CompiledNetwork, render_network
from qverify.errors import InputError
from qverify.io import load_network

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "benchmarks" / "digits-cnn"
IRIS = ROOT / "benchmarks" / "iris" / "iris.onnx"


@pytest.mark.parametrize(
    "file_name, label",
    [
        ("digits_cnn.onnx", "6.4"),
        ("digits_cnn.onnx", "half"),
        ("digits_cnn.onnx", "float"),
        ("digits_cnn.int8.onnx", "int8"),
    ],
)
def test_runs_equal_the_c_replay_on_real_inputs(tmp_path, file_name, label):
    implementation = make_implementation(load_network(CNN / file_name), label)
    x = np.random.default_rng(0).uniform(-0.1, 1.1, size=(300, 64))
    compiled = CompiledNetwork(render_network(implementation.qnet), tmp_path, implementation.qnet.is_integer)
    replayed = compiled.run(x, raw=False).outputs
    got = implementation.run(x).outputs
    if implementation.qnet.is_int8:  # the replay prints float32 DequantizeLinear values
        assert np.array_equal(got.astype(np.float32), replayed.astype(np.float32))
    else:
        assert np.array_equal(got, replayed)


def test_the_real_implementation_is_the_float64_network():
    net = load_network(CNN / "digits_cnn.onnx")
    x = np.random.default_rng(1).uniform(0, 1, size=(20, 64))
    run = make_implementation(net, "real").run(x)
    assert run.outputs.dtype == np.float64 and not run.overflowed.any()
    float_run = make_implementation(net, "float").run(x)
    assert np.abs(run.outputs - float_run.outputs).max() < 1e-4


def test_pairs_refuse_networks_that_do_not_fit():
    cnn = make_implementation(load_network(CNN / "digits_cnn.onnx"), "float")
    iris = make_implementation(load_network(IRIS), "8.8")
    with pytest.raises(InputError, match="do not fit together: float .* takes 64 inputs"):
        ImplementationPair(cnn, iris)


def test_int8_needs_an_int8_model_and_inputs_must_fit():
    with pytest.raises(InputError, match="no int8 quantization parameters"):
        make_implementation(load_network(CNN / "digits_cnn.onnx"), "int8")
    with pytest.raises(InputError, match="bad format 'int9'"):
        make_implementation(load_network(CNN / "digits_cnn.onnx"), "int9")
    implementation = make_implementation(load_network(CNN / "digits_cnn.int8.onnx"), "int8")
    with pytest.raises(InputError, match="63 input values per sample"):
        implementation.run(np.zeros((2, 63)))
    with pytest.raises(InputError, match="NaN"):
        implementation.run(np.full((2, 64), np.nan))
