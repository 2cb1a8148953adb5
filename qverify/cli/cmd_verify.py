"""`qverify verify NET --property P [options]` or `qverify verify --spec FILE`: one verdict line.

Exit codes: 0 SAFE, 10 UNSAFE, 20 UNKNOWN, 2 ERROR.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from qverify.backends import Limits
from qverify.backends.internal import InternalOptions
from qverify.cli.options import (
    add_implementation_options,
    add_property_options,
    add_verify_options,
    implementation_from_args,
    parse_image_shape,
    property_from_args,
    verify_options_from_args,
)
from qverify.cli.report import describe_example, warn
from qverify.counterexample.picture import write_example_png
from qverify.errors import EXIT_CODES_HELP, InputError
from qverify.invariants import IntervalMethod
from qverify.io import load_network
from qverify.properties import read_spec
from qverify.verification import VerificationRecord, verify_property


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
    parser.set_defaults(handler=run)


def _from_spec(args: argparse.Namespace):
    spec = read_spec(args.spec)
    net = load_network(spec.network_path)
    settings = spec.verify
    options = verify_options_from_args(args, Path(args.keep) if args.keep else None, spec.image_shape)
    options = replace(
        options,
        backend=settings["backend"],
        limits=Limits(timeout_s=float(settings["timeout"]), memory_mb=int(settings["memory_mb"])),
        intervals=IntervalMethod(settings["intervals"]),
        internal=InternalOptions(
            solver=settings["solver"],
            semantics=options.internal.semantics,
            certify=bool(settings["certify"]),
            seed=options.internal.seed,
        ),
    )
    if settings["backend"] == "esbmc":
        from qverify.backends.esbmc import EsbmcOptions

        options = replace(
            options,
            esbmc=EsbmcOptions(executable=settings["esbmc"], extra_args=tuple(settings["esbmc_args"])),
        )
    return net, spec.property, spec.implementation, options, spec.name


def _from_flags(args: argparse.Namespace):
    if args.network is None:
        raise InputError("give a network (NET --property P) or --spec FILE")
    net = load_network(args.network)
    prop = property_from_args(args, net)
    shape = parse_image_shape(args.image_shape, net.n_inputs) or net.image_shape
    options = verify_options_from_args(args, Path(args.keep) if args.keep else None, shape)
    return net, prop, implementation_from_args(args), options, f"{net.name}-{prop.name}"


def run(args: argparse.Namespace) -> int:
    net, prop, implementation, options, name = _from_spec(args) if args.spec else _from_flags(args)
    record = verify_property(net, prop, implementation, options, name)
    for message in record.warnings:
        warn(message)
    print(record.summary_line())
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
        png = write_example_png(example, path.with_suffix(".png"), title=record.name)
        print(f"counterexample image: {png}")
