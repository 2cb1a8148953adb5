"""The `qverify` command: parse arguments, call one package function, render, return an exit code.

Each sub-command lives in its own module with `register(subparsers)`; handlers return an int.
Errors of qverify (`QverifyError`) print one line `error: ...` on stderr and return their exit
code; anything else is a bug: one line asking for a report (a traceback with `--debug`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

from qverify import __version__
from qverify.cli.startup import mark_main
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


COMMANDS = (  # in the order `qverify --help` lists them; command NAME lives in qverify.cli.cmd_NAME
    "info",
    "convert",
    "quantize",
    "codegen",
    "harness",
    "verify",
    "show",
    "suite",
    "sweep",
    "vnncomp",
    "impact",
    "diff",
    "repair",
)


def _named_command(argv: Sequence[str]) -> str | None:
    """The sub-command `argv` runs: its first word that is not an option, when it names one (None for
    `--help`, `--version`, no command or a misspelt one: those need every sub-command's parser)."""
    for word in argv:
        if word in ("-h", "--help", "--version"):
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _subcommand_modules(argv: Sequence[str]) -> list:
    """The modules to register: only the named command's when there is one. Each module imports what
    its command needs (ONNX, onnxruntime, scikit-learn, Pillow, tqdm, ...); importing all thirteen
    cost `qverify verify` ~0.5 s of every run (benchmarks/bench_overhead.py)."""
    named = _named_command(argv)
    return [importlib.import_module(f"qverify.cli.cmd_{name}") for name in ([named] if named else COMMANDS)]


class _Parser(argparse.ArgumentParser):
    """argparse with qverify's error style: one `error:` line naming where to find the usage, exit 2
    (argparse's own prints the whole usage block first, burying the one line that matters)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `argv` (default: every sub-command's, as for `qverify --help`)."""
    parser = _Parser(
        prog="qverify",
        description="Prove or refute safety properties of neural networks as implemented in "
        "fixed-point or floating-point C.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action="version", version=f"qverify {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _subcommand_modules(argv if argv is not None else ()):
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    mark_main()
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
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
