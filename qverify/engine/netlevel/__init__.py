"""Network level: the network-level path of the engine: a harness of the generated shape read back as layers
and decided layer by layer (numpy, HiGHS).

`lift` (the array-level front end: harness C -> `query.NetworkQuery`) -> `search.decide` (attack,
bounds, input/ReLU branch and bound, LP/MILP, exact enumeration). `model` says the arithmetic every
analysis assumes; `exact.real_outputs` is the exact rational reading of the network that
REAL-arithmetic confirmations use. The package imports nothing itself, so that reading a harness
(`lift`) does not load the search. See docs/engine.md, "Network level".
"""
