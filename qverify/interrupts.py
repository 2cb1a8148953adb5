"""SIGTERM handled like Ctrl-C, so that `finally` blocks run when a run is stopped.

Verifier children run in their own session (so that a limit kills their whole process group) and
therefore never see a signal sent to qverify. Killing `qverify suite run` with SIGTERM (a batch
scheduler, `timeout`, `kill`) used to leave them running, ESBMC without any time limit of its
own; raising KeyboardInterrupt instead lets `run_limited` kill the group on the way out, and the
suite journal keeps every finished task for `--resume`.

Three details keep a stop quiet and complete. Only the first SIGTERM raises: the clean-up it starts
(killing process groups, closing the pool) must not be cut short by the next one (a suite worker
gets two, from the pool and from its parent's death), which also showed as "Exception ignored in
sys.unraisablehook". An interruption that lands in a finalizer (`__del__`, a weakref callback) is
swallowed by Python and reported as unraisable: it is delivered again instead, right after. And a
suite worker stopped while it waits for its next task has nothing to clean up: it exits at once
(it used to print a multiprocessing traceback).
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from qverify.errors import EXIT_INTERRUPTED

REDELIVER_AFTER_S = 0.01  # an interruption a finalizer swallowed, sent again once the hook returned


class _State:
    """This process' interruption state (one per process: signal handlers are per process)."""

    interrupted = False  # a SIGTERM became a KeyboardInterrupt: the process is stopping
    worker = False  # a suite worker: when idle, a SIGTERM ends it at once
    busy = False  # a suite worker running a task
    previous_hook: Callable = sys.unraisablehook  # what reports the other unraisable exceptions


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    if _State.interrupted:
        return  # the first one is being handled; this one must not abort its clean-up
    if _State.worker and not _State.busy:
        os._exit(EXIT_INTERRUPTED)  # waiting for work: nothing to clean up
    _State.interrupted = True
    raise KeyboardInterrupt(f"signal {signum}")


def _deliver_again(signum: int) -> None:
    _State.interrupted = False
    os.kill(os.getpid(), signum)


def _unraisable(arguments) -> None:
    """sys.unraisablehook: an interruption swallowed by a finalizer is sent again (from a thread,
    so that it is raised in the code the finalizer interrupted, not inside this hook)."""
    if isinstance(arguments.exc_value, KeyboardInterrupt):
        signum = signal.SIGTERM if _State.interrupted else signal.SIGINT
        timer = threading.Timer(REDELIVER_AFTER_S, _deliver_again, (signum,))
        timer.daemon = True
        timer.start()
        return
    _State.previous_hook(arguments)


def interrupt_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt in this process (the main thread's handler)."""
    _State.interrupted = False
    signal.signal(signal.SIGTERM, _raise_interrupt)
    if sys.unraisablehook is not _unraisable:
        _State.previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable


@contextmanager
def running_task() -> Iterator[None]:
    """A suite worker's task: while it runs, SIGTERM interrupts it (its `finally` blocks stop the
    verifier's process group); outside, SIGTERM ends the idle worker at once."""
    _State.busy = True
    try:
        yield
    finally:
        _State.busy = False


# ---------------------------------------------------------------- dying with the parent

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _prctl():
    """libc's prctl, or None off Linux (there the parent's cleanup is all there is)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def die_with_parent(signum: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Ask the kernel to send `signum` to this process when its parent dies (PR_SET_PDEATHSIG).

    This is what still works when the parent is killed with SIGKILL and cannot clean up: suite
    workers, verifier children and solver forks each die with the process that started them, so a
    `kill -9` of qverify leaves nothing running. `parent`: the pid that should be the parent (a
    parent that died before the call is detected, and this process exits at once).
    """
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def child_dies_with_us(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen: the child dies when this process does.

    PR_SET_PDEATHSIG fires when the parent *thread* ends, so it is only armed for children started
    from the main thread (a worker thread of a pool may end while its child should run on).
    """
    if _PRCTL is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()
    return functools.partial(die_with_parent, signum, parent)


def worker_setup() -> None:
    """Initializer of suite worker processes: SIGTERM as Ctrl-C (so `finally` blocks stop the
    verifier's process group) and SIGTERM when the parent dies, even by SIGKILL."""
    import multiprocessing

    interrupt_on_sigterm()
    _State.worker = True
    parent = multiprocessing.parent_process()
    die_with_parent(signal.SIGTERM, parent.pid if parent is not None else None)
