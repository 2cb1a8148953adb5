"""Static int8 quantization with onnxruntime's quantizer: calibration is onnxruntime's, not ours.

`quantize_with_onnxruntime` writes the network's *core* (normalised inputs to normalised outputs,
as VNN-LIB and the generated C see it) as a float32 ONNX model with Gemm layers (onnxruntime fuses
Gemm into QGemm; MatMul followed by Add would become two requantizing operators), runs
`onnxruntime.quantization.quantize_static` with MinMax calibration on the given samples, and reads
the quantized model back (`qverify.io`), so what qverify verifies is exactly the file it wrote.

`pair_saturation_risk` reports where onnxruntime's x86 kernels without AVX-VNNI can differ from the
ONNX semantics (`qverify.quant.x86`: uint8 x int8 products added in pairs into an int16 with
saturation); `--reduce-range` (7-bit weights) rules that out. qverify verifies either: the exact
int8 semantics (`int8`) or those kernels (`int8-x86`).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from qverify.errors import InputError, ToolFailedError, ToolMissingError
from qverify.network import CodeType, Network
from qverify.quant.x86 import saturation_risks
from qverify.vocabulary import QuantFormat


@dataclass(frozen=True, slots=True)
class QuantizeSettings:
    """The choices `qverify quantize` passes on to onnxruntime's static quantizer."""

    quant_format: QuantFormat = QuantFormat.QDQ
    per_channel: bool = False
    activations: CodeType = CodeType.INT8
    reduce_range: bool = False


def uniform_samples(net: Network, count: int, seed: int) -> np.ndarray:
    """`count` points drawn uniformly from the network's normalised input domain (deterministic)."""
    lo, hi = net.default_input_box()
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=(count, net.n_inputs))


def core_network(net: Network) -> Network:
    """The network on normalised inputs and outputs (what the verifier's properties talk about)."""
    return replace(net, input_norm=None, output_norm=None, quantization=None)


class _Samples:
    """onnxruntime's CalibrationDataReader protocol over an array of samples."""

    def __init__(self, name: str, samples: np.ndarray, shape: tuple[int, ...]) -> None:
        self.name = name
        self.rows = iter(samples.astype(np.float32).reshape((-1, *shape)))

    def get_next(self) -> dict | None:
        row = next(self.rows, None)
        return None if row is None else {self.name: row[None]}

    def rewind(self) -> None:  # onnxruntime >= 1.17 may call it; one pass is all MinMax needs
        pass


def quantize_with_onnxruntime(
    net: Network, calibration: np.ndarray, settings: QuantizeSettings, output: str | Path
) -> Network:
    """Quantize `net`'s core with onnxruntime and return the quantized model as read back from
    `output` (a `Network` with its `AffineQuantization`).

    `calibration`: samples (count, n_inputs) in normalised units.
    """
    try:
        from onnxruntime.quantization import QuantFormat as OrtFormat
        from onnxruntime.quantization import QuantType, quantize_static
    except ImportError:
        raise ToolMissingError("qverify quantize needs onnxruntime (pip install onnxruntime)") from None
    from qverify.io import read_onnx, write_onnx
    from qverify.io.onnx_writer import input_shape

    calibration = np.asarray(calibration, dtype=np.float64)
    if calibration.ndim != 2 or calibration.shape[1] != net.n_inputs or calibration.shape[0] == 0:
        raise InputError(
            f"calibration data of shape {calibration.shape}: expected (samples, {net.n_inputs}) for {net.name}"
        )
    core = core_network(net)
    shape = tuple(input_shape(core)[1:])
    output = Path(output)
    with tempfile.TemporaryDirectory(prefix="qverify-quantize-") as scratch:
        float_model = Path(scratch) / "float.onnx"
        write_onnx(core, float_model, float32=True, gemm=True)
        activation = QuantType.QInt8 if settings.activations is CodeType.INT8 else QuantType.QUInt8
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # onnxruntime's quantizer logs advice on the root logger
        try:
            quantize_static(
                str(float_model),
                str(output),
                _Samples("input", calibration, shape),
                quant_format=OrtFormat.QDQ
                if settings.quant_format is QuantFormat.QDQ
                else OrtFormat.QOperator,
                per_channel=settings.per_channel,
                reduce_range=settings.reduce_range,
                activation_type=activation,
                weight_type=QuantType.QInt8,
            )
        except (ValueError, RuntimeError, OSError) as error:
            raise ToolFailedError(f"onnxruntime's quantizer failed: {error}") from error
        finally:
            root.setLevel(level)
    quantized = read_onnx(output)
    return replace(quantized, name=output.stem, image_shape=net.image_shape)


def pair_saturation_risk(net: Network) -> list[str]:
    """Layers where onnxruntime's x86 uint8 x int8 kernels without AVX-VNNI can saturate a pair sum
    (`qverify.quant.x86`: QDQ int8 and every uint8 activation; QOperator int8 runs int8 x int8)."""
    if net.quantization is None:
        return []
    return [
        f"{risk}; --reduce-range avoids it" for risk in saturation_risks(net.layers, net.quantization.layers)
    ]
