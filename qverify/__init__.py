"""qverify: verify safety properties of neural networks as they are implemented.

The pipeline (see ARCHITECTURE.md in the repository's docs) runs left to right, and imports flow
the other way only (tests/test_import_graph.py): network -> io, properties -> quant -> codegen ->
invariants -> engine -> backends -> counterexample -> verification -> tasks -> suites, vnncomp ->
assurance, with `cli` on top.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
