"""How fast this machine runs Python right now: a fixed pure-Python loop, timed (a benchmark's
calibration line, not a test).

The 2-vCPU virtual machine these benchmarks were measured on ran this loop in 0.24 s at its best
and in 0.44 s a few seconds later (another tenant's load: the `steal` column of /proc/stat), and
whole-suite wall times moved with it (ACAS Xu, all 186 instances at `<16,16>`: median 0.65 s in
one run, 0.92 s in another an hour later, with the median CPU seconds per instance 1.10 and 1.50). A figure is only comparable with another taken at the same speed, or in the
same interleaved run (`bench_overhead.py --checkout A --checkout B`). Benchmarks print this line
at their start and end; `python benchmarks/machine_speed.py` prints it alone (before a run: is the
machine at its usual speed?).
"""

from __future__ import annotations

import argparse
import time

REFERENCE_ITERATIONS = 5_000_000


def reference_loop_s() -> float:
    """Seconds for REFERENCE_ITERATIONS additions in a Python loop (best of three)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for value in range(REFERENCE_ITERATIONS):
            total += value
        best = min(best, time.perf_counter() - started)
    return best


def speed_line(when: str) -> str:
    return f"machine speed ({when}): reference loop {reference_loop_s():.3f} s (0.24 s on the VM of the figures when not shared)"


def main() -> int:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    print(speed_line("now"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
