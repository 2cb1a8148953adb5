"""Counterexample replays compile at REPLAY_OPTIMISE (-O0), at once, once per harness: the C still
equals the simulator bit for bit, in every number format (the oracles elsewhere compile at -O1)."""

from __future__ import annotations

import itertools

import numpy as np

from qverify.codegen import REPLAY_OPTIMISE, CompiledNetwork, compile_replays, render_network
from qverify.network import Activation, Dense, Network
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Layout,
    LutDesign,
    Overflow,
    Rounding,
    quantize_network,
    simulate,
)

N_SAMPLES = 400


def _network(seed: int, hidden: Activation) -> Network:
    rng = np.random.default_rng(seed)
    sizes = (4, 7, 5, 3)
    return Network(
        tuple(
            Dense(
                rng.uniform(-3, 3, (n_out, n_in)),
                rng.uniform(-2, 2, n_out),
                hidden if index < len(sizes) - 2 else Activation.IDENTITY,
            )
            for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes))
        ),
        name=f"optimise-{hidden.value}",
    )


IMPLEMENTATIONS = [
    ImplementationOptions(FixedFormat(4, 4, Rounding.NEAREST, Overflow.WRAP)),
    ImplementationOptions(FixedFormat(4, 4, Rounding.FLOOR, Overflow.SATURATE), layout=Layout.BALANCED),
    ImplementationOptions(FixedFormat(6, 10, Rounding.NEAREST, Overflow.DETECT), Accumulation.WIDE),
    ImplementationOptions(FixedFormat(16, 16), lut=LutDesign(resolution=2)),
    ImplementationOptions(FloatFormat(FloatKind.FLOAT), lut=LutDesign(resolution=3)),
    ImplementationOptions(FloatFormat(FloatKind.DOUBLE), layout=Layout.BALANCED),
    ImplementationOptions(FloatFormat(FloatKind.HALF)),
]


def _inputs(qnet, rng: np.random.Generator) -> np.ndarray:
    if qnet.is_fixed:
        fmt = qnet.number
        return np.vstack(
            [
                rng.integers(fmt.min_q, fmt.max_q + 1, size=(N_SAMPLES // 2, 4)),
                rng.integers(-2 * fmt.scale, 2 * fmt.scale + 1, size=(N_SAMPLES // 2, 4)).clip(
                    fmt.min_q, fmt.max_q
                ),
            ]
        )
    return qnet.number.round(rng.uniform(-3, 3, size=(N_SAMPLES, 4))).astype(np.float64)


def test_replay_optimisation_keeps_every_format_bit_exact(tmp_path):
    rng = np.random.default_rng(16)
    qnets = [
        quantize_network(_network(index, activation), options)
        for index, (options, activation) in enumerate(
            itertools.product(IMPLEMENTATIONS, (Activation.RELU, Activation.SIGMOID))
        )
    ]
    sources = [(render_network(qnet).write(tmp_path / f"n{index}"), None) for index, qnet in enumerate(qnets)]
    executables = compile_replays(sources, REPLAY_OPTIMISE)  # all at once
    for qnet, executable in zip(qnets, executables, strict=True):
        x = _inputs(qnet, rng)
        run = CompiledNetwork.from_executable(executable, qnet.is_fixed).run(x)
        expected = simulate(qnet, x)
        assert np.array_equal(run.overflowed, expected.detected), qnet.options
        ok = ~expected.detected
        assert np.array_equal(run.outputs[ok], expected.outputs[ok]), qnet.options


def test_a_harness_is_compiled_once_per_content(tmp_path):
    qnet = quantize_network(_network(3, Activation.RELU), ImplementationOptions(FixedFormat(8, 8)))
    source = render_network(qnet).write(tmp_path)
    (first,) = compile_replays([(source, tmp_path / "replay")], REPLAY_OPTIMISE)
    built = first.stat().st_mtime_ns
    (again,) = compile_replays([(source, tmp_path / "replay")], REPLAY_OPTIMISE)
    assert again == first and again.stat().st_mtime_ns == built  # not compiled again
    other = quantize_network(_network(4, Activation.RELU), ImplementationOptions(FixedFormat(8, 8)))
    render_network(other).write(tmp_path)  # the same file, new content: compiled again
    (changed,) = compile_replays([(source, tmp_path / "replay")], REPLAY_OPTIMISE)
    x = np.array([[100, -200, 300, -400]])
    assert np.array_equal(
        CompiledNetwork.from_executable(changed, True).run(x).outputs, simulate(other, x).outputs
    )


def test_the_same_content_in_another_folder_is_copied_not_compiled(tmp_path):
    """A suite writes the network's replay program anew in each task's folder: compiled once."""
    qnet = quantize_network(_network(3, Activation.RELU), ImplementationOptions(FixedFormat(8, 8)))
    (first,) = compile_replays([(render_network(qnet).write(tmp_path / "a"), None)], REPLAY_OPTIMISE)
    (second,) = compile_replays([(render_network(qnet).write(tmp_path / "b"), None)], REPLAY_OPTIMISE)
    assert second.parent == tmp_path / "b"
    assert second.stat().st_mtime_ns == first.stat().st_mtime_ns  # a copy (gcc would write anew)
    x = np.array([[100, -200, 300, -400]])
    assert np.array_equal(
        CompiledNetwork.from_executable(second, True).run(x).outputs, simulate(qnet, x).outputs
    )
