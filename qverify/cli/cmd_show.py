"""`qverify show RESULT.json [--png OUT] [--open]`: print a verification record and its picture."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from qverify.cli.report import describe_example, describe_time, describe_times
from qverify.errors import InputError

if TYPE_CHECKING:
    from qverify.verification import VerificationRecord


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "show", help="print a verification record (and picture its counterexample)"
    )
    parser.add_argument("result", help="a JSON record written by `qverify verify --json`")
    parser.add_argument("--png", metavar="OUT", help="where to write the picture (default: next to the JSON)")
    parser.add_argument("--open", action="store_true", help="open the picture with the desktop's viewer")
    parser.set_defaults(handler=run)


def read_record(path: Path) -> VerificationRecord:
    from qverify.record import VerificationRecord

    try:
        return VerificationRecord.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{path}: not a qverify result record ({type(error).__name__}: {error})") from None


def run(args: argparse.Namespace) -> int:
    path = Path(args.result)
    record = read_record(path)
    print(f"{record.name}: {record.summary_line()}")
    print(f"  network {record.network} (sha256:{record.network_digest}), property {record.property}")
    resolved = (
        f" ({record.format_resolved_from} on the machine that verified it)"
        if record.format_resolved_from
        else ""
    )
    print(
        f"  format {record.number_format}{resolved}, implementation {record.implementation}, LUT error bound {record.lut_eps:.3g}"
    )
    if record.verdict is not None:
        print(
            f"  back end {record.verdict.backend} ({record.verdict.solver}), decided by {record.verdict.decided_by}"
        )
    if record.times_s:
        print(f"  {describe_time(record.times_s)}, peak memory {record.peak_memory_mb:.0f} MB")
        print(f"  {describe_times(record.times_s)}")
    example = record.counterexample
    if example is not None:
        print(describe_example(record))
    if example is None or example.image_shape is None:
        if args.png is not None or args.open:  # asked for a picture: never a silent no-op
            flag = "--png" if args.png is not None else "--open"
            raise InputError(
                f"{flag}: {path} has no counterexample to picture ({record.status.value})"
                if example is None
                else f"{flag}: the counterexample of {path} is not an image (verify with --image-shape HxW "
                "to record one)"
            )
        return 0
    from qverify.counterexample.image import open_image  # Pillow: only for a picture
    from qverify.counterexample.picture import write_example_png

    png = write_example_png(
        example, Path(args.png) if args.png else path.with_suffix(".png"), title=record.name
    )
    print(f"image: {png}")
    if args.open and not open_image(png):
        print("  (no display to open it on)")
    return 0
