"""Scalar path: exact SMT for the scalar path: `bitvec` translates SSA nodes into any `TermBuilder`
(bit-vectors with interval-narrowed widths, SMT-LIB floating point); `bitwuzla` and `z3` implement it,
each the only importer of its library."""
