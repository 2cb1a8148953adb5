"""What the assurance commands (`impact`, `diff`, `repair`) share on their command lines: model files
loaded once, an implementation from a format label with a hint for int8, and LO,HI options."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

from qverify.cli.report import say_kernel
from qverify.errors import InputError

if TYPE_CHECKING:  # the assurance commands' parsers import this module: the rest when they run
    from qverify.assurance import Implementation
    from qverify.network import Network


def pair_of_floats(text: str, option: str) -> tuple[float, float]:
    """`LO,HI` of an option such as --domain, or a clear error naming the option."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise InputError(f"{option} '{text}': expected LO,HI (two numbers)") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise InputError(f"{option} '{text}': expected LO,HI (two finite numbers)")
    return low, high


class ModelFiles:
    """Model files loaded once each (a reference and its candidates often name the same file)."""

    def __init__(self) -> None:
        self.loaded: dict[str, Network] = {}

    def __call__(self, path: str) -> Network:
        from qverify.io import load_network

        if path not in self.loaded:
            self.loaded[path] = load_network(path)
        return self.loaded[path]


def implementation_of(net: Network, label: str) -> Implementation:
    """The network in the format `label`; an int8 label on a float model says how to name the int8 one."""
    from qverify.assurance import make_implementation
    from qverify.quant import Int8Format, named_format

    try:
        implementation = make_implementation(net, label)
    except InputError as error:
        if net.quantization is None and isinstance(named_format(label), Int8Format):
            raise InputError(f"{error} (or name the int8 model: --candidate {label}=MODEL.onnx)") from None
        raise
    if implementation.qnet is not None:
        say_kernel(net, implementation.qnet.options.number)
    return implementation


def paired_implementation(reference: Network, model: Network, label: str) -> Implementation:
    """`model` in the format `label`, taking its inputs in the order of `reference` (the reference's
    file): a TFLite file's NHWC input beside a PyTorch export's NCHW one is reconciled through the
    permutation both files define (`qverify.network.input_layout`), with a note; layouts that cannot
    be paired are an `error:` line."""
    from qverify.network.input_layout import aligned_to_reference

    aligned, note = aligned_to_reference(reference, model)
    if note is not None:
        print(f"note: {note}", file=sys.stderr)
    return implementation_of(aligned, label)


def domain_of(text: str) -> tuple[float, float]:
    """`--domain LO,HI`: two finite numbers, LO below HI."""
    low, high = pair_of_floats(text, "--domain")
    if not low < high:
        raise InputError(f"--domain '{text}': LO must be below HI")
    return low, high
