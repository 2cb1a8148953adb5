"""A sat answer's witness, checked as VNN-COMP's scoring checks it (SCORING/counterexamples.py).

The witness file holds `((X_0 v) ... (Y_0 v) ...)`. It is correct when the network, run in
onnxruntime at X (the graph input's element type and shape, C order), gives outputs within
`TOLERANCE` of Y (L-infinity), and X lies in some input box of the property and Y in that box's
unsafe set, both up to `TOLERANCE` (a bound `x <= b` holds when x <= b + tol; an output atom when
it holds with that slack). The competition checks witnesses only where tools disagree.
"""

from __future__ import annotations

import enum
import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.errors import QverifyError
from qverify.properties import Atom, Property, PropertyCases, Relation, read_vnnlib_cases

TOLERANCE = 1e-4  # SCORING/settings.py COUNTEREXAMPLE_TOL


class WitnessCheck(enum.Enum):
    """The competition's CounterexampleResult."""

    CORRECT = "correct"
    NO_CE = "no_ce"
    EXEC_DOESNT_MATCH = "exec_doesnt_match"
    SPEC_NOT_VIOLATED = "spec_not_violated"


@dataclass(frozen=True, slots=True)
class WitnessVerdict:
    check: WitnessCheck
    message: str


def read_witness_file(path: Path) -> str:
    """The file's text (gzipped or not); empty when there is no file."""
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            data = candidate.read_bytes()
            if candidate.suffix == ".gz":
                try:
                    data = gzip.decompress(data)
                except (OSError, EOFError):
                    return ""
            return data.decode("utf-8", errors="replace")
    return ""


def parse_witness(text: str) -> tuple[list[float], list[float]] | None:
    """(X, Y) of `((X_0 v) ... (Y_0 v) ...)` (a leading `sat` line allowed); None when malformed."""
    content = " ".join(text.split())
    if content.startswith("sat"):
        content = content[3:].strip()
    if len(content) < 2 or content[0] != "(" or content[-1] != ")":
        return None
    x: list[float] = []
    y: list[float] = []
    for part in content[1:-1].split(")"):
        part = part.strip()
        if not part:
            continue
        name, _, value = part.lstrip("(").strip().partition(" ")
        target = x if name.startswith("X_") else y if name.startswith("Y_") else None
        if target is None or name[2:] != str(len(target)):
            return None
        try:
            target.append(float(value))
        except ValueError:
            return None
    return x, y


def _run_onnx(onnx_path: Path, x: list[float]) -> np.ndarray:
    """The network's outputs at x, flattened, as the competition's checker computes them."""
    import onnxruntime

    from qverify.io.onnx_reader import load_model

    model = load_model(onnx_path)
    initialised = {tensor.name for tensor in model.graph.initializer}
    graph_input = next(value for value in model.graph.input if value.name not in initialised)
    dims = tuple(d.dim_value if d.dim_value != 0 else 1 for d in graph_input.type.tensor_type.shape.dim)
    dtype = {10: np.float16, 11: np.float64}.get(graph_input.type.tensor_type.elem_type, np.float32)
    settings = onnxruntime.SessionOptions()
    settings.log_severity_level = 3  # errors only: its warnings about exporters' habits are not the witness's
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), settings, providers=["CPUExecutionProvider"]
    )
    outputs = session.run(None, {graph_input.name: np.array(x, dtype=dtype).reshape(dims)})
    return np.asarray(outputs[0], dtype=np.float64).reshape(-1)


def _atom_holds(atom: Atom, y: list[float], tolerance: float) -> bool:
    value = float(atom.constant) + sum(float(c) * y[i] for i, c in atom.terms)
    if atom.relation in (Relation.GE, Relation.GT):
        return value >= -tolerance
    return value <= tolerance


def _violates(prop: Property | PropertyCases, x: list[float], y: list[float], tolerance: float) -> bool:
    for case in prop.cases if isinstance(prop, PropertyCases) else (prop,):
        for box in case.boxes:
            inside = all(
                float(lo) - tolerance <= v <= float(hi) + tolerance for v, lo, hi in zip(x, box.lo, box.hi)
            )
            if inside and any(
                all(_atom_holds(a, y, tolerance) for a in c.atoms) for c in case.unsafe.clauses
            ):
                return True
    return False


def check_witness(
    text: str, onnx_path: Path, vnnlib_path: Path, tolerance: float = TOLERANCE
) -> WitnessVerdict:
    """The competition's verdict on a witness (module docstring)."""
    parsed = parse_witness(text)
    if parsed is None or not parsed[0]:
        return WitnessVerdict(
            WitnessCheck.NO_CE, "no counterexample in the file" if not text.strip() else "malformed"
        )
    x, y = parsed
    try:
        prop = read_vnnlib_cases(vnnlib_path)
        outputs = _run_onnx(onnx_path, x)
    except (QverifyError, ValueError) as error:
        return WitnessVerdict(WitnessCheck.EXEC_DOESNT_MATCH, f"cannot run it: {error}")
    except Exception as error:  # noqa: BLE001 - onnxruntime's own errors (a witness of the wrong size) derive from Exception only
        return WitnessVerdict(WitnessCheck.EXEC_DOESNT_MATCH, f"onnxruntime: {str(error).splitlines()[0]}")
    if outputs.size != len(y):
        return WitnessVerdict(
            WitnessCheck.EXEC_DOESNT_MATCH, f"{len(y)} outputs given, the network has {outputs.size}"
        )
    difference = float(np.max(np.abs(outputs - np.array(y)))) if y else 0.0
    if difference > tolerance:
        return WitnessVerdict(
            WitnessCheck.EXEC_DOESNT_MATCH, f"outputs differ from onnxruntime's by {difference:.3g}"
        )
    if len(x) != prop.n_inputs or not _violates(prop, x, y, tolerance):
        return WitnessVerdict(WitnessCheck.SPEC_NOT_VIOLATED, "the witness does not violate the property")
    return WitnessVerdict(
        WitnessCheck.CORRECT, f"outputs within {difference:.3g} of onnxruntime's, property violated"
    )
