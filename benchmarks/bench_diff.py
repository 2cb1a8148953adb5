#!/usr/bin/env python3
"""Benchmark `qverify diff` (a benchmark, not a test; docs/diff.md).

Pairs (reference float, IEEE single):
  digits MLP  benchmarks/digits/digits.nnet on digits-raw:test: vs <8,8>, <6,4>, half, and int8 (an
              onnxruntime int8 model quantized here, as bench_impact.py does);
  digits CNN  benchmarks/digits-cnn/digits_cnn.onnx on digits:test: vs its int8 model (QOperator);
  ACAS Xu     network 1_1 (seeds uniform in its input box, unit coordinates): vs <16,16> and the narrow <4,6>.

Search mode: GA (DiffChaser), distortion search (DiverGet, PSO), random search and random distortion
vectors, the same budget per seed (queries) and the same seeds; prints #DII, DiR, SR, time and queries
to the first DII, diversity, VR. Proof mode: L-inf regions around the first N seeds (radius as a
fraction of the input range) with the internal engine, a timeout per region; prints the counts of
SAFE / UNSAFE / UNKNOWN / ERROR, median and maximum time, what decided them (sampling, bisection,
stability proofs, the two-network harness), and the share decided (goal: >= 80 % within 60 s) with
`qverify diff --prove`'s default strategy (`--no-sampling` / `--no-stability` measure the harness alone);
int8 pairs included (their input codes tied to the input exactly, docs/diff.md). Each run is journalled as its diff.json: an
interrupted benchmark resumes where it stopped (delete the folder to start over).

Usage:
  python benchmarks/bench_diff.py [--out results/bench-diff] [--seeds 20] [--budget 500] [--regions 20]
                                  [--timeout 60] [--pairs mlp-8.8,acas-16.16,...] [--no-proof] [--no-search]
                                  [--no-sampling] [--no-stability]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_impact import mlp_int8
from qverify.assurance.diff.records import RegionVerdict
from qverify.assurance.diff.report import METHOD_HEADER, REGION_HEADER, decided_share, region_rows
from qverify.assurance.impact.tables import aligned
from qverify.cli import main as qverify_main

MLP = ROOT / "benchmarks" / "digits" / "digits.nnet"
CNN = ROOT / "benchmarks" / "digits-cnn"
ACAS = ROOT / "benchmarks" / "acasxu" / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet"
RADIUS = {"digits": "0.01", "acas": "0.001"}


def pairs(out: Path, radius: dict[str, str] = RADIUS) -> dict[str, tuple[list[str], str | None]]:
    """name -> (arguments of `qverify diff`, the proof-mode radius or None)."""
    mlp = [str(MLP), "--data", "digits-raw:test"]
    cnn = [str(CNN / "digits_cnn.onnx"), "--data", "digits:test"]
    return {
        "mlp-8.8": ([*mlp, "--candidate", "8.8"], radius["digits"]),
        "mlp-6.4": ([*mlp, "--candidate", "6.4"], radius["digits"]),
        "mlp-half": ([*mlp, "--candidate", "half"], radius["digits"]),
        "mlp-int8": ([*mlp, "--candidate", f"int8={mlp_int8(out)}"], radius["digits"]),
        "cnn-int8": ([*cnn, "--candidate", f"int8={CNN / 'digits_cnn.int8.onnx'}"], radius["digits"]),
        "acas-16.16": ([str(ACAS), "--candidate", "16.16"], radius["acas"]),
        "acas-4.6": ([str(ACAS), "--candidate", "4.6"], radius["acas"]),
    }


def run(folder: Path, args: list[str], progress: bool = False) -> tuple[dict, float]:
    """One `qverify diff` run, or its journalled result; `progress`: `qverify diff`'s own progress
    bar (stderr). The load average at the start and the end is kept beside the wall time."""
    journal = folder / "diff.json"
    if journal.exists():
        data = json.loads(journal.read_text())
        return data, float(data.get("bench_wall_s", 0.0))
    started = time.perf_counter()
    load_before = os.getloadavg()
    with contextlib.redirect_stdout(io.StringIO()):
        # --resume: a stopped run's journalled seeds are taken, not searched again
        code = qverify_main(
            ["diff", *args, *([] if progress else ["--no-progress"]), "-o", str(folder), "--resume"]
        )
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{folder.name}: qverify diff exited {code}")
    data = json.loads(journal.read_text())
    data["bench_wall_s"] = wall
    data["bench_load"] = [round(v, 2) for v in (*load_before, *os.getloadavg())]
    journal.write_text(json.dumps(data, indent=2) + "\n")
    return data, wall


def _cell(value, style: str) -> str:
    return "-" if value is None else format(value, style)


def method_table(data: dict) -> str:
    rows = [(m["method"], str(m["seeds"]), f"{m['queries']:,}", f"{m['dii']:,}", f"{m['dir']:.4f}", f"{m['sr']:.2f}",
             _cell(m["first_s"], ".3f"), _cell(m["first_queries"], ".0f"), _cell(m["diversity"], ".3f"),
             str(m["label_pairs"]), f"{m['vr']:.2f}", f"{m['wall_s']:.1f}") for m in data["methods"]]  # fmt: skip
    return aligned(METHOD_HEADER, rows)


def region_table(data: dict) -> tuple[str, float]:
    regions = [RegionVerdict.from_json(r) for r in data["regions"]]
    return aligned(REGION_HEADER, region_rows(regions)), decided_share(regions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/bench-diff")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=500)
    parser.add_argument("--regions", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--pairs", help="comma-separated subset of the pairs")
    parser.add_argument("--no-proof", action="store_true")
    parser.add_argument(
        "--digits-radius", default=RADIUS["digits"], help="proof regions' L-inf radius (digits)"
    )
    parser.add_argument("--acas-radius", default=RADIUS["acas"], help="proof regions' L-inf radius (ACAS Xu)")
    parser.add_argument("--no-search", action="store_true")
    parser.add_argument("--no-sampling", action="store_true", help="no simulator sampling / bisection first")
    parser.add_argument(
        "--no-stability", action="store_true", help="no single-network stability proofs first"
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = pairs(out, {"digits": args.digits_radius, "acas": args.acas_radius})
    chosen = args.pairs.split(",") if args.pairs else list(todo)
    started = time.perf_counter()
    for name in chosen:
        pair_args, radius = todo[name]
        common = [*pair_args, "--seed", str(args.seed), "--seeds", str(args.seeds)]
        if not args.no_search:
            data, wall = run(out / name / "search", [*common, "--budget", str(args.budget)])
            print(
                f"\n## {name}: {data['pair']} -- search, {args.seeds} seeds x {args.budget} queries ({wall:.0f} s)"
            )
            print(method_table(data))
        if not args.no_proof and radius is not None:
            proof_args = [*common, "--methods", "none", "--prove", "--radius", radius, "--regions", str(args.regions),
                          "--timeout", str(args.timeout), *(["--no-sampling"] if args.no_sampling else []),
                          *(["--no-stability"] if args.no_stability else [])]  # fmt: skip
            data, wall = run(out / name / "proof", proof_args)
            table, decided = region_table(data)
            print(f"\n## {name}: proof mode, {len(data['regions'])} L-inf regions of radius {radius} of the range, "
                  f"timeout {args.timeout:g} s ({wall:.0f} s)")  # fmt: skip
            print(table)
            print(f"decided: {decided:.0%}")
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
