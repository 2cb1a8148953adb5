"""Network level: one `gcc -E -dD` of the harness skeleton, and what it says about macros and included files.

The skeleton (the harness without its array initialisers) is preprocessed by the scalar front
end's own `cfront.preprocess` (the same stand-in system headers), with the harness's own folder
first on the include path, as when the harness itself is preprocessed, and `-dD`: it
keeps every `#define`/`#undef` in the output at its place, and the line markers name every file
that was included: so the lifter knows exactly which macros the harness defines and which headers
gave the helper functions, instead of guessing from the source text.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from qverify.engine.cfront import BUILTINS_HEADER, preprocess
from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.resources import models_c_dir

_LINE_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)$')
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
    defined: frozenset[str] = frozenset()  # every macro name #defined in any file, the harness's too


@cache
def _shipped(name: str) -> bytes:
    return (models_c_dir() / name).read_bytes()


def _classify_include(file: str, fake: Path | None, where: str) -> str | None:
    """The shipped header a file is (byte for byte), None for our stand-ins, else NotRecognised."""
    if file in ("<built-in>", "<command-line>") or (fake is not None and Path(file).parent == fake):
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
    """`gcc -E -dD` of the skeleton as if it were the harness file (its folder first on the path)."""
    harness_name = str(harness)
    with tempfile.TemporaryDirectory(prefix="qv-lift-") as scratch:
        source = Path(scratch) / harness.name
        escaped = harness_name.replace("\\", "\\\\").replace('"', '\\"')
        source.write_text(f'#line 1 "{escaped}"\n{skeleton}')
        output = preprocess(source, [harness.parent, *include_dirs], extra_flags=("-dD",))
    return _scan(output, harness_name, str(source))


def _scan(output: str, harness_name: str, source: str) -> Preprocessed:
    """Blank the -dD directives, keep the harness's own macro events, check every included file.

    The stand-in headers live in the folder of the `-include`d BUILTINS_HEADER, the first file the
    preprocessor enters after the command line (the harness itself comes after it)."""
    lines = output.split("\n")
    current, line_number = "", 0
    fake: Path | None = None
    macros: list[MacroEvent] = []
    headers: set[str] = set()
    seen: set[str] = set()
    defined: set[str] = set()
    for index, text in enumerate(lines):
        marker = _LINE_MARKER.match(text)
        if marker is not None:
            current, line_number = marker.group(2), int(marker.group(1))
            if fake is None and Path(current).name == BUILTINS_HEADER:
                fake = Path(current).parent
            if current not in seen and current not in (harness_name, source):
                seen.add(current)
                entering = "1" in marker.group(3).split()
                if not entering and current not in ("<built-in>", "<command-line>"):
                    # a `#line` directive naming another file, not an #include
                    raise NotRecognised(f"{harness_name}: #line directive naming {current}")
                header = _classify_include(current, fake, harness_name)
                if header is not None:
                    headers.add(header)
            continue
        if text.startswith("#"):
            directive = _DIRECTIVE.match(text)
            if directive is None:
                raise NotRecognised(
                    f"{current}:{line_number}: preprocessor output '{text[:60]}' not recognised"
                )
            if directive.group(1) == "define":
                defined.add(directive.group(2))
            if current == harness_name:
                macros.append(
                    MacroEvent(
                        directive.group(1), directive.group(2), directive.group(3).strip(), line_number
                    )
                )
            lines[index] = ""
        line_number += 1
    return Preprocessed("\n".join(lines), tuple(macros), frozenset(headers), frozenset(defined))
