"""One typed model of a verification task's options, and the precedence of where they come from.

Three readers describe a task: command-line flags (`qverify.cli.options`), a spec file's
`[implementation]`/`[verify]` tables (`qverify.tasks.spec_file`) and a suite file (whose
`[implementation]` table is read by the spec reader; its run options come from the command line). Each reader yields only the values its source actually *gives*, as a mapping from
`TaskOptions` field names to typed values; `resolve_options` lays them over the defaults in order
(defaults < spec < command line) and records, per field, which source the value came from.
That record travels into `qverify verify --json` (`origins`), so a verdict always says which format,
timeout and back end it was obtained with and why.

The network and the property are not options: a network named on the command line together with a
spec that names another is an error (`check_same_network`), never silently one or the other.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from qverify.backends import BACKEND_NAMES, InternalOptions, Limits
from qverify.backends.esbmc_locate import AUTO
from qverify.backends.esbmc_locate import SOLVERS as ESBMC_SOLVERS
from qverify.engine.result import SEMANTICS, SOLVERS
from qverify.errors import InputError
from qverify.invariants import IntervalMethod
from qverify.network import Network
from qverify.quant import (
    Accumulation,
    FixedFormat,
    ImplementationOptions,
    Int8Format,
    Layout,
    LutDesign,
    NumberFormat,
    Overflow,
    Rounding,
    named_format,
    parse_number_format,
    resolve_word_length,
    word_length,
)
from qverify.vocabulary import DEFAULT_FORMAT, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S

if TYPE_CHECKING:  # verification imports properties, whose spec reader imports this module
    from qverify.verification import VerifyOptions

INT8_MODEL_FORMAT = "int8"  # the default of an int8 model: its own arithmetic (onnxruntime's rounding)


# The enums are built from the lists their owners keep (one list each): the back ends, the internal
# engine's exact procedures and float semantics, ESBMC's solvers.
Backend = enum.StrEnum("Backend", [(name.upper(), name) for name in BACKEND_NAMES])
Solver = enum.StrEnum("Solver", [(name.upper(), name) for name in SOLVERS])
Semantics = enum.StrEnum("Semantics", [(name.upper(), name) for name in SEMANTICS])
EsbmcSolver = enum.StrEnum("EsbmcSolver", [(name.upper(), name) for name in (AUTO, *ESBMC_SOLVERS)])


class Origin(enum.StrEnum):
    """Where a value of a task came from (lowest precedence first)."""

    DEFAULT = "default"
    NETWORK = "network"  # what the network itself implies: an int8 model's own arithmetic
    SPEC = "spec"
    SUITE = "suite file"  # a suite run's network, property, formats and task timeouts
    COMMAND_LINE = "command line"


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """Every option of one verification task: how the C computes, and how it is verified.

    Field names are the spec file's keys; the command line's flags map onto them
    (`--memory` -> memory_mb, `--esbmc-arg` -> esbmc_args, `--no-slice` -> slicing=False).
    """

    # implementation (how the C computes)
    format: str = DEFAULT_FORMAT
    rounding: Rounding = Rounding.NEAREST
    overflow: Overflow = Overflow.SATURATE
    accumulate: Accumulation = Accumulation.PER_OP
    layout: Layout = Layout.SEQUENTIAL
    lut_res: int | None = None
    lut_eps: float | None = None
    lut_range: float | None = None
    # verification
    backend: Backend = Backend.INTERNAL
    timeout: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    intervals: IntervalMethod = IntervalMethod.AUTO
    solver: Solver = Solver.MILP
    semantics: Semantics = Semantics.IEEE
    certify: bool = False
    seed: int = 0
    engine_jobs: int = 0  # processes of the internal engine's search (0: every usable core)
    esbmc: str | None = None
    esbmc_solver: EsbmcSolver = EsbmcSolver.AUTO
    esbmc_args: tuple[str, ...] = ()
    slicing: bool = True
    simplify: bool = True
    interval_analysis: bool = True

    def __post_init__(self) -> None:
        check_limits(self.timeout, self.memory_mb)
        if self.engine_jobs < 0:
            raise InputError(f"--jobs {self.engine_jobs}: expected an integer >= 1 (0: every core)")

    def implementation(self) -> ImplementationOptions:
        """The ImplementationOptions these values describe (InputError on inconsistent values, and
        on a word length, which needs the network: `implementation_for`)."""
        return self._with_number(parse_number_format(self.format, self.rounding, self.overflow))

    def implementation_for(self, net: Network) -> tuple[ImplementationOptions, str]:
        """`implementation()` of `net`, where a word length W (`--format 16`) is resolved as suites
        resolve it: the W-bit format range analysis picks over the network's input domain, with a
        note when no split of the word avoids overflow ("" otherwise)."""
        bits = word_length(self.format)
        if bits is None:
            return self.implementation(), ""
        base = self._with_number(FixedFormat(bits // 2, bits - bits // 2, self.rounding, self.overflow))
        return resolve_word_length(net, bits, base)

    def _with_number(self, number: NumberFormat) -> ImplementationOptions:
        resolution = self.lut_res if self.lut_res is not None else (None if self.lut_eps is not None else 2)
        return ImplementationOptions(
            number=number,
            accumulation=self.accumulate,
            layout=self.layout,
            lut=LutDesign(eps=self.lut_eps, resolution=resolution, half_range=self.lut_range),
        )

    def verify_options(
        self, workdir: Path | None = None, image_shape: tuple[int, ...] | None = None
    ) -> VerifyOptions:
        from qverify.verification import VerifyOptions

        esbmc = None
        if self.backend is Backend.ESBMC:
            from qverify.backends.esbmc import EsbmcOptions

            esbmc = EsbmcOptions(
                executable=self.esbmc,
                solver=self.esbmc_solver.value,
                extra_args=self.esbmc_args,
                slicing=self.slicing,
                simplify=self.simplify,
                interval_analysis=self.interval_analysis,
            )
        return VerifyOptions(
            backend=self.backend.value,
            limits=Limits(timeout_s=self.timeout, memory_mb=self.memory_mb),
            intervals=self.intervals,
            internal=InternalOptions(
                solver=self.solver.value,
                semantics=self.semantics.value,
                certify=self.certify,
                seed=self.seed,
                jobs=self.engine_jobs,
            ),
            esbmc=esbmc,
            workdir=workdir,
            image_shape=image_shape,
        )


FIELD_NAMES = tuple(f.name for f in fields(TaskOptions))
_EXCLUSIVE = ({"lut_res", "lut_eps"},)  # a source giving one of these drops the other's lower value


def timeout_problem(timeout: float) -> str:
    """Why a timeout is refused ("" when fine): it must be finite, positive and at most a year
    (nan compares false with everything and acted as ~1 s; inf and 1e308 overflow the clocks)."""
    if isinstance(timeout, (int, float)) and math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S:
        return ""
    return f"must be a positive number of seconds, at most {MAX_TIMEOUT_S:.0f} (a year), got {timeout}"


def memory_problem(memory_mb: int) -> str:
    """Why a memory limit is refused ("" when fine)."""
    if MIN_MEMORY_MB <= memory_mb <= MAX_MEMORY_MB:
        return ""
    return (
        f"must be at least {MIN_MEMORY_MB} MiB (what a verifier process needs to start) and at most "
        f"{MAX_MEMORY_MB}, got {memory_mb}"
    )


def check_limits(timeout: float, memory_mb: int) -> None:
    """InputError naming the flag (--timeout, --memory) whose value is refused."""
    for flag, problem in (("--timeout", timeout_problem(timeout)), ("--memory", memory_problem(memory_mb))):
        if problem:
            raise InputError(f"{flag}: {problem}")


MAX_TIMEOUT_S = 366 * 86400.0  # a year
MIN_MEMORY_MB = 64  # below this not even the Python interpreter of a worker starts
MAX_MEMORY_MB = 1 << 30  # a petabyte: larger numbers are typos


@dataclass(frozen=True, slots=True)
class ResolvedOptions:
    """Options with, per field, the source of its value."""

    options: TaskOptions
    origins: Mapping[str, Origin]

    def given(self) -> dict[str, str]:
        """The fields not at their default, `field: origin` (for records and messages)."""
        return {name: origin.value for name, origin in self.origins.items() if origin is not Origin.DEFAULT}


def resolve_options(*layers: tuple[Origin, Mapping[str, Any]]) -> ResolvedOptions:
    """Defaults, then each layer in order (later wins): the typed options and where each came from.

    :raises InputError: an unknown field (a bug of a reader), or values that do not fit together.
    """
    values: dict[str, Any] = {}
    origins = dict.fromkeys(FIELD_NAMES, Origin.DEFAULT)
    for origin, layer in layers:
        for name, value in layer.items():
            if name not in origins:
                raise InputError(f"unknown task option '{name}'")
            for group in _EXCLUSIVE:
                if name in group:
                    for other in group - {name}:
                        values.pop(other, None)
                        origins[other] = Origin.DEFAULT
            values[name] = value
            origins[name] = origin
    return ResolvedOptions(TaskOptions(**values), MappingProxyType(origins))


def for_network(
    resolved: ResolvedOptions, int8_model: bool, model_format: str = INT8_MODEL_FORMAT
) -> ResolvedOptions:
    """The options of a task on this network: an int8 model whose format no source gives is
    verified in its own int8 arithmetic (origin `network`; `model_format`: onnxruntime's, or a
    TFLite file's `int8-tflite`), not at the default `<16,16>` of its float view."""
    if not int8_model or resolved.origins["format"] is not Origin.DEFAULT:
        return resolved
    origins = dict(resolved.origins) | {"format": Origin.NETWORK}
    options = replace(resolved.options, format=model_format)
    return ResolvedOptions(options, MappingProxyType(origins))


def float_view_note(network_name: str, int8_model: bool, options: TaskOptions) -> str | None:
    """The one line that says a float or fixed-point format on an int8 model verifies its float
    view (`qverify.network.float_view`), not its int8 arithmetic; None otherwise."""
    if not int8_model or isinstance(named_format(options.format), Int8Format):
        return None
    return (
        f"{network_name} is an int8 model; --format {options.format} verifies its float view (dequantized "
        "weights, the activations its quantization implies) in that format, not its int8 arithmetic "
        "(the default, or --format int8)"
    )


def check_fixed_only(values: Mapping[str, Any]) -> str | None:
    """The key among rounding/overflow given for a format that is not fixed point, else None."""
    label = values.get("format")
    if label is None or named_format(label) is None:
        return None
    return next((key for key in ("rounding", "overflow") if key in values), None)


def check_same_network(command_line: str | Path, spec_network: Path, spec_source: str) -> None:
    """A network on the command line and a spec naming another one: refuse, never pick one silently."""
    given = Path(command_line).expanduser().resolve()
    if given != spec_network.resolve():
        raise InputError(
            f"the command line names network {command_line}, but {spec_source} names {spec_network}: "
            "give the network once (drop NET, or edit the spec's `network`)"
        )
