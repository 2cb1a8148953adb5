"""`diff`, `impact` and `repair` on int8 graphs (issue 41): the CIFAR-10 zoo's ResNet-2B and
MobileNetV2-style models (QOperator: QLinearConv, QLinearAdd, QGemm) against their float networks,
on a few seeded images (the CIFAR images are not committed: uniform images labelled by the float
network, so that the float network is right on every one and each disagreement is the int8 model's).

Each command's numbers are checked against the implementations themselves: a DII is a pair of
different predictions when both are run again, an accuracy is the fraction of matching predictions,
a repaired model written back into the QOperator file runs in onnxruntime as the simulator does."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from qverify.assurance import make_implementation
from qverify.cli import main
from qverify.io import load_network
from qverify.network.align import align_nodes
from qverify.quant import ImplementationOptions, quantize_network, simulate
from qverify.quant.affine import Int8Format
from tests.conftest import ROOT

ZOO = ROOT / "benchmarks" / "cifar10" / "models"
RESNET, RESNET8 = ZOO / "resnet2b.onnx", ZOO / "resnet2b.int8-qop.onnx"
MOBILE, MOBILE8 = ZOO / "mbv2s.onnx", ZOO / "mbv2s.int8-qop.onnx"


def _session(path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Uniform images labelled by the float ResNet (.npz files as `--data` reads them): 40 for diff
    and impact; a repair set of 20 holding every one of 300 images the int8 ResNet gets wrong (up
    to 8) and a validation set of 20 more."""
    rng = np.random.default_rng(41)
    x = rng.uniform(0, 1, (300, 3072))
    session = _session(RESNET)
    y = np.array(
        [session.run(None, {"input": row.reshape(1, 3, 32, 32).astype(np.float32)})[0].argmax() for row in x]
    )
    wrong = np.flatnonzero(make_implementation(load_network(RESNET8), "int8").predict(x) != y)
    assert len(wrong), "the int8 ResNet agrees with the float one on all 300 images"
    right = np.setdiff1d(np.arange(len(x)), wrong)
    repair = np.concatenate([wrong[:8], right[: 20 - len(wrong[:8])]])
    folder = tmp_path_factory.mktemp("images")
    np.savez(folder / "all.npz", x=x[:40], y=y[:40])
    np.savez(folder / "repair.npz", x=x[repair], y=y[repair])
    np.savez(folder / "validation.npz", x=x[right[-20:]], y=y[right[-20:]])
    return folder


def test_the_quantized_export_lists_nodes_in_another_order_and_aligns():
    """onnxruntime's quantizer writes the projection shortcut before the block's second convolution:
    `align_nodes` pairs the nodes by kind, size and wiring, and the aligned model computes the same."""
    float_net, int8_net = load_network(RESNET), load_network(RESNET8)
    assert float_net.wiring != int8_net.wiring
    aligned = align_nodes(int8_net, float_net)
    assert aligned.wiring == float_net.wiring
    x = np.random.default_rng(0).integers(-128, 128, (50, 3072))
    before = simulate(quantize_network(int8_net, ImplementationOptions(Int8Format())), x).outputs
    after = simulate(quantize_network(aligned, ImplementationOptions(Int8Format())), x).outputs
    assert np.array_equal(before, after)


def test_diff_finds_confirmed_disagreements_on_the_int8_resnet(images, tmp_path):
    out = tmp_path / "diff"
    code = main(
        ["diff", str(RESNET), "--candidate", f"int8={RESNET8}", "--data", str(images / "all.npz"),
         "--seeds", "3", "--budget", "30", "--methods", "random,ga", "-o", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    found = np.load(out / "diis.npz")
    assert len(found["x"]) > 0
    reference = make_implementation(load_network(RESNET), "real")
    candidate = make_implementation(load_network(RESNET8), "int8")
    assert np.all(reference.predict(found["x"]) != candidate.predict(found["x"]))


def test_impact_accuracy_is_the_int8_mobilenets_own(images, tmp_path):
    out = tmp_path / "impact"
    code = main(
        ["impact", str(MOBILE), "--candidate", f"int8={MOBILE8}", "--data", str(images / "all.npz"),
         "--families", "awgn", "--grid", "awgn=0.05", "--resamples", "50", "-o", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    study = json.loads((out / "impact.json").read_text())
    clean = next(cell for cell in study["cells"] if cell["family"] == "clean")
    (comparison,) = clean["comparisons"]
    data = np.load(images / "all.npz")
    candidate = make_implementation(load_network(MOBILE8), "int8")
    reference = make_implementation(load_network(MOBILE), "real")
    assert comparison["scores"]["top1"]["value"] == pytest.approx(
        np.mean(candidate.predict(data["x"]) == data["y"])
    )
    assert clean["reference"]["top1"]["value"] == pytest.approx(
        np.mean(reference.predict(data["x"]) == data["y"])
    )


def test_repair_of_the_int8_resnets_last_dense_layer_writes_a_model_onnxruntime_runs(images, tmp_path):
    """repair's layer is the dense head after the last join; the repaired model is the QOperator
    file with changed integers (the export lists the graph's nodes in another order than the float
    network: they are paired by name), which onnxruntime runs as the simulator does, and it gets at
    least the repair set's samples right that the original int8 model did."""
    out = tmp_path / "repair"
    code = main(
        ["repair", str(RESNET), "--quantized", str(RESNET8), "--format", "int8",
         "--repair-set", str(images / "repair.npz"), "--validation", str(images / "validation.npz"),
         "--metrics", "tarantula", "--random-runs", "0", "--neurons", "2", "--time-limit", "30",
         "-o", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    record = json.loads((out / "repair.json").read_text())
    assert record["target"].startswith("layer 9 (dense 1024 -> 10")
    (outcome,) = record["outcomes"]
    assert outcome["accuracy_after"]["repair"] >= record["quantized_before"]["repair"]
    written = out / "repaired.int8.onnx"
    if not outcome["changes"]:  # (nothing written: the MILP found no change within its budget)
        assert not written.exists()
        return
    qnet = quantize_network(load_network(written), ImplementationOptions(Int8Format()))
    x = np.random.default_rng(2).uniform(0, 1, (30, 3072)).astype(np.float32)
    session = _session(written)
    reference = np.concatenate([session.run(None, {"input": row.reshape(1, 3, 32, 32)})[0] for row in x])
    assert np.array_equal(
        qnet.output_quant.quantize(reference), simulate(qnet, qnet.input_quant.quantize(x)).outputs
    )
    original = quantize_network(load_network(RESNET8), ImplementationOptions(Int8Format()))
    changed = [
        c for c in zip(original.layers[-1].weights.ravel(), qnet.layers[-1].weights.ravel()) if c[0] != c[1]
    ]
    assert len(changed) == len(outcome["changes"])
