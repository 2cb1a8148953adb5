"""What `qverify verify` costs besides reasoning, stage by stage, on a few ACAS Xu queries (issue 16).

Runs `python -m qverify verify NET --property P ... --json OUT` as a user would (a fresh process, the
checkout's own code, Python allowed to cache bytecode) and reads the per-stage times of the record:

    startup     process start -> `qverify.cli.main` (interpreter, the `qverify` package)
    imports     main -> the command's handler (the command's modules, argument parsing)
    load        reading the network and the property
    quantize, invariants, codegen
    engine.start  the engine's process: the wait for the warm engine host's imports (the record's
                  backend.host), the task's fork, reading its answer
    engine      the engine's own time (front end and reasoning: NOT overhead, shown for scale)
    replay      gcc on the harness (and the network), the replay runs, the simulator, the example
    exit        what the record does not hold: writing it, the process's exit (wall - the rest)

`overhead` = wall - engine: everything that is not the engine's own work, the figure issue 16 wants
under 1 s; `cpu` the CPU seconds (user + system) of the whole run, every process of it (the
command, its engine host and task, gcc). A record written before these stages were recorded (an
older checkout, e.g. main before this change, given with --checkout) only has quantize..replay: the
rest shows in `exit`.

`--in-process` adds, per query, the same pipeline with the engine run inside the command's own
process (its imports after the harness, no engine process; a model built here: qverify has no
such mode) beside `qverify verify` as it is (issue 33: "the engine process started with the task,
or in process when --memory is not set: whichever is faster, measured").

    python benchmarks/bench_overhead.py                       # this checkout, 3 runs per query
    python benchmarks/bench_overhead.py --checkout /path/to/main --checkout .   # before / after
    python benchmarks/bench_overhead.py --in-process          # + the engine in the same process
    python benchmarks/bench_overhead.py --profile             # + cProfile of the parent process
    python benchmarks/bench_overhead.py --only onnx --repeat 15   # issue 32's ACAS Xu queries only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine_speed import speed_line

ACAS = "benchmarks/acasxu"


@dataclass(frozen=True)
class Query:
    name: str
    arguments: tuple[str, ...]


def _acas(net: str, prop: int, *implementation: str) -> tuple[str, ...]:
    return (
        f"{ACAS}/nnet/ACASXU_run2a_{net}_batch_2000.nnet",
        "--property",
        f"{ACAS}/vnnlib/prop_{prop}.vnnlib",
        *implementation,
    )


def _acas_onnx(net: str, prop: int, *implementation: str) -> tuple[str, ...]:
    network = f"{ACAS}/onnx/ACASXU_run2a_{net}_batch_2000.onnx"
    return (network, "--property", f"{ACAS}/vnnlib/prop_{prop}.vnnlib", *implementation)


def _iris(percent: int) -> tuple[str, ...]:
    center = ("--center", "5.0,3.4,1.5,0.2", "--label", "0", "--units", "raw")
    return ("benchmarks/iris/iris.onnx", *center, "--rect", str(percent), "--format", "8.8")


QUERIES = (
    Query("1_9 phi3 <16,16>", _acas("1_9", 3, "--format", "16.16")),
    Query("1_1 phi1 <16,16>", _acas("1_1", 1, "--format", "16.16")),
    Query("1_9 phi3 float real", _acas("1_9", 3, "--float", "--semantics", "real")),
    Query("iris setosa R10 <8,8>", _iris(10)),  # SAFE (issue 33: one iris box under 0.6 s)
    Query("iris setosa R50 <8,8>", _iris(50)),  # UNSAFE
    # issue 32's ACAS Xu suite (ONNX, as bench_marabou runs it): median <= 0.6 s a query
    Query("2_3 phi4 onnx <16,16>", _acas_onnx("2_3", 4, "--format", "16.16")),  # SAFE
    Query("2_3 phi2 onnx <16,16>", _acas_onnx("2_3", 2, "--format", "16.16")),  # UNSAFE
    Query("2_3 phi4 onnx float real", _acas_onnx("2_3", 4, "--format", "float", "--semantics", "real")),
)

STAGES = (
    ("startup", ("startup",)),
    ("imports", ("imports",)),
    ("load", ("load",)),
    ("quantize", ("quantize",)),
    ("invariants", ("invariants",)),
    ("codegen", ("codegen",)),
    ("engine.start", ()),  # backend - backend.total
    ("replay", ("replay",)),
)


def _environment() -> dict[str, str]:
    """The user's environment, with bytecode caching allowed (a sandbox that forbids it would
    charge every run the compilation of every module)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# The pipeline with the engine in the command's own process: `qverify verify` whose back end calls
# check_file here (after importing the engine) instead of running an engine process.
IN_PROCESS_SCRIPT = r"""
import sys
import qverify.cli, qverify.verification
from qverify.backends.base import Backend, Verdict

class InProcessEngine(Backend):
    name = "internal"

    def check(self, job, limits):
        from qverify.engine.api import check_file
        from qverify.engine.result import EngineOptions

        result = check_file(job.harness, [job.include_dir], EngineOptions(timeout_s=limits.timeout_s - 3))
        return Verdict.from_json({**result.to_json(), "backend": "internal"})

qverify.verification.make_backend = lambda options: InProcessEngine()
qverify.cli._start_engine_early = lambda argv: None
raise SystemExit(qverify.cli.main(sys.argv[1:]))
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(checkout: Path, query: Query, timeout: float, in_process: bool = False) -> dict[str, float]:
    """One `qverify verify` run (or its in-process model): wall and CPU time, the record's stages."""
    with tempfile.TemporaryDirectory(prefix="qv-overhead-") as folder:
        out = Path(folder) / "record.json"
        program = ["-c", IN_PROCESS_SCRIPT] if in_process else ["-m", "qverify"]
        command = [sys.executable, *program, "verify", *query.arguments]
        command += ["--timeout", f"{timeout:g}", "--json", str(out)]
        before = _children_cpu()
        started = time.perf_counter()
        subprocess.run(command, cwd=checkout, env=_environment(), capture_output=True, check=False)
        wall = time.perf_counter() - started
        cpu = _children_cpu() - before
        record = json.loads(out.read_text())
    times = record["times_s"]
    engine = times.get("backend.total", times.get("backend", 0.0))
    stages = {name: sum(times.get(key, 0.0) for key in keys) for name, keys in STAGES}
    stages["engine.start"] = max(0.0, times.get("backend", 0.0) - engine)
    recorded = sum(stages.values()) + engine
    stages["exit"] = max(0.0, wall - recorded)
    stages["engine"] = engine
    stages["overhead"] = wall - engine
    stages["wall"] = wall
    stages["cpu"] = cpu
    stages["status"] = record["status"]  # type: ignore[assignment]
    return stages


def _columns() -> list[str]:
    return [name for name, _ in STAGES] + ["exit", "overhead", "engine", "wall", "cpu"]


def _warm(checkout: Path) -> None:
    """A first run writes the bytecode caches (not measured)."""
    command = [sys.executable, "-m", "qverify", "verify", "--help"]
    subprocess.run(command, cwd=checkout, env=_environment(), capture_output=True, check=False)


def measure(
    checkouts: list[Path], repeat: int, timeout: float, in_process: bool = False, only: str = ""
) -> None:
    """Each query, `repeat` times on every checkout in turn (interleaved: a machine whose load
    changes affects all alike), and in the in-process model on the last one; the medians."""
    columns = _columns()
    for checkout in checkouts:
        _warm(checkout)
    print(f"{'query':28s} {'checkout':14s} {'status':7s} " + " ".join(f"{c:>9s}" for c in columns))
    modes = [(checkout, False) for checkout in checkouts] + ([(checkouts[-1], True)] if in_process else [])
    overheads: dict[tuple[Path, bool], list[float]] = {mode: [] for mode in modes}
    for query in [query for query in QUERIES if only in query.name]:
        runs: dict[tuple[Path, bool], list[dict]] = {mode: [] for mode in modes}
        for _ in range(repeat):
            for checkout, inside in modes:
                runs[(checkout, inside)].append(run_once(checkout, query, timeout, inside))
        for mode in modes:
            row = {c: statistics.median(run[c] for run in runs[mode]) for c in columns}
            overheads[mode].append(row["overhead"])
            cells = " ".join(f"{row[c]:9.3f}" for c in columns)
            label = "in-process" if mode[1] else mode[0].name[-14:]
            print(f"{query.name:28s} {label:14s} {runs[mode][0]['status']:7s} {cells}", flush=True)
    for (checkout, inside), values in overheads.items():
        checkout = Path(f"{checkout} (in-process model)") if inside else checkout
        print(
            f"{checkout}: overhead per query median {statistics.median(values):.3f} s, "
            f"max {max(values):.3f} s"
        )


# The same stages, run in one process per checkout and timed in CPU seconds (this process's and its
# children's: gcc): a loaded machine stretches wall times, CPU times much less. The engine's process
# start is measured as its imports alone.
CPU_SCRIPT = r"""
import resource, sys, tempfile, time
from pathlib import Path

def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

times, last = {}, cpu()
def lap(stage):
    global last
    now = cpu(); times[stage] = now - last; last = now

net_path, prop_path, label = sys.argv[1:4]
from qverify.cli import build_parser
try:
    parser = build_parser(["verify"])
except TypeError:  # a checkout from before the sub-commands were imported on demand
    parser = build_parser()
parser.parse_args(["verify", net_path, "--property", prop_path])
lap("imports")
from qverify.io import load_network
from qverify.properties import read_vnnlib, to_normalised
from qverify.quant import quantize_network
from qverify.quant.labels import parse_number_format
from qverify.quant import ImplementationOptions
net = load_network(net_path)
prop = to_normalised(read_vnnlib(prop_path), net)
lap("load")
qnet = quantize_network(net, ImplementationOptions(number=parse_number_format(label)))
lap("quantize")
from qverify.invariants import compute_bounds
bounds = compute_bounds(qnet, prop).bounds
lap("invariants")
from qverify import codegen
work = Path(tempfile.mkdtemp())
harness = codegen.render_harness(qnet, prop, bounds).write(work / "harness")
lap("codegen")
network_c = codegen.render_network(qnet).write(work / "network")
if hasattr(codegen, "compile_replays"):
    codegen.compile_replays([(harness, None), (network_c, None)], codegen.REPLAY_OPTIMISE)
else:
    codegen.compile_replay(harness, harness.with_name("harness_replay"))
    codegen.compile_replay(network_c)
lap("replay.compile")
print(" ".join(f"{k}={v:.4f}" for k, v in times.items()))
"""
ENGINE_IMPORTS = (
    "import qverify.engine.__main__, qverify.engine.cfront, qverify.engine.scalar.symex, "
    "qverify.engine.scalar.strategy, qverify.engine.scalar.passes.simplify"
)
CPU_QUERIES = (
    (
        "1_9 phi3 <16,16>",
        f"{ACAS}/nnet/ACASXU_run2a_1_9_batch_2000.nnet",
        f"{ACAS}/vnnlib/prop_3.vnnlib",
        "16.16",
    ),
    (
        "1_9 phi3 float",
        f"{ACAS}/nnet/ACASXU_run2a_1_9_batch_2000.nnet",
        f"{ACAS}/vnnlib/prop_3.vnnlib",
        "float",
    ),
)


def _child_cpu(command: list[str], cwd: Path) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=cwd, env=_environment(), capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return used, done.stdout.strip()


def measure_cpu(checkouts: list[Path], repeat: int) -> None:
    """CPU seconds per stage (minimum over the runs), without the engine's reasoning."""
    print("\nCPU seconds (minimum over the runs; the parent's stages in one process, gcc included)")
    stages = (
        "process",
        "imports",
        "load",
        "quantize",
        "invariants",
        "codegen",
        "replay.compile",
        "engine imports",
    )
    print(f"{'query':28s} {'checkout':14s} " + " ".join(f"{s:>14s}" for s in stages) + f" {'sum':>9s}")
    for name, net, prop, label in CPU_QUERIES:
        for checkout in checkouts:
            best: dict[str, float] = {}
            for _ in range(repeat):
                total, line = _child_cpu([sys.executable, "-c", CPU_SCRIPT, net, prop, label], checkout)
                values = {k: float(v) for k, v in (item.split("=") for item in line.split())}
                values["process"] = max(0.0, total - sum(values.values()))  # interpreter start and exit
                values["engine imports"] = _child_cpu([sys.executable, "-c", ENGINE_IMPORTS], checkout)[0]
                best = {k: min(v, best.get(k, v)) for k, v in values.items()}
            cells = " ".join(f"{best.get(s, 0.0):14.3f}" for s in stages)
            print(f"{name:28s} {checkout.name[-14:]:14s} {cells} {sum(best.values()):9.3f}", flush=True)


def profile(checkout: Path, timeout: float) -> None:
    """cProfile of the parent process on the first query (the engine's child is not profiled)."""
    with tempfile.TemporaryDirectory(prefix="qv-overhead-") as folder:
        stats = Path(folder) / "verify.prof"
        command = [sys.executable, "-m", "cProfile", "-o", str(stats), "-m", "qverify", "verify"]
        command += [*QUERIES[0].arguments, "--timeout", f"{timeout:g}"]
        subprocess.run(command, cwd=checkout, env=_environment(), capture_output=True, check=False)
        import pstats

        print(f"\n== cProfile of the parent process, {QUERIES[0].name} (cumulative, top 25)")
        pstats.Stats(str(stats)).sort_stats("cumulative").print_stats(25)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkout", action="append", type=Path, help="repository root (default: this one)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per query (medians are shown)")
    parser.add_argument("--timeout", type=float, default=120.0, help="--timeout of each run")
    parser.add_argument("--cpu-only", action="store_true", help="only the CPU-time table (quick)")
    parser.add_argument(
        "--in-process", action="store_true", help="also the pipeline with the engine in the same process"
    )
    parser.add_argument("--profile", action="store_true", help="also cProfile the parent process")
    parser.add_argument("--only", default="", metavar="TEXT", help="only the queries whose name holds TEXT")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (the figures are wall times)")
    print(speed_line("start"), flush=True)
    checkouts = [checkout.resolve() for checkout in args.checkout or [ROOT]]
    print(f"{args.repeat} runs per query and checkout, interleaved; medians in seconds")
    if not args.cpu_only:
        measure(checkouts, args.repeat, args.timeout, args.in_process, args.only)
    if not args.only:
        measure_cpu(checkouts, args.repeat)
    if args.profile:
        for checkout in checkouts:
            profile(checkout, args.timeout)
    print(speed_line("end"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
