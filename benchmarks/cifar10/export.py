"""Export the trained CIFAR-10 zoo (train.py's work/*.pt, work/keras_cnn.keras) as the files users
bring, and measure every file's accuracy on the 10,000 test images in its own runtime. Needs the
`train` extra (torch, tensorflow-cpu, tf2onnx, onnx, onnxruntime, ai-edge-litert):

    python benchmarks/cifar10/export.py all          # or family names

For each family, into benchmarks/cifar10/models/:

- `<family>.onnx`: float32, `torch.onnx.export` (the TorchScript exporter, opset 13, batch 1,
  input `input` [1, 3, 32, 32] NCHW in [0, 1], output `output` [1, 10]). BatchNorm is folded
  into the convolutions by the exporter (its default in eval mode), except for the families in
  KEEP_BN, exported without constant folding so that `BatchNormalization` nodes remain.
  The Keras CNN: `tf2onnx.convert.from_keras` (opset 13), input `input` [1, 32, 32, 3] NHWC.
- `<family>.int8-qdq.onnx`, `<family>.int8-qop.onnx`: onnxruntime's static quantizer
  (`quantize_static`: int8 activations and weights, weights per output channel, MinMax calibration on
  CALIBRATION training images), QDQ and QOperator formats, from the float graph with BatchNorm folded
  (onnxruntime's quantizer does not quantize a BatchNormalization node).
- `<family>.int8.tflite`: TensorFlow Lite full-integer quantization (int8 weights per channel,
  int8 activations, int8 input and output), calibrated on the same training images, converted from a
  Keras twin of the PyTorch network (`keras_twin`: the same weights, NHWC, BatchNorm folded, the
  first dense layer's columns permuted so that Keras's HWC flatten computes PyTorch's CHW one);
  input [1, 32, 32, 3] NHWC. Checked: the twin's float outputs equal PyTorch's within 1e-4.
- `<family>.dynamic.tflite` (DYNAMIC families): dynamic-range quantization (int8 weights, float
  activations and input/output).

Why a Keras twin rather than onnx2tf or ai-edge-torch: the architectures are ours and built from
five block kinds, so a twin is ~100 lines with no converter between us and the file, and the
TFLite files are what the TensorFlow Lite converter makes of a Keras model, the way the papers'
subjects (Keras/TensorFlow models) were made. onnx2tf and ai-edge-torch would add a layer of
rewriting (transposes, fused patterns) whose output we would have to check op by op.

Every file's accuracy is measured on the 10,000 test images in its runtime (onnxruntime,
one thread; the LiteRT interpreter for .tflite, inputs quantized with the file's input scale and
zero point for the int8 files) and written to `zoo.json` with the op types of every file, sizes and
the count of correct images among the first TEST_PREFIX test images (what tests/test_cifar10_zoo.py
checks without a framework).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import onnx
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from data import load_split, npz_path
from train import EPOCHS, KERAS_FAMILY, WORK

MODELS = HERE / "models"
ZOO_FILE = HERE / "zoo.json"
OPSET = 13
KEEP_BN = ("resnet20", "resnet4b")  # exported with BatchNormalization nodes
DYNAMIC = ("lenet5", "resnet20")  # also exported with dynamic-range quantization
SOFTMAX = ("lenet5",)  # PyTorch families exported with a final Softmax (the Keras CNN has its own)
CALIBRATION = 1000  # training images (a seeded choice) for both quantizers
CALIBRATION_SEED = 0
TEST_PREFIX = 500
TWIN_TOLERANCE = 1e-4


# ------------------------------------------------------------------------------------------ PyTorch


def load_torch(family: str):
    import torch
    from models import FAMILIES
    from torch import nn

    model = FAMILIES[family]()
    model.load_state_dict(torch.load(WORK / f"{family}.pt", weights_only=True))
    if family in SOFTMAX:
        model = nn.Sequential(*model, nn.Softmax(dim=1))
    return model.eval()


def export_torch_onnx(model, path: Path, keep_bn: bool) -> None:
    import torch

    torch.onnx.export(
        model,
        (torch.zeros(1, 3, 32, 32),),
        str(path),
        opset_version=OPSET,
        input_names=["input"],
        output_names=["output"],
        dynamo=False,
        training=torch.onnx.TrainingMode.EVAL,
        do_constant_folding=not keep_bn,
    )
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


# ------------------------------------------------------------------------------------------ Keras twin


def _conv_weights(block) -> tuple[np.ndarray, np.ndarray]:
    """A ConvBN's convolution with its BatchNorm folded in: (weights OIHW, bias)."""
    conv, bn = block.conv, block.bn
    weight = conv.weight.detach().numpy().astype(np.float64)
    bias = np.zeros(weight.shape[0]) if conv.bias is None else conv.bias.detach().numpy().astype(np.float64)
    if bn is not None:
        scale = bn.weight.detach().numpy() / np.sqrt(bn.running_var.numpy().astype(np.float64) + bn.eps)
        weight = weight * scale[:, None, None, None]
        bias = (bias - bn.running_mean.numpy()) * scale + bn.bias.detach().numpy()
    return weight.astype(np.float32), bias.astype(np.float32)


def _keras_conv(block, x):
    """A ConvBN on the Keras tensor x (NHWC): symmetric padding as PyTorch pads (ZeroPadding2D when
    the stride is 2, where Keras's 'same' would pad only the bottom/right), then the activation."""
    from keras import layers

    conv = block.conv
    kernel, stride, pad = conv.kernel_size[0], conv.stride[0], conv.padding[0]
    weight, bias = _conv_weights(block)
    depthwise = conv.groups > 1
    if depthwise and conv.groups != conv.in_channels:
        raise ValueError("grouped convolutions other than depthwise are not in the zoo")
    padding = "valid"
    if pad and stride == 1 and pad == kernel // 2:
        padding = "same"
    elif pad:
        x = layers.ZeroPadding2D(pad)(x)
    if depthwise:
        layer = layers.DepthwiseConv2D(kernel, stride, padding)
        x = layer(x)
        layer.set_weights([weight.transpose(2, 3, 0, 1), bias])  # (kh, kw, channels, 1)
    else:
        layer = layers.Conv2D(conv.out_channels, kernel, stride, padding)
        x = layer(x)
        layer.set_weights([weight.transpose(2, 3, 1, 0), bias])  # (kh, kw, in, out)
    if block.act == "relu":
        x = layers.ReLU()(x)
    elif block.act == "relu6":
        x = layers.ReLU(6.0)(x)
    return x


def keras_twin(model):
    """The PyTorch network `model` (an nn.Sequential of models.py's blocks) as a Keras functional
    model on NHWC input with the same weights."""
    import keras
    from keras import layers
    from models import BasicBlock, ConvBN, Fire, InvertedResidual
    from torch import nn

    inputs = keras.Input((32, 32, 3), batch_size=1, name="input")
    x = inputs
    flattened_from = None  # the NHWC shape before a Flatten: the next Linear's columns are permuted
    for module in model:
        if isinstance(module, ConvBN):
            x = _keras_conv(module, x)
        elif isinstance(module, BasicBlock):
            shortcut = x if isinstance(module.shortcut, nn.Identity) else _keras_conv(module.shortcut, x)
            y = _keras_conv(module.conv2, _keras_conv(module.conv1, x))
            x = layers.ReLU()(layers.Add()([y, shortcut]))
        elif isinstance(module, InvertedResidual):
            y = _keras_conv(module.project, _keras_conv(module.depthwise, _keras_conv(module.expand, x)))
            x = layers.Add()([x, y]) if module.residual else y
        elif isinstance(module, Fire):
            s = _keras_conv(module.squeeze, x)
            x = layers.Concatenate(axis=-1)([_keras_conv(module.expand1, s), _keras_conv(module.expand3, s)])
        elif isinstance(module, nn.MaxPool2d):
            x = layers.MaxPooling2D(module.kernel_size, module.stride)(x)
        elif isinstance(module, nn.AdaptiveAvgPool2d):
            x = layers.GlobalAveragePooling2D(keepdims=True)(x)
        elif isinstance(module, nn.Flatten):
            flattened_from = tuple(int(d) for d in x.shape[1:])
            x = layers.Reshape((int(np.prod(flattened_from)),))(x)  # constant shape (Flatten's is computed)
        elif isinstance(module, nn.Linear):
            weight = module.weight.detach().numpy()
            if flattened_from is not None:
                h, w, c = flattened_from  # Keras flattens HWC, PyTorch CHW
                weight = weight.reshape(-1, c, h, w).transpose(0, 2, 3, 1).reshape(weight.shape[0], -1)
                flattened_from = None
            layer = layers.Dense(module.out_features)
            x = layer(x)
            layer.set_weights([weight.T, module.bias.detach().numpy()])
        elif isinstance(module, nn.ReLU):
            x = layers.ReLU()(x)
        elif isinstance(module, nn.Softmax):
            x = layers.Softmax()(x)
        else:
            raise TypeError(f"no Keras twin for {type(module).__name__}")
    return keras.Model(inputs, x)


# ------------------------------------------------------------------------------------------ files


def calibration_images() -> np.ndarray:
    """CALIBRATION training images (seeded choice), NCHW float32 in [0, 1]."""
    x, _ = load_split("train")
    chosen = np.sort(np.random.default_rng(CALIBRATION_SEED).choice(len(x), CALIBRATION, replace=False))
    return x[chosen]


class _Reader:
    """onnxruntime's CalibrationDataReader over images, one per call (batch 1)."""

    def __init__(self, images: np.ndarray) -> None:
        self.images = iter(images)

    def get_next(self):
        image = next(self.images, None)
        return None if image is None else {"input": image[None]}


def quantize_onnx(float_path: Path, images: np.ndarray, family: str) -> dict[str, Path]:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    written = {}
    if onnx_session(float_path).get_inputs()[0].shape[-1] == 3:  # tf2onnx's NHWC input
        images = images.transpose(0, 2, 3, 1)
    with tempfile.TemporaryDirectory() as scratch:
        source = float_path
        if family in KEEP_BN:  # quantize the same network with BatchNorm folded
            source = Path(scratch) / "folded.onnx"
            export_torch_onnx(load_torch(family), source, keep_bn=False)
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            for label, fmt in (("qdq", QuantFormat.QDQ), ("qop", QuantFormat.QOperator)):
                out = MODELS / f"{family}.int8-{label}.onnx"
                quantize_static(
                    str(source),
                    str(out),
                    _Reader(images),
                    quant_format=fmt,
                    per_channel=True,
                    activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax,
                )
                written[f"int8-{label}"] = out
        finally:
            root.setLevel(level)
    return written


def convert_tflite(keras_model, images_nhwc: np.ndarray, family: str, dynamic: bool) -> dict[str, Path]:
    import tensorflow as tf

    written = {}

    def representative():
        for image in images_nhwc:
            yield [image[None]]

    variants = [("int8", True)] + ([("dynamic", False)] if dynamic else [])
    for label, full_integer in variants:
        converter = tf.lite.TFLiteConverter.from_keras_model(keras_model)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if full_integer:
            converter.representative_dataset = representative
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8
        out = MODELS / f"{family}.{label}.tflite"
        out.write_bytes(converter.convert())
        written[label] = out
    return written


def export_keras_onnx(keras_model, path: Path) -> None:
    """tf2onnx's conversion of the Keras model (batch 1, NHWC input `input`, output `output`):
    `from_function` on the model's inference function (tf2onnx's `from_keras` does not read Keras 3
    models: KeyError on a keras_tensor)."""
    import tensorflow as tf
    import tf2onnx

    spec = (tf.TensorSpec([1, 32, 32, 3], tf.float32, name="input"),)

    @tf.autograph.experimental.do_not_convert
    def inference(input):  # the name becomes the ONNX input's
        return {"output": keras_model(input, training=False)}

    function = tf.function(inference, input_signature=spec)
    model_proto, _ = tf2onnx.convert.from_function(function, input_signature=spec, opset=OPSET)
    onnx.save(model_proto, str(path))
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


# ------------------------------------------------------------------------------------------ measuring


def onnx_session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_predictions(path: Path, x_nchw: np.ndarray) -> np.ndarray:
    session = onnx_session(path)
    feed = session.get_inputs()[0]
    nhwc = feed.shape[-1] == 3
    images = x_nchw.transpose(0, 2, 3, 1) if nhwc else x_nchw
    output = session.get_outputs()[0].name
    return np.array([session.run([output], {feed.name: image[None]})[0][0].argmax() for image in images])


def tflite_predictions(path: Path, x_nchw: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    feed, fetch = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    scale, zero = feed["quantization"]
    images = x_nchw.transpose(0, 2, 3, 1)
    if feed["dtype"] == np.int8:
        images = np.clip(np.round(images / scale) + zero, -128, 127).astype(np.int8)
    predicted = []
    for image in images:
        interpreter.set_tensor(feed["index"], image[None])
        interpreter.invoke()
        predicted.append(int(interpreter.get_tensor(fetch["index"])[0].argmax()))
    return np.array(predicted)


def onnx_ops(path: Path) -> list[str]:
    return sorted({node.op_type for node in onnx.load(str(path)).graph.node})


def tflite_ops(path: Path) -> list[str]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    return sorted({op["op_name"] for op in interpreter._get_ops_details()})


def measure(path: Path, x: np.ndarray, y: np.ndarray) -> dict:
    start = time.perf_counter()
    tflite = path.suffix == ".tflite"
    predicted = (tflite_predictions if tflite else onnx_predictions)(path, x)
    return {
        "file": path.name,
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "accuracy": float(np.mean(predicted == y)),
        f"correct_first_{TEST_PREFIX}": int(np.sum(predicted[:TEST_PREFIX] == y[:TEST_PREFIX])),
        "ops": tflite_ops(path) if tflite else onnx_ops(path),
        "seconds": round(time.perf_counter() - start, 1),
    }


# ------------------------------------------------------------------------------------------ main


def export_family(family: str, calibration: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> dict:
    MODELS.mkdir(exist_ok=True)
    nhwc = calibration.transpose(0, 2, 3, 1)
    record = json.loads((WORK / f"{family}.json").read_text())
    files: dict[str, Path] = {}
    if family == KERAS_FAMILY:
        import keras
        from train import keras_cnn

        trained = keras.models.load_model(WORK / f"{family}.keras")
        keras_model = keras_cnn(batch_size=1)  # batch 1 as the PyTorch exports: constant shapes in the files
        keras_model.set_weights(trained.get_weights())
        files["float"] = MODELS / f"{family}.onnx"
        export_keras_onnx(keras_model, files["float"])
        reference = keras_model.predict(x_test[:200].transpose(0, 2, 3, 1), verbose=0)
    else:
        import torch

        model = load_torch(family)
        files["float"] = MODELS / f"{family}.onnx"
        export_torch_onnx(model, files["float"], keep_bn=family in KEEP_BN)
        with torch.no_grad():
            reference = model(torch.from_numpy(x_test[:200])).numpy()
        keras_model = keras_twin(model)
        twin = keras_model.predict(x_test[:200].transpose(0, 2, 3, 1), batch_size=1, verbose=0)
        twin_difference = float(np.abs(twin - reference).max())
        if twin_difference > TWIN_TOLERANCE:
            raise SystemExit(f"{family}: the Keras twin differs from PyTorch by {twin_difference:.2e}")
        record["keras_twin_max_difference"] = twin_difference
    session = onnx_session(files["float"])
    feed = session.get_inputs()[0]
    images = x_test[:200].transpose(0, 2, 3, 1) if feed.shape[-1] == 3 else x_test[:200]
    runtime = np.vstack([session.run(None, {feed.name: image[None]})[0] for image in images])
    record["onnx_max_difference"] = float(np.abs(runtime - reference).max())
    files.update(quantize_onnx(files["float"], calibration, family))
    files.update(convert_tflite(keras_model, nhwc, family, dynamic=family in DYNAMIC))
    record["files"] = {label: measure(path, x_test, y_test) for label, path in files.items()}
    for label, entry in record["files"].items():
        print(
            f"{family} {label}: {entry['file']} {entry['bytes'] / 1e3:.0f} kB, accuracy {entry['accuracy']:.2%}, "
            f"ops {', '.join(entry['ops'])}",
            flush=True,
        )
    return record


def table(zoo: dict) -> tuple[str, str]:
    """README.md's tables from zoo.json: accuracies and sizes per family, op types per file."""
    labels = ("float", "int8-qdq", "int8-qop", "int8", "dynamic")
    rows = [
        "| family | params | epochs | training | float | int8 QDQ | int8 QOp | TFLite int8 | TFLite dynamic | sizes (kB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ops = ["| file | op types |", "|---|---|"]
    for family in [name for name in EPOCHS if name in zoo["families"]]:  # train.py's order
        record = zoo["families"][family]
        files = record["files"]
        cells = [f"{100 * files[label]['accuracy']:.2f}" if label in files else "-" for label in labels]
        sizes = " / ".join(f"{files[label]['bytes'] / 1e3:.0f}" for label in labels if label in files)
        minutes = record["train_seconds"] / 60
        rows.append(
            f"| {family} | {record['params']:,} | {record['epochs']} | {minutes:.0f} min | {' | '.join(cells)} | {sizes} |"
        )
        ops += [f"| `{entry['file']}` | {', '.join(entry['ops'])} |" for entry in files.values()]
    return "\n".join(rows), "\n".join(ops)


def update_readme(zoo: dict) -> None:
    """Rewrite README.md's two generated tables (between their <!-- zoo:... --> markers)."""
    readme = HERE / "README.md"
    text = readme.read_text()
    for marker, content in zip(("table", "ops"), table(zoo)):
        start, end = f"<!-- zoo:{marker} -->", f"<!-- /zoo:{marker} -->"
        head, rest = text.split(start)
        _, tail = rest.split(end)
        text = f"{head}{start}\n{content}\n{end}{tail}"
    readme.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export the CIFAR-10 zoo (benchmarks/cifar10/README.md).")
    parser.add_argument("families", nargs="*", help=f"'all' or any of: {', '.join(EPOCHS)}")
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's tables from zoo.json")
    args = parser.parse_args(argv)
    if args.readme:
        update_readme(json.loads(ZOO_FILE.read_text()))
        return 0
    families = list(EPOCHS) if args.families == ["all"] else args.families
    unknown = [f for f in families if f not in EPOCHS]
    if unknown or not families:
        parser.error(f"name families ('all' or any of: {', '.join(EPOCHS)}); unknown: {', '.join(unknown)}")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    calibration = calibration_images()
    x_test, y_test = load_split("test")
    zoo = json.loads(ZOO_FILE.read_text()) if ZOO_FILE.is_file() else {}
    zoo["test_data"] = {  # the file the accuracies were measured on
        "file": str(npz_path("test").relative_to(HERE)),
        "sha256": hashlib.sha256(npz_path("test").read_bytes()).hexdigest(),
    }
    families_record = zoo.setdefault("families", {})
    for family in families:
        families_record[family] = export_family(family, calibration, x_test, y_test)
        ZOO_FILE.write_text(json.dumps(zoo, indent=1) + "\n")
    update_readme(zoo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
