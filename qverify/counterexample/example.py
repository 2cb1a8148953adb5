"""Adversarial examples: a confirmed counterexample, in every unit a user may want to read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # building an example needs them; reading one (`qverify show`) does not
    import numpy as np

    from qverify.codegen import CompiledNetwork
    from qverify.properties import Property
    from qverify.quant import QuantizedNetwork


@dataclass(frozen=True, slots=True)
class AdversarialExample:
    """An input that violates the property in the compiled C (replayed), with its context.

    `inputs_word` are the nondet values (integer words for fixed point, float values for float);
    `inputs_real` the normalised inputs they mean; `inputs_raw` the network's raw units (when the
    network normalises its inputs). `quantization_induced` is True when the float (real-valued)
    network does NOT violate the property at the same input: the violation is due to the
    implementation's arithmetic.
    """

    inputs_word: tuple[int | float, ...]
    inputs_real: tuple[float, ...]
    inputs_raw: tuple[float, ...] | None
    outputs_c: tuple[float, ...]  # the compiled C's outputs (normalised, real values)
    outputs_c_word: tuple[int | float, ...]
    outputs_float: tuple[float, ...]  # the float64 reference network at inputs_real
    violated: str  # the violated assertion (clause text or overflow)
    float_violates: bool
    label: int | None = None
    target: int | None = None
    center: tuple[float, ...] | None = None  # normalised, for robustness properties
    center_raw: tuple[float, ...] | None = None
    image_shape: tuple[int, ...] | None = None
    raw_range: tuple[float, float] | None = None  # the network's raw input domain (pixel levels), if finite

    @property
    def quantization_induced(self) -> bool:
        return not self.float_violates

    def to_json(self) -> dict:
        return {
            "inputs_word": list(self.inputs_word),
            "inputs_real": list(self.inputs_real),
            "inputs_raw": list(self.inputs_raw) if self.inputs_raw is not None else None,
            "outputs_c": list(self.outputs_c),
            "outputs_c_word": list(self.outputs_c_word),
            "outputs_float": list(self.outputs_float),
            "violated": self.violated,
            "float_violates": self.float_violates,
            "quantization_induced": self.quantization_induced,
            "label": self.label,
            "target": self.target,
            "center": list(self.center) if self.center is not None else None,
            "center_raw": list(self.center_raw) if self.center_raw is not None else None,
            "image_shape": list(self.image_shape) if self.image_shape is not None else None,
            "raw_range": list(self.raw_range) if self.raw_range is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict) -> AdversarialExample:
        def optional_tuple(key: str):
            return tuple(data[key]) if data.get(key) is not None else None

        return cls(
            inputs_word=tuple(data["inputs_word"]),
            inputs_real=tuple(data["inputs_real"]),
            inputs_raw=optional_tuple("inputs_raw"),
            outputs_c=tuple(data["outputs_c"]),
            outputs_c_word=tuple(data["outputs_c_word"]),
            outputs_float=tuple(data["outputs_float"]),
            violated=data["violated"],
            float_violates=bool(data["float_violates"]),
            label=data.get("label"),
            target=data.get("target"),
            center=optional_tuple("center"),
            center_raw=optional_tuple("center_raw"),
            image_shape=optional_tuple("image_shape"),
            raw_range=optional_tuple("raw_range"),
        )


def _representative_inputs(qnet: QuantizedNetwork, prop: Property, x: np.ndarray) -> np.ndarray:
    """Normalised reals the integer inputs stand for. An int8 code stands for every real that
    quantizes to it: take its dequantized value, moved into the property's box (the box's ends
    quantize to its extreme codes), so the float reference is evaluated inside the region."""
    import numpy as np

    reals = qnet.input_reals(x)
    if not qnet.is_int8:
        return reals
    for box in prop.boxes:
        lo, hi = box.lo_array(), box.hi_array()
        clipped = np.clip(reals, lo, hi)
        if np.array_equal(qnet.input_quant.quantize(clipped), x):
            return clipped
    return reals


def build_example(
    qnet: QuantizedNetwork,
    prop: Property,
    x: np.ndarray,
    violated: str,
    workdir: Path,
    image_shape: tuple[int, ...] | None = None,
    compiled: CompiledNetwork | None = None,
) -> AdversarialExample:
    """Run the compiled network and the float reference on a confirmed input `x` (words or values).

    `compiled`: the network's replay program when already compiled (by default: rendered and
    compiled in `workdir`)."""
    import numpy as np

    from qverify.codegen import CompiledNetwork, render_network
    from qverify.errors import InternalError
    from qverify.network import evaluate_core
    from qverify.quant import simulate

    if compiled is None:
        compiled = CompiledNetwork(render_network(qnet), workdir / "network_replay", qnet.is_integer)
    run = compiled.run(x[None, :], raw=True)
    simulated = simulate(qnet, x[None, :]).outputs[0]
    if not run.overflowed[0] and not np.array_equal(run.outputs[0], simulated):
        raise InternalError(
            f"compiled network and simulator disagree at {x.tolist()}: {run.outputs[0]} vs {simulated}"
        )
    if qnet.is_integer:
        real_inputs = _representative_inputs(qnet, prop, x)
        outputs_word = tuple(int(v) for v in run.outputs[0])
        outputs_real = tuple(float(v) for v in qnet.output_reals(run.outputs[0]))
        inputs_word = tuple(int(v) for v in x)
    else:
        real_inputs = x.astype(np.float64)
        outputs_word = tuple(float(v) for v in run.outputs[0])
        outputs_real = outputs_word
        inputs_word = tuple(float(v) for v in x)
    reference = evaluate_core(qnet.source, real_inputs)
    norm = qnet.source.input_norm
    robust = prop.robustness
    raw_range = None
    if norm is not None and np.all(np.isfinite(norm.minimum)) and np.all(np.isfinite(norm.maximum)):
        raw_range = (float(norm.minimum.min()), float(norm.maximum.max()))
    center_raw = None
    if robust is not None and norm is not None:
        center_raw = tuple(float(v) for v in norm.to_raw(np.array(robust.center)))
    return AdversarialExample(
        inputs_word=inputs_word,
        inputs_real=tuple(float(v) for v in real_inputs),
        inputs_raw=tuple(float(v) for v in norm.to_raw(real_inputs)) if norm is not None else None,
        outputs_c=outputs_real,
        outputs_c_word=outputs_word,
        outputs_float=tuple(float(v) for v in reference),
        violated=violated,
        float_violates=bool(prop.unsafe.violated_clause(reference)[0] >= 0),
        label=robust.label if robust else None,
        target=robust.target if robust else None,
        center=tuple(robust.center) if robust else None,
        center_raw=center_raw,
        image_shape=image_shape,
        raw_range=raw_range,
    )
