"""Confirm a back end's counterexample: replay it in the compiled harness and in the simulator.

A back end's model is only a candidate. It becomes an UNSAFE verdict when
1. the gcc-compiled harness (replay mode) prints `VIOLATED <assertion>` for the nondet values, and
2. the bit-exact simulator, run on the same input words/values, violates the same thing: the same
   unsafe clause (exact rational evaluation) or, under overflow mode detect, an overflow.
Anything else is an ERROR naming the disagreement: never an UNSAFE.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.codegen import (
    REPLAY_OPTIMISE,
    VIOLATION_PREFIX,
    Compilations,
    compile_replay,
    format_inputs,
    render_network,
    run_lines,
)
from qverify.codegen.conditions import implementation_box
from qverify.errors import QverifyError, ToolFailedError
from qverify.properties import Property
from qverify.quant import QuantizedNetwork, neuron_name, simulate

OVERFLOW_MESSAGE = "fixed-point overflow"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What the C and the simulator said about one candidate input."""

    confirmed: bool
    c_outcome: str  # the harness replay's line: HOLDS, ASSUME-FAILED or VIOLATED <text>
    simulator_outcome: str  # the same vocabulary, from the simulator and exact evaluation
    problem: str = ""  # why it was not confirmed

    @property
    def violated(self) -> str:
        return self.c_outcome.removeprefix("VIOLATED ").strip()


def inputs_from_values(qnet: QuantizedNetwork, values: tuple) -> np.ndarray:
    """The network input vector (int64 words or codes, or float values) of the nondet values."""
    if qnet.is_integer:
        return np.array([int(v) for v in values], dtype=np.int64)
    return qnet.number.round(np.array([float(v) for v in values]))  # type: ignore[union-attr]


def in_region(qnet: QuantizedNetwork, prop: Property, x: np.ndarray) -> bool:
    """Is the implementation input x (words, codes or values) in one of the region's boxes, as the
    harness's assumes state them?"""
    for box in prop.boxes:
        cbox = implementation_box(qnet, box)
        if qnet.is_integer:
            lo, hi = [int(v) for v in cbox.lo], [int(v) for v in cbox.hi]
            if all(a <= int(v) <= b for v, a, b in zip(x, lo, hi)):
                return True
        else:
            lo = [float.fromhex(v.removesuffix("f")) for v in cbox.lo]
            hi = [float.fromhex(v.removesuffix("f")) for v in cbox.hi]
            if all(a <= float(v) <= b for v, a, b in zip(x, lo, hi)):
                return True
    return False


def simulator_outcome(qnet: QuantizedNetwork, prop: Property, x: np.ndarray) -> str:
    """HOLDS / ASSUME-FAILED / VIOLATED <clause or overflow>, computed without the C."""
    if not in_region(qnet, prop, x):
        return "ASSUME-FAILED"
    result = simulate(qnet, x[None, :])
    if result.detected[0]:
        return f"VIOLATED {OVERFLOW_MESSAGE} ({neuron_name(qnet, int(result.overflow_site[0]))})"
    clause = prop.unsafe.violated_clause_exact(qnet.output_reals(result.outputs[0]))
    if clause < 0:
        return "HOLDS"
    return f"VIOLATED {VIOLATION_PREFIX} {clause + 1}: {prop.unsafe.clauses[clause].text()}"


def replay_executable(harness: Path) -> Path:
    """Where the harness's replay executable goes: next to it."""
    return harness.with_name("harness_replay")


class ReplayPrograms:
    """A counterexample's two C programs, the harness (does the input violate?) and the network
    (which outputs?), compiled at REPLAY_OPTIMISE once `start` is called: in parallel with the back
    end, which leaves a core free (`verification.py` calls it in a thread of its own, so that the
    network's C is written then too); only an UNSAFE waits for them (`executables`, which starts
    them if no one did), any other verdict drops them (`cancel`, which waits for a `start` under
    way, after which `start` does nothing). A compiler that cannot start is reported by
    `executables` only: a SAFE needs no gcc."""

    def __init__(self, qnet: QuantizedNetwork, harness: Path, workdir: Path) -> None:
        self.harness = harness
        self.problem = ""
        self._qnet = qnet
        self._workdir = workdir
        self._compilations: Compilations | None = None
        self._state = "waiting"  # started, cancelled
        self._lock = threading.Lock()
        self._cancelled = threading.Event()

    def start_unless_answered(self, grace_s: float) -> None:
        """`start`, unless the back end answered within `grace_s` (`cancel`, or an UNSAFE's
        `executables`): a query decided at once spends no CPU on gcc for programs only an UNSAFE
        needs, a longer one compiles them beside the back end."""
        if not self._cancelled.wait(grace_s):
            self.start()

    def start(self) -> None:
        """Render the network's replay program and start both compilations (once)."""
        with self._lock:
            if self._state != "waiting":
                return
            self._state = "started"
            try:
                network_c = render_network(self._qnet).write(self._workdir / "network_replay")
                jobs = [(self.harness, replay_executable(self.harness)), (network_c, None)]
                self._compilations = Compilations(jobs, REPLAY_OPTIMISE)
            except QverifyError as error:
                self.problem = str(error)

    def executables(self) -> tuple[Path, Path]:
        """(harness replay, network replay), once compiled; QverifyError when they cannot be."""
        self._cancelled.set()  # a grace period still running: compiled here, now
        self.start()
        if self._compilations is None:
            raise ToolFailedError(self.problem or "the replay programs were cancelled")
        harness, network = self._compilations.finish()
        return harness, network

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            self._state = "cancelled"
            if self._compilations is not None:
                self._compilations.cancel()


def _same_violation(c_line: str, simulated: str) -> bool:
    if not (c_line.startswith("VIOLATED") and simulated.startswith("VIOLATED")):
        return False
    c_text, sim_text = c_line.removeprefix("VIOLATED "), simulated.removeprefix("VIOLATED ")
    if c_text.startswith(OVERFLOW_MESSAGE):
        return sim_text.startswith(OVERFLOW_MESSAGE)
    return c_text.split(":")[0] == sim_text.split(":")[0]  # "unsafe clause N"


def replay_candidate(
    qnet: QuantizedNetwork, prop: Property, harness: Path, values: tuple, executable: Path | None = None
) -> ReplayResult:
    """Replay nondet `values` in the compiled `harness` and in the simulator (see module doc).

    `executable`: the harness already compiled in replay mode (`compile_replays`); by default it is
    compiled here, once per process for the same harness."""
    if len(values) != qnet.n_inputs:
        return ReplayResult(
            False, "", "", f"the counterexample has {len(values)} values for {qnet.n_inputs} inputs"
        )
    x = inputs_from_values(qnet, values)
    try:
        if executable is None:
            executable = compile_replay(harness, replay_executable(harness), REPLAY_OPTIMISE)
        (c_line,) = run_lines(executable, format_inputs(x[None, :], exact_float=True))
    except QverifyError as error:
        return ReplayResult(False, "", "", f"replay in gcc failed: {error}")
    simulated = simulator_outcome(qnet, prop, x)
    if not c_line.startswith("VIOLATED"):
        return ReplayResult(False, c_line, simulated, f"the compiled harness prints {c_line} for this input")
    if not _same_violation(c_line, simulated):
        return ReplayResult(
            False, c_line, simulated, f"the C prints '{c_line}' but the simulator gives '{simulated}'"
        )
    return ReplayResult(True, c_line, simulated)
