"""VNN-COMP's tool interface: run one instance (ONNX + VNN-LIB) and write the competition's result file.

The competition calls `run_instance.sh v1 CATEGORY ONNX VNNLIB RESULTS_FILE TIMEOUT` (see
vnncomp/README.md); that script calls `qverify vnncomp run ...`, which lands here. The result file's
first line is `sat`, `unsat`, `timeout`, `unknown` or `error`; after `sat` comes the witness in the
competition's format, one `(X_i value)` per input and one `(Y_j value)` per output, all inside one
pair of parentheses (the scoring scripts join the lines and split on `)`).

Units: VNN-LIB's `X_i`/`Y_j` name the ONNX graph's own inputs and outputs. When qverify folds
normalisation nodes of the graph into the network (`Sub`/`Div` before the first layer, `Mul`/`Add`
after the last), those are raw units: the property is read as raw and converted, and the witness is
written in raw units. Otherwise (ACAS Xu: no normalisation in the graph) they are the network's
inputs as they are.

Which question is asked (`Semantics`):
- `real` (the competition's default): the real-valued network, as VNN-COMP scores it. qverify
  verifies the float harness under the engine's `--semantics real` (every float operation exact) on
  the harness's inputs: the nearest float32 values of the box's reals (`qverify.quant.inputs`), as
  onnxruntime receives them, so an input pinned to a decimal no float equals is its nearest float;
  a counterexample is confirmed in exact rationals and in IEEE float (gcc), and the witness gives
  the float64 reference network's outputs.
- `quantized`: an implementation (fixed point `<K,L>`, or float/double under IEEE semantics). Its
  counterexamples violate the *implementation*; the witness gives the C's outputs. A
  quantization-induced one (the real network does not violate the property there) is still `sat`
  for this question, and a checker that replays the real network in ONNX will reject it.

An int8 model (QDQ or QOperator) means its int8 arithmetic: that is what the competition's checker
computes when it replays the ONNX file in onnxruntime, and it is exact integer arithmetic, so `real`
verifies the model's own int8 computation as this machine's onnxruntime computes it (`--format
int8-ort`: the exact ONNX semantics with AVX-VNNI, int16 pair saturation on AVX2 alone,
`qverify.quant.ort_kernel`) and the witness gives its dequantized outputs. `quantized` with a float or fixed-point `--format` verifies the
model's float view (`qverify.network.float_view`) in that format, as `qverify verify` does.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from qverify.backends import InternalOptions, Limits, Status
from qverify.cases import verify_cases
from qverify.errors import InputError, ResourceLimitError
from qverify.input_limits import reading_within
from qverify.invariants import IntervalMethod
from qverify.io import load_network
from qverify.io.files import format_suffix
from qverify.network import Network
from qverify.properties import Property, PropertyCases, Units, read_vnnlib_cases, to_normalised
from qverify.quant import FloatFormat, FloatKind, ImplementationOptions, named_format, parse_number_format
from qverify.quant.ort_kernel import ORT_LABEL
from qverify.verification import VerificationRecord, VerifyOptions
from qverify.vocabulary import VnncompSemantics as Semantics

__all__ = [
    "INTERFACE_VERSION",
    "InstanceResult",
    "RunnerConfig",
    "Semantics",
    "Witness",
    "format_result",
    "parse_result",
    "prepare_instance",
    "run_instance",
]

INTERFACE_VERSION = "v1"
STARTUP_S = 3.0  # of the competition's timeout: interpreter start, imports, writing the file
RESULTS = ("sat", "unsat", "timeout", "unknown", "error")


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    """What a run verifies: the real-valued network, or an implementation in `number_format`."""

    semantics: Semantics = Semantics.REAL
    number_format: str = "16.16"  # quantized only: K.L, float or double
    engine_jobs: int = (
        0  # processes of the engine's search (0: every usable core; a category's rows share them)
    )

    def implementation(self, int8_model: bool = False) -> ImplementationOptions:
        """What is verified: the float harness (real semantics), an int8 model's own arithmetic
        (real semantics of an int8 model: module docstring), or the implementation in the format."""
        if self.semantics is Semantics.REAL:
            return ImplementationOptions(
                named_format(ORT_LABEL) if int8_model else FloatFormat(FloatKind.FLOAT)
            )
        return ImplementationOptions(parse_number_format(self.number_format))

    def verify_options(self, timeout_s: float, int8_model: bool = False) -> VerifyOptions:
        """Real semantics is the engine's `--semantics real` on the float harness; an int8 model's
        real meaning is its integer arithmetic, exact as it is (the engine's default semantics)."""
        semantics = "real" if self.semantics is Semantics.REAL and not int8_model else "ieee"
        return VerifyOptions(
            limits=Limits(timeout_s=timeout_s),
            intervals=IntervalMethod.AUTO,
            internal=InternalOptions(semantics=semantics, jobs=self.engine_jobs),
        )


@dataclass(frozen=True, slots=True)
class Witness:
    """A counterexample as the competition reads it: inputs X and outputs Y (normalised units)."""

    x: tuple[float, ...]
    y: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class InstanceResult:
    result: str  # one of RESULTS
    witness: Witness | None
    detail: str  # qverify's verdict line
    record: VerificationRecord | None


def check_version(version: str) -> None:
    if version != INTERFACE_VERSION:
        raise InputError(
            f"expected the interface version '{INTERFACE_VERSION}' as first argument, got '{version}'"
        )


def _load(onnx: str | Path, vnnlib: str | Path) -> tuple[Network, Property | PropertyCases, bool]:
    """The network, the property (or its cases) in normalised units, and whether the graph's units
    are raw. The property's declarations are checked against the network as they are read."""
    net = load_network(onnx)
    raw = format_suffix(onnx) == ".onnx" and (net.input_norm is not None or net.output_norm is not None)
    units = Units.RAW if raw else Units.NORMALISED
    prop = read_vnnlib_cases(vnnlib, units=units, n_inputs=net.n_inputs, n_outputs=net.n_outputs)
    prop.check_against(net.n_inputs, net.n_outputs)
    return net, to_normalised(prop, net), raw


def prepare_instance(onnx: str | Path, vnnlib: str | Path) -> str:
    """What `prepare_instance.sh` checks: the network and property load and fit each other.

    :returns: a one-line description of the instance.
    :raises InputError / UnsupportedError: they do not.
    """
    net, prop, raw = _load(onnx, vnnlib)
    units = "raw (the graph normalises)" if raw else "as the network's"
    shape = f"{len(prop.cases)} cases, " if isinstance(prop, PropertyCases) else ""
    return (
        f"{net.name}: {net.n_inputs} inputs, {net.n_outputs} outputs; {prop.name}: {shape}"
        f"{len(prop.boxes)} box(es); units {units}"
    )


def run_instance(
    onnx: str | Path, vnnlib: str | Path, timeout_s: float, config: RunnerConfig
) -> InstanceResult:
    """Verify one instance within `timeout_s` (the competition's, start-up included).

    :raises InputError / UnsupportedError: the files cannot be read or do not fit.
    """
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise InputError(f"the timeout must be a positive number of seconds, got {timeout_s}")
    started = time.perf_counter()
    try:
        with reading_within(max(1.0, timeout_s - STARTUP_S)):  # the time limit holds while reading too
            net, prop, raw = _load(onnx, vnnlib)
    except ResourceLimitError as error:
        word = "timeout" if str(error).startswith("timeout") else "unknown"
        return InstanceResult(word, None, f"{Status.UNKNOWN.value}: {error}", None)
    int8_model = net.quantization is not None
    spent = time.perf_counter() - started  # reading counts: nn4sys files of 10,000 cases take seconds
    options = config.verify_options(max(1.0, timeout_s - STARTUP_S - spent), int8_model)
    implementation = config.implementation(int8_model)
    record = verify_cases(net, prop, implementation, options, f"{net.name}-{prop.name}")
    witness = _witness(record, config, net if raw else None)
    return InstanceResult(_result_word(record), witness, record.summary_line(), record)


def _result_word(record: VerificationRecord) -> str:
    if record.status is Status.SAFE:
        return "unsat"
    if record.status is Status.UNSAFE:
        return "sat"
    if record.status is Status.UNKNOWN:
        return "timeout" if record.reason.startswith("timeout") else "unknown"
    return "error"


def _witness(record: VerificationRecord, config: RunnerConfig, raw_net: Network | None) -> Witness | None:
    """The counterexample in the graph's units (raw when `raw_net` normalises)."""
    example = record.counterexample
    if record.status is not Status.UNSAFE or example is None:
        return None
    float_network = config.semantics is Semantics.REAL and not record.number_format.startswith("int8")
    outputs = example.outputs_float if float_network else example.outputs_c
    x, y = example.inputs_real, outputs
    if raw_net is not None:
        x = example.inputs_raw if example.inputs_raw is not None else x
        y = raw_net.output_norm.apply(y) if raw_net.output_norm is not None else y
    return Witness(tuple(map(float, x)), tuple(map(float, y)))


def format_result(result: str, witness: Witness | None) -> str:
    """The result file's text: the result word, then for `sat` the witness (exact decimal floats)."""
    if result not in RESULTS:
        raise ValueError(f"not a VNN-COMP result: {result!r}")
    lines = [result]
    if result == "sat" and witness is not None:
        entries = [f"(X_{i} {value!r})" for i, value in enumerate(witness.x)]
        entries += [f"(Y_{j} {value!r})" for j, value in enumerate(witness.y)]
        lines.append("(" + "\n ".join(entries) + ")")
    return "\n".join(lines) + "\n"


def write_result(path: str | Path, result: str, witness: Witness | None = None) -> None:
    """Write the result file atomically (a reader never sees half a file)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(handle, "w") as stream:
            stream.write(format_result(result, witness))
        os.replace(temporary, path)
    except OSError as error:
        raise InputError(f"cannot write the result file {path}: {error.strerror or error}") from None


def parse_result(text: str) -> tuple[str, Witness | None]:
    """Read a result file as the competition does (first line; for sat the `(X_i v) (Y_j v)` list).

    :raises InputError: not a result file, or a malformed witness.
    """
    lines = text.strip().splitlines()
    if not lines or lines[0].strip() not in RESULTS:
        raise InputError(f"result file: first line must be one of {', '.join(RESULTS)}")
    result = lines[0].strip()
    body = " ".join(lines[1:]).strip()
    if result != "sat" or not body:
        return result, None
    if not (body.startswith("(") and body.endswith(")")):
        raise InputError("result file: the witness must be one parenthesised list")
    x: list[float] = []
    y: list[float] = []
    for part in body[1:-1].split(")"):
        part = " ".join(part.split())
        if not part:
            continue
        if not part.startswith("("):
            raise InputError(f"result file: malformed witness entry {part!r}")
        name, _, value = part[1:].partition(" ")
        target = x if name.startswith("X_") else y if name.startswith("Y_") else None
        if target is None or name[2:] != str(len(target)):
            raise InputError(f"result file: unexpected witness variable {name!r}")
        try:
            target.append(float(value))
        except ValueError:
            raise InputError(f"result file: {name} has no number: {value!r}") from None
    return result, Witness(tuple(x), tuple(y))
