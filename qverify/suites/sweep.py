"""Quantization sweeps: verify a property at every word length and find the minimum word length.

The integer bits k come from range analysis of the real network over the property's input region
(the thesis' rule) and stay fixed; each width w > k gets the format <k, w-k>. The minimum word
length is the narrowest width from which every wider width agrees with the widest one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from qverify.network import Network
from qverify.properties import Property
from qverify.quant import FixedFormat, ImplementationOptions, choose_format
from qverify.quant.ranges import bits_for_magnitude, largest_real_value
from qverify.stage_times import pipeline_seconds
from qverify.suites.executors import Executor
from qverify.suites.tasks import TaskSpec, run_task
from qverify.verification import VerifyOptions


@dataclass(frozen=True, slots=True)
class SweepPoint:
    word_bits: int
    number_format: str
    status: str
    time_s: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SweepResult:
    task: str
    int_bits: int
    points: tuple[SweepPoint, ...]

    @property
    def minimum_word_length(self) -> int | None:
        """Narrowest width from which all wider widths agree with the widest (None if the widest is undecided)."""
        if not self.points or self.points[-1].status not in ("SAFE", "UNSAFE"):
            return None
        widest = self.points[-1].status
        minimum = self.points[-1].word_bits
        for point in reversed(self.points):
            if point.status != widest:
                break
            minimum = point.word_bits
        return minimum


def region_hull(prop: Property) -> tuple[np.ndarray, np.ndarray]:
    lo = np.min([box.lo_array() for box in prop.boxes], axis=0)
    hi = np.max([box.hi_array() for box in prop.boxes], axis=0)
    return lo, hi


def sweep_formats(
    net: Network, prop: Property, widths: range, base: ImplementationOptions, policy: str
) -> tuple[int, list[tuple[int, FixedFormat]]]:
    """(k, [(w, format)]) for the widths the policy can fill."""
    lo, hi = region_hull(prop)
    fixed = base.number if isinstance(base.number, FixedFormat) else FixedFormat(16, 16)
    magnitude, _ = largest_real_value(net, lo, hi)
    int_bits = bits_for_magnitude(magnitude, 0)
    formats = []
    for width in widths:
        if policy == "fit":
            fmt, _ = choose_format(net, width, lo, hi, replace(base, number=fixed))
        elif width > int_bits:
            fmt = FixedFormat(int_bits, width - int_bits, fixed.rounding, fixed.overflow)
        else:
            continue
        formats.append((width, fmt))
    return int_bits, formats


def sweep_specs(
    name: str,
    network_path: str,
    net: Network,
    prop: Property,
    widths: range,
    base: ImplementationOptions,
    options: VerifyOptions,
    policy: str,
) -> tuple[int, list[TaskSpec]]:
    int_bits, formats = sweep_formats(net, prop, widths, base, policy)
    specs = [
        TaskSpec("sweep", name, fmt.label, network_path, prop, replace(base, number=fmt), options, None)
        for _, fmt in formats
    ]
    return int_bits, specs


def run_sweep(jobs: list[tuple[str, int, list[TaskSpec]]], executor: Executor) -> list[SweepResult]:
    """Run every (task, k, specs) sweep through one executor; results per task, widths ascending."""
    all_specs = [spec for _, _, specs in jobs for spec in specs]
    records = {}
    try:
        for spec, record in executor.map_unordered(run_task, all_specs):
            records[spec.key] = record
    finally:
        executor.close()
    results = []
    for task, int_bits, specs in jobs:
        points = []
        for spec in specs:
            record = records[spec.key]
            fmt = spec.implementation.number
            points.append(
                SweepPoint(
                    fmt.word_bits,
                    str(fmt),
                    record.status.value,
                    pipeline_seconds(record.times_s),
                    record.reason,
                )
            )
        results.append(SweepResult(task, int_bits, tuple(sorted(points, key=lambda p: p.word_bits))))
    return results
