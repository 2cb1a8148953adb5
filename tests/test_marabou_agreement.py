"""qverify's real mode agrees with Marabou wherever both decide (issue 16).

`--float --semantics real` decides the network's float weights in ideal real arithmetic, which is what
Marabou decides. On small ReLU networks built here (random weights on a 1/64 grid, so float32 holds
them exactly and both tools read the same reals from the same ONNX file), L-inf robustness boxes of
several radii around random centres (a mix of SAFE and UNSAFE): every instance that both decide must
get the same verdict, and enough of them must be decided by both that the comparison means something.
Marabou runs through the side-by-side benchmark's own runner (`benchmarks/bench_marabou.py`), in
this process. Skipped, with the reason, when maraboupy is not installed (`pip install -e ".[marabou]"`).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from qverify.backends import InternalOptions, Limits, Status
from qverify.io import write_onnx
from qverify.network import Activation, Dense, Network, evaluate_core
from qverify.properties import robustness
from qverify.quant import FloatFormat, FloatKind, ImplementationOptions
from qverify.verification import VerifyOptions, verify_property
from tests.conftest import ROOT

pytest.importorskip("maraboupy", reason='maraboupy is not installed (pip install -e ".[marabou]")')

TIMEOUT_S = 20.0
GRID = 64  # weights and biases are multiples of 1/GRID
SHAPES = ((2, 6, 6, 3), (3, 8, 4), (4, 5, 5, 3), (2, 8, 2), (5, 6, 6, 4))
RADII = ("1/16", "1/4", "1/2", "1")
N_INSTANCES = 20


def _bench_module():
    """benchmarks/bench_marabou.py as a module (its Marabou runner is what the benchmark measures)."""
    path = ROOT / "benchmarks" / "bench_marabou.py"
    spec = importlib.util.spec_from_file_location("benchmarks_bench_marabou", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def _network(rng: np.random.Generator, sizes: tuple[int, ...], number: int) -> Network:
    layers = []
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        activation = Activation.RELU if index < len(sizes) - 2 else Activation.IDENTITY
        weights = np.round(rng.normal(0, 1, (n_out, n_in)) * GRID) / GRID
        bias = np.round(rng.normal(0, 0.5, n_out) * GRID) / GRID
        layers.append(Dense(weights, bias, activation))
    return Network(tuple(layers), name=f"agreement{number}")


def _instances(folder: Path):
    """N_INSTANCES (ONNX path, network, property): each network with every radius in turn."""
    rng = np.random.default_rng(16)
    for number in range(N_INSTANCES):
        net = _network(rng, SHAPES[number % len(SHAPES)], number)
        path = folder / f"{net.name}.onnx"
        write_onnx(net, path, float32=True)
        centre = np.round(rng.uniform(-1, 1, net.n_inputs) * 16) / 16
        label = int(evaluate_core(net, centre[None, :])[0].argmax())
        radius = RADII[number % len(RADII)]
        prop = robustness([str(v) for v in centre], radius, label, net.n_outputs, name=f"r{radius}")
        yield path, net, prop


def _qverify_real(net: Network, prop) -> str:
    record = verify_property(
        net,
        prop,
        ImplementationOptions(number=FloatFormat(FloatKind.FLOAT)),
        VerifyOptions(limits=Limits(timeout_s=TIMEOUT_S), internal=InternalOptions(semantics="real")),
    )
    return record.status.value if record.status in (Status.SAFE, Status.UNSAFE) else "UNKNOWN"


def test_real_mode_agrees_with_marabou(tmp_path):
    bench = _bench_module()
    instances = list(_instances(tmp_path))
    with ThreadPoolExecutor(2) as pool:  # each qverify run is mostly its engine's child process
        ours = list(pool.map(lambda instance: _qverify_real(instance[1], instance[2]), instances))
    rows = []
    for (path, net, prop), verdict in zip(instances, ours):
        theirs = bench.marabou_solve(path, prop, TIMEOUT_S)
        rows.append((net.name, prop.name, verdict, theirs.verdict))
    table = "\n".join(" ".join(str(cell) for cell in row) for row in rows)
    both = [row for row in rows if row[2] in ("SAFE", "UNSAFE") and row[3] in ("SAFE", "UNSAFE")]
    wrong = [row for row in both if row[2] != row[3]]
    assert not wrong, f"real mode and Marabou disagree:\n{table}"
    assert len(both) >= 16, f"too few instances decided by both:\n{table}"
    assert {row[2] for row in both} == {"SAFE", "UNSAFE"}, f"no mix of outcomes:\n{table}"
