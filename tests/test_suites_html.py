"""summary.html: a real suite run writes it beside summary.md, self-contained, and it renders in
headless Chromium (skipped with the reason where Chromium is not installed)."""

from __future__ import annotations

import re

import pytest

from qverify.backends import Limits
from qverify.suites import InProcessExecutor, read_suite, run_suite
from qverify.verification import VerifyOptions
from tests.chromium import assert_not_blank, needs_chromium, screenshot
from tests.conftest import ROOT, SAFETY_NET_S

RELU2 = ROOT / "benchmarks" / "tiny" / "relu2.nnet"
SUITE = f"""name = "pictures"
description = "relu2 with its inputs read as a 1x2 image, so counterexamples get thumbnails"
formats = ["8", "float"]
timeout = 20
image_shape = [1, 2]

[[task]]
name = "robust-safe"
network = "{RELU2}"
[task.property]
kind = "robustness"
center = [0.8, 0.2]
eps = "0.1"
label = 0

[[task]]
name = "robust-unsafe"
network = "{RELU2}"
[task.property]
kind = "robustness"
center = [0.6, 0.45]
eps = "0.15"
label = 0
"""


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("html")
    (folder / "suite.toml").write_text(SUITE)
    suite = read_suite(folder / "suite.toml")
    options = VerifyOptions(limits=Limits(timeout_s=SAFETY_NET_S, memory_mb=2048))
    result = run_suite(
        suite, suite.formats, options, InProcessExecutor(), folder / "run", SAFETY_NET_S, progress=False
    )
    assert {e["record"]["status"] for e in result.entries} == {"SAFE", "UNSAFE"}
    return folder / "run"


def test_summary_html_is_written_beside_summary_md_and_is_self_contained(run_folder):
    page = (run_folder / "summary.html").read_text()
    assert (run_folder / "summary.md").is_file()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<table>") == 2
    assert '<td class="safe">S ' in page and '<td class="unsafe">F' in page
    assert 'alt="cactus plot"' in page
    assert 'alt="robust-unsafe @ 8"' in page and 'alt="robust-unsafe @ float"' in page  # thumbnails
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sources and all(source.startswith("data:image/png;base64,") for source in sources)
    assert "http://" not in page and "https://" not in page


@needs_chromium
def test_summary_html_renders_in_headless_chromium(run_folder, tmp_path):
    assert_not_blank(screenshot(run_folder / "summary.html", tmp_path))
