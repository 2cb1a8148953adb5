"""Compile generated C with gcc and run its replay main: the oracle for tests and counterexamples."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

from qverify.errors import ToolFailedError, ToolMissingError

STRICT_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off")
COMPILE_TIMEOUT_S = 600


def find_gcc() -> str:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise ToolMissingError("gcc not found: install it (Debian/Ubuntu: apt-get install gcc)")
    return compiler


def compile_replay(source: Path, output: Path | None = None, optimise: str = "-O1") -> Path:
    """Compile `source` with -DQV_REPLAY and the strict flags; returns the executable's path."""
    source = Path(source)
    output = Path(output) if output else source.with_suffix("")
    command = [
        find_gcc(),
        *STRICT_FLAGS,
        optimise,
        "-DQV_REPLAY",
        f"-I{source.parent}",
        str(source),
        "-lm",
        "-o",
        str(output),
    ]
    try:
        completed = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as error:
        raise ToolFailedError(f"gcc timed out after {COMPILE_TIMEOUT_S} s on {source}") from error
    if completed.returncode != 0:
        raise ToolFailedError(f"gcc failed on {source}:\n{completed.stderr.strip()[:4000]}")
    return output


def run_lines(
    executable: Path, lines: list[str], arguments: tuple[str, ...] = (), timeout_s: float = 600
) -> list[str]:
    """Feed `lines` to a replay program; returns its output lines (one per input line)."""
    try:
        completed = subprocess.run(
            [str(executable), *arguments],
            check=False,
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as error:
        raise ToolFailedError(f"{executable.name} timed out after {timeout_s} s") from error
    if completed.returncode != 0:
        raise ToolFailedError(
            f"{executable.name} exited with {completed.returncode}: {completed.stderr.strip()}"
        )
    output = completed.stdout.splitlines()
    if len(output) != len(lines):
        raise ToolFailedError(f"{executable.name} printed {len(output)} lines for {len(lines)} inputs")
    return output


def format_inputs(x: np.ndarray, exact_float: bool) -> list[str]:
    """Input rows as text: integers as they are, floats exactly (hexadecimal) when asked."""
    x = np.atleast_2d(x)
    if np.issubdtype(x.dtype, np.integer):
        return [" ".join(str(int(v)) for v in row) for row in x]
    if exact_float:
        return [" ".join(float(v).hex() for v in row) for row in x]
    return [" ".join(repr(float(v)) for v in row) for row in x]
