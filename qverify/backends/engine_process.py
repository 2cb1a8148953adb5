"""`python -m qverify.backends.engine_process FOLDER`: an engine host, the warm engine's server.

The host imports the engine once (the interpreter's start and the imports: ~0.6 s of CPU, most of
what a small query used to cost), then serves tasks one at a time, each in a process of its own
forked from it: so a task starts in a few milliseconds with every engine module loaded, and starts
from the same state as every other task (the host itself never runs a task, and nothing a task does
can reach it or the next one). Its parent (`qverify.backends.engine_host.EngineHost`) writes one
JSON line per task on stdin:

    {"argv": [...], "cwd": ..., "env": {...}, "address_space": BYTES, "out": PATH, "err": PATH}

and the host says `ready` on stdout once it has imported what every task needs (the lifter, the
network level), then imports what only some tasks need while no task waits (`IDLE_IMPORTS`). It
answers each task with `started PID` once the task's process exists, and
`ended PID RETURNCODE CPU_SECONDS` once it has reaped it. The task's process leads a session of its
own (the parent watches its resident set and kills its whole group at a limit, as for any verifier
child), runs under RLIMIT_AS, in the parent's folder and environment of the moment, with stdout and
stderr in the two files, and runs `python -m qverify.engine ARGV` exactly (`qverify.engine.__main__`),
then exits without the interpreter's teardown.

The host ends when its stdin ends (its parent closed it, or died); a task running then is killed
first. FOLDER (where the parent keeps the task's output files) is only there for `ps`, and for
whoever looks for a run's processes, as tests do.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import resource
import select
import signal
import sys
import traceback

from qverify.interrupts import die_with_parent


def import_engine() -> None:
    """The modules every task imports (qverify.engine.api imports its stages in `check_file`, so
    that `qverify verify`'s own process, which only needs the engine's option names, never pays for
    them): the lifter and the network level, imported once for every task the host will run."""
    import numpy.ma  # np.unique imports it at its first call
    import numpy.random  # noqa: F401 - the attack's generator

    import qverify.engine.__main__
    import qverify.engine.netlevel.lift
    import qverify.engine.netlevel.model
    import qverify.engine.netlevel.search  # noqa: F401 - imported for its cost, now


# What only some tasks need, in the order to import them while the host waits (Jinja: the lifter
# renders the C of a lookup table, for tanh and sigmoid networks; the scalar path: a harness the
# lifter declines or the network level leaves open; scipy.sparse and HiGHS: convolutions and the
# LP, in pieces of at most ~30 ms so that a task arriving meanwhile waits little). A task that starts
# before they are all in imports what it needs itself: the host says ready ~0.2 s of CPU earlier,
# and a small query decided by the network level no longer waits for them (docs/PERFORMANCE.md,
# "Start-up and overhead of one task").
IDLE_IMPORTS = (
    "qverify.codegen.render",
    "qverify.engine.scalar.symex",
    "qverify.engine.scalar.passes.simplify",
    "qverify.engine.scalar.strategy",
    "numpy.f2py",
    "numpy.testing",
    "pydoc",
    "scipy._lib._util",
    "scipy.sparse",
    "qverify.engine.solvers.highs",
)


def import_while_idle(requests: _Requests) -> None:
    """Import `IDLE_IMPORTS` one by one while no task is waiting on stdin (a task comes first)."""
    for name in IDLE_IMPORTS:
        if name in sys.modules:
            continue
        if requests.waiting():
            return
        with contextlib.suppress(ImportError):  # a task that needs it says why it is missing
            importlib.import_module(name)


def _run_task(request: dict, host: int) -> None:
    """In the forked process: become the task's process and run the engine's command line."""
    code = 1
    try:
        os.setsid()  # its own group: a limit kills it and its solver forks, never the host
        die_with_parent(signal.SIGKILL, host)
        limit = int(request["address_space"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["out"]), (2, request["err"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        # a host forked from a process whose sys.stdout/stderr are not its descriptors 1 and 2 (a
        # command run inside pytest's capture) would print the answer into a copy of that buffer
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process ends with os._exit
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        from qverify.engine import __main__ as engine_command

        code = engine_command.main(list(request["argv"]))
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code if isinstance(stop.code, int) else 2
    except BaseException:  # noqa: BLE001 - reported on the task's stderr, as a crashed process would
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # the answer is out: the interpreter's teardown of the engine's objects (hundreds of
        # thousands of nodes on ACAS Xu, ~0.1 s) would only keep the parent waiting
        os._exit(code)


def _say(text: str) -> None:
    os.write(1, (text + "\n").encode())


class _Requests:
    """The task lines on stdin (read with os.read: nothing buffered in Python that a fork could copy)."""

    def __init__(self) -> None:
        self.pending = b""
        self.ended = False

    def read_some(self) -> None:
        chunk = os.read(0, 1 << 16)
        self.pending += chunk
        self.ended = not chunk

    def waiting(self) -> bool:
        """Is a task's line (or the end of stdin) there to read, now?"""
        if b"\n" in self.pending or self.ended:
            return True
        ready, _, _ = select.select([0], [], [], 0)
        return bool(ready)

    def next(self) -> dict | None:
        """The next task, or None when stdin ended."""
        while b"\n" not in self.pending:
            if self.ended:
                return None
            self.read_some()
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line) if line.strip() else self.next()


def _wait_for(pid: int, requests: _Requests) -> tuple[int, float] | None:
    """Reap the task's process: (return code, CPU seconds); None if stdin ended first (the parent
    is gone: the task is killed and the host ends)."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            watched = [0] if pidfd is None else [0, pidfd]
            ready, _, _ = select.select(watched, [], [], 0.05 if pidfd is None else None)
            if 0 in ready:
                if not requests.ended:
                    requests.read_some()
                if requests.ended:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    return None
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime
    finally:
        if pidfd is not None:
            os.close(pidfd)


def serve(idle_imports: bool = True) -> int:
    """Run the tasks of stdin until it ends; one forked process per task, one at a time; between
    them, with `idle_imports`, import `IDLE_IMPORTS` (a host for one task only does not: its task
    imports what it needs, and nothing else is paid for)."""
    host = os.getpid()
    requests = _Requests()
    if idle_imports:
        import_while_idle(requests)
    while (request := requests.next()) is not None:
        pid = os.fork()
        if pid == 0:
            _run_task(request, host)
        _say(f"started {pid}")
        ended = _wait_for(pid, requests)
        if ended is None:
            return 0
        _say(f"ended {pid} {ended[0]} {ended[1]:.6f}")
        if idle_imports:
            import_while_idle(requests)  # what the first tasks found missing, before the next one
    return 0


ONE_TASK = "--one-task"  # the host of a command that runs one task (`qverify verify`): no idle imports


def main(one_task: bool | None = None) -> int:
    """The host: import the engine, say so, serve. `one_task` (default: `--one-task` among the
    arguments): no idle imports (`serve`)."""
    import_engine()
    _say("ready")
    return serve(idle_imports=not (ONE_TASK in sys.argv[1:] if one_task is None else one_task))


if __name__ == "__main__":
    code = main()
    # the parent waits for the host's end at its own exit: the interpreter's teardown of every
    # engine module would only keep it waiting (the host holds no file or state worth flushing)
    os._exit(code)
