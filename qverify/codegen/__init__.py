"""C code generation: the network (and, with properties, harnesses) rendered from Jinja templates."""

from qverify.codegen.compile import (
    REPLAY_OPTIMISE,
    Compilations,
    compile_replay,
    compile_replays,
    find_gcc,
    format_inputs,
    run_lines,
)
from qverify.codegen.context import NeuronBounds, network_context
from qverify.codegen.harness import VIOLATION_PREFIX, clause_message, harness_context, render_harness
from qverify.codegen.render import CProgram, render_network, render_template
from qverify.codegen.replay import CompiledNetwork, NetworkRun

__all__ = [
    "REPLAY_OPTIMISE",
    "VIOLATION_PREFIX",
    "CProgram",
    "Compilations",
    "CompiledNetwork",
    "NetworkRun",
    "NeuronBounds",
    "clause_message",
    "compile_replay",
    "compile_replays",
    "find_gcc",
    "format_inputs",
    "harness_context",
    "network_context",
    "render_harness",
    "render_network",
    "render_template",
    "run_lines",
]
