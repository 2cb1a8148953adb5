"""Which input value is which pixel: pairing two model files that lay out one image differently.

A PyTorch export takes its image NCHW; a TensorFlow Lite file (and a tf2onnx export of a Keras model)
NHWC. Each reader keeps the file's own input order (a VNN-LIB `X_i` is the file's i-th value) and
builds the IR's CHW image for the first spatial layer: directly when the file is NCHW, through a
`Permute` node when it is not (the TFLite reader for the file's NHWC tensor, the ONNX reader for a
tf2onnx `Transpose`). So the layout is read off the graph the file defined, never guessed from the
shapes: the nodes that read the network's input are spatial layers (they read a (C, H, W) image in
CHW order) or a `Permute` into such an image, whose order the file fixed.

Commands that run two files on the same inputs (`qverify diff`, `qverify impact`) give the
candidate the reference's order: `aligned_to_reference` puts one `Permute` node in front of the
candidate (a copy of codes for an int8 model, its input quantization per tensor), so the simulators,
the generated C and proof mode's harness all take the reference's inputs. Two layouts that cannot
be paired (different images, or one file's order unknown while its shape says another layout) are
an `InputError`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from qverify.errors import InputError
from qverify.network.joins import Permute
from qverify.network.model import NETWORK_INPUT, Network
from qverify.network.operators import operator_of
from qverify.network.qparams import AffineQuantization, JoinQuant

__all__ = ["InputImage", "aligned_to_reference", "input_image", "reference_order", "same_image_shape"]


@dataclass(frozen=True, slots=True, eq=False)
class InputImage:
    """The image a network's first spatial layers read: (C, H, W), and the input value each of its
    CHW positions takes (`order[i]`: CHW value i is input value order[i])."""

    shape: tuple[int, int, int]
    order: np.ndarray

    @property
    def is_chw(self) -> bool:
        return bool(np.array_equal(self.order, np.arange(self.order.size)))

    def describe(self) -> str:
        if self.is_chw:
            return "CHW ({}x{}x{})".format(*self.shape)
        channels, height, width = self.shape
        hwc = np.arange(self.order.size).reshape(height, width, channels).transpose(2, 0, 1).ravel()
        if np.array_equal(self.order, hwc):
            return f"HWC ({height}x{width}x{channels})"
        return "a permuted order of a {}x{}x{} image".format(*self.shape)


def input_image(net: Network) -> InputImage | None:
    """The image `net`'s input feeds, read off the nodes that read the input; None when they are
    not all spatial layers or permutations into one image (a dense layer first: no image order)."""
    found: InputImage | None = None
    for layer, producers in zip(net.layers, net.wiring):
        if NETWORK_INPUT not in producers:
            continue
        read = operator_of(layer).input_image(layer) if producers == (NETWORK_INPUT,) else None
        if read is None:
            return None
        image = InputImage(*read)
        if found is not None and (found.shape != image.shape or not np.array_equal(found.order, image.order)):
            return None
        found = image
    return found


def reference_order(reference: Network, candidate: Network) -> np.ndarray | None:
    """`order` with candidate input j = reference input order[j] (None: the same order).

    :raises InputError: the two files' layouts cannot be paired, saying what each file reads.
    """
    if reference.n_inputs != candidate.n_inputs:
        return None  # `ImplementationPair` reports the mismatch
    ref_image, cand_image = input_image(reference), input_image(candidate)
    if ref_image is not None and cand_image is not None:
        if ref_image.shape != cand_image.shape:
            raise InputError(
                f"cannot pair the inputs of {reference.name} and {candidate.name}: they read different "
                f"images ({ref_image.describe()} and {cand_image.describe()})"
            )
        if np.array_equal(ref_image.order, cand_image.order):
            return None
        order = np.empty(reference.n_inputs, dtype=np.int64)
        order[cand_image.order] = ref_image.order
        return order
    known, other = (ref_image, candidate) if ref_image is not None else (cand_image, reference)
    if known is None:  # neither reads an image: the files' shapes must agree
        if (
            reference.image_shape
            and candidate.image_shape
            and not same_image_shape(reference.image_shape, candidate.image_shape)
        ):
            raise InputError(
                f"cannot pair the inputs of {reference.name} {list(reference.image_shape)} and "
                f"{candidate.name} {list(candidate.image_shape)}: neither feeds its input to a "
                f"convolution or pool, so which value is which pixel cannot be read from the files"
            )
        return None
    if known.is_chw and (other.image_shape is None or same_image_shape(other.image_shape, known.shape)):
        return None
    raise InputError(
        f"cannot pair the inputs of {reference.name} and {candidate.name}: one reads its input as "
        f"{known.describe()}, the other (input shape {list(other.image_shape or (other.n_inputs,))}) feeds "
        f"it to no convolution or pool, so its layout cannot be read from its file"
    )


def same_image_shape(first: tuple[int, ...], second: tuple[int, ...]) -> bool:
    """One shape but for axes of size 1 ((1, 8, 8) and (8, 8) hold one image the same way)."""
    return tuple(v for v in first if v != 1) == tuple(v for v in second if v != 1)


def aligned_to_reference(reference: Network, candidate: Network) -> tuple[Network, str | None]:
    """`candidate` taking its inputs in `reference`'s order (a `Permute` node first when the files'
    layouts differ), and a note saying what was reconciled (None: nothing)."""
    if candidate is reference:
        return candidate, None
    order = reference_order(reference, candidate)
    if order is None:
        return candidate, None
    size = candidate.n_inputs
    permute = Permute(order, (size,), (size,))
    wiring = (
        (NETWORK_INPUT,),
        *(tuple(p + 1 if p != NETWORK_INPUT else 0 for p in w) for w in candidate.wiring),
    )
    quantization = candidate.quantization
    if quantization is not None:
        copy = JoinQuant((quantization.input,), quantization.input, "input order of the reference")
        quantization = AffineQuantization(
            quantization.input, (copy, *quantization.layers), quantization.origin
        )
    note = (
        f"{candidate.name} reads its input as {input_image(candidate).describe()}, {reference.name} as "  # type: ignore[union-attr]
        f"{input_image(reference).describe()}: the candidate takes the reference's order through a "  # type: ignore[union-attr]
        f"permutation of its inputs"
    )
    aligned = replace(
        candidate,
        layers=(permute, *candidate.layers),
        wiring=wiring,
        quantization=quantization,
        image_shape=reference.image_shape,
        notes=(*candidate.notes, note),
    )
    return aligned, note
