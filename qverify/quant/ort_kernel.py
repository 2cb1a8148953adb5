"""Which u8 x s8 kernel this machine's onnxruntime runs: the probe behind `--format int8-ort`.

onnxruntime's MLAS picks its uint8 x int8 GEMM kernel from the CPU it runs on: with AVX-VNNI or
AVX-512 VNNI (and on ARM) the products are summed exactly in int32, the ONNX semantics (`int8`);
with AVX2 alone (Haswell to Comet Lake, Zen 1-3, and AVX-512 CPUs without VNNI) `vpmaddubsw` adds
neighbouring products into an int16 *with saturation* (`int8-x86`, `qverify.quant.x86`). Which one
a machine runs is a property of that machine's onnxruntime, not of the model, so it is asked of
onnxruntime itself: one MatMulInteger node (uint8 activations [1, 4] x int8 weights [4, 4], built in
memory) on all-255 activations, whose weights make the first two columns' pair sums leave int16 and
the last two stay inside it. Its int32 outputs are the exact sums on a VNNI machine and the x86
model's (`PairedSums`) on an AVX2 one; anything else is a kernel qverify does not know, refused.

The CPU's flags (/proc/cpuinfo) are not the answer: onnxruntime reads CPUID, and under an emulator
(`qemu-x86_64 -cpu Haswell`, how the tests check the AVX2 side on a VNNI machine) /proc/cpuinfo shows
the host's flags while onnxruntime runs the emulated CPU's kernels. The probe is cached per process
(its cost is onnxruntime's import, ~0.03 s of CPU beside onnx's and numpy's, and a 10 ms session),
and not on disk: no key that is cheap to read (the flags, the onnxruntime version) tells an emulated
CPU from its host.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from qverify.errors import QverifyError, ToolMissingError, UnsupportedError
from qverify.network import Network
from qverify.quant.affine import Int8Format, Int8Kernel, RequantMode
from qverify.quant.x86 import PairedSums, saturation_risks
from qverify.tools import ToolStatus

ORT_LABEL = "int8-ort"  # the format label the probe resolves (also `int8-onnxruntime`)
_OPSET = 13
# the probe's int8 weights (K = 4 rows, one column per case) and uint8 activations: column 0 pairs
# 255 * 127 twice (64,770 > 32,767), column 1 255 * -128 twice, columns 2 and 3 stay within int16
PROBE_WEIGHTS = np.array(
    [[127, -128, 127, 64], [127, -128, -128, 64], [0, 0, 127, 64], [0, 0, -128, 64]], dtype=np.int8
)
PROBE_ACTIVATIONS = np.full((1, 4), 255, dtype=np.uint8)


@dataclass(frozen=True, slots=True)
class KernelProbe:
    """What the probe found: the kernel (None: onnxruntime's outputs match neither model), the
    onnxruntime version, its outputs, and the two models' expectations."""

    kernel: Int8Kernel | None
    onnxruntime: str
    outputs: tuple[int, ...]
    exact: tuple[int, ...]
    saturating: tuple[int, ...]

    def resolved(self) -> Int8Kernel:
        """The kernel `int8-ort` resolves to.

        :raises UnsupportedError: onnxruntime's outputs match neither model.
        """
        if self.kernel is None:
            raise UnsupportedError(
                f"onnxruntime {self.onnxruntime} on this machine runs a uint8 x int8 kernel qverify does not "
                f"model: the probe gave {list(self.outputs)}, neither the exact sums {list(self.exact)} (int8) "
                f"nor int16 pair saturation {list(self.saturating)} (int8-x86); give --format int8 or int8-x86"
            )
        return self.kernel

    @property
    def label(self) -> str:
        """The format `int8-ort` resolves to: `int8` or `int8-x86` (UnsupportedError: neither)."""
        return "int8-x86" if self.resolved() is Int8Kernel.X86 else "int8"

    def describe(self) -> str:
        """One line for `qverify info --tools` and the notes: what this machine's onnxruntime computes."""
        if self.kernel is Int8Kernel.X86:
            what = "u8 x s8 products summed in int16 pairs with saturation (x86 without AVX-VNNI)"
        elif self.kernel is Int8Kernel.EXACT:
            what = "u8 x s8 products summed exactly in int32 (AVX-VNNI, AVX-512 VNNI or ARM)"
        else:
            what = f"an unknown u8 x s8 kernel (probe {list(self.outputs)})"
        resolved = f"{ORT_LABEL} = {self.label}" if self.kernel is not None else f"{ORT_LABEL} refused"
        return f"{what}; {resolved}"


def probe_model_bytes() -> bytes:
    """The probe: one MatMulInteger node, activations `a` (uint8 [1, 4]) as the input, the weights an
    initializer (as in quantized models: onnxruntime packs them for its kernel)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
        "qverify_kernel_probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, list(PROBE_ACTIVATIONS.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, PROBE_WEIGHTS.shape[1]])],
        [numpy_helper.from_array(PROBE_WEIGHTS, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = min(model.ir_version, 8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def classify(outputs: np.ndarray, version: str) -> KernelProbe:
    """The kernel whose model gives `outputs` for the probe's activations and weights."""
    weights = PROBE_WEIGHTS.astype(np.int64).T  # (n_out, n_in), as qverify's layers hold them
    codes = PROBE_ACTIVATIONS.astype(np.int64)
    exact = tuple(int(v) for v in (codes @ weights.T)[0])
    saturating = tuple(
        int(v) for v in PairedSums(0, np.zeros(len(weights), np.int64)).accumulate(weights, codes)[0]
    )
    got = tuple(int(v) for v in np.asarray(outputs).reshape(-1))
    kernel = {exact: Int8Kernel.EXACT, saturating: Int8Kernel.X86}.get(got)
    return KernelProbe(kernel, version, got, exact, saturating)


@functools.cache
def probe_kernel() -> KernelProbe:
    """Run the probe in this process's onnxruntime (once per process).

    :raises ToolMissingError: onnxruntime is not installed.
    """
    try:
        import onnxruntime
    except ImportError:
        raise ToolMissingError(
            f"--format {ORT_LABEL} asks which kernel this machine's onnxruntime runs, and onnxruntime is not "
            "installed (pip install onnxruntime, or `make setup`); or give --format int8 / int8-x86"
        ) from None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(probe_model_bytes(), options, providers=["CPUExecutionProvider"])
    (outputs,) = session.run(None, {"a": PROBE_ACTIVATIONS})
    return classify(outputs, onnxruntime.__version__)


def ort_kernel() -> Int8Kernel:
    """The kernel `int8-ort` resolves to on this machine (ToolMissingError, UnsupportedError)."""
    return probe_kernel().resolved()


def onnxruntime_status() -> ToolStatus:
    """`qverify info --tools`'s line: onnxruntime, its version and the kernel the probe finds."""
    purpose = (
        "int8 models: --format int8-ort, `qverify quantize`, sigmoid tables; the tests' reference (required "
        "for those, `make setup` installs it)"
    )
    try:
        probe = probe_kernel()
    except QverifyError:
        return ToolStatus("onnxruntime", False, "", "", purpose)
    return ToolStatus(
        "onnxruntime", True, "python package", f"{probe.onnxruntime}: {probe.describe()}", purpose
    )


def _here() -> KernelProbe | None:
    """The probe, or None where it cannot run (no onnxruntime, an unknown kernel)."""
    try:
        probe = probe_kernel()
        probe.resolved()
    except QverifyError:
        return None
    return probe


def kernel_statement(net: Network, number: object) -> tuple[str, str] | None:
    """What a command says about onnxruntime's u8 x s8 kernels for this int8 model in this format, as
    ("warning" | "note", text), or None when there is nothing to say:

    - `int8-ort`: a note naming what it resolved to (and, resolved to `int8`, which layers the AVX2
      kernels would compute otherwise);
    - `int8` (the exact semantics, the model's default) when some pair sum can saturate: a warning
      that onnxruntime on x86 without AVX-VNNI computes otherwise, and whether this machine's does
      (the probe: one line, `--format int8-ort` to verify what it computes);
    - `int8-x86` when no pair sum can saturate: a note that it is the same function as `int8`.
    """
    if not isinstance(number, Int8Format) or net.quantization is None:
        return None
    own = net.quantization.model_format
    if (
        own != "int8" and number.requant is RequantMode.ONNXRUNTIME
    ):  # a TFLite model in onnxruntime's arithmetic
        text = (
            f"{net.name} is a TFLite model: {number.label} computes it in onnxruntime's arithmetic, not in what "
            f"it means when run ({own}: TFLite's reference kernels; int8-xnnpack: the LiteRT interpreter's "
            "default delegate)"
        )
        return ("note", text)
    if number.requant is not RequantMode.ONNXRUNTIME or own != "int8":
        return None
    risks = saturation_risks(net.layers, net.quantization.layers)
    more = f" (and {len(risks) - 1} more layers)" if len(risks) > 1 else ""
    if number.resolved_from:
        probe = probe_kernel()
        text = f"{number.resolved_from}: this machine's onnxruntime {probe.onnxruntime} computes {probe.describe()}"
        if number.kernel is Int8Kernel.EXACT and risks:
            text += f"; on x86 CPUs without AVX-VNNI it computes int8-x86, which differs: {risks[0]}{more}"
        elif not risks:
            text += f"; no weight pair of {net.name} can saturate an int16 pair sum: int8 and int8-x86 are the same"
        return ("note", text)
    if number.kernel is Int8Kernel.X86:
        if risks:
            return None
        return (
            "note",
            f"{net.name}: no weight pair can saturate an int16 pair sum: int8-x86 and int8 are the same function",
        )
    if not risks:
        return None
    here = _here()
    if here is None:
        machine = ""
    elif here.kernel is Int8Kernel.X86:
        machine = (
            "; this machine's onnxruntime computes int8-x86, whose outputs can differ from those verified"
        )
    else:
        machine = "; this machine's onnxruntime computes int8 (what is verified)"
    text = (
        f"{net.name}: {risks[0]}{more}; this verifies the exact int8 semantics (VNNI and ARM kernels), "
        f"--format int8-x86 what onnxruntime computes on x86 CPUs without AVX-VNNI, --format {ORT_LABEL} what "
        f"this machine's onnxruntime computes{machine}"
    )
    return ("warning", text)
