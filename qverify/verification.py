"""Verify one property of one network, end to end: the unit of `qverify verify` and of suite runs.

quantise -> invariants -> harness (C) -> back end -> replay (gcc + simulator) -> adversarial example.
A back end's UNSAFE becomes a reported UNSAFE only if it replays; otherwise the record is an ERROR
that says why. Every failure of a stage becomes an ERROR record (suites journal it and go on).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from qverify.backends import Backend, HarnessJob, InternalBackend, InternalOptions, Limits, Status, Verdict
from qverify.backends.internal import core_share
from qverify.codegen import CompiledNetwork, render_harness
from qverify.codegen.conditions import implementation_box
from qverify.counterexample import (
    ReplayPrograms,
    build_example,
    inputs_from_values,
    replay_candidate,
)
from qverify.errors import (
    InputError,
    QverifyError,
)
from qverify.invariants import FramacOptions, IntervalMethod, compute_bounds
from qverify.network import Network
from qverify.properties import Property
from qverify.quant import FloatFormat, ImplementationOptions, overflow_warnings, quantize_network
from qverify.record import VerificationRecord
from qverify.stage_times import PIPELINE

INVARIANTS_SHARE = 1 / 3  # of the task's timeout, at most, for Frama-C (then the built-in analysis)
MIN_STAGE_S = 1.0
# a query the back end decides within this, most small boxes, compiles the counterexample's C only
# when it is UNSAFE (after the answer: ~0.2 s of wall more then); later, beside the back end
SPECULATIVE_REPLAY_AFTER_S = 0.25


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    """How to verify (not what): back end, limits, invariants, where to keep files."""

    backend: str = "internal"
    limits: Limits = field(default_factory=Limits)
    intervals: IntervalMethod = IntervalMethod.AUTO
    internal: InternalOptions = field(default_factory=InternalOptions)
    esbmc: object | None = None  # EsbmcOptions when backend == "esbmc"
    workdir: Path | None = None  # keep harness and replay files here (default: a temporary folder)
    image_shape: tuple[int, ...] | None = None

    def key(self) -> str:
        """A stable text key of everything that changes a verdict (for the suite journal)."""
        solver = self.internal.solver if self.backend == "internal" else getattr(self.esbmc, "solver", "")
        return (
            f"{self.backend}-{solver}-{self.internal.semantics}-intervals={self.intervals.value}"
            f"-timeout={self.limits.timeout_s:g}-mem={self.limits.memory_mb}"
        )


def with_core_share(options: VerifyOptions, tasks_in_parallel: int) -> VerifyOptions:
    """`options` for one of `tasks_in_parallel` tasks run at once on this machine: the engine's
    search gets its share of the cores (tasks x engine processes within the usable cores) unless
    a number was given."""
    if options.internal.jobs:
        return options
    return replace(options, internal=replace(options.internal, jobs=core_share(tasks_in_parallel)))


def check_semantics(options: VerifyOptions, is_float: bool, number: str) -> None:
    """Refuse real semantics where it would not be what runs: it is the internal engine's ideal
    arithmetic on a *float* harness. A fixed-point or int8 implementation has no float operation to
    make exact (the engine would verify the implementation while the record said real), and ESBMC
    decides the C's IEEE arithmetic only.

    :raises InputError: naming the flag and what to give instead.
    """
    if options.internal.semantics != "real":
        return
    if options.backend != "internal":
        raise InputError(
            "--semantics real is the internal engine's (ideal arithmetic on a float harness); ESBMC decides "
            "the C's IEEE arithmetic: use --backend internal or drop --semantics real"
        )
    if not is_float:
        raise InputError(
            f"--semantics real is about a float harness in ideal real arithmetic; {number} is not floating "
            "point: give a float format (--float, --double, --half) or drop --semantics real"
        )


def make_backend(options: VerifyOptions) -> Backend:
    """The back end the options name (ToolMissingError when ESBMC is asked for but absent)."""
    if options.backend == "internal":
        return InternalBackend(options.internal)
    if options.backend == "esbmc":
        from qverify.backends.esbmc import EsbmcBackend, EsbmcOptions, find_esbmc

        esbmc_options = options.esbmc or EsbmcOptions()
        find_esbmc(esbmc_options)  # fail now, before any work, with the install hint
        return EsbmcBackend(esbmc_options)
    raise QverifyError(f"unknown back end '{options.backend}' (internal | esbmc)")


def core_free() -> bool:
    """Is a core free (the 1-minute load average below the number of cores)? The counterexample's
    gcc runs (~0.1 s of CPU each, for every task, though only an UNSAFE needs them) start with the
    back end only then: beside it they cost no time; on a busy machine (a suite's other jobs, other
    users) they would only take CPU from the back ends, and an UNSAFE compiles them after its answer."""
    try:
        return os.getloadavg()[0] < (os.cpu_count() or 1)
    except OSError:
        return True


class _Stopwatch:
    def __init__(self, on_stage: Callable[[str], None] | None = None) -> None:
        self.times: dict[str, float] = {}
        self.start = time.perf_counter()
        self.on_stage = on_stage

    def lap(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.times[stage] = round(now - since, 6)
        if self.on_stage is not None:
            self.on_stage(stage)
        return now


def verify_property(
    net: Network,
    prop: Property,
    implementation: ImplementationOptions,
    options: VerifyOptions,
    name: str = "",
    on_stage: Callable[[str], None] | None = None,
) -> VerificationRecord:
    """Run the pipeline for one property; every failure becomes an ERROR record. `on_stage` is told
    each stage as it ends (quantize, invariants, codegen, backend, ...: a progress display)."""
    name = name or f"{net.name}-{prop.name}"
    base = {
        "name": name,
        "network": net.source or net.name,
        "network_digest": net.digest(),
        "property": prop.name,
        "implementation": implementation.key(),
        "options": options.key(),
    }
    keep = options.workdir is not None
    clock = _Stopwatch(on_stage)
    try:
        check_semantics(options, isinstance(implementation.number, FloatFormat), str(implementation.number))
    except InputError as error:
        return _error_record(base, implementation, clock, error)
    workdir = Path(options.workdir) if keep else Path(tempfile.mkdtemp(prefix="qverify-"))
    try:
        return _run(net, prop, implementation, options, workdir, clock, base)
    except QverifyError as error:
        return _error_record(base, implementation, clock, error)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _error_record(
    base: dict, implementation: ImplementationOptions, clock: _Stopwatch, error: QverifyError
) -> VerificationRecord:
    clock.times[PIPELINE] = round(time.perf_counter() - clock.start, 6)
    return VerificationRecord(
        **base,
        number_format=str(implementation.number),
        format_resolved_from=getattr(implementation.number, "resolved_from", ""),
        lut_eps=0.0,
        status=Status.ERROR,
        reason=str(error),
        verdict=None,
        counterexample=None,
        times_s=clock.times,
        peak_memory_mb=0.0,
    )


def _run(
    net, prop, implementation, options, workdir: Path, clock: _Stopwatch, base: dict
) -> VerificationRecord:
    backend = make_backend(options)
    backend.prepare(options.limits, workdir)  # the engine's process starts now, in parallel with what follows
    try:
        return _pipeline(net, prop, implementation, options, workdir, clock, base, backend)
    finally:
        backend.close()


def _pipeline(
    net, prop, implementation, options, workdir: Path, clock: _Stopwatch, base: dict, backend: Backend
) -> VerificationRecord:
    started = clock.start
    qnet = quantize_network(net, implementation)
    prop.check_against(qnet.n_inputs, qnet.n_outputs)
    if net.output_softmax:
        check_order_property(prop, net.name)
    started = clock.lap("quantize", started)
    warnings = list(net.notes)
    for box in prop.boxes:
        warnings += overflow_warnings(qnet, box.lo_array(), box.hi_array(), verdict=True)
    framac = FramacOptions(timeout_s=max(MIN_STAGE_S, INVARIANTS_SHARE * options.limits.timeout_s))
    bounds = compute_bounds(qnet, prop, options.intervals, framac_options=framac)
    warnings += bounds.warnings
    moved = input_bounds_moved(qnet, prop)
    if moved:
        warnings.append(moved)
    started = clock.lap("invariants", started)
    harness = render_harness(qnet, prop, bounds.bounds).write(workdir / "harness")
    replay = ReplayPrograms(qnet, harness, workdir)
    if core_free():  # the network's replay C is written and gcc compiles both while the back end runs
        speculate = functools.partial(replay.start_unless_answered, SPECULATIVE_REPLAY_AFTER_S)
        threading.Thread(target=speculate, name="qverify-replay", daemon=True).start()
    started = clock.lap("codegen", started)
    try:
        job = HarnessJob(harness, harness.parent, qnet.is_float, qnet.n_inputs)
        remaining = options.limits.timeout_s - (time.perf_counter() - clock.start)
        verdict = backend.check(job, replace(options.limits, timeout_s=max(MIN_STAGE_S, remaining)))
        if options.workdir is None:  # the files are deleted with the run: name them by their place in it
            verdict = _without_folder(verdict, workdir)
        started = clock.lap("backend", started)
        for stage, seconds in verdict.times_s.items():
            clock.times[f"backend.{stage}"] = seconds
        if "total" in verdict.times_s:  # its process's start, imports and answer: outside its own clock
            clock.times["backend.startup"] = round(
                max(0.0, clock.times["backend"] - verdict.times_s["total"]), 6
            )
        status, reason, example = verdict.status, verdict.reason, None
        if verdict.status is Status.UNSAFE:
            confirmed = _confirm(qnet, prop, verdict, workdir, options.image_shape, clock, replay)
            status, reason, example = confirmed
            started = clock.lap("replay", started)
    finally:
        replay.cancel()
    clock.times[PIPELINE] = round(time.perf_counter() - clock.start, 6)
    return VerificationRecord(
        **base,
        number_format=str(qnet.number),
        format_resolved_from=getattr(qnet.number, "resolved_from", ""),
        lut_eps=qnet.lut_error_bound,
        status=status,
        reason=reason,
        verdict=verdict,
        counterexample=example,
        times_s=clock.times,
        peak_memory_mb=verdict.peak_memory_mb,
        warnings=tuple(dict.fromkeys(warnings)),
        invariants=bounds.method_used.value,
        harness=str(harness) if options.workdir is not None else "",
    )


def check_order_property(prop: Property, name: str) -> None:
    """A model whose final Softmax was dropped (`qverify.io.onnx_graph`) is verified on its logits:
    Softmax keeps the order of the outputs, so an atom comparing two outputs (a Y_i - a Y_j rel 0)
    means the same on both; any other atom (a probability against a constant) does not.

    :raises InputError: naming the atom."""
    for clause in prop.unsafe.clauses:
        for atom in clause.atoms:
            coefficients = [c for _, c in atom.terms]
            pairwise = len(coefficients) == 2 and coefficients[0] == -coefficients[1] and atom.constant == 0
            if not pairwise:
                raise InputError(
                    f"{name} ends in a Softmax, which qverify drops (it keeps the order of the outputs): "
                    f"the property's atom '{atom.text}' compares a probability with a constant, which the "
                    "logits do not determine; state it as comparisons of outputs (Y_i - Y_j), or give "
                    "the model without its Softmax"
                )


def input_bounds_moved(qnet, prop: Property) -> str:
    """One line when bounds of the input region lie between two values of the implementation's input
    type: the device rounds such a measurement to the nearer (`qverify.quant.inputs`), so the
    inputs verified are that rounding's image of the box (never empty); empty when none moved."""
    return moved_bounds_note(qnet, sum(implementation_box(qnet, box).moved for box in prop.boxes))


def moved_bounds_note(qnet, moved: int) -> str:
    """`input_bounds_moved`'s line for `moved` bounds (empty when none moved)."""
    if not moved:
        return ""
    what = "input bound lies" if moved == 1 else "input bounds lie"
    return (
        f"{moved} {what} between two values of {qnet.number}'s inputs: verified on the input stage's "
        "rounding to the nearer value (the inputs a device receives for the box)"
    )


def _without_folder(verdict: Verdict, folder: Path) -> Verdict:
    """The verdict with `folder/` cut from its reason and notes (`harness/harness.c:220: ...`): a
    temporary folder's path means nothing once the run has deleted it."""
    prefix = f"{folder}/"
    return replace(
        verdict,
        reason=verdict.reason.replace(prefix, ""),
        notes=tuple(note.replace(prefix, "") for note in verdict.notes),
    )


def _confirm(
    qnet,
    prop,
    verdict: Verdict,
    workdir: Path,
    image_shape,
    clock: _Stopwatch,
    replay: ReplayPrograms,
):
    """UNSAFE only if the counterexample replays in gcc and the simulator; else an ERROR that says why.

    The harness and the network's replay program (the C's outputs for the example) started
    compiling with the back end when a core was free (`ReplayPrograms`, `core_free`), else they
    start now; `replay.compile` is the wait for them."""
    if verdict.counterexample is None:
        return Status.ERROR, f"{verdict.backend} reported UNSAFE without a counterexample", None
    started = time.perf_counter()
    try:
        harness_replay, network_replay = replay.executables()
    except QverifyError as error:
        return (
            Status.ERROR,
            f"counterexample from {verdict.backend} does not replay: gcc failed: {error}",
            None,
        )
    started = clock.lap("replay.compile", started)
    replayed = replay_candidate(qnet, prop, replay.harness, verdict.counterexample, harness_replay)
    started = clock.lap("replay.run", started)
    if not replayed.confirmed:
        return (
            Status.ERROR,
            f"counterexample from {verdict.backend} does not replay: {replayed.problem}",
            None,
        )
    x = inputs_from_values(qnet, verdict.counterexample)
    compiled = CompiledNetwork.from_executable(network_replay, qnet.is_integer)
    example = build_example(qnet, prop, np.asarray(x), replayed.violated, workdir, image_shape, compiled)
    clock.lap("example", started)
    reason = "" if example.float_violates else "quantization-induced: the float network does not violate it"
    return Status.UNSAFE, reason, example
