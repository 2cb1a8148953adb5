"""Render C from the Jinja templates and bundle it with the C models it includes."""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from qverify.codegen.context import NeuronBounds, network_context
from qverify.codegen.literals import comment_safe
from qverify.errors import InputError
from qverify.quant import QuantizedNetwork
from qverify.resources import models_c_dir, templates_dir

C_MODELS = ("fxp.h", "verifier.h", "int8.h", "half.h")


@dataclass(frozen=True, slots=True)
class CProgram:
    """A generated C file and the headers it needs, ready to be written to a folder."""

    main_file: str
    text: str
    headers: tuple[str, ...] = field(default=C_MODELS)

    def write(self, directory: str | Path) -> Path:
        """Write the C file and copy the headers; returns the C file's path."""
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / self.main_file
            target.write_text(self.text)
            for header in self.headers:
                shutil.copyfile(models_c_dir() / header, directory / header)
        except OSError as error:
            raise InputError(f"cannot write to {directory}: {error.strerror}") from error
        return target


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja's cache of compiled templates on disk (a folder of this user's in the temporary
    directory, made private by Jinja): a process then loads them instead of compiling them again;
    None where no such folder can be made safely."""
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


@functools.cache
def _environment() -> jinja2.Environment:
    """One environment per process: it keeps the compiled templates (a harness and the network
    replay of its counterexample share `_network.c.j2`; compiling them costs ~20 ms of CPU, loading
    them from the bytecode cache ~1 ms)."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    environment.filters["comment_safe"] = comment_safe
    return environment


def render_template(template: str, context: dict) -> str:
    return _environment().get_template(template).render(**context)


def render_network(qnet: QuantizedNetwork, bounds: NeuronBounds | None = None) -> CProgram:
    """`network.c`: the network function and the replay main (with -DQV_REPLAY)."""
    return CProgram("network.c", render_template("network.c.j2", network_context(qnet, bounds)))


def render_lut_function(lut: dict, is_fixed: bool, half: bool) -> str:
    """The C of one lookup-table function (`templates/_lut.c.j2`), for an entry of the shape
    `context._luts_context` builds: what the network template writes, and what the lifter matches."""
    module = _environment().get_template("_lut.c.j2").module
    return str(module.lut_function(lut, is_fixed, half))  # type: ignore[attr-defined]
