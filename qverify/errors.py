"""One exception hierarchy for qverify; each class carries the exit code the CLI returns.

Messages are user-facing: they say where (file:line, node name, layer/neuron) and what.
The CLI catches `QverifyError` once and prints `error: <message>`; anything else is a bug.
"""

from __future__ import annotations

EXIT_SAFE = 0
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_UNSAFE = 10
EXIT_UNKNOWN = 20
EXIT_INTERRUPTED = 130  # as a shell reports Ctrl-C

EXIT_CODES_HELP = (
    "exit codes: 0 SAFE / success, 10 UNSAFE, 20 UNKNOWN, "
    "2 ERROR (bad input, unsupported construct, missing tool), 3 internal error, 130 interrupted"
)


class QverifyError(Exception):
    """Base class of every error qverify reports to its user."""

    exit_code = EXIT_USAGE


class InputError(QverifyError, ValueError):
    """Malformed input: NNet, ONNX, VNN-LIB, spec file, C source, command-line value."""


class UnsupportedError(QverifyError):
    """Well-formed input that qverify does not handle (an ONNX operator, a C construct)."""


class RangeError(QverifyError, ValueError):
    """A value cannot be represented where it must be (a constant in `detect` mode, a wide accumulator)."""


class ToolMissingError(QverifyError):
    """An external tool or optional library is not installed; callers may fall back."""


class ToolFailedError(QverifyError):
    """An external tool ran but failed (crash, garbled output, unknown version)."""


class ResourceLimitError(QverifyError):
    """A time or memory limit was reached; the reason becomes an UNKNOWN verdict."""

    exit_code = EXIT_UNKNOWN


class InternalError(QverifyError):
    """An invariant of qverify itself was broken: a bug, to be reported."""

    exit_code = EXIT_INTERNAL


class InterruptedRunError(QverifyError):
    """Ctrl-C or SIGTERM during a run (the message says what was kept)."""

    exit_code = EXIT_INTERRUPTED
