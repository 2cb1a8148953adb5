"""`qverify info NET [--ranges]`: what a network is, and how many integer bits it needs;
`qverify info --tools`: which external tools (gcc, Frama-C, ESBMC, ...) qverify finds."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from qverify.errors import InputError, RangeError
from qverify.vocabulary import MAX_WORD_BITS

if TYPE_CHECKING:  # the network and the analyses: imported when the command runs, not for --help
    from qverify.network import Network
    from qverify.quant import IntBitsProposal


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "info", help="print a network's layers, normalisation and ranges, or the tools found (--tools)"
    )
    parser.add_argument("network", nargs="?", help="an .nnet or .onnx file")
    parser.add_argument(
        "--tools",
        action="store_true",
        help="list the external tools qverify finds (onnxruntime and which int8 kernel it runs here, gcc, "
        "frama-c, esbmc and which one, solvers, chromium)",
    )
    parser.add_argument(
        "--ranges",
        action="store_true",
        help="bound every neuron over the input domain and propose integer bits",
    )
    parser.add_argument(
        "--frac-bits",
        type=_frac_bits,
        default=16,
        metavar="L",
        help="fractional bits for the integer-bits proposal (default 16)",
    )
    parser.set_defaults(handler=run)


def _frac_bits(text: str) -> int:
    """argparse type of --frac-bits: 0 .. MAX_WORD_BITS - 1 (1000 used to be clamped silently to 30)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if not 0 <= value < MAX_WORD_BITS:
        raise argparse.ArgumentTypeError(
            f"{value}: expected 0..{MAX_WORD_BITS - 1} (words have {MAX_WORD_BITS} bits)"
        )
    return value


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _reads(net: Network, index: int) -> str:
    """What node `index` (0-based) reads, for a graph: ` <- input`, ` <- 2, 5` (1-based layers)."""
    if net.is_chain:
        return ""
    names = ["input" if p < 0 else str(p + 1) for p in net.wiring[index]]
    return f" <- {', '.join(names)}"


def _layer_line(index: int, layer, quant, reads: str = "") -> str:
    text = f"  layer {index}{reads}: {layer.describe()}, {layer.activation.value}"
    if hasattr(layer, "weights"):
        text += (
            f"  weights [{_fmt(layer.weights.min())}, {_fmt(layer.weights.max())}]  "
            f"biases [{_fmt(layer.bias.min())}, {_fmt(layer.bias.max())}]"
        )
    if quant is not None:
        from qverify.network.float_view import describe_implied

        text += f"\n      int8: output {quant.output.describe()}"
        joined = getattr(quant, "inputs", None)
        if joined is not None:
            text += f", inputs {'; '.join(q.describe() for q in joined)}"
            text += " (onnxruntime runs it unfused, in float32)" if quant.float_path else ""
        scales = getattr(quant, "weight_scales", None)
        if scales is not None:
            kind = "per channel" if scales.size > 1 else "per tensor"
            text += f", weight scales {kind} [{_fmt(scales.min())}, {_fmt(scales.max())}]"
            text += f", int8 weights [{int(quant.weights.min())}, {int(quant.weights.max())}]"
            text += f"\n      float view: {describe_implied(quant)}"
    return text


def describe_network(net: Network) -> list[str]:
    n_parameters = sum(
        layer.weights.size + layer.bias.size for layer in net.layers if hasattr(layer, "weights")
    )
    kinds = sorted({type(layer).__name__ for layer in net.layers})
    shape = "layers" if net.is_chain else "nodes of a graph (each reads the layers after <-)"
    lines = [
        f"network {net.name}  ({net.source})  sha256:{net.digest()}",
        (
            f"sizes {' -> '.join(map(str, net.sizes))}  ({len(net.layers)} {shape}: {', '.join(kinds)}; "
            f"{n_parameters} parameters)"
        ),
    ]
    lines.extend(f"note: {note}" for note in net.notes)
    if net.quantization is not None:
        lines.append(f"quantization: {net.quantization.describe()}")
    quants = net.quantization.layers if net.quantization is not None else (None,) * len(net.layers)
    for index, (layer, quant) in enumerate(zip(net.layers, quants), start=1):
        lines.append(_layer_line(index, layer, quant, _reads(net, index - 1)))
    norm = net.input_norm
    if norm is None:
        lines.append("input normalisation: none (inputs are used as given)")
    else:
        lines.append("input normalisation: x_norm = (clip(x, min, max) - mean) / range")
        for i in range(norm.size):
            lines.append(
                f"  x{i}: min {_fmt(norm.minimum[i])} max {_fmt(norm.maximum[i])} "
                f"mean {_fmt(norm.mean[i])} range {_fmt(norm.range[i])}"
            )
    if net.output_norm is not None:
        lines.append(
            f"output de-normalisation: y = y_norm * {_fmt(net.output_norm.range[0])} + "
            f"{_fmt(net.output_norm.mean[0])}"
        )
    return lines


def describe_ranges(net: Network, frac_bits: int) -> list[str]:
    from qverify.quant import propose_int_bits, real_bounds

    lo, hi = net.default_input_box()
    lines = [
        "input domain (normalised): " + " ".join(f"[{_fmt(a)}, {_fmt(b)}]" for a, b in zip(lo, hi)),
        "neuron bounds (interval bound propagation, sound for the real network):",
    ]
    for index, bounds in enumerate(real_bounds(net, lo, hi), start=1):
        lines.append(
            f"  layer {index}: pre-activation [{_fmt(bounds.pre_lo.min())}, "
            f"{_fmt(bounds.pre_hi.max())}]  post-activation [{_fmt(bounds.post_lo.min())}, "
            f"{_fmt(bounds.post_hi.max())}]"
        )
    try:
        proposal = propose_int_bits(net, lo, hi, frac_bits)
    except RangeError as error:
        lines.append(f"with l = {frac_bits}: {error}")
        proposal = _widest_fitting(net, lo, hi, frac_bits)
        if proposal is None:
            return lines
    lines.append(f"largest |value|: {_fmt(proposal.max_magnitude)} at {proposal.binding}")
    lines.append(f"integer bits needed by the real network: k = {proposal.real_int_bits}")
    lines.append(
        f"minimal integer bits with l = {proposal.frac_bits} (the implementation cannot overflow): "
        f"k = {proposal.int_bits}  -> format <{proposal.int_bits},{proposal.frac_bits}>"
    )
    return lines


def _widest_fitting(net: Network, lo, hi, frac_bits: int) -> IntBitsProposal | None:
    """The proposal with the most fractional bits below `frac_bits` that fits a 32-bit word."""
    from qverify.quant import propose_int_bits

    for fewer in range(frac_bits - 1, -1, -1):
        try:
            return propose_int_bits(net, lo, hi, fewer)
        except RangeError:
            continue
    return None


def run(args: argparse.Namespace) -> int:
    if args.tools:
        from qverify.backends.esbmc import esbmc_status
        from qverify.quant.ort_kernel import onnxruntime_status
        from qverify.tools import detect_tools, format_tools

        print("\n".join(format_tools(detect_tools(esbmc_status(), onnxruntime_status()))))
        if args.network is None:
            return 0
    if args.network is None:
        raise InputError("give a network (qverify info NET) or --tools")
    from qverify.io import load_network

    net = load_network(args.network)
    lines = describe_network(net)
    if args.ranges:
        lines += describe_ranges(net, args.frac_bits)
    print("\n".join(lines))
    return 0
