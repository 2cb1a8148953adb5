"""Repair of quantized networks (QNNRepair): fault localisation by activation spectra, integer MILP
weight repair in the format's own domain, and re-verification of properties (`qverify repair`).

Modules, each with one job: `spectra` (passing/failing tests, activation spectra), `metrics` (the
seven suspiciousness metrics, rankings, random baseline), `readout` (a repaired output as a function
of a linear quantity), `goals` (what each test asks), `milp` (the MILP and its solution), `target`
(the layer in its format; the repaired network), `repair` (the study and one repair per metric),
`files` (the repaired model file and C), `reverify` (properties before and after), `report`
(tables and JSON), `journal` (solved MILPs, for --resume).
"""
