#!/usr/bin/env python3
"""qverify, Marabou and alpha-beta-CROWN side by side on the same VNN-LIB instances, in one run (a
benchmark, not a test).

Each instance (an ONNX network and a VNN-LIB property) is decided
  - by `qverify verify` in a child process, once per mode: `16.16` (fixed point <16,16>, the
    default `--format 16.16`), `real` (`--float --semantics real`: the network's float weights in
    ideal real arithmetic, what real-valued verifiers decide) and `int8` (`--format int8` on the
    suite's int8 model, its `[variants.int8]` in suite.toml; instances without one are skipped),
    with `--timeout` and a wall-clock limit of the timeout plus GRACE_S;
  - by Marabou 2.0 (maraboupy, `pip install -e ".[marabou]"`) in a child process of this script
    (`--marabou-worker`): the ONNX file read by Marabou's own parser, the input bounds and the unsafe
    output set taken from qverify's VNN-LIB reader (one query per input box; several unsafe clauses
    as one Marabou disjunction constraint), `timeoutInSeconds`, verbosity 0. `sat` is UNSAFE, `unsat`
    SAFE; Marabou's satisfying input is re-evaluated in float64 and the table says whether it
    violates the property there. Every `unsat` is probed with the input box alone (which must be
    `sat`): where Marabou finds the box alone infeasible its `unsat` is unsound and counts as ERROR
    (Marabou 2.0 on benchmarks/digits784; the probe's time is not counted).
  - by alpha-beta-CROWN (optional; `--abcrown PATH` to its `complete_verifier/abcrown.py`, or
    $QVERIFY_ABCROWN, with `--abcrown-python` or $QVERIFY_ABCROWN_PYTHON naming a Python that
    imports torch and auto_LiRPA) in a child process: the ONNX file and the VNN-LIB file read by its
    own parsers, on the CPU (`--device cpu --batch_size 256`, its defaults otherwise, or
    `--abcrown-config YAML`: its settings for a suite, such as input splitting for ACAS Xu), `--timeout`.
    It is not installed by this project: a checkout of its own, with its own environment.
    `sat` is UNSAFE (its counterexample, `--save_adv_example`, is re-evaluated in float64 as
    Marabou's is), `unsat` SAFE, `timeout` UNKNOWN. Like Marabou, it decides the real-valued
    question (in float32 bound arithmetic), so `real` mode is the one to compare with it.
Times are wall-clock seconds of the child processes (process start, imports and file reading
included for both tools, as a user runs them); beside them each run's CPU seconds (user + sys of
the child and its descendants, `os.wait4`) and largest resident set, since the machine is shared. Marabou's verdict is in real arithmetic: in `real` mode a
verdict that differs from qverify's where both decide is a bug of one of them and is flagged loudly
(exit code 1); at `16.16` a difference is a difference of semantics, shown but not an error.

Without maraboupy the script says so and runs without Marabou; alpha-beta-CROWN runs only when
named, and a named one that cannot run is said so, with the reason.

With `--baseline-python PY` the qverify that PY imports (another checkout's environment, e.g.
main's) runs beside this checkout's, interleaved per instance and mode ('qverify-baseline'): before
and after in one run. The report's last table gives each run's branch-and-bound nodes per CPU second
(`node_rates`; alpha-beta-CROWN's from the domains visited and its BaB time in its log).

Results are journaled (JSONL, one line per finished run) in `--out`; `--resume` skips what the
journal holds, so a long run can be interrupted and continued. The selection:
  --suite NAME (repeatable; default acasxu): acasxu, digits784, digits784x4 (issue 32's frontier),
      issue 29's digits28-maxpool, digits28-avgpool, digits32rgb-conv, digits784-sigmoid, issue
      41's CIFAR-10 graphs cifar10-resnet2b, cifar10-resnet4b, cifar10-mbv2s, cifar10-squeeze,
      cifar10-keras (their VNN-LIB files first: benchmarks/cifar10/suites.py build), issue 45's
      dynamics-boxes and VNN-COMP 2022's reach_prob_density (`benchmarks/vnncomp2022.py extract`
      first: not committed)   --instances phi1-4 | GLOB[,GLOB...]
  --epsilons E[,E...]: digits784's 10 centres at these radii instead of its instances.csv (issue
      32's frontier at 0.015 and 0.02; the suite's own train.py builds them, VNN-LIB written in --out)
  --limit N (first N)   --sample N (N evenly spaced)   --all (every instance of the suites)
The report ends with one table per suite and run (tool and mode): decided/total, verdicts, total
and median seconds, CPU seconds, the largest resident set; UNSAFE verdicts replayed in gcc (qverify
confirms every counterexample in gcc and its simulator before it reports UNSAFE; the table counts
the records that show the replay), and verdicts that differ between qverify's modes.

Usage:
  python benchmarks/bench_marabou.py --instances phi1-4 --sample 16 --timeout 60
  python benchmarks/bench_marabou.py --suite digits784 --sample 6 --timeout 120 --modes real
  python benchmarks/bench_marabou.py --suite digits784 --epsilons 0.015,0.02 --timeout 120 --modes real \
      --no-marabou --abcrown ~/alpha-beta-CROWN/complete_verifier/abcrown.py --abcrown-python ~/abc/bin/python
  python benchmarks/bench_marabou.py --all --suite acasxu --timeout 116 --out results/marabou --resume
  python benchmarks/bench_marabou.py --all --suite digits28-maxpool --suite digits28-avgpool \
      --suite digits32rgb-conv --suite digits784-sigmoid --modes real,16.16,int8 --timeout 60
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import math
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.machine_speed import speed_line
from qverify.io import load_network
from qverify.network import Network, evaluate_core
from qverify.properties import Property, Relation, read_vnnlib
from qverify.suites.journal import Journal

SUITES = {
    name: ROOT / "benchmarks" / name / "instances.csv"
    for name in (
        "acasxu",
        "digits784",
        "digits784x4",
        "digits28-maxpool",
        "digits28-avgpool",
        "digits32rgb-conv",
        "digits784-sigmoid",
        "cifar10-resnet2b",
        "cifar10-resnet4b",
        "cifar10-mbv2s",
        "cifar10-squeeze",
        "cifar10-keras",
        "dynamics-boxes",
    )
}
# suites whose VNN-LIB files are built on the machine (their images are not committed)
BUILT_BY = {name: "benchmarks/cifar10/suites.py build" for name in SUITES if name.startswith("cifar10-")}
# VNN-COMP 2022's reach_prob_density: no licence stated, so not committed; benchmarks/vnncomp2022.py
# extracts it from the competition's repository into this (git-ignored) folder
SUITES["reach_prob_density"] = ROOT / "benchmarks" / "vnncomp2022" / "reach_prob_density" / "instances.csv"
MODES = {
    "16.16": ("--format", "16.16"),
    "real": ("--float", "--semantics", "real"),
    "int8": ("--format", "int8"),  # on the suite's int8 model (Instance.int8_network)
}
PROBE_S = 10.0  # seconds for the box probe after an unsat (see marabou_solve)
MARABOU_MEMORY_MB = (
    8192  # Marabou's data segment (an allocation beyond it fails: ERROR, not a swamped machine)
)
GRACE_S = 30.0  # beyond --timeout before a child is killed (qverify's own limit should stop it first)
DECIDED = ("SAFE", "UNSAFE")
MARABOU = "marabou"
ABCROWN = "abcrown"
QVERIFY = "qverify"
BASELINE = "qverify-baseline"  # `--baseline-python`: another checkout's qverify, run beside this one
REFERENCES = {MARABOU: "Marabou", ABCROWN: "alpha-beta-CROWN"}  # the tools qverify is compared with
ABCROWN_ENV, ABCROWN_PYTHON_ENV = "QVERIFY_ABCROWN", "QVERIFY_ABCROWN_PYTHON"
# alpha-beta-CROWN's batch of branch-and-bound domains on the CPU without --abcrown-config (its
# default is 64; issue 32's frontier runs used 256: fewer, larger torch calls per domain)
ABCROWN_BATCH = 256
FLOAT32_SLACK = 2.0**-23  # how far (relative) outside a box a float32 input may lie by rounding alone
ABCROWN_PROBE_S = 300.0  # importing torch and auto_LiRPA the first time (a cold disk)


@dataclass(frozen=True, slots=True)
class Instance:
    """One VNN-COMP row: a network and a property, named `<network stem>-<property stem>`."""

    suite: str
    name: str
    network: Path
    vnnlib: Path
    int8_network: Path | None = None  # the suite's int8 model of `network`, if it has one

    def network_for(self, mode: str) -> Path | None:
        """The model a qverify mode verifies (None: the instance has no model for it)."""
        return self.int8_network if mode == "int8" else self.network


@dataclass(frozen=True, slots=True)
class Outcome:
    """One tool's run on one instance: verdict SAFE / UNSAFE / UNKNOWN / ERROR, wall time, why."""

    tool: str  # "qverify", or a key of REFERENCES
    mode: str  # a key of MODES, or "real" for the reference tools
    instance: str
    verdict: str
    wall_s: float
    reason: str = ""
    detail: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------- Marabou


def marabou_missing() -> str:
    """ "" when maraboupy imports, else why not (one line)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Tensorflow parser is unavailable" on import
            import maraboupy.Marabou  # noqa: F401
            import onnxruntime  # noqa: F401  (Marabou's ONNX reader needs it)
    except ImportError as error:
        return f'maraboupy is not installed ({error}); install it with: pip install -e ".[marabou]"'
    return ""


@dataclass(frozen=True, slots=True)
class MarabouAnswer:
    """Marabou's verdict on a whole property (every box, every unsafe clause)."""

    verdict: str  # SAFE / UNSAFE / UNKNOWN / ERROR
    reason: str
    solve_s: float  # the property's queries
    witness: tuple[float, ...] = ()  # Marabou's satisfying input (normalised units), when UNSAFE
    witness_violates: bool | None = None  # does it violate the property in float64?
    probe_s: float = 0.0  # the box probes after an unsat (not part of the verdict's time)


def _equation(atom, output_vars, core):
    """Marabou equation for the atom `sum c_j Y_j + k (rel) 0`; a strict relation becomes non-strict
    (Marabou has none; the unsafe set grows by its boundary only)."""
    from maraboupy.MarabouUtils import Equation

    kind = core.Equation.GE if atom.relation in (Relation.GE, Relation.GT) else core.Equation.LE
    equation = Equation(kind)
    for index, coefficient in atom.terms:
        equation.addAddend(float(coefficient), int(output_vars[index]))
    equation.setScalar(-float(atom.constant))
    return equation


def _query(network_path: Path, box, clauses_of, timeout_s: float) -> tuple[str, np.ndarray | None]:
    """One Marabou query: the ONNX network, the input box, and (if `clauses_of` is given) the unsafe
    clauses (one clause as plain constraints, several as one disjunction). (exit code, inputs if sat)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from maraboupy import Marabou, MarabouCore
    network = Marabou.read_onnx(str(network_path))
    inputs = np.asarray(network.inputVars[0]).flatten()
    for variable, low, high in zip(inputs, box.lo, box.hi, strict=True):
        network.setLowerBound(int(variable), float(low))
        network.setUpperBound(int(variable), float(high))
    if clauses_of is not None:
        outputs = np.asarray(network.outputVars[0]).flatten()
        clauses = [[_equation(atom, outputs, MarabouCore) for atom in clause.atoms] for clause in clauses_of]
        if len(clauses) == 1:
            for equation in clauses[0]:
                network.addEquation(equation, isProperty=True)
        else:
            network.addDisjunctionConstraint(clauses)
    options = Marabou.createOptions(timeoutInSeconds=max(1, math.ceil(timeout_s)), verbosity=0)
    exit_code, values, _ = network.solve(verbose=False, options=options)
    witness = np.array([values[int(variable)] for variable in inputs]) if exit_code == "sat" else None
    return exit_code, witness


def marabou_solve(
    network_path: Path, prop: Property, timeout_s: float, probe_s: float = PROBE_S
) -> MarabouAnswer:
    """Decide `prop` on the ONNX network with Marabou, in this process (one query per input box).

    An unsat answer is checked by a probe: the same box without the property must be sat (any input
    has outputs). Marabou 2.0 answers unsat there on some trained networks (its preprocessing drops
    near-zero weights unsoundly: Marabou issues #568, #825); its unsat is then reported as ERROR.
    """
    path = Path(network_path)
    if path.suffix.lower() != ".onnx":
        return MarabouAnswer("ERROR", f"{path}: the Marabou runner reads ONNX only", 0.0)
    started = time.perf_counter()
    unknown = ""
    for box in prop.boxes:
        remaining = timeout_s - (time.perf_counter() - started)
        if remaining <= 0:
            return MarabouAnswer("UNKNOWN", "timeout", time.perf_counter() - started)
        if not prop.unsafe.clauses:
            continue  # an empty unsafe set: this box is safe
        exit_code, witness = _query(path, box, prop.unsafe.clauses, remaining)
        if witness is not None:
            solve_s = time.perf_counter() - started
            violates = _violates(load_network(path), prop, witness)
            return MarabouAnswer("UNSAFE", "sat", solve_s, tuple(witness.tolist()), violates)
        if exit_code != "unsat":
            unknown = {"TIMEOUT": "timeout"}.get(exit_code, f"Marabou: {exit_code}")
    solve_s = time.perf_counter() - started
    if unknown:
        return MarabouAnswer("UNKNOWN", unknown, solve_s)
    probe_notes = []
    for box in prop.boxes:
        exit_code, _ = _query(path, box, None, probe_s)
        if exit_code == "unsat":
            why = "unsound here: Marabou finds the input box alone infeasible (issues #568, #825)"
            return MarabouAnswer("ERROR", why, solve_s, probe_s=time.perf_counter() - started - solve_s)
        probe_notes.append({"sat": "ok"}.get(exit_code, exit_code.lower()))
    reason = f"unsat (box probe: {', '.join(probe_notes)})"
    return MarabouAnswer("SAFE", reason, solve_s, probe_s=time.perf_counter() - started - solve_s)


def _violates(network: Network, prop: Property, witness: np.ndarray) -> bool:
    """Is another tool's input in a box, with outputs (float64, qverify's reading of the file) unsafe?"""
    outputs = evaluate_core(network, witness[None, :])
    return bool(prop.violated_by(witness[None, :], outputs)[0])


def marabou_worker(network: str, vnnlib: str, timeout_s: float, memory_mb: int) -> int:
    """`--marabou-worker`: decide one instance and print the MarabouAnswer as one JSON line; with
    its data segment capped at `memory_mb` (0: no cap), an allocation beyond fails in this process
    (an ERROR) instead of pressing on a shared machine."""
    if memory_mb:
        size = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_DATA, (size, size))
    answer = marabou_solve(Path(network), read_vnnlib(vnnlib), timeout_s)
    print(json.dumps(asdict(answer)), flush=True)
    return 0


# ----------------------------------------------------------------------------------- alpha-beta-CROWN


def abcrown_missing(script: Path | None, python: str) -> str:
    """ "" when `python` can run alpha-beta-CROWN's `script`, else why not (one line)."""
    if script is None:
        return (
            f"alpha-beta-CROWN is not named (--abcrown PATH/complete_verifier/abcrown.py or ${ABCROWN_ENV})"
        )
    if not script.is_file():
        return f"{script}: no such file (alpha-beta-CROWN's complete_verifier/abcrown.py)"
    try:
        probe = subprocess.run(
            [python, "-W", "ignore", "-c", "import torch, auto_LiRPA"],
            check=False,
            cwd=script.parent,
            capture_output=True,
            text=True,
            timeout=ABCROWN_PROBE_S,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{python} does not run: {error}"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        return (
            f"{python} cannot import torch and auto_LiRPA ({last}): name a Python that can (--abcrown-python)"
        )
    return ""


@dataclass(frozen=True, slots=True)
class AbcrownAnswer:
    """alpha-beta-CROWN's results file, read: the verdict and, for `sat`, its counterexample."""

    verdict: str  # SAFE / UNSAFE / UNKNOWN / ERROR
    reason: str
    witness: tuple[float, ...] = ()  # the input of its counterexample, X_0, X_1, ... in order


_ABCROWN_VERDICTS = {"sat": "UNSAFE", "unsat": "SAFE", "timeout": "UNKNOWN"}
_DOMAINS_VISITED = re.compile(r"(\d+) domains visited")
_BAB_SECONDS = re.compile(r"Cumulative time: ([0-9.]+)")  # its branch and bound's seconds so far, per round
_ASSIGNMENT = re.compile(r"\(\s*X_(\d+)\s+([^\s()]+)\s*\)")


def read_abcrown_results(text: str) -> AbcrownAnswer:
    """The results file of `abcrown.py --results_file F --save_adv_example`: its first line is
    `sat`, `unsat` or `timeout` (VNN-COMP's vocabulary), and after `sat` the counterexample follows
    as VNN-COMP's `((X_0 v) ... (Y_0 v) ...)`. An UNSAFE without a complete input is an ERROR: it
    could not be checked."""
    lines = text.strip().splitlines()
    first = lines[0].strip().lower() if lines else ""
    verdict = _ABCROWN_VERDICTS.get(first)
    if verdict is None:
        return AbcrownAnswer("ERROR", f"results file says {first[:60]!r}" if first else "empty results file")
    if verdict != "UNSAFE":
        return AbcrownAnswer(verdict, first)
    values = {int(index): float(value) for index, value in _ASSIGNMENT.findall("\n".join(lines[1:]))}
    if not values or sorted(values) != list(range(len(values))):
        return AbcrownAnswer("ERROR", "sat without a complete counterexample (X_0 ... X_n)")
    return AbcrownAnswer("UNSAFE", "sat", tuple(values[index] for index in range(len(values))))


# ----------------------------------------------------------------------------------- runs


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A finished (or killed) child: exit code (None when killed), output, wall and CPU seconds,
    and the largest resident set of the child and its descendants."""

    code: int | None
    out: str
    err: str
    wall_s: float
    cpu_s: float
    max_rss_mb: float


def _run_child(command: list[str], limit_s: float, cwd: Path = ROOT) -> ChildRun:
    """Run a child in its own process group; kill the group at `limit_s`. CPU time and memory come
    from `os.wait4` (the child and the descendants it waited for)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        killed = False
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid == child.pid:
                break
            if time.perf_counter() - started > limit_s and not killed:
                os.killpg(child.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.02)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return ChildRun(
            None if killed else child.returncode,
            out.read(),
            err.read(),
            wall,
            usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024,
        )


def _usage(run: ChildRun) -> dict:
    return {"cpu_s": round(run.cpu_s, 3), "max_rss_mb": round(run.max_rss_mb, 1)}


def run_qverify(
    instance: Instance,
    mode: str,
    timeout_s: float,
    scratch: Path,
    python: str = sys.executable,
    tool: str = QVERIFY,
) -> Outcome:
    """`python -m qverify verify` from this checkout (whatever engine it holds now), or with
    `python` another checkout's (`--baseline-python`: its environment imports its own qverify)."""
    record_path = scratch / f"{instance.suite}.{instance.name}.{mode}.{tool}.json"
    command = [
        python, "-m", "qverify", "verify", str(instance.network_for(mode)),
        "--property", str(instance.vnnlib), *MODES[mode], "--timeout", f"{timeout_s:g}",
        "--json", str(record_path),
    ]  # fmt: skip
    # (another checkout's Python runs in the scratch folder: from this checkout `-m qverify` would
    # import this checkout's package, which the working directory puts first on its path)
    run = _run_child(command, timeout_s + GRACE_S, cwd=ROOT if tool == QVERIFY else scratch)
    if run.code is None:
        reason = f"killed after {timeout_s + GRACE_S:g} s"
        return Outcome(tool, mode, instance.name, "UNKNOWN", run.wall_s, reason, _usage(run))
    if not record_path.is_file():
        last = run.err.strip().splitlines()[-1] if run.err.strip() else f"exit code {run.code}"
        return Outcome(tool, mode, instance.name, "ERROR", run.wall_s, last, _usage(run))
    record = json.loads(record_path.read_text())
    times = {
        key: value for key, value in record.get("times_s", {}).items() if isinstance(value, (int, float))
    }
    example = record.get("counterexample") or {}
    detail = {"decided_by": record.get("decided_by", ""), "times_s": times, **_usage(run)}
    detail["float_violates"] = example.get("float_violates")
    detail["replayed"] = record["status"] == "UNSAFE" and "replay.run" in times
    detail["engine_peak_mb"] = record.get("peak_memory_mb", 0.0)
    # the branch and bound's nodes (the node rate, `node_rates`)
    detail["nodes"] = int(((record.get("verdict") or {}).get("counts") or {}).get("netlevel.nodes", 0))
    return Outcome(tool, mode, instance.name, record["status"], run.wall_s, record.get("reason", ""), detail)


def run_marabou(instance: Instance, timeout_s: float, memory_mb: int) -> Outcome:
    command = [sys.executable, str(Path(__file__).resolve()), "--marabou-worker",
               str(instance.network), str(instance.vnnlib), f"{timeout_s:g}", str(memory_mb)]  # fmt: skip
    run = _run_child(command, timeout_s + GRACE_S)
    if run.code is None:
        reason = f"killed after {timeout_s + GRACE_S:g} s"
        return Outcome(MARABOU, "real", instance.name, "UNKNOWN", run.wall_s, reason, _usage(run))
    lines = [line for line in run.out.splitlines() if line.startswith("{")]
    if run.code != 0 or not lines:
        last = run.err.strip().splitlines()[-1] if run.err.strip() else f"exit code {run.code}"
        return Outcome(MARABOU, "real", instance.name, "ERROR", run.wall_s, last, _usage(run))
    answer = json.loads(lines[-1])
    detail = {"solve_s": round(answer["solve_s"], 3), "probe_s": round(answer["probe_s"], 3), **_usage(run)}
    detail["witness_violates"] = answer["witness_violates"]
    wall = run.wall_s - answer["probe_s"]  # the probe checks Marabou's answer; it is not part of deciding
    return Outcome(MARABOU, "real", instance.name, answer["verdict"], wall, answer["reason"], detail)


@dataclass(frozen=True, slots=True)
class Abcrown:
    """How to run alpha-beta-CROWN: its `abcrown.py` and the Python that imports its packages."""

    script: Path
    python: str
    config: Path | None = None  # its settings for a suite (else: the CPU and ABCROWN_BATCH)


def run_abcrown(instance: Instance, timeout_s: float, scratch: Path, abcrown: Abcrown) -> Outcome:
    """`abcrown.py` on the instance's ONNX and VNN-LIB files, in its own folder (it imports its
    modules from there), on the CPU; its results file read back, its counterexample checked in
    float64 with qverify's reading of the files."""
    stem = scratch / f"{instance.suite}.{instance.name}.abcrown"
    results = stem.with_suffix(".results.txt")
    # a copy (its name kept: .vnnlib or .vnnlib.gz): it writes a `.compiled` cache beside the file it reads
    vnnlib = scratch / f"{instance.suite}.{instance.name}.{instance.vnnlib.name}"
    shutil.copyfile(instance.vnnlib, vnnlib)
    settings = ["--config", str(abcrown.config)] if abcrown.config else []
    if not settings:  # (it expands relative paths from a config file's folder: it needs one)
        config = scratch / "abcrown.yaml"
        config.write_text("general:\n  device: cpu\n", encoding="utf-8")
        settings = ["--config", str(config), "--batch_size", str(ABCROWN_BATCH)]
    command = [
        abcrown.python, "-W", "ignore", str(abcrown.script), *settings, "--device", "cpu",
        "--onnx_path", str(instance.network), "--vnnlib_path", str(vnnlib),
        "--timeout", f"{timeout_s:g}", "--results_file", str(results), "--save_adv_example",
        "--cex_path", str(stem.with_suffix(".cex.txt")), "--output_file", str(stem.with_suffix(".out.pkl")),
    ]  # fmt: skip
    run = _run_child(command, timeout_s + GRACE_S, cwd=abcrown.script.parent)
    if run.code is None:  # (its branch and bound's progress so far still counts for its node rate)
        reason = f"killed after {timeout_s + GRACE_S:g} s"
        return Outcome(ABCROWN, "real", instance.name, "UNKNOWN", run.wall_s, reason, _bab_detail(run))
    if run.code != 0 or not results.is_file():
        last = run.err.strip().splitlines()[-1] if run.err.strip() else f"exit code {run.code}"
        return Outcome(ABCROWN, "real", instance.name, "ERROR", run.wall_s, last[:200], _usage(run))
    answer = read_abcrown_results(results.read_text())
    detail = _bab_detail(run)
    if answer.verdict == "UNSAFE":
        detail.update(_float32_witness(instance, np.array(answer.witness)))
    return Outcome(ABCROWN, "real", instance.name, answer.verdict, run.wall_s, answer.reason, detail)


def _bab_detail(run: ChildRun) -> dict:
    """The run's usage, and from alpha-beta-CROWN's log its branch and bound's domains visited and
    seconds (up to its last finished round; absent: no round finished)."""
    detail = _usage(run)
    if visited := _DOMAINS_VISITED.findall(run.out):
        detail["domains_visited"] = int(visited[-1])
    if rounds := _BAB_SECONDS.findall(run.out):
        detail["bab_s"] = float(rounds[-1])
    return detail


def _float32_witness(instance: Instance, witness: np.ndarray) -> dict:
    """`witness_violates` for a counterexample computed in float32: as it is and, when it lies
    outside the property's boxes by float32 rounding (alpha-beta-CROWN's inputs are float32, the
    VNN-LIB bounds decimal: an input at a bound rounds to a float32 up to half an ulp beyond it),
    moved into the nearest box (`witness_outside_box`: by how much at most)."""
    prop = read_vnnlib(instance.vnnlib)
    if len(witness) != prop.n_inputs:
        return {"witness_violates": False}
    network = load_network(instance.network)  # (read once: the witness may be checked twice)
    if _violates(network, prop, witness):
        return {"witness_violates": True}
    boxes = [(box.lo_array(), box.hi_array()) for box in prop.boxes]
    lo, hi = min(boxes, key=lambda b: float(np.max(np.maximum(b[0] - witness, witness - b[1]))))
    outside = float(np.max(np.maximum(np.maximum(lo - witness, witness - hi), 0.0)))
    if outside == 0.0 or outside > FLOAT32_SLACK * max(1.0, float(np.max(np.abs(witness)))):
        return {"witness_violates": False}
    inside = np.clip(witness, lo, hi)
    return {"witness_violates": _violates(network, prop, inside), "witness_outside_box": outside}


# ----------------------------------------------------------------------------------- selection


def int8_models(suite: str) -> dict[Path, Path]:
    """The suite's `[variants.int8]` networks (float network -> int8 model), resolved."""
    suite_file = SUITES[suite].parent / "suite.toml"
    if not suite_file.is_file():
        return {}
    with suite_file.open("rb") as handle:
        variant = tomllib.load(handle).get("variants", {}).get("int8", {})
    folder = suite_file.parent
    return {(folder / k).resolve(): (folder / v).resolve() for k, v in variant.get("networks", {}).items()}


def read_instances(suite: str) -> list[Instance]:
    csv_path = SUITES[suite]
    if not csv_path.is_file():
        hint = " (run benchmarks/vnncomp2022.py extract first)" if "vnncomp2022" in csv_path.parts else ""
        raise SystemExit(f"error: {csv_path}: no such file (suite {suite}){hint}")
    int8 = int8_models(suite)
    instances = []
    with csv_path.open(newline="") as handle:
        for row in csv.reader(handle):
            if not row or row[0].startswith("#"):
                continue
            network, vnnlib = (
                (csv_path.parent / row[0].strip()).resolve(),
                (csv_path.parent / row[1].strip()).resolve(),
            )
            if not vnnlib.is_file():
                how = f": build it with `python {BUILT_BY[suite]} {suite}`" if suite in BUILT_BY else ""
                raise SystemExit(f"error: {vnnlib}: no such file (suite {suite}){how}")
            stem = network.stem.removeprefix("ACASXU_run2a_").removesuffix("_batch_2000")
            vnnlib_stem = vnnlib.name.removesuffix(".gz").removesuffix(".vnnlib")
            instances.append(Instance(suite, f"{stem}-{vnnlib_stem}", network, vnnlib, int8.get(network)))
    return instances


def digits784_radii(epsilons: list[str], out: Path) -> list[Instance]:
    """digits784's centres at other radii: the properties built by the suite's own train.py (as
    bench_netlevel's `--epsilons` builds them), written as VNN-LIB files under `out` (every tool
    reads the same files; a resumed run finds them again)."""
    from benchmarks.bench_netlevel import digits_radii_instances
    from qverify.properties import format_vnnlib

    folder = SUITES["digits784"].parent
    network = read_instances("digits784")[0].network
    built, _ = digits_radii_instances(folder, epsilons)
    vnnlib_folder = out / "vnnlib-digits784"
    vnnlib_folder.mkdir(parents=True, exist_ok=True)
    instances = []
    for made in built:
        path = vnnlib_folder / f"{made.name}.vnnlib"
        path.write_text(format_vnnlib(made.prop, n_outputs=made.network.n_outputs), encoding="utf-8")
        instances.append(Instance("digits784", made.name, network, path.resolve()))
    return instances


def _patterns(spec: str) -> list[str]:
    """`phi1-4` -> the ACAS Xu properties 1..4; anything else: comma-separated globs on names."""
    patterns = []
    for part in spec.split(","):
        part = part.strip()
        if match := re.fullmatch(r"phi(\d+)(?:-(\d+))?", part):
            first, last = int(match[1]), int(match[2] or match[1])
            patterns += [f"*-prop_{p}" for p in range(first, last + 1)]
        elif part:
            patterns.append(part if any(c in part for c in "*?[") else f"*{part}*")
    return patterns


def select(
    instances: list[Instance], spec: str | None, limit: int | None, sample: int | None
) -> list[Instance]:
    if spec:
        patterns = _patterns(spec)
        instances = [i for i in instances if any(fnmatch.fnmatch(i.name, p) for p in patterns)]
    if sample is not None and 0 < sample < len(instances):
        positions = np.linspace(0, len(instances) - 1, sample).round().astype(int)
        instances = [instances[p] for p in dict.fromkeys(positions.tolist())]
    if limit is not None:
        instances = instances[:limit]
    return instances


# ----------------------------------------------------------------------------------- report


def _key(tool: str, mode: str, instance: str, timeout_s: float) -> str:
    return f"{tool}|{mode}|{instance}|timeout={timeout_s:g}"


def _cell(outcome: Outcome | None) -> str:
    if outcome is None:
        return "-"
    note = ""
    if outcome.tool in REFERENCES and outcome.detail.get("witness_violates") is False:
        note = " (witness not unsafe in float64)"
    elif outside := outcome.detail.get("witness_outside_box"):
        note = f" (witness {outside:.0e} outside the box: float32; moved in, unsafe)"
    elif outcome.verdict not in DECIDED and outcome.reason:
        note = f" ({outcome.reason.split(';')[0][:60]})"
    return f"{outcome.verdict} {outcome.wall_s:.1f}s{note}"


def disagreement(ours: Outcome | None, theirs: Outcome | None) -> bool:
    return (
        ours is not None and theirs is not None and ours.verdict in DECIDED and theirs.verdict in DECIDED
        and ours.verdict != theirs.verdict
    )  # fmt: skip


def evidence(ours: Outcome, theirs: Outcome) -> str:
    """Who a disagreement's concrete input convicts: the UNSAFE side's input, checked in float64."""
    if ours.verdict == "UNSAFE":
        checked = ours.detail.get("float_violates")
        side = "qverify's counterexample"
    else:
        checked = theirs.detail.get("witness_violates")
        side = f"{REFERENCES[theirs.tool]}'s witness"
    if checked is None:
        return f"{side} was not checked in float64"
    return f"{side} {'violates' if checked else 'does not violate'} the property in float64"


def _summary_line(label: str, outcomes: Sequence[Outcome]) -> str:
    counts = {
        verdict: sum(o.verdict == verdict for o in outcomes)
        for verdict in ("SAFE", "UNSAFE", "UNKNOWN", "ERROR")
    }
    walls = [o.wall_s for o in outcomes]
    median = statistics.median(walls) if walls else 0.0
    decided = counts["SAFE"] + counts["UNSAFE"]
    return (
        f"| {label} | {decided}/{len(outcomes)} | {counts['SAFE']} | {counts['UNSAFE']} | {counts['UNKNOWN']} "
        f"| {counts['ERROR']} | {sum(walls):.1f} | {median:.2f} |"
    )


def _ratios(pairs: list[tuple[Outcome, Outcome]], tool: str) -> None:
    """Total and median time ratios over all instances and over those both tools decide."""
    both = [(o, t) for o, t in pairs if o.verdict in DECIDED and t.verdict in DECIDED]
    for chosen_label, chosen in (("all instances", pairs), (f"the {len(both)} decided by both", both)):
        ours, theirs = [o.wall_s for o, _ in chosen], [t.wall_s for _, t in chosen]
        if not chosen or sum(theirs) <= 0:
            continue
        total = sum(ours) / sum(theirs)
        median = statistics.median(ours) / max(statistics.median(theirs), 1e-9)
        print(
            f"ratio qverify/{tool} on {chosen_label}: total {sum(ours):.1f} s / {sum(theirs):.1f} s = {total:.2f}, "
            f"median {statistics.median(ours):.2f} s / {statistics.median(theirs):.2f} s = {median:.2f}"
        )


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def suite_tables(
    instances: list[Instance], modes: Sequence[str], results: dict[str, Outcome], timeout_s: float
) -> None:
    """Per suite and run (tool x mode): decided/total, verdicts, seconds, CPU, memory, replays; and
    the instances whose decided verdicts differ between qverify's modes."""
    print(f"\n## Per suite, timeout {timeout_s:g} s (wall and CPU seconds of the child processes)\n")
    print(
        "| suite | run | decided | SAFE | UNSAFE | UNKNOWN | ERROR | total s | median s | CPU s | max RSS MB | UNSAFE replayed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    runs = [(tool, "real") for tool in REFERENCES]
    runs += [(tool, mode) for mode in modes for tool in (BASELINE, QVERIFY)]
    for suite in dict.fromkeys(i.suite for i in instances):
        chosen = [i for i in instances if i.suite == suite]
        for tool, mode in runs:
            found = [results.get(_key(tool, mode, i.name, timeout_s)) for i in chosen]
            outcomes = [o for o in found if o is not None]
            if not outcomes:
                continue
            count = {v: sum(o.verdict == v for o in outcomes) for v in ("SAFE", "UNSAFE", "UNKNOWN", "ERROR")}
            walls = [o.wall_s for o in outcomes]
            cpu = sum(o.detail.get("cpu_s", 0.0) for o in outcomes)
            rss = max((o.detail.get("max_rss_mb", 0.0) for o in outcomes), default=0.0)
            replayed = (
                "-"
                if tool in REFERENCES
                else f"{sum(bool(o.detail.get('replayed')) for o in outcomes)}/{count['UNSAFE']}"
            )
            label = REFERENCES.get(tool, f"qverify {mode}{' (baseline)' if tool == BASELINE else ''}")
            print(
                f"| {suite} | {label} | {count['SAFE'] + count['UNSAFE']}/{len(outcomes)} | {count['SAFE']} "
                f"| {count['UNSAFE']} | {count['UNKNOWN']} | {count['ERROR']} | {sum(walls):.1f} | {_median(walls):.2f} "
                f"| {cpu:.1f} | {rss:.0f} | {replayed} |"
            )
    differing = []
    for instance in instances:
        verdicts = {
            mode: results[key].verdict
            for mode in modes
            if (key := _key(QVERIFY, mode, instance.name, timeout_s)) in results
            and results[key].verdict in DECIDED
        }
        if len(set(verdicts.values())) > 1:
            differing.append(f"{instance.name} ({', '.join(f'{m} {v}' for m, v in verdicts.items())})")
    if differing:
        lines = "\n  ".join(differing)
        print(
            f"\nverdicts that differ between qverify's modes (different arithmetic, not an error):\n  {lines}"
        )


def node_rates(
    instances: list[Instance], modes: Sequence[str], results: dict[str, Outcome], timeout_s: float
) -> None:
    """Per instance where a branch and bound ran, each run's nodes and nodes per CPU second (of every
    thread and process: per core). qverify: its nodes over the whole run's CPU seconds (start-up,
    attack and root included: a lower bound of its search's rate). alpha-beta-CROWN: its domains
    visited over its branch and bound's share of the run's CPU seconds (its BaB seconds from its log
    over the run's wall seconds: the machine's load taken as even over the run), and beside it the
    domains per second of its BaB as it reports them (wall, on however many threads torch used)."""
    runs = [(ABCROWN, "real")] + [(tool, mode) for mode in modes for tool in (BASELINE, QVERIFY)]
    rows = []
    for instance in instances:
        cells = []
        for tool, mode in runs:
            outcome = results.get(_key(tool, mode, instance.name, timeout_s))
            if outcome is None:
                cells.append("-")
                continue
            cpu = outcome.detail.get("cpu_s", 0.0)
            if tool == ABCROWN:
                nodes, bab = outcome.detail.get("domains_visited", 0), outcome.detail.get("bab_s", 0.0)
                share = cpu * bab / outcome.wall_s if outcome.wall_s > 0 else 0.0
                rate = (
                    f"{nodes / share:.0f}/CPU s ({nodes / bab:.0f}/BaB s)" if nodes > 1 and bab > 0 else "-"
                )
            else:
                nodes = outcome.detail.get("nodes", 0)
                rate = f"{nodes / cpu:.0f}/CPU s" if nodes > 1 and cpu > 0 else "-"
            cells.append(f"{outcome.verdict} {nodes}, {rate}")
        if any(cell != "-" for cell in cells):
            rows.append(f"| {instance.name} | " + " | ".join(cells) + " |")
    if not rows:
        return
    labels = ["alpha-beta-CROWN"] + [
        f"qverify {mode}{' (baseline)' if tool == BASELINE else ''}" for tool, mode in runs[1:]
    ]
    print("\n## Node rates: verdict, branch-and-bound nodes, nodes per CPU second (`node_rates`)\n")
    print("| instance | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    print("\n".join(rows))


def report(
    instances: list[Instance], modes: Sequence[str], results: dict[str, Outcome], timeout_s: float
) -> int:
    """Print one table per mode (qverify beside every reference tool that ran), the summary and the
    per-suite tables; the number of real-mode disagreements."""
    bugs = 0
    references = [
        tool
        for tool in REFERENCES
        if any(_key(tool, "real", i.name, timeout_s) in results for i in instances)
    ]
    names = [REFERENCES[tool] for tool in references]
    for mode in modes:
        print(
            f"\n## qverify `{' '.join(MODES[mode])}` vs {', '.join(names) or 'no other tool'} "
            f"(real arithmetic), timeout {timeout_s:g} s\n"
        )
        print("| " + " | ".join(["instance", "qverify", *names, ""]) + " |")
        print("|---|---|" + "---|" * len(names) + "---|")
        ours_all: list[Outcome] = []
        theirs_all: dict[str, list[Outcome]] = {tool: [] for tool in references}
        pairs: dict[str, list[tuple[Outcome, Outcome]]] = {tool: [] for tool in references}
        flagged = []
        for instance in instances:
            if instance.network_for(mode) is None:
                continue
            ours = results.get(_key(QVERIFY, mode, instance.name, timeout_s))
            cells, flags = [_cell(ours)], []
            for tool in references:
                theirs = results.get(_key(tool, "real", instance.name, timeout_s))
                cells.append(_cell(theirs))
                if disagreement(ours, theirs):
                    flags.append(
                        f"**DISAGREE** ({REFERENCES[tool]})"
                        if mode == "real"
                        else f"differs ({mode} vs real)"
                    )
                    flagged.append(f"{instance.name} vs {REFERENCES[tool]} ({evidence(ours, theirs)})")
                if theirs is not None:
                    theirs_all[tool].append(theirs)
                    if ours is not None:
                        pairs[tool].append((ours, theirs))
            print(f"| {instance.name} | {' | '.join(cells)} | {', '.join(dict.fromkeys(flags))} |")
            ours_all += [ours] if ours else []
        print("\n| tool | decided | SAFE | UNSAFE | UNKNOWN | ERROR | total s | median s |")
        print("|---|---|---|---|---|---|---|---|")
        print(_summary_line(f"qverify {mode}", ours_all))
        for tool in references:
            print(_summary_line(REFERENCES[tool], theirs_all[tool]))
        for tool in references:
            print()
            _ratios(pairs[tool], REFERENCES[tool])
        if flagged:
            real = mode == "real"
            what = "DISAGREEMENT (a bug: both decide in real arithmetic)" if real else "verdicts differ"
            lines = "\n  ".join(flagged)
            print(f"\n{what} on {len(flagged)}:\n  {lines}", file=sys.stderr if real else sys.stdout)
            bugs += len(flagged) if real else 0
    suite_tables(instances, modes, results, timeout_s)
    return bugs


# ----------------------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--suite", action="append", choices=sorted(SUITES), help="instance set (repeatable; default acasxu)"
    )
    p.add_argument(
        "--instances", metavar="SPEC", help="phi1-4 (ACAS Xu properties) or comma-separated name globs"
    )
    p.add_argument(
        "--all", action="store_true", help="every instance of the suites (the default without --instances)"
    )
    p.add_argument("--limit", type=int, metavar="N", help="the first N selected instances")
    p.add_argument("--sample", type=int, metavar="N", help="N evenly spaced instances of the selection")
    p.add_argument("--modes", default="16.16,real", help="qverify modes, comma-separated: 16.16, real")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per instance and tool (default 60)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1: times are not shared)")
    p.add_argument("--no-marabou", action="store_true", help="run without Marabou")
    p.add_argument(
        "--abcrown",
        type=Path,
        default=os.environ.get(ABCROWN_ENV) or None,
        metavar="PATH",
        help=f"alpha-beta-CROWN's complete_verifier/abcrown.py: run it too (default ${ABCROWN_ENV}; not run without)",
    )
    p.add_argument(
        "--abcrown-python",
        default=os.environ.get(ABCROWN_PYTHON_ENV) or sys.executable,
        metavar="PYTHON",
        help=f"a Python that imports torch and auto_LiRPA (default ${ABCROWN_PYTHON_ENV}, else this one)",
    )
    p.add_argument(
        "--abcrown-config",
        type=Path,
        metavar="YAML",
        help="alpha-beta-CROWN's settings for the suite (e.g. a copy of its exp_configs/vnncomp21/acasxu.yaml "
        "without root_path and csv_name; input splitting is what it decides ACAS Xu with); default: the "
        f"CPU and a batch of {ABCROWN_BATCH} domains, its defaults otherwise",
    )
    p.add_argument(
        "--epsilons",
        metavar="E[,E...]",
        help="digits784: its centres at these radii instead of its instances.csv (e.g. 0.015,0.02)",
    )
    p.add_argument(
        "--marabou-memory-mb",
        type=int,
        default=MARABOU_MEMORY_MB,
        help=f"cap on Marabou's data segment in MB (default {MARABOU_MEMORY_MB}; 0: none). Marabou 2.0 reached 16-17 GB of resident "
        "memory on the 28x28 CNN of digits28-maxpool; capped at 8192 it fails there (std::bad_alloc, an "
        "ERROR): a cap protects a shared machine, but the comparison is fair only without one",
    )
    p.add_argument(
        "--baseline-python",
        metavar="PYTHON",
        help="also run the qverify that this Python imports (e.g. another checkout's .venv/bin/python), "
        "interleaved with this checkout's, as 'qverify-baseline': before/after tables and node rates",
    )
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench_marabou", help="journal folder")
    p.add_argument("--resume", action="store_true", help="skip the runs the journal holds")
    p.add_argument("--overwrite", action="store_true", help="start a new journal")
    p.add_argument(
        "--marabou-worker",
        nargs=4,
        metavar=("ONNX", "VNNLIB", "TIMEOUT", "MEMORY_MB"),
        help=argparse.SUPPRESS,
    )
    return p


def _jobs(instances: Iterable[Instance], modes: Sequence[str], references: Sequence[str], baseline: bool):
    """Every run, interleaved per instance (the tools, then each mode: the baseline, then this one)."""
    for instance in instances:
        for tool in references:
            yield tool, "real", instance
        for mode in modes:
            if instance.network_for(mode) is not None:
                if baseline:
                    yield BASELINE, mode, instance
                yield QVERIFY, mode, instance


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.marabou_worker:
        network, vnnlib, timeout, memory = args.marabou_worker
        return marabou_worker(network, vnnlib, float(timeout), int(memory))
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown_modes = [mode for mode in modes if mode not in MODES]
    if unknown_modes or args.timeout <= 0 or args.jobs < 1:
        print(
            f"error: modes must be among {', '.join(MODES)}; --timeout and --jobs positive", file=sys.stderr
        )
        return 2
    suites = args.suite or ["acasxu"]
    if args.epsilons and suites != ["digits784"]:
        print("error: --epsilons applies to --suite digits784 alone", file=sys.stderr)
        return 2
    if args.epsilons:
        instances = digits784_radii([e.strip() for e in args.epsilons.split(",") if e.strip()], args.out)
    else:
        instances = [i for suite in suites for i in read_instances(suite)]
    instances = select(instances, None if args.all else args.instances, args.limit, args.sample)
    if not instances:
        print("error: no instance matches the selection", file=sys.stderr)
        return 2
    if args.baseline_python is not None and shutil.which(args.baseline_python) is None:
        print(f"error: {args.baseline_python}: no such Python (--baseline-python)", file=sys.stderr)
        return 2
    references = []
    missing = "" if args.no_marabou else marabou_missing()
    if missing:
        print(f"note: {missing}: running without Marabou", file=sys.stderr)
    elif not args.no_marabou:
        references.append(MARABOU)
    abcrown = None
    if args.abcrown is not None:
        config = args.abcrown_config.expanduser().resolve() if args.abcrown_config else None
        abcrown = Abcrown(Path(args.abcrown).expanduser().resolve(), args.abcrown_python, config)
        if config is not None and not config.is_file():
            print(f"error: {config}: no such file (--abcrown-config)", file=sys.stderr)
            return 2
        if why := abcrown_missing(abcrown.script, abcrown.python):
            print(f"note: {why}: running without alpha-beta-CROWN", file=sys.stderr)
            abcrown = None
        else:
            references.append(ABCROWN)

    journal = Journal(args.out / "journal.jsonl")
    args.out.mkdir(parents=True, exist_ok=True)
    if journal.path.exists() and not (args.resume or args.overwrite):
        print(f"error: {journal.path} exists: pass --resume to continue it or --overwrite", file=sys.stderr)
        return 2
    if args.overwrite:
        journal.reset()
    results = {entry["key"]: Outcome(**entry["record"]["outcome"]) for entry in journal.resume()}
    todo = [
        job
        for job in _jobs(instances, modes, references, args.baseline_python is not None)
        if _key(job[0], job[1], job[2].name, args.timeout) not in results
    ]
    print(f"{len(instances)} instances, modes {', '.join(modes)}, "
          f"beside {', '.join(REFERENCES[t] for t in references) or 'no other tool'}; "
          f"{len(todo)} runs to do ({len(results)} journaled)", file=sys.stderr)  # fmt: skip
    print(speed_line("start"), flush=True)

    def run(job) -> Outcome:
        tool, mode, instance = job
        if tool == MARABOU:
            return run_marabou(instance, args.timeout, args.marabou_memory_mb)
        if tool == ABCROWN:
            assert abcrown is not None
            return run_abcrown(instance, args.timeout, scratch, abcrown)
        if tool == BASELINE:
            return run_qverify(instance, mode, args.timeout, scratch, args.baseline_python, BASELINE)
        return run_qverify(instance, mode, args.timeout, scratch)

    with (
        tempfile.TemporaryDirectory(prefix="bench-marabou-") as folder,
        ThreadPoolExecutor(args.jobs) as pool,
    ):
        scratch = Path(folder)
        futures = [pool.submit(run, job) for job in todo]
        for future in tqdm(as_completed(futures), total=len(futures), desc="runs", unit="run"):
            outcome = future.result()
            key = _key(outcome.tool, outcome.mode, outcome.instance, args.timeout)
            results[key] = outcome
            journal.append(
                {
                    "key": key,
                    "task": outcome.instance,
                    "record": {"status": outcome.verdict, "outcome": asdict(outcome)},
                }
            )
    print(speed_line("end"), flush=True)
    disagreements = report(instances, modes, results, args.timeout)
    node_rates(instances, modes, results, args.timeout)
    return 1 if disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
