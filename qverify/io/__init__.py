"""Networks in and out of files: NNet text and ONNX, chosen by the file suffix.

`load_network` is the entry point the other stages use; the format modules can also be called
directly. Every reader names the network after the file stem and records the path as `source`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from qverify.errors import InputError
from qverify.input_limits import check_file
from qverify.io.nnet import read_nnet, write_nnet
from qverify.io.onnx_reader import read_onnx
from qverify.io.onnx_writer import write_onnx
from qverify.network.model import Network

__all__ = [
    "SUPPORTED_SUFFIXES",
    "load_network",
    "read_nnet",
    "read_onnx",
    "save_network",
    "write_nnet",
    "write_onnx",
]

_READERS: dict[str, Callable[[str | Path], Network]] = {".nnet": read_nnet, ".onnx": read_onnx}
_WRITERS: dict[str, Callable[[Network, str | Path], None]] = {".nnet": write_nnet, ".onnx": write_onnx}
SUPPORTED_SUFFIXES = tuple(_READERS)


def _suffix(path: str | Path) -> str:
    """The lower-cased suffix, checked against the supported formats."""
    suffix = Path(path).suffix.lower()
    if suffix not in _READERS:
        raise InputError(
            f"{path}: unsupported network file suffix '{suffix}' (supported: {', '.join(SUPPORTED_SUFFIXES)})"
        )
    return suffix


def load_network(path: str | Path) -> Network:
    """Read a `.nnet` or `.onnx` file into a `Network` (name = file stem, source = `path`).

    :raises InputError: unknown suffix, no such file, or a malformed file.
    :raises UnsupportedError: an ONNX graph using constructs qverify does not handle.
    """
    check_file(path)  # a directory is named as one; the size limit before any byte is read
    suffix = _suffix(path)
    if not Path(path).is_file():
        raise InputError(f"{path}: no such file")
    return _READERS[suffix](path)


def save_network(net: Network, path: str | Path) -> None:
    """Write `net` in the format given by the suffix of `path` (`.nnet` or `.onnx`).

    :raises InputError: unknown suffix or the file cannot be written.
    :raises UnsupportedError: the network cannot be expressed in that format (NNet: ReLU hidden
        layers and a linear last layer only).
    """
    _WRITERS[_suffix(path)](net, path)
