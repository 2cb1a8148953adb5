"""int8 networks: the engine's verdicts against brute force through the compiled C.

Each instance is a random tiny int8 network as a quantized model would state it (2 inputs of int8
or uint8 codes; a dense 2 -> 2..5 layer with the ReLU clamp, a dense layer to 2 or 3 outputs;
weights per tensor or per channel; onnxruntime's or TFLite's requantization) and a property over
its *whole* input box (65,536 code pairs) or a random sub-box. Thresholds come from the simulated
outputs so that SAFE and UNSAFE (some by a single point) come in similar numbers. The ground truth
is the generated harness compiled with gcc and run on every point of the box.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from qverify.codegen import compile_replay, render_harness, run_lines
from qverify.codegen.conditions import implementation_box
from qverify.engine import EngineOptions, EngineStatus, check_file
from qverify.errors import RangeError
from qverify.invariants import IntervalMethod, compute_bounds
from qverify.network import (
    Activation,
    AffineQuantization,
    CodeType,
    Dense,
    MacQuant,
    Network,
    TensorQuant,
)
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import (
    ImplementationOptions,
    Int8Format,
    QuantizedNetwork,
    RequantMode,
    quantize_network,
    simulate,
)
from tests.conftest import budgeted
from tests.test_engine_oracle import seeded_instances

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

ROOT = Path(__file__).resolve().parents[1]
MODELS_C = ROOT / "models_c"
FAST_SEEDS = range(40)
SLOW_SEEDS = range(40, 240)
ANNOTATED_SEEDS = range(16)


@dataclass
class Instance:
    seed: int
    description: str
    harness: Path
    annotated: Path
    executable: Path
    truth: str
    violating: int
    qnet: QuantizedNetwork | None = None  # what the harness was generated from
    prop: Property | None = None


def _scale(rng: np.random.Generator, low: float, high: float) -> float:
    return float(np.float32(np.exp(rng.uniform(np.log(low), np.log(high)))))


def _tensor(rng: np.random.Generator, code: CodeType, what: str, relu_range: bool = False) -> TensorQuant:
    zero = code.qmin if relu_range else int(rng.integers(code.qmin + 20, code.qmax - 20))
    return TensorQuant(_scale(rng, 0.005, 0.1), zero, code, what)


def random_mac_integers(
    rng: np.random.Generator, n_in: int, n_out: int, per_channel: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random dense layer's int8 weights, float32 weight scales (one per output, or one) and
    int32 biases."""
    weights = rng.integers(-127, 128, size=(n_out, n_in))
    scales = np.array([_scale(rng, 0.002, 0.05) for _ in range(n_out if per_channel else 1)])
    bias = rng.integers(-3000, 3000, size=n_out)
    return weights, scales, bias


def dequantized_dense(quant: MacQuant, activation: Activation) -> Dense:
    """The float layer a dense `quant` stands for: its weights and biases dequantized."""
    scales = quant.channel_scales()
    return Dense(quant.weights * scales[:, None], quant.bias * quant.input.scale * scales, activation)


def random_int8_network(rng: np.random.Generator, sizes: tuple[int, ...] | None = None) -> Network:
    """A random int8 model (sizes default: 2 inputs, 2..5 hidden, 2..3 outputs)."""
    code = CodeType.INT8 if rng.random() < 0.5 else CodeType.UINT8
    per_channel = rng.random() < 0.5
    if sizes is None:
        sizes = (2, int(rng.integers(2, 6)), int(rng.integers(2, 4)))
    quant_in = _tensor(rng, code, "input")
    hidden = _tensor(rng, code, "hidden", relu_range=rng.random() < 0.5)
    output = _tensor(rng, code, "output")
    layers, quants, current = [], [], quant_in
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        last = index == len(sizes) - 2
        weights, scales, bias = random_mac_integers(rng, n_in, n_out, per_channel)
        target = output if last else hidden
        relu = not last and rng.random() < 0.8
        quant = MacQuant(current, weights, scales, bias, target, relu, f"layer {index + 1}")
        layers.append(dequantized_dense(quant, Activation.RELU if relu else Activation.IDENTITY))
        quants.append(quant)
        current = target
    return Network(
        tuple(layers), name="int8-oracle", quantization=AffineQuantization(quant_in, tuple(quants))
    )


def make_instance(
    seed: int,
    directory: Path,
    build: Callable[[np.random.Generator], Network] = random_int8_network,
    tflite_share: float = 0.3,
) -> Instance:
    """A random network from `build` and a property over a box of its input codes, with its truth
    by running the compiled harness on every point (`tflite_share`: how many use TFLite's
    requantization)."""
    rng = np.random.default_rng(7000 + seed)
    for _ in range(20):
        net = build(rng)
        mode = RequantMode.TFLITE if rng.random() < tflite_share else RequantMode.ONNXRUNTIME
        try:
            qnet = quantize_network(net, ImplementationOptions(Int8Format(mode)))
        except RangeError:
            continue
        quant_in = qnet.input_quant
        code = quant_in.code
        if rng.random() < 0.5:  # the whole input box
            lo_codes, hi_codes = [code.qmin, code.qmin], [code.qmax, code.qmax]
        else:
            lo_codes = [int(rng.integers(code.qmin, code.qmax - 10)) for _ in range(2)]
            hi_codes = [min(code.qmax, a + int(rng.integers(5, 120))) for a in lo_codes]
        # a real box whose float32 points quantize to exactly these codes: the codes' own values
        lo_reals = [(a - quant_in.zero_point) * Fraction(quant_in.scale) for a in lo_codes]
        hi_reals = [(b - quant_in.zero_point) * Fraction(quant_in.scale) for b in hi_codes]
        if rng.random() < 0.3:
            # input 0 pinned to a decimal no float32 equals (issue 40): the model receives its
            # nearest float32 and quantizes that, one code
            offset = float(rng.uniform(-0.4, 0.4))
            value = Fraction(f"{(lo_codes[0] - quant_in.zero_point + offset) * quant_in.scale:.16g}")
            (pinned,) = quant_in.quantize(np.array([float(value)], dtype=np.float32))
            lo_codes[0] = hi_codes[0] = int(pinned)
            lo_reals[0] = hi_reals[0] = value
        box = Box(tuple(lo_reals), tuple(hi_reals))
        converted = implementation_box(qnet, box)
        assert [int(v) for v in converted.lo] == lo_codes and [int(v) for v in converted.hi] == hi_codes
        points = np.array(
            list(itertools.product(*(range(a, b + 1) for a, b in zip(lo_codes, hi_codes)))), dtype=np.int64
        )
        outputs = simulate(qnet, points).outputs
        out = qnet.output_quant
        clauses = []
        if rng.random() < 0.7:
            j = int(rng.integers(outputs.shape[1]))
            values = np.sort(outputs[:, j])
            choice = rng.random()
            if choice < 0.35:
                code_threshold = int(values[-1]) + 1  # SAFE, tight
            elif choice < 0.6:
                code_threshold = int(values[-1])  # UNSAFE, tight
            else:
                code_threshold = int(values[int(rng.integers(len(values) // 2, len(values)))])
            if code_threshold > out.code.qmax:
                code_threshold = out.code.qmax + 1
            real = (code_threshold - out.zero_point) * Fraction(out.scale)
            clauses.append(Clause((Atom(((j, Fraction(1)),), -real, Relation.GE),)))
        else:
            label = int(np.argmax(outputs[len(outputs) // 2]))
            for j in range(outputs.shape[1]):
                if j != label:
                    atom = Atom(((j, Fraction(1)), (label, Fraction(-1))), Fraction(0), Relation.GT)
                    clauses.append(Clause((atom,)))
        prop = Property(f"int8-oracle-{seed}", (box,), OutputCondition(tuple(clauses)))
        harness = render_harness(qnet, prop).write(directory / f"case{seed}")
        executable = compile_replay(harness)
        lines = run_lines(executable, [" ".join(map(str, row)) for row in points])
        violating = sum(line.startswith("VIOLATED") for line in lines)
        assert all(line in ("HOLDS",) or line.startswith("VIOLATED") for line in lines)
        invariants = compute_bounds(qnet, prop, IntervalMethod.BUILTIN).bounds
        annotated = render_harness(qnet, prop, invariants).write(directory / f"annotated{seed}")
        description = (
            f"seed {seed}: {code.value} {'per-channel' if net.quantization.per_channel else 'per-tensor'} "
            f"{mode.value} sizes {net.sizes} points {len(points)} violating {violating}"
        )
        return Instance(
            seed,
            description,
            harness,
            annotated,
            executable,
            "UNSAFE" if violating else "SAFE",
            violating,
            qnet,
            prop,
        )
    raise RuntimeError(f"seed {seed}: no instance")


def check_instance(instance: Instance, options: EngineOptions, annotated: bool = False) -> None:
    result = check_file(instance.annotated if annotated else instance.harness, [MODELS_C], options)
    assert result.status.value == instance.truth, (instance.description, result.to_json())
    if result.status is EngineStatus.UNSAFE:
        (line,) = run_lines(instance.executable, [" ".join(str(int(v)) for v in result.counterexample)])
        assert line == f"VIOLATED {result.violated}", (instance.description, line, result.violated)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return seeded_instances(tmp_path_factory.mktemp("int8-oracle"), make_instance)


@pytest.mark.parametrize("seed", FAST_SEEDS)
def test_int8_oracle(cases, seed):
    check_instance(cases(seed), budgeted())


@pytest.mark.parametrize("seed", ANNOTATED_SEEDS)
def test_int8_oracle_with_invariants(cases, seed):
    check_instance(cases(seed), budgeted(), annotated=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_int8_oracle_slow(cases, seed):
    check_instance(cases(seed), budgeted())


def test_instances_cover_both_verdicts_and_code_types(cases):
    instances = [cases(seed) for seed in FAST_SEEDS]
    truths = {instance.truth for instance in instances}
    assert truths == {"SAFE", "UNSAFE"}
    assert sum(instance.truth == "SAFE" for instance in instances) >= 10
    assert any("uint8" in instance.description for instance in instances)
    assert any("tflite" in instance.description for instance in instances)
    assert any("points 65536" in instance.description for instance in instances)
