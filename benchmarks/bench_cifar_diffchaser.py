#!/usr/bin/env python3
"""DiffChaser's Table 1/2 on the CIFAR-10 zoo: success rate and total time over 100 seeds, float vs int8
(a benchmark, not a test; docs/diff.md, "At DiffChaser's scale").

DiffChaser (Xie et al., ISSTA 2019) runs its GA (k-uncertainty fitness, 1-UF: the two top logits of the
float model) from 100 test images that both models classify alike, 120 s per seed, and reports the
share of seeds with a disagreement (success rate) and the total time; its Table 2 pairs each float
Keras model with its TensorFlow Lite 8-bit file (LeNet-1 98 % in 640 s, LeNet-5 99 % in 735 s,
ResNet-20 100 % in 3,449 s), Table 1 with weights truncated to 16-bit floats (100 % of the weights:
LeNet-5 100 % in 1,318 s, ResNet-20 100 % in 2,620 s).

Here each row is one `qverify diff --methods ga` run (qverify's own search, simulators and journal):
the zoo's float ONNX model (`benchmarks/cifar10/models`) against its TFLite int8 file (TFLite's
reference kernels, `int8-tflite`; the NHWC input paired with the ONNX model's NCHW one by
`qverify.network.input_layout`) and against onnxruntime's int8 model (QOperator), seeds from the
10,000 CIFAR-10 test images (`benchmarks/cifar10/data/cifar10_test.npz`, not committed: README
there). The budget per seed is `--budget` queries and/or `--time-budget` seconds (the paper's 120 s).

Two totals are printed: "search s", what the search spent, and "DiffChaser s", what DiffChaser's
protocol spends: up to the first DII on a successful seed, the seed's whole budget otherwise. By
default qverify's search spends every seed's whole budget (it also counts #DII); with `--first-dii`
(`qverify diff --first-dii`) it stops each seed at its first DII, DiffChaser's protocol, and the two
totals are one measure (a 120 s row of 100 seeds then costs the seeds' times to a DII, not 3.3 h).

With `--prove-unbroken`, the seeds of a row that no search broke go to proof mode (the issue's "and
`--prove` on the seeds it cannot break"): their images are written to `unbroken-seeds.npz` in the
row's folder and `qverify diff --methods none --prove` runs on them (float32 reference, the C's: the
float64 `real` reference has no C; L-inf radius `--prove-radius`, default 0.1 of the range, the ball
the GA searched; `--prove-timeout` s per region), into the row's `prove/` folder, journalled per
region. Its table gives each region's verdict and what decided it.

Every finished seed is journalled by `qverify diff` (`search.jsonl` in the row's folder) and a run
resumes where it stopped; a finished row keeps its `diff.json` (with wall time and load average) and
is only printed again. Delete a row's folder to measure it again.

Usage:
  python benchmarks/bench_cifar_diffchaser.py [--out results/bench-cifar-diffchaser] [--seeds 100]
      [--budget 1000] [--time-budget 120] [--first-dii] [--pool 2000]
      [--rows lenet5/tflite,resnet20/ort,...] [--prove-unbroken [--prove-radius 0.1]
      [--prove-timeout 60]] [--no-progress]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

from benchmarks.bench_diff import run
from qverify.assurance.diff.records import RegionVerdict
from qverify.assurance.diff.report import REGION_HEADER, region_rows
from qverify.assurance.impact.tables import aligned

MODELS = ROOT / "benchmarks" / "cifar10" / "models"
DATA = ROOT / "benchmarks" / "cifar10" / "data" / "cifar10_test.npz"
# the float reference: float64 (`real`); the float32 simulator keeps the C's sequential sums and runs
# ResNet-20 at about 2 images/s, LeNet-5 at 40 (docs/diff.md): `--reference float` for the C's float32
REFERENCE = {"lenet5": "real", "resnet20": "real"}
CANDIDATES = {"tflite": ("int8-tflite", "{}.int8.tflite"), "ort": ("int8", "{}.int8-qop.onnx")}


@dataclass(frozen=True)
class PaperRow:
    """DiffChaser's figures for one model: Table 2 (TFLite Quan.8) and Table 1 (Q.R. 100 %, 16-bit weights)."""

    tflite8_sr: float
    tflite8_s: int
    table1_sr: float
    table1_s: int


PAPER = {"lenet5": PaperRow(0.99, 735, 1.00, 1318), "resnet20": PaperRow(1.00, 3449, 1.00, 2620)}
HEADER = ("model", "candidate", "seeds", "budget/seed", "queries", "#DII", "DiR", "SR", "first DII s (median)",
          "search s", "DiffChaser s", "wall s", "load", "paper SR (TFLite 8)", "paper s", "paper T1 SR / s")  # fmt: skip


def seed_pool(out: Path, size: int | None) -> Path:
    """The test images the seeds are drawn from: all 10,000, or a seeded random `size` of them (the
    seed selection runs both models on every image of the pool: on ResNet-20 that costs minutes on
    busy cores). Written beside the results (derived from the uncommitted images: not committed)."""
    if size is None:
        return DATA
    path = out / f"cifar10_test_pool{size}.npz"
    if not path.exists():
        import numpy as np

        with np.load(DATA) as data:
            arrays = {name: data[name] for name in data.files}
        chosen = np.sort(np.random.default_rng([size, 44]).choice(len(arrays["x"]), size=size, replace=False))
        arrays.update(x=arrays["x"][chosen], y=arrays["y"][chosen], source=arrays["source"][chosen])
        np.savez(path, **arrays)
    return path


def row_arguments(model: str, candidate: str, args: argparse.Namespace, data: Path = DATA) -> list[str]:
    label, file = CANDIDATES[candidate]
    budget = ["--budget", str(args.budget)]
    if args.time_budget is not None:
        budget += ["--time-budget", str(args.time_budget)]
    if args.first_dii:
        budget.append("--first-dii")
    return [str(MODELS / f"{model}.onnx"), "--reference", args.reference or REFERENCE[model],
            "--candidate", f"{label}={MODELS / file.format(model)}", "--data", str(data),
            "--seeds", str(args.seeds), "--seed", str(args.seed), "--methods", "ga", *budget]  # fmt: skip


def folder_name(row: str, args: argparse.Namespace) -> str:
    name = f"{row.replace('/', '-')}-{args.reference or 'real'}-s{args.seeds}-q{args.budget}"
    name += f"-pool{args.pool}" if args.pool is not None else ""
    name += f"-t{args.time_budget:g}" if args.time_budget is not None else ""
    return name + ("-first" if args.first_dii else "")


def diffchaser_seconds(per_seed: list[dict]) -> float:
    """DiffChaser's total: each seed stops at its first DII, else spends its whole budget."""
    return sum(s["first_s"] if s["dii"] > 0 and s["first_s"] is not None else s["seconds"] for s in per_seed)


def unbroken_seeds(folder: Path, data: dict) -> tuple[Path, list[int]] | None:
    """The row's seeds without a DII (indices among its seeds) as an .npz of raw images with their
    labels, for proof mode; None when every seed was broken."""
    unbroken = [seed["seed"] for seed in data["methods"][0]["per_seed"] if seed["dii"] == 0]
    if not unbroken:
        return None
    with np.load(DATA) as images:
        shape, domain = images["x"].shape[1:], images["domain"]
    with np.load(folder / "diis.npz") as diis:
        x, y = diis["seeds"][unbroken], diis["seed_labels"][unbroken]
    path = folder / "unbroken-seeds.npz"
    np.savez(path, x=x.reshape(len(unbroken), *shape), y=y, domain=domain)
    return path, unbroken


def prove_unbroken(model: str, candidate: str, folder: Path, data: dict, args: argparse.Namespace) -> None:
    """`qverify diff --prove` on the seeds no search broke: one L-inf region around each."""
    found = unbroken_seeds(folder, data)
    if found is None:
        print(f"{model}/{candidate}: every seed has a DII, none left to prove", flush=True)
        return
    seeds, unbroken = found
    label, file = CANDIDATES[candidate]
    arguments = [str(MODELS / f"{model}.onnx"), "--reference", "float",
                 "--candidate", f"{label}={MODELS / file.format(model)}", "--data", str(seeds),
                 "--seeds", str(len(unbroken)), "--seed", str(args.seed), "--methods", "none", "--prove",
                 "--radius", str(args.prove_radius), "--timeout", str(args.prove_timeout)]  # fmt: skip
    print(f"{model}/{candidate}: proof mode on the {len(unbroken)} seeds without a DII ...", file=sys.stderr)
    result, wall = run(folder / "prove", arguments, not args.no_progress)
    regions = [RegionVerdict.from_json(region) for region in result["regions"]]
    load = result.get("bench_load")
    print(f"\n## {model} vs {label}: proof mode on the seeds without a DII (radius {args.prove_radius:g} of the "
          f"range, {args.prove_timeout:g} s per region, float32 reference; wall {wall:,.0f} s"
          + (f", load {load[0]:.1f}-{load[3]:.1f}" if load else "") + ")")  # fmt: skip
    print(aligned(REGION_HEADER, region_rows(regions)))
    whole = len(regions) == len(unbroken)  # else proof mode's own seed choice left some out
    rows = [(str(unbroken[r.seed_index]) if whole else f"proof seed {r.seed_index}", r.status, r.method,
             f"{r.seconds:.1f}", r.reason) for r in regions]  # fmt: skip
    print(aligned(("seed", "status", "decided by", "s", "reason"), rows))
    if not whole:
        print(f"({len(regions)} regions of {len(unbroken)} seeds: the float32 reference and the candidate "
              "disagree on, or misclassify, the others)")  # fmt: skip


def table_row(model: str, candidate: str, data: dict, wall: float, budget: str) -> tuple[str, ...]:
    method = data["methods"][0]
    seeds = method["per_seed"]
    paper = PAPER[model]
    load = data.get("bench_load")
    load_text = f"{load[0]:.1f}-{load[3]:.1f}" if load else "-"
    first = "-" if method["first_s"] is None else f"{method['first_s']:.2f}"
    return (model, CANDIDATES[candidate][0], str(method["seeds"]), budget, f"{method['queries']:,}",
            f"{method['dii']:,}", f"{method['dir']:.3f}", f"{method['sr']:.2f}", first,
            f"{sum(s['seconds'] for s in seeds):,.0f}", f"{diffchaser_seconds(seeds):,.0f}", f"{wall:,.0f}",
            load_text, f"{paper.tflite8_sr:.2f}", f"{paper.tflite8_s:,}",
            f"{paper.table1_sr:.2f} / {paper.table1_s:,}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/bench-cifar-diffchaser")
    parser.add_argument("--seed", type=int, default=0, help="seed of the seed choice and the GA (default 0)")
    parser.add_argument("--seeds", type=int, default=100, help="seeds per row (default 100, the paper's)")
    parser.add_argument("--budget", type=int, default=1000, help="queries per seed (default 1000)")
    parser.add_argument("--time-budget", type=float, help="also stop a seed after S seconds (paper: 120)")
    parser.add_argument(
        "--first-dii", action="store_true", help="stop each seed at its first DII (DiffChaser's protocol)"
    )
    parser.add_argument(
        "--rows",
        default="lenet5/tflite,resnet20/tflite,lenet5/ort,resnet20/ort",
        help="MODEL/CANDIDATE rows, candidate tflite or ort (default: all four)",
    )
    parser.add_argument("--pool", type=int, help="draw the seeds from a seeded random N of the test images")
    parser.add_argument("--reference", choices=("real", "float"), help="the float reference (default real)")
    parser.add_argument(
        "--prove-unbroken", action="store_true", help="proof mode on each row's seeds without a DII"
    )
    parser.add_argument(
        "--prove-radius", type=float, default=0.1, help="L-inf radius of a proof region (default 0.1)"
    )
    parser.add_argument("--prove-timeout", type=float, default=60.0, help="seconds per region (default 60)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args()
    if not DATA.exists():
        raise SystemExit(f"{DATA} is missing: see benchmarks/cifar10/README.md, 'Data'")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = f"{args.budget:,} q" + (f" / {args.time_budget:g} s" if args.time_budget is not None else "")
    budget += ", to the first DII" if args.first_dii else ""
    rows = []
    started = time.perf_counter()
    for row in [r.strip() for r in args.rows.split(",") if r.strip()]:
        model, _, candidate = row.partition("/")
        if model not in REFERENCE or candidate not in CANDIDATES:
            raise SystemExit(
                f"unknown row {row}: MODEL in {list(REFERENCE)}, CANDIDATE in {list(CANDIDATES)}"
            )
        print(f"{row}: {args.seeds} seeds x {budget} ...", file=sys.stderr, flush=True)
        arguments = row_arguments(model, candidate, args, seed_pool(out, args.pool))
        folder = out / folder_name(row, args)
        data, wall = run(folder, arguments, not args.no_progress)
        rows.append(table_row(model, candidate, data, wall, budget))
        print(aligned(HEADER, rows[-1:]), flush=True)
        if args.prove_unbroken:
            prove_unbroken(model, candidate, folder, data, args)
    print(f"\n## DiffChaser's Table 1/2 on CIFAR-10 ({args.seeds} seeds, GA, 1-UF; {budget} per seed)")
    print(aligned(HEADER, rows))
    print(
        f"\ntotal wall time {time.perf_counter() - started:.0f} s (rows journalled earlier: their own wall time)"
    )


if __name__ == "__main__":
    main()
