"""`qverify verify` pays only for what it uses (issue 16, "overhead"): its imports, its engine process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

RELU2 = str(ROOT / "benchmarks" / "tiny" / "relu2.nnet")
# what other commands, or other inputs, need: ONNX files, Pillow for image inputs, the engine's
# stages (run in the engine's own process), solvers, data and report libraries
NOT_FOR_VERIFY = (
    "onnx",
    "onnxruntime",
    "PIL",
    "scipy",
    "sklearn",
    "matplotlib",
    "z3",
    "bitwuzla",
    "highspy",
    "pycparser",
    "dask",
    "tqdm",
    "qverify.engine.scalar.symex",
    "qverify.engine.scalar.strategy",
    "qverify.assurance",
    "qverify.suites",
    "qverify.invariants.symbolic_exact",  # the tests' oracle of the float64 symbolic bounds
)


def test_verify_on_an_nnet_file_imports_nothing_it_does_not_use():
    script = (
        "import sys\n"
        "from qverify.cli import main\n"
        f"code = main(['verify', {RELU2!r}, '--center', '0.6,0.45', '--eps', '0.15', '--label', '0',"
        " '--format', '8.8'])\n"
        f"print(code, sorted(m for m in {NOT_FOR_VERIFY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.stdout.splitlines()[-1] == "10 []", done.stdout + done.stderr


def test_verify_ends_at_once_with_its_answer_written_and_nothing_left_behind(tmp_path):
    """`python -m qverify verify` ends by os._exit after its answer (`qverify.cli.console`): the
    exit code, the summary line, the JSON record and the engine host's folder removed, as a normal
    interpreter exit leaves them."""
    record = tmp_path / "out" / "record.json"
    engine_tmp = tmp_path / "tmp"
    engine_tmp.mkdir()
    arguments = [RELU2, "--center", "0.6,0.45", "--eps", "0.15", "--label", "0", "--format", "8.8"]
    done = subprocess.run(
        [sys.executable, "-m", "qverify", "verify", *arguments, "--json", str(record)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TMPDIR": str(engine_tmp)},
    )
    status = json.loads(record.read_text())["status"]
    assert done.stdout.splitlines()[0] == status, done.stdout + done.stderr
    assert done.returncode == {"SAFE": 0, "UNSAFE": 10}[status]
    left = [path.name for path in engine_tmp.iterdir() if path.name.startswith("qverify-")]
    assert left == []  # the engine host's and the run's folders are gone (jinja2's cache stays)


def test_exact_dot_by_int64_limbs_equals_the_big_integer_product():
    import random

    import numpy as np

    from qverify.invariants.symbolic_exact import _exact_dot

    rng = random.Random(16)

    def integers(shape, bits):
        values = [rng.randint(-(1 << bits), 1 << bits) for _ in range(int(np.prod(shape)))]
        return np.array(values, dtype=object).reshape(shape)

    for rows, inner, cols, a_bits, b_bits in [
        (100, 50, 50, 90, 31),  # ACAS Xu's back-substitution in fixed point
        (10, 50, 5, 200, 150),  # float numerators
        (6, 784, 20, 80, 40),  # a long inner dimension: narrower limbs
        (3, 1, 1, 0, 0),
        (4, 3, 2, 1, 62),
    ]:
        a, b = integers((rows, inner), a_bits), integers((inner, cols), b_bits)
        a[0, :] = 0
        assert (_exact_dot(a, b) == a.dot(b)).all()
        vector = integers((inner,), b_bits)
        assert (_exact_dot(a, vector) == a.dot(vector)).all()


def test_the_engine_host_is_ready_without_what_only_some_tasks_need():
    """The host says ready after the lifter and the network level: the scalar path, scipy.sparse
    and Jinja are imported while it waits (`engine_process.IDLE_IMPORTS`), or by a task that needs
    them; and each of those is a module that exists."""
    script = (
        "import importlib.util, sys\n"
        "from qverify.backends.engine_process import IDLE_IMPORTS, import_engine\n"
        "import_engine()\n"
        "print(sorted(m for m in IDLE_IMPORTS if m in sys.modules),"
        " [m for m in IDLE_IMPORTS if importlib.util.find_spec(m) is None])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.stdout.splitlines()[-1] == "[] []", done.stdout + done.stderr
