"""Packaging: every package of the source tree is in pyproject.toml, and a built wheel finds its
templates and C models."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT


def test_every_package_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "qverify").rglob("__init__.py")
    }
    assert found | {"qverify._templates", "qverify._models_c"} == listed


@pytest.mark.slow
def test_wheel_installs_templates_and_models(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("qverify-*.whl"))
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    probe = "import qverify.resources as r; print(r.templates_dir()); print(r.models_c_dir())"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target)},
        check=True,
    )
    templates, models = result.stdout.split()
    assert templates.startswith(str(target)) and models.startswith(str(target))
