"""IEEE float completeness: the engine on tiny float boxes against enumeration through the compiled C.

The instances of tests/test_engine_float_oracle.py (random ReLU networks 2-8-8-2 and smaller, boxes
of at most N x N values of the type, Y_0's exact maximum found by running every point through the
compiled network), with more seeds and larger boxes: thresholds at the maximum (UNSAFE), half an
ulp above it (SAFE), one ulp below it (UNSAFE). The truth of each property is its compiled harness
run on every point. Prints per format and threshold: decided, right, wrong, total and median time.

    python benchmarks/bench_float_oracle.py                        # float32, double, half; 61 x 61
    python benchmarks/bench_float_oracle.py --per-input 201 --seeds 10 --timeout 60
    python benchmarks/bench_float_oracle.py --root /path/to/other/checkout   # before/after
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kinds", default="float,double,half", help="comma-separated: float, double, half")
    parser.add_argument("--seeds", type=int, default=8, help="instances per format")
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--per-input", type=int, default=61, help="at most this many values per input")
    parser.add_argument("--timeout", type=float, default=60.0, help="engine budget per property (s)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the qverify checkout to measure")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per property")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    sys.path.insert(0, str(args.root))
    sys.path.insert(1, str(ROOT / "tests"))  # the oracle's instances
    from test_engine_float_oracle import MODELS_C, make_instance, property_for, thresholds

    import qverify
    from qverify.codegen import compile_replay, render_harness, run_lines
    from qverify.engine import EngineOptions, check_file
    from qverify.quant import FloatKind

    print(f"qverify from {Path(qverify.__file__).parent}; boxes of at most {args.per_input}^2 values")
    rows: dict[tuple[str, str], list[tuple[str, str, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        for kind in [FloatKind(k) for k in args.kinds.split(",")]:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                instance = make_instance(seed, kind, directory, args.per_input)
                for name, threshold in thresholds(instance):
                    folder = directory / f"{kind.value}-{seed}-{name}"
                    harness = render_harness(instance.qnet, property_for(instance, name, threshold)).write(
                        folder
                    )
                    lines = run_lines(
                        compile_replay(harness),
                        [" ".join(float(v).hex() for v in row) for row in instance.points],
                    )
                    truth = "UNSAFE" if any(line.startswith("VIOLATED") for line in lines) else "SAFE"
                    start = time.monotonic()
                    result = check_file(harness, [MODELS_C], EngineOptions(timeout_s=args.timeout))
                    seconds = time.monotonic() - start
                    rows[(kind.value, name)].append((truth, result.status.value, seconds))
                    if args.verbose:
                        print(
                            f"  {kind.value:6} seed {seed:3} {name:15} {len(instance.points):6} points  truth {truth:6}"
                            f"  {result.status.value:7} {seconds:7.2f} s  {result.decided_by or result.reason[:80]}",
                            flush=True,
                        )
    print(
        f"{'format':7} {'threshold':15} {'n':>3} {'decided':>7} {'right':>5} {'wrong':>5} {'total s':>8} {'median s':>8}"
    )
    for (kind, name), outcomes in rows.items():
        decided = [o for o in outcomes if o[1] in ("SAFE", "UNSAFE")]
        right = sum(truth == status for truth, status, _ in decided)
        times = [seconds for _, _, seconds in outcomes]
        print(
            f"{kind:7} {name:15} {len(outcomes):3} {len(decided):7} {right:5} {len(decided) - right:5}"
            f" {sum(times):8.2f} {statistics.median(times):8.3f}"
        )


if __name__ == "__main__":
    main()
