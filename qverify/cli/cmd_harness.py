"""`qverify harness NET --property P [implementation options] [--intervals M] -o DIR`."""

from __future__ import annotations

import argparse

from qverify.cli.options import (
    add_implementation_options,
    add_intervals_option,
    add_property_options,
    implementation_from_args,
    property_from_args,
)
from qverify.cli.report import warn


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("harness", help="write the C verification harness of a property")
    parser.add_argument("network", help="an .nnet or .onnx file")
    add_property_options(parser)
    add_implementation_options(parser)
    add_intervals_option(parser)
    parser.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="folder for harness.c and headers"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from qverify.codegen import render_harness
    from qverify.invariants import IntervalMethod, compute_bounds
    from qverify.io import load_network
    from qverify.quant import overflow_warnings, quantize_network

    net = load_network(args.network)
    prop = property_from_args(args, net)
    qnet = quantize_network(net, implementation_from_args(args, net))
    for box in prop.boxes:
        for message in overflow_warnings(qnet, box.lo_array(), box.hi_array()):
            warn(message)
    bounds = compute_bounds(qnet, prop, IntervalMethod(args.intervals or IntervalMethod.AUTO.value))
    for message in bounds.warnings:
        warn(message)
    path = render_harness(qnet, prop, bounds.bounds).write(args.output)
    print(
        f"wrote {path} (property {prop.name}, {qnet.options.key()}, invariants: {bounds.method_used.value})"
    )
    return 0
