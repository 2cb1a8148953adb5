"""Where the Jinja templates and C models are: a source checkout, or the installed wheel.

In a checkout they are the top-level `templates/` and `models_c/` folders; a wheel installs the same
files as the packages `qverify._templates` and `qverify._models_c` (see pyproject.toml).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from qverify.errors import InternalError

_CHECKOUT = Path(__file__).resolve().parents[1]


def _resource_dir(folder: str, package: str, marker: str) -> Path:
    candidate = _CHECKOUT / folder
    if (candidate / marker).is_file():
        return candidate
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if (Path(location) / marker).is_file():
                return Path(location)
    raise InternalError(f"cannot find qverify's {folder}/ (looked in {candidate} and package {package})")


def templates_dir() -> Path:
    """The Jinja templates (`network.c.j2`, `harness.c.j2`, ...)."""
    return _resource_dir("templates", "qverify._templates", "network.c.j2")


def models_c_dir() -> Path:
    """The hand-written C models (`fxp.h`, `verifier.h`)."""
    return _resource_dir("models_c", "qverify._models_c", "fxp.h")
