"""Scalar path: the scalar path of the engine: a bounded model checker over C, one operation at a time, for C
the network level cannot lift (hand-edited harnesses, C qverify did not generate, constructs the
lifter declines) and for `--certify`.

`cfront` (shared) -> `symex` (inline, unroll: the SSA of `ssa`, the semantics of `semantics`) ->
`passes.simplify` (folding, intervals, pattern rules, tabulated lookups) -> `strategy` (attack with
the bit-exact `evaluate`, lowering `linear`, symbolic bounds `relax`, input splitting `branch`,
MILP `milp` + `engine.solvers.highs`, exact SMT `smt`). See docs/engine.md, "Pipeline (scalar path)".
"""
