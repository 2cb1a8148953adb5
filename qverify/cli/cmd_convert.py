"""`qverify convert IN OUT`: between NNet and ONNX (the suffix says which)."""

from __future__ import annotations

import argparse

from qverify.io import load_network, save_network


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("convert", help="convert a network between .nnet and .onnx")
    parser.add_argument("source", help="input .nnet or .onnx")
    parser.add_argument("target", help="output .nnet or .onnx")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    net = load_network(args.source)
    save_network(net, args.target)
    print(f"wrote {args.target} ({' -> '.join(map(str, net.sizes))})")
    return 0
