"""Which external tools qverify finds on this machine, and what each is used for (`qverify info --tools`).

This module sits at the bottom of the package (the back ends and the invariants ask it for
`executable_stamp`); the ESBMC entry comes from the back end that finds ESBMC.

Every external tool is optional except gcc (replay of counterexamples): the report says, per tool,
where it is, its version, and what qverify does without it, so a user can tell at once why a back
end or a test is unavailable. Detection only runs the tools' version commands.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ToolStatus", "detect_tools", "executable_stamp", "format_tools"]

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


@dataclass(frozen=True, slots=True)
class ToolStatus:
    """One tool: found or not, where, its version, and what it is for (or what happens without it)."""

    name: str
    found: bool
    where: str  # path and origin, or "" when not found
    version: str
    purpose: str


def _first_line(command: list[str]) -> str:
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else ""


def _gcc() -> ToolStatus:
    path = shutil.which("gcc")
    version = _first_line([path, "--version"]) if path else ""
    return ToolStatus("gcc", path is not None, path or "", version, "replay of counterexamples (required)")


def _framac() -> ToolStatus:
    path = shutil.which("frama-c")
    version = _first_line([path, "-version"]) if path else ""
    return ToolStatus(
        "frama-c",
        path is not None,
        path or "",
        version,
        "--intervals framac (auto uses the built-in analysis: docs/invariants.md)",
    )


def _chromium() -> ToolStatus:
    path = next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)
    version = _first_line([path, "--version"]) if path else ""
    return ToolStatus(
        "chromium",
        path is not None,
        path or "",
        version,
        "only the tests that render summary.html and report.html",
    )


def _python_package(name: str, purpose: str) -> ToolStatus:
    import importlib.metadata  # here: its import (~25 ms) is for `qverify info --tools` only

    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ToolStatus(name, False, "", "", purpose)
    return ToolStatus(name, True, "python package", version, purpose)


def detect_tools(esbmc: ToolStatus, onnxruntime: ToolStatus) -> list[ToolStatus]:
    """Every external tool and solver library qverify can use, in the order the pipeline uses them.
    `esbmc` is the back end's own report (`backends.esbmc.esbmc_status`: it knows where it looks),
    `onnxruntime` the int8 kernel probe's (`quant.ort_kernel.onnxruntime_status`)."""
    return [
        onnxruntime,
        _gcc(),
        _framac(),
        _python_package("highspy", "internal engine: LP/MILP; --solver milp (the default) for fixed point"),
        _python_package(
            "bitwuzla",
            "internal engine: SMT for float harnesses and --certify (its first choice); --solver bitwuzla",
        ),
        _python_package("z3-solver", "internal engine: SMT when Bitwuzla is missing; --solver z3"),
        esbmc,
        _python_package(
            "maraboupy",
            'benchmarks/bench_marabou.py and the Marabou agreement test (pip install -e ".[marabou]")',
        ),
        _chromium(),
    ]


def format_tools(tools: list[ToolStatus]) -> list[str]:
    """One line per tool: `name  found|missing  where  version  -- purpose`."""
    lines = []
    for tool in tools:
        state = "found  " if tool.found else "missing"
        detail = f"{tool.where}  {tool.version}".strip() if tool.found else ""
        lines.append(f"{tool.name:11s} {state} {detail}".rstrip() + f"  -- {tool.purpose}")
    return lines


def executable_stamp(executable: str) -> int:
    """The file's modification time in ns (0 when it cannot be read). With the path, the key of a
    per-process cache of what a tool says about itself (its version): a suite's tasks would
    otherwise each start the tool once more to ask, and a replaced executable is asked again."""
    try:
        return Path(executable).stat().st_mtime_ns
    except OSError:
        return 0
