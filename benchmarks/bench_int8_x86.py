"""int8 vs int8-x86 on models that can saturate: is the scalar path viable for the x86 variant?

The array-level front end lifts `int8` harnesses to the network level; it declines `int8-x86` ones
whose pair sums can saturate (`qv_sat16`), and the scalar path decides them. This script quantizes
ACAS Xu networks and the digits MLP with `qverify quantize`'s defaults (QDQ, per tensor, int8: the
pair sums can saturate on x86 without AVX-VNNI) and runs the same properties at both formats:

- ACAS Xu (5 inputs, 6 x 50 ReLU): networks 1_1 and 2_1, properties phi1..phi4 (VNN-COMP files);
- digits MLP (64-32-16-10): L-inf robustness of test images at eps = 1 pixel level (of 16).

    python benchmarks/bench_int8_x86.py [--out DIR] [--timeout 60] [--images 6]

prints one row per task: verdict, wall seconds, CPU seconds (of the whole `qverify verify` process
tree), what decided it; then totals per format. Re-run on idle cores for publishable times.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ACAS_NETWORKS = ("1_1", "2_1")
FORMATS = ("int8", "int8-x86")


def _qverify() -> list[str]:
    return [sys.executable, "-m", "qverify"]


def quantize(source: Path, calibration: str, output: Path) -> Path:
    if not output.exists():
        subprocess.run(
            [*_qverify(), "quantize", str(source), "--calibration", calibration, "-o", str(output)],
            check=True,
            capture_output=True,
        )
    return output


def run(task: list[str], record: Path, timeout: float) -> dict:
    """One `qverify verify` with its verdict, wall and CPU seconds (children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [*_qverify(), "verify", *task, "--timeout", str(timeout), "--json", str(record)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    data = json.loads(record.read_text()) if record.exists() else {}
    notes = data.get("verdict", {}).get("notes", [])
    return {
        "verdict": done.stdout.split("\n", 1)[0].strip() or "ERROR",
        "wall": wall,
        "cpu": cpu,
        "decided_by": data.get("decided_by", ""),
        "lifted": not any("not lifted" in note or "scalar front end" in note for note in notes),
    }


def acas_tasks(out: Path) -> list[tuple[str, list[str]]]:
    tasks = []
    for name in ACAS_NETWORKS:
        source = ROOT / "benchmarks" / "acasxu" / "onnx" / f"ACASXU_run2a_{name}_batch_2000.onnx"
        model = quantize(source, "uniform", out / f"acas_{name}.int8.onnx")
        for prop in range(1, 5):
            vnnlib = ROOT / "benchmarks" / "acasxu" / "vnnlib" / f"prop_{prop}.vnnlib"
            tasks.append((f"acas {name} phi{prop}", [str(model), "--property", str(vnnlib)]))
    return tasks


def digits_tasks(out: Path, images: int) -> list[tuple[str, list[str]]]:
    model = quantize(
        ROOT / "benchmarks" / "digits" / "digits.nnet", "digits-raw:train", out / "digits.int8.onnx"
    )
    suite = tomllib.loads((ROOT / "benchmarks" / "digits" / "suite.toml").read_text())
    tasks = []
    for task in suite["task"]:
        prop = task["property"]
        if prop["eps"] != "1" or len(tasks) >= images:
            continue
        center = ",".join(f"{v / 16:.6g}" for v in prop["center"])  # the quantized core: pixels / 16
        tasks.append(
            (
                f"digits {task['name']}",
                [str(model), "--center", center, "--eps", f"{1 / 16:.6g}", "--label", str(prop["label"])],
            )
        )
    return tasks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="int8-x86-")))
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--images", type=int, default=6)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = acas_tasks(args.out) + digits_tasks(args.out, args.images)
    print("| task | format | verdict | wall s | CPU s | decided by | lifted |")
    print("|---|---|---|---:|---:|---|---|")
    totals: dict[str, list[float]] = {fmt: [0, 0.0, 0.0] for fmt in FORMATS}
    for name, task in tasks:
        for fmt in FORMATS:
            record = args.out / f"{name.replace(' ', '_')}-{fmt}.json"
            result = run([*task, "--format", fmt], record, args.timeout)
            decided = result["verdict"] in ("SAFE", "UNSAFE")
            totals[fmt][0] += decided
            totals[fmt][1] += result["wall"]
            totals[fmt][2] += result["cpu"]
            print(
                f"| {name} | {fmt} | {result['verdict']} | {result['wall']:.1f} | {result['cpu']:.1f} | "
                f"{result['decided_by']} | {'yes' if result['lifted'] else 'no'} |",
                flush=True,
            )
    for fmt, (decided, wall, cpu) in totals.items():
        print(f"{fmt}: {int(decided)}/{len(tasks)} decided, {wall:.0f} s wall, {cpu:.0f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
