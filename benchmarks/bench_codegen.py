#!/usr/bin/env python3
"""Time code generation and gcc compilation for the 45 ACAS Xu networks (a benchmark, not a test).

Usage: python benchmarks/bench_codegen.py [--formats 20.12 16.16 float] [--layouts sequential balanced]
Prints one row per network x format x layout (render time, C size, gcc time) and totals.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from qverify.codegen import compile_replay, render_network
from qverify.io import load_network
from qverify.quant import FixedFormat, FloatFormat, FloatKind, ImplementationOptions, Layout, quantize_network

ROOT = Path(__file__).resolve().parents[1]


def number_format(text: str):
    if text in ("float", "double"):
        return FloatFormat(FloatKind(text))
    return FixedFormat.parse(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=["20.12", "16.16", "float"])
    parser.add_argument("--layouts", nargs="+", default=["sequential", "balanced"])
    parser.add_argument("--networks", type=int, default=45, help="how many ACAS Xu networks (default all 45)")
    args = parser.parse_args()
    paths = sorted((ROOT / "benchmarks/acasxu/nnet").glob("*.nnet"))[: args.networks]
    print(f"{'network':32s} {'format':8s} {'layout':10s} {'render_s':>9s} {'kbytes':>7s} {'gcc_s':>7s}")
    totals: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for path in paths:
            net = load_network(path)
            for text in args.formats:
                for layout in args.layouts:
                    start = time.perf_counter()
                    options = ImplementationOptions(number_format(text), layout=Layout(layout))
                    program = render_network(quantize_network(net, options))
                    rendered = time.perf_counter()
                    source = program.write(Path(scratch) / f"{path.stem}-{text}-{layout}")
                    compile_replay(source)
                    compiled = time.perf_counter()
                    render_s, gcc_s = rendered - start, compiled - rendered
                    totals.setdefault((text, layout), []).append((render_s, gcc_s))
                    print(
                        f"{path.stem:32s} {text:8s} {layout:10s} {render_s:9.3f} "
                        f"{len(program.text) / 1024:7.0f} {gcc_s:7.3f}",
                        flush=True,
                    )
    print("\nformat   layout     networks  render total/median s   gcc total/median s")
    for (text, layout), rows in totals.items():
        renders, gccs = [r for r, _ in rows], [g for _, g in rows]
        print(
            f"{text:8s} {layout:10s} {len(rows):8d}  {sum(renders):8.2f} / {statistics.median(renders):6.3f}"
            f"        {sum(gccs):8.2f} / {statistics.median(gccs):6.3f}"
        )


if __name__ == "__main__":
    main()
