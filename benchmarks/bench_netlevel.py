#!/usr/bin/env python3
"""Benchmark the network-level strategy (`qverify.engine.netlevel.decide`) on NetworkQuery objects
built in process (a benchmark, not a test: no C, no harness; what the engine would decide once the
array front end has lifted the harness).

Suites
  acasxu    ACAS Xu, the 186 VNN-COMP instances (benchmarks/acasxu/instances.csv; --props and
            --networks select) at <16,16> (implementation arithmetic) and in REAL arithmetic
            (float32 constants read as reals).
  digits784 L-inf robustness on a 784-256x6-10 ReLU network: benchmarks/digits784/ (instances.csv
            with an ONNX network and VNN-LIB files) when present, else a random network of that
            shape with 30 instances around random images (eps 0.005..0.03), stated as such.
  layers    issue 29's layer kinds on random networks of the field's shapes (`layer_networks`: a
            CIFAR-shaped 3x32x32 conv net, MNIST-size conv + max pool and conv + padded average
            pool, a 784-200x6-10 sigmoid MLP), radii around each centre's attack frontier.

One line per instance (status, seconds, CPU seconds, nodes), then per mode: decided count,
SAFE/UNSAFE counts, median and total seconds of all instances (timeouts count their full time),
CPU seconds and the process's peak resident memory. With `--distance`,
per instance the gap a branch and bound must close instead: open ReLUs and the worst clause's
bound at the root (after alpha-CROWN on every layer), and the best margin of a long attack.

Usage:
  python benchmarks/bench_netlevel.py acasxu [--modes fixed,real] [--props 1,2,3,4|all] [--jobs 2]
         [--networks 1_1,2_3|all] [--timeout 116] [--limit N]
  python benchmarks/bench_netlevel.py layers [--nets cifar,mnist-max] [--centres 3] [--timeout 60]
  python benchmarks/bench_netlevel.py digits784 [--modes fixed,real] [--timeout 120] [--limit N]
         [--folder benchmarks/digits784] [--epsilons 0.015,0.02] [--names 'img0*-eps0.03']
         [--distance]
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import importlib.util
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import itertools

from qverify.engine.netlevel.attack import atom_forms, unsafe_loss
from qverify.engine.netlevel.bounds import backsubstitute, node_bounds, optimised_bound, tighten_intermediate
from qverify.engine.netlevel.query import Arithmetic, NetworkQuery, query_for
from qverify.engine.netlevel.search import Search, decide
from qverify.engine.result import EngineOptions, Recorder
from qverify.io import load_network
from qverify.network import Activation, AveragePool2D, Conv2D, Dense, MaxPool2D, Network, evaluate
from qverify.properties import read_vnnlib, robustness
from qverify.quant import FixedFormat, FloatFormat, FloatKind, ImplementationOptions, quantize_network

MODES = {
    "fixed": (ImplementationOptions(FixedFormat(16, 16)), Arithmetic.IMPLEMENTATION),
    "real": (ImplementationOptions(FloatFormat(FloatKind.FLOAT)), Arithmetic.REAL),
}


@dataclass(frozen=True)
class Instance:
    name: str
    network: Path | Network
    prop: object  # a Path to a VNN-LIB file, or a Property


@dataclass(frozen=True)
class Outcome:
    name: str
    mode: str
    status: str
    seconds: float  # wall
    nodes: int
    reason: str
    cpu: float = 0.0  # CPU seconds of this process and the search's workers (the machine is shared)
    peak_mb: float = 0.0  # peak resident set of the process so far


def acas_instances(props: set[str] | None, networks: set[str] | None) -> list[Instance]:
    """The VNN-COMP ACAS Xu instances (benchmarks/acasxu/instances.csv: 186), filtered."""
    folder = ROOT / "benchmarks" / "acasxu"
    instances = []
    with open(folder / "instances.csv") as handle:
        for row in csv.reader(handle):
            onnx, vnnlib = folder / row[0], folder / row[1]
            net_id = onnx.stem.removeprefix("ACASXU_run2a_").removesuffix("_batch_2000")
            prop_id = vnnlib.stem.removeprefix("prop_")
            if (props is None or prop_id in props) and (networks is None or net_id in networks):
                instances.append(Instance(f"{net_id} φ{prop_id}", onnx, vnnlib))
    return instances


def random_784(seed: int = 0) -> Network:
    """A random 784-256x6-10 ReLU network (He-scaled weights): the shape of the issue's network."""
    rng = np.random.default_rng(seed)
    sizes = (784, 256, 256, 256, 256, 256, 256, 10)
    layers = []
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        activation = Activation.RELU if index < len(sizes) - 2 else Activation.IDENTITY
        layers.append(
            Dense(rng.normal(0, np.sqrt(2 / n_in), (n_out, n_in)), rng.normal(0, 0.01, n_out), activation)
        )
    return Network(tuple(layers), name="random-784-256x6-10")


def digits_radii_instances(folder: Path, epsilons: list[str]) -> tuple[list[Instance], str]:
    """The suite's 10 centres at other radii, built in process by the suite's own `train.py`
    (its dataset, images and property construction; nothing is written)."""
    spec = importlib.util.spec_from_file_location("digits784_train", folder / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = train  # (its dataclasses look their module up)
    spec.loader.exec_module(train)
    net = load_network(folder / train.DESIGN.network_file)
    x, y, _, test_idx = train.dataset()
    chosen = train.chosen_images(net, x, y, test_idx, train.DESIGN)
    instances = [Instance(name, net, prop) for name, prop in train.properties(x, y, chosen, tuple(epsilons))]
    return (
        instances,
        f"{folder} centres at eps {', '.join(epsilons)} ({len(instances)} instances, in process)",
    )


def digits_instances(folder: Path) -> tuple[list[Instance], str]:
    listing = folder / "instances.csv"
    if listing.exists():
        instances = []
        with open(listing) as handle:
            for row in csv.reader(handle):
                if (folder / row[0]).exists() and (folder / row[1]).exists():
                    instances.append(Instance(Path(row[1]).stem, folder / row[0], folder / row[1]))
        return instances, f"{folder} ({len(instances)} instances with their files)"
    net = random_784()
    rng = np.random.default_rng(1)
    instances = []
    for image in range(10):
        center = rng.uniform(0, 1, 784)
        label = int(np.argmax(evaluate(net, center[None])[0]))
        for eps in ("0.005", "0.01", "0.03"):
            prop = robustness(center.tolist(), eps, label, 10, domain=([0] * 784, [1] * 784))
            instances.append(Instance(f"img{image:02d}-eps{eps}", net, prop))
    return instances, "a random 784-256x6-10 ReLU network (benchmarks/digits784 absent), 30 instances"


def layer_networks(seed: int = 0) -> dict[str, Network]:
    """Random networks (He-scaled weights) of the shapes issue 29 names: the layers, not trained
    weights (the trained suites are benchmarks/*-conv etc. once they exist)."""
    rng = np.random.default_rng(seed)

    def normal(shape, fan_in):
        return rng.normal(0, np.sqrt(2 / fan_in), shape)

    c1 = Conv2D(normal((8, 3, 4, 4), 48), normal(8, 100), Activation.RELU, (3, 32, 32), (2, 2), (1, 1, 1, 1))
    c2 = Conv2D(
        normal((16, 8, 4, 4), 128), normal(16, 100), Activation.RELU, c1.output_shape, (2, 2), (1, 1, 1, 1)
    )
    cifar = Network(
        (
            c1,
            c2,
            Dense(normal((100, 1024), 1024), normal(100, 100), Activation.RELU),
            Dense(normal((10, 100), 100), normal(10, 100), Activation.IDENTITY),
        ),
        name="cifar-3x32x32-conv8-conv16-100-10",
    )
    m1 = Conv2D(normal((32, 1, 2, 2), 4), normal(32, 100), Activation.RELU, (1, 28, 28), (2, 2))
    pool = MaxPool2D(m1.output_shape, (4, 4), (2, 2))
    mnist_max = Network(
        (m1, pool, Dense(normal((10, pool.n_out), pool.n_out), normal(10, 100), Activation.IDENTITY)),
        name="mnist-conv32-maxpool4-10",
    )
    a1 = Conv2D(normal((16, 1, 3, 3), 9), normal(16, 100), Activation.RELU, (1, 28, 28), (2, 2), (1, 1, 1, 1))
    average = AveragePool2D(a1.output_shape, (2, 2), (2, 2), (1, 1, 1, 1))
    mnist_avg = Network(
        (
            a1,
            average,
            Dense(normal((100, average.n_out), average.n_out), normal(100, 100), Activation.RELU),
            Dense(normal((10, 100), 100), normal(10, 100), Activation.IDENTITY),
        ),
        name="mnist-conv16-avgpool2-100-10",
    )
    sizes = (784, 200, 200, 200, 200, 200, 200, 10)
    sigmoid = Network(
        tuple(
            Dense(
                normal((n_out, n_in), n_in),
                normal(n_out, 100),
                Activation.SIGMOID if index < len(sizes) - 2 else Activation.IDENTITY,
            )
            for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes))
        ),
        name="mlp-784-200x6-10-sigmoid",
    )
    return {"cifar": cifar, "mnist-max": mnist_max, "mnist-avg": mnist_avg, "sigmoid784": sigmoid}


def layer_instances(names: list[str], centres: int, seed: int = 1) -> tuple[list[Instance], str]:
    """Per network and random centre (its class the float network's argmax), L-inf radii around the
    frontier: the smallest radius of 0.001 * 2^k at which a short attack (the network level's,
    real arithmetic, bounds off) finds a violation, and a quarter, half and three quarters of it."""
    networks = layer_networks()
    rng = np.random.default_rng(seed)
    options, arithmetic = MODES["real"]
    instances = []
    for name in names:
        net = networks[name]
        n = net.n_inputs
        for index in range(centres):
            centre = rng.uniform(0.2, 0.8, n)
            label = int(np.argmax(evaluate(net, centre[None])[0]))
            qnet = quantize_network(net, options)
            falsified = 0.256
            for k in range(9):
                eps = 0.001 * 2**k
                prop = robustness(centre.tolist(), f"{eps:g}", label, 10, domain=([0] * n, [1] * n))
                query = query_for(qnet, prop, arithmetic)
                found = decide(
                    query, EngineOptions(timeout_s=5, disable=("bounds",)), time.monotonic() + 5, Recorder()
                )
                if found.status.value == "UNSAFE":
                    falsified = eps
                    break
            for share in (0.25, 0.5, 0.75, 1.0):
                eps = f"{falsified * share:.6g}"
                prop = robustness(centre.tolist(), eps, label, 10, domain=([0] * n, [1] * n))
                instances.append(Instance(f"{name}-c{index}-eps{eps}", net, prop))
    return instances, f"random networks {', '.join(names)}, {centres} centres each, 4 radii per centre"


_NETWORKS: dict[str, Network] = {}


def build_query(instance: Instance, mode: str) -> NetworkQuery:
    options, arithmetic = MODES[mode]
    net = instance.network
    if isinstance(net, Path):
        net = _NETWORKS.setdefault(str(net), load_network(net))
    prop = read_vnnlib(instance.prop) if isinstance(instance.prop, Path) else instance.prop
    return query_for(quantize_network(net, options), prop, arithmetic)


def cpu_seconds() -> float:
    """This process's CPU seconds and those of its children that ended (the search's workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def run(instance: Instance, mode: str, timeout: float, jobs: int = 1) -> Outcome:
    wall, cpu = time.perf_counter(), cpu_seconds()
    start = time.monotonic()  # (CPU seconds under --cpu-clock)
    query = build_query(instance, mode)
    recorder = Recorder()
    result = decide(query, EngineOptions(timeout_s=timeout, jobs=jobs), start + timeout, recorder)
    return Outcome(
        instance.name,
        mode,
        result.status.value,
        time.perf_counter() - wall,
        result.counts.get("netlevel.nodes", 0),
        result.reason,
        cpu_seconds() - cpu,
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


@dataclass(frozen=True)
class Distance:
    """How far an instance is from SAFE and from UNSAFE: the root's sound bound and an attack."""

    name: str
    unstable: int  # open ReLUs at the root, after alpha-CROWN on the hidden layers
    relus: int
    root_margin: float  # the worst clause's best atom lower bound (> 0 on every clause: SAFE at the root)
    attack_margin: float  # the smallest unsafe margin a per-clause PGD reached (<= 0: a violation in reals)


def distance(instance: Instance, mode: str, steps: int = 200, restarts: int = 16) -> Distance:
    """The root bounds as the network level computes them (DeepPoly, alpha-CROWN on every hidden
    layer's bounds, alpha-CROWN on the atoms) and a long PGD per unsafe clause on the float64
    surrogate (restarts from the centre and random points): the two sides of the gap a branch
    and bound has to close."""
    query = build_query(instance, mode)
    search = Search(query, EngineOptions(), time.monotonic() + 3600, Recorder())
    model, region = search.model, query.regions[0]
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    bounds = node_bounds(model, xl, xu, phases, None, 0, search.invariants)
    bounds = tighten_intermediate(model, bounds, xl, xu, phases, 20, time.monotonic() + 3600)
    last = len(model.layers) - 1
    linear = backsubstitute(model, bounds, search.atom_matrix, last, True, xl, xu, keep=True)
    lower = (
        optimised_bound(model, bounds, search.atom_matrix, xl, xu, 40, linear).lower + search.atom_constants
    )
    root = min(max(lower[rows]) for rows in search.clause_rows)
    unstable = sum(int(bounds.unstable(model, k).sum()) for k in range(last))
    relus = sum(layer.n_out for layer in model.layers if layer.relu)
    rng = np.random.default_rng(0)
    forms = atom_forms(query)
    best = np.inf
    for clause in sorted({form.clause for form in forms}):
        chosen = [form for form in forms if form.clause == clause]
        x = xl + rng.random((restarts, len(xl))) * (xu - xl)
        x[0] = (xl + xu) / 2
        step = (xu - xl) / 4
        for index in range(steps):
            _, gradient = unsafe_loss(model, chosen, x)
            x = np.clip(x - step * np.sign(gradient), xl, xu)
            step = step * 0.6 if index % 30 == 29 else step
        best = min(best, float(unsafe_loss(model, chosen, x)[0].min()))
    return Distance(instance.name, unstable, relus, float(root), best)


def summarise(outcomes: list[Outcome]) -> None:
    for mode in sorted({o.mode for o in outcomes}):
        mine = [o for o in outcomes if o.mode == mode]
        decided = [o for o in mine if o.status in ("SAFE", "UNSAFE")]
        times = [o.seconds for o in mine]
        cpu = [o.cpu for o in mine]
        nodes = sum(o.nodes for o in mine)
        safe = sum(o.status == "SAFE" for o in mine)
        print(
            f"{mode:6s} decided {len(decided)}/{len(mine)} (SAFE {safe}, UNSAFE {len(decided) - safe}); "
            f"wall: median {statistics.median(times):.2f} s, total {sum(times):.1f} s, "
            f"median of decided {statistics.median([o.seconds for o in decided]) if decided else float('nan'):.2f} s; "
            f"CPU: median {statistics.median(cpu):.2f} s, total {sum(cpu):.1f} s; "
            f"{nodes} nodes, {nodes / max(sum(cpu), 1e-9):.1f} nodes per CPU second, "
            f"peak {max(o.peak_mb for o in mine):.0f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", choices=("acasxu", "digits784", "layers"))
    parser.add_argument(
        "--nets",
        default="cifar,mnist-max,mnist-avg,sigmoid784",
        help="layers: which random networks (cifar, mnist-max, mnist-avg, sigmoid784)",
    )
    parser.add_argument("--centres", type=int, default=3, help="layers: random centres per network")
    parser.add_argument("--modes", default="fixed,real")
    parser.add_argument("--props", default="all", help="ACAS Xu properties, e.g. 1,2,3,4 (default all)")
    parser.add_argument("--networks", default="all")
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--names", default=None, help="only instances matching these globs (comma-separated)")
    parser.add_argument("--folder", type=Path, default=ROOT / "benchmarks" / "digits784")
    parser.add_argument(
        "--distance",
        action="store_true",
        help="instead of deciding: each instance's root bound (> 0: SAFE at the root) and a long "
        "attack's best margin (<= 0: UNSAFE in reals), in the last mode given",
    )
    parser.add_argument(
        "--epsilons",
        default=None,
        help="digits784: the suite's centres at these radii (comma-separated, e.g. 0.015,0.02) "
        "instead of its VNN-LIB files",
    )
    parser.add_argument(
        "--cpu-clock",
        action="store_true",
        help="deadlines in this process's CPU seconds instead of wall seconds (a shared machine: "
        "what one idle core would decide; the engine's clock is time.monotonic)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="processes per search (EngineOptions.jobs)")
    args = parser.parse_args()
    if args.cpu_clock and args.jobs > 1:
        parser.error("--cpu-clock counts this process's CPU time only: use it with --jobs 1")
    if args.cpu_clock:
        time.monotonic = time.process_time  # every deadline and stage time of the engine
    modes = args.modes.split(",")
    if args.suite == "acasxu":
        networks = None if args.networks == "all" else set(args.networks.split(","))
        props = None if args.props == "all" else set(args.props.split(","))
        instances = acas_instances(props, networks)
        timeout = args.timeout or 116.0
        print(f"ACAS Xu φ1–φ4: {len(instances)} instances, timeout {timeout:.0f} s")
    elif args.suite == "layers":
        instances, described = layer_instances(args.nets.split(","), args.centres)
        timeout = args.timeout or 60.0
        print(f"layers: {described}, timeout {timeout:.0f} s")
    else:
        if args.epsilons:
            instances, described = digits_radii_instances(args.folder, args.epsilons.split(","))
        else:
            instances, described = digits_instances(args.folder)
        timeout = args.timeout or 120.0
        print(f"digits784: {described}, timeout {timeout:.0f} s")
    if args.names:
        patterns = args.names.split(",")
        instances = [i for i in instances if any(fnmatch.fnmatch(i.name, p) for p in patterns)]
    instances = instances[: args.limit] if args.limit else instances
    if args.distance:
        print(f"{'instance':24s} {'open ReLUs':>12s} {'root margin':>12s} {'attack margin':>14s}")
        for instance in tqdm(instances, desc="distance", leave=False):
            found = distance(instance, modes[-1])
            tqdm.write(
                f"{found.name:24s} {found.unstable:5d}/{found.relus:<6d} {found.root_margin:12.2f} "
                f"{found.attack_margin:14.2f}"
            )
        return
    outcomes = []
    for mode in modes:
        for instance in tqdm(instances, desc=mode, leave=False):
            outcome = run(instance, mode, timeout, args.jobs)
            outcomes.append(outcome)
            tqdm.write(
                f"{mode:6s} {outcome.name:24s} {outcome.status:8s} {outcome.seconds:7.2f} s "
                f"(CPU {outcome.cpu:7.2f} s) {outcome.nodes:6d} nodes {outcome.reason}"
            )
    summarise(outcomes)


if __name__ == "__main__":
    main()
