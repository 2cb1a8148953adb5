"""`python -m qverify.backends.engine_process`: the engine's child process, started before its harness.

The internal back end starts it when a verification begins (`InternalBackend.prepare`): it imports
the engine (the interpreter's start and the imports: ~0.35 s on ACAS Xu's machine, see
benchmarks/bench_overhead.py) while the parent reads the network, computes the invariants and
writes the harness, then reads one line on stdin, the engine's command line as a JSON list, and
runs it exactly as `python -m qverify.engine ARGS` would. An empty stdin (the parent gave up before
writing a harness) ends it quietly. Its one argument, the task's work folder, is there for `ps` (and
for whoever looks for a task's processes, as tests do); the command line on stdin names the harness.
"""

from __future__ import annotations

import json
import os
import sys


def _import_engine() -> None:
    """The modules `check_file` imports on its first call (qverify.engine.api imports them there, so
    that the parent, which only needs the engine's option names, never pays for them)."""
    import qverify.engine.cfront
    import qverify.engine.netlevel
    import qverify.engine.netlevel.lift
    import qverify.engine.scalar.passes.simplify
    import qverify.engine.scalar.strategy
    import qverify.engine.scalar.symex  # noqa: F401 - imported for its cost, now


def main() -> int:
    from qverify.engine import __main__ as engine_command

    _import_engine()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    code = engine_command.main(json.loads(line))
    sys.stdout.flush()
    sys.stderr.flush()
    # the answer is out: the interpreter's teardown of the engine's objects (hundreds of thousands of
    # nodes on ACAS Xu, ~0.1 s) would only keep the parent waiting; the files are closed, and the
    # parent kills the process group on its way out anyway
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
