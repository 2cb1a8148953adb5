"""`--format int8-ort`: the probe of the u8 x s8 kernel this machine's onnxruntime runs
(`qverify.quant.ort_kernel`), the label wherever formats are named, and what commands say about it.

The probe's answer on this machine is what the bit-exactness tests compare with (`tests/int8_kernels.py`);
here it is checked on both kinds of kernel: natively, and in a Python whose onnxruntime runs the other
kind (qemu-user's Haswell model on a VNNI machine), where the probe must find that kernel.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from qverify.errors import UnsupportedError
from qverify.io import load_network
from qverify.quant import Int8Format, Int8Kernel, parse_number_format
from qverify.quant.ort_kernel import ORT_LABEL, classify, kernel_statement, probe_kernel
from qverify.tasks.spec_file import read_spec
from qverify.vnncomp import RunnerConfig, Semantics
from tests.int8_kernels import HERE, OTHER, machine_format, oracle, runner_or_skip

QVERIFY = [sys.executable, "-m", "qverify"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A 2-8-8-3 model whose pair sums can saturate (quantize's defaults) and its --reduce-range twin."""
    (made,) = oracle.make_models(tmp_path_factory.mktemp("ort-kernel"), [5])
    return made


def test_the_probe_tells_the_exact_sums_from_the_x86_model():
    probe = probe_kernel()
    assert probe.exact != probe.saturating  # the probe's weights saturate some pair: it can tell them apart
    assert classify(np.array(probe.exact), "v").kernel is Int8Kernel.EXACT
    assert classify(np.array(probe.saturating), "v").kernel is Int8Kernel.X86
    odd = classify(np.array(probe.exact) + 1, "v")
    assert odd.kernel is None and f"{ORT_LABEL} refused" in odd.describe()
    with pytest.raises(UnsupportedError, match="neither the exact sums"):
        odd.resolved()
    assert probe.kernel is HERE and f"{ORT_LABEL} = {probe.label}" in probe.describe()


def test_the_probe_finds_the_other_kernel_on_the_other_kind_of_cpu():
    """In a Python whose onnxruntime runs the other kernel (emulated: /proc/cpuinfo shows the host's
    flags there, so only asking onnxruntime tells), the probe names that kernel."""
    runner = runner_or_skip(OTHER)
    script = "from qverify.quant.ort_kernel import probe_kernel; print(probe_kernel().kernel.value)"
    done = subprocess.run([*runner, "-c", script], capture_output=True, text=True, check=True)
    assert Int8Kernel(done.stdout.strip()) is OTHER


def test_the_label_resolves_wherever_formats_are_named(models, tmp_path):
    for label in (ORT_LABEL, "INT8-ORT", "int8-onnxruntime"):
        number = parse_number_format(label)
        assert number == Int8Format(kernel=HERE) and number.resolved_from == ORT_LABEL
        assert str(number) == machine_format().label and ORT_LABEL in number.describe()
    spec = tmp_path / "s.toml"
    spec.write_text(
        f'network = "{models.reduced_path}"\n[property]\nkind = "robustness"\ncenter = [0.5, 0.5]\nlabel = 0\n'
        f'eps = 0.01\n[implementation]\nformat = "{ORT_LABEL}"\n'
    )
    assert read_spec(spec).given["format"] == ORT_LABEL
    # VNN-COMP's runner: QVERIFY_FORMAT=int8-ort, and the real meaning of an int8 model
    assert RunnerConfig(Semantics.QUANTIZED, ORT_LABEL).implementation(True).number == machine_format()
    assert RunnerConfig(Semantics.REAL).implementation(True).number == machine_format()


def test_verify_records_what_int8_ort_resolved_to(models, tmp_path):
    instance = oracle.make_instance(models.default_path, machine_format().label, models.seed)
    prop = instance.write_property(tmp_path / "p.vnnlib")
    out = tmp_path / "r.json"
    done = subprocess.run(
        [*QVERIFY, "verify", str(models.default_path), "--property", str(prop), "--format", ORT_LABEL]
        + ["--json", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 10), done.stderr
    record = json.loads(out.read_text())
    assert record["format"] == machine_format().label and record["format_resolved_from"] == ORT_LABEL
    assert f"note: {ORT_LABEL}: this machine's onnxruntime" in done.stderr
    shown = subprocess.run([*QVERIFY, "show", str(out)], capture_output=True, text=True, check=True).stdout
    assert f"format {machine_format().label} ({ORT_LABEL} on the machine that verified it)" in shown


def test_without_onnxruntime_int8_ort_is_one_error_line(models, tmp_path):
    script = (
        "import sys; sys.modules['onnxruntime'] = None\n"  # as if it were not installed
        "from qverify.cli import main; raise SystemExit(main(sys.argv[1:]))"
    )
    prop = oracle.make_instance(models.reduced_path, "", 0).write_property(tmp_path / "p.vnnlib")
    done = subprocess.run(
        [sys.executable, "-c", script, "verify", str(models.reduced_path), "--property", str(prop)]
        + ["--format", ORT_LABEL],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "onnxruntime is not installed" in done.stderr, done.stderr


def test_what_commands_say_about_the_kernels(models):
    risky, safe = load_network(models.default_path), load_network(models.reduced_path)
    level, text = kernel_statement(risky, Int8Format())
    assert level == "warning" and "--format int8-ort what this machine's onnxruntime computes" in text
    assert f"this machine's onnxruntime computes {machine_format().label}" in text
    level, text = kernel_statement(risky, machine_format())
    assert level == "note" and text.startswith(f"{ORT_LABEL}: this machine's onnxruntime")
    assert f"{ORT_LABEL} = {machine_format().label}" in text
    level, text = kernel_statement(safe, machine_format())
    assert level == "note" and "int8 and int8-x86 are the same" in text
    assert kernel_statement(safe, Int8Format()) is None
    level, text = kernel_statement(safe, Int8Format(kernel=Int8Kernel.X86))
    assert level == "note" and "the same function" in text
