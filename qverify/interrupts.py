"""SIGTERM handled like Ctrl-C, so that `finally` blocks run when a run is stopped.

Verifier children run in their own session (so that a limit kills their whole process group) and
therefore never see a signal sent to qverify. Killing `qverify suite run` with SIGTERM (a batch
scheduler, `timeout`, `kill`) used to leave them running, ESBMC without any time limit of its
own; raising KeyboardInterrupt instead lets `run_limited` kill the group on the way out, and the
suite journal keeps every finished task for `--resume`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt in this process (the main thread's handler)."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


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
    parent = multiprocessing.parent_process()
    die_with_parent(signal.SIGTERM, parent.pid if parent is not None else None)
