"""qverify: verify safety properties of neural networks as they are implemented.

The pipeline (see ARCHITECTURE.md in the repository's docs) runs left to right:
io -> network -> quant -> properties -> codegen -> invariants -> engine/backends ->
counterexample -> suites, with `cli` on top.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
