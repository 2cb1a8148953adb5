"""The repaired model on disk: its model file and its C.

Fixed point: the repaired network as an NNet (or ONNX, like the input) whose repaired layer holds
word / 2^l -- exact in the file (NNet writes doubles with `repr`) and quantized back to exactly the
repaired words (`repair` checks it). int8: the quantized ONNX model the user gave, with the changed
weight and bias initializers replaced (`io/onnx_int8_patch.py`: every other node and parameter stays
as the quantizer wrote it, and the file reads back as exactly the repaired integers); a TFLite model
is the user's .tflite file with the changed tensors' bytes overwritten in place (`io/tflite_patch.py`). The C is the
`qverify codegen` program of the repaired implementation (network function and replay main)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from qverify.assurance.implementations import Implementation
from qverify.codegen import render_network
from qverify.errors import InputError
from qverify.io import save_network
from qverify.io.onnx_int8_patch import write_int8_changes
from qverify.io.tflite_patch import write_tflite_int8_changes
from qverify.network import Network


@dataclass(frozen=True, slots=True)
class RepairedFiles:
    model: Path
    c_file: Path


def model_suffix(source: str) -> str:
    """The repaired model's suffix: the input's (.nnet or .onnx)."""
    return ".nnet" if source.lower().removesuffix(".gz").endswith(".nnet") else ".onnx"


def write_repaired(
    network: Network, implementation: Implementation, source: str, out: Path, original: Network
) -> RepairedFiles:
    """Write the repaired model and the C of its implementation under `out`; `original` is the
    model read from `source` (int8: the file whose initializers are replaced)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cannot write to {out}: {error.strerror}") from None
    if implementation.qnet is not None and implementation.qnet.is_int8 and source.lower().endswith(".tflite"):
        model = write_tflite_int8_changes(source, original, network, out / "repaired.int8.tflite")
    elif implementation.qnet is not None and implementation.qnet.is_int8:
        model = write_int8_changes(source, original, network, out / "repaired.int8.onnx")
    else:
        model = out / f"repaired{model_suffix(source)}"
        save_network(network, model)
    c_file = render_network(implementation.qnet).write(out / "c")  # type: ignore[arg-type]
    return RepairedFiles(model, c_file)
