"""`python -m qverify.engine HARNESS.c [-I DIR]... [--solver ...] [--json]`: one verdict.

With --json, stdout is exactly one JSON line (`EngineResult.to_json()`); without it, a short text.
Exit code 0 whenever a result was produced (the status is in the output), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from qverify.engine.api import check_file
from qverify.engine.result import SEMANTICS, SOLVERS, STEPS, EngineOptions
from qverify.errors import InputError


def parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(
        prog="python -m qverify.engine", description="Decide a verification harness with qverify's engine."
    )
    command.add_argument("harness", type=Path, help="the C file (main with nondet inputs, assumes, asserts)")
    command.add_argument("-I", dest="include", action="append", type=Path, default=[], help="include folder")
    command.add_argument("--solver", choices=SOLVERS, default="milp", help="exact procedure for fixed point")
    command.add_argument(
        "--semantics", choices=SEMANTICS, default="ieee", help="float arithmetic: ieee or real"
    )
    command.add_argument("--certify", action="store_true", help="re-check a SAFE verdict with exact SMT")
    command.add_argument("--timeout", type=float, default=60.0, help="whole-run budget in seconds")
    command.add_argument("--query-timeout", type=float, default=None, help="per solver query, seconds")
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--attack-samples", type=int, default=4096)
    command.add_argument(
        "--jobs", type=int, default=1, help="processes for the network level's branch and bound (default 1)"
    )
    command.add_argument("--disable", default="", help=f"comma-separated steps to skip: {','.join(STEPS)}")
    command.add_argument("--json", action="store_true", help="print the result as one JSON line")
    return command


def main(argv: list[str] | None = None) -> int:
    arguments = parser().parse_args(argv)
    try:
        options = EngineOptions(
            solver=arguments.solver,
            semantics=arguments.semantics,
            certify=arguments.certify,
            timeout_s=arguments.timeout,
            query_timeout_s=arguments.query_timeout,
            seed=arguments.seed,
            attack_samples=arguments.attack_samples,
            jobs=arguments.jobs,
            disable=tuple(step for step in arguments.disable.split(",") if step),
        )
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result = check_file(arguments.harness, arguments.include, options)
    if arguments.json:
        print(json.dumps(result.to_json()), flush=True)
    else:
        line = f"{result.status.value}"
        if result.decided_by:
            line += f" (by {result.decided_by})"
        if result.reason:
            line += f": {result.reason}"
        print(line)
        if result.counterexample is not None:
            print(f"counterexample: {' '.join(map(str, result.counterexample))}")
            print(f"violated: {result.violated}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
