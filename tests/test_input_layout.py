"""An ONNX float model (NCHW) paired with its TFLite int8 file (NHWC): the layout read off the files
(`qverify.network.input_layout`), the aligned candidate equal to the LiteRT interpreter on the
transposed image, `qverify diff`'s DIIs real disagreements when each file runs in its own runtime
(onnxruntime, the LiteRT interpreter), and layouts that cannot be paired refused with one `error:`
line. The zoo's smallest pair (`squeeze`: 9 kB and 11 kB) on smooth synthetic images (the CIFAR-10
images are not in the repository)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qverify.assurance import make_implementation
from qverify.cli import main
from qverify.errors import InputError
from qverify.io import load_network
from qverify.network import Activation, Conv2D, Dense, Network
from qverify.network.input_layout import aligned_to_reference, input_image, reference_order
from tests.conftest import ROOT
from tests.test_cifar10_zoo import RUNTIMES
from tests.test_io_tflite import _interpreter_codes

ZOO = ROOT / "benchmarks" / "cifar10" / "models"
FLOAT, TFLITE = ZOO / "squeeze.onnx", ZOO / "squeeze.int8.tflite"
HWC_TO_CHW = np.arange(3072).reshape(32, 32, 3).transpose(2, 0, 1).ravel()


def _images(count: int, seed: int = 0) -> np.ndarray:
    """Smooth NCHW images in [0, 1]: a random 4x4 colour grid blown up to 32x32, a little noise."""
    rng = np.random.default_rng(seed)
    grid = rng.random((count, 3, 4, 4))
    images = np.kron(grid, np.ones((1, 1, 8, 8))) + rng.normal(0.0, 0.03, (count, 3, 32, 32))
    return np.clip(images, 0.0, 1.0)


def test_the_layout_is_read_off_the_files():
    chw = input_image(load_network(FLOAT))
    assert chw is not None and chw.shape == (3, 32, 32) and chw.is_chw
    hwc = input_image(load_network(TFLITE))  # the TFLite reader's Permute from the file's NHWC tensor
    assert hwc is not None and hwc.shape == (3, 32, 32) and np.array_equal(hwc.order, HWC_TO_CHW)
    assert hwc.describe() == "HWC (32x32x3)"
    # tf2onnx's Keras export is NHWC too (its Transpose before the first Conv): nothing to reconcile
    assert (
        reference_order(load_network(ZOO / "keras_cnn.onnx"), load_network(ZOO / "keras_cnn.int8.tflite"))
        is None
    )
    order = reference_order(load_network(FLOAT), load_network(TFLITE))
    x = np.arange(3072)
    assert np.array_equal(x[order], x.reshape(3, 32, 32).transpose(1, 2, 0).ravel())  # the file's NHWC


def test_the_aligned_tflite_model_is_the_interpreter_on_the_transposed_image():
    reference = load_network(FLOAT)
    aligned, note = aligned_to_reference(reference, load_network(TFLITE))
    assert note is not None and "HWC (32x32x3)" in note and "CHW (3x32x32)" in note
    candidate = make_implementation(aligned, "int8-tflite")
    images = _images(300)
    x = images.reshape(len(images), -1)
    codes = candidate.inputs(x)
    nhwc_codes = codes.reshape(images.shape).transpose(0, 2, 3, 1).reshape(len(images), -1)
    expected = _interpreter_codes(TFLITE, "BUILTIN_REF", nhwc_codes, aligned.output_softmax)
    assert np.array_equal(candidate.run(x).raw, expected)
    ort_float = RUNTIMES.onnx_outputs(FLOAT, images.astype(np.float32))
    agreement = float(np.mean(np.argmax(ort_float, axis=1) == candidate.predict(x)))
    unaligned = float(
        np.mean(
            np.argmax(ort_float, axis=1)
            == make_implementation(load_network(TFLITE), "int8-tflite").predict(x)
        )
    )
    assert agreement >= 0.9 and agreement > unaligned


def _conv(shape: tuple[int, int, int]) -> Network:
    channels = shape[0]
    return Network(
        (
            Conv2D(np.ones((2, channels, 1, 1)), np.zeros(2), Activation.RELU, shape),
            Dense(np.ones((2, 2 * shape[1] * shape[2])), np.zeros(2), Activation.IDENTITY),
        ),
        name=f"conv{'x'.join(map(str, shape))}",
    )


def test_layouts_that_cannot_be_paired_are_refused():
    with pytest.raises(InputError, match=r"read different images \(CHW \(3x4x4\) and CHW \(12x2x2\)\)"):
        reference_order(_conv((3, 4, 4)), _conv((12, 2, 2)))
    mlp = Network(
        (Dense(np.ones((2, 48)), np.zeros(2), Activation.IDENTITY),), name="mlp", image_shape=(4, 4, 3)
    )
    with pytest.raises(InputError, match="its layout cannot be read from its file"):
        reference_order(_conv((3, 4, 4)), mlp)
    assert reference_order(_conv((3, 4, 4)), _conv((3, 4, 4))) is None


def test_a_tflite_reference_refuses_nchw_data(tmp_path, capsys):
    data = tmp_path / "images.npz"
    np.savez(data, x=_images(8).astype(np.float32), domain=np.array([0.0, 1.0]))
    code = main(["diff", str(TFLITE), "--candidate", f"int8={ZOO / 'squeeze.int8-qop.onnx'}", "--data", str(data),
                 "--seeds", "2", "--budget", "20", "--no-progress", "-o", str(tmp_path / "out")])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: data set images.npz holds images of shape [3, 32, 32]")


def test_diff_finds_real_disagreements_between_the_onnx_and_tflite_files(tmp_path):
    data = tmp_path / "images.npz"
    np.savez(data, x=_images(24, seed=1).astype(np.float32), domain=np.array([0.0, 1.0]))
    out = tmp_path / "out"
    code = main(["diff", str(FLOAT), "--reference", "real", "--candidate", f"int8-tflite={TFLITE}",
                 "--data", str(data), "--seeds", "4", "--budget", "150", "--methods", "ga", "--epsilon", "0.05",
                 "--no-progress", "-o", str(out)])  # fmt: skip
    assert code == 0
    diis = np.load(out / "diis.npz")
    assert len(diis["x"]) > 0
    images = diis["x"].reshape(-1, 3, 32, 32)
    ort_float = RUNTIMES.onnx_outputs(FLOAT, images.astype(np.float32))
    codes = make_implementation(
        aligned_to_reference(load_network(FLOAT), load_network(TFLITE))[0], "int8-tflite"
    ).inputs(diis["x"])
    nhwc_codes = codes.reshape(images.shape).transpose(0, 2, 3, 1).reshape(len(images), -1)
    litert = _interpreter_codes(TFLITE, "BUILTIN_REF", nhwc_codes, load_network(TFLITE).output_softmax)
    assert np.array_equal(np.argmax(litert, axis=1), np.argmax(diis["candidate"], axis=1))
    np.testing.assert_allclose(ort_float, diis["reference"], atol=1e-4)
    # the GA drives the float model's top two logits together: where they are not within float32's
    # rounding (onnxruntime) of the float64 reference, onnxruntime's class is the reference's and
    # differs from LiteRT's
    top2 = np.sort(diis["reference"], axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-4
    assert clear.any()
    assert np.all(np.argmax(ort_float[clear], axis=1) != np.argmax(litert[clear], axis=1))


def test_impact_runs_the_tflite_candidate_on_the_reference_images(tmp_path):
    images = _images(40, seed=2)
    labels = np.argmax(RUNTIMES.onnx_outputs(FLOAT, images.astype(np.float32)), axis=1)  # the float file's
    data = tmp_path / "images.npz"
    np.savez(data, x=images.astype(np.float32), y=labels, domain=np.array([0.0, 1.0]))
    out = tmp_path / "out"
    code = main(["impact", str(FLOAT), "--candidate", f"int8-tflite={TFLITE}", "--data", str(data), "--families",
                 "awgn", "--grid", "awgn=0.1", "--resamples", "20", "--no-progress", "-o", str(out)])  # fmt: skip
    assert code == 0
    clean = json.loads((out / "impact.json").read_text())["cells"][0]
    assert clean["family"] == "clean" and clean["comparisons"][0]["scores"]["top1"]["value"] >= 0.9
