"""The names of a verification record's times (`times_s`), for its writers and its readers.

One task's pipeline is timed stage by stage (docs/ARCHITECTURE.md, "Stage times"): `quantize`,
`invariants`, `codegen`, `backend`, `replay`, and `pipeline`, their sum, the task's own time, which a
suite's tables add up. `qverify verify` adds what precedes it in its process (`startup`, `imports`,
`load`) and `process`: the whole command, from its process's start to the record, what a user waits
for (the headline of `qverify show`). Records written before these names called `pipeline` `total`;
they are read with the names of today.
"""

from __future__ import annotations

from collections.abc import Mapping

PIPELINE = "pipeline"  # quantize .. replay: one task's own time
PROCESS = "process"  # `qverify verify`: its process's start .. the record
PRE_PIPELINE = ("startup", "imports", "load")  # `qverify verify`'s stages before the pipeline
OLD_PIPELINE = "total"  # the name of `pipeline` in records written before it


def pipeline_seconds(times: Mapping[str, float]) -> float:
    """A record's `pipeline` seconds, whichever name its record gives them."""
    return float(times.get(PIPELINE, times.get(OLD_PIPELINE, 0.0)))


def named_times(times: Mapping[str, float]) -> dict[str, float]:
    """`times_s` of a record, named as today: an older record's `total` is its `pipeline`."""
    named = dict(times)
    if OLD_PIPELINE in named and PIPELINE not in named:
        named[PIPELINE] = named.pop(OLD_PIPELINE)
    return named
