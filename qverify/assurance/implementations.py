"""A network in one implementation, run on real inputs: what the assurance commands compare.

The assurance commands (`qverify diff`, `impact`, `repair`) compare two implementations of one
network -- the float64 reference, IEEE float/double/half, fixed point `<k,l>`, or an int8 model --
on batches of inputs. `Implementation.run` takes *normalised* real inputs (what the network's core,
VNN-LIB and the generated C's replay `main` take), converts them as the C's replay does (fixed point:
rounded to words with the format's rounding and overflow mode; float: rounded to the type; int8:
onnxruntime's QuantizeLinear), runs the bit-exact simulator (vectorised) and returns the outputs as
real numbers (words * 2^-l, (code - zero point) * scale, or the float values), so both sides of a
pair are compared in the same units. `ImplementationPair` checks that the two sides fit together.

Labels: `real` (the float64 reference network, no rounding), `float`, `double`, `half`, `K.L`,
`int8` / `int8-x86` / `int8-tflite` (the model's own int8 quantization: the network must be an int8 model),
and `onnxruntime` (the ONNX file run by onnxruntime itself, not simulated: `qverify.assurance.runtime`;
no C, so only the commands that measure take it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
from threadpoolctl import threadpool_limits

from qverify.assurance.runtime import ONNXRUNTIME, OnnxRuntimeModel
from qverify.errors import InputError
from qverify.network import Network, evaluate_core
from qverify.quant import (
    FixedFormat,
    ImplementationOptions,
    QuantizedNetwork,
    parse_number_format,
    quantize_network,
    quantize_real,
    simulate,
)
from qverify.quant.simulate import SimulationResult, bytes_per_sample

REAL = "real"
CHUNK = 4096  # samples simulated at once, at most
Result = TypeVar("Result")
WORKERS = 2  # threads that simulate chunks at once (at most the process's cores)
# per thread: below this, one thread (small batches: the attack's probes, a GA's population)
PARALLEL_MIN_SAMPLES = 128
CHUNK_BYTES = 1 << 28  # and no more than the simulator holds in about this much memory (`bytes_per_sample`)


@dataclass(frozen=True, slots=True)
class ImplementationRun:
    """Outputs of a batch: real values (normalised units), the implementation's own outputs
    (words, codes or float values; the reals for `real`), and per-layer traces when asked."""

    outputs: np.ndarray  # float64 (batch, n_outputs)
    raw: np.ndarray
    overflowed: np.ndarray  # bool (batch,): a fixed-point overflow happened (always False elsewhere)
    simulation: SimulationResult | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Implementation:
    """One network in one number format (`qnet` None: the float64 reference network, or the model
    file in its own runtime when `runtime` is set)."""

    label: str
    network: Network
    qnet: QuantizedNetwork | None
    runtime: OnnxRuntimeModel | None = None

    @property
    def n_inputs(self) -> int:
        return self.network.n_inputs

    @property
    def n_outputs(self) -> int:
        return self.network.n_outputs

    def inputs(self, x_norm: np.ndarray) -> np.ndarray:
        """The implementation's inputs for normalised reals (batch, n_inputs)."""
        x = np.atleast_2d(np.asarray(x_norm, dtype=np.float64))
        if x.shape[1] != self.n_inputs:
            raise InputError(
                f"{self.label}: {x.shape[1]} input values per sample, the network takes {self.n_inputs}"
            )
        if not np.all(np.isfinite(x)):
            raise InputError(f"{self.label}: an input holds NaN or an infinite value")
        qnet = self.qnet
        if qnet is None:
            return x
        if qnet.is_int8:
            return qnet.input_quant.quantize(x)
        if qnet.is_fixed:
            words, _ = quantize_real(x, qnet.number)  # type: ignore[arg-type]
            return words
        return qnet.number.round(x)  # type: ignore[union-attr]

    def real_outputs(self, raw: np.ndarray) -> np.ndarray:
        """Outputs in real (normalised) units, float64."""
        qnet = self.qnet
        if qnet is None or qnet.is_float:
            return np.asarray(raw, dtype=np.float64)
        if qnet.is_int8:
            out = qnet.output_quant
            return (np.asarray(raw, dtype=np.int64) - out.zero_point) * out.scale
        return np.asarray(raw, dtype=np.float64) / qnet.number.scale  # type: ignore[union-attr]

    def run(self, x_norm: np.ndarray, trace: bool = False) -> ImplementationRun:
        """Run a batch of normalised inputs (in chunks); `trace` keeps every layer's values (one
        chunk at most: traces are for repair's activation spectra, on modest batches)."""
        inputs = self.inputs(x_norm)
        if self.runtime is not None:
            # one call per CHUNK samples: onnxruntime spreads each over the cores itself
            parts = [self.runtime.outputs(inputs[s : s + CHUNK]) for s in range(0, len(inputs), CHUNK)]
            outputs = np.concatenate(parts) if parts else np.zeros((0, self.n_outputs))
            return ImplementationRun(outputs, outputs, np.zeros(len(outputs), dtype=bool))
        if self.qnet is None:
            per_sample = 8 * (self.network.n_inputs + sum(layer.n_out for layer in self.network.layers))
            chunk = int(np.clip(CHUNK_BYTES // per_sample, 1, CHUNK))
            parts = in_chunks(lambda part: evaluate_core(self.network, part), inputs, chunk)
            outputs = np.concatenate(parts) if parts else evaluate_core(self.network, inputs)
            return ImplementationRun(outputs, outputs, np.zeros(len(outputs), dtype=bool))
        if trace:
            result = simulate(self.qnet, inputs, trace=True)
            raw = result.outputs
            return ImplementationRun(self.real_outputs(raw), raw, result.overflowed, result)
        results = simulate_in_chunks(self.qnet, inputs)
        raw = np.concatenate([result.outputs for result in results])
        overflowed = [result.overflowed for result in results]
        return ImplementationRun(self.real_outputs(raw), raw, np.concatenate(overflowed))

    def predict(self, x_norm: np.ndarray) -> np.ndarray:
        """Top-1 classes (argmax of the outputs; ties go to the first, as numpy's argmax)."""
        return np.argmax(self.run(x_norm).outputs, axis=1)


def simulate_in_chunks(qnet: QuantizedNetwork, inputs: np.ndarray) -> list[SimulationResult]:
    """`simulate` on a batch, chunk by chunk (`chunk_samples`, `in_chunks`)."""
    return in_chunks(lambda part: simulate(qnet, part), inputs, chunk_samples(qnet))


def in_chunks(run: Callable[[np.ndarray], Result], inputs: np.ndarray, chunk: int) -> list[Result]:
    """`run` on chunks of at most `chunk` samples, in parallel threads on the process's cores (up
    to WORKERS) when the batch is large enough to share: numpy releases the GIL in its array
    operations, so the element-wise work (requantization, gathers) that one BLAS call cannot spread
    runs on every core. BLAS runs one thread per chunk meanwhile."""
    workers = min(WORKERS, len(os.sched_getaffinity(0)), len(inputs) // PARALLEL_MIN_SAMPLES)
    if workers > 1:
        chunk = min(chunk, max(PARALLEL_MIN_SAMPLES, -(-len(inputs) // (2 * workers))))
    parts = [inputs[start : start + chunk] for start in range(0, len(inputs), chunk)]
    if workers <= 1 or len(parts) < 2:
        return [run(part) for part in parts]
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        return list(pool.map(run, parts))


def chunk_samples(qnet: QuantizedNetwork) -> int:
    """How many samples `Implementation.run` simulates at once: CHUNK, fewer for networks whose
    simulation holds much per sample (a CIFAR-10 ResNet's float layers: 56 MB each)."""
    return int(np.clip(CHUNK_BYTES // bytes_per_sample(qnet), 1, CHUNK))


def make_implementation(
    net: Network, label: str, base: ImplementationOptions | None = None
) -> Implementation:
    """`net` in the format `label` names (module docstring); `base` gives the other choices
    (rounding, overflow, accumulation, tables) for fixed point and float.

    :raises InputError: an unknown label, or `int8` for a network without int8 parameters.
    :raises RangeError: a constant that the format cannot hold under overflow mode detect.
    """
    if label == REAL:
        return Implementation(REAL, net, None)
    if label == ONNXRUNTIME:
        return Implementation(
            ONNXRUNTIME, net, None, OnnxRuntimeModel(Path(net.source), net.n_inputs, net.output_softmax)
        )
    base = base or ImplementationOptions()
    reference = base.number if isinstance(base.number, FixedFormat) else FixedFormat(16, 16)
    number = parse_number_format(label, reference.rounding, reference.overflow)
    return Implementation(label, net, quantize_network(net, replace(base, number=number)))


@dataclass(frozen=True, slots=True, eq=False)
class ImplementationPair:
    """A reference and a candidate implementation of one network (or of a float network and its
    quantized model), checked to take the same inputs and give the same number of outputs."""

    reference: Implementation
    candidate: Implementation

    def __post_init__(self) -> None:
        ref, cand = self.reference, self.candidate
        if ref.n_inputs != cand.n_inputs or ref.n_outputs != cand.n_outputs:
            raise InputError(
                f"the two implementations do not fit together: {ref.label} ({ref.network.name}) takes "
                f"{ref.n_inputs} inputs and gives {ref.n_outputs} outputs, {cand.label} "
                f"({cand.network.name}) {cand.n_inputs} and {cand.n_outputs}"
            )

    def run(self, x_norm: np.ndarray) -> tuple[ImplementationRun, ImplementationRun]:
        return self.reference.run(x_norm), self.candidate.run(x_norm)

    def describe(self) -> str:
        return f"{self.reference.label} ({self.reference.network.name}) vs {self.candidate.label} ({self.candidate.network.name})"


def normalised_inputs(net: Network, x_raw: np.ndarray) -> np.ndarray:
    """Raw inputs (a data set's units) to the network's normalised inputs (NNet normalisation)."""
    x = np.asarray(x_raw, dtype=np.float64)
    return net.input_norm.apply(x) if net.input_norm is not None else x
