"""What the image suites of issue 29 share: data, centres, radii, VNN-LIB instances, suite files.

Used by benchmarks/digits28-maxpool, digits28-avgpool, digits32rgb-conv and digits784-sigmoid
(their `train.py` put this folder on sys.path). Not part of the qverify package.

- Data: scikit-learn's bundled 8x8 digits with the split of the `digits` suite, upsampled
  bilinearly (`scipy.ndimage.zoom`, order 1): to 28x28 as benchmarks/digits784 does (`digits28`),
  or to 32x32 in three channels (`digits32rgb`: the digit, the digit blurred, and its negative on a
  grey background; CIFAR's shape), values rounded to multiples of 1/256 (an 8-bit image).
- Centres: the first test images (in the split's order) the network classifies correctly.
- Radii, by attacking and by bounding: per centre, on the grid `RADII`, the smallest radius at
  which a float attack (projected gradient ascent from the centre and random points) finds a
  misclassified input (`adversarial_index`), and the largest at which DeepPoly's back-substitution
  (`deeppoly.py`, float64) bounds the margin above 0 (`certified_index`). The instances take two
  radii on each side of that frontier: the certified radius and the grid radius three steps below
  it (SAFE in real arithmetic, by a bound as plain as DeepPoly's), the attack's radius and the one
  two steps above it (UNSAFE, with the attack's counterexample); the band between the two stays
  between the instances, as in the field's suites (a verifier decides them by bounds and attacks).
- Files: `vnnlib/imgNN-epsE.vnnlib` (the box [c - eps, c + eps] clipped to [0, 1], unsafe: another
  class scores at least as high as the label), `instances.csv` (VNN-COMP rows), `suite.toml` (the
  instances at the suite's formats; an int8 variant names the quantized model).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from conv_training import ConvTrainer, check_with_onnxruntime, export_pytorch_layout, image_attack
from deeppoly import margin_lower_bound
from scipy.ndimage import gaussian_filter, zoom
from threadpoolctl import threadpool_limits

from qverify.network import CodeType, Network, evaluate_core
from qverify.properties import Property, format_vnnlib, robustness
from qverify.quant import ImplementationOptions, Int8Format, quantize_network, simulate
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime

BENCHMARKS = Path(__file__).resolve().parent
GREY_LEVELS = 256
# radii (inputs in [0, 1]; 1/256 is one grey level), about 1.25x apart
RADII = (
    "0.0005", "0.001", "0.0015", "0.002", "0.0025", "0.003", "0.004", "0.005", "0.006", "0.008",
    "0.01", "0.0125", "0.015", "0.02", "0.025", "0.03", "0.04", "0.05", "0.06", "0.08", "0.1",
    "0.125", "0.15", "0.2", "0.25",
)  # fmt: skip
SAFE_OFFSETS = (-3, 0)  # grid steps from the largest certified radius
UNSAFE_OFFSETS = (0, 2)  # grid steps from the smallest falsified radius
Attack = Callable[[np.ndarray, np.ndarray, int, int], float]  # (lo, hi, label, seed) -> best margin
Bound = Callable[[np.ndarray, np.ndarray, int], float]  # (lo, hi, label) -> a lower bound of the margin


def _script(folder: str, name: str):
    path = BENCHMARKS / folder / "train.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (a script's dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def digits28() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """benchmarks/digits784's inputs (1797, 784) in [0, 1], labels, training and test indices."""
    return _script("digits784", "benchmarks_digits784_train").dataset()


def _grey(values: np.ndarray) -> np.ndarray:
    return np.clip(np.round(values * GREY_LEVELS) / GREY_LEVELS, 0.0, 1.0)


def digits32rgb() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Inputs (1797, 3 * 32 * 32) in [0, 1], NCHW flattened: the digit zoomed 4x, the same blurred
    (Gaussian, sigma 1.5 pixels), and 0.5 - 0.5 x the digit; labels and the digits suite's split."""
    levels, labels, train_idx, test_idx = _script("digits", "benchmarks_digits_train").dataset()
    images = zoom(levels.reshape(-1, 8, 8) / 16.0, (1, 4, 4), order=1)
    blurred = gaussian_filter(images, sigma=(0, 1.5, 1.5))
    channels = np.stack([images, blurred, 0.5 - 0.5 * images], axis=1)
    return _grey(channels.reshape(len(levels), -1)), labels, train_idx, test_idx


def chosen_images(net: Network, x: np.ndarray, y: np.ndarray, test_idx: np.ndarray, count: int) -> np.ndarray:
    """Sample indices of the first `count` test images (split order) the network gets right."""
    correct = evaluate_core(net, x[test_idx]).argmax(axis=1) == y[test_idx]
    return test_idx[correct][:count]


def box(centre: np.ndarray, eps: str) -> tuple[np.ndarray, np.ndarray]:
    radius = float(eps)
    return np.clip(centre - radius, 0.0, 1.0), np.clip(centre + radius, 0.0, 1.0)


def adversarial_index(
    attack: Attack, centre: np.ndarray, label: int, seed: int, radii: Sequence[str] = RADII
) -> int:
    """The index in `radii` of the smallest radius at which `attack` falsifies (binary search: a
    larger box contains a smaller one, so success is monotone up to the attack's luck)."""
    low, high = 0, len(radii) - 1
    if attack(*box(centre, radii[high]), label, seed) < 0:
        raise SystemExit(f"no radius up to {radii[high]} falsifies the image with label {label}")
    while low < high:
        middle = (low + high) // 2
        if attack(*box(centre, radii[middle]), label, seed) >= 0:
            high = middle
        else:
            low = middle + 1
    return low


def certified_index(
    bound: Bound, centre: np.ndarray, label: int, below: int, radii: Sequence[str] = RADII
) -> int:
    """The index in `radii` (below `below`) of the largest radius at which `bound` proves the
    margin positive, -1 if none (binary search: a bound is the weaker the larger the box)."""
    low, high = -1, below - 1
    while low < high:
        middle = (low + high + 1) // 2
        if bound(*box(centre, radii[middle]), label) > 0:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True, slots=True)
class Instance:
    name: str
    image: int  # position among the chosen centres
    eps: str
    prop: Property
    falsified: bool  # by the float attack at this radius
    certified: bool  # by the DeepPoly estimate at this radius


def instance_name(image: int, eps: str) -> str:
    return f"img{image:02d}-eps{eps}"


def instances(
    x: np.ndarray, y: np.ndarray, chosen: np.ndarray, attack: Attack, bound: Bound, n_outputs: int = 10
) -> Iterator[Instance]:
    """Per chosen centre, two radii on each side of its frontier (module docstring)."""
    n_inputs = x.shape[1]
    domain = (np.zeros(n_inputs), np.ones(n_inputs))
    for image, index in enumerate(chosen):
        centre, label = x[index], int(y[index])
        falsified = adversarial_index(attack, centre, label, seed=image)
        certified = certified_index(bound, centre, label, falsified)
        positions = [max(certified + offset, 0) for offset in SAFE_OFFSETS]
        positions += [min(falsified + offset, len(RADII) - 1) for offset in UNSAFE_OFFSETS]
        text = [f"{round(v * GREY_LEVELS)}/{GREY_LEVELS}" for v in centre]
        for position in dict.fromkeys(positions):
            eps = RADII[position]
            name = instance_name(image, eps)
            prop = robustness(text, eps, label, n_outputs, domain=domain, name=name)
            yield Instance(name, image, eps, prop, position >= falsified, position <= certified)


def write_instances(folder: Path, network_file: str, chosen: Sequence[Instance], timeout_s: int) -> None:
    """vnnlib/*.vnnlib and instances.csv (rows network,property,timeout) of the instances."""
    vnnlib = folder / "vnnlib"
    vnnlib.mkdir(exist_ok=True)
    for stale in vnnlib.glob("*.vnnlib"):
        stale.unlink()
    rows = []
    for instance in chosen:
        file_name = f"vnnlib/{instance.name}.vnnlib"
        (folder / file_name).write_text(format_vnnlib(instance.prop, n_outputs=10), encoding="utf-8")
        rows.append(f"{network_file},{file_name},{timeout_s}")
    (folder / "instances.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")


def suite_text(
    script: str,
    name: str,
    description: str,
    formats: Sequence[str],
    timeout_s: int,
    image_shape: Sequence[int],
    variants: dict[str, tuple[str, str, str]],
) -> str:
    """suite.toml: the instances (instances.csv) at `formats`; `variants` maps a label to
    (format, float network file, its model file at that label)."""
    lines = [
        f"# Generated by benchmarks/{script}: edit that script and rerun it, not this file.",
        f'name = "{name}"',
        f'description = "{description}"',
        "formats = [" + ", ".join(f'"{label}"' for label in formats) + "]",
        f"timeout = {timeout_s}",
        f"image_shape = [{', '.join(str(size) for size in image_shape)}]",
        'instances = "instances.csv"',
    ]
    for label, (number, network, model) in variants.items():
        lines += [
            "",
            f"[variants.{label}]",
            f'format = "{number}"',
            f'networks = {{ "{network}" = "{model}" }}',
        ]
    return "\n".join(lines) + "\n"


def accuracy_rows(net: Network, x: np.ndarray, y: np.ndarray, splits: dict[str, np.ndarray]) -> list[str]:
    """README table rows `| split | right/total | accuracy |` of the float64 network."""
    predicted = evaluate_core(net, x).argmax(axis=1)
    rows = []
    for split, idx in splits.items():
        right = int(np.sum(predicted[idx] == y[idx]))
        rows.append(f"| {split} | {right}/{len(idx)} | {100 * right / len(idx):.2f}% |")
    return rows


@dataclass(frozen=True, slots=True)
class TrainedSuite:
    """What a suite's script reports and writes besides the network: its instances and accuracy."""

    net: Network
    chosen: np.ndarray
    instances: tuple[Instance, ...]
    accuracy: list[str]


def build_instances(
    folder: Path,
    net: Network,
    data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    attack: Attack,
    network_file: str,
    n_images: int,
    timeout_s: int,
) -> TrainedSuite:
    """Centres, radii and files of a trained network (module docstring); prints what it chose."""
    x, y, train_idx, test_idx = data
    chosen = chosen_images(net, x, y, test_idx, n_images)
    bound = lambda lo, hi, label: margin_lower_bound(net, lo, hi, label)
    found = tuple(instances(x, y, chosen, attack, bound))
    write_instances(folder, network_file, found, timeout_s)
    accuracy = accuracy_rows(net, x, y, {"train": train_idx, "test": test_idx})
    print("\n".join(accuracy))
    print(f"images: {chosen.tolist()} (digits {y[chosen].tolist()})")
    for image in range(len(chosen)):
        radii = [
            f"{i.eps}{' (falsified)' if i.falsified else ' (certified)' if i.certified else ''}"
            for i in found
            if i.image == image
        ]
        print(f"  img{image:02d}: {', '.join(radii)}")
    return TrainedSuite(net, chosen, found, accuracy)


@dataclass(frozen=True, slots=True)
class ConvSuite:
    """One convolutional suite: its architecture, training settings and files."""

    folder: Path
    name: str
    template: Network  # the architecture (zero weights)
    data: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    description: str
    image_shape: tuple[int, ...]
    epochs: int
    batch: int
    rate: float
    decay: float
    int8: bool  # write an int8 model (onnxruntime QOperator, per tensor) and an int8 variant
    calibration_images: int | None = None  # the first N training images calibrate it (None: all)
    n_images: int = 8
    timeout_s: int = 60
    seed: int = 0

    @property
    def network_file(self) -> str:
        return f"{self.template.name}.onnx"

    @property
    def int8_file(self) -> str:
        return f"{self.template.name}.int8.onnx"


def conv_suite_text(suite: ConvSuite) -> str:
    """suite.toml of a convolutional suite: <16,16>, and int8 on its int8 model when it has one."""
    formats = ("16.16", "int8") if suite.int8 else ("16.16",)
    variants = {"int8": ("int8", suite.network_file, suite.int8_file)} if suite.int8 else {}
    script = f"{suite.folder.name}/train.py"
    return suite_text(
        script, suite.name, suite.description, formats, suite.timeout_s, suite.image_shape, variants
    )


def write_int8_model(suite: ConvSuite, net: Network, data: tuple[np.ndarray, ...]) -> None:
    """Quantize the trained network with onnxruntime (QOperator, per tensor, int8 activations),
    calibrated on the suite's calibration images, and print the simulator's int8 test accuracy.
    qverify reads the written model (the quantized network it reads is what is verified)."""
    x, y, train_idx, test_idx = data
    calibration = x[train_idx][: suite.calibration_images]
    settings = QuantizeSettings(QuantFormat.QOP, per_channel=False, activations=CodeType.INT8)
    model = quantize_with_onnxruntime(net, calibration, settings, suite.folder / suite.int8_file)
    qnet = quantize_network(model, ImplementationOptions(Int8Format()))
    predicted = simulate(qnet, qnet.input_quant.quantize(x[test_idx])).outputs.argmax(axis=1)
    print(f"int8 test accuracy (simulator): {int(np.sum(predicted == y[test_idx]))}/{len(test_idx)}")


def requantize_conv_suite(suite: ConvSuite) -> None:
    """Write the int8 model and suite.toml again from the suite's trained float model, without
    training (`train.py --int8-only`): the instances depend on the float model only."""
    data = suite.data()
    net = check_with_onnxruntime(suite.folder / suite.network_file, data[0][data[3]])
    write_int8_model(suite, net, data)
    (suite.folder / "suite.toml").write_text(conv_suite_text(suite), encoding="utf-8")


def train_conv_suite(suite: ConvSuite) -> TrainedSuite:
    """Train (numpy, `conv_training`), export in PyTorch's layout, check with onnxruntime, quantize
    (if asked) and write the instances and suite.toml; prints what the README reports."""
    data = suite.data()
    x, y, train_idx, test_idx = data
    trainer = ConvTrainer(suite.template, suite.seed)
    with threadpool_limits(limits=1):
        losses = trainer.fit(
            x[train_idx], y[train_idx], suite.epochs, suite.batch, suite.rate, suite.decay, suite.seed
        )
        print(f"epochs {suite.epochs}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        path = suite.folder / suite.network_file
        export_pytorch_layout(trainer.network(suite.template.name), path)
        net = check_with_onnxruntime(path, x[test_idx])
        if suite.int8:
            write_int8_model(suite, net, data)
        attack = lambda lo, hi, label, seed: image_attack(net, lo, hi, label, seed)
        built = build_instances(
            suite.folder, net, data, attack, suite.network_file, suite.n_images, suite.timeout_s
        )
    (suite.folder / "suite.toml").write_text(conv_suite_text(suite), encoding="utf-8")
    print(f"{len(built.instances)} instances")
    return built
