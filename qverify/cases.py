"""Verify a property of cases: VNN-LIB's disjunction of input boxes, each with its own output condition.

A `PropertyCases` holds iff every case holds, so its verdict is the disjunction of the cases'
violations: UNSAFE as soon as one case is UNSAFE (its counterexample, replayed like any other, names
the case), SAFE only once every case is SAFE, and otherwise UNKNOWN (or ERROR) with the reason of
the cases left open. Each case is an ordinary `Property` and goes through `verify_property`, the
pipeline of one property; nothing here reasons about networks.

Screening: before a case goes through the pipeline, the bounds that pipeline would inject into its
harness as invariants (the built-in analysis: sound bounds of every neuron as implemented, over the
input stage's image of each of the case's boxes) are asked whether they already exclude the case's
unsafe set, exactly (the outputs' bounds as rationals, each clause needing an atom they refute, and
no possible overflow). The back end trusts those same assumes, so a case they settle is SAFE by the
same argument the pipeline's verdict would rest on, without the harness, the C and the engine's
process (~0.1-0.3 s a case: VNN-COMP's nn4sys files hold up to 60,000 cases under a 30 s limit).
The interval level runs first for every box of every case at once (`implementation_bounds_batch`:
lindex_10000's 10,000 boxes in a fraction of a second), the symbolic level case by case for the
cases it leaves open, just before their turn. Anything they leave open, and every UNSAFE, goes
through `verify_property` (replayed as ever).

Time: the cases share the task's `--timeout`. Each case gets the time left divided by the cases
left (at least `MIN_CASE_S`, when that much is left), so the time a quick case does not use goes
to the cases after it; once every case has run, the cases that ran out of time run again with the
time still left, shared among them, as long as that is more than their first share. What every
case answered is in the record (`VerificationRecord.cases`), in the order the file states them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction

import numpy as np

from qverify.backends import Status
from qverify.errors import QverifyError
from qverify.invariants import BoundsResult, IntervalMethod, compute_bounds
from qverify.invariants.region import input_box
from qverify.network import Network
from qverify.properties import Atom, Property, PropertyCases, Relation
from qverify.quant import (
    FixedFormat,
    FloatFormat,
    ImplementationOptions,
    QuantizedNetwork,
    implementation_bounds_batch,
    overflow_warnings,
    quantize_network,
)
from qverify.record import CaseOutcome, VerificationRecord
from qverify.stage_times import PIPELINE, pipeline_seconds
from qverify.verification import (
    VerifyOptions,
    check_semantics,
    input_bounds_moved,
    moved_bounds_note,
    verify_property,
)

SCREENED = "invariants (case screening)"  # CaseOutcome.decided_by of a case its screening settled
MIN_CASE_S = 2.0  # a case's first run gets at least this much of the time left (when that much is)
RETRY_GAIN = 1.5  # a timed-out case runs again only with this many times its first share, or more


def verify_cases(
    net: Network,
    prop: Property | PropertyCases,
    implementation: ImplementationOptions,
    options: VerifyOptions,
    name: str = "",
    on_stage: Callable[[str], None] | None = None,
) -> VerificationRecord:
    """Verify `prop`: a `Property` as `verify_property` does; a `PropertyCases` case by case within
    `options.limits.timeout_s` (module docstring). Never raises for a verdict-worthy failure."""
    if isinstance(prop, Property):
        return verify_property(net, prop, implementation, options, name, on_stage)
    run = _CaseRun(net, prop, implementation, options, name or f"{net.name}-{prop.name}", on_stage)
    run.run()
    return run.record()


class _CaseRun:
    """The state of one property of cases being verified: what each case answered so far."""

    def __init__(self, net, prop: PropertyCases, implementation, options: VerifyOptions, name: str, on_stage):
        self.net, self.prop, self.implementation, self.options = net, prop, implementation, options
        self.name, self.on_stage = name, on_stage
        self.started = time.perf_counter()
        self.deadline = self.started + options.limits.timeout_s
        self.qnet = _implementation(net, implementation, options)
        self.records: dict[int, VerificationRecord] = {}
        self.budgets: dict[int, float] = {}
        screening = Screening(self.qnet, prop.cases, self.deadline) if self.qnet is not None else None
        self.screened: dict[int, float] = dict(screening.settled) if screening else {}  # case -> seconds
        self.warnings: list[str] = screening.warnings() if screening else []  # the screened cases'

    def run(self) -> None:
        """Every case, then the timed-out ones again (module docstring); stops at an UNSAFE, or at
        an ERROR of the implementation itself (every case would give it)."""
        order = list(range(len(self.prop.cases)))
        for attempt in (1, 2):
            todo = (
                order
                if attempt == 1
                else [k for k in order if k in self.records and _timed_out(self.records[k])]
            )
            left = sum(
                1 for k in todo if k not in self.screened
            )  # the cases still to go through the pipeline
            for index in todo:
                if attempt == 1 and index in self.screened:
                    continue
                left -= 1
                if attempt == 1 and self.screen(index):
                    continue
                remaining = self.deadline - time.perf_counter()
                share = remaining / (left + 1)
                budget = share if attempt == 2 else max(share, min(remaining, MIN_CASE_S))
                if remaining <= 0 or (attempt == 2 and budget < RETRY_GAIN * self.budgets[index]):
                    break
                self.budgets[index] = budget
                status = self.verify(index, budget)
                if status is Status.UNSAFE or (status is Status.ERROR and self.qnet is None):
                    return

    def screen(self, index: int) -> bool:
        """Settled now by the symbolic bounds of its boxes (the interval level was asked already)?"""
        if self.qnet is None or time.perf_counter() >= self.deadline:
            return False
        started = time.perf_counter()
        warnings = screen(self.qnet, self.prop.cases[index], symbolic_only=True)
        if warnings is None:
            return False
        self.screened[index] = time.perf_counter() - started
        self.warnings.extend(warnings)
        return True

    def verify(self, index: int, budget: float) -> Status:
        options = replace(self.options, limits=replace(self.options.limits, timeout_s=budget))
        case_name = f"{self.name}.case{index + 1}"
        self.records[index] = verify_property(
            self.net, self.prop.cases[index], self.implementation, options, case_name, self.on_stage
        )
        return self.records[index].status

    def record(self) -> VerificationRecord:
        base = _base(self.net, self.qnet, self.implementation, self.options)
        return _combined(self.prop, self.name, self.records, self.screened, self.warnings, self.started, base)


def _implementation(net: Network, implementation: ImplementationOptions, options: VerifyOptions):
    """The quantized network every case shares, or None when it cannot be made (the first case's
    pipeline then says why, in an ERROR record)."""
    try:
        check_semantics(options, isinstance(implementation.number, FloatFormat), str(implementation.number))
        return quantize_network(net, implementation)
    except QverifyError:
        return None


class Screening:
    """The interval level of the screening (module docstring) for every case at once, a batch of
    cases at a time until `deadline`: which cases it settles (with the seconds each took, its share
    of the whole) and the input bounds of theirs that moved to a representable value."""

    BATCH_PRODUCTS = 2_000_000  # boxes per batch x the widest layer's products (fixed point's memory)
    FLOAT_BATCH = 256  # boxes per batch in float: a few ms each, so the deadline is looked at often

    def __init__(self, qnet: QuantizedNetwork, cases: tuple[Property, ...], deadline: float) -> None:
        started = time.perf_counter()
        self.qnet = qnet
        self.moved = 0
        self.beyond: list[str] = []  # fixed point: boxes beyond the word range (as the pipeline warns)
        widest = max((layer.n_out * layer.n_in for layer in qnet.layers), default=1)
        step = max(1, self.BATCH_PRODUCTS // widest) if qnet.is_fixed else self.FLOAT_BATCH
        settled: list[int] = []
        for first in range(0, len(cases), step):
            if time.perf_counter() >= deadline:
                break
            settled += self._batch(cases, range(first, min(first + step, len(cases))))
        share = (time.perf_counter() - started) / max(1, len(cases))
        self.settled = {index: share for index in settled}

    def _batch(self, cases: tuple[Property, ...], indices: range) -> list[int]:
        """The cases of `indices` whose every box's interval bounds refute every unsafe clause."""
        qnet = self.qnet
        owners, boxes = [], []
        for index in indices:
            try:
                converted = [input_box(qnet, box) for box in cases[index].boxes]
            except QverifyError:
                continue
            owners += [index] * len(converted)
            boxes += converted
        if not boxes:
            return []
        lo, hi = np.stack([box.lo for box, _ in boxes]), np.stack([box.hi for box, _ in boxes])
        layers = implementation_bounds_batch(qnet, lo, hi)
        overflow = np.zeros(len(boxes), dtype=bool)
        if qnet.is_fixed:
            overflow = np.any([np.any(layer.may_overflow, axis=1) for layer in layers], axis=0)
        last = layers[-1]
        refuted: dict[int, bool] = {}
        for row, owner in enumerate(owners):
            low, high = last.post_lo[row], last.post_hi[row]
            ok = not overflow[row] and bool(np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
            refuted[owner] = (
                refuted.get(owner, True) and ok and _outputs_refute(qnet, cases[owner], low, high)
            )
        settled = [index for index, ok in refuted.items() if ok]
        self.moved += sum(moved for owner, (_, moved) in zip(owners, boxes) if refuted[owner])
        for index in settled:
            self.beyond += _beyond_words(qnet, cases[index])
        return settled

    def warnings(self) -> list[str]:
        moved = moved_bounds_note(self.qnet, self.moved)
        return list(dict.fromkeys([*self.beyond, *([moved] if moved else [])]))


def _beyond_words(qnet: QuantizedNetwork, case: Property) -> list[str]:
    """Fixed point: the pipeline's warning for a box beyond the word range (words saturate)."""
    if not qnet.is_fixed:
        return []
    fmt: FixedFormat = qnet.number  # type: ignore[assignment]
    low, high = Fraction(fmt.min_q, fmt.scale), Fraction(fmt.max_q, fmt.scale)
    return [
        warning
        for box in case.boxes
        if min(box.lo) < low or max(box.hi) > high
        for warning in overflow_warnings(qnet, box.lo_array(), box.hi_array())
        if "range" in warning
    ]


def screen(qnet: QuantizedNetwork, case: Property, symbolic_only: bool = False) -> tuple[str, ...] | None:
    """Do the invariants the case's harness would assume exclude its unsafe set (module docstring)?
    The warnings the pipeline would give the case when they do; None whenever they cannot tell, or
    cannot be computed. Interval bounds first (~6 ms a case of nn4sys' lindex, where they settle 195
    of 200), the symbolic ones (~40 ms) only when those leave the case open (`symbolic_only`: the
    interval level was asked already, by `Screening`)."""
    for symbolic in (True,) if symbolic_only else (False, True):
        try:
            result = compute_bounds(qnet, case, IntervalMethod.BUILTIN, symbolic=symbolic)
        except QverifyError:
            return None
        if _refutes(qnet, case, result):
            warnings = [
                w for box in case.boxes for w in overflow_warnings(qnet, box.lo_array(), box.hi_array())
            ]
            moved = input_bounds_moved(qnet, case)
            return (*warnings, *result.warnings, *([moved] if moved else []))
    return None


def _refutes(qnet: QuantizedNetwork, case: Property, result: BoundsResult) -> bool:
    if result.bounds is None:
        return False
    layers = result.bounds.layers
    if qnet.is_fixed and any(np.any(layer.may_overflow) for layer in layers):
        return False
    last = layers[-1]
    if not (np.all(np.isfinite(last.post_lo)) and np.all(np.isfinite(last.post_hi))):
        return False
    return _outputs_refute(qnet, case, last.post_lo, last.post_hi)


def _outputs_refute(qnet: QuantizedNetwork, case: Property, low: np.ndarray, high: np.ndarray) -> bool:
    """Do outputs within [low, high] (the implementation's units) miss every unsafe clause?"""
    lows, highs = qnet.output_reals(low), qnet.output_reals(high)
    return all(any(_refuted(atom, lows, highs) for atom in clause.atoms) for clause in case.unsafe.clauses)


def _refuted(atom: Atom, lows: list[Fraction], highs: list[Fraction]) -> bool:
    """Can no output vector within [lows, highs] satisfy `atom`? (exact interval evaluation)"""
    low = high = atom.constant
    for index, coefficient in atom.terms:
        ends = (coefficient * lows[index], coefficient * highs[index])
        low, high = low + min(ends), high + max(ends)
    return not (
        atom.relation.holds(high) if atom.relation in (Relation.GE, Relation.GT) else atom.relation.holds(low)
    )


def _base(net: Network, qnet, implementation: ImplementationOptions, options: VerifyOptions) -> dict:
    """The record's fields that do not depend on what the cases answered."""
    return {
        "network": net.source or net.name,
        "network_digest": net.digest(),
        "implementation": implementation.key(),
        "options": options.key(),
        "number_format": str(qnet.number) if qnet is not None else str(implementation.number),
        "lut_eps": qnet.lut_error_bound if qnet is not None else 0.0,
    }


def _timed_out(record: VerificationRecord) -> bool:
    return record.status is Status.UNKNOWN and record.reason.startswith("timeout")


def _combined(
    prop: PropertyCases,
    name: str,
    records: dict[int, VerificationRecord],
    screened: dict[int, float],
    screen_warnings: list[str],
    started: float,
    base: dict,
) -> VerificationRecord:
    """The property's record from its cases' (module docstring)."""
    outcomes = tuple(
        CaseOutcome(prop.describe(index), Status.SAFE, "", round(screened[index], 6), SCREENED)
        if index in screened
        else _outcome(prop, index, records.get(index))
        for index in range(len(prop.cases))
    )
    unsafe = [index for index, record in records.items() if record.status is Status.UNSAFE]
    open_cases = [outcome for outcome in outcomes if outcome.status is not Status.SAFE]
    if unsafe:
        deciding = records[unsafe[0]]
        status, reason = Status.UNSAFE, deciding.reason
    elif not open_cases:
        slowest = max(records, key=lambda index: pipeline_seconds(records[index].times_s), default=None)
        deciding = records[slowest] if slowest is not None else None
        status, reason = Status.SAFE, ""
    else:
        errors = [outcome for outcome in open_cases if outcome.status is Status.ERROR]
        first = errors[0] if errors else open_cases[0]
        deciding = records.get(outcomes.index(first))
        status = Status.ERROR if errors else Status.UNKNOWN
        reason = _open_reason(prop, open_cases, first)
    example = deciding.counterexample if deciding is not None else None
    if example is not None:
        example = replace(example, violated=f"{prop.describe(unsafe[0])}: {example.violated}")
    times = _summed_times(records.values())
    if screened:
        times["screening"] = round(sum(screened.values()), 6)
    times[PIPELINE] = round(time.perf_counter() - started, 6)
    sample = deciding or next(iter(records.values()), None)
    return VerificationRecord(
        name=name,
        property=prop.name,
        **base,
        status=status,
        reason=reason,
        verdict=deciding.verdict if deciding is not None else None,
        counterexample=example,
        times_s=times,
        peak_memory_mb=max((record.peak_memory_mb for record in records.values()), default=0.0),
        warnings=tuple(dict.fromkeys((*screen_warnings, *(w for r in records.values() for w in r.warnings)))),
        invariants=sample.invariants if sample else IntervalMethod.BUILTIN.value,
        harness=deciding.harness if deciding is not None else "",
        origins=sample.origins if sample else {},
        cases=outcomes,
    )


def _outcome(prop: PropertyCases, index: int, record: VerificationRecord | None) -> CaseOutcome:
    label = prop.describe(index)
    if record is None:
        return CaseOutcome(label, Status.UNKNOWN, "timeout: not run (the time ran out)", 0.0, "")
    decided_by = record.verdict.decided_by if record.verdict is not None else ""
    return CaseOutcome(label, record.status, record.reason, pipeline_seconds(record.times_s), decided_by)


def _open_reason(prop: PropertyCases, open_cases: list[CaseOutcome], first: CaseOutcome) -> str:
    """`timeout: 3 of 200 cases undecided (case 17 of 200 (...): timeout ...)` when every open case
    ran out of time (VNN-COMP's runner reads a leading `timeout`), else the first problem's words."""
    count = f"{len(open_cases)} of {len(prop.cases)} cases undecided"
    if all(outcome.reason.startswith("timeout") for outcome in open_cases):
        return f"timeout: {count} ({first.label}: {first.reason})"
    return f"{count}: {first.label}: {first.reason}"


def _summed_times(records) -> dict[str, float]:
    """Each stage's seconds summed over the cases that ran (`pipeline` is set by the caller)."""
    times: dict[str, float] = {}
    for record in records:
        for stage, seconds in record.times_s.items():
            times[stage] = round(times.get(stage, 0.0) + seconds, 6)
    return times
