"""Bounds on what qverify reads, checked *before* the work they bound.

A hostile or broken input must not make qverify hang or exhaust memory before it can say what is
wrong: a 100 MB VNN-LIB file, a numeric literal of 10^8 digits (an exact Fraction of 10^len), an
ONNX input dimension of 10^9 (allocated before anything refuses it). Each limit has a name, a
default a real network never reaches, and an environment variable that raises it for a user who
really needs more; the error names both.

`reading_within(timeout_s, memory_mb)` runs the reading of a task's inputs under the task's
`--timeout` and `--memory` (a SIGALRM, from the timer or from a thread watching what reading adds
to the resident set, that becomes ResourceLimitError: an UNKNOWN verdict), so that parsing is
bounded by the same budget as the engine. Python handles the signal between two bytecodes, so one
long C call (a regex over a whole file) finishes first: the file-size limit bounds that.
"""

from __future__ import annotations

import contextlib
import os
import re
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

    def exceeded(self, where: str) -> InputError:
        """The error for an input that reading found to be over the limit, and stopped reading (its
        true size is unknown: a decompression bomb)."""
        return InputError(
            f"{where}: more than the {self.what} limit of {self.value()} {self.unit} "
            f"(set {self.variable} to raise it)"
        )

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
# VNN-COMP's largest properties hold some 10^4 asserts (a box of 3,072 inputs, disjunctions of a few
# hundred clauses); each assert becomes Python objects, so a flood of them is refused up front.
ASSERT_COUNT = InputLimit("number of asserts", "QVERIFY_MAX_ASSERTS", 200_000, "asserts")
ALL_LIMITS = (FILE_SIZE, LITERAL_LENGTH, TENSOR_SIZE, ASSERT_COUNT)


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


def read_gzip(path: str | Path) -> bytes:
    """A gzip file's decompressed bytes, at most FILE_SIZE of them: a decompression bomb stops at the
    limit (InputError) instead of filling memory. The compressed file's own size is checked first.

    :raises InputError: over the limit, or not a gzip file (`path: not a gzip file: ...`).
    :raises OSError: the file cannot be read (the callers name it in their own words).
    """
    import gzip
    import zlib

    check_file(path)
    limit = FILE_SIZE.value() * 1_000_000
    try:
        with gzip.open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except (gzip.BadGzipFile, zlib.error, EOFError) as error:
        raise InputError(f"{path}: not a gzip file, or a damaged one: {error}") from None
    if len(data) > limit:
        raise FILE_SIZE.exceeded(f"{path} (decompressed)")
    return data


def check_literal(text: str, where: str) -> None:
    """A numeric literal's length against LITERAL_LENGTH (exact conversion costs grow with it)."""
    LITERAL_LENGTH.check(len(text), where)


def check_numerals(text: str, where: str) -> None:
    """Every numeral of a text against LITERAL_LENGTH, before a parser that converts numbers itself:
    tomllib converts an unquoted number of 10^8 digits whole (gigabytes, past `--memory`) before any
    value could be checked. One pass; a numeral is a run of digits, `_ . e E + -` that starts with a
    digit (or a sign before one)."""
    limit = LITERAL_LENGTH.value()
    found = re.search(rf"(?<![0-9_.eE+\-])[+\-]?[0-9][0-9_.eE+\-]{{{limit},}}", text)
    if found is not None:
        line = text.count("\n", 0, found.start()) + 1
        LITERAL_LENGTH.check(len(found.group()), f"{where}:{line}: a number")


_ASSERT = re.compile(r"\(\s*assert\b")


def check_assert_count(text: str, where: str) -> None:
    """The number of `(assert` forms of a VNN-LIB text against ASSERT_COUNT, before parsing it
    (one regex pass; the text itself is bounded by FILE_SIZE)."""
    ASSERT_COUNT.check(sum(1 for _ in _ASSERT.finditer(text)), where)


def check_tensor(shape: tuple[int, ...], itemsize: int, where: str) -> None:
    """Elements x element size against TENSOR_SIZE, before anything of that shape is allocated."""
    size = itemsize
    for dim in shape:
        size *= max(int(dim), 1)
    TENSOR_SIZE.check(size / 1e6, f"{where}: shape {list(shape)}")


_POLL_S = 0.05


class _Budget:
    """The wall-clock and memory budget of reading one task's inputs (see `reading_within`)."""

    def __init__(self, timeout_s: float, memory_mb: int | None) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.reason = ""
        self.done = threading.Event()

    def on_alarm(self, signum, frame) -> None:
        raise ResourceLimitError(
            self.reason or f"timeout: {self.timeout_s:g} s reached while reading the inputs"
        )

    def watch_memory(self, main_thread: int) -> None:
        """Poll this process' resident set; past the budget, interrupt the main thread (SIGALRM)."""
        import psutil

        process = psutil.Process()
        baseline = process.memory_info().rss
        while not self.done.wait(_POLL_S):
            grown_mb = (process.memory_info().rss - baseline) / 2**20
            if self.memory_mb is not None and grown_mb > self.memory_mb:
                self.reason = f"memory: reading the inputs took more than the limit of {self.memory_mb} MB"
                signal.pthread_kill(main_thread, signal.SIGALRM)
                return


@contextlib.contextmanager
def reading_within(timeout_s: float, memory_mb: int | None = None) -> Iterator[None]:
    """Run the body under a wall-clock limit and a memory budget (what the body adds to this
    process' resident set); either ends it with ResourceLimitError. Main thread only; elsewhere
    the body runs unbounded (file and literal limits still apply)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    budget = _Budget(timeout_s, memory_mb)
    previous = signal.signal(signal.SIGALRM, budget.on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    watcher = None
    if memory_mb is not None:
        watcher = threading.Thread(target=budget.watch_memory, args=(threading.get_ident(),), daemon=True)
        watcher.start()
    try:
        yield
    except MemoryError:
        raise ResourceLimitError("memory exhausted while reading the inputs") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        budget.done.set()
        if watcher is not None:
            watcher.join()
        signal.signal(signal.SIGALRM, previous)
