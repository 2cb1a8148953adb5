"""Command-line options shared by sub-commands (implementation choices), and their parsing."""

from __future__ import annotations

import argparse

from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Layout,
    LutDesign,
    Overflow,
    Rounding,
)

DEFAULT_FORMAT = "16.16"


def add_implementation_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("implementation (how the C computes)")
    number = group.add_mutually_exclusive_group()
    number.add_argument(
        "--format",
        metavar="K.L",
        default=None,
        help=f"fixed point <K,L>: K integer bits with sign, L fractional (default {DEFAULT_FORMAT})",
    )
    number.add_argument(
        "--float",
        dest="float_kind",
        action="store_const",
        const=FloatKind.FLOAT,
        help="IEEE single precision",
    )
    number.add_argument(
        "--double",
        dest="float_kind",
        action="store_const",
        const=FloatKind.DOUBLE,
        help="IEEE double precision",
    )
    group.add_argument(
        "--rounding",
        choices=[r.value for r in Rounding],
        default=Rounding.NEAREST.value,
        help="after products and for constants (default nearest, ties away from zero)",
    )
    group.add_argument(
        "--overflow",
        choices=[o.value for o in Overflow],
        default=Overflow.SATURATE.value,
        help="after every operation (default saturate)",
    )
    group.add_argument(
        "--accumulate",
        choices=[a.value for a in Accumulation],
        default=Accumulation.PER_OP.value,
        help="per-op: round and check every addition (default); wide: exact int64 sum, rounded once",
    )
    group.add_argument(
        "--layout",
        choices=[layout.value for layout in Layout],
        default=Layout.SEQUENTIAL.value,
        help="MAC order: sequential loop (default) or balanced tree",
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


def number_from_args(args: argparse.Namespace) -> FixedFormat | FloatFormat:
    if args.float_kind is not None:
        return FloatFormat(args.float_kind)
    return FixedFormat.parse(args.format or DEFAULT_FORMAT, Rounding(args.rounding), Overflow(args.overflow))


def implementation_from_args(args: argparse.Namespace) -> ImplementationOptions:
    """The ImplementationOptions the flags describe (InputError on inconsistent values)."""
    resolution = args.lut_res if args.lut_res is not None else (None if args.lut_eps is not None else 2)
    design = LutDesign(eps=args.lut_eps, resolution=resolution, half_range=args.lut_range)
    return ImplementationOptions(
        number=number_from_args(args),
        accumulation=Accumulation(args.accumulate),
        layout=Layout(args.layout),
        lut=design,
    )
