"""The warm engine: engine hosts kept alive across tasks, each task in a process of its own.

A small query costs the engine ~0.1-0.3 s of reasoning and used to cost ~0.6 s of CPU more to start
its process (the interpreter, numpy, the engine's modules). An `EngineHost` is a process that has
imported the engine (`python -m qverify.backends.engine_process`); `run` has it fork one process
per task, which starts in milliseconds with everything loaded. The isolation is today's: the task's
process leads its own session, runs under RLIMIT_AS, is watched for its resident set and its
wall-clock time by this process (`process.watch`) and killed with its whole group at a limit
(`process.kill_group`); and it is a fresh copy of the host, which never runs a task itself, so no
task can leave state behind for the next (a task that exhausts its memory or its time is killed and
the next one forks from the same clean host).

Hosts are pooled per process (`acquire`/`release`): a suite's worker, `sweep`, `diff --prove`,
`repair`'s re-verification, a Dask worker, or a test session pays the imports once per host. A host
is started as soon as a task begins (`InternalBackend.prepare`), so even the first task's start
overlaps with the invariants and the harness generation. Hosts end with this process: `close` at
exit, SIGKILL from the kernel if this process dies (PR_SET_PDEATHSIG, for hosts started from the
main thread), and in any case at the end of their stdin, which only this process holds.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import psutil

from qverify.backends.base import Limits
from qverify.backends.engine_process import ONE_TASK
from qverify.backends.process import ProcessOutcome, address_space_bytes, kill_group, outcome_of, watch
from qverify.errors import InternalError
from qverify.interrupts import child_dies_with_us, die_with_parent

HOST_MODULE = "qverify.backends.engine_process"
ANSWER_WAIT_S = 5.0  # for the host's word that a killed task's process has ended


class HostEnded(Exception):
    """The host ended before it started the task (the caller starts another host)."""


class _Lines:
    """Lines from the host's stdout, with a timeout (os.read and select: no Python buffering)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = b""
        self.ended = False

    def read(self, timeout_s: float) -> str | None:
        """The next line; None after `timeout_s` without one or once the host's stdout ended."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            if self.ended:
                return None
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 12)
            self.pending += chunk
            self.ended = not chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()


class _Task:
    """A task's process, forked by the host (not our child: the host reaps it and says so)."""

    def __init__(self, pid: int, lines: _Lines) -> None:
        self.pid = pid
        self.lines = lines
        self.returncode: int | None = None
        self.cpu_s = 0.0
        self.ended = False
        self.host_ended = False

    def wait_ended(self, timeout_s: float) -> bool:
        if self.ended:
            return True
        line = self.lines.read(timeout_s)
        if line is None:
            if self.lines.ended:  # the host died; its task dies with it (PR_SET_PDEATHSIG)
                self.ended = self.host_ended = True
            return self.ended
        word, pid, code, cpu = line.split()
        if word != "ended" or int(pid) != self.pid:
            raise InternalError(f"engine host: unexpected answer {line!r}")
        self.returncode, self.cpu_s, self.ended = int(code), float(cpu), True
        return True


# The engine's products run on one BLAS thread (`netlevel.search.decide`; on a shared machine BLAS
# threads spinning on two cores made them up to 10x slower). A host whose OpenBLAS starts its own
# pool anyway pays ~0.1 s of CPU for it at `import numpy`, on the core the command is importing on.
SINGLE_THREADED_BLAS = {"OPENBLAS_NUM_THREADS": "1"}


def host_environment() -> dict[str, str]:
    """The host's environment: the command's, with BLAS on one thread."""
    return {**os.environ, **SINGLE_THREADED_BLAS}


class _ForkedHost:
    """A host forked from this process (`EngineHost(forked=True)`), with what `EngineHost` uses of a
    `subprocess.Popen`: its pid, its stdin and stdout pipes, `poll` and `wait`."""

    def __init__(self, stderr: int) -> None:
        to_host, from_parent = os.pipe()
        from_host, to_parent = os.pipe()
        parent = os.getpid()
        for stream in (sys.stdout, sys.stderr):  # nothing of ours is written twice
            stream.flush()
        self.pid = os.fork()
        if self.pid == 0:
            _become_host(parent, to_host, to_parent, stderr, (from_parent, from_host))
        os.close(to_host)
        os.close(to_parent)
        self.stdin = os.fdopen(from_parent, "wb", buffering=0)
        self.stdout = os.fdopen(from_host, "rb", buffering=0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"engine host {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode


def _become_host(parent: int, stdin: int, stdout: int, stderr: int, others: tuple[int, ...]) -> None:
    """In the forked child: a session of its own, death with `parent`, the pipes as stdin and
    stdout, then the host's loop (`engine_process.main`) and the end, never a return into the
    command that forked it."""
    code = 1
    try:
        os.setsid()
        die_with_parent(signal.SIGKILL, parent)
        for fd in others:
            os.close(fd)
        for target, source in ((0, stdin), (1, stdout), (2, stderr)):
            os.dup2(source, target)
        os.environ.update(SINGLE_THREADED_BLAS)  # for what the tasks start (numpy's pool is the parent's)
        from qverify.backends import engine_process

        code = engine_process.main(one_task=True)
    except BaseException:  # noqa: BLE001 - the host's stderr, as for a host that crashed
        traceback.print_exc()
    finally:
        os._exit(code)


class EngineHost:
    """One engine host process; `run` executes one engine command line in a fork of it."""

    def __init__(self, one_task: bool = False, forked: bool = False) -> None:
        """`one_task`: the host of a command that runs one task (`qverify verify`), which imports
        only what every task needs (`engine_process.ONE_TASK`): the rest would be CPU spent for
        nothing unless the task needs it, and then the task imports it itself. `forked` (for such a
        command, before it starts a thread): the host is a fork of this process, which has imported
        numpy, rather than a new interpreter (~0.1 s of CPU less: the interpreter, numpy, qverify's
        first modules, not imported twice)."""
        self.folder = Path(tempfile.mkdtemp(prefix="qverify-engine-"))
        self._stderr = (self.folder / "host.err").open("w+", encoding="utf-8", errors="replace")
        if forked:
            self.process: subprocess.Popen | _ForkedHost = _ForkedHost(self._stderr.fileno())
        else:
            self.process = subprocess.Popen(
                [sys.executable, "-m", HOST_MODULE, str(self.folder), *([ONE_TASK] if one_task else [])],
                env=host_environment(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                start_new_session=True,
                bufsize=0,
                preexec_fn=child_dies_with_us(),  # noqa: PLW1509 - dies with us, even by SIGKILL
            )
        self._lines = _Lines(self.process.stdout.fileno())  # type: ignore[union-attr]
        self.tasks = 0  # tasks run so far
        self.ready = False  # the host said it has imported the engine

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until the host has imported the engine; False if it has not
        (or ended)."""
        if not self.ready:
            line = self._lines.read(timeout_s)
            if line is not None and line != "ready":
                raise InternalError(f"engine host: unexpected answer {line!r}")
            self.ready = line == "ready"
        return self.ready

    @property
    def alive(self) -> bool:
        return self.process.poll() is None and not self._lines.ended

    def run(self, argv: Sequence[str], limits: Limits) -> ProcessOutcome:
        """`python -m qverify.engine ARGV` in a fresh process under `limits` (counted from now: a
        host still importing uses the task's time, as a process started for the task would).

        :raises HostEnded: the host ended before it started the task.
        """
        start = time.monotonic()
        out, err = self.folder / "task.out", self.folder / "task.err"
        request = {
            "argv": list(argv),
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "address_space": address_space_bytes(limits.memory_mb),
            "out": str(out),
            "err": str(err),
        }
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())  # type: ignore[union-attr]
        except (BrokenPipeError, OSError, ValueError) as error:
            raise HostEnded(self._stderr_tail()) from error
        self.tasks += 1
        task: _Task | None = None
        try:
            self.wait_ready(limits.timeout_s)
            waited = time.monotonic() - start
            started = self._lines.read(max(0.0, limits.timeout_s - waited))
            if started is None:
                if self._lines.ended:
                    raise HostEnded(self._stderr_tail())
                self.close(kill=True)  # still importing when the task's time ran out
                return outcome_of(None, "", "", start, (0.0, True, False), limits, 0.0)
            task = _Task(int(started.split()[1]), self._lines)
            watched = watch(task, limits, start)
            kill_group(task)
        except BaseException:
            if task is not None and not task.ended:  # interrupted: nothing may outlive the task
                kill_group(_Abandoned(task.pid))
            self.close(kill=True)
            raise
        stdout, stderr = _read(out), _read(err)
        if task.host_ended:
            stderr += f"\nthe engine host ended during the task: {self._stderr_tail()}"
        return outcome_of(task.returncode, stdout, stderr, start, watched, limits, task.cpu_s, waited)

    def close(self, kill: bool = False) -> None:
        """End the host (a task it still runs dies with it: PR_SET_PDEATHSIG), at once with `kill`
        (SIGKILL to its process group: the host and a task not yet in a session of its own), else
        when it reads the end of its stdin; its folder goes too."""
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
            try:
                self.process.wait(timeout=ANSWER_WAIT_S)
            except subprocess.TimeoutExpired:
                kill_group(_Abandoned(self.process.pid, self.process))
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _stderr_tail(self) -> str:
        """The host's last words (its stderr), for an error message."""
        if self._stderr.closed:
            return "the host was closed"
        self._stderr.flush()
        self._stderr.seek(0)
        return " | ".join(self._stderr.read().strip().splitlines()[-3:]) or "no message"


class _Abandoned:
    """A process to kill whose end no one will report (an interrupted task, a host that hangs)."""

    def __init__(self, pid: int, child: subprocess.Popen | None = None) -> None:
        self.pid = pid
        self.child = child

    def wait_ended(self, timeout_s: float) -> bool:
        if self.child is not None:
            try:
                self.child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        time.sleep(min(timeout_s, 0.01))
        return True


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# ----------------------------------------------------------------------------- the pool

_lock = threading.Lock()
_idle: list[EngineHost] = []
_every: list[EngineHost] = []


def acquire(one_task: bool = False, forked: bool = False) -> EngineHost:
    """An idle host of this process, or a new one (its imports then overlap with the caller's work;
    `one_task`, `forked`: see `EngineHost`)."""
    with _lock:
        while _idle:
            host = _idle.pop()
            if host.alive:
                return host
            _forget(host)
        host = EngineHost(one_task, forked)
        _every.append(host)
        return host


def prewarm(one_task: bool = False) -> None:
    """Have an idle host ready (started now if there is none): a caller about to run tasks in this
    process lets the host import the engine while it reads its inputs. `one_task`: a command that
    runs one task (`qverify verify`), called before it starts any thread: its host is forked from
    it once it has imported numpy (`EngineHost`), with BLAS on one thread in both."""
    if one_task:
        for name, value in SINGLE_THREADED_BLAS.items():  # before numpy: one query's products are small
            os.environ.setdefault(name, value)
        import numpy  # noqa: F401 - imported once, for both processes

        release(acquire(one_task=True, forked=threading.active_count() == 1))
        return
    release(acquire())


def release(host: EngineHost) -> None:
    """Give a host back for the next task (a host that ended is closed instead)."""
    with _lock:
        if host.alive and host in _every:
            _idle.append(host)
            return
        _forget(host)


def discard(host: EngineHost) -> None:
    """Close a host that failed (the next `acquire` starts another)."""
    with _lock:
        _forget(host)


def _forget(host: EngineHost) -> None:
    if host in _every:
        _every.remove(host)
    host.close()


def hosts_cpu_s() -> float:
    """User + system seconds the live hosts of this process have used themselves (their imports
    and forks; their tasks' processes are counted with each task): the warm engine's share of a
    comparison of whole processes (benchmarks/thesis_comparison.py)."""
    with _lock:
        hosts = list(_every)
    total = 0.0
    for host in hosts:
        try:
            times = psutil.Process(host.process.pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def shutdown() -> None:
    """Close every host of this process (at exit; tests use it to start from none). They are
    killed, not asked to end: a host holds nothing worth keeping, and one still importing
    (`engine_process.IDLE_IMPORTS`) would keep this process's exit waiting (~50 ms of every
    `qverify verify`)."""
    with _lock:
        hosts, _every[:], _idle[:] = list(_every), [], []
    for host in hosts:
        host.close(kill=True)


def _forget_inherited() -> None:
    """In a child forked from this process: the hosts are the parent's, not its own."""
    global _lock
    _lock = threading.Lock()
    _every.clear()
    _idle.clear()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_inherited)
