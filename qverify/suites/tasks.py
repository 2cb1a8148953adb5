"""Suite tasks at a format: what a worker runs, as plain picklable data, and the function it runs.

A `TaskSpec` crosses process and machine boundaries (local process pools, Dask workers), so it holds
only paths and frozen option objects; `run_task` loads the network in the worker and returns the
typed `VerificationRecord` (it pickles: see `qverify.backends.base`); the runner turns it into JSON
only where it is written down (the journal).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from qverify.cases import verify_cases
from qverify.io import load_network
from qverify.network import Network
from qverify.properties import Property, PropertyCases
from qverify.quant import (
    FixedFormat,
    ImplementationOptions,
    parse_number_format,
    resolve_word_length,
    word_length,
)
from qverify.suites.suite_file import Suite
from qverify.tasks import Origin
from qverify.verification import VerificationRecord, VerifyOptions


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One verification to run: a suite task at one format with fixed options."""

    suite: str
    task: str
    format_label: str  # as the suite/command line named it: "16", "16.16", "float", a variant
    network_path: str
    property: Property | PropertyCases
    implementation: ImplementationOptions  # the number format of "W" labels is chosen in the worker
    options: VerifyOptions
    image_shape: tuple[int, ...] | None
    number_label: str = ""  # the number format of a variant label ("" : format_label itself)
    origins: tuple[tuple[str, str], ...] = ()  # option -> where its value came from (the record's)

    @property
    def number(self) -> str:
        return self.number_label or self.format_label

    @property
    def key(self) -> str:
        """Identity in the journal: same key, same verification (resume skips it)."""
        parts = (self.suite, self.task, self.format_label, self.implementation.key(), self.options.key())
        return "|".join(parts)


def expand(
    suite: Suite,
    formats: tuple[str, ...],
    options: VerifyOptions,
    timeout_s: float | None,
    formats_given: bool = False,
) -> list[TaskSpec]:
    """Every task of the suite at every format (task-major order: a task's formats run together).

    `timeout_s` (the command line's --timeout) overrides the tasks' own; `formats_given` says the
    formats came from the command line: both are recorded in each task's origins."""
    suite_origin, line_origin = Origin.SUITE.value, Origin.COMMAND_LINE.value
    origins = (
        ("network", suite_origin),
        ("property", suite_origin),
        ("format", line_origin if formats_given else suite_origin),
        ("timeout", line_origin if timeout_s is not None else suite_origin),
    )
    specs = []
    for task in suite.tasks:
        limits = replace(options.limits, timeout_s=timeout_s if timeout_s is not None else task.timeout_s)
        task_options = replace(options, limits=limits, image_shape=task.image_shape, workdir=None)
        for label in formats:
            number_label, network_path = suite.resolve(label, task)
            specs.append(
                TaskSpec(
                    suite.name,
                    task.name,
                    label,
                    str(network_path),
                    task.property,
                    suite.implementation,
                    task_options,
                    task.image_shape,
                    "" if number_label == label else number_label,
                    origins,
                )
            )
    return specs


@functools.lru_cache(maxsize=32)
def _network(path: str) -> Network:
    return load_network(path)


def resolve_implementation(spec: TaskSpec, net: Network) -> tuple[ImplementationOptions, str]:
    """The implementation at the spec's format, and a note when range analysis had to compromise."""
    base = (
        spec.implementation.number
        if isinstance(spec.implementation.number, FixedFormat)
        else FixedFormat(16, 16)
    )
    bits = word_length(spec.number)
    if bits is None:  # a format label; a bare word length W is chosen by range analysis
        number = parse_number_format(spec.number, base.rounding, base.overflow)
        return replace(spec.implementation, number=number), ""
    return resolve_word_length(net, bits, replace(spec.implementation, number=base))


def run_task(spec: TaskSpec) -> VerificationRecord:
    """Verify one task (in a worker); never raises for a task failure (the record says it)."""
    net = _network(spec.network_path)
    implementation, note = resolve_implementation(spec, net)
    record = verify_cases(net, spec.property, implementation, spec.options, spec.task)
    warnings = (note, *record.warnings) if note else record.warnings
    return replace(record, warnings=warnings, origins={**record.origins, **dict(spec.origins)})
