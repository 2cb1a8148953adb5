#!/usr/bin/env python3
"""VNN-COMP 2022 categories that this project may not commit, read from the competition's own
repositories (a benchmark helper, not part of qverify).

Some categories state no licence (reach_prob_density: neither ChristopherBrix/vnncomp2022_benchmarks
nor its source, stanleybak/reach_probability_benchmark2022, has one), so their files stay out of
the repository: `extract` copies a category from a checkout of the benchmarks repository (a work
tree, or a bare/mirror git directory read with `git show`) into benchmarks/vnncomp2022/CATEGORY/
(ignored by git), gunzipping its .onnx.gz and .vnnlib.gz files and writing an instances.csv with
the plain names; bench_marabou.py then runs it (`--suite reach_prob_density`). `published` prints
what the competition's tools reported for the category (ChristopherBrix/vnncomp2022_results,
<tool>/<category>/results.csv) beside qverify's verdicts from a bench_marabou.py journal.

Usage:
  python benchmarks/vnncomp2022.py extract reach_prob_density --from ~/vnncomp2022_benchmarks
  python benchmarks/bench_marabou.py --suite reach_prob_density --all --modes real,16.16 --timeout 60 \\
      --no-marabou --out results/rpd
  python benchmarks/vnncomp2022.py published reach_prob_density --results ~/vnncomp2022_results \\
      --journal results/rpd/journal.jsonl
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESTINATION = ROOT / "benchmarks" / "vnncomp2022"  # (.gitignore: benchmarks/vnncomp2022/)
DECIDED = {"sat": "UNSAFE", "unsat": "SAFE"}


def _reader(source: Path) -> tuple[Callable[[str], bytes], Callable[[str], list[str]]]:
    """(read a file, list a folder) of a work tree or of a git directory (its HEAD)."""
    if (source / "HEAD").is_file() and (source / "objects").is_dir():  # a bare or mirror repository

        def git(*args: str) -> bytes:
            done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"error: git {' '.join(args)}: {done.stderr.decode().strip()}")
            return done.stdout

        return (
            lambda path: git("show", f"HEAD:{path}"),
            lambda path: git("ls-tree", "-r", "--name-only", "HEAD", path).decode().split(),
        )
    return (
        lambda path: (source / path).read_bytes(),
        lambda path: [str(p.relative_to(source)) for p in sorted((source / path).rglob("*")) if p.is_file()],
    )


def extract(category: str, source: Path) -> Path:
    """The category's networks, properties and instances.csv under DESTINATION/category (plain
    files); returns that folder."""
    read, listing = _reader(source)
    prefix = f"benchmarks/{category}"
    files = listing(prefix)
    if not files:
        raise SystemExit(
            f"error: {source}: no {prefix}/ (a checkout of ChristopherBrix/vnncomp2022_benchmarks?)"
        )
    folder = DESTINATION / category
    for name in files:
        relative = name[len(prefix) + 1 :]
        data = read(name)
        if relative.endswith(".gz"):
            data, relative = gzip.decompress(data), relative[:-3]
        target = folder / ("instances.original.csv" if relative == "instances.csv" else relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    rows = []
    for row in csv.reader(io.StringIO((folder / "instances.original.csv").read_text())):
        if row and not row[0].startswith("#"):
            rows.append(",".join([row[0].removesuffix(".gz"), row[1].removesuffix(".gz"), *row[2:]]))
    (folder / "instances.csv").write_text("\n".join(rows) + "\n")
    print(f"{category}: {len(files)} files, {len(rows)} instances -> {folder}")
    return folder


def published(category: str, results: Path) -> dict[str, dict[str, tuple[str, float]]]:
    """tool -> instance (the VNN-LIB file's stem) -> (result, seconds) from results.csv."""
    read, listing = _reader(results)
    table: dict[str, dict[str, tuple[str, float]]] = {}
    for name in listing("."):
        parts = name.split("/")
        if len(parts) != 3 or parts[1] != category or parts[2] != "results.csv":
            continue
        rows = list(csv.reader(io.StringIO(read(name).decode())))
        entries = {}
        for row in rows:
            if len(row) >= 6 and f"/{category}/" in row[2]:  # (not the competition's test instance)
                stem = Path(row[2]).name.removesuffix(".gz").removesuffix(".vnnlib")
                seconds = float(row[5]) if row[5] else float("nan")
                entries[stem] = (row[4], seconds)
        if entries:
            table[parts[0]] = entries
    return table


def qverify_verdicts(journal: Path) -> dict[str, dict[str, tuple[str, float]]]:
    """mode -> instance (the VNN-LIB stem) -> (verdict, wall seconds) of bench_marabou.py's qverify runs."""
    found: dict[str, dict[str, tuple[str, float]]] = {}
    for line in journal.read_text().splitlines():
        if not line.strip():
            continue
        outcome = json.loads(line)["record"]["outcome"]
        if outcome.get("tool") != "qverify":
            continue
        stem = outcome["instance"].split("-", 1)[-1]
        found.setdefault(outcome["mode"], {})[stem] = (outcome["verdict"], float(outcome["wall_s"]))
    return found


def print_published(category: str, results: Path, journal: Path | None) -> int:
    tools = published(category, results)
    if not tools:
        raise SystemExit(f"error: {results}: no */{category}/results.csv")
    ours = qverify_verdicts(journal) if journal else {}
    instances = sorted({i for entries in tools.values() for i in entries}, key=_natural)
    columns = [f"qverify {mode}" for mode in ours] + sorted(tools)
    print(f"| instance | {' | '.join(columns)} |")
    print("|---|" + "---|" * len(columns))
    for instance in instances:
        cells = [_cell(*ours[mode].get(instance, ("-", float("nan")))) for mode in ours]
        cells += [
            _cell(DECIDED.get(r, r), s)
            for r, s in (tools[t].get(instance, ("-", float("nan"))) for t in sorted(tools))
        ]
        print(f"| {instance} | {' | '.join(cells)} |")
    print()
    for column, entries in [(f"qverify {m}", v) for m, v in ours.items()] + [
        (t, {i: (DECIDED.get(r, r), s) for i, (r, s) in e.items()}) for t, e in sorted(tools.items())
    ]:
        decided = [i for i, (v, _) in entries.items() if v in ("SAFE", "UNSAFE") and i in instances]
        print(f"{column}: {len(decided)}/{len(instances)} decided")
    disagreements = [
        f"{instance}: qverify {mode} {ours[mode][instance][0]}, {tool} {tools[tool][instance][0]}"
        for mode in ours
        for tool in tools
        for instance in instances
        if instance in ours[mode]
        and instance in tools[tool]
        and ours[mode][instance][0] in ("SAFE", "UNSAFE")
        and DECIDED.get(tools[tool][instance][0]) not in (None, ours[mode][instance][0])
    ]
    for line in disagreements:
        print(f"DISAGREE {line}", file=sys.stderr)
    return 1 if disagreements else 0


def _cell(verdict: str, seconds: float) -> str:
    return verdict if math.isnan(seconds) else f"{verdict} {seconds:.1f}"


def _natural(name: str) -> tuple:
    head, _, tail = name.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (name, 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    take = commands.add_parser("extract", help="copy a category out of the benchmarks repository")
    take.add_argument("category")
    take.add_argument("--from", dest="source", type=Path, required=True)
    show = commands.add_parser("published", help="the tools' published results beside qverify's")
    show.add_argument("category")
    show.add_argument("--results", type=Path, required=True, help="ChristopherBrix/vnncomp2022_results")
    show.add_argument("--journal", type=Path, help="bench_marabou.py's journal.jsonl")
    args = parser.parse_args()
    if args.command == "extract":
        extract(args.category, args.source)
        return 0
    return print_published(args.category, args.results, args.journal)


if __name__ == "__main__":
    raise SystemExit(main())
