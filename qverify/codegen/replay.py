"""The compiled network as a Python function: run the C's replay main on a batch of inputs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.codegen.compile import compile_replay, format_inputs, run_lines
from qverify.codegen.render import CProgram
from qverify.errors import ToolFailedError


@dataclass(frozen=True, slots=True)
class NetworkRun:
    """Outputs per input row; `overflowed[b]` when the C printed OVERFLOW for row b (outputs 0)."""

    outputs: np.ndarray
    overflowed: np.ndarray


class CompiledNetwork:
    """`network.c` compiled with gcc in replay mode."""

    def __init__(self, program: CProgram, directory: Path, is_fixed: bool) -> None:
        self.is_fixed = is_fixed
        self.executable = compile_replay(program.write(directory))

    @classmethod
    def from_executable(cls, executable: Path, is_fixed: bool) -> CompiledNetwork:
        """A `network.c` that `compile_replays` already compiled (with other sources, in parallel)."""
        network = cls.__new__(cls)
        network.is_fixed, network.executable = is_fixed, executable
        return network

    def run(self, x: np.ndarray, raw: bool = True) -> NetworkRun:
        """Words in/out for fixed point with raw=True; exact float values for float networks."""
        lines = run_lines(self.executable, format_inputs(x, exact_float=True), ("--raw",) if raw else ())
        rows, overflowed = [], []
        for line in lines:
            overflowed.append(line.startswith("OVERFLOW"))
            rows.append(None if overflowed[-1] else line.split())
        width = next((len(row) for row in rows if row is not None), 0)
        parse = int if (self.is_fixed and raw) else (lambda t: float.fromhex(t) if raw else float(t))
        try:
            outputs = np.array([[parse(t) for t in row] if row is not None else [0] * width for row in rows])
        except ValueError as error:
            raise ToolFailedError(f"unexpected replay output: {error}") from error
        return NetworkRun(outputs, np.array(overflowed, dtype=bool))
