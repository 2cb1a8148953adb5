#!/usr/bin/env python3
"""Where the rounding charge on a quantized query's margin comes from (issue 45): the root's sound
bound of each instance in the implementation's arithmetic and in real arithmetic on the same
constants, and the difference broken down by layer and neuron.

A benchmark, not a test: it builds `NetworkQuery` objects in process (no C), computes the root
node's bounds the way the network-level search does (`bounds.node_bounds`, alpha-CROWN on the hidden
layers' own bounds in high dimensions, the atoms' bounds by back-substitution with DeepPoly's and
then alpha-CROWN's slopes) and reports for the worst clause (the one whose best atom bound is
lowest):

  real     the bound with the same constants read as exact reals (`Arithmetic.REAL`: no rounding)
  impl     the bound in the implementation's arithmetic (fixed point <k,l>, int8)
  charge   real - impl: what the rounding costs the margin, split into
  direct   what the statements' error terms e_j cost the bound directly (sum over layers j and
           neurons i of lam_ji's worst case over e_ji, `backsubstitute(statements=...)`), per layer
  indirect the rest: intermediate bounds widened by the rounding (looser relaxations, more open
           neurons), the grid, and for int8 the requantization staircases' relaxations

int8 has no real reading of the same integers; its rows give the requantization staircases'
relaxation cost per layer instead (|coefficient on the code| x the gap between the relaxation's two
lines, the wider end: what `lp._first_layer_choice` ranks neurons by), and how much of it sits on
neurons whose staircase is in its linear range (no clamp inside [L, U]: all of its gap is rounding).

Instances (`--instances`, comma-separated groups):
  verify        `make verify`'s tasks that reach the timeout: digits img00 eps 0.5, img04 eps 1, img13/19 eps 2 at the
                16-bit split range analysis picks (<5,11>), vocalic E-L120/I-L120/A-L80 at <6,10>
  digits784     benchmarks/digits784's centres at eps 0.015 and 0.02 (its train.py, in process), <16,16>
  digits784x4   benchmarks/digits784x4's instances.csv, <16,16>
  images        digits32rgb-conv, digits28-avgpool, digits28-maxpool instances at <16,16>
  images-int8   the same on their int8 models
  --names GLOB  keeps instances whose name matches (comma-separated globs)

Where the search reads an open root's input layer exactly (fixed point, an input layer too wide
for a table: `operand_rounding.StreamedInput`), a last line gives that root's bound and charge.

Usage:
  python benchmarks/rounding_charge.py --instances verify [--top 5] [--alpha-steps 20]
  python benchmarks/rounding_charge.py --instances digits784 --names 'img01*0.015'
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import fnmatch
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qverify.engine.netlevel.bounds import (
    Bounds,
    backsubstitute,
    exact_input_lower,
    input_layer,
    node_bounds,
    optimised_bound,
    tighten_intermediate,
)
from qverify.engine.netlevel.operand_rounding import StreamedInput
from qverify.engine.netlevel.query import Arithmetic, NetworkQuery, query_for
from qverify.engine.netlevel.search import INPUT_SPLIT_DIMENSIONS, INTERMEDIATE_ALPHA_STEPS, Search
from qverify.engine.result import EngineOptions, Recorder
from qverify.io import load_network
from qverify.properties import Property, read_vnnlib
from qverify.quant import FixedFormat, ImplementationOptions, quantize_network
from qverify.suites.suite_file import read_suite
from qverify.suites.tasks import TaskSpec, resolve_implementation

VERIFY_TASKS = {
    "digits": ["img00-eps0.5", "img04-eps1", "img13-eps2", "img19-eps2"],
    "vocalic": ["E-L120", "I-L120", "A-L80"],
}
IMAGE_SUITES = ("digits32rgb-conv", "digits28-avgpool", "digits28-maxpool")


@dataclass(frozen=True)
class Instance:
    name: str
    network: Path | object  # a path, or a Network
    prop: Property
    implementation: ImplementationOptions


def _suite_instances(suite: str, names: list[str], label: str) -> list[Instance]:
    """A shipped suite's tasks at a format label as `qverify suite run --format LABEL` resolves it."""
    read = read_suite(suite)
    found = []
    for task in read.tasks:
        if task.name not in names:
            continue
        number_label, path = read.resolve(label, task)
        spec = TaskSpec(
            suite,
            task.name,
            label,
            str(path),
            task.property,
            read.implementation,
            None,
            None,
            number_label,  # type: ignore[arg-type]
        )
        net = load_network(path)
        implementation, _ = resolve_implementation(spec, net)
        found.append(
            Instance(f"{suite}/{task.name}@{implementation.number}", net, task.property, implementation)
        )
    return found


def _csv_instances(folder: Path, label: str, int8: bool = False) -> list[Instance]:
    """A VNN-LIB suite (instances.csv) at <16,16>, or on its int8 model."""
    found = []
    int8_model = None
    if int8:
        import tomllib

        with open(folder / "suite.toml", "rb") as handle:
            variant = tomllib.load(handle).get("variants", {}).get("int8", {})
        int8_model = {Path(k).name: folder / v for k, v in variant.get("networks", {}).items()}
    with open(folder / "instances.csv") as handle:
        for row in csv.reader(handle):
            network = folder / row[0]
            if int8_model is not None:
                network = int8_model.get(network.name)
                if network is None:
                    continue
            implementation = ImplementationOptions(FixedFormat(16, 16))
            if int8:
                from qverify.quant import parse_number_format

                implementation = ImplementationOptions(parse_number_format("int8"))
            found.append(
                Instance(
                    f"{folder.name}/{Path(row[1]).stem}@{label}", network, folder / row[1], implementation
                )  # type: ignore[arg-type]
            )
    return found


def _digits784_radii(epsilons: list[str]) -> list[Instance]:
    folder = ROOT / "benchmarks" / "digits784"
    spec = importlib.util.spec_from_file_location("digits784_train", folder / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = train
    spec.loader.exec_module(train)
    net = load_network(folder / train.DESIGN.network_file)
    x, y, _, test_idx = train.dataset()
    chosen = train.chosen_images(net, x, y, test_idx, train.DESIGN)
    implementation = ImplementationOptions(FixedFormat(16, 16))
    return [
        Instance(f"digits784/{name}@<16,16>", net, prop, implementation)
        for name, prop in train.properties(x, y, chosen, tuple(epsilons))
    ]


def instances(groups: list[str]) -> list[Instance]:
    found: list[Instance] = []
    for group in groups:
        if group == "verify":
            for suite, names in VERIFY_TASKS.items():
                found += _suite_instances(suite, names, "16")
        elif group == "digits784":
            found += _digits784_radii(["0.015", "0.02"])
        elif group == "digits784x4":
            found += _csv_instances(ROOT / "benchmarks" / "digits784x4", "<16,16>")
        elif group == "images":
            for suite in IMAGE_SUITES:
                found += _csv_instances(ROOT / "benchmarks" / suite, "<16,16>")
        elif group == "images-int8":
            for suite in IMAGE_SUITES:
                found += _csv_instances(ROOT / "benchmarks" / suite, "int8", int8=True)
        else:
            raise SystemExit(f"error: unknown instance group {group!r}")
    return found


def build_query(instance: Instance, arithmetic: Arithmetic) -> NetworkQuery:
    net = instance.network if not isinstance(instance.network, Path) else load_network(instance.network)
    prop = read_vnnlib(instance.prop) if isinstance(instance.prop, Path) else instance.prop
    return query_for(quantize_network(net, instance.implementation), prop, arithmetic)  # type: ignore[arg-type]


@dataclass
class Root:
    """The root node's bounds as the search computes them."""

    search: Search
    bounds: Bounds
    xl: np.ndarray
    xu: np.ndarray
    deeppoly: np.ndarray  # per atom (constants added)
    alpha: np.ndarray
    unstable: list[int]  # open neurons per relaxed layer
    seconds: float


def root(query: NetworkQuery, alpha_steps: int) -> Root:
    started = time.perf_counter()
    search = Search(query, EngineOptions(), time.monotonic() + 3600, Recorder())
    model, region = search.model, query.regions[0]
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    words = (region.lo, region.hi) if model.is_fixed and not model.real else None
    bounds = node_bounds(model, xl, xu, phases, None, 0, search.invariants, words)
    assert bounds is not None, "the root holds no execution"
    if model.n_inputs > INPUT_SPLIT_DIMENSIONS:
        tightened = tighten_intermediate(
            model, bounds, xl, xu, phases, INTERMEDIATE_ALPHA_STEPS, time.monotonic() + 3600
        )
        assert tightened is not None
        bounds = tightened
    last = len(model.layers) - 1
    linear = backsubstitute(model, bounds, search.atom_matrix, last, True, xl, xu, keep=True)
    shift = search.atom_shift(*bounds.post(model, last))
    deeppoly = linear.lower + shift
    alpha = deeppoly
    if alpha_steps:
        alpha = optimised_bound(model, bounds, search.atom_matrix, xl, xu, alpha_steps, linear).lower + shift
    unstable = [
        int(layer.open_neurons(bounds.pre_lo[k], bounds.pre_hi[k]).sum())
        for k, layer in enumerate(model.layers)
    ]
    return Root(search, bounds, xl, xu, deeppoly, alpha, unstable, time.perf_counter() - started)


def worst_clause(search: Search, lower: np.ndarray) -> tuple[int, float]:
    """(atom row, bound) of the clause whose best atom bound is lowest."""
    best = [(max(rows, key=lambda i: lower[i]), max(lower[rows])) for rows in search.clause_rows if rows]
    return min(best, key=lambda pair: pair[1])


def row_bound(found: Root, bounds: Bounds, row: int, statements: dict | None = None) -> float:
    """The atom row's back-substituted lower bound on the root's box with these bounds (DeepPoly
    slopes); `statements` filled as `backsubstitute` does."""
    model = found.search.model
    matrix = found.search.atom_matrix[row : row + 1]
    last = len(model.layers) - 1
    linear = backsubstitute(model, bounds, matrix, last, True, found.xl, found.xu, statements=statements)
    return float(linear.lower[0])


def direct_charges(found: Root, row: int) -> dict[int, np.ndarray]:
    """Per layer, what each neuron's error term costs the atom row's bound (DeepPoly slopes)."""
    statements: dict[int, np.ndarray] = {}
    row_bound(found, found.bounds, row, statements)
    bounds = found.bounds
    return {
        j: np.maximum(-lam[0] * bounds.err_lo[j], -lam[0] * bounds.err_hi[j]) for j, lam in statements.items()
    }


def without_errors(found: Root) -> Bounds:
    """The root's bounds with every error term zero (the intermediate bounds kept)."""
    zeros = [np.zeros_like(e) for e in found.bounds.err_lo]
    return dataclasses.replace(found.bounds, err_lo=zeros, err_hi=list(zeros), affine={}, relaxations={})


def stair_costs(found: Root, row: int) -> dict[int, tuple[float, float, int]]:
    """int8 (and lookup tables): per staircase layer, (cost of the relaxation gaps on the row's
    bound, the part on neurons in their linear range, open neurons)."""
    model, bounds = found.search.model, found.bounds
    last = len(model.layers) - 1
    linear = backsubstitute(
        model, bounds, found.search.atom_matrix[row : row + 1], last, True, found.xl, found.xu, keep=True
    )
    costs = {}
    for k, layer in enumerate(model.layers):
        stairs = layer.stairs
        if stairs is None:
            continue
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        relaxation = bounds.relaxation(model, k)
        slope, offset = relaxation.s - relaxation.a, relaxation.t - relaxation.c
        gap = np.maximum(slope * lo + offset, slope * hi + offset)
        coefficient = np.abs(found.search.atom_matrix[row]) if k == last else np.abs(linear.lam_post[k][0])
        opened = stairs.open(lo, hi)
        cost = np.where(opened, coefficient * gap, 0.0)
        code_lo, code_hi = stairs.code_bounds(lo, hi)
        linear_range = (
            opened & (code_lo > stairs.qmin) & (code_hi < stairs.qmax)
            if stairs.thresholds is not None
            else opened
        )
        costs[k] = (float(cost.sum()), float(cost[linear_range].sum()), int(opened.sum()))
    return costs


def report(instance: Instance, alpha_steps: int, top: int) -> None:
    impl = root(build_query(instance, Arithmetic.IMPLEMENTATION), alpha_steps)
    model = impl.search.model
    row, impl_bound = worst_clause(impl.search, impl.alpha)
    _, impl_deeppoly = worst_clause(impl.search, impl.deeppoly)
    print(
        f"\n## {instance.name}  ({model.n_inputs} inputs, {len(model.layers)} layers, root {impl.seconds:.1f} s)"
    )
    if model.stepped:
        print(
            f"int8 root bound (worst clause, output codes): {impl_bound:.4g} (DeepPoly {impl_deeppoly:.4g})"
        )
        print("| layer | open staircases | relaxation cost | of it in the linear range |")
        print("|---|---:|---:|---:|")
        for k, (cost, linear_cost, opened) in stair_costs(impl, row).items():
            print(f"| {k + 1} | {opened} | {cost:.4g} | {linear_cost:.4g} |")
        return
    real = root(build_query(instance, Arithmetic.REAL), alpha_steps)
    _, real_bound = worst_clause(real.search, real.alpha)
    _, real_deeppoly = worst_clause(real.search, real.deeppoly)
    direct = direct_charges(impl, row)
    total_direct = sum(float(v.sum()) for v in direct.values())
    stripped = dataclasses.replace(impl, bounds=without_errors(impl))
    no_error = (
        row_bound(impl, stripped.bounds, row)
        + impl.search.atom_shift(*impl.bounds.post(model, len(model.layers) - 1))[row]
    )
    print(
        f"worst clause: real {real_bound:.4g} (DeepPoly {real_deeppoly:.4g}); "
        f"{model.qnet.number} {impl_bound:.4g} (DeepPoly {impl_deeppoly:.4g}); "
        f"charge {real_bound - impl_bound:.4g} (DeepPoly {real_deeppoly - impl_deeppoly:.4g})"
    )
    print(
        f"DeepPoly split: direct (error terms) {total_direct:.4g}, the same bounds without them "
        f"{no_error:.4g}, indirect (wider intermediate bounds) {real_deeppoly - no_error:.4g}; "
        f"open neurons real {real.unstable} vs {impl.unstable}"
    )
    print("| layer | neurons | roundings per neuron (max) | direct charge | share | top neurons (charge) |")
    print("|---|---:|---:|---:|---:|---|")
    for j in sorted(direct):
        values = direct[j]
        count = model.rounding_count(
            j, np.maximum(*(np.abs(b) for b in impl.bounds.inputs(model, j, impl.xl, impl.xu)))
        )
        order = np.argsort(-values)[:top]
        tops = ", ".join(f"{int(i)} ({values[i]:.3g})" for i in order if values[i] > 0)
        share = float(values.sum()) / total_direct if total_direct else 0.0
        print(
            f"| {j + 1} | {len(values)} | {int(np.max(count))} | {values.sum():.4g} | {share:.0%} | {tops} |"
        )
    exact = exact_input_root(impl, alpha_steps)
    if exact is not None:
        bound, unstable, seconds = exact
        print(
            f"the input layer's roundings read exactly (the search's open root: `StreamedInput`): "
            f"{bound:.4g}, charge {real_bound - bound:.4g}; open neurons {unstable}; {seconds:.1f} s"
        )


def exact_input_root(found: Root, alpha_steps: int) -> tuple[float, list[int], float] | None:
    """What the search's open root does where its input layer has no table (`Search.process`,
    `EXACT_INPUT_SHARE`): the hidden layers' bounds again and the atoms' with the input layer's
    roundings read exactly; (the worst clause's bound, open neurons per layer, seconds) or None
    where it does not apply. (Tightens `found.bounds` in place: call it last.)"""
    search, model = found.search, found.search.model
    if not search.reads_input_exactly(found.bounds, found.xl, found.xu):
        return None
    started = time.perf_counter()
    reader = StreamedInput(model, input_layer(model), found.xl, found.xu)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    with threadpool_limits(limits=1, user_api="blas"):  # (as the search runs it: `search.decide`)
        bounds = tighten_intermediate(
            model,
            found.bounds,
            found.xl,
            found.xu,
            phases,
            INTERMEDIATE_ALPHA_STEPS,
            time.monotonic() + 3600,
            reader,
        )
        assert bounds is not None, "the root holds no execution"
        linear = optimised_bound(
            model, bounds, search.atom_matrix, found.xl, found.xu, max(alpha_steps, 1), input_statement=True
        )
        lower = exact_input_lower(linear, reader) + search.atom_shift(
            *bounds.post(model, len(model.layers) - 1)
        )
    unstable = [
        int(layer.open_neurons(bounds.pre_lo[k], bounds.pre_hi[k]).sum())
        for k, layer in enumerate(model.layers)
    ]
    return worst_clause(search, np.maximum(lower, found.alpha))[1], unstable, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", default="verify")
    parser.add_argument("--names", default=None)
    parser.add_argument("--alpha-steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    chosen = instances(args.instances.split(","))
    if args.names:
        globs = args.names.split(",")
        chosen = [i for i in chosen if any(fnmatch.fnmatch(i.name, f"*{g}*") for g in globs)]
    for instance in chosen:
        report(instance, args.alpha_steps, args.top)


if __name__ == "__main__":
    main()
