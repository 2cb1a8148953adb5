"""VNN-COMP's results files: one CSV per tool and category, as the competition writes them.

Each row is `category,onnx,vnnlib,prepare,result,time` (no header; `prepare` and `time` in seconds,
the paths as the competition's scripts named them), e.g. VNN-COMP 2022's
`acasxu,./benchmarks/acasxu/onnx/ACASXU_run2a_1_1_batch_2000.onnx,./benchmarks/acasxu/vnnlib/prop_1.vnnlib,1.79,unsat,1.24`.
A `sat` answer's witness lies beside the file as `<network>_<property>.counterexample[.gz]` (the
stems of the row's paths). The result words are the run script's (`sat`, `unsat`, `timeout`,
`error`, `unknown`) or the harness's own (`run_instance_timeout`, `error_exit_code_1`, ...);
`answer` reads them as the competition's scoring does (SCORING/settings.py, CSV_SUBSTITUTIONS).
"""

from __future__ import annotations

import csv
import enum
import math
from dataclasses import dataclass
from pathlib import Path

from qverify.errors import InputError
from qverify.input_limits import check_file
from qverify.io.files import file_stem


class Answer(enum.Enum):
    """A result as scored: the property holds (unsat), is violated (sat), or no answer."""

    HOLDS = "holds"
    VIOLATED = "violated"
    TIMEOUT = "timeout"
    ERROR = "error"
    UNKNOWN = "unknown"

    @property
    def decided(self) -> bool:
        return self in (Answer.HOLDS, Answer.VIOLATED)


# the competition's prefixes, in its order (SCORING/settings.py CSV_SUBSTITUTIONS)
_SUBSTITUTIONS = (
    ("unsat", Answer.HOLDS),
    ("sat", Answer.VIOLATED),
    ("no_result_in_file", Answer.UNKNOWN),
    ("prepare_instance_error_", Answer.UNKNOWN),
    ("run_instance_timeout", Answer.TIMEOUT),
    ("prepare_instance_timeout", Answer.TIMEOUT),
    ("error_exit_code_", Answer.ERROR),
    ("error_nonmaximal", Answer.UNKNOWN),
)
TEST_INSTANCES = ("test_nano", "test_tiny")  # the competition's smoke tests: never scored


def answer(result: str) -> Answer:
    """A result word as the competition scores it: `unsat` holds, `sat` is violated, `timeout...`
    (verapak wrote `timeout(X_00 ...`) a timeout, the harness's own words by their prefixes, an
    empty or unknown word no answer."""
    word = result.strip().lower()
    for prefix, meaning in _SUBSTITUTIONS:
        if word.startswith(prefix):
            return meaning
    if word.startswith("timeout"):
        return Answer.TIMEOUT
    return Answer.ERROR if word == "error" else Answer.UNKNOWN


@dataclass(frozen=True, slots=True)
class ResultRow:
    """One row of a results CSV."""

    category: str
    onnx: str
    vnnlib: str
    prepare_s: float
    result: str
    time_s: float

    @property
    def answer(self) -> Answer:
        return answer(self.result)

    @property
    def instance(self) -> tuple[str, str]:
        """(network stem, property stem): how rows of different tools are matched."""
        return file_stem(self.onnx), file_stem(self.vnnlib)

    @property
    def is_test(self) -> bool:
        return any(name in self.onnx for name in TEST_INSTANCES)

    def csv_fields(self) -> list[str]:
        return [
            self.category,
            self.onnx,
            self.vnnlib,
            f"{self.prepare_s:.9f}",
            self.result,
            f"{self.time_s:.9f}",
        ]


def counterexample_name(row: ResultRow) -> str:
    """`<network>_<property>.counterexample`: where the competition looks for a sat witness."""
    network, prop = row.instance
    return f"{network}_{prop}.counterexample"


def _seconds(text: str, where: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: {what} {text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: {what} {text!r} is not a finite number of seconds")
    return value


def read_results(path: str | Path) -> list[ResultRow]:
    """Every row of a results CSV (a header line, if any, is skipped).

    :raises InputError: the file cannot be read, or a row does not have the six fields.
    """
    check_file(path)
    try:
        with Path(path).open(newline="", encoding="utf-8") as handle:
            lines = list(csv.reader(handle))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    rows = []
    for number, fields in enumerate(lines, start=1):
        if not fields or not "".join(fields).strip():
            continue
        where = f"{path}:{number}"
        if len(fields) != 6:
            raise InputError(
                f"{where}: expected category,onnx,vnnlib,prepare,result,time, got {len(fields)} fields"
            )
        if number == 1 and fields[3].strip().lower().startswith("prepare"):
            continue  # a header
        prepare = _seconds(fields[3], where, "prepare time")
        rows.append(ResultRow(fields[0].strip(), fields[1].strip(), fields[2].strip(), prepare, fields[4].strip(),
                              _seconds(fields[5], where, "run time")))  # fmt: skip
    return rows


def write_results(rows: list[ResultRow], path: Path) -> None:
    """The rows as the competition's CSV (no header)."""
    try:
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerows(row.csv_fields() for row in rows)
    except OSError as error:
        raise InputError(f"cannot write {path}: {error.strerror or error}") from None
