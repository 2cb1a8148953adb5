"""Network level: why the array-level front end declined a harness."""

from __future__ import annotations


class NotRecognised(Exception):
    """A construct the lifter does not recognise, with `file:line:` where known: the caller falls
    back to the scalar front end, which handles any C the engine supports."""
