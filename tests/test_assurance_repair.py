"""qverify.assurance.repair: the seven metrics against hand-computed spectra, the split and the
activation spectrum, the MILP on a constructed case with a known exact optimum, and a repaired
digits model whose C (compiled with gcc) replays bit for bit with its simulator."""

from __future__ import annotations

import numpy as np
import pytest

from qverify.assurance import make_implementation, normalised_inputs
from qverify.assurance.repair.metrics import METRICS, ranking, suspiciousness
from qverify.assurance.repair.repair import RepairSettings, WeightChange, prepare_study, repair_neurons
from qverify.assurance.repair.spectra import Spectrum, activation_spectrum, split_tests
from qverify.assurance.repair.target import make_target
from qverify.codegen import CompiledNetwork, render_network
from qverify.data import load_dataset
from qverify.errors import InputError, UnsupportedError
from qverify.io import load_network
from qverify.io.onnx_int8_patch import write_int8_changes
from qverify.network import Activation, Dense, Network
from qverify.quant import Accumulation, ImplementationOptions, simulate
from tests.conftest import ROOT
from tests.test_int8_onnxruntime import onnxruntime_outputs

# three neurons: (a_f, n_f, a_s, n_s)
SPECTRUM = Spectrum(
    a_f=np.array([3, 1, 0]), n_f=np.array([1, 3, 4]), a_s=np.array([2, 12, 0]), n_s=np.array([8, 0, 12])
)

# by hand, per neuron (docstring formulas of `metrics`)
EXPECTED = {
    "tarantula": [(3 / 4) / (3 / 4 + 2 / 10), (1 / 4) / (1 / 4 + 12 / 12), 0.0],
    "ochiai": [3 / np.sqrt(4 * 5), 1 / np.sqrt(4 * 13), 0.0],
    "dstar": [9 / (2 + 1), 1 / (12 + 3), 0.0],
    "jaccard": [3 / (4 + 2), 1 / (4 + 12), 0.0],
    "ample": [abs(3 / 4 - 2 / 10), abs(1 / 4 - 1), 0.0],
    "euclid": [np.sqrt(3 + 8), np.sqrt(1 + 0), np.sqrt(0 + 12)],
    "wong3": [3 - 2, 1 - (2.8 + 0.001 * 2), 0 - 0],
}


@pytest.mark.parametrize("metric", list(METRICS))
def test_metrics_match_hand_computed_spectra(metric):
    assert np.allclose(suspiciousness(metric, SPECTRUM), EXPECTED[metric])


def test_metric_edge_cases_and_rankings():
    only_failing = Spectrum(
        a_f=np.array([2, 0]), n_f=np.array([0, 2]), a_s=np.array([0, 0]), n_s=np.array([5, 5])
    )
    assert suspiciousness("dstar", only_failing)[0] == np.inf  # every failing test, no passing one
    assert suspiciousness("dstar", only_failing)[1] == 0.0  # 0/0 is no evidence
    assert list(ranking(np.array([1.0, 3.0, 1.0, np.inf]))) == [3, 1, 0, 2]  # ties in neuron order
    with pytest.raises(InputError, match="unknown metric"):
        suspiciousness("nope", SPECTRUM)


def test_split_and_activation_spectrum():
    labels = np.array([0, 1, 2, 0])
    split = split_tests(labels, float_pred=np.array([0, 1, 0, 0]), quant_pred=np.array([0, 2, 1, 0]))
    assert list(split.passing) == [0, 3] and list(split.failing) == [1] and list(split.excluded) == [2]
    float_active = np.array([[1, 0], [1, 1], [0, 0], [1, 0]], dtype=bool)
    quant_active = np.array([[1, 1], [0, 1], [1, 1], [1, 0]], dtype=bool)
    s = activation_spectrum(float_active, quant_active, split)  # activated = the statuses differ
    assert (list(s.a_f), list(s.n_f), list(s.a_s), list(s.n_s)) == ([1, 0], [0, 1], [0, 1], [2, 1])


def constructed_case():
    """Float: outputs (3 x0, x1); quantized model: (x0, x1) in <4,4>, wide accumulation. Sample 0
    (0.5, 0.25) passes; sample 1 (0.25, 0.4375) = words (4, 7) fails (label 0). With neuron 0 alone,
    o0 >= 8 words needs 16 db + 4 dw0 + 7 dw1 >= 56 (the exact sum 64 must reach 120, where nearest
    rounds to 8): the unique cheapest change is the bias +4 words (any weight move costs more)."""
    float_net = Network(
        (Dense(np.array([[3.0, 0.0], [0.0, 1.0]]), np.zeros(2), Activation.IDENTITY),), name="f"
    )
    quant_net = Network((Dense(np.eye(2), np.zeros(2), Activation.IDENTITY),), name="q")
    x = np.array([[0.5, 0.25], [0.25, 0.4375]])
    y = np.array([0, 0])
    return float_net, quant_net, x, y


def test_milp_finds_the_known_optimum():
    float_net, quant_net, x, y = constructed_case()
    implementation = make_implementation(
        quant_net, "4.4", ImplementationOptions(accumulation=Accumulation.WIDE)
    )
    study = prepare_study(float_net, make_target(implementation, None), x, y, x, y)
    assert list(study.split.failing) == [1]
    outcome = repair_neurons(study, np.array([0]), "by-hand", RepairSettings(time_limit_s=20))
    assert outcome.status == "optimal"
    assert outcome.changes == (WeightChange(neuron=0, input=-1, old=0, new=4, real_delta=0.25),)
    assert outcome.accuracy.repair == 1.0 and outcome.soft_met == 1 and outcome.disagreements == 0


def test_nothing_failing_and_unsupported_layers():
    _, quant_net, x, y = constructed_case()
    implementation = make_implementation(quant_net, "4.4")
    with pytest.raises(InputError, match="nothing to repair"):
        prepare_study(quant_net, make_target(implementation, None), x[:1], y[:1], x, y)
    with pytest.raises(InputError, match="out of range"):
        make_target(implementation, 2)
    with pytest.raises(UnsupportedError, match="float format"):
        make_target(make_implementation(quant_net, "half"), None)


def test_repaired_digits_model_replays_bit_exact_in_c(tmp_path):
    """<5,3> per-op (the saturating partial sums encoded where needed): a repair of three output
    neurons, then its C against its simulator on 300 test images, and its NNet file read back to
    the same words."""
    net = load_network(ROOT / "benchmarks" / "digits" / "digits.nnet")
    train, test = (
        load_dataset("digits-raw:train").subset(400, 0),
        load_dataset("digits-raw:test").subset(300, 0),
    )
    implementation = make_implementation(net, "5.3")
    study = prepare_study(
        net, make_target(implementation, None), normalised_inputs(net, train.x), train.y,
        normalised_inputs(net, test.x), test.y,
    )  # fmt: skip
    settings = RepairSettings(time_limit_s=3, max_tests=120, max_delta=4)
    outcome = repair_neurons(study, np.array([0, 3, 8]), "fixed-set", settings)
    assert outcome.changes and outcome.network is not None
    repaired = make_implementation(outcome.network, "5.3", implementation.qnet.options)
    words = repaired.inputs(normalised_inputs(net, test.x))
    compiled = CompiledNetwork(render_network(repaired.qnet), tmp_path / "c", True)
    assert np.array_equal(compiled.run(words).outputs, simulate(repaired.qnet, words).outputs)
    from qverify.io import save_network

    save_network(outcome.network, tmp_path / "repaired.nnet")
    again = make_implementation(load_network(tmp_path / "repaired.nnet"), "5.3", implementation.qnet.options)
    assert np.array_equal(again.qnet.layers[2].weights, repaired.qnet.layers[2].weights)
    assert np.array_equal(again.qnet.layers[2].bias, repaired.qnet.layers[2].bias)


def test_int8_repair_changes_codes_and_replays_bit_exact_in_c(tmp_path):
    """An int8 model (onnxruntime's static quantizer, QOperator) of a 2-3-3 network whose classes
    meet along lines: near-ties the int8 model gets wrong. A repair of its output layer changes int8
    weights / int32 biases within range, re-quantizes to exactly those integers, and its C replays
    bit for bit with its simulator."""
    from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime

    hidden = Dense(
        np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]), np.array([0.0, 0.0, 1.0]), Activation.RELU
    )
    net = Network((hidden, Dense(np.eye(3), np.zeros(3), Activation.IDENTITY)), name="lines")
    rng = np.random.default_rng(0)
    quantized = quantize_with_onnxruntime(
        net, rng.uniform(0, 1, (200, 2)), QuantizeSettings(QuantFormat.QOP), tmp_path / "lines.int8.onnx"
    )
    x = rng.uniform(0, 1, (20000, 2))
    outputs = np.sort(make_implementation(net, "real").run(x).outputs, axis=1)
    x = np.vstack([x[outputs[:, -1] - outputs[:, -2] < 0.01][:300], x[:300]])
    y = make_implementation(net, "real").predict(x)
    implementation = make_implementation(quantized, "int8")
    study = prepare_study(net, make_target(implementation, None), x, y, x, y)
    assert study.split.failing.size > 0
    outcome = repair_neurons(
        study, np.array([0, 1]), "fixed-set", RepairSettings(time_limit_s=3, max_delta=6)
    )
    assert outcome.changes and outcome.network is not None and outcome.disagreements == 0
    assert all(abs(c.new) <= 127 for c in outcome.changes if c.input >= 0)
    repaired = make_implementation(outcome.network, "int8")
    codes = repaired.inputs(x)
    simulated = simulate(repaired.qnet, codes).outputs
    compiled = CompiledNetwork(render_network(repaired.qnet), tmp_path / "c", True)
    assert np.array_equal(compiled.run(codes).outputs, simulated)
    # the repaired model file: the quantizer's file with the changed initializers; onnxruntime runs it
    # exactly as the repaired simulator and C (QOperator, int8 activations: exact on every CPU)
    written = write_int8_changes(
        tmp_path / "lines.int8.onnx", quantized, outcome.network, tmp_path / "r.onnx"
    )
    assert written.stat().st_size > 0
    from_file = make_implementation(load_network(written), "int8")
    assert np.array_equal(simulate(from_file.qnet, codes).outputs, simulated)
    expected = onnxruntime_outputs(written, x, (2,))
    assert np.array_equal(expected, repaired.qnet.output_quant.dequantize(simulated))
    changed = [layer.bias for layer in load_network(written).quantization.layers]
    source = [layer.bias for layer in quantized.quantization.layers]
    assert any(not np.array_equal(a, b) for a, b in zip(changed, source))  # the file holds the change


def test_the_written_repair_must_raise_the_repair_set_accuracy():
    from qverify.assurance.repair.records import Accuracy, RepairOutcome
    from qverify.assurance.repair.repair import _select

    def outcome(metric: str, repair: float, changed: bool = True) -> RepairOutcome:
        changes = (WeightChange(0, -1, 0, 1, 0.0625),) if changed else ()
        return RepairOutcome(
            metric, (0,), "feasible", "Time limit reached", 1.0, (1, 1, 1), 1, 1, 1, 1, 0, 0, 0,
            changes, Accuracy(repair, 0.9), 1.0,
        )  # fmt: skip

    before = Accuracy(0.95, 0.9)
    worse, same, better, lucky = (
        outcome("ample", 0.94),
        outcome("euclid", 0.95),
        outcome("dstar", 0.96),
        outcome("random#1", 0.99),
    )
    assert _select([worse, same, lucky], before) is lucky  # a random draw only when no metric helps
    assert _select([worse, better, lucky], before) is better
    assert _select([worse, same, outcome("ochiai", 0.99, changed=False)], before) is None


def test_the_picture_legend_covers_no_bar():
    """repair.png: the legend lies outside the axes, so no bar (nor reference line's label) is hidden
    behind it, however high the accuracies (it used to sit in the lower right corner, over bars)."""
    import matplotlib.pyplot as plt

    from qverify.assurance.repair.plot import repair_figure
    from qverify.assurance.repair.repair import run_repair

    float_net, quant_net, x, y = constructed_case()
    implementation = make_implementation(
        quant_net, "4.4", ImplementationOptions(accumulation=Accumulation.WIDE)
    )
    study = prepare_study(float_net, make_target(implementation, None), x, y, x, y)
    settings = RepairSettings(neurons=1, metrics=("tarantula", "ample", "random"), random_runs=3)
    figure = repair_figure(run_repair(study, settings, progress=False))
    try:
        figure.canvas.draw()
        (axes,) = figure.axes
        legend = axes.get_legend().get_window_extent()
        bars = [patch.get_window_extent() for patch in axes.patches]
        assert len(bars) == 2 * 5  # repair and validation set, per metric and random draw
        assert not any(legend.overlaps(bar) for bar in bars)
        assert not legend.overlaps(axes.get_window_extent())
    finally:
        plt.close(figure)
