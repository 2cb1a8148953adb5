"""SIGTERM handled like Ctrl-C, so that `finally` blocks run when a run is stopped.

Verifier children run in their own session (so that a limit kills their whole process group) and
therefore never see a signal sent to qverify. Killing `qverify suite run` with SIGTERM (a batch
scheduler, `timeout`, `kill`) used to leave them running, ESBMC without any time limit of its
own; raising KeyboardInterrupt instead lets `run_limited` kill the group on the way out, and the
suite journal keeps every finished task for `--resume`.
"""

from __future__ import annotations

import signal
from types import FrameType


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt in this process (the main thread's handler)."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
