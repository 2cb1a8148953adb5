"""VNN-COMP's scoring of one category, from the tools' results files (SCORING/process_results.py).

As the competition does:
- a tool takes part in a category when it answered (unsat or sat) at least one of its instances;
  the smoke-test instances (`test_nano`, `test_tiny`) are not scored;
- per instance, the true answer is the one the tools give; when some say unsat and others sat, each
  sat tool's witness is checked (`witness.check_witness`: onnxruntime at X, the property at X and
  Y, tolerance 1e-4), and the answer is sat if any witness is correct, unsat otherwise;
- a sat answer is incorrect when others said unsat and no witness is correct; an unsat answer is
  incorrect when some witness is correct; a witness is not required where nobody disagrees;
- a correct answer scores `Rules.correct` (10), an incorrect one `Rules.incorrect` (VNN-COMP 2022's
  script: -100; its rules from 2023: -150, the default here); with `Rules.time_bonus`, the fastest
  correct tool gets +2 and the second +1 (times within 0.2 s count as equal), times being each
  tool's run time minus its overhead (its least run time over its answered instances in the files
  given), at least 1 s;
- a tool's percentage is its score over the best score of the category.

Where this departs from the competition's script: instances are matched across tools by their
(network, property) file stems, not by row position (the script assumed equal rows in equal order
and stopped otherwise); a row a tool lacks is no answer; the overhead is taken over the files
given (the competition's over all categories of the scoring pass: equal when the category holds
the tool's fastest answer, as for ACAS Xu 2022); a missing witness file of a sat answer in a
disagreement is "no_ce" (the script stopped); the manual overrides of the script's settings
(OVERRIDE_RESULTS) are not applied.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from qverify.competition.results import Answer, ResultRow
from qverify.competition.witness import WitnessCheck, WitnessVerdict

SCORING_MIN_TIME = 1.0  # SCORING/settings.py
SAME_TIME = 0.2  # runtimes within this many seconds are equal for the time bonus


@dataclass(frozen=True, slots=True)
class Rules:
    correct: int = 10
    incorrect: int = -150
    time_bonus: bool = False


@dataclass(frozen=True, slots=True)
class ToolResults:
    """One tool's rows of the category, and where its witnesses lie."""

    name: str
    rows: tuple[ResultRow, ...]
    witness_text: Callable[[ResultRow], str]  # the sat witness of a row ("" when there is none)


@dataclass(slots=True)
class ToolScore:
    name: str
    holds: int = 0  # correct unsat
    violated: int = 0  # correct sat
    incorrect: int = 0
    fastest: int = 0
    second: int = 0
    score: int = 0
    percent: float = 0.0
    instances: int = 0

    @property
    def correct(self) -> int:
        return self.holds + self.violated

    @property
    def open(self) -> int:
        """Instances with no correct or incorrect answer (timeout, error, unknown, none)."""
        return self.instances - self.correct - self.incorrect


@dataclass(frozen=True, slots=True)
class Disagreement:
    """An instance where some tools said unsat and others sat, and how it was settled."""

    instance: tuple[str, str]
    holds: tuple[str, ...]
    violated: tuple[str, ...]
    witnesses: dict[str, WitnessVerdict]
    truth: Answer

    def text(self) -> str:
        checks = ", ".join(f"{tool}: {verdict.check.value}" for tool, verdict in self.witnesses.items())
        network, prop = self.instance
        wrong = self.violated if self.truth is Answer.HOLDS else self.holds
        return (
            f"{network} {prop}: unsat by {', '.join(self.holds)}; sat by {', '.join(self.violated)} "
            f"(witnesses {checks}) -> {'sat' if self.truth is Answer.VIOLATED else 'unsat'}; "
            f"incorrect: {', '.join(wrong)}"
        )


@dataclass(slots=True)
class CategoryScore:
    category: str
    instances: list[tuple[str, str]]
    tools: list[ToolScore]
    truths: dict[tuple[str, str], Answer]  # HOLDS, VIOLATED, or UNKNOWN (nobody answered)
    disagreements: list[Disagreement] = field(default_factory=list)
    absent: dict[str, int] = field(default_factory=dict)  # tools taking no part: their row count
    missing_rows: dict[str, int] = field(default_factory=dict)  # tool -> instances it has no row for


def _instances(tools: list[ToolResults]) -> list[tuple[str, str]]:
    """Every scored instance, in the order of the first tool that has it."""
    seen: dict[tuple[str, str], None] = {}
    for tool in tools:
        for row in tool.rows:
            if not row.is_test:
                seen.setdefault(row.instance, None)
    return list(seen)


def _overhead(rows: dict[tuple[str, str], ResultRow]) -> float:
    answered = [row.time_s for row in rows.values() if row.answer.decided]
    return min(answered) if answered else 0.0


def score_category(
    category: str,
    tools: list[ToolResults],
    check: Callable[[tuple[str, str], str], WitnessVerdict],
    rules: Rules = Rules(),
) -> CategoryScore:
    """Score the category's results (module docstring). `check(instance, witness text)` checks a
    sat witness of the instance; it is called only where tools disagree."""
    instances = _instances(tools)
    by_tool = {tool.name: {row.instance: row for row in tool.rows if not row.is_test} for tool in tools}
    taking_part = [tool for tool in tools if any(row.answer.decided for row in by_tool[tool.name].values())]
    scores = {tool.name: ToolScore(tool.name, instances=len(instances)) for tool in taking_part}
    overheads = {tool.name: _overhead(by_tool[tool.name]) for tool in taking_part}
    result = CategoryScore(category, instances, list(scores.values()), {})
    result.absent = {tool.name: len(tool.rows) for tool in tools if tool not in taking_part}
    result.missing_rows = {
        tool.name: sum(1 for i in instances if i not in by_tool[tool.name]) for tool in taking_part
    }
    result.missing_rows = {name: count for name, count in result.missing_rows.items() if count}
    for instance in instances:
        answers: dict[str, tuple[Answer, float]] = {}
        for tool in taking_part:
            row = by_tool[tool.name].get(instance)
            if row is not None:
                answers[tool.name] = (row.answer, max(0.0, row.time_s - overheads[tool.name]))
        holds = [name for name, (a, _) in answers.items() if a is Answer.HOLDS]
        violated = [name for name, (a, _) in answers.items() if a is Answer.VIOLATED]
        witnesses: dict[str, WitnessVerdict] = {}
        if holds and violated:
            rows = {tool.name: tool for tool in taking_part}
            for name in violated:
                text = rows[name].witness_text(by_tool[name][instance])
                witnesses[name] = check(instance, text)
        valid = any(verdict.check is WitnessCheck.CORRECT for verdict in witnesses.values())
        if holds and violated:
            truth = Answer.VIOLATED if valid else Answer.HOLDS
            result.disagreements.append(
                Disagreement(instance, tuple(holds), tuple(violated), witnesses, truth)
            )
        else:
            truth = Answer.HOLDS if holds else Answer.VIOLATED if violated else Answer.UNKNOWN
        result.truths[instance] = truth
        _score_instance(scores, answers, holds, violated, valid, rules)
    best = max((score.score for score in scores.values()), default=0)
    for score in scores.values():
        score.percent = 100.0 * score.score / best if best > 0 else 0.0
    result.tools.sort(key=lambda score: (-score.score, score.name))
    return result


def _score_instance(scores, answers, holds, violated, valid, rules: Rules) -> None:
    """process_results.get_score for every tool of one instance."""
    times = {
        Answer.HOLDS: [answers[name][1] for name in holds],
        Answer.VIOLATED: [answers[name][1] for name in violated],
    }
    for name, (given, seconds) in answers.items():
        score = scores[name]
        if not given.decided:
            continue
        if (given is Answer.VIOLATED and holds and not valid) or (given is Answer.HOLDS and valid):
            score.incorrect += 1
            score.score += rules.incorrect
            continue
        if given is Answer.HOLDS:
            score.holds += 1
        else:
            score.violated += 1
        score.score += rules.correct
        clamped = sorted(max(t, SCORING_MIN_TIME) for t in times[given])
        mine = max(seconds, SCORING_MIN_TIME)
        if mine < clamped[0] + SAME_TIME:
            score.fastest += 1
            score.score += 2 if rules.time_bonus else 0
        elif len(clamped) > 1 and mine < clamped[1] + SAME_TIME:
            score.second += 1
            score.score += 1 if rules.time_bonus else 0


def table(result: CategoryScore, rules: Rules, mark: str = "") -> list[str]:
    """The per-tool table (Markdown), best score first; `mark` names a tool to flag (qverify)."""
    bonus = " (time bonus)" if rules.time_bonus else ""
    lines = [
        (
            f"category {result.category}: {len(result.instances)} instances; {rules.correct} a correct "
            f"answer, {rules.incorrect} an incorrect one{bonus}"
        ),
        "",
        "| # | tool | correct | unsat | sat | incorrect | open | fastest | score | percent |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rank, score in enumerate(result.tools, start=1):
        name = f"**{score.name}**" if score.name == mark else score.name
        lines.append(
            f"| {rank} | {name} | {score.correct} | {score.holds} | {score.violated} | {score.incorrect} | "
            f"{score.open} | {score.fastest} | {score.score} | {score.percent:.1f}% |"
        )
    counts = Counter(result.truths.values())
    lines += [
        "",
        (
            f"answers: unsat {counts[Answer.HOLDS]}, sat {counts[Answer.VIOLATED]}, "
            f"open (no tool answered) {counts[Answer.UNKNOWN]}"
        ),
    ]
    if result.absent:
        lines.append("taking no part (no unsat or sat answer): " + ", ".join(sorted(result.absent)))
    for name, count in sorted(result.missing_rows.items()):
        lines.append(f"note: {name} has no row for {count} instance(s): no answer")
    if result.disagreements:
        lines += ["", f"disagreements ({len(result.disagreements)}):"]
        lines += [f"- {disagreement.text()}" for disagreement in result.disagreements]
    return lines
