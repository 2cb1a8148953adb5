"""The import graph of `qverify/`: no cycles, and no import from a lower layer of the pipeline to a
higher one (docs/ARCHITECTURE.md, "The pipeline"; issue 30).

Every import counts: top-level, inside functions (lazy imports that keep `qverify --help` fast) and
under `TYPE_CHECKING`, because each is a dependency a reader has to follow. The graph is read from
the source with `ast`, so the test imports nothing of the package.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "qverify"

# Pipeline layers, lowest first. A module may import its own layer and the layers below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "qverify",
        "qverify.errors",
        "qverify.hexfloat",
        "qverify.resources",
        "qverify.input_limits",
        "qverify.interrupts",
        "qverify.stage_times",
        "qverify.tools",
    ),
    ("qverify.network", "qverify.data"),
    ("qverify.io", "qverify.properties"),
    ("qverify.quant",),
    ("qverify.codegen",),
    ("qverify.invariants",),
    ("qverify.engine",),
    # each operator kind's meaning at every stage above (its classes use the stages' helpers; the
    # stages reach them through `qverify.network.operators`, the registry that loads this package)
    ("qverify.operators",),
    ("qverify.backends",),
    ("qverify.counterexample",),
    ("qverify.verification", "qverify.record", "qverify.cases"),
    ("qverify.tasks",),
    ("qverify.suites", "qverify.vnncomp", "qverify.competition"),
    ("qverify.assurance",),
    ("qverify.cli", "qverify.__main__"),
)
# Inside the engine: what both paths use, the two paths (which never import each other), the door.
ENGINE_LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "qverify.engine.c_types",
        "qverify.engine.cfront",
        "qverify.engine.floatgrid",
        "qverify.engine.result",
        "qverify.engine.solvers",
    ),
    ("qverify.engine.netlevel", "qverify.engine.scalar"),
    ("qverify.engine", "qverify.engine.api", "qverify.engine.__main__"),
)
ENGINE_PATHS = ("qverify.engine.netlevel", "qverify.engine.scalar")


@dataclass(frozen=True, slots=True)
class Module:
    name: str
    path: Path
    is_package: bool


def modules() -> dict[str, Module]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, path, is_package)
    return found


def _resolve(name: str, known: dict[str, Module]) -> str | None:
    """The module a dotted name lives in (the longest known prefix)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: Module, known: dict[str, Module]) -> set[str]:
    """Every qverify module that `module` imports, wherever the import statement is."""
    tree = ast.parse(module.path.read_text(), str(module.path))
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import sub` imports the submodule `pkg.sub` when there is one
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == "qverify" or name.startswith("qverify."):
                target = _resolve(name, known)
                if target is not None and target != module.name:
                    targets.add(target)
    return targets


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(module, known) for name, module in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer_of(name: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """The layer of the longest prefix of `name` listed in `layers` (None: not listed)."""
    best, best_length = None, -1
    for rank, prefixes in enumerate(layers):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = rank, len(prefix)
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in graph.items():
        for target in targets:
            if layer_of(target, LAYERS) > layer_of(source, LAYERS):
                wrong.append(f"{source} -> {target}")
            if source.startswith("qverify.engine") and target.startswith("qverify.engine"):
                if layer_of(target, ENGINE_LAYERS) > layer_of(source, ENGINE_LAYERS):
                    wrong.append(f"{source} -> {target} (engine)")
                paths = {p for p in ENGINE_PATHS for m in (source, target) if m.startswith(p + ".") or m == p}
                if len(paths) == 2:
                    wrong.append(f"{source} -> {target} (one engine path into the other)")
    return sorted(wrong)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_module_has_a_layer(graph):
    assert [name for name in graph if layer_of(name, LAYERS) is None] == []
    engine = [name for name in graph if name.startswith("qverify.engine")]
    assert [name for name in engine if layer_of(name, ENGINE_LAYERS) is None] == []


def test_the_package_has_no_import_cycles(graph):
    assert cycles(graph) == []


def test_no_import_reaches_up_the_pipeline(graph):
    assert upward_imports(graph) == []


def test_the_checker_sees_cycles_and_upward_imports():
    """The checks above on a graph with one circle and one upward edge (so a pass means something)."""
    graph = {
        "qverify.network.model": {"qverify.network.spatial"},
        "qverify.network.spatial": {"qverify.network.model"},
        "qverify.tools": {"qverify.backends.esbmc"},
        "qverify.backends.esbmc": set(),
        "qverify.engine.netlevel.search": {"qverify.engine.scalar.strategy"},
        "qverify.engine.scalar.strategy": set(),
    }
    assert cycles(graph) == [["qverify.network.model", "qverify.network.spatial"]]
    assert upward_imports(graph) == [
        "qverify.engine.netlevel.search -> qverify.engine.scalar.strategy (one engine path into the other)",
        "qverify.tools -> qverify.backends.esbmc",
    ]


def test_the_reader_sees_lazy_and_type_checking_imports(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from qverify.network.spatial import Conv2D\n"
        "def f():\n    from qverify.engine.scalar import ssa\n    import qverify.cli\n"
    )
    known = modules()
    probe = Module("qverify.network.probe", source, False)
    assert imports_of(probe, known) == {"qverify.network.spatial", "qverify.engine.scalar.ssa", "qverify.cli"}
