"""Bounds on what qverify reads, checked *before* the work they bound.

A hostile or broken input must not make qverify hang or exhaust memory before it can say what is
wrong: a 100 MB VNN-LIB file, a numeric literal of 10^8 digits (an exact Fraction of 10^len), an
ONNX input dimension of 10^9 (allocated before anything refuses it). Each limit has a name, a
default a real network never reaches, and an environment variable that raises it for a user who
really needs more; the error names both.

`reading_within(timeout_s)` runs the reading of a task's inputs under the task's `--timeout` (a
SIGALRM that becomes ResourceLimitError, i.e. an UNKNOWN verdict), so that parsing is bounded by
the same budget as the engine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from qverify.errors import InputError, ResourceLimitError


@dataclass(frozen=True, slots=True)
class InputLimit:
    """One named bound on input, overridable through an environment variable."""

    what: str  # e.g. "input file size"
    variable: str  # e.g. QVERIFY_MAX_FILE_MB
    default: int
    unit: str

    def value(self) -> int:
        text = os.environ.get(self.variable)
        if text is None:
            return self.default
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise InputError(f"{self.variable}={text!r}: expected a positive integer ({self.unit})")
        return value

    def check(self, amount: float, where: str) -> None:
        """InputError when `amount` (in this limit's unit) is over the limit."""
        limit = self.value()
        if amount > limit:
            raise InputError(
                f"{where}: {amount:.6g} {self.unit} exceeds the {self.what} limit of {limit} {self.unit} "
                f"(set {self.variable} to raise it)"
            )


FILE_SIZE = InputLimit("input file size", "QVERIFY_MAX_FILE_MB", 512, "MB")
LITERAL_LENGTH = InputLimit("numeric literal length", "QVERIFY_MAX_LITERAL_CHARS", 1000, "characters")
TENSOR_SIZE = InputLimit("tensor size", "QVERIFY_MAX_TENSOR_MB", 1024, "MB")
ALL_LIMITS = (FILE_SIZE, LITERAL_LENGTH, TENSOR_SIZE)


def check_file(path: str | Path) -> None:
    """A file's size against FILE_SIZE, from its metadata (nothing is read); a directory is named.

    Missing files are left to the reader (its own `no such file` message).
    """
    file = Path(path)
    if file.is_dir():
        raise InputError(f"{path}: is a directory, not a file")
    try:
        size = file.stat().st_size
    except OSError:
        return
    FILE_SIZE.check(size / 1e6, str(path))


def check_literal(text: str, where: str) -> None:
    """A numeric literal's length against LITERAL_LENGTH (exact conversion costs grow with it)."""
    LITERAL_LENGTH.check(len(text), where)


def check_tensor(shape: tuple[int, ...], itemsize: int, where: str) -> None:
    """Elements x element size against TENSOR_SIZE, before anything of that shape is allocated."""
    size = itemsize
    for dim in shape:
        size *= max(int(dim), 1)
    TENSOR_SIZE.check(size / 1e6, f"{where}: shape {list(shape)}")


def _on_alarm(timeout_s: float):
    def handler(signum, frame) -> None:
        raise ResourceLimitError(f"timeout: {timeout_s:g} s reached while reading the inputs")

    return handler


@contextlib.contextmanager
def reading_within(timeout_s: float) -> Iterator[None]:
    """Run the body under a wall-clock limit (main thread only; elsewhere the body runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm(timeout_s))
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    except MemoryError:
        raise ResourceLimitError("memory exhausted while reading the inputs") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
