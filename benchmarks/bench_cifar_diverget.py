#!/usr/bin/env python3
"""DiverGet's DII/DiR table on the CIFAR-10 zoo: its search methods against a TFLite int8 file (a
benchmark, not a test; docs/diff.md, "At DiverGet's scale").

DiverGet (Haj Yahmed et al.) searches vectors of natural distortions of a seed (PSO or GA, fitness
f_div: the divergence of the two models' outputs; or f_cov, neuron coverage), keeps every generated
input of PSNR >= 20 dB (VR: the share that is), and reports per seed the DIIs over the generated
inputs (DiR), the share of seeds with one (SR), and #DII; 50 seeds, population 10, 25 iterations
(250 inputs per seed), TFLite 8-bit post-training quantization (PTQ) and quantization-aware training
(QAT) of two hyperspectral-image CNNs. Its Table 9 (averages over its subjects): DiffChaser SR 11.25 %,
DiR 2.78 %; DiverGet PSO SR 40.98 %, DiR 14.59 %; DiverGet GA SR 27.27 %, DiR 20.40 %. Its Table 4,
random sampling of distortion vectors (RS) against DiverGet (PSO), medians per subject: RS DiR
0.02-1.07 %, DiverGet DiR 3.07-24.05 %, VR about 68-76 %.

Here, per subject (the zoo's float ONNX model against its TFLite int8 file, TFLite's reference
kernels; seeds from the CIFAR-10 test set), `qverify diff` runs the methods it implements with the
paper's budget (population `--population`, `--budget` queries per seed, PSNR >= 20 dB):

  DiffChaser     `ga`: GA in an L-inf ball (1-UF fitness)
  DiverGet PSO   `distortion --optimizer pso`: PSO over distortion vectors, fitness Jensen-Shannon divergence
  DiverGet GA    `distortion --optimizer ga`
  RS             `random-distortion`: uniform distortion vectors
  DiverGet f_cov not implemented in `qverify diff` (no coverage fitness): printed as such, no figures

Medians over seeds of DiR and VR (the paper's statistic) are printed beside the means, with SR, #DII,
and the time per method. Each `qverify diff` run journals every finished (method, seed) and resumes;
a finished run keeps its diff.json. Delete a subject's folder to measure it again.

Usage:
  python benchmarks/bench_cifar_diverget.py [--out results/bench-cifar-diverget] [--seeds 50]
      [--budget 250] [--population 10] [--models lenet5,resnet20] [--candidate tflite|ort] [--no-progress]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_cifar_diffchaser import CANDIDATES, DATA, MODELS, seed_pool
from benchmarks.bench_diff import run
from qverify.assurance.impact.tables import aligned

# method name in the table -> (qverify diff --methods, --optimizer, the paper's Table 9 / 4 figures)
METHODS = {
    "DiffChaser (ga)": ("ga", "pso", "SR 11.25 %, DiR 2.78 % (T9 avg)"),
    "DiverGet PSO (distortion)": (
        "distortion",
        "pso",
        "SR 40.98 %, DiR 14.59 % (T9 avg); DiR 3.07-24.05 % (T4)",
    ),
    "DiverGet GA (distortion --optimizer ga)": ("distortion", "ga", "SR 27.27 %, DiR 20.40 % (T9 avg)"),
    "RS (random-distortion)": ("random-distortion", "pso", "DiR 0.02-1.07 % (T4 medians)"),
}
NOT_IMPLEMENTED = {"DiverGet f_cov (coverage fitness)": "not implemented in qverify diff"}
HEADER = ("model", "method", "seeds", "queries", "#DII", "DiR mean", "DiR median", "SR", "VR median",
          "first DII s", "search s", "paper")  # fmt: skip


def runs(model: str, candidate: str, args: argparse.Namespace, data: Path = DATA) -> dict[str, list[str]]:
    """One `qverify diff` run per optimizer (the option is global): folder name -> arguments."""
    label, file = CANDIDATES[candidate]
    common = [str(MODELS / f"{model}.onnx"), "--reference", args.reference,
              "--candidate", f"{label}={MODELS / file.format(model)}", "--data", str(data),
              "--seeds", str(args.seeds), "--seed", str(args.seed), "--budget", str(args.budget),
              "--population", str(args.population), "--min-psnr", "20"]  # fmt: skip
    pool = f"-pool{args.pool}" if args.pool is not None else ""
    by_optimizer: dict[str, list[str]] = {}
    for method, optimizer, _ in METHODS.values():
        by_optimizer.setdefault(optimizer, []).append(method)
    return {
        f"{model}-{candidate}-{optimizer}-s{args.seeds}-q{args.budget}-p{args.population}{pool}": [
            *common,
            "--methods",
            ",".join(methods),
            "--optimizer",
            optimizer,
        ]
        for optimizer, methods in by_optimizer.items()
    }


def method_row(model: str, name: str, summary: dict, paper: str) -> tuple[str, ...]:
    seeds = summary["per_seed"]
    rates = [s["dii"] / s["queries"] for s in seeds if s["queries"]]
    valid = [s["valid"] / s["queries"] for s in seeds if s["queries"]]
    first = "-" if summary["first_s"] is None else f"{summary['first_s']:.2f}"
    return (model, name, str(summary["seeds"]), f"{summary['queries']:,}", f"{summary['dii']:,}",
            f"{summary['dir']:.2%}", f"{statistics.median(rates):.2%}", f"{summary['sr']:.0%}",
            f"{statistics.median(valid):.0%}", first, f"{sum(s['seconds'] for s in seeds):,.0f}", paper)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/bench-cifar-diverget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=50, help="seeds per subject (default 50, the paper's)")
    parser.add_argument(
        "--budget", type=int, default=250, help="queries per seed and method (default 250 = 10 x 25)"
    )
    parser.add_argument(
        "--population", type=int, default=10, help="population / swarm (default 10, the paper's)"
    )
    parser.add_argument("--models", default="lenet5,resnet20")
    parser.add_argument("--candidate", default="tflite", choices=tuple(CANDIDATES))
    parser.add_argument(
        "--reference",
        default="real",
        help="the float reference (default real: float64; float: the C's float32)",
    )
    parser.add_argument("--pool", type=int, help="draw the seeds from a seeded random N of the test images")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    if not DATA.exists():
        raise SystemExit(f"{DATA} is missing: see benchmarks/cifar10/README.md, 'Data'")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows = []
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        found: dict[tuple[str, str], dict] = {}
        for folder, arguments in runs(model, args.candidate, args, seed_pool(out, args.pool)).items():
            print(f"{folder} ...", file=sys.stderr, flush=True)
            data, wall = run(out / folder, arguments, not args.no_progress)
            optimizer = arguments[arguments.index("--optimizer") + 1]
            load = data.get("bench_load")
            print(f"{folder}: {wall:.0f} s, load {load}", file=sys.stderr, flush=True)
            for summary in data["methods"]:
                found[(summary["method"], optimizer)] = summary
        for name, (method, optimizer, paper) in METHODS.items():
            rows.append(method_row(model, name, found[(method, optimizer)], paper))
        rows += [(model, name, *("-",) * 9, reason) for name, reason in NOT_IMPLEMENTED.items()]
        print(aligned(HEADER, rows), flush=True)
    print(f"\n## DiverGet's DII/DiR table on CIFAR-10 ({args.reference} vs {CANDIDATES[args.candidate][0]}; "
          f"{args.seeds} seeds, {args.budget} queries per seed and method, population {args.population})")  # fmt: skip
    print(aligned(HEADER, rows))
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
