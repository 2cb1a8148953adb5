"""`qverify codegen NET [implementation options] -o DIR`: write DIR/network.c and its headers."""

from __future__ import annotations

import argparse

from qverify.cli.options import add_implementation_options, implementation_from_args
from qverify.cli.report import warn


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("codegen", help="generate the network's C code (fixed or float)")
    parser.add_argument("network", help="an .nnet or .onnx file")
    add_implementation_options(parser)
    parser.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="folder for network.c and headers"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from qverify.codegen import render_network
    from qverify.io import load_network
    from qverify.quant import overflow_warnings, quantize_network

    net = load_network(args.network)
    qnet = quantize_network(net, implementation_from_args(args, net))
    for message in overflow_warnings(qnet, *net.default_input_box()):
        warn(message + " (over the network's default input domain)")
    path = render_network(qnet).write(args.output)
    print(f"wrote {path} ({qnet.options.key()}); replay: gcc -std=c99 -DQV_REPLAY -I{args.output} {path} -lm")
    return 0
