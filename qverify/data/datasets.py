"""Data sets as the assurance commands use them: inputs in a network's raw units and, when known,
labels. One module, shared by `qverify quantize` (calibration) and the studies built on it.

Built in (no download; scikit-learn's bundled copy of the UCI digits):

    digits          8x8 images, pixel levels / 16 in [0, 1] (what the digits CNN takes)
    digits-raw      the same images in pixel levels 0..16 (what digits.nnet takes: it divides by 16)

each optionally restricted to the benchmarks' split with `:train` / `:test` (stratified 75/25,
seed 0: the split the digits networks were trained on); their `domain` (the range a pixel can take:
[0, 1] and [0, 16]) is known, which the perturbation studies clip to. Files: `.npz` with an array `x` (samples
first; any further dimensions are flattened in C order) and optionally `y` (integer labels), `scale` (a
positive number: the inputs are x * scale, so that images can be stored as uint8 pixel levels, e.g.
1/255 for networks that take [0, 1]; benchmarks/cifar10/data.py writes CIFAR-10 so) and `domain` (two
numbers lo < hi: the range an input can take, after scaling), or a `.npy` holding `x` alone.
Everything is checked before use: a clear `InputError` for an empty set, NaN or infinite values, a
label array of the wrong length or with negative or non-integer labels, a bad `scale` or `domain`.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.errors import InputError, ToolMissingError
from qverify.input_limits import check_tensor
from qverify.vocabulary import BUILT_IN

SPLITS = ("train", "test")
MAX_FILE_BYTES = 4 << 30
MAX_LABEL = 2**31 - 1
# what a file of each suffix starts with (numpy.save / numpy.savez): anything else is named as such
# rather than left to numpy, which reads unknown bytes as a pickle ("pickled data" for a text file)
MAGIC = {".npy": b"\x93NUMPY", ".npz": b"PK\x03\x04"}
DIGITS_TEST_SIZE = 0.25
DIGITS_SPLIT_SEED = 0


@dataclass(frozen=True, slots=True, eq=False)
class Dataset:
    """Inputs `x` (samples, features) as float64, optional labels `y` (int64), the image shape when
    the features are pixels, and the range an input can take when the source says (`domain`)."""

    name: str
    x: np.ndarray
    y: np.ndarray | None = None
    image_shape: tuple[int, ...] | None = None
    domain: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        x = np.asarray(self.x)
        if x.ndim == 0 or x.shape[0] == 0:
            raise InputError(f"data set {self.name}: it holds no samples")
        if x.dtype.kind not in "biuf":  # complex too: casting would drop the imaginary part silently
            raise InputError(f"data set {self.name}: inputs are not real numbers (dtype {x.dtype})")
        x = x.reshape(x.shape[0], -1).astype(np.float64)
        if not np.all(np.isfinite(x)):
            sample = int(np.argwhere(~np.isfinite(x))[0][0])
            raise InputError(f"data set {self.name}: sample {sample} holds NaN or an infinite value")
        object.__setattr__(self, "x", x)
        if self.y is not None:
            y = np.asarray(self.y)
            if y.ndim != 1 or y.shape[0] != x.shape[0]:
                raise InputError(
                    f"data set {self.name}: {y.size} labels (shape {y.shape}) for {x.shape[0]} samples"
                )
            if (
                y.dtype.kind not in "iuf"
                or y.dtype.kind == "f"
                and not np.all(np.isfinite(y) & (y == np.round(y)))
            ):
                raise InputError(f"data set {self.name}: labels must be integers")
            if np.any(y < 0):
                raise InputError(f"data set {self.name}: labels must be >= 0 (found {y.min()})")
            if np.any(y > MAX_LABEL):  # checked before the cast: uint64 and float labels would wrap
                raise InputError(
                    f"data set {self.name}: label {y.max()} is not a class index (at most {MAX_LABEL})"
                )
            object.__setattr__(self, "y", y.astype(np.int64))

    @property
    def size(self) -> int:
        return int(self.x.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.x.shape[1])

    def subset(self, count: int, seed: int) -> Dataset:
        """At most `count` samples: a seeded random choice, kept in the original order (the same
        seed gives the same choice, so calibrations and studies on a subset are reproducible)."""
        if count >= self.size:
            return self
        chosen = np.sort(np.random.default_rng(seed).choice(self.size, count, replace=False))
        y = None if self.y is None else self.y[chosen]
        return Dataset(self.name, self.x[chosen], y, self.image_shape, self.domain)

    def check_inputs(self, n_inputs: int, what: str = "the network") -> None:
        if self.n_features != n_inputs:
            raise InputError(
                f"data set {self.name}: {self.n_features} values per sample, {what} takes {n_inputs}"
            )

    def check_labels(self, n_classes: int, what: str = "the network") -> None:
        if self.y is None:
            raise InputError(f"data set {self.name} has no labels (an .npz with an array 'y' is needed)")
        if int(self.y.max()) >= n_classes:
            raise InputError(
                f"data set {self.name}: label {int(self.y.max())} out of range for {what} "
                f"({n_classes} outputs: labels 0..{n_classes - 1})"
            )


def _digits(scaled: bool, split: str | None) -> Dataset:
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise ToolMissingError(
            "the built-in digits data needs scikit-learn (pip install scikit-learn)"
        ) from None
    digits = load_digits()
    x, y = digits.data.astype(np.float64), digits.target.astype(np.int64)
    if split is not None:
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=DIGITS_TEST_SIZE, random_state=DIGITS_SPLIT_SEED, stratify=y
        )
        x, y = (x_train, y_train) if split == "train" else (x_test, y_test)
    name = ("digits" if scaled else "digits-raw") + (f":{split}" if split else "")
    return Dataset(name, x / 16.0 if scaled else x, y, (8, 8), (0.0, 1.0) if scaled else (0.0, 16.0))


def _from_file(path: Path) -> Dataset:
    if not path.is_file():
        raise InputError(f"{path}: no such data file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InputError(f"{path}: larger than {MAX_FILE_BYTES >> 30} GiB")
    suffix = path.suffix.lower()
    try:
        with path.open("rb") as handle:
            start = handle.read(len(MAGIC[suffix]))
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror}") from None
    if start != MAGIC[suffix]:
        kind = (
            "an .npy array (numpy.save)"
            if suffix == ".npy"
            else "an .npz archive (numpy.savez: a zip of arrays)"
        )
        raise InputError(f"{path}: not {kind}; it starts with {start!r}")
    if suffix == ".npz":
        _check_members(path)
    try:
        if path.suffix.lower() == ".npy":
            return Dataset(path.name, np.load(path, allow_pickle=False))
        with np.load(path, allow_pickle=False) as archive:
            if "x" not in archive.files:
                raise InputError(f"{path}: no array 'x' (found: {', '.join(archive.files) or 'none'})")
            x = archive["x"]
            y = archive["y"] if "y" in archive.files else None
            scale = archive["scale"] if "scale" in archive.files else None
            domain = archive["domain"] if "domain" in archive.files else None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise InputError(f"{path}: not a readable .npz/.npy file: {error}") from None
    image_shape = tuple(int(d) for d in x.shape[1:]) if x.ndim >= 3 else None
    if scale is not None:
        factor = _scale_of(path, scale)
        if x.dtype.kind in "biuf":  # any other dtype: Dataset names it
            x = x.astype(np.float64) * factor
    return Dataset(path.name, x, y, image_shape, None if domain is None else _domain_of(path, domain))


def _scale_of(path: Path, scale: np.ndarray) -> float:
    if (
        scale.size != 1
        or scale.dtype.kind not in "iuf"
        or not (np.isfinite(scale).all() and scale.item() > 0)
    ):
        raise InputError(
            f"{path}: 'scale' must be one positive finite number (found {scale.reshape(-1)[:3]})"
        )
    return float(scale.item())


def _domain_of(path: Path, domain: np.ndarray) -> tuple[float, float]:
    values = domain.reshape(-1)
    if (
        values.size != 2
        or values.dtype.kind not in "iuf"
        or not np.isfinite(values).all()
        or values[0] >= values[1]
    ):
        raise InputError(f"{path}: 'domain' must be two finite numbers lo < hi (found {values[:3]})")
    return float(values[0]), float(values[1])


def _check_members(path: Path) -> None:
    """The arrays of an .npz against the tensor-size limit, from their headers: a compressed archive
    of a few kilobytes can hold a zero array of any size, which numpy would allocate whole."""
    headers = []
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                with archive.open(name) as member:
                    version = np.lib.format.read_magic(member)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read(member)
                headers.append((name.removesuffix(".npy"), shape, dtype.itemsize))
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise InputError(f"{path}: not a readable .npz archive: {error}") from None
    for name, shape, itemsize in headers:
        check_tensor(shape, itemsize, f"{path}: array {name}")


def load_dataset(spec: str) -> Dataset:
    """A built-in set (`digits`, `digits-raw`, optionally `:train`/`:test`) or an `.npz`/`.npy` file."""
    name, _, split = spec.partition(":")
    if name in BUILT_IN:
        if split and split not in SPLITS:
            raise InputError(f"data set {spec}: unknown split '{split}' (train or test)")
        return _digits(name == "digits", split or None)
    path = Path(spec)
    if path.suffix.lower() not in (".npz", ".npy"):
        raise InputError(
            f"unknown data set '{spec}': give an .npz (x, y) or .npy file, or one of {', '.join(BUILT_IN)}"
        )
    return _from_file(path)
