"""Scalar path: the passes over the SSA program: `intervals` (the interval domain) and `simplify`."""
