"""One graph's nodes put in the order of another's: the float model and its quantized export.

Two exporters may list the nodes of one graph in different topological orders (onnxruntime's
quantizer writes a ResNet block's 1x1 shortcut convolution before the block's second convolution,
PyTorch after it). Commands that pair a float network with its quantized model node by node (repair's
layers, spectra and weights) first put the quantized model's nodes in the float network's order.
"""

from __future__ import annotations

import dataclasses

from qverify.errors import InputError
from qverify.network.model import NETWORK_INPUT, Network
from qverify.network.qparams import AffineQuantization


def _signature(layer) -> tuple:
    return (type(layer).__name__, layer.n_in, layer.n_out)


def align_nodes(net: Network, reference: Network) -> Network:
    """`net` with its nodes reordered to correspond one to one with `reference`'s: the same kind
    and sizes, reading the corresponding producers in the same order. Nodes that could correspond
    to several (two equal convolutions of one tensor) are taken in `net`'s own order.

    :raises InputError: the two graphs differ (no such correspondence), naming both node lists.
    """
    if (
        len(net.layers) == len(reference.layers)
        and net.wiring == reference.wiring
        and all(_signature(a) == _signature(b) for a, b in zip(net.layers, reference.layers))
    ):
        return net
    to_net: dict[int, int] = {NETWORK_INPUT: NETWORK_INPUT}
    taken: set[int] = set()
    for k, layer in enumerate(reference.layers):
        producers = tuple(to_net.get(p, -2) for p in reference.wiring[k])
        match = next(
            (
                j
                for j, candidate in enumerate(net.layers)
                if j not in taken
                and _signature(candidate) == _signature(layer)
                and net.wiring[j] == producers
            ),
            None,
        )
        if match is None or len(net.layers) != len(reference.layers):
            ours = [f"{kind} {n_in}->{n_out}" for kind, n_in, n_out in map(_signature, reference.layers)]
            theirs = [f"{kind} {n_in}->{n_out}" for kind, n_in, n_out in map(_signature, net.layers)]
            raise InputError(
                f"the float network {reference.name} and the quantized model {net.name} are different "
                f"graphs: {ours} vs {theirs}"
            )
        to_net[k] = match
        taken.add(match)
    order = [to_net[k] for k in range(len(reference.layers))]
    to_reference = {j: k for k, j in enumerate(order)} | {NETWORK_INPUT: NETWORK_INPUT}
    wiring = tuple(tuple(to_reference[p] for p in net.wiring[j]) for j in order)
    quantization = net.quantization
    if quantization is not None:
        quantization = AffineQuantization(
            quantization.input, tuple(quantization.layers[j] for j in order), quantization.origin
        )
    return dataclasses.replace(
        net, layers=tuple(net.layers[j] for j in order), wiring=wiring, quantization=quantization
    )
