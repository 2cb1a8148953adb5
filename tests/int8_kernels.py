"""onnxruntime's two u8 x s8 kernels in the tests: which one this machine runs, and the other one.

onnxruntime sums uint8 x int8 products exactly on CPUs with AVX-VNNI (and on ARM) and in int16 pairs
with saturation on x86 CPUs with AVX2 alone (`qverify.quant.x86`); the probe
(`qverify.quant.ort_kernel`) finds which one this machine runs. A bit-exactness test compares the
variant of that kernel with this machine's onnxruntime, checks the other variant's simulator against
its generated C, and compares it with onnxruntime where the other kind of kernel can run here
(`benchmarks/bench_int8_oracle.kernel_runner`: qemu-user's Haswell model on a VNNI machine), else
skips saying which CPU it needs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from qverify.quant import Int8Format, Int8Kernel
from qverify.quant.ort_kernel import ORT_LABEL, probe_kernel

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "bench_int8_oracle", ROOT / "benchmarks" / "bench_int8_oracle.py"
)
oracle = importlib.util.module_from_spec(_spec)
sys.modules["bench_int8_oracle"] = oracle  # dataclasses look their module up
_spec.loader.exec_module(oracle)

HERE: Int8Kernel = probe_kernel().resolved()
OTHER: Int8Kernel = Int8Kernel.EXACT if HERE is Int8Kernel.X86 else Int8Kernel.X86


def machine_format() -> Int8Format:
    """`--format int8-ort` here: the variant whose arithmetic this machine's onnxruntime computes."""
    return Int8Format(kernel=HERE, resolved_from=ORT_LABEL)


def other_format() -> Int8Format:
    return Int8Format(kernel=OTHER)


def runner_or_skip(kernel: Int8Kernel) -> list[str]:
    """The command prefix of a Python whose onnxruntime runs `kernel`, or a skip naming the CPU it needs."""
    prefix, how = oracle.kernel_runner(kernel)
    if prefix is None:
        pytest.skip(f"onnxruntime's {Int8Format(kernel=kernel).label} kernels: {how}")
    return prefix
