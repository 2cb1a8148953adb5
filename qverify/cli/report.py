"""Rendering helpers shared by sub-commands: warnings and progress go to stderr."""

from __future__ import annotations

import sys


def warn(message: str) -> None:
    """One `warning: ...` line on stderr, so stdout stays machine-readable."""
    print(f"warning: {message}", file=sys.stderr)
