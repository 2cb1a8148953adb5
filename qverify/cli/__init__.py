"""The `qverify` command: parse arguments, call one package function, render, return an exit code.

Each sub-command lives in its own module with `register(subparsers)`; handlers return an int.
Errors of qverify (`QverifyError`) print one line `error: ...` on stderr and return their exit
code; anything else is a bug: one line asking for a report (a traceback with `--debug`).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from qverify import __version__
from qverify.errors import (
    EXIT_CODES_HELP,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    QverifyError,
)
from qverify.interrupts import interrupt_on_sigterm

Handler = Callable[[argparse.Namespace], int]


def _subcommand_modules() -> list:
    from qverify.cli import (
        cmd_codegen,
        cmd_convert,
        cmd_diff,
        cmd_harness,
        cmd_impact,
        cmd_info,
        cmd_quantize,
        cmd_repair,
        cmd_show,
        cmd_suite,
        cmd_sweep,
        cmd_verify,
        cmd_vnncomp,
    )

    return [
        cmd_info,
        cmd_convert,
        cmd_quantize,
        cmd_codegen,
        cmd_harness,
        cmd_verify,
        cmd_show,
        cmd_suite,
        cmd_sweep,
        cmd_vnncomp,
        cmd_impact,
        cmd_diff,
        cmd_repair,
    ]


class _Parser(argparse.ArgumentParser):
    """argparse with qverify's error style: one `error:` line naming where to find the usage, exit 2
    (argparse's own prints the whole usage block first, burying the one line that matters)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="qverify",
        description="Prove or refute safety properties of neural networks as implemented in "
        "fixed-point or floating-point C.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action="version", version=f"qverify {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _subcommand_modules():
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    handler: Handler = args.handler
    interrupt_on_sigterm()
    try:
        return handler(args)
    except QverifyError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except MemoryError:  # resource exhaustion is an answer (UNKNOWN), not a bug
        print("UNKNOWN: memory exhausted", flush=True)
        print("error: out of memory (a larger input than this machine holds)", file=sys.stderr)
        return EXIT_UNKNOWN
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`qverify info NET | head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # noqa: BLE001 - the one place that turns bugs into a clean exit
        if args.debug:
            traceback.print_exc()
        print(
            f"internal error: {type(error).__name__}: {error} "
            "(a bug in qverify: please report it with the command line; --debug shows a traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
