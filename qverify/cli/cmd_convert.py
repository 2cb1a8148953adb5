"""`qverify convert IN OUT`: between NNet and ONNX (the suffix says which); an int8 model is written
as its float view (`qverify.network.float_view`), said in one line."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("convert", help="convert a network between .nnet and .onnx")
    parser.add_argument("source", help="input .nnet or .onnx")
    parser.add_argument("target", help="output .nnet or .onnx")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from qverify.io import load_network, save_network
    from qverify.network.float_view import float_network

    net = load_network(args.source)
    save_network(float_network(net), args.target)  # (refuses what the target cannot hold: one error line)
    if net.quantization is not None:
        print(
            f"note: {args.source} is an int8 model: {args.target} holds its float view (dequantized weights, "
            "the activations its quantization implies), not its int8 arithmetic",
            file=sys.stderr,
        )
    print(f"wrote {args.target} ({' -> '.join(map(str, net.sizes))})")
    return 0
