"""Networks in and out of files: NNet text, ONNX and TensorFlow Lite (read only), chosen by the file suffix.

`load_network` is the entry point the other stages use; the format modules can also be called
directly. Every reader names the network after the file stem and records the path as `source`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from qverify.errors import InputError
from qverify.input_limits import check_file
from qverify.io.files import GZIP_SUFFIX, format_suffix, is_gzip
from qverify.io.nnet import read_nnet, write_nnet
from qverify.network.model import Network

__all__ = [
    "SUPPORTED_SUFFIXES",
    "load_network",
    "read_nnet",
    "read_onnx",
    "read_tflite",
    "save_network",
    "write_nnet",
    "write_onnx",
]

# suffix -> (module, function): the ONNX modules are imported on first use only, since `import onnx`
# (protobuf, ml_dtypes) costs ~0.1 s that a run on an .nnet file never needs
_READERS = {
    ".nnet": ("qverify.io.nnet", "read_nnet"),
    ".onnx": ("qverify.io.onnx_reader", "read_onnx"),
    ".tflite": ("qverify.io.tflite_reader", "read_tflite"),
}
_WRITERS = {".nnet": ("qverify.io.nnet", "write_nnet"), ".onnx": ("qverify.io.onnx_writer", "write_onnx")}
SUPPORTED_SUFFIXES = tuple(_READERS)


def _function(table: dict[str, tuple[str, str]], suffix: str) -> Any:
    module, name = table[suffix]
    return getattr(importlib.import_module(module), name)


def __getattr__(name: str) -> Any:
    """`read_onnx` and `write_onnx`, imported when first asked for (see _READERS)."""
    for table in (_READERS, _WRITERS):
        for suffix, (_, function) in table.items():
            if function == name:
                return _function(table, suffix)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _suffix(path: str | Path, compressed: bool = True) -> str:
    """The lower-cased format suffix (`.onnx` for `net.onnx.gz`), checked against the supported
    formats; `compressed`: whether a gzipped file is acceptable (it is read, not written)."""
    suffix = format_suffix(path)
    if suffix in _READERS and (compressed or not is_gzip(path)):
        return suffix
    supported = SUPPORTED_SUFFIXES + (
        tuple(f"{s}{GZIP_SUFFIX}" for s in SUPPORTED_SUFFIXES) if compressed else ()
    )
    shown = "".join(Path(path).suffixes[-2:]).lower() if is_gzip(path) else Path(path).suffix.lower()
    raise InputError(f"{path}: unsupported network file suffix '{shown}' (supported: {', '.join(supported)})")


def load_network(path: str | Path) -> Network:
    """Read a `.nnet`, `.onnx` or `.tflite` file, or its gzip-compressed form (`.onnx.gz`, ...:
    decompressed within the file-size limit, `qverify.io.files`), into a `Network` (name = file stem
    without the suffixes, source = `path`).

    :raises InputError: unknown suffix, no such file, or a malformed file.
    :raises UnsupportedError: an ONNX graph using constructs qverify does not handle.
    """
    check_file(path)  # a directory is named as one; the size limit before any byte is read
    suffix = _suffix(path)
    if not Path(path).is_file():
        raise InputError(f"{path}: no such file")
    return _function(_READERS, suffix)(path)


def save_network(net: Network, path: str | Path) -> None:
    """Write `net` in the format given by the suffix of `path` (`.nnet` or `.onnx`).

    :raises InputError: unknown suffix or the file cannot be written.
    :raises UnsupportedError: the network cannot be expressed in that format (NNet: ReLU hidden
        layers and a linear last layer only).
    """
    suffix = _suffix(path, compressed=False)
    if suffix not in _WRITERS:
        raise InputError(
            f"{path}: qverify writes no {suffix} file from scratch (.nnet or .onnx; a repaired TFLite model is "
            "the original file with its changed integers, `qverify repair`)"
        )
    _function(_WRITERS, suffix)(net, path)
