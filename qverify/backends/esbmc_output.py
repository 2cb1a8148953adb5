"""Read what ESBMC prints: verdict, counterexample (the nondet values), violated assertion, times, solver.

Pure functions, no process. `parse_esbmc_output(text, n_inputs, is_float, sites)` never raises on
garbage: it answers ERROR (or UNKNOWN for resource exhaustion) with the reason.

The console trace is the counterexample channel. ESBMC 7.x/8.x print it from `show_goto_trace` and
`counterexample_value` (src/goto-symex/goto_trace.cpp): one state per visible assignment, the value
followed by its bit pattern in groups of 8, then the violated property (location, comment, guard):

    [Counterexample]

    State 5 file harness.c line 91 column 5 function main thread 0
    ----------------------------------------------------
      x[0] = 61 (00000000 00000000 00000000 00111101)

    State 26 file harness.c line 96 column 5 function main thread 0
    ----------------------------------------------------
    Violated property:
      file harness.c line 96 column 5 function main
      unsafe clause 1: (Y_0 >= 0.29999999999999999)
      (signed long int)(y[0]) < 77

    VERIFICATION FAILED

Float values are printed as a 7-digit decimal (`-2.524355e-29f`, or `-0.000000f` for a tiny
negative) plus the IEEE bit pattern: the bit pattern is exact, so it is what is read. ESBMC's witness
files are not used: in 8.4 the YAML witness carries no assumption for a nondet array element, the
GraphML one prints floats with 8 significant digits and the test-case XML with 7 (see docs/esbmc.md).

Which states are the nondet values: with `sites` (from `find_nondet_sites` on the harness source),
the states at the lines of the `lhs = nondet_T();` statements, in trace order. Without, the first
scalar-valued states of `main` (a local array's declaration shows as an aggregate `x = { 0, 0 }`
and is skipped). Both hold for qverify's harnesses (`x[0] = nondet_int();`) and for hand-written
ones (`int v0 = nondet_int();`).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from types import MappingProxyType

from qverify.backends.base import Status, Value

__all__ = [
    "EsbmcOutcome",
    "NondetSite",
    "Trace",
    "TraceState",
    "find_nondet_sites",
    "parse_esbmc_output",
    "parse_esbmc_version",
    "read_trace",
]


@dataclass(frozen=True, slots=True)
class NondetSite:
    """A `lhs = nondet_T();` statement of a C file: where ESBMC's trace shows a nondet value."""

    file: str  # base name of the C file, as ESBMC's trace names it (any directory is ignored)
    line: int
    lhs: str  # e.g. "x[0]" or "v0"
    kind: str  # the nondet_ suffix: "int", "float", "double", ...

    def __str__(self) -> str:
        return f"{self.lhs} at {self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class TraceState:
    """One assignment of the counterexample trace."""

    number: int
    file: str
    line: int | None
    function: str  # "" for global initialisations
    lhs: str
    value_text: str  # the printed value without its bit pattern, e.g. "61", "-2.524355e-29f"
    bits: str  # the bit pattern without spaces ("" when none is printed)

    @property
    def is_aggregate(self) -> bool:
        return self.value_text.startswith("{")

    def where(self) -> str:
        return (
            f"state {self.number} ({self.file}:{self.line})"
            if self.line is not None
            else f"state {self.number}"
        )


@dataclass(frozen=True, slots=True)
class EsbmcOutcome:
    """What one ESBMC run said. `counterexample` holds the nondet values in call order (UNSAFE only)."""

    status: Status
    counterexample: tuple[Value, ...] | None = None
    violated: str = ""  # the assertion's comment (qverify's message), e.g. "unsafe clause 1: ..."
    violated_expression: str = ""  # the guard as ESBMC prints it, e.g. "h2_2 > h2_1"
    violated_location: str = ""  # e.g. "file harness.c line 96 column 5 function main"
    version: str = ""  # e.g. "8.2.0"
    solver: str = ""  # normalised, e.g. "yices 2.6.4", "z3 4.13.3"
    times_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    counts: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    reason: str = ""  # why UNKNOWN or ERROR


class _Garbled(Exception):
    """A trace line that cannot be read; becomes an ERROR outcome."""


# ---------------------------------------------------------------------------------------------
# Finding the nondet statements of a C file

# example: "    x[3] = nondet_int();", "  int v0 = nondet_int();", "x[0] = (float)nondet_float();"
_NONDET_ASSIGNMENT = re.compile(
    r"(?P<lhs>[A-Za-z_]\w*(?:\s*\[[^\]\n]*\])*)\s*=\s*(?:\(\s*[A-Za-z_][\w\s]*\)\s*)?"
    r"nondet_(?P<kind>\w+)\s*\(\s*(?:void)?\s*\)"
)


def _blank_comments_and_strings(source: str) -> str:
    """The source with comments and string/char literals replaced by spaces (newlines kept, so line
    numbers still hold): a nondet call named in a comment or a message is not a nondet call."""
    out = list(source)
    i, n = 0, len(source)
    while i < n:
        two = source[i : i + 2]
        if two == "/*":
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif two == "//":
            end = source.find("\n", i)
            end = n if end < 0 else end
        elif source[i] in "\"'":
            quote, end = source[i], i + 1
            while end < n and source[end] not in (quote, "\n"):
                end += 2 if source[end] == "\\" else 1
            end = min(end + 1, n)
        else:
            i += 1
            continue
        for k in range(i, end):
            if out[k] != "\n":
                out[k] = " "
        i = end
    return "".join(out)


def find_nondet_sites(source: str, file_name: str) -> tuple[NondetSite, ...]:
    """The `lhs = nondet_T();` statements of C `source` (the file ESBMC checks), in source order.

    >>> find_nondet_sites("int main(void) {\\n  int v0 = nondet_int(); /* x = nondet_int() */\\n}", "a.c")
    (NondetSite(file='a.c', line=2, lhs='v0', kind='int'),)
    """
    name = PurePath(file_name).name
    sites = []
    for number, line in enumerate(_blank_comments_and_strings(source).split("\n"), start=1):
        for match in _NONDET_ASSIGNMENT.finditer(line):
            lhs = re.sub(r"\s+", "", match["lhs"])
            sites.append(NondetSite(name, number, lhs, match["kind"]))
    return tuple(sites)


# ---------------------------------------------------------------------------------------------
# The counterexample trace

# example: "State 5 file harness.c line 91 column 5 function main thread 0"
_STATE_HEADER = re.compile(r"^State (?P<number>\d+)\b(?P<location>.*)$")
# example: "file iris_L2_R5_w8.c line 35 column 3 function main thread 0" (parts are optional)
_LOC_FILE = re.compile(r"\bfile (?P<file>.+?)(?= line \d| column \d| function | thread \d|$)")
_LOC_LINE = re.compile(r"\bline (?P<line>\d+)\b")
_LOC_FUNCTION = re.compile(r"\bfunction (?P<function>\S+)")
_DASHES = re.compile(r"^-{8,}\s*$")
# example: "  x[0] = 61 (00000000 00000000 00000000 00111101)"; "  y[(signed long int)j] = 763 (...)"
_ASSIGNMENT = re.compile(r"^  (?P<lhs>\S.*?) = (?P<value>.*)$")
# example: "-2.524355e-29f (10010000 00000000 00000000 00000000)" -> value, bit pattern
_VALUE_BITS = re.compile(r"^(?P<value>.*?)\s*\((?P<bits>[01]{1,8}(?: [01]{1,8})*)\)\s*$")
_LONGEST_SCALAR = 2000  # a longer value is an aggregate or garbage: its bit pattern is not looked for
_COUNTEREXAMPLE = "[Counterexample]"
_VIOLATED = "Violated property:"


@dataclass(frozen=True, slots=True)
class Trace:
    """A counterexample trace as printed."""

    seen: bool  # a "[Counterexample]" line was found
    states: tuple[TraceState, ...]
    violated: tuple[str, ...] | None  # the raw lines of the "Violated property:" block, if any


def _location(text: str) -> tuple[str, int | None, str]:
    file_match = _LOC_FILE.search(text)
    line_match = _LOC_LINE.search(text)
    function_match = _LOC_FUNCTION.search(text)
    return (
        file_match["file"].strip() if file_match else "",
        int(line_match["line"]) if line_match else None,
        function_match["function"] if function_match else "",
    )


def _state(number: int, location: str, lhs: str, value: str) -> TraceState:
    file, line, function = _location(location)
    value = value.strip()
    bits = ""
    with_bits = (
        _VALUE_BITS.match(value) if len(value) <= _LONGEST_SCALAR and not value.startswith("{") else None
    )
    if with_bits:
        value, bits = with_bits["value"].strip(), with_bits["bits"].replace(" ", "")
    return TraceState(number, file, line, function, lhs.strip(), value, bits)


def read_trace(text: str) -> Trace:
    """The states of the first counterexample trace in `text` and its violated-property block."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == _COUNTEREXAMPLE)
    except StopIteration:
        start = -1
    states: list[TraceState] = []
    violated: tuple[str, ...] | None = None
    header: tuple[int, str] | None = None
    pending: list[str] | None = None  # [lhs, value] of the assignment being read (values may wrap)

    def flush() -> None:
        nonlocal pending
        if pending is not None and header is not None:
            states.append(_state(header[0], header[1], pending[0], pending[1]))
        pending = None

    for index in range(start + 1 if start >= 0 else len(lines), len(lines)):
        line = lines[index]
        if line.strip() == _VIOLATED:
            flush()
            block = []
            for following in lines[index + 1 :]:
                if following == "" or following.startswith(("VERIFICATION ", "** ")):
                    break
                block.append(following)
            violated = tuple(block)
            break
        state_header = _STATE_HEADER.match(line)
        if state_header:
            flush()
            header = (int(state_header["number"]), state_header["location"])
            continue
        if _DASHES.match(line):
            continue
        assignment = _ASSIGNMENT.match(line)
        if assignment and header is not None:
            flush()
            pending = [assignment["lhs"], assignment["value"]]
        elif pending is not None and line.startswith("    "):
            pending[1] += " " + line.strip()  # a long aggregate value continues on the next line
        else:
            flush()
    flush()
    return Trace(start >= 0, tuple(states), violated)


def _violated_parts(block: Sequence[str]) -> tuple[str, str, str]:
    """(comment, expression, location) of a "Violated property:" block.

    The block is: the location, optionally a stack or call trace, the comment, the guard; the
    comment is the line before the guard (an assertion without a message prints an empty one).
    """
    body = list(block)
    location = ""
    if body and _LOC_LINE.search(body[0]) and body[0].strip().startswith("file "):
        location = body.pop(0).strip()
    if len(body) >= 2:
        return body[-2].strip(), body[-1].strip(), location
    if len(body) == 1:
        return body[0].strip(), "", location
    return "", "", location


# ---------------------------------------------------------------------------------------------
# Values

# example: "61", "-378", "4294967295u", "7l"
_INT_TEXT = re.compile(r"^[+-]?\d+[uUlL]*$")
# example: "-2.524355e-29f", "1.953125e-3", "-0.000000f", "5.0", "+INFINITY", "-NAN"
_FLOAT_TEXT = re.compile(r"^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFlL]?|INFINITY|INF|NAN)$")


def _float_from_text(text: str) -> float | None:
    if not _FLOAT_TEXT.match(text):
        return None
    body = text.lstrip("+-")
    if body == "NAN":
        return math.nan
    if body.startswith("INF"):
        return -math.inf if text.startswith("-") else math.inf
    return float(text.rstrip("fFlL"))


def _float_from_bits(bits: str) -> float | None:
    if len(bits) == 32:
        return struct.unpack(">f", int(bits, 2).to_bytes(4, "big"))[0]
    if len(bits) == 64:
        return struct.unpack(">d", int(bits, 2).to_bytes(8, "big"))[0]
    return None


def _close(decimal: float, exact: float) -> bool:
    """Does ESBMC's 7-digit decimal (`%e`, or `-0.000000` for a tiny value) print `exact`?"""
    if decimal == 0.0:
        return abs(exact) < 5e-7
    return abs(decimal - exact) <= 1e-5 * max(abs(decimal), abs(exact))


def _float_value(state: TraceState) -> float:
    """The exact value from the bit pattern (IEEE single or double), else from the decimal."""
    decimal = _float_from_text(state.value_text)
    exact = _float_from_bits(state.bits) if state.bits else None
    if exact is None:
        if decimal is None:
            raise _Garbled(
                f"{state.where()}: cannot read the float value '{state.value_text}' of {state.lhs}"
            )
        return decimal
    if decimal is not None and math.isfinite(decimal) and math.isfinite(exact) and not _close(decimal, exact):
        raise _Garbled(
            f"{state.where()}: the value '{state.value_text}' of {state.lhs} disagrees with its bit pattern"
        )
    return exact


def _int_value(state: TraceState) -> int:
    """The decimal value, cross-checked against the two's-complement bit pattern when printed."""
    text = state.value_text
    decimal = int(text.rstrip("uUlL")) if _INT_TEXT.match(text) else None
    if state.bits:
        unsigned = int(state.bits, 2)
        signed = unsigned - (1 << len(state.bits)) if state.bits[0] == "1" else unsigned
        if decimal is None:
            return signed
        if decimal not in (signed, unsigned):
            raise _Garbled(
                f"{state.where()}: the value '{text}' of {state.lhs} disagrees with its bit pattern"
            )
        return decimal
    if decimal is None:
        raise _Garbled(f"{state.where()}: cannot read the integer value '{text}' of {state.lhs}")
    return decimal


# ---------------------------------------------------------------------------------------------
# Choosing the nondet states

_INDEXED = re.compile(r"^(?P<base>[A-Za-z_]\w*)\[(?P<index>\d+)[uUlL]*\]$")
_SLICING_HINT = "a sliced or cut trace? run ESBMC without slicing (--no-slice)"


def _nondet_states_at_sites(
    states: Sequence[TraceState], n_inputs: int, sites: Sequence[NondetSite]
) -> tuple[list[TraceState], str]:
    wanted = {(site.file, site.line) for site in sites}
    chosen = [
        state
        for state in states
        if state.line is not None
        and (PurePath(state.file).name, state.line) in wanted
        and not state.is_aggregate
    ]
    if len(chosen) >= n_inputs:
        return chosen[:n_inputs], ""
    found_lines = {state.line for state in chosen}
    missing = [str(site) for site in sites if site.line not in found_lines]
    detail = (
        f"missing {', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}"
        if missing
        else "a nondet call in a loop?"
    )
    return chosen, f"{len(chosen)} of {n_inputs} nondet values found ({detail}); {_SLICING_HINT}"


def _normalised_lhs(lhs: str) -> str:
    """ "x[(signed long int)0l]" -> "x[0]": casts, spaces and integer suffixes dropped."""
    lhs = re.sub(r"\((?:signed|unsigned|long|int|short|char|\s)+\)", "", lhs)
    return re.sub(r"(\d+)[uUlL]+\b", r"\1", lhs.replace(" ", ""))


def _nondet_states_in_main(states: Sequence[TraceState], n_inputs: int) -> tuple[list[TraceState], str]:
    chosen = [state for state in states if state.function == "main" and not state.is_aggregate][:n_inputs]
    first = _INDEXED.match(_normalised_lhs(chosen[0].lhs)) if chosen else None
    if first:  # x[0], x[1], ...: an element out of order means that a state is missing
        for position, state in enumerate(chosen):
            if _normalised_lhs(state.lhs) != f"{first['base']}[{position}]":
                return chosen[:position], (
                    f"expected {first['base']}[{position}] as nondet value {position + 1} of {n_inputs}, "
                    f"found {state.lhs} at {state.where()}; {_SLICING_HINT}"
                )
    if len(chosen) < n_inputs:
        return chosen, f"{len(chosen)} of {n_inputs} nondet values found in main; {_SLICING_HINT}"
    return chosen, ""


# ---------------------------------------------------------------------------------------------
# Times, counts, version, solver

# Each pattern's first group is seconds; the named groups that follow are counts.
_TIMES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # example: "GOTO program creation time: 0.422s"
    ("goto_program", re.compile(r"^GOTO program creation time: ([\d.]+)s", re.MULTILINE)),
    # example: "Interval Analysis time: 0.004s"
    ("interval_analysis", re.compile(r"^Interval Analysis time: ([\d.]+)s", re.MULTILINE)),
    # example: "GOTO program processing time: 0.005s"
    ("goto_processing", re.compile(r"^GOTO program processing time: ([\d.]+)s", re.MULTILINE)),
    # example: "Symex completed in: 0.030s (817 assignments)"
    (
        "symex",
        re.compile(
            r"^Symex completed in: ([\d.]+)s(?: \((?P<symex_assignments>\d+) assignments\))?", re.MULTILINE
        ),
    ),
    # example: "Caching time: 0.000s (removed 0 assertions)"
    (
        "caching",
        re.compile(
            r"^Caching time: ([\d.]+)s(?: \(removed (?P<cached_assertions>\d+) assertions\))?", re.MULTILINE
        ),
    ),
    # example: "Slicing time: 0.002s (removed 173 assignments)"
    (
        "slicing",
        re.compile(
            r"^Slicing time: ([\d.]+)s(?: \(removed (?P<sliced_assignments>\d+) assignments\))?", re.MULTILINE
        ),
    ),
    # example: "Encoding to solver time: 0.037s"
    ("encoding", re.compile(r"^Encoding to solver time: ([\d.]+)s", re.MULTILINE)),
    # example: "Runtime decision procedure: 12.475s"
    ("decision_procedure", re.compile(r"^Runtime decision procedure: ([\d.]+)s", re.MULTILINE)),
    # example: "BMC program time: 12.545s"
    ("bmc_program", re.compile(r"^BMC program time: ([\d.]+)s", re.MULTILINE)),
)
# example: "Generated 2 VCC(s), 2 remaining after simplification (644 assignments)"
_VCCS = re.compile(
    r"^Generated (?P<vccs>\d+) VCC\(s\), (?P<vccs_remaining>\d+) remaining after simplification"
    r"(?: \((?P<vcc_assignments>\d+) assignments\))?",
    re.MULTILINE,
)
# example: "ESBMC version 8.2.0 64-bit x86_64 linux"
_VERSION = re.compile(r"ESBMC version (?P<version>\d+(?:\.\d+)*)")
# example: "Solving with solver Yices version 2.6.4", "Solving with solver Z3 v4.13.3"
_SOLVER = re.compile(
    r"^Solving with solver (?P<name>\S+)(?:\s+(?:version\s+)?v?(?P<version>\S+))?\s*$", re.MULTILINE
)
# example: "VERIFICATION SUCCESSFUL"
_VERDICT = re.compile(r"^VERIFICATION (?P<verdict>SUCCESSFUL|FAILED|UNKNOWN)\s*$", re.MULTILINE)


def _times_and_counts(text: str) -> tuple[dict[str, float], dict[str, int]]:
    """Per-phase seconds (summed when a phase repeats, as in k-induction) and counts."""
    times: dict[str, float] = {}
    counts: dict[str, int] = {}

    def count(match: re.Match[str]) -> None:
        for key, value in match.groupdict().items():
            if value is not None:
                counts[key] = counts.get(key, 0) + int(value)

    for key, pattern in _TIMES:
        for match in pattern.finditer(text):
            try:
                seconds = float(match.group(1))
            except ValueError:  # "1.2.3s" in a garbled line
                continue
            times[key] = times.get(key, 0.0) + seconds
            count(match)
    for match in _VCCS.finditer(text):
        count(match)
    return times, counts


def parse_esbmc_version(text: str) -> tuple[int, ...] | None:
    """(8, 2, 0) from "ESBMC version 8.2.0 64-bit x86_64 linux" anywhere in `text`, else None."""
    match = _VERSION.search(text)
    return tuple(int(part) for part in match["version"].split(".")) if match else None


def _solver(text: str) -> str:
    matches = list(_SOLVER.finditer(text))
    if not matches:
        return ""
    last = matches[-1]
    return f"{last['name'].lower()} {last['version']}" if last["version"] else last["name"].lower()


# ---------------------------------------------------------------------------------------------
# Failures without a verdict

# example: "ERROR: Out of memory", "terminate called after throwing an instance of 'std::bad_alloc'"
_OUT_OF_MEMORY = re.compile(r"Out of memory|out of memory|std::bad_alloc|Cannot allocate memory|MemoryError")
# example: "ERROR: Timed out" (ESBMC's own --timeout)
_TIMED_OUT = re.compile(r"^(?:ERROR: )?Timed out\s*$", re.MULTILINE)
# example: "ERROR: The yices solver has not been built into this version of ESBMC, sorry"
_SOLVER_MISSING = re.compile(r"The (?P<solver>\S+) solver has not been built into this version of ESBMC")
# example: "ERROR: Invalid command line: unrecognised option '--frobnicate'"
_BAD_COMMAND_LINE = re.compile(r"Invalid command line: (?P<message>.*)$", re.MULTILINE)
# example: "bad/harness.c:95:25: error: expected expression"
_C_ERROR = re.compile(r"^(?P<where>[^\s:][^:\n]*:\d+:\d+): (?:fatal )?error: (?P<message>.*)$", re.MULTILINE)
# example: "ERROR: failed to open input file nonexist.c"
_ERROR_LINE = re.compile(r"^ERROR: (?P<message>.*\S)\s*$", re.MULTILINE)


def _clip(text: str, limit: int = 160) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in text.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failure_without_verdict(text: str, trace: Trace) -> tuple[Status, str]:
    """Why ESBMC stopped before printing a verdict: UNKNOWN for resources, ERROR otherwise."""
    if not text.strip():
        return Status.ERROR, "esbmc printed nothing"
    if _OUT_OF_MEMORY.search(text):
        return Status.UNKNOWN, f"esbmc ran out of memory ({_clip(_OUT_OF_MEMORY.search(text).group(0))})"
    if _TIMED_OUT.search(text):
        return Status.UNKNOWN, "esbmc stopped at its own time limit (Timed out)"
    missing = _SOLVER_MISSING.search(text)
    if missing:
        return Status.ERROR, (
            f"this esbmc was built without the {_clip(missing['solver'], 40)} solver: choose another one "
            "(`esbmc --list-solvers` names those built in)"
        )
    bad_command = _BAD_COMMAND_LINE.search(text)
    if bad_command:
        return Status.ERROR, (
            f"esbmc rejected its command line: {_clip(bad_command['message'])} "
            "(an option this ESBMC version does not know?)"
        )
    if "PARSING ERROR" in text:
        first = _C_ERROR.search(text)
        detail = f": {_clip(first['where'])}: {_clip(first['message'])}" if first else ""
        return Status.ERROR, f"esbmc could not parse the C program{detail}"
    errors = [_clip(match["message"]) for match in _ERROR_LINE.finditer(text)]
    if errors:
        return Status.ERROR, "esbmc failed: " + "; ".join(dict.fromkeys(errors[:3]))
    if trace.seen:
        last = f" after {trace.states[-1].where()}" if trace.states else ""
        return Status.ERROR, f"esbmc output ends before a verdict (cut inside the counterexample trace{last})"
    last_line = next((line for line in reversed(text.split("\n")) if line.strip()), "")
    return Status.ERROR, f"esbmc output ends before a verdict (last line: '{_clip(last_line, 100)}')"


# ---------------------------------------------------------------------------------------------
# The parser


def _failed_outcome(
    trace: Trace, n_inputs: int, is_float: bool, sites: Sequence[NondetSite] | None
) -> tuple[Status, tuple[Value, ...] | None, str]:
    """(status, counterexample, reason) for a VERIFICATION FAILED output."""
    if not trace.seen:
        return (
            Status.ERROR,
            None,
            (
                "esbmc reported VERIFICATION FAILED without a counterexample trace "
                "(is --result-only or --cex-only among the extra arguments?)"
            ),
        )
    if sites:
        chosen, problem = _nondet_states_at_sites(trace.states, n_inputs, sites)
    else:
        chosen, problem = _nondet_states_in_main(trace.states, n_inputs)
    if problem:
        return Status.ERROR, None, f"counterexample trace incomplete: {problem}"
    try:
        values = tuple(_float_value(state) if is_float else _int_value(state) for state in chosen)
    except _Garbled as garbled:
        return Status.ERROR, None, f"garbled counterexample trace: {garbled}"
    return Status.UNSAFE, values, ""


def parse_esbmc_output(
    text: str, n_inputs: int, is_float: bool, sites: Iterable[NondetSite] | None = None
) -> EsbmcOutcome:
    """Read ESBMC's combined stdout and stderr.

    :returns: SAFE (VERIFICATION SUCCESSFUL); UNSAFE with the first `n_inputs` nondet values of the
        trace (ints, or exact floats when `is_float`) and the violated assertion; UNKNOWN (VERIFICATION
        UNKNOWN, ESBMC out of memory or out of its own time, a loop unwinding bound reached); ERROR
        with the reason otherwise: a C parse error, a solver not built in, a rejected option, an
        output that stops before the verdict, a trace with missing or unreadable nondet values.
        Never raises on malformed text.
    """
    text = text.replace("\x00", "")
    site_list = tuple(sites) if sites is not None else None
    times, counts = _times_and_counts(text)
    version = _VERSION.search(text)
    heard = EsbmcOutcome(  # what every outcome reports, whatever the verdict
        Status.ERROR,
        version=version["version"] if version else "",
        solver=_solver(text),
        times_s=MappingProxyType(times),
        counts=MappingProxyType(counts),
    )
    trace = read_trace(text)
    verdicts = _VERDICT.findall(text)
    if not verdicts:
        status, reason = _failure_without_verdict(text, trace)
        return replace(heard, status=status, reason=reason)
    if verdicts[-1] == "SUCCESSFUL":
        return replace(heard, status=Status.SAFE)
    if verdicts[-1] == "UNKNOWN":
        return replace(heard, status=Status.UNKNOWN, reason="esbmc answered VERIFICATION UNKNOWN")
    comment, expression, location = _violated_parts(trace.violated or ())
    violation = replace(
        heard, violated=comment or expression, violated_expression=expression, violated_location=location
    )
    if comment.startswith("unwinding assertion"):
        reason = f"esbmc reached a loop unwinding bound ({_clip(comment)}): raise it with --unwind"
        return replace(violation, status=Status.UNKNOWN, reason=reason)
    status, counterexample, reason = _failed_outcome(trace, n_inputs, is_float, site_list)
    if status is Status.UNSAFE and trace.violated is None:
        status, counterexample = Status.ERROR, None
        reason = "esbmc's counterexample trace ends before the violated property"
    return replace(violation, status=status, counterexample=counterexample, reason=reason)
