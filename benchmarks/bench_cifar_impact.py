#!/usr/bin/env python3
"""The perturbation study's grids at the paper's scale (issue 44; docs/impact.md): the zoo's
ResNet-18-class and VGG-16-class networks (benchmarks/cifar10: 1/4-width, CIFAR-10) float vs
onnxruntime int8 (QOperator) on the 10,000 CIFAR-10 test images, the paper's four families at its
grids (AWGN sigma 0.1 ... 1.0, Brownian 10 ... 80 as levels of a 0..255 image, vertical and
horizontal occlusions 1 ... 6), 1,000 bootstrap resamples, seed 0.

Each model is one `qverify impact` run, in process (the command's own code): reference
`onnxruntime` (the float ONNX file as onnxruntime computes it: what the float model means, at the
runtime's speed -- qverify's float32 simulator reproduces the C's sequential sums at ~2 images/s
on these networks), candidate `int8` (the int8 file through the bit-exact simulator, which equals
onnxruntime's int8 execution bit for bit). The command journals every finished cell in
`OUT/MODEL/journal.jsonl` and this script passes `--resume`, so a stopped run continues where it
stopped. Then the tables in the paper's shape (its Tables 2-11: top-1, top-5, F1 FP32/INT8, KL per
family and level), each row beside the paper's figures (Langille, Hammad and Kember, F1000Research
14:419, 2025: ResNet-18 and VGG-16 on FGVC-Aircraft, 70 classes, 3,333 test images), the
throughput of each implementation, wall time and peak memory.

Usage:
  nice -n 5 python benchmarks/bench_cifar_impact.py [--models resnet18,vgg16] [--out results/bench-cifar-impact]
      [--samples N] [--families paper] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qverify.cli import main as qverify_main

ZOO = ROOT / "benchmarks" / "cifar10"
DATA = ZOO / "data" / "cifar10_test.npz"
MODELS = {"resnet18": "ResNet-18", "vgg16": "VGG-16"}  # zoo family: the paper's model it stands for
FAMILIES = ("awgn", "brownian", "vertical-occlusion", "horizontal-occlusion")


class Figures(NamedTuple):
    """One row of the paper: top-1, top-5, F1 (FP32, INT8) and KL(P_FP32 || P_INT8)."""

    top1_fp32: float
    top1_int8: float
    top5_fp32: float
    top5_int8: float
    f1_fp32: float
    f1_int8: float
    kl: float


# The paper's Table 2 and 3 (clean test set; 4 digits there)
PAPER_CLEAN = {
    "ResNet-18": Figures(0.7204, 0.7192, 0.9241, 0.9256, 0.7153, 0.7145, 0.0082),
    "VGG-16": Figures(0.7843, 0.7828, 0.9487, 0.9475, 0.7835, 0.7828, 0.0182),
}
# Tables 4/6 (AWGN), 5/7 (Brownian), 8/10 (vertical), 9/11 (horizontal occlusions): level as the
# paper writes it, in the order of qverify's default grid of the family
PAPER: dict[str, dict[str, list[tuple[str, Figures]]]] = {
    "ResNet-18": {
        "awgn": [
            ("0.1", Figures(0.712, 0.712, 0.921, 0.919, 0.713, 0.713, 0.032)),
            ("0.2", Figures(0.627, 0.619, 0.879, 0.872, 0.638, 0.631, 0.084)),
            ("0.3", Figures(0.469, 0.466, 0.762, 0.754, 0.489, 0.487, 0.144)),
            ("0.4", Figures(0.297, 0.3, 0.585, 0.573, 0.306, 0.309, 0.203)),
            ("0.5", Figures(0.178, 0.176, 0.425, 0.41, 0.167, 0.161, 0.214)),
            ("0.6", Figures(0.111, 0.104, 0.31, 0.293, 0.087, 0.083, 0.205)),
            ("0.8", Figures(0.066, 0.065, 0.214, 0.213, 0.032, 0.03, 0.153)),
            ("1.0", Figures(0.055, 0.059, 0.208, 0.203, 0.016, 0.017, 0.104)),
        ],
        "brownian": [
            ("10", Figures(0.692, 0.68, 0.905, 0.902, 0.688, 0.677, 0.197)),
            ("20", Figures(0.608, 0.604, 0.856, 0.862, 0.604, 0.602, 0.413)),
            ("30", Figures(0.524, 0.533, 0.8, 0.806, 0.518, 0.532, 0.619)),
            ("40", Figures(0.446, 0.438, 0.728, 0.734, 0.441, 0.433, 0.747)),
            ("50", Figures(0.374, 0.382, 0.653, 0.672, 0.358, 0.369, 0.902)),
            ("60", Figures(0.315, 0.318, 0.599, 0.595, 0.298, 0.302, 1.007)),
            ("70", Figures(0.262, 0.268, 0.537, 0.549, 0.241, 0.245, 1.142)),
            ("80", Figures(0.227, 0.229, 0.488, 0.484, 0.202, 0.202, 1.222)),
        ],
        "vertical-occlusion": [
            ("1", Figures(0.617, 0.622, 0.885, 0.882, 0.606, 0.613, 0.009)),
            ("2", Figures(0.481, 0.475, 0.783, 0.781, 0.473, 0.466, 0.014)),
            ("3", Figures(0.389, 0.376, 0.702, 0.697, 0.384, 0.368, 0.014)),
            ("4", Figures(0.299, 0.29, 0.602, 0.589, 0.281, 0.271, 0.013)),
            ("5", Figures(0.216, 0.212, 0.487, 0.479, 0.192, 0.187, 0.011)),
            ("6", Figures(0.176, 0.173, 0.418, 0.411, 0.162, 0.158, 0.012)),
        ],
        "horizontal-occlusion": [
            ("1", Figures(0.656, 0.657, 0.894, 0.894, 0.652, 0.653, 0.009)),
            ("2", Figures(0.617, 0.616, 0.881, 0.881, 0.614, 0.614, 0.011)),
            ("3", Figures(0.549, 0.551, 0.83, 0.831, 0.549, 0.552, 0.01)),
            ("4", Figures(0.464, 0.461, 0.775, 0.78, 0.47, 0.465, 0.011)),
            ("5", Figures(0.409, 0.411, 0.716, 0.719, 0.413, 0.413, 0.011)),
            ("6", Figures(0.338, 0.341, 0.645, 0.647, 0.343, 0.347, 0.012)),
        ],
    },
    "VGG-16": {
        "awgn": [
            ("0.1", Figures(0.778, 0.779, 0.941, 0.941, 0.779, 0.782, 0.05)),
            ("0.2", Figures(0.702, 0.703, 0.912, 0.903, 0.711, 0.713, 0.142)),
            ("0.3", Figures(0.541, 0.532, 0.818, 0.814, 0.555, 0.548, 0.255)),
            ("0.4", Figures(0.341, 0.335, 0.646, 0.638, 0.359, 0.353, 0.338)),
            ("0.5", Figures(0.181, 0.173, 0.474, 0.473, 0.188, 0.18, 0.296)),
            ("0.6", Figures(0.098, 0.099, 0.346, 0.343, 0.088, 0.09, 0.222)),
            ("0.8", Figures(0.048, 0.047, 0.244, 0.242, 0.023, 0.021, 0.108)),
            ("1.0", Figures(0.04, 0.041, 0.214, 0.222, 0.007, 0.007, 0.055)),
        ],
        "brownian": [
            ("10", Figures(0.779, 0.776, 0.943, 0.943, 0.779, 0.776, 0.105)),
            ("20", Figures(0.772, 0.756, 0.933, 0.933, 0.772, 0.756, 0.273)),
            ("30", Figures(0.741, 0.731, 0.917, 0.919, 0.74, 0.73, 0.47)),
            ("40", Figures(0.707, 0.692, 0.904, 0.898, 0.708, 0.694, 0.713)),
            ("50", Figures(0.653, 0.652, 0.879, 0.874, 0.655, 0.655, 1.035)),
            ("60", Figures(0.603, 0.6, 0.836, 0.841, 0.605, 0.604, 1.273)),
            ("70", Figures(0.547, 0.55, 0.806, 0.798, 0.552, 0.556, 1.565)),
            ("80", Figures(0.484, 0.476, 0.761, 0.753, 0.488, 0.479, 1.663)),
        ],
        "vertical-occlusion": [
            ("1", Figures(0.649, 0.644, 0.893, 0.892, 0.644, 0.639, 0.026)),
            ("2", Figures(0.489, 0.483, 0.779, 0.78, 0.481, 0.474, 0.06)),
            ("3", Figures(0.323, 0.321, 0.637, 0.636, 0.312, 0.308, 0.064)),
            ("4", Figures(0.227, 0.224, 0.53, 0.523, 0.2, 0.195, 0.058)),
            ("5", Figures(0.167, 0.164, 0.413, 0.411, 0.124, 0.12, 0.048)),
            ("6", Figures(0.132, 0.126, 0.344, 0.333, 0.091, 0.087, 0.041)),
        ],
        "horizontal-occlusion": [
            ("1", Figures(0.718, 0.713, 0.921, 0.92, 0.717, 0.714, 0.021)),
            ("2", Figures(0.656, 0.647, 0.899, 0.896, 0.662, 0.655, 0.029)),
            ("3", Figures(0.59, 0.581, 0.858, 0.856, 0.595, 0.587, 0.028)),
            ("4", Figures(0.458, 0.455, 0.77, 0.767, 0.458, 0.456, 0.032)),
            ("5", Figures(0.395, 0.389, 0.719, 0.71, 0.397, 0.391, 0.027)),
            ("6", Figures(0.313, 0.308, 0.639, 0.634, 0.308, 0.3, 0.029)),
        ],
    },
}

SCORES = ("top1", "top5", "f1")


def journalled(folder: Path) -> dict:
    """What a stopped run left: its journal's cells (in the order they finished), no throughput."""
    path = folder / "journal.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    cells = [json.loads(line)["record"] for line in lines if line.strip()]
    return {"cells": cells, "images": None, "throughput": []}


def run_model(family: str, out: Path, args: argparse.Namespace) -> tuple[dict, float]:
    """One `qverify impact` run (resumed from its journal); its impact.json and this call's wall time.
    With --report-only, nothing runs: the finished study's impact.json, else its journal's cells."""
    if args.report_only:
        finished = out / family / "impact.json"
        return (json.loads(finished.read_text()) if finished.is_file() else journalled(out / family)), 0.0
    models = ZOO / "models"
    command = [
        "impact", str(models / f"{family}.onnx"), "--reference", "onnxruntime",
        "--candidate", f"int8={models / f'{family}.int8-qop.onnx'}", "--data", str(DATA),
        "--families", args.families, "--resamples", str(args.resamples), "--seed", "0",
        "-o", str(out / family), "--resume",
    ]  # fmt: skip
    if args.samples:
        command += ["--samples", str(args.samples)]
    began = time.perf_counter()
    code = qverify_main(command)
    wall = time.perf_counter() - began
    if code != 0:
        raise SystemExit(f"qverify impact on {family} exited with {code}")
    return json.loads((out / family / "impact.json").read_text()), wall


def ours(cell: dict) -> Figures:
    reference, (comparison,) = cell["reference"], cell["comparisons"]
    values = [side[name]["value"] for name in SCORES for side in (reference, comparison["scores"])]
    return Figures(*values, comparison["kl"]["value"])


def _pair(value: float | None, paper: float | None, spec: str) -> str:
    """Our figure and the paper's in parentheses, both in the format `spec`."""
    text = "-" if value is None else format(value, spec)
    return text if paper is None else f"{text} ({format(paper, spec)})"


HEAD = "| {level} | top-1 FP32 | top-1 INT8 | top-5 FP32 | top-5 INT8 | F1 FP32 | F1 INT8 | KL(FP32‖INT8) | flip |"


def family_table(model: str, study: dict, family: str) -> list[str]:
    """The family's rows in the paper's shape, each figure beside the paper's (in parentheses)."""
    cells = [cell for cell in study["cells"] if cell["family"] == family]
    paper = PAPER_CLEAN[model] if family == "clean" else None
    level = "level (paper's)" if family != "clean" else "set"
    lines = [HEAD.format(level=level), "|---" + "|---:" * 8 + "|"]
    for index, cell in enumerate(cells):
        if family != "clean":
            paper_level, paper = PAPER[model][family][index]
            name = f"{cell['intensity']:g} ({paper_level})"
        else:
            name = "clean"
        mine = ours(cell)
        specs = [".3f"] * 6 + [".2g"]  # KL: ours is 10^-4..10^-3, the paper's 10^-2..1
        row = [_pair(v, p, spec) for v, p, spec in zip(mine, paper or [None] * 7, specs)]
        flip = cell["comparisons"][0]["flip_rate"]["value"]
        lines.append(f"| {name} | " + " | ".join(row) + f" | {flip:.4f} |")
    return lines


def report(studies: dict[str, dict]) -> list[str]:
    lines = []
    for family in ("clean", *FAMILIES):
        for zoo_name, study in studies.items():
            if not any(cell["family"] == family for cell in study["cells"]):
                continue
            model = MODELS[zoo_name]
            lines += ["", f"### {family}: {zoo_name} (the paper's {model} in parentheses)", ""]
            lines += family_table(model, study, family)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default=",".join(MODELS), help="zoo families (default resnet18,vgg16)")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-cifar-impact"))
    parser.add_argument("--samples", type=int, help="a random subset of the test images (default all)")
    parser.add_argument("--families", default="paper", help="qverify impact --families (default paper)")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument(
        "--report-only", action="store_true", help="run nothing: the tables of what OUT holds (a stopped run)"
    )
    args = parser.parse_args()
    if not DATA.is_file():
        print(f"error: {DATA} is not there: make it with benchmarks/cifar10/data.py", file=sys.stderr)
        return 2
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        print(f"error: --models {','.join(unknown)}: known {', '.join(MODELS)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    studies, walls = {}, {}
    for name in names:
        studies[name], walls[name] = run_model(name, out, args)
    lines = report(studies)
    lines += ["", "| model | cells | images per cell | implementation | images simulated | images/s | this run's wall (s) |",
              "|---|---:|---:|---|---:|---:|---:|"]  # fmt: skip
    for name, study in studies.items():
        if not study["throughput"]:
            lines.append(f"| {name} | {len(study['cells'])} (journal of a stopped run) | | | | | |")
        for rate in study["throughput"]:
            lines.append(
                f"| {name} | {len(study['cells'])} | {study['images']:,} | {rate['label']} | "
                f"{rate['images']:,} | {rate['per_second'] or 0:,.1f} | {walls[name]:,.0f} |"
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines += ["", f"peak resident memory of this process: {peak:,.0f} MB"]
    text = "\n".join(lines) + "\n"
    print(text)
    (out / "tables.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
