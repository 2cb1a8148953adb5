"""What `qverify verify` costs besides reasoning, stage by stage, on a few ACAS Xu queries (issue 16).

Runs `python -m qverify verify NET --property P ... --json OUT` as a user would (a fresh process, the
checkout's own code, Python allowed to cache bytecode) and reads the per-stage times of the record:

    startup     process start -> `qverify.cli.main` (interpreter, the `qverify` package)
    imports     main -> the command's handler (the command's modules, argument parsing)
    load        reading the network and the property
    quantize, invariants, codegen
    engine.start  the engine's child process: interpreter, engine imports, reading its answer
    engine      the engine's own time (front end and reasoning: NOT overhead, shown for scale)
    replay      gcc on the harness (and the network), the replay runs, the simulator, the example
    exit        what the record does not hold: writing it, the process's exit (wall - the rest)

`overhead` = wall - engine: everything that is not the engine's own work, the figure issue 16 wants
under 1 s. A record written before these stages were recorded (an older checkout, e.g. main before
this change, given with --checkout) only has quantize..replay: the rest shows in `exit`.

    python benchmarks/bench_overhead.py                       # this checkout, 3 runs per query
    python benchmarks/bench_overhead.py --checkout /path/to/main --checkout .   # before / after
    python benchmarks/bench_overhead.py --profile             # + cProfile of the parent process
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


QUERIES = (
    Query("1_9 phi3 <16,16>", _acas("1_9", 3, "--format", "16.16")),
    Query("1_1 phi1 <16,16>", _acas("1_1", 1, "--format", "16.16")),
    Query("1_9 phi3 float real", _acas("1_9", 3, "--float", "--semantics", "real")),
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


def run_once(checkout: Path, query: Query, timeout: float) -> dict[str, float]:
    """One `qverify verify` run: wall time and the record's stages (seconds)."""
    with tempfile.TemporaryDirectory(prefix="qv-overhead-") as folder:
        out = Path(folder) / "record.json"
        command = [sys.executable, "-m", "qverify", "verify", *query.arguments]
        command += ["--timeout", f"{timeout:g}", "--json", str(out)]
        started = time.perf_counter()
        subprocess.run(command, cwd=checkout, env=_environment(), capture_output=True, check=False)
        wall = time.perf_counter() - started
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
    stages["status"] = record["status"]  # type: ignore[assignment]
    return stages


def _columns() -> list[str]:
    return [name for name, _ in STAGES] + ["exit", "overhead", "engine", "wall"]


def _warm(checkout: Path) -> None:
    """A first run writes the bytecode caches (not measured)."""
    command = [sys.executable, "-m", "qverify", "verify", "--help"]
    subprocess.run(command, cwd=checkout, env=_environment(), capture_output=True, check=False)


def measure(checkouts: list[Path], repeat: int, timeout: float) -> None:
    """Each query, `repeat` times on every checkout in turn (interleaved: a machine whose load
    changes affects all alike); the medians per checkout."""
    columns = _columns()
    for checkout in checkouts:
        _warm(checkout)
    print(f"{'query':28s} {'checkout':14s} {'status':7s} " + " ".join(f"{c:>9s}" for c in columns))
    overheads: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
    for query in QUERIES:
        runs: dict[Path, list[dict]] = {checkout: [] for checkout in checkouts}
        for _ in range(repeat):
            for checkout in checkouts:
                runs[checkout].append(run_once(checkout, query, timeout))
        for checkout in checkouts:
            row = {c: statistics.median(run[c] for run in runs[checkout]) for c in columns}
            overheads[checkout].append(row["overhead"])
            cells = " ".join(f"{row[c]:9.3f}" for c in columns)
            label = checkout.name[-14:]
            print(f"{query.name:28s} {label:14s} {runs[checkout][0]['status']:7s} {cells}", flush=True)
    for checkout, values in overheads.items():
        print(
            f"{checkout}: overhead per query median {statistics.median(values):.3f} s, "
            f"max {max(values):.3f} s"
        )


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
    parser.add_argument("--profile", action="store_true", help="also cProfile the parent process")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (the figures are wall times)")
    checkouts = [checkout.resolve() for checkout in args.checkout or [ROOT]]
    print(f"{args.repeat} runs per query and checkout, interleaved; medians in seconds")
    measure(checkouts, args.repeat, args.timeout)
    if args.profile:
        for checkout in checkouts:
            profile(checkout, args.timeout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
