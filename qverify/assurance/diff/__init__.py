"""Differential assurance (`qverify diff`, docs/diff.md): find -- or prove absent -- inputs on which a
reference implementation of a network and a quantized candidate disagree.

Modules, one job each: `criteria` (what a disagreement is, fitness), `space` (the L-inf ball and the
distortion space searched), `search` (DiffChaser's GA, DiverGet's distortion search, random
baselines), `metrics` (#DII, DiR, SR, time to first DII, diversity, VR), `records` (typed results),
`proof` (the two-implementation C harness, its back ends and the replay), `report` (.npz, PNG grid,
report.md, JSON, plots).
"""
