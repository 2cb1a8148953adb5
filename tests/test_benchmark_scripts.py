"""Every benchmark script still starts: `python benchmarks/X.py --help` prints its usage.

The scripts are not run by the test suite (they measure, for minutes), so a name they import that a
change removed went unnoticed until someone ran the benchmark (thesis_comparison.py imported a
constant issue 31 had removed). `--help` imports everything a script imports at its top.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# scripts that are modules of the others, or a suite's training script, not commands
SCRIPTS = sorted(
    path
    for path in (ROOT / "benchmarks").glob("*.py")
    if path.stem not in ("image_suites", "training_tools", "conv_training", "deeppoly", "graph_estimates")
)


def test_there_are_benchmark_scripts():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_benchmark_script_starts(script: Path):
    completed = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "usage" in completed.stdout.lower()
