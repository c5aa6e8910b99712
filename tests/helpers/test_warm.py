"""The warm interpreter's children end as ``python SCRIPT`` would (the fault and DDP tests read their exit status and
streams): arguments, directory, environment and session; the exit status and last lines of a return, a
``sys.exit`` with a message or a number, an uncaught exception and an uncaught Ctrl-C; threads joined, atexit run."""

from __future__ import annotations

import json
import os
import signal

import pytest

from helpers import warm

# the worker of the other tests that start processes of their own: one warm interpreter for them all
pytestmark = pytest.mark.xdist_group("processes")

PROBE = """
import atexit, json, os, sys, threading, time

print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("WARM_PROBE"), "name": __name__,
                  "own_group": os.getpgid(0) == os.getpid(), "path0": sys.path[0]}), flush=True)
atexit.register(lambda: print("atexit ran", file=sys.stderr))
mode = sys.argv[1]
if mode == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
if mode == "message":
    sys.exit("error: one line")
if mode == "status":
    sys.exit(3)
if mode == "raise":
    raise ValueError("boom")
if mode == "ctrl-c":
    raise KeyboardInterrupt
"""


def run_probe(tmp_path, mode: str, new_session: bool = True) -> tuple[int, str, str]:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    out, err = tmp_path / f"{mode}.out", tmp_path / f"{mode}.err"
    env = {**os.environ, "WARM_PROBE": mode}
    process = warm.start(script, [mode], cwd=tmp_path, env=env, stdout=out, stderr=err, new_session=new_session)
    return process.wait(60), out.read_text(), err.read_text()


@pytest.mark.parametrize(
    ("mode", "status", "stderr_ends"),
    [
        ("ok", 0, "atexit ran"),
        ("thread", 0, "atexit ran"),
        ("status", 3, "atexit ran"),
        ("message", 1, "error: one line\natexit ran"),  # the message first, as the interpreter prints it
        ("raise", 1, "ValueError: boom\natexit ran"),
        ("ctrl-c", -signal.SIGINT, "KeyboardInterrupt\natexit ran"),  # CPython dies of SIGINT on an uncaught Ctrl-C
    ],
)
def test_a_warm_child_ends_as_the_interpreter_would(tmp_path, mode, status, stderr_ends):
    code, stdout, stderr = run_probe(tmp_path, mode)
    assert code == status, stderr
    assert stderr.strip().endswith(stderr_ends), stderr
    assert ("Traceback" in stderr) == (mode in ("raise", "ctrl-c"))
    started = json.loads(stdout.splitlines()[0])
    assert started == {
        "argv": [str(tmp_path / "probe.py"), mode],
        "cwd": str(tmp_path),
        "env": mode,
        "name": "__main__",
        "own_group": True,
        "path0": str(tmp_path),
    }
    assert ("thread done" in stdout) == (mode == "thread")  # a non-daemon thread is joined before the end


def test_a_warm_child_stays_in_the_callers_group_unless_asked_and_dies_of_a_signal_as_a_process(tmp_path):
    code, stdout, _ = run_probe(tmp_path, "ok", new_session=False)
    assert code == 0 and json.loads(stdout.splitlines()[0])["own_group"] is False
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    process = warm.start(script, [], cwd=tmp_path, env=dict(os.environ), stdout=tmp_path / "s.out", new_session=True)
    while "started" not in (tmp_path / "s.out").read_text():
        assert process.poll() is None
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(30) == -signal.SIGTERM
