"""One `gcc -E -dD` of the harness skeleton, and what it says about macros and included files.

The skeleton (the harness without its array initialisers) is preprocessed against the same
stand-in system headers as the scalar front end (`qverify.engine.cfront.FAKE_HEADERS`), with the
harness's own folder first on the include path, as when the harness itself is preprocessed. `-dD`
keeps every `#define`/`#undef` in the output at its place, and the line markers name every file
that was included: so the lifter knows exactly which macros the harness defines and which headers
gave the helper functions, instead of guessing from the source text.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from qverify.engine.cfront import BUILTINS_HEADER, FAKE_HEADERS, PREPROCESS_TIMEOUT_S, find_preprocessor
from qverify.engine.lift.errors import NotRecognised
from qverify.errors import InputError
from qverify.resources import models_c_dir

_LINE_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"')
_DIRECTIVE = re.compile(r"^#(define|undef)\s+(\w+)(.*)$")
SHIPPED_HEADERS = ("fxp.h", "verifier.h", "int8.h", "half.h")


@dataclass(frozen=True, slots=True)
class MacroEvent:
    """A `#define NAME VALUE` or `#undef NAME` of the harness file itself."""

    kind: str
    name: str
    value: str
    line: int


@dataclass(frozen=True, slots=True, eq=False)
class Preprocessed:
    """Text for pycparser (directives blanked), the harness's macro events, the model headers used."""

    text: str
    macros: tuple[MacroEvent, ...]
    headers: frozenset[str]  # basenames of the shipped C models included (fxp.h, verifier.h, ...)


@cache
def _shipped(name: str) -> bytes:
    return (models_c_dir() / name).read_bytes()


def _classify_include(file: str, fake: Path, where: str) -> str | None:
    """The shipped header a file is (byte for byte), None for our stand-ins, else NotRecognised."""
    if file in ("<built-in>", "<command-line>") or Path(file).parent == fake:
        return None
    name = Path(file).name
    try:
        data = Path(file).read_bytes()
    except OSError as error:
        raise NotRecognised(f"{where}: cannot read the included file {file}") from error
    if name in SHIPPED_HEADERS and data == _shipped(name):
        return name
    raise NotRecognised(
        f"{where}: includes {file}, which is not one of qverify's C models byte for byte "
        "(only their semantics is known to the simulator)"
    )


def preprocess_skeleton(skeleton: str, harness: Path, include_dirs: Sequence[Path]) -> Preprocessed:
    """`gcc -E -dD` of the skeleton as if it were the harness file (same folder first on the path)."""
    harness_name = str(harness)
    with tempfile.TemporaryDirectory(prefix="qv-lift-") as scratch:
        fake = Path(scratch) / "fake"
        source_dir = Path(scratch) / "src"
        fake.mkdir()
        source_dir.mkdir()
        for name, text in FAKE_HEADERS.items():
            (fake / name).write_text(text)
        source = source_dir / harness.name
        escaped = harness_name.replace("\\", "\\\\").replace('"', '\\"')
        source.write_text(f'#line 1 "{escaped}"\n{skeleton}')
        command = [
            *find_preprocessor(),
            "-std=c99",
            "-nostdinc",
            "-undef",
            "-dD",
            "-D__QVERIFY_ENGINE__=1",
            "-D__x86_64__=1",
            "-D__extension__=",
            "-include",
            str(fake / BUILTINS_HEADER),
            f"-I{harness.parent}",
            *(f"-I{directory}" for directory in include_dirs),
            f"-I{fake}",
            str(source),
        ]
        try:
            completed = subprocess.run(
                command, capture_output=True, text=True, timeout=PREPROCESS_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise InputError(f"{harness}: the preprocessor timed out") from error
        if completed.returncode != 0:
            message = completed.stderr.strip().replace(str(fake) + "/", "")
            first = next((line for line in message.splitlines() if "error" in line), message[:400])
            raise InputError(first.strip())
        return _scan(completed.stdout, harness_name, fake, str(source))


def _scan(output: str, harness_name: str, fake: Path, source: str) -> Preprocessed:
    """Blank the -dD directives, keep the harness's own macro events, check every included file."""
    lines = output.split("\n")
    current, line_number = "", 0
    macros: list[MacroEvent] = []
    headers: set[str] = set()
    seen: set[str] = set()
    for index, text in enumerate(lines):
        marker = _LINE_MARKER.match(text)
        if marker is not None:
            current, line_number = marker.group(2), int(marker.group(1))
            if current not in seen and current not in (harness_name, source):
                seen.add(current)
                header = _classify_include(current, fake, f"{harness_name}")
                if header is not None:
                    headers.add(header)
            continue
        if text.startswith("#"):
            directive = _DIRECTIVE.match(text)
            if directive is None:
                raise NotRecognised(
                    f"{current}:{line_number}: preprocessor output '{text[:60]}' not recognised"
                )
            if current == harness_name:
                macros.append(
                    MacroEvent(
                        directive.group(1), directive.group(2), directive.group(3).strip(), line_number
                    )
                )
            lines[index] = ""
        line_number += 1
    return Preprocessed("\n".join(lines), tuple(macros), frozenset(headers))
