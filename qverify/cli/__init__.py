"""The `qverify` command: parse arguments, call one package function, render, return an exit code.

Each sub-command lives in its own module with `register(subparsers)`; handlers return an int.
Errors of qverify (`QverifyError`) print one line `error: ...` on stderr and return their exit
code; anything else is a bug: one line asking for a report (a traceback with `--debug`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
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


# command NAME lives in qverify.cli.cmd_NAME; `qverify --help` lists them in this order with these
# summaries, which are also the sub-commands' own (tests/test_cli_basics.py): the list does not
# import thirteen modules and everything they use (seconds on a busy machine) to print one line each
COMMANDS = {
    "info": "print a network's layers, normalisation and ranges, or the tools found (--tools)",
    "convert": "convert a network between .nnet and .onnx",
    "quantize": "int8-quantize a float network with onnxruntime (static, calibrated)",
    "codegen": "generate the network's C code (fixed or float)",
    "harness": "write the C verification harness of a property",
    "verify": "prove or refute one property",
    "show": "print a verification record (and picture its counterexample)",
    "suite": "run benchmark suites (parallel, journaled, resumable)",
    "sweep": "verify at every word length; report the minimum word length",
    "vnncomp": "VNN-COMP tool interface (used by vnncomp/*.sh)",
    "impact": "accuracy, F1 and KL divergence of quantized implementations under input perturbations",
    "diff": "find or prove absent disagreements between a network and its quantized implementation",
    "repair": "repair a quantized network: fault localisation, MILP over integer weight changes, "
    "re-verification",
}


def _named_command(argv: Sequence[str]) -> str | None:
    """The sub-command `argv` runs: its first word that is not an option, when it names one (None for
    `--help`, `--version`, no command or a misspelt one)."""
    for word in argv:
        if word in ("-h", "--help", "--version"):
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _start_engine_early(argv: Sequence[str]) -> None:
    """`qverify verify` and `qverify vnncomp run` start their engine host first thing: it imports
    the engine (~0.5 s of CPU) while this process imports the command and reads the inputs, on the
    other core (benchmarks/bench_overhead.py). Not when the command will not run the engine."""
    named = _named_command(argv)
    if named == "vnncomp" and "run" not in argv:
        return
    if named not in ("verify", "vnncomp") or any(
        word in ("-h", "--help") or "esbmc" in word for word in argv
    ):
        return
    from qverify.backends import engine_host

    engine_host.prewarm(one_task=True)


def _asks_version(argv: Sequence[str]) -> bool:
    """`qverify [--debug] --version`: answered before any parser is built."""
    options = [word for word in argv if word != "--debug"]
    return bool(options) and options[0] == "--version"


class _Parser(argparse.ArgumentParser):
    """argparse with qverify's error style: one `error:` line naming where to find the usage, exit 2
    (argparse's own prints the whole usage block first, burying the one line that matters)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv: Sequence[str] | None = None, every_command: bool = False) -> argparse.ArgumentParser:
    """The parser of `argv`: the named sub-command's in full (its module registers it and imports what
    the command needs: ONNX, onnxruntime, scikit-learn, Pillow, tqdm, ...; importing all thirteen cost
    `qverify verify` ~0.5 s of every run, benchmarks/bench_overhead.py), or, when no command is named
    (`--help`, a misspelt one), each command's summary only. `every_command`: every sub-command's
    parser in full."""
    parser = _Parser(
        prog="qverify",
        description="Prove or refute safety properties of neural networks as implemented in "
        "fixed-point or floating-point C.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action="version", version=f"qverify {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = _named_command(argv if argv is not None else ())
    if named is None and not every_command:
        for name, summary in COMMANDS.items():
            subparsers.add_parser(name, help=summary)
        return parser
    for name in COMMANDS if every_command else [named]:
        importlib.import_module(f"qverify.cli.cmd_{name}").register(subparsers)
    return parser


@contextlib.contextmanager
def _imports_uncollected() -> Iterator[None]:
    """The cyclic garbage collector off while the command's modules are imported: every object of a
    module lives as long as the process, so the collections the imports would trigger find nothing
    to free (a few per cent of `qverify verify`'s imports, benchmarks/bench_overhead.py)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


VERDICT_COMMANDS = (
    "verify",
    "vnncomp",
    "suite",
    "sweep",
)  # their answers are verdicts: out of memory is UNKNOWN


def main(argv: list[str] | None = None) -> int:
    mark_main()
    argv = sys.argv[1:] if argv is None else argv
    if _asks_version(argv):
        print(f"qverify {__version__}")
        return 0
    _start_engine_early(argv)
    with _imports_uncollected():
        parser = build_parser(argv)  # imports the command's modules
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
        if args.command not in VERDICT_COMMANDS:  # `info`, `convert`, ...: no verdict to give (issue 43)
            print("error: out of memory (a larger input than this machine holds)", file=sys.stderr)
            return EXIT_USAGE
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


SINGLE_TASK_COMMANDS = ("verify", "vnncomp")  # one query, then the process ends: ended at once


def console() -> NoReturn:
    """The `qverify` command (its console script and `python -m qverify`): `main`, then the end.

    After one query (`verify`, `vnncomp run`) the interpreter's own teardown -- freeing the objects
    of ~450 modules (numpy, onnx, protobuf, qverify's own) -- cost ~0.1 s of every run's wall time
    after its answer was written (benchmarks/bench_overhead.py, `exit`). There the process ends with
    `os._exit` once nothing is left to do: every non-daemon thread joined, the atexit handlers run
    (the engine hosts' shutdown, their folders removed), stdout and stderr flushed; every file the
    command writes is closed before `main` returns. Other commands end as usual.
    """
    argv = sys.argv[1:]
    code = main(argv)
    if _named_command(argv) in SINGLE_TASK_COMMANDS:
        _end_now(code)
    raise SystemExit(code)


def _end_now(code: int) -> NoReturn:
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed
            stream.flush()
    os._exit(code)
