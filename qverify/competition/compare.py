"""Other tools' results beside qverify's: finding their files, scoring the category, the report.

`--compare` names a tool's results CSV (`<tool>/<category>/results.csv`: the tool is the folder
above the category's; any other file: its stem), a tool's folder (`<tool>/<category>/results.csv`
or `<tool>/results.csv` in it), or a folder of tools, as VNN-COMP's results repositories are laid
out (every `<tool>/<category>/results.csv` in it); `NAME=PATH` names the tool. A file holding
several categories gives its rows of this one. Witnesses are looked for beside each file.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from qverify.competition.category import Instance
from qverify.competition.results import ResultRow, counterexample_name, read_results
from qverify.competition.scoring import CategoryScore, Rules, ToolResults, table
from qverify.competition.witness import WitnessCheck, WitnessVerdict, check_witness, read_witness_file
from qverify.errors import InputError
from qverify.io.files import file_stem

RESULTS_CSV = "results.csv"


def _tool(name: str, csv_path: Path, category: str) -> ToolResults:
    rows = read_results(csv_path)
    mine = [row for row in rows if row.category == category or row.is_test]
    if not any(not row.is_test for row in mine):  # another name for the category: the file's rows
        mine = rows
    folder = csv_path.parent
    return ToolResults(name, tuple(mine), lambda row: read_witness_file(folder / counterexample_name(row)))


def tool_results(spec: str, category: str) -> list[ToolResults]:
    """The tools a `--compare` value names (module docstring).

    :raises InputError: nothing of the category's results is found there.
    """
    name, _, text = spec.rpartition("=") if "=" in spec and not Path(spec).exists() else ("", "", spec)
    path = Path(text)
    if path.is_file():
        tool = name or (path.parent.parent.name if path.parent.name == category else path.stem)
        return [_tool(tool, path, category)]
    if not path.is_dir():
        raise InputError(f"--compare {spec}: no such file or folder")
    for candidate in (path / category / RESULTS_CSV, path / RESULTS_CSV):
        if candidate.is_file():
            return [_tool(name or path.name, candidate, category)]
    found = sorted(sub for sub in path.iterdir() if (sub / category / RESULTS_CSV).is_file())
    if not found:
        raise InputError(
            f"--compare {spec}: no {category}/{RESULTS_CSV} in it nor in its folders (a tool's folder, a "
            "folder of tools, or a results CSV)"
        )
    return [_tool(sub.name, sub / category / RESULTS_CSV, category) for sub in found]


def witness_checker(instances: list[Instance]):
    """`check(instance, text)` for `score_category`: the instance's files from the category's rows."""
    files = {(file_stem(i.onnx), file_stem(i.vnnlib)): (i.onnx, i.vnnlib) for i in instances}

    def check(instance: tuple[str, str], text: str) -> WitnessVerdict:
        if instance not in files:
            return WitnessVerdict(WitnessCheck.NO_CE, "the instance is not among the category's rows")
        onnx, vnnlib = files[instance]
        return check_witness(text, onnx, vnnlib)

    return check


def own_results(name: str, rows: tuple[ResultRow, ...], out: Path) -> ToolResults:
    return ToolResults(name, rows, lambda row: read_witness_file(out / counterexample_name(row)))


def write_report(result: CategoryScore, rules: Rules, out: Path, mark: str) -> list[str]:
    """`score.md` and `score.json` in `out`; returns the Markdown lines (what the command prints)."""
    lines = table(result, rules, mark)
    data = {
        "category": result.category,
        "instances": len(result.instances),
        "rules": asdict(rules),
        "tools": [{**asdict(score), "correct": score.correct, "open": score.open} for score in result.tools],
        "disagreements": [disagreement.text() for disagreement in result.disagreements],
        "absent": sorted(result.absent),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "score.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (out / "score.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write the score into {out}: {error.strerror or error}") from None
    return lines
