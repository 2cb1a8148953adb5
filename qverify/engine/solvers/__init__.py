"""Shared by both paths: the decision-procedure interface (`base`), HiGHS (`highs`) and the MILP
record (`milp`)."""
