"""What `qverify CMD --help` imports: the parser of every command is built without numpy, ONNX,
onnxruntime, Jinja or the verifier, so that help prints at once (issue 42: `verify --help` took
0.66 s on an idle machine when it imported numpy, the invariants, codegen and quant). The modules
are checked, not the time: the test runs on busy machines too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qverify.cli import COMMANDS

# third-party packages a parser must not need (each costs 20-300 ms to import)
HEAVY = (
    "numpy",
    "scipy",
    "sklearn",
    "onnx",
    "onnxruntime",
    "google.protobuf",
    "jinja2",
    "psutil",
    "matplotlib",
    "PIL",
    "tqdm",
    "pycparser",
    "z3",
    "highspy",
    "bitwuzla",
    "dask",
)
_SCRIPT = """
import json, sys
from qverify.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def imported_by(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds after `qverify ARGV` (its stdout is the help text)."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT, *argv], capture_output=True, text=True, check=True)
    assert "usage: qverify" in done.stdout, done.stdout
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_of_every_command_imports_nothing_heavy(command):
    modules = imported_by(command, "--help")
    assert heavy(modules) == [], heavy(modules)
    ours = sorted(m for m in modules if m.startswith("qverify"))
    assert len(ours) <= 30, ours  # the command's module and the light vocabulary, not the pipeline


def test_top_level_help_imports_no_command():
    modules = imported_by("--help")
    assert heavy(modules) == [] and not any(m.startswith("qverify.cli.cmd_") for m in modules)
