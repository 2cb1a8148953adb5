"""Quantization impact under perturbation (`qverify impact`, docs/impact.md): how a reference
implementation and quantized candidates of one network fare on a labelled data set perturbed by
each family of `qverify.data.transforms` at a grid of intensities -- top-1/top-5 accuracy, macro-F1,
KL divergence of the softmax outputs both ways, flip rate, with bootstrap intervals.

Modules, one job each: `inputs` (data, canvas, grids), `metrics` (metrics and the bootstrap),
`study` (running the cells), `journal` (finished cells, for --resume), `records` (typed results, JSON), `tables` (rows of text), `plots`
(one PNG per family), `html` (report.html), `report` (writing every file).
"""

from qverify.assurance.impact.inputs import FamilyGrid, check_dataset, family_grids, resolve_canvas
from qverify.assurance.impact.records import CLEAN, Cell, Comparison, Estimate, ImpactStudy, Scores
from qverify.assurance.impact.report import JOURNAL, OUTPUTS, write_report
from qverify.assurance.impact.study import StudySettings, run_study

__all__ = [
    "CLEAN",
    "JOURNAL",
    "OUTPUTS",
    "Cell",
    "Comparison",
    "Estimate",
    "FamilyGrid",
    "ImpactStudy",
    "Scores",
    "StudySettings",
    "check_dataset",
    "family_grids",
    "resolve_canvas",
    "run_study",
    "write_report",
]
