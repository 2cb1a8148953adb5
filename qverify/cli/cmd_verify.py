"""`qverify verify NET --property P [options]` or `qverify verify --spec FILE`: one verdict line.

With `--spec`, command-line options override the spec's (`qverify.tasks.model` holds the precedence);
a NET that is not the spec's network is an error. `--json` records where each value came from.

Exit codes: 0 SAFE, 10 UNSAFE, 20 UNKNOWN, 2 ERROR.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from qverify.backends import Status
from qverify.cli.options import (
    add_implementation_options,
    add_property_options,
    add_verify_options,
    capped_jobs,
    given_options,
    options_from_args,
    parse_image_shape,
    positive_int,
    property_from_args,
)
from qverify.cli.report import StageTicker, describe_example, say_kernel, warn
from qverify.cli.startup import process_seconds, startup_times
from qverify.errors import EXIT_CODES_HELP, EXIT_UNKNOWN, InputError, ResourceLimitError
from qverify.input_limits import reading_within
from qverify.stage_times import PROCESS
from qverify.vocabulary import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from qverify.record import VerificationRecord


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("verify", help="prove or refute one property", epilog=EXIT_CODES_HELP)
    parser.add_argument("network", nargs="?", help="an .nnet or .onnx file (or use --spec)")
    parser.add_argument(
        "--spec", metavar="FILE", help="a qverify spec file (TOML): network, property, options"
    )
    add_property_options(parser)
    add_implementation_options(parser)
    add_verify_options(parser)
    parser.add_argument(
        "--image-shape", metavar="HxW", help="input image shape for the counterexample picture"
    )
    parser.add_argument("--json", metavar="OUT", help="write the full record (and OUT.png for images)")
    parser.add_argument("--keep", metavar="DIR", help="keep the harness and replay files in DIR")
    parser.add_argument(
        "--jobs",
        dest="engine_jobs",
        type=positive_int,
        metavar="N",
        help="processes the internal engine's search may use (default: every core)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no status line (the default shows one on a terminal)"
    )
    parser.set_defaults(handler=run)


def _from_spec(args: argparse.Namespace):
    """The spec's task with the command line on top: flags override the spec's options, a property
    given by flags replaces the spec's, and a network named on both must be the same file."""
    from qverify.io import load_network
    from qverify.tasks import Origin, check_same_network, for_network, read_spec

    spec = read_spec(args.spec)
    if args.network is not None:
        check_same_network(args.network, spec.network_path, args.spec)
    net = load_network(spec.network_path)
    resolved = for_network(
        options_from_args(args, (Origin.SPEC, spec.given)), net.quantization is not None, _model_format(net)
    )
    origins = {"network": Origin.SPEC.value, "property": Origin.SPEC.value} | resolved.given()
    prop = spec.property
    if args.property is not None or args.center is not None:
        prop = property_from_args(args, net, cases=True)
        origins["property"] = Origin.COMMAND_LINE.value
    shape = parse_image_shape(args.image_shape, net.n_inputs) or spec.image_shape
    options = resolved.options.verify_options(Path(args.keep) if args.keep else None, shape)
    _note_float_view(net, resolved)
    return net, prop, resolved.options.implementation_for(net), options, spec.name, origins


def _model_format(net) -> str:
    """An int8 model's own format: `int8-tflite` for a TFLite file, `int8` for an ONNX one."""
    return net.quantization.model_format if net.quantization is not None else "int8"


def _from_flags(args: argparse.Namespace):
    from qverify.io import load_network
    from qverify.tasks import Origin, for_network

    if args.network is None:
        raise InputError("give a network (NET --property P) or --spec FILE")
    net = load_network(args.network)
    prop = property_from_args(args, net, cases=True)
    shape = parse_image_shape(args.image_shape, net.n_inputs) or net.image_shape
    resolved = for_network(options_from_args(args), net.quantization is not None, _model_format(net))
    options = resolved.options.verify_options(Path(args.keep) if args.keep else None, shape)
    origins = {"network": Origin.COMMAND_LINE.value, "property": Origin.COMMAND_LINE.value}
    _note_float_view(net, resolved)
    return (
        net,
        prop,
        resolved.options.implementation_for(net),
        options,
        f"{net.name}-{prop.name}",
        origins | resolved.given(),
    )


def _note_float_view(net, resolved) -> None:
    """One line when the format is the float view of an int8 model, or when onnxruntime's x86
    kernels matter for the int8 format chosen."""
    from qverify.tasks import float_view_note

    note = float_view_note(net.name, net.quantization is not None, resolved.options)
    if note is not None:
        print(f"note: {note}", file=sys.stderr)
    elif net.quantization is not None:
        say_kernel(net, resolved.options.implementation().number)


def run(args: argparse.Namespace) -> int:
    import qverify.io
    import qverify.tasks  # noqa: F401
    from qverify.cases import verify_cases

    times = startup_times()
    if args.engine_jobs is not None:
        args.engine_jobs = capped_jobs(args.engine_jobs)
    started = time.perf_counter()
    given = given_options(args)  # checks the limits first
    timeout, memory = given.get("timeout", DEFAULT_TIMEOUT_S), given.get("memory_mb", DEFAULT_MEMORY_MB)
    try:
        with reading_within(timeout, memory):  # parsing is bounded by the task's limits too
            task = _from_spec(args) if args.spec else _from_flags(args)
    except ResourceLimitError as error:
        print(f"{Status.UNKNOWN.value}: {error}")
        return EXIT_UNKNOWN
    times["load"] = round(time.perf_counter() - started, 6)
    net, prop, (implementation, note), options, name, origins = task
    with StageTicker("verify", options.limits.timeout_s, not args.no_progress) as ticker:
        record = verify_cases(net, prop, implementation, options, name, ticker.finished)
    warnings = (note, *record.warnings) if note else record.warnings
    times = {PROCESS: process_seconds()} | times | record.times_s  # the headline first
    record = replace(record, origins=origins, times_s=times, warnings=warnings)
    for message in record.warnings:
        warn(message)
    print(record.summary_line())
    if record.status is Status.ERROR:
        print(f"error: {record.reason}", file=sys.stderr)
    if record.counterexample is not None:
        print(describe_example(record))
    if args.json:
        write_record(record, Path(args.json))
    return record.exit_code


def write_record(record: VerificationRecord, path: Path) -> None:
    """The JSON record, and next to it a PNG of the counterexample when it is an image."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    except OSError as error:
        raise InputError(f"cannot write {path}: {error.strerror}") from None
    example = record.counterexample
    if example is not None and example.image_shape is not None:
        from qverify.counterexample.picture import write_example_png  # Pillow: only for image inputs

        png = write_example_png(example, path.with_suffix(".png"), title=record.name)
        print(f"counterexample image: {png}")
