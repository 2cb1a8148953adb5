"""Network files as they come: plain or gzip-compressed (`.onnx.gz`, `.nnet.gz`: VNN-COMP ships its
networks so since 2022). A compressed file is read whole into memory through
`qverify.input_limits.read_gzip`, which stops at the file-size limit (a decompression bomb is an
error, not an exhausted machine); its name is that of the file inside (`net.onnx.gz` is `net`)."""

from __future__ import annotations

from pathlib import Path

from qverify.input_limits import read_gzip

GZIP_SUFFIX = ".gz"


def is_gzip(path: str | Path) -> bool:
    return str(path).lower().endswith(GZIP_SUFFIX)


def format_suffix(path: str | Path) -> str:
    """The suffix that names the format, lower-case: `.onnx` for `net.onnx` and `net.ONNX.gz`."""
    name = Path(path).name
    if is_gzip(name):
        name = name[: -len(GZIP_SUFFIX)]
    return Path(name).suffix.lower()


def file_stem(path: str | Path) -> str:
    """The network's name: the file name without its format suffix (and `.gz`)."""
    name = Path(path).name
    if is_gzip(name):
        name = name[: -len(GZIP_SUFFIX)]
    return Path(name).stem


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, decompressed (within the file-size limit) when it is gzipped.

    :raises InputError: a compressed file over the limit or not gzip at all.
    :raises OSError: the file cannot be read (callers name it in their own words).
    """
    return read_gzip(path) if is_gzip(path) else Path(path).read_bytes()
