"""Frama-C EVA as an interval analysis of the generated network code (the only module that runs it).

The Frama-C view of a harness (`framac_view`) is the network code qverify generates -- rendered by
`qverify.codegen.render_network` with placeholder invariants, so the injection sites exist -- with
three changes made as text:
1. each injected `__ESBMC_assume` after a neuron's accumulation becomes `qv_fc_pre{L}[j] = acc;`
   and the one after its activation `qv_fc_out{L}[j] = h{L}[j];` (global arrays, one per layer and
   kind; the count of rewritten sites is checked, so a template change cannot go unnoticed);
2. `__ESBMC_assert` (fixed-point overflow under `detect`) and `__ESBMC_assume` get bodies that stop
   the execution with `Frama_C_abort()` when their condition fails, as in the checked program;
3. an entry point `qv_framac_main` sets every input with `Frama_C_interval(lo, hi)` (words),
   `Frama_C_float_interval` or `Frama_C_double_interval` (the box's ends, exact hexadecimal
   literals), calls `qv_network`, and then calls `Frama_C_show_each_qv_pre{L}_{j}(qv_fc_pre{L}[j])`
   and `..._qv_out{L}_{j}(...)` once per neuron, so EVA prints one interval per neuron and kind.
A union of boxes is analysed one box at a time (one view per box); the caller joins the results.

EVA runs with `-machdep x86_64` (gcc's data model), `-eva-precision N` (default 0; -eva-slevel and
-eva-plevel may be set too), `-eva-auto-loop-unroll` at least the largest layer width (so every
neuron is analysed on its own and the writes to the global arrays are strong updates),
`-warn-special-float none` (infinities and NaN are values, not alarms that would cut executions)
and `-float-hex` (floats are printed exactly). Values are parsed from lines such as
`[eva] view.c:812: Frama_C_show_each_qv_pre3_17: [-4494..7033]`: integers `{a}`, `{a; b; c}`,
`[a..b]`, `[a..b],r%m`, `[--..--]`; floats `{0x1.8p-1}`, `[0x1p-2 .. 0x1.8p+1]`, with `-inf`/`+inf`
ends and a `NaN` marker (`... ∪ {NaN}` or `NaN`). A float interval that may hold NaN is given
`[-inf, +inf]` and NaN is recorded (see `FramacResult.may_be_nan`).

Soundness: EVA's intervals hold for every execution without undefined behaviour. The view of a
fixed-point program has none (fxp.h is written so); if EVA reports any alarm, its intervals may
have lost executions and the result is refused (`ToolFailedError`). An unknown version (not 25 or
newer), a crash, a time-out, or an unparseable or missing value is a `ToolFailedError` too, with a
message that says which; a missing executable is a `ToolMissingError`.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.codegen import CProgram, NeuronBounds, render_network
from qverify.codegen.literals import float_literal, int_literal
from qverify.errors import InputError, ToolFailedError, ToolMissingError
from qverify.interrupts import child_dies_with_us
from qverify.invariants.region import InputBox, join_boxes
from qverify.quant import FixedFormat, LayerBounds, QuantizedNetwork
from qverify.tools import executable_stamp

MIN_MAJOR = 25  # Frama-C 25 (Manganese) is the oldest version whose output this parser knows
TESTED_MAJORS = (25,)
VIEW_FILE = "framac_view.c"
INSTALL_HINT = "install it (make setup-framac, or on Debian/Ubuntu apt-get install frama-c-base)"


@dataclass(frozen=True, slots=True)
class FramacOptions:
    """How to run Frama-C EVA (one run per input box)."""

    precision: int = 0  # -eva-precision, 0..11
    slevel: int | None = None  # -eva-slevel (None: as -eva-precision sets it)
    plevel: int | None = None  # -eva-plevel
    timeout_s: float = 600.0  # wall-clock limit of the whole analysis (all boxes)
    executable: str = "frama-c"
    extra_args: tuple[str, ...] = ()
    keep_dir: str | None = None  # keep each box's view and EVA's log here (box1/framac_view.c, box1/eva.log)

    def __post_init__(self) -> None:
        if not 0 <= self.precision <= 11:
            raise InputError(f"Frama-C precision {self.precision}: must be 0..11")
        for name, value in (("slevel", self.slevel), ("plevel", self.plevel)):
            if value is not None and value < 0:
                raise InputError(f"Frama-C {name} {value}: must be >= 0")
        if self.timeout_s <= 0:
            raise InputError(f"Frama-C time limit {self.timeout_s} s: must be positive")


@dataclass(frozen=True, slots=True)
class FramacVersion:
    text: str  # e.g. "25.0-beta (Manganese)"
    major: int
    minor: int


@dataclass(frozen=True, slots=True, eq=False)
class FramacResult:
    """Frama-C's bounds over the region, joined over the boxes (None for an empty region)."""

    bounds: tuple[LayerBounds, ...] | None
    version: FramacVersion
    may_be_nan: bool  # some float neuron may be NaN according to EVA
    warnings: tuple[str, ...]
    time_s: float


def find_framac(options: FramacOptions = FramacOptions()) -> str:
    """The path of the frama-c executable; raises ToolMissingError when it is not installed."""
    path = shutil.which(options.executable)
    if path is None:
        raise ToolMissingError(f"{options.executable} not found: {INSTALL_HINT}")
    return path


_VERSION = re.compile(r"^\s*(\d+)\.(\d+)")  # example: "25.0-beta (Manganese)"


def framac_version(executable: str) -> FramacVersion:
    """`frama-c -version`, parsed; raises ToolFailedError for an unknown or too old version.
    Asked once per executable file (path and modification time) and process: a suite's tasks
    would otherwise each start Frama-C once more just for its version."""
    return _framac_version(executable, executable_stamp(executable))


@functools.lru_cache(maxsize=8)
def _framac_version(executable: str, stamp: int) -> FramacVersion:
    del stamp  # part of the cache key only: a replaced executable is asked again
    try:
        completed = subprocess.run(
            [executable, "-version"], check=False, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolFailedError(f"cannot run '{executable} -version': {error}") from error
    text = completed.stdout.strip().splitlines()[0] if completed.stdout.strip() else ""
    match = _VERSION.match(text)
    if completed.returncode != 0 or match is None:
        raise ToolFailedError(f"unknown Frama-C version: '{executable} -version' printed {text!r}")
    version = FramacVersion(text, int(match.group(1)), int(match.group(2)))
    if version.major < MIN_MAJOR:
        raise ToolFailedError(
            f"Frama-C {text} is too old: qverify needs Frama-C {MIN_MAJOR} (Manganese) or newer"
        )
    return version


# ---------------------------------------------------------------------------------- the view

_PRE_SITE = re.compile(r"__ESBMC_assume\(qv_pre(\d+)_lo\[j\] <= acc && acc <= qv_pre\1_hi\[j\]\);")
_POST_SITE = re.compile(
    r"__ESBMC_assume\(qv_out(\d+)_lo\[j\] <= (\w+)\[j\] && \2\[j\] <= qv_out\1_hi\[j\]\);"
)
_BOUND_ARRAY = re.compile(
    r"^static const qv_num qv_(?:pre|out)\d+_(?:lo|hi)\[\d+\] = \{[^}]*\};\n", re.MULTILINE
)
_NETWORK_DEFINITION = re.compile(r"^void qv_network\(", re.MULTILINE)

_PRIMITIVES = """
/* qverify Frama-C view: a failed assume or assertion ends the execution, as in the checked program. */
void __ESBMC_assume(_Bool condition)
{
    if (!condition) {
        Frama_C_abort();
    }
}

void __ESBMC_assert(_Bool condition, const char *message)
{
    (void)message;
    if (!condition) {
        Frama_C_abort();
    }
}
"""


def _placeholder_bounds(qnet: QuantizedNetwork) -> NeuronBounds:
    dtype = np.int64 if qnet.is_fixed else qnet.number.dtype  # type: ignore[union-attr]
    layers = []
    for layer in qnet.layers:
        zeros = np.zeros(layer.n_out, dtype=dtype)
        layers.append(LayerBounds(zeros, zeros, zeros, zeros, np.zeros(layer.n_out, dtype=bool)))
    return NeuronBounds(tuple(layers), "Frama-C view (placeholder)")


def _input_call(qnet: QuantizedNetwork, low, high) -> str:
    if isinstance(qnet.number, FixedFormat):
        return f"Frama_C_interval({int_literal(int(low))}, {int_literal(int(high))})"
    c_type = qnet.number.c_type
    return f"Frama_C_{c_type}_interval({float_literal(low, c_type)}, {float_literal(high, c_type)})"


def framac_view(qnet: QuantizedNetwork, box: InputBox) -> str:
    """The C text EVA analyses for one input box (see the module docstring)."""
    text = render_network(qnet, _placeholder_bounds(qnet)).text
    n_layers = len(qnet.layers)
    text, pre_sites = _PRE_SITE.subn(r"qv_fc_pre\1[j] = acc;", text)
    text, post_sites = _POST_SITE.subn(r"qv_fc_out\1[j] = \2[j];", text)
    text, arrays = _BOUND_ARRAY.subn("", text)
    if (pre_sites, post_sites, arrays) != (n_layers, n_layers, 4 * n_layers):
        raise ToolFailedError(
            f"cannot build the Frama-C view: found {pre_sites} + {post_sites} invariant sites and "
            f"{arrays} bound arrays for {n_layers} layers (has templates/_network.c.j2 changed?)"
        )
    globals_text = '#include "__fc_builtin.h"\n' + "".join(
        f"static qv_num qv_fc_pre{index}[{layer.n_out}];\nstatic qv_num qv_fc_out{index}[{layer.n_out}];\n"
        for index, layer in enumerate(qnet.layers, start=1)
    )
    text, definitions = _NETWORK_DEFINITION.subn(globals_text + "\nvoid qv_network(", text, count=1)
    if definitions != 1:
        raise ToolFailedError("cannot build the Frama-C view: no definition of qv_network found")
    main = ["", "int qv_framac_main(void)", "{", "    qv_num x[QV_N_INPUTS];", "    qv_num y[QV_N_OUTPUTS];"]
    for i, (low, high) in enumerate(zip(box.lo, box.hi)):
        main.append(f"    x[{i}] = {_input_call(qnet, low, high)};")
    main.append("    qv_network(x, y);")
    for index, layer in enumerate(qnet.layers, start=1):
        for j in range(layer.n_out):
            main.append(f"    Frama_C_show_each_qv_pre{index}_{j}(qv_fc_pre{index}[{j}]);")
            main.append(f"    Frama_C_show_each_qv_out{index}_{j}(qv_fc_out{index}[{j}]);")
    main += ["    return 0;", "}", ""]
    return text + _PRIMITIVES + "\n".join(main)


def framac_command(
    qnet: QuantizedNetwork, executable: str, source: Path, options: FramacOptions
) -> list[str]:
    widest = max(max(layer.n_in, layer.n_out) for layer in qnet.layers)
    command = [
        executable,
        "-machdep",
        "x86_64",
        f"-cpp-extra-args=-I{source.parent}",
        str(source),
        "-main",
        "qv_framac_main",
        "-warn-special-float",
        "none",
        "-float-hex",
        "-eva",
        "-eva-precision",
        str(options.precision),
        "-eva-auto-loop-unroll",
        str(widest + 1),
        "-eva-msg-key=-initial-state,-final-states",
        "-eva-no-show-progress",
        "-eva-no-results",
    ]
    if options.slevel is not None:
        command += ["-eva-slevel", str(options.slevel)]
    if options.plevel is not None:
        command += ["-eva-plevel", str(options.plevel)]
    return command + list(options.extra_args)


# ---------------------------------------------------------------------------------- parsing

# example: "[eva] view.c:812: Frama_C_show_each_qv_pre3_17: [-4494..7033]" -- EVA breaks long messages
# after "view.c:812: ", and may continue a long value on indented lines
_SHOW = re.compile(r"^\s*(?:\[eva\] \S+: )?Frama_C_show_each_qv_(pre|out)(\d+)_(\d+):\s*(.*)$")
_ALARMS = re.compile(r"(\d+) alarms? generated by the analysis")
_INT_RANGE = re.compile(r"^\[(-?\d+|--)\s*\.\.\s*(-?\d+|--)\](?:,\s*-?\d+%\d+)?$")  # [-4..12],0%4
_INT_SET = re.compile(r"^\{\s*(-?\d+(?:\s*;\s*-?\d+)*)\s*\}$")  # {0; 4; 8}
_FLOAT = r"[-+]?(?:0x[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?p[-+]?\d+|inf|\d+(?:\.\d*)?(?:e[-+]?\d+)?)"
_FLOAT_RANGE = re.compile(rf"^\[({_FLOAT})\s*\.\.\s*({_FLOAT})\]$")
_FLOAT_SET = re.compile(rf"^\{{\s*({_FLOAT}(?:\s*;\s*{_FLOAT})*)\s*\}}$")
_NAN = re.compile(r"\s*(?:∪|U)?\s*\{?\s*NaN\s*\}?\s*")


def _float_value(text: str) -> float:
    text = text.strip()
    if text.lstrip("+-") == "inf":
        return float(text)
    if "0x" in text:
        return float.fromhex(text)
    return float(text)


def parse_interval(text: str, qnet: QuantizedNetwork) -> tuple[float | int, float | int, bool]:
    """(lo, hi, may_be_nan) of one printed EVA value; raises ToolFailedError for an unknown form.

    Integers: `{5}`, `{0; 4}`, `[a..b]`, `[a..b],r%m`, `[--..--]` (the int32 range). Floats
    (`-float-hex`): `{0x1p-1}`, `[-0x1p-1 .. 0x1p-1]`, `-inf`/`+inf` ends, a NaN marker.
    """
    value = text.strip()
    if qnet.is_fixed:
        match = _INT_RANGE.match(value)
        if match:
            low = -(1 << 31) if match.group(1) == "--" else int(match.group(1))
            high = (1 << 31) - 1 if match.group(2) == "--" else int(match.group(2))
            return low, high, False
        match = _INT_SET.match(value)
        if match:
            members = [int(v) for v in match.group(1).split(";")]
            return min(members), max(members), False
        raise ToolFailedError(f"cannot parse the Frama-C value {text!r} (expected an integer interval)")
    may_be_nan = "NaN" in value
    if may_be_nan:
        value = _NAN.sub("", value)
        if not value:
            return float("-inf"), float("inf"), True
    match = _FLOAT_RANGE.match(value)
    if match:
        low, high = _float_value(match.group(1)), _float_value(match.group(2))
    else:
        match = _FLOAT_SET.match(value)
        if match is None:
            raise ToolFailedError(f"cannot parse the Frama-C value {text!r} (expected a float interval)")
        members = [_float_value(v) for v in match.group(1).split(";")]
        low, high = min(members), max(members)
    if may_be_nan:
        return float("-inf"), float("inf"), True
    return low, high, False


def _show_lines(output: str):
    """(match, value text) of every show line, a value continued on indented lines joined back."""
    lines = output.splitlines()
    for number, line in enumerate(lines):
        match = _SHOW.match(line)
        if match is None:
            continue
        value = match.group(4).strip()
        following = number + 1
        while not value or value.count("[") + value.count("{") > value.count("]") + value.count("}"):
            if following >= len(lines) or not lines[following][:1].isspace():
                break
            value += " " + lines[following].strip()
            following += 1
        yield match, value


def parse_show_output(output: str, qnet: QuantizedNetwork) -> tuple[tuple[LayerBounds, ...], bool]:
    """EVA's `Frama_C_show_each_qv_*` lines to per-layer bounds, and whether any value may be NaN.

    Every neuron must be printed exactly once per kind (pre, out); otherwise ToolFailedError.
    """
    alarms = _ALARMS.search(output)
    if alarms is None:
        raise ToolFailedError("Frama-C printed no analysis summary (did EVA run to the end?)")
    if int(alarms.group(1)) > 0:
        raise ToolFailedError(
            f"Frama-C EVA raised {alarms.group(1)} alarm(s) on the network code: its intervals would "
            "leave out executions it considers undefined"
        )
    dtype = np.int64 if qnet.is_fixed else qnet.number.dtype  # type: ignore[union-attr]
    values = {kind: [np.full((2, layer.n_out), np.nan) for layer in qnet.layers] for kind in ("pre", "out")}
    seen = {kind: [np.zeros(layer.n_out, dtype=int) for layer in qnet.layers] for kind in ("pre", "out")}
    any_nan = False
    for match, value in _show_lines(output):
        kind, layer, neuron = match.group(1), int(match.group(2)) - 1, int(match.group(3))
        if not (0 <= layer < len(qnet.layers) and 0 <= neuron < qnet.layers[layer].n_out):
            raise ToolFailedError(f"Frama-C printed a value for an unknown neuron: {match.group(0)!r}")
        low, high, nan = parse_interval(value, qnet)
        any_nan |= nan
        values[kind][layer][:, neuron] = (low, high)
        seen[kind][layer][neuron] += 1
    for kind in ("pre", "out"):
        for index, counts in enumerate(seen[kind], start=1):
            if np.any(counts != 1):
                neuron = int(np.flatnonzero(counts != 1)[0])
                raise ToolFailedError(
                    f"Frama-C printed {int(counts[neuron])} values for layer {index}, neuron {neuron} "
                    f"({kind}); expected exactly one (is the end of the analysis reachable?)"
                )
    layers = []
    for pre, out in zip(values["pre"], values["out"]):
        pre, out = pre.astype(dtype), out.astype(dtype)
        # EVA does not say whether a partial sum overflowed: for fixed point, "may" is the safe answer
        may_overflow = np.full(pre.shape[1], qnet.is_fixed, dtype=bool)
        layers.append(LayerBounds(pre[0], pre[1], out[0], out[1], may_overflow))
    return tuple(layers), any_nan


# ---------------------------------------------------------------------------------- running


def _run(command: list[str], timeout_s: float, limit_s: float, scratch: Path) -> str:
    """Run frama-c in its own process group for at most timeout_s; kill that group on time-out
    (reported as the whole analysis' limit, limit_s). Its temporary files (the preprocessed
    `cppannot*.c`, left behind when it is killed) go to `scratch`, which the caller removes."""
    try:
        child = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, "TMPDIR": str(scratch)},
            preexec_fn=child_dies_with_us(),  # noqa: PLW1509 - prctl only: no Frama-C outlives us
        )
    except OSError as error:
        raise ToolFailedError(f"cannot run {command[0]}: {error.strerror}") from error
    try:
        output, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.communicate()
        raise ToolFailedError(f"Frama-C timed out after {limit_s:g} s") from error
    if child.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise ToolFailedError(f"Frama-C failed (exit code {child.returncode}):\n{tail}")
    return output


def framac_bounds(
    qnet: QuantizedNetwork, boxes: list[InputBox], options: FramacOptions = FramacOptions()
) -> FramacResult:
    """Run EVA on the view of each box and join; raises ToolMissingError / ToolFailedError."""
    executable = find_framac(options)
    if (
        qnet.is_int8
        or (qnet.is_float and qnet.number.is_half)
        or not all(layer.is_dense for layer in qnet.layers)
    ):  # type: ignore[union-attr]
        raise ToolFailedError(
            "the Frama-C view covers dense networks in fixed point, float and double (not convolutions, "
            f"pools, int8 or half precision; this network: {qnet.number}, "
            f"{', '.join(sorted({type(layer.source).__name__ for layer in qnet.layers}))})"
        )
    version = framac_version(executable)
    warnings = []
    if version.major not in TESTED_MAJORS:
        warnings.append(
            f"Frama-C {version.text} is newer than the versions qverify was tested with "
            f"({', '.join(map(str, TESTED_MAJORS))}); its output is checked as it is parsed"
        )
    start = time.perf_counter()
    deadline = start + options.timeout_s
    per_box, any_nan = [], False
    with tempfile.TemporaryDirectory(prefix="qverify-framac-") as scratch:
        folder = Path(options.keep_dir) if options.keep_dir else Path(scratch)
        for number, box in enumerate(boxes, start=1):
            source = CProgram(VIEW_FILE, framac_view(qnet, box)).write(folder / f"box{number}")
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise ToolFailedError(f"Frama-C timed out after {options.timeout_s:g} s")
            command = framac_command(qnet, executable, source, options)
            output = _run(command, remaining, options.timeout_s, Path(scratch))
            if options.keep_dir:
                (source.parent / "eva.log").write_text(output)
            bounds, nan = parse_show_output(output, qnet)
            per_box.append(bounds)
            any_nan |= nan
    return FramacResult(join_boxes(per_box), version, any_nan, tuple(warnings), time.perf_counter() - start)
