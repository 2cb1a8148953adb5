"""Compile generated C with gcc and run its replay main: the oracle for tests and counterexamples."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.errors import ToolFailedError, ToolMissingError

STRICT_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off")
COMPILE_TIMEOUT_S = 600
# Replays of counterexamples run a handful of inputs: -O0 compiles the ACAS Xu harness in 0.07 s of
# CPU against 0.10 s at -O1, and gives the same results (strict ISO C, -ffp-contract=off: no
# optimisation may change a value; tests/test_codegen_optimise.py checks it on every number format)
REPLAY_OPTIMISE = "-O0"

# (source, output, flag) -> digest of the source compiled there: a harness replayed again in the
# same process (a test replaying several candidates, a suite) is not compiled again
_compiled: dict[tuple[Path, Path, str], str] = {}
# (digest, flag) -> a copy of an executable compiled from that content, in a private folder of this
# process: the same C compiled elsewhere (the network's replay program, which every task of a suite
# on one network and format writes anew in its own folder) is copied, not compiled again (the same
# compiler, flags, source and headers: the same program; ~0.1 s of gcc per UNSAFE of a suite)
_by_content: dict[tuple[str, str], Path] = {}
_content_folder: list[Path] = []  # the private folder, made at the first compile, removed at exit
KEPT_EXECUTABLES = 32  # the most recent ones (a long session compiles many programs once each)
_kept_lock = threading.Lock()  # (a replay's compilations start in a thread of their own)


def find_gcc() -> str:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise ToolMissingError("gcc not found: install it (Debian/Ubuntu: apt-get install gcc)")
    return compiler


def compile_replay(source: Path, output: Path | None = None, optimise: str = "-O1") -> Path:
    """Compile `source` with -DQV_REPLAY and the strict flags; returns the executable's path."""
    (executable,) = compile_replays([(Path(source), output)], optimise)
    return executable


def _digest(source: Path) -> str | None:
    """The source's and its folder's headers' content (the generated C includes only those); None
    when they cannot be read (gcc then says why)."""
    try:
        digest = hashlib.sha256(source.read_bytes())
        for header in sorted(source.parent.glob("*.h")):
            digest.update(header.name.encode() + b"\0" + header.read_bytes())
    except OSError:
        return None
    return digest.hexdigest()


@dataclass(slots=True)
class _Compilation:
    """One gcc run under way (process None: the executable is already there)."""

    source: Path
    output: Path
    key: tuple[Path, Path, str]
    digest: str | None
    process: subprocess.Popen | None


def _start(compiler: str, source: Path, output: Path | None, optimise: str) -> _Compilation:
    output = Path(output) if output else source.with_suffix("")
    key, digest = (source.resolve(), output.resolve(), optimise), _digest(source)
    if digest is not None and _compiled.get(key) == digest and output.is_file():
        return _Compilation(source, output, key, digest, None)
    _compiled.pop(key, None)
    if digest is not None and _copied((digest, optimise), output):
        _compiled[key] = digest
        return _Compilation(source, output, key, digest, None)
    command = [compiler, *STRICT_FLAGS, optimise, "-DQV_REPLAY", f"-I{source.parent}", str(source)]
    command += ["-lm", "-o", str(output)]
    # a session of its own: `cancel` kills gcc's whole group (killing the driver alone left cc1
    # running, and `communicate` waiting for it on the pipes it inherited)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    return _Compilation(source, output, key, digest, process)


def _finish(compilation: _Compilation) -> Path:
    process = compilation.process
    if process is None:
        return compilation.output
    try:
        _, stderr = process.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        raise ToolFailedError(f"gcc timed out after {COMPILE_TIMEOUT_S} s on {compilation.source}") from error
    compilation.process = None
    if process.returncode != 0:
        raise ToolFailedError(f"gcc failed on {compilation.source}:\n{stderr.strip()[:4000]}")
    if compilation.digest is not None:
        _compiled[compilation.key] = compilation.digest
        _keep((compilation.digest, compilation.key[2]), compilation.output)
    return compilation.output


def _copied(content: tuple[str, str], output: Path) -> bool:
    """Copy the executable compiled from `content` to `output`, if there is one (else False)."""
    with _kept_lock:
        kept = _by_content.get(content)
        if kept is None:
            return False
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(kept, output)  # (with its mode: executable)
        except OSError:
            _by_content.pop(content, None)
            return False
        return True


def _remove_folder(folder: Path, owner: int) -> None:
    if os.getpid() == owner:  # (not in a child forked from the owner, which exits first)
        shutil.rmtree(folder, ignore_errors=True)


def _keep(content: tuple[str, str], executable: Path) -> None:
    """Keep a copy of a fresh executable for `_copied` (nothing when it cannot be: gcc runs again)."""
    with _kept_lock:
        try:
            if not _content_folder:
                _content_folder.append(Path(tempfile.mkdtemp(prefix="qverify-replays-")))
                atexit.register(_remove_folder, _content_folder[0], os.getpid())
            kept = _content_folder[0] / f"{content[0]}{content[1]}"
            shutil.copy2(executable, kept)
        except OSError:
            return
        _by_content[content] = kept
        while len(_by_content) > KEPT_EXECUTABLES:  # the oldest first (dicts keep insertion order)
            oldest = next(iter(_by_content))
            _by_content.pop(oldest).unlink(missing_ok=True)


class Compilations:
    """gcc runs started at once, one process each running in parallel, then collected (`finish`) or
    abandoned (`cancel`): a counterexample's harness and network replays compile in the wall time
    of one compile, and can compile while the back end runs. An executable already compiled from
    the same content in this process is reused."""

    def __init__(self, jobs: Sequence[tuple[Path, Path | None]], optimise: str = "-O1") -> None:
        compiler = find_gcc()
        self._runs: list[_Compilation] = []
        try:
            for source, output in jobs:
                self._runs.append(_start(compiler, Path(source), output, optimise))
        except BaseException:
            self.cancel()
            raise

    def finish(self) -> list[Path]:
        """The executables' paths, in the order of the jobs (ToolFailedError if gcc failed)."""
        try:
            return [_finish(run) for run in self._runs]
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Stop the runs still going (a failure, an interruption, or no counterexample after all)."""
        for run in self._runs:
            if run.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.process.pid, signal.SIGKILL)
                run.process.communicate()
                run.process = None


def compile_replays(jobs: Sequence[tuple[Path, Path | None]], optimise: str = "-O1") -> list[Path]:
    """Compile every (source, output) at once (`Compilations`); the executables' paths in order."""
    return Compilations(jobs, optimise).finish()


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
