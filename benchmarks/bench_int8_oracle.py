"""The 2-8-8-3 int8 oracle (issue 28): `qverify verify` on quantized models against onnxruntime.

Six random 2-8-8-3 float MLPs (ReLU hidden layers) are quantized by qverify's quantize path
(onnxruntime's static quantizer, QDQ, per tensor, int8) with and without `--reduce-range`. Each
model gets a VNN-LIB box property `Y_j >= c` whose threshold lies half an output step above (SAFE)
or below (UNSAFE) the largest output code the *simulator* of the variant under test reaches in the
box, so a verifier that reasons about any other arithmetic is likely to answer wrongly. The truth
is onnxruntime's, on every input code of the box (a float that quantizes to each code): natively
(this machine's kernels, which `qverify.quant.ort_kernel`'s probe names: with AVX-VNNI they compute
the exact ONNX semantics, on AVX2 alone int16 pair saturation) and with the other kind of kernel
where this machine can run it (`kernel_runner`): onnxruntime's kernels without AVX-VNNI under
`qemu-x86_64 -cpu Haswell` (AVX2, no VNNI; qemu >= 7.2 emulates AVX2) on a VNNI machine; on an
AVX2 machine the exact kernels need a VNNI CPU (qemu 7.2 emulates none).

    python benchmarks/bench_int8_oracle.py [--out DIR] [--seeds 6] [--emulate-avx2]

prints one table: model kind x format x verdicts right against onnxruntime on this CPU and on the
other kind, on the same instances per model kind (made for the exact semantics on `--reduce-range`
models, for `int8-x86` on default ones, and for the probe's variant with `--format int8-ort`).
`--emulate-avx2` runs the `int8-ort` row's `qverify verify` under qemu's Haswell model too, so its
probe finds the AVX2 kernels (the verifier's own processes, engine and gcc, run natively: qemu-user
does not follow exec), against onnxruntime under the same model. `--before DIR` adds the verdicts of
an older qverify source tree. The test `tests/test_int8_meaning.py` runs the same instances.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.io import load_network, save_network
from qverify.network import Activation, Dense, Network
from qverify.quant import ImplementationOptions, Int8Format, Int8Kernel, quantize_network, simulate
from qverify.quant.calibrate import QuantizeSettings, quantize_with_onnxruntime
from qverify.quant.ort_kernel import ORT_LABEL, probe_kernel

SIZES = (2, 8, 8, 3)
BOX_WIDTH = 0.3
QEMU_CPU = "Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid"  # AVX2, FMA, F16C; no AVX-512, no VNNI
_ORT_SCRIPT = """
import sys, numpy as np, onnxruntime as ort
x = np.load(sys.argv[1], allow_pickle=True)
out = {}
for index, path in enumerate(sys.argv[3:]):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    declared = session.get_inputs()[0]
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in declared.shape]  # batch 1
    rows = x[index].reshape(-1, *shape[1:])
    out[f"m{index}"] = np.concatenate([session.run(None, {declared.name: row[None]})[0] for row in rows])
np.savez(sys.argv[2], **out)
"""
_PROBE_SCRIPT = "from qverify.quant.ort_kernel import probe_kernel; print(probe_kernel().kernel.value)"


def float_mlp(seed: int) -> Network:
    rng = np.random.default_rng(seed)
    layers = [
        Dense(
            rng.normal(0, 1.0, (n_out, n_in)),
            rng.normal(0, 0.3, n_out),
            Activation.RELU if index < len(SIZES) - 2 else Activation.IDENTITY,
        )
        for index, (n_in, n_out) in enumerate(itertools.pairwise(SIZES))
    ]
    return Network(tuple(layers), name=f"mlp{seed}")


@dataclass(frozen=True)
class Models:
    seed: int
    float_path: Path
    default_path: Path  # quantize's defaults
    reduced_path: Path  # --reduce-range


def make_models(directory: Path, seeds) -> list[Models]:
    directory.mkdir(parents=True, exist_ok=True)
    made = []
    for seed in seeds:
        net = float_mlp(seed)
        paths = Models(
            seed, directory / f"f{seed}.onnx", directory / f"q{seed}.onnx", directory / f"q{seed}r.onnx"
        )
        save_network(net, paths.float_path)
        calibration = np.random.default_rng(100 + seed).uniform(0, 1, size=(500, 2))
        quantize_with_onnxruntime(net, calibration, QuantizeSettings(), paths.default_path)
        quantize_with_onnxruntime(net, calibration, QuantizeSettings(reduce_range=True), paths.reduced_path)
        made.append(paths)
    return made


def _child_kernel(prefix: list[str]) -> Int8Kernel | None:
    """The kernel the probe finds in a Python started with `prefix` (None: it failed)."""
    done = subprocess.run([*prefix, "-c", _PROBE_SCRIPT], capture_output=True, text=True, check=False)
    return Int8Kernel(done.stdout.strip()) if done.returncode == 0 else None


@functools.cache
def kernel_runner(kernel: Int8Kernel) -> tuple[list[str] | None, str]:
    """The command prefix that runs Python with onnxruntime summing u8 x s8 products as `kernel` does
    (the exact sums, or int16 pair saturation), and how; (None, why not) when this machine cannot."""
    # asked of a child: under qemu-user this process is emulated and its children are not
    native = _child_kernel([sys.executable])
    if native is kernel:
        emulated = native is not probe_kernel().kernel
        how = "natively (this process runs under an emulator)" if emulated else "natively"
        return [sys.executable], f"{how}: {Int8Format(kernel=kernel).label}"
    if kernel is Int8Kernel.EXACT:
        return None, (
            "needs a CPU whose onnxruntime sums u8 x s8 products exactly (AVX-VNNI, AVX-512 VNNI or ARM): "
            "this one saturates int16 pairs, and qemu-user (7.2) emulates no VNNI"
        )
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        return None, (
            "needs an x86 CPU without AVX-VNNI (onnxruntime's pair-saturating kernels): this one has VNNI "
            "and qemu-x86_64 (Debian: qemu-user), which would emulate one, is not installed"
        )
    return [qemu, "-cpu", QEMU_CPU, sys.executable], f"under qemu-x86_64 -cpu {QEMU_CPU.split(',')[0]}"


def onnxruntime_outputs(prefix: list[str], paths: list[Path], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of each model on its inputs (batch 1, one run per row), in a child
    process started with `prefix` (the native interpreter, or qemu running it)."""
    with tempfile.TemporaryDirectory(prefix="qverify-ort-") as scratch:
        x_path, out_path = Path(scratch) / "x.npy", Path(scratch) / "out.npz"
        stacked = np.empty(len(inputs), dtype=object)
        stacked[:] = [np.asarray(x, dtype=np.float32) for x in inputs]
        np.save(x_path, stacked, allow_pickle=True)
        subprocess.run(
            [*prefix, "-c", _ORT_SCRIPT, str(x_path), str(out_path), *map(str, paths)],
            check=True,
            stderr=subprocess.DEVNULL if prefix[0] != sys.executable else None,
            env=os.environ | {"OMP_NUM_THREADS": "1"},
        )
        result = np.load(out_path)
        return [result[f"m{index}"] for index in range(len(paths))]


@dataclass(frozen=True)
class Instance:
    """One model, one box property `Y_output >= threshold` (unsafe when reached), its truth."""

    model: Path
    variant: str  # the --format the instance is made for ("" = no flag: the model's int8)
    lo: tuple[float, float]
    hi: tuple[float, float]
    output: int
    threshold: float
    safe_by_design: bool
    above: bool = True  # the unsafe set: Y_output >= threshold (else Y_output <= threshold)

    def write_property(self, path: Path) -> Path:
        lines = [f"(declare-const X_{i} Real)" for i in range(2)]
        lines += [f"(declare-const Y_{j} Real)" for j in range(3)]
        for i in range(2):
            lines += [f"(assert (>= X_{i} {self.lo[i]!r}))", f"(assert (<= X_{i} {self.hi[i]!r}))"]
        lines.append(f"(assert ({'>=' if self.above else '<='} Y_{self.output} {self.threshold!r}))")
        path.write_text("\n".join(lines) + "\n")
        return path


def box_inputs(net: Network, lo, hi) -> np.ndarray:
    """One float input per input code of the box (every code the box reaches, as its value)."""
    quant = net.quantization.input
    low = quant.quantize(np.asarray(lo, dtype=np.float32))
    high = quant.quantize(np.asarray(hi, dtype=np.float32))
    codes = np.array(list(itertools.product(*(range(a, b + 1) for a, b in zip(low, high)))))
    return quant.dequantize(codes)


def _extreme_codes(net: Network, kernel: Int8Kernel, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    qnet = quantize_network(net, ImplementationOptions(Int8Format(kernel=kernel)))
    codes = simulate(qnet, qnet.input_quant.quantize(x)).outputs
    return codes.max(axis=0), codes.min(axis=0)


def _candidate_boxes(net: Network) -> list[tuple[float, float, float]]:
    """(x0, x1, width): a 3 x 3 grid of boxes of width 0.3, and boxes of width 0.04 around the first
    points of a 41 x 41 grid where the two kernels' simulators differ (saturation is local)."""
    boxes = [(a, b, BOX_WIDTH) for a in (0.0, 0.35, 0.7) for b in (0.0, 0.35, 0.7)]
    g = np.linspace(0.0, 0.96, 41)
    x = np.array([(a, b) for a in g for b in g])
    outputs = []
    for kernel in Int8Kernel:
        qnet = quantize_network(net, ImplementationOptions(Int8Format(kernel=kernel)))
        outputs.append(simulate(qnet, qnet.input_quant.quantize(x)).outputs)
    differing = np.flatnonzero(np.any(outputs[0] != outputs[1], axis=1))
    boxes += [(float(x[i, 0]), float(x[i, 1]), 0.04) for i in differing[:: max(1, len(differing) // 12)][:12]]
    return boxes


def make_instance(path: Path, variant: str, seed: int) -> Instance:
    """A box, an output and a side chosen (by the simulators) where the variant's arithmetic differs
    most from the other kernel's, and a threshold half an output step beyond (SAFE, even seeds) or
    before (UNSAFE, odd seeds) the variant's extreme output code there."""
    net = load_network(path)
    kernel = Int8Kernel.X86 if variant == "int8-x86" else Int8Kernel.EXACT  # "" and "int8": exact
    other = Int8Kernel.EXACT if kernel is Int8Kernel.X86 else Int8Kernel.X86
    scored = []
    for order, (a, b, width) in enumerate(_candidate_boxes(net)):
        x = box_inputs(net, (a, b), (a + width, b + width))
        (top, bottom), (other_top, other_bottom) = (
            _extreme_codes(net, kernel, x),
            _extreme_codes(net, other, x),
        )
        for output in range(3):
            scored.append(
                (abs(int(top[output]) - int(other_top[output])), -order, output, True, (a, b, width), top)
            )
            scored.append(
                (
                    abs(int(bottom[output]) - int(other_bottom[output])),
                    -order,
                    output,
                    False,
                    (a, b, width),
                    bottom,
                )
            )
    scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
    _, _, output, above, (a, b, width), extreme = scored[0] if scored[0][0] else scored[2 * (seed % 3)]
    out = net.quantization.output
    value = float(out.dequantize(np.array([extreme[output]]))[0])
    safe = seed % 2 == 0
    beyond = 0.5 if safe else -0.5
    threshold = float(np.float32(value + (beyond if above else -beyond) * out.scale))
    return Instance(path, variant, (a, b), (a + width, b + width), output, threshold, safe, above)


def whole_domain_instance(path: Path, seed: int) -> Instance:
    """The issue's kind of property: the whole input domain [0, 1]^2, output `seed % 3`, a threshold
    half an output step above (SAFE) or below (UNSAFE) the largest code the int8 model reaches."""
    net = load_network(path)
    top, _ = _extreme_codes(net, Int8Kernel.EXACT, box_inputs(net, (0.0, 0.0), (1.0, 1.0)))
    out = net.quantization.output
    output, safe = seed % 3, seed % 2 == 0
    value = float(out.dequantize(np.array([top[output]]))[0])
    threshold = float(np.float32(value + (0.5 if safe else -0.5) * out.scale))
    return Instance(path, "", (0.0, 0.0), (1.0, 1.0), output, threshold, safe)


def truth(instance: Instance, outputs: np.ndarray) -> str:
    """SAFE unless some onnxruntime output reaches the threshold (outputs: float32 of every code)."""
    values = outputs[:, instance.output].astype(np.float64)
    reached = values >= instance.threshold if instance.above else values <= instance.threshold
    return "UNSAFE" if reached.any() else "SAFE"


def verify(
    qverify: list[str],
    instance: Instance,
    directory: Path,
    fmt: str,
    timeout: float = 120,
    env: dict | None = None,
    tag: str = "",
    cwd: Path | None = None,
) -> str:
    """The first line of `qverify verify MODEL --property P [--format F]`: the verdict."""
    prop = instance.write_property(directory / f"{instance.model.stem}-{tag or fmt or 'default'}.vnnlib")
    command = [*qverify, "verify", str(instance.model), "--property", str(prop), "--timeout", str(timeout)]
    if fmt:
        command += ["--format", fmt]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env, cwd=cwd)
    return done.stdout.split("\n", 1)[0].strip() or f"ERROR {done.stderr.strip()[-200:]}"


def _right(verdicts: list[str], truths: list[str] | None) -> str:
    return "-" if truths is None else f"{sum(v == t for v, t in zip(verdicts, truths))}/{len(verdicts)}"


def _shown(verdicts: list[str]) -> str:
    return " ".join(v[:1] if v in ("SAFE", "UNSAFE") else "?" for v in verdicts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="int8-oracle-")))
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument(
        "--emulate-avx2",
        action="store_true",
        help="also run the int8-ort row's `qverify verify` under qemu's Haswell model (its probe finds the "
        "AVX2 kernels), against onnxruntime under the same model (slow: minutes)",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="a source tree of an older qverify (e.g. `git archive` of main before issue 28): its default "
        "verdicts on the same instances, run as `python -m qverify` in that tree (python -m puts the "
        "working directory first on the path) with PYTHONPATH set to it",
    )
    args = parser.parse_args()
    qverify = [sys.executable, "-m", "qverify"]
    models = make_models(args.out, range(args.seeds))
    here = probe_kernel()
    other_kernel = Int8Kernel.EXACT if here.kernel is Int8Kernel.X86 else Int8Kernel.X86
    other_label = Int8Format(kernel=other_kernel).label
    prefix, how = kernel_runner(other_kernel)
    print(f"models in {args.out}; {here.describe()}; onnxruntime's {other_label} kernels: {how}")
    formats = ["", "int8-x86", ORT_LABEL, "16.16", "float"] + (["before"] if args.before else [])
    print(
        f"| models | --format | right vs onnxruntime here ({here.label}) | right vs onnxruntime "
        f"{other_label} | verdicts |"
    )
    print("|---|---|---:|---:|---|")
    kinds = (
        ("--reduce-range", "reduced_path", lambda path, seed: make_instance(path, "", seed)),
        ("--reduce-range, whole domain", "reduced_path", whole_domain_instance),
        ("default", "default_path", lambda path, seed: make_instance(path, "int8-x86", seed)),
        (
            f"default, made for {here.label}",
            "default_path",
            lambda path, seed: make_instance(path, here.label, seed),
        ),
    )
    for kind, attribute, build in kinds:
        slug = "".join(c for c in kind if c.isalnum())
        instances = [build(getattr(m, attribute), m.seed) for m in models]
        inputs = [box_inputs(load_network(i.model), i.lo, i.hi) for i in instances]
        paths = [i.model for i in instances]
        native = [
            truth(i, o) for i, o in zip(instances, onnxruntime_outputs([sys.executable], paths, inputs))
        ]
        other = (
            [truth(i, o) for i, o in zip(instances, onnxruntime_outputs(prefix, paths, inputs))]
            if prefix
            else None
        )
        for fmt in formats:
            if fmt == "before":
                env = os.environ | {"PYTHONPATH": str(args.before)}
                verdicts = [
                    verify(qverify, i, args.out, "", env=env, tag=f"before-{slug}", cwd=args.before)
                    for i in instances
                ]
                label = "(none), before issue 28"
            else:
                verdicts = [
                    verify(qverify, i, args.out, fmt, tag=f"{fmt or 'default'}-{slug}") for i in instances
                ]
                label = fmt or "(none: the model's int8)"
            print(
                f"| {kind} | {label} | {_right(verdicts, native)} | {_right(verdicts, other)} | {_shown(verdicts)} |",
                flush=True,
            )
        truths = " ".join(t[:1] for t in native)
        shown_other = "" if other is None else f" / {other_label} " + " ".join(t[:1] for t in other)
        print(f"| {kind} | truth | | | here {truths}{shown_other} |", flush=True)
    if args.emulate_avx2:
        emulated_avx2(models, args.out)
    return 0


def emulated_avx2(models: list[Models], directory: Path) -> None:
    """`qverify verify --format int8-ort` under qemu's Haswell model (the probe runs in the verifying
    process: it finds the AVX2 kernels) on instances made for int8-x86, against onnxruntime under the
    same model: what a user on an AVX2 machine gets."""
    prefix, how = kernel_runner(Int8Kernel.X86)
    if prefix is None or prefix[0] == sys.executable:
        print(f"| default, made for int8-x86 | {ORT_LABEL} under emulation | not run: {how} |")
        return
    instances = [make_instance(m.default_path, "int8-x86", m.seed) for m in models]
    inputs = [box_inputs(load_network(i.model), i.lo, i.hi) for i in instances]
    truths = [
        truth(i, o)
        for i, o in zip(instances, onnxruntime_outputs(prefix, [i.model for i in instances], inputs))
    ]
    qverify = [*prefix, "-m", "qverify"]
    verdicts = [verify(qverify, i, directory, ORT_LABEL, timeout=600, tag="ort-emulated") for i in instances]
    print(
        f"| default, made for int8-x86 | {ORT_LABEL}, qverify {how} | | {_right(verdicts, truths)} "
        f"(truth {' '.join(t[:1] for t in truths)}) | {_shown(verdicts)} |",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
