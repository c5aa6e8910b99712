"""Real processes without a fresh interpreter's ~8 s of imports: a warm interpreter per test process (started on
first use) that has imported alternet's commands once, and forks a child per command line.

A warm child is a process of its own, as ``python SCRIPT ARGS`` would start it: its own pid (and, when asked, its own
session and process group, which a test signals as a terminal or SLURM would), its own environment, working directory
and ``sys.argv``, the script run as ``__main__``, and the interpreter's own ending (``SystemExit``'s message and
status, an uncaught exception's traceback and status 1, Ctrl-C's death by SIGINT, threads joined, ``atexit`` run). What
it cannot be is a fresh interpreter: what a library reads once at import (``ATEN_CPU_CAPABILITY``, the Hugging Face
endpoint, the albumentations checks) is the warm interpreter's, and so are import-time failures. Tests of those, and
one end-to-end test per command, start a fresh interpreter (:func:`helpers.processes.run_script`).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What the warm interpreter imports before its first fork: the commands and what a run imports on its way.
PRELOAD = (
    "alternet.apps.cli",
    "alternet.data",
    "alternet.training",
    "alternet.report.figures",
    "lightning.pytorch",
    "matplotlib.pyplot",
)


class WarmProcess:
    """A started warm child, with the part of :class:`subprocess.Popen` the tests use."""

    def __init__(self, server: _Server, pid: int, args: list[str]):
        self._server, self.pid, self.args = server, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.request(op="poll", pid=self.pid)["returncode"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode


def start(
    script: str | Path,
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdout: Path,
    stderr: Path | None = None,
    new_session: bool = False,
) -> WarmProcess:
    """``python SCRIPT ARGS`` as a warm child: stdout to the file ``stdout``, stderr to ``stderr`` (the same file when
    None), in a session of its own when ``new_session``."""
    server = _Server.get()
    for path in {stdout, stderr or stdout}:  # there, empty, before start returns (a test may read them at once)
        Path(path).write_bytes(b"")
    argv = [str(script), *args]
    pid = server.request(
        op="start",
        argv=argv,
        cwd=str(cwd),
        env=env,
        stdout=str(stdout),
        stderr=str(stderr or stdout),
        new_session=new_session,
    )["pid"]
    return WarmProcess(server, pid, [sys.executable, *argv])


def run(script: str, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """:func:`helpers.processes.run_script`'s result, from a warm child."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = start(Path(cwd) / script, list(args), cwd=cwd, env=env, stdout=out, stderr=err)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, 9)
            process.wait()
            raise
        return subprocess.CompletedProcess(process.args, process.returncode, out.read_text(), err.read_text())


def as_a_terminal_starts_it() -> None:
    """Ctrl-C's signal at its default, as a terminal starts a command: the test run itself may have been started
    with SIGINT ignored (a shell's background job, ``nohup``), which every child would inherit, and a run that starts
    with SIGINT ignored keeps ignoring it (tests/test_faults.py tests that case on its own)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Server:
    """The warm interpreter: this file run as a script, one request and one answer per line (JSON) on its pipes."""

    _instance: _Server | None = None

    @classmethod
    def get(cls) -> _Server:
        if cls._instance is None or cls._instance.process.poll() is not None:
            cls._instance = cls()
            atexit.register(cls._instance.close)
        return cls._instance

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=as_a_terminal_starts_it,
        )
        ready = self.process.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"the warm interpreter did not start: {ready!r}")

    def request(self, **message) -> dict:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"the warm interpreter refused {message['op']}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(30)


# the warm interpreter's side -------------------------------------------------------------------------------------


def _serve() -> None:
    import importlib
    import threading

    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork copies only the forking thread: a library's thread would be lost
        raise SystemExit(f"the warm interpreter started threads while importing: {threading.enumerate()}")
    requests, answers = sys.stdin, sys.stdout
    print("ready", file=answers, flush=True)
    for line in requests:
        message = json.loads(line)
        try:
            if message["op"] == "start":
                answer = {"pid": _fork(message)}
            else:
                pid, status = os.waitpid(message["pid"], os.WNOHANG)
                answer = {"returncode": None if pid == 0 else os.waitstatus_to_exitcode(status)}
        except OSError as error:
            answer = {"error": str(error)}
        print(json.dumps(answer), file=answers, flush=True)


def _fork(message: dict) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        _become(message)
    except BaseException:  # the child must never return into the server's loop
        import traceback

        traceback.print_exc()
        os._exit(70)
    os._exit(_run_as_main(message["argv"]))


def _become(message: dict) -> None:
    """This fork as ``python ARGV`` started by its parent: session, directory, environment, streams, arguments."""
    import io

    if message["new_session"]:
        os.setsid()
    os.chdir(message["cwd"])
    os.environ.clear()
    os.environ.update(message["env"])
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    out = os.open(message["stdout"], flags, 0o644)
    err = out if message["stderr"] == message["stdout"] else os.open(message["stderr"], flags, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
    for fd in {null, out, err}:
        os.close(fd)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))  # as the interpreter opens its streams on files

    def stream(fd: int, **text) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        buffered = raw if unbuffered and fd else (io.BufferedReader if fd == 0 else io.BufferedWriter)(raw)
        return io.TextIOWrapper(buffered, write_through=unbuffered, **text)

    sys.stdin, sys.stdout = stream(0), stream(1)
    sys.stderr = stream(2, errors="backslashreplace", line_buffering=True)
    sys.argv = list(message["argv"])
    sys.path[0] = str(Path(sys.argv[0]).resolve().parent)
    added = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path and path not in sys.path]
    sys.path[1:1] = added  # after the script's folder, as a fresh interpreter puts them
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))


def _run_as_main(argv: list[str]) -> int:
    """Run the script as ``__main__`` and end as the interpreter would: the exit status."""
    import atexit as exits
    import runpy
    import signal
    import threading
    import traceback

    interrupted = False
    try:
        runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exited:
        code = _system_exit_status(exited.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code, interrupted = 1, True
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # the interpreter joins non-daemon threads before atexit
    exits._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if interrupted:  # CPython ends an uncaught Ctrl-C by dying of SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _system_exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    _serve()
