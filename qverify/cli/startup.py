"""How long this process took to reach its command, for the stage times of `qverify verify`'s record.

`startup`: from the process's creation (the kernel's start time of this process) to `qverify.cli.main`
(the interpreter, the `qverify` package); `imports`: from there to the command's handler (the
command's modules, argument parsing); `process`: from the process's creation to now (the whole run,
the record's headline). Linux only (/proc); elsewhere `startup` is unknown and `process` counts from
`main`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_main_entered: tuple[float, float | None] | None = None  # (perf_counter, age of the process) at main


def _process_age_s() -> float | None:
    """Seconds since this process was created (10 ms resolution: the kernel counts clock ticks)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, after "pid (comm)"
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def mark_main() -> None:
    """Called first thing in `qverify.cli.main`."""
    global _main_entered
    _main_entered = (time.perf_counter(), _process_age_s())


def startup_times() -> dict[str, float]:
    """{"startup": s, "imports": s} up to now (the handler's start), what is known of them."""
    if _main_entered is None:
        return {}
    entered, age = _main_entered
    times = {"imports": round(time.perf_counter() - entered, 6)}
    if age is not None:
        times = {"startup": round(max(0.0, age), 6)} | times
    return times


def process_seconds() -> float:
    """Seconds since this process was created (since `main` where /proc cannot tell)."""
    age = _process_age_s()
    if age is not None:
        return round(age, 6)
    return round(time.perf_counter() - _main_entered[0], 6) if _main_entered is not None else 0.0
