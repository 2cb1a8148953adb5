"""What an int8 model means (issue 28), checked against onnxruntime.

- its float view keeps the activations its quantization implies (the ReLU onnxruntime's quantizer
  folds into the output zero point), in `info`, `convert` and every float or fixed-point format;
- `qverify verify` without `--format` verifies its own int8 arithmetic, `--format int8-x86` what
  onnxruntime computes on x86 CPUs without AVX-VNNI, `--format int8-ort` what this machine's
  onnxruntime computes (the probe's variant): the 2-8-8-3 oracle of
  `benchmarks/bench_int8_oracle.py` (truth: onnxruntime on every input code of the box; without
  AVX-VNNI natively or under `qemu-x86_64 -cpu Haswell`, `tests/int8_kernels.py`);
- the x86 variant's simulator and C are bit-exact against those kernels;
- float-view verdicts: every counterexample is re-checked in onnxruntime on the float view's ONNX
  file and on the float model, and the verdicts agree with the float model's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from qverify.codegen import CompiledNetwork, render_network
from qverify.io import load_network
from qverify.network import Activation, CodeType
from qverify.quant import ImplementationOptions, Int8Format, Int8Kernel, quantize_network, simulate
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime
from qverify.quant.ort_kernel import ORT_LABEL
from tests.int8_kernels import machine_format, oracle, runner_or_skip

QVERIFY = [sys.executable, "-m", "qverify"]
FAST_SEEDS = (2, 5)  # one SAFE and one UNSAFE instance (seed parity), where the two kernels differ


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list:
    return oracle.make_models(tmp_path_factory.mktemp("int8-oracle"), range(6))


def test_info_shows_the_relu_folded_into_the_output_zero_point(models):
    """onnxruntime's quantizer removes the Relu nodes (the output zero point -128 clamps at 0); the
    float view has them again, as the float model does."""
    for m in models:
        assert [layer.activation for layer in load_network(m.default_path).layers] == [
            Activation.RELU,
            Activation.RELU,
            Activation.IDENTITY,
        ]
    done = subprocess.run(
        [*QVERIFY, "info", str(models[0].default_path)], capture_output=True, text=True, check=True
    )
    assert (
        done.stdout.count(", relu  weights") == 2
        and "the output zero point -128 is the code minimum" in done.stdout
    )


def _oracle(
    models, seeds, attribute: str, fmt: str, runner: list[str], directory: Path
) -> list[tuple[str, str]]:
    """(verdict, truth) of each seed's instance (`oracle.make_instance`) for the models' `attribute`;
    for a variant made where the kernels differ (int8-x86, and int8-ort: the probe's variant), checks
    that the other kernel would answer some instance wrongly (the instances tell the two apart)."""
    chosen = [m for m in models if m.seed in seeds]
    variant = machine_format().label if fmt == ORT_LABEL else fmt
    instances = [oracle.make_instance(getattr(m, attribute), variant, m.seed) for m in chosen]
    inputs = [oracle.box_inputs(load_network(i.model), i.lo, i.hi) for i in instances]
    outputs = oracle.onnxruntime_outputs(runner, [i.model for i in instances], inputs)
    truths = [oracle.truth(i, o) for i, o in zip(instances, outputs)]
    if fmt in ("int8-x86", ORT_LABEL):
        other = Int8Kernel.EXACT if variant == "int8-x86" else Int8Kernel.X86
        wrong = [oracle.truth(i, _simulated_outputs(i.model, x, other)) for i, x in zip(instances, inputs)]
        assert wrong != truths, f"the instances do not tell {variant} from the other kernel"
    return [(oracle.verify(QVERIFY, i, directory, fmt), t) for i, t in zip(instances, truths)]


def _simulated_outputs(path: Path, x: np.ndarray, kernel: Int8Kernel) -> np.ndarray:
    qnet = quantize_network(load_network(path), ImplementationOptions(Int8Format(kernel=kernel)))
    return qnet.output_quant.dequantize(simulate(qnet, qnet.input_quant.quantize(x)).outputs)


def test_default_verify_of_reduce_range_models_is_right(models, tmp_path):
    """No --format: the model's own int8 arithmetic; with --reduce-range every onnxruntime kernel
    computes it, so the truth is this machine's onnxruntime."""
    results = _oracle(models, FAST_SEEDS, "reduced_path", "", [sys.executable], tmp_path)
    assert [verdict for verdict, _ in results] == [truth for _, truth in results], results
    assert {truth for _, truth in results} == {"SAFE", "UNSAFE"}


def test_the_machines_variant_of_default_models_is_right_against_its_onnxruntime(models, tmp_path):
    """`--format int8-ort` on models whose pair sums saturate, on instances made where this machine's
    kernel differs most from the other (`oracle.make_instance` for the probe's variant): the truth is
    this machine's onnxruntime, whichever kernel it runs."""
    results = _oracle(models, FAST_SEEDS, "default_path", ORT_LABEL, [sys.executable], tmp_path)
    assert [verdict for verdict, _ in results] == [truth for _, truth in results], results
    assert {truth for _, truth in results} == {"SAFE", "UNSAFE"}


def test_x86_variant_of_default_models_is_right_against_kernels_without_vnni(models, tmp_path):
    runner = runner_or_skip(Int8Kernel.X86)
    results = _oracle(models, FAST_SEEDS, "default_path", "int8-x86", runner, tmp_path)
    assert [verdict for verdict, _ in results] == [truth for _, truth in results], results


@pytest.mark.slow
def test_the_whole_oracle_is_six_of_six(models, tmp_path):
    seeds = range(6)
    reduced = _oracle(models, seeds, "reduced_path", "", [sys.executable], tmp_path)
    assert [v for v, _ in reduced] == [t for _, t in reduced], reduced
    runner = runner_or_skip(Int8Kernel.X86)
    x86 = _oracle(models, seeds, "default_path", "int8-x86", runner, tmp_path)
    assert [v for v, _ in x86] == [t for _, t in x86], x86


def _grid() -> np.ndarray:
    g = np.linspace(-0.2, 1.2, 41)
    return np.array([(a, b) for a in g for b in g])


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param(QuantizeSettings(), id="qdq"),
        pytest.param(QuantizeSettings(per_channel=True), id="qdq-per-channel", marks=pytest.mark.slow),
        pytest.param(QuantizeSettings(activations=CodeType.UINT8), id="qdq-uint8", marks=pytest.mark.slow),
        pytest.param(
            QuantizeSettings(QuantFormat.QOP, activations=CodeType.UINT8),
            id="qop-uint8",
            marks=pytest.mark.slow,
        ),
        pytest.param(QuantizeSettings(QuantFormat.QOP), id="qop-int8"),
    ],
)
def test_x86_simulator_and_c_are_bit_exact_against_onnxruntime_without_vnni(tmp_path, settings):
    runner = runner_or_skip(Int8Kernel.X86)
    path = tmp_path / "q.onnx"
    quantized = quantize_with_onnxruntime(
        oracle.float_mlp(5), np.random.default_rng(105).uniform(0, 1, (500, 2)), settings, path
    )
    x = _grid()
    (expected,) = oracle.onnxruntime_outputs(runner, [path], [x])
    exact = quantize_network(quantized, ImplementationOptions(Int8Format()))
    x86 = quantize_network(quantized, ImplementationOptions(Int8Format(kernel=Int8Kernel.X86)))
    codes = x86.input_quant.quantize(x)
    simulated = simulate(x86, codes).outputs
    compiled = CompiledNetwork(render_network(x86), tmp_path / "c", True)
    assert np.array_equal(compiled.run(codes).outputs, simulated)
    assert np.array_equal(x86.output_quant.dequantize(simulated), expected)
    differing = np.any(exact.output_quant.dequantize(simulate(exact, codes).outputs) != expected, axis=1)
    can_saturate = any(layer.int8.paired is not None for layer in x86.layers if layer.is_mac)
    assert can_saturate == (
        settings.quant_format is QuantFormat.QDQ or settings.activations is CodeType.UINT8
    )
    assert differing.any() == can_saturate  # the variants differ exactly where saturation is possible


def _float_instance(m, directory: Path, safe: bool) -> tuple[Path, Path]:
    """A box property on the float view with a margin of 0.25 above (SAFE) or below (UNSAFE) its
    largest output 0 over a grid: wide enough that the float model, 8.8 and float agree."""
    view = directory / f"view{m.seed}.onnx"
    subprocess.run([*QVERIFY, "convert", str(m.reduced_path), str(view)], check=True, capture_output=True)
    g = np.linspace(0.2, 0.5, 61)
    x = np.array([(a, b) for a in g for b in g])
    top = float(np.max([_ort(view, row)[0] for row in x]))
    instance = oracle.Instance(
        m.reduced_path, "", (0.2, 0.2), (0.5, 0.5), 0, top + (0.25 if safe else -0.25), safe
    )
    return view, instance.write_property(directory / f"float{m.seed}.vnnlib")


def _ort(path: Path, x) -> np.ndarray:
    """onnxruntime's outputs at one input (float32 or double, as the model's input is declared)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    declared = session.get_inputs()[0]
    dtype = np.float64 if declared.type == "tensor(double)" else np.float32
    return session.run(None, {declared.name: np.asarray(x, dtype=dtype)[None]})[0][0]


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--format", "8.8"], id="8.8"),
        pytest.param(["--format", "float"], id="float", marks=pytest.mark.slow),
        pytest.param(["--format", "float", "--semantics", "real"], id="real", marks=pytest.mark.slow),
    ],
)
def test_float_view_verdicts_agree_with_the_float_model_and_replay_in_onnxruntime(models, tmp_path, flags):
    for m, safe in ((models[1], False), (models[2], True)):
        view, prop = _float_instance(m, tmp_path, safe)
        verdicts = {}
        for name, path in (("quantized", m.reduced_path), ("float model", m.float_path)):
            out = tmp_path / f"{name.replace(' ', '-')}-{m.seed}.json"
            done = subprocess.run(
                [*QVERIFY, "verify", str(path), "--property", str(prop), *flags, "--json", str(out)],
                capture_output=True,
                text=True,
                check=False,
            )
            verdicts[name] = done.stdout.split("\n", 1)[0]
            if name == "quantized":
                assert "verifies its float view" in done.stderr
            record = json.loads(out.read_text())
            if verdicts[name] == "UNSAFE":
                x = record["counterexample"]["inputs_real"]
                threshold = float(prop.read_text().split("(>= Y_0 ")[1].split(")")[0])
                assert _ort(view, x)[0] >= threshold - 1e-3, "the float view violates it in onnxruntime"
                assert _ort(m.float_path, x)[0] >= threshold - 0.05, "and the float model does too"
        assert verdicts == {
            "quantized": "SAFE" if safe else "UNSAFE",
            "float model": "SAFE" if safe else "UNSAFE",
        }


def test_vnncomp_run_on_an_int8_model_gives_a_witness_onnxruntime_confirms(models, tmp_path):
    m = models[1]
    instance = oracle.make_instance(m.reduced_path, "", 1)  # seed 1: UNSAFE by design
    prop = instance.write_property(tmp_path / "p.vnnlib")
    result = tmp_path / "result.txt"
    subprocess.run(
        [*QVERIFY, "vnncomp", "run", "v1", "oracle", str(m.reduced_path), str(prop), str(result), "60"],
        check=True,
        capture_output=True,
    )
    text = result.read_text()
    assert text.startswith("sat")
    values = {
        name: float(value)
        for name, value in (item.strip("( )\n").split() for item in text.split("\n")[1:] if item.strip())
    }
    y = _ort(m.reduced_path, [values["X_0"], values["X_1"]])
    assert np.array_equal(np.float32(y[instance.output]), np.float32(values[f"Y_{instance.output}"]))
    assert y[instance.output] >= instance.threshold


@pytest.mark.parametrize(
    ("code", "zero", "scale", "relu", "expected"),
    [
        (CodeType.INT8, -128, 0.01, False, Activation.RELU),  # onnxruntime's folded ReLU
        (CodeType.UINT8, 0, 0.01, False, Activation.RELU),
        (CodeType.INT8, -128, float(np.float32(6 / 255)), False, Activation.RELU6),  # a folded Clip(0, 6)
        (CodeType.UINT8, 0, float(np.float32(6 / 255)), False, Activation.RELU6),
        (CodeType.INT8, -20, 0.01, True, Activation.RELU),  # an explicit Relu: the clamp at z
        (CodeType.INT8, -127, 0.01, False, Activation.IDENTITY),  # clamps at -0.01: range saturation
        (CodeType.INT8, 3, 0.05, False, Activation.IDENTITY),
    ],
)
def test_the_float_view_activation_of_a_requantization(code, zero, scale, relu, expected):
    from qverify.network import MacQuant, TensorQuant
    from qverify.network.float_view import implied_activation

    f32 = float(np.float32(0.01))
    output = TensorQuant(float(np.float32(scale)), zero, code)
    quant = MacQuant(TensorQuant(f32, 0, code), np.ones((2, 2)), np.array([f32]), np.zeros(2), output, relu)
    assert implied_activation(quant) is expected
