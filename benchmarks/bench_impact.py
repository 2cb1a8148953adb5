#!/usr/bin/env python3
"""Benchmark the quantization impact study (a benchmark, not a test; docs/impact.md).

Runs `qverify impact`'s full default study -- the 8 default families at their default grids (55
cells), 1,000 bootstrap resamples, seed 0, on the 450 test images -- for

  digits CNN  float reference vs int8 (benchmarks/digits-cnn/digits_cnn.int8.onnx: onnxruntime,
              per tensor, QOperator), half and <8,8>, on `digits:test` (pixels / 16 in [0, 1]);
  digits MLP  float reference (benchmarks/digits/digits.nnet) vs int8 (quantized here with
              `qverify quantize`'s code path: onnxruntime static quantization, QOperator, per
              channel, calibrated on 1,000 images of digits-raw:train), half and <8,8>, on
              `digits-raw:test` (pixel levels 0..16; the network divides by 16);

each in one `qverify impact` run (the command's own code, in process), and prints per study the
table at the clean data and three intensities per family (low, middle, high of the grid), the
simulation throughput of each implementation (images per second), and the wall time of each study
and of the whole benchmark (target: < 5 minutes on 2 cores).

Usage:
  python benchmarks/bench_impact.py [--out results/bench-impact] [--seed 0] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qverify.assurance.impact.tables import pick_intensities
from qverify.cli import main as qverify_main
from qverify.data import load_dataset
from qverify.io import load_network
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime

CNN = ROOT / "benchmarks" / "digits-cnn"
MLP = ROOT / "benchmarks" / "digits" / "digits.nnet"
CALIBRATION_SAMPLES = 1000


def mlp_int8(out: Path) -> Path:
    """The digits MLP quantized as `qverify quantize digits.nnet --calibration digits-raw:train
    --format qop --per-channel` would (its core: normalised inputs x / 16)."""
    net = load_network(MLP)
    x = net.input_norm.apply(load_dataset("digits-raw:train").subset(CALIBRATION_SAMPLES, seed=0).x)
    path = out / "digits.int8-pc.onnx"
    quantize_with_onnxruntime(net, x, QuantizeSettings(QuantFormat.QOP, per_channel=True), path)
    return path


def run_study(name: str, args: list[str], out: Path, seed: int, resamples: int) -> tuple[dict, float]:
    folder = out / name
    started = time.perf_counter()
    command = ["impact", *args, "--seed", str(seed), "--resamples", str(resamples), "-o", str(folder)]
    command.append("--overwrite")  # the previous run of this study, replaced
    with contextlib.redirect_stdout(io.StringIO()):  # the command's own summary: the table below says more
        code = qverify_main(command)
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{name}: qverify impact exited {code}")
    return json.loads((folder / "impact.json").read_text()), wall


def _estimate(record: dict | None) -> str:
    return "-" if record is None else f"{record['value']:.3f}"


def print_table(study: dict) -> None:
    picks = {"clean": [None]}
    for info in study["families"]:
        picks[info["name"]] = pick_intensities(info["values"])
    print("| family | intensity | candidate | top-1 ref | top-1 cand | top-5 ref | top-5 cand | F1 ref | F1 cand "
          "| KL(ref‖cand) | KL(cand‖ref) | flip rate |")  # fmt: skip
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cell in study["cells"]:
        if cell["intensity"] not in picks.get(cell["family"], []):
            continue
        ref = cell["reference"]
        for comparison in cell["comparisons"]:
            cand = comparison["scores"]
            intensity = "-" if cell["intensity"] is None else f"{cell['intensity']:g}"
            print(
                f"| {cell['family']} | {intensity} | {comparison['candidate']} | {_estimate(ref['top1'])} | "
                f"{_estimate(cand['top1'])} | {_estimate(ref['top5'])} | {_estimate(cand['top5'])} | "
                f"{_estimate(ref['f1'])} | {_estimate(cand['f1'])} | {comparison['kl']['value']:.2e} | "
                f"{comparison['kl_reverse']['value']:.2e} | {comparison['flip_rate']['value']:.3f} |"
            )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-impact"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    studies = {
        "digits-cnn": [
            str(CNN / "digits_cnn.onnx"), "--data", "digits:test",
            "--formats", f"int8={CNN / 'digits_cnn.int8.onnx'},half,8.8",
        ],
        "digits-mlp": [
            str(MLP), "--data", "digits-raw:test", "--formats", f"int8={mlp_int8(out)},half,8.8",
        ],
    }  # fmt: skip
    walls = {}
    results = {}
    for name, study_args in studies.items():
        results[name], walls[name] = run_study(
            name, [*study_args, "--no-progress"], out, args.seed, args.resamples
        )
    total = time.perf_counter() - started
    for name, study in results.items():
        cells = len(study["cells"])
        print(f"\n## {name}: {study['reference']['label']} vs "
              f"{', '.join(c['label'] for c in study['candidates'])} on {study['dataset']} "
              f"({study['images']} images, {cells} cells, {study['resamples']} resamples, seed {study['seed']})\n")  # fmt: skip
        print_table(study)
        rates = ", ".join(f"{t['label']} {t['per_second']:,.0f}" for t in study["throughput"])
        print(
            f"\nthroughput (images/s, simulation only, {study['throughput'][0]['images']:,} images each): {rates}"
        )
        print(f"wall time of the study: {walls[name]:.1f} s (in the study itself: {study['wall_s']:.1f} s)")
    print(f"\nwhole benchmark (both studies and the MLP's quantization): {total:.1f} s; target < 300 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
