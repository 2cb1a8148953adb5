"""Rendering helpers shared by sub-commands: warnings and progress go to stderr."""

from __future__ import annotations

import sys
import threading
import time
from typing import Self

from qverify.stage_times import PIPELINE, PRE_PIPELINE, PROCESS, pipeline_seconds


def warn(message: str) -> None:
    """One `warning: ...` line on stderr, so stdout stays machine-readable."""
    print(f"warning: {message}", file=sys.stderr)


def say_kernel(net, number) -> None:
    """The one line about onnxruntime's x86 kernels for an int8 model in `number`
    (`quant.ort_kernel.kernel_statement`), on stderr."""
    from qverify.quant.ort_kernel import kernel_statement  # numpy, the network: only for a model

    statement = kernel_statement(net, number)
    if statement is not None:
        print(f"{statement[0]}: {statement[1]}", file=sys.stderr)


def _vector(values) -> str:
    return "[" + ", ".join(f"{float(v):.6g}" for v in values) + "]"


def describe_example(record) -> str:
    """A counterexample, in the units a user reads: words, normalised reals, raw units, outputs."""
    example = record.counterexample
    lines = [f"counterexample ({example.violated}):"]
    lines.append(f"  input words/values : {list(example.inputs_word)}")
    lines.append(f"  input (normalised) : {_vector(example.inputs_real)}")
    if example.inputs_raw is not None:
        lines.append(f"  input (raw units)  : {_vector(example.inputs_raw)}")
    lines.append(f"  outputs, C ({record.number_format}) : {_vector(example.outputs_c)}")
    lines.append(f"  outputs, float network : {_vector(example.outputs_float)}")
    if example.label is not None:
        lines.append(
            f"  label {example.label}" + (f", target {example.target}" if example.target is not None else "")
        )
    if example.quantization_induced:
        lines.append("  quantization-induced: the float network does not violate the property at this input")
    else:
        lines.append("  the float network violates the property at this input too")
    return "\n".join(lines)


# the record's stages in pipeline order (docs/ARCHITECTURE.md "Stage times"), with their sub-stages;
# `screening`: a property of cases' (`qverify.cases`), before the stages its cases ran, summed
STAGE_ORDER = (
    "startup",
    "imports",
    "load",
    "screening",
    "quantize",
    "invariants",
    "codegen",
    "backend",
    "replay",
)


def describe_time(times: dict[str, float]) -> str:
    """The headline of a record's times, saying what it measures: the whole `qverify verify` process
    (`process`), else the task's pipeline (a suite's task, or a record written before `process`)."""
    if PROCESS in times:
        return f"time {times[PROCESS]:.2f} s (the whole qverify verify process, start to record)"
    before = [stage for stage in PRE_PIPELINE if stage in times]
    if before:  # a `qverify verify` record written before `process` was
        seconds = sum(times[stage] for stage in before) + pipeline_seconds(times)
        return f"time {seconds:.2f} s ({' + '.join(before)} + pipeline: the process up to its record)"
    return f"time {pipeline_seconds(times):.2f} s (the task's pipeline, quantize to replay)"


def describe_times(times: dict[str, float]) -> str:
    """`stages: startup 0.05 s, ..., backend 8.44 s (startup 0.04, parse 0.38, ...), replay 0.15 s
    (compile 0.12, ...), pipeline 0.99 s (quantize to replay)`: every stage the record holds, a
    dotted key after its stage."""
    parts = []
    for stage in STAGE_ORDER:
        if stage not in times:
            continue
        prefix = "replay." if stage == "replay" else f"{stage}."
        subs = [(key.removeprefix(prefix), value) for key, value in times.items() if key.startswith(prefix)]
        if stage == "replay":
            subs += [(key, times[key]) for key in ("example",) if key in times]
        detail = f" ({', '.join(f'{name} {value:.2f}' for name, value in subs)})" if subs else ""
        parts.append(f"{stage} {times[stage]:.2f} s{detail}")
    parts.append(f"{PIPELINE} {pipeline_seconds(times):.2f} s (quantize to replay)")
    return "stages: " + ", ".join(parts)


class StageTicker:
    """A one-line status on stderr while a verification runs, redrawn twice a second: the stage it is
    in and the seconds spent of the timeout (`verify: backend, 12 s of 60 s`), so that a long run is
    visibly alive. Only on a terminal (pipes, files and tests get nothing); cleared at the end."""

    def __init__(self, label: str, timeout_s: float, enabled: bool) -> None:
        self.label, self.timeout_s = label, timeout_s
        self.enabled = enabled and sys.stderr.isatty()
        self.stage = "quantize"  # the first stage of `verify_property`
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._draw, daemon=True)

    def finished(self, stage: str) -> None:
        """`verify_property`'s on_stage: `stage` ended, the next one in STAGE_ORDER runs."""
        if stage in STAGE_ORDER and STAGE_ORDER.index(stage) + 1 < len(STAGE_ORDER):
            self.stage = STAGE_ORDER[STAGE_ORDER.index(stage) + 1]

    def _draw(self) -> None:
        while not self._stop.wait(0.5):
            elapsed = time.monotonic() - self.started
            print(
                f"\r{self.label}: {self.stage}, {elapsed:.0f} s of {self.timeout_s:g} s ",
                end="",
                file=sys.stderr,
            )
            sys.stderr.flush()

    def __enter__(self) -> Self:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            print("\r\033[K", end="", file=sys.stderr, flush=True)  # the line, erased
