"""alternet.files: a folder written whole or not at all (:func:`whole_directory`), whatever stops its writer."""

from __future__ import annotations

import errno
import functools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from alternet import files
from alternet.files import WriteError, stale_directories, whole_directory, write_text

from helpers.warm import as_a_terminal_starts_it


def _earlier(out):
    out.mkdir()
    (out / "a.txt").write_text("earlier a\n")
    (out / "only_earlier.txt").write_text("earlier only\n")
    return {path.name: path.read_text() for path in out.iterdir()}


def _contents(out):
    return {path.name: path.read_text() for path in out.iterdir()}


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_finished_folder_replaces_the_earlier_one_whole(tmp_path, monkeypatch, exchange):
    """The new folder takes the earlier one's place: its files, none of the earlier's (a stale figure of an earlier
    report would otherwise sit beside the new ones), readable by others, and nothing staged left beside it."""
    if not exchange:  # a system without renameat2: moved aside, then renamed
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    _earlier(out)
    with whole_directory(out) as staged:
        assert staged.parent == out.parent and staged.name.startswith(".out.")
        write_text(staged / "a.txt", "new a\n")
        write_text(staged / "b.txt", "new b\n")
        assert _contents(out)["a.txt"] == "earlier a\n"  # nothing reaches out before the end
    assert _contents(out) == {"a.txt": "new a\n", "b.txt": "new b\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert out.stat().st_mode & 0o777 == 0o777 & ~files._UMASK


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_folder_that_cannot_be_replaced_is_one_line_and_stays_as_it_was(tmp_path, monkeypatch, exchange):
    """Putting the new folder in place can fail (EBUSY: OUT is a mount point): one line, the earlier folder kept."""
    busy = OSError(errno.EBUSY, os.strerror(errno.EBUSY))
    rename = os.rename

    def refuse_into_out(source, target):  # the new folder's rename only: the earlier one may move back
        if Path(target).name == "out" and Path(source).name.endswith(files.STAGING_SUFFIX):
            raise busy
        rename(source, target)

    if exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: (_ for _ in ()).throw(busy))
    else:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
        monkeypatch.setattr(files.os, "rename", refuse_into_out)
    out = tmp_path / "out"
    before = _earlier(out)
    refused = r"could not put the new .*out in place: Device or resource busy \(EBUSY\)"
    with pytest.raises(WriteError, match=refused), whole_directory(out) as staged:
        write_text(staged / "a.txt", "new a\n")
    assert _contents(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_writer_clears_only_its_own_unfinished_siblings(tmp_path):
    """OUT named vit clears what a killed writer of vit left, never the folder another writer is building now for
    an OUT named vit.ema (.vit.ema.XXXXXXXX.partial starts like vit's own)."""
    killed, building = tmp_path / ".vit.k2j3h4ab.partial", tmp_path / ".vit.ema.a1b2c3d4.partial"
    killed.mkdir()
    building.mkdir()
    assert stale_directories(tmp_path / "vit") == [killed]
    with whole_directory(tmp_path / "vit") as staged:
        write_text(staged / "a.txt", "a\n")
    assert building.is_dir() and not killed.exists()


def test_a_folder_written_whole_is_refused_at_a_mount_point_before_any_work(tmp_path, monkeypatch):
    """A bind-mounted OUT (a container's volume) cannot be replaced by a rename: refused before the work."""
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(files.os.path, "ismount", lambda path: Path(path) == out)
    check = functools.partial(files.check_output_dir, out, "export destination", lambda path: True, "an export")
    assert check() == out  # written into, not replaced: a mount point is fine
    with pytest.raises(WriteError, match=r"export destination .*out is a mount point, which a folder written whole"):
        check(whole=lambda name: True)


def test_a_failure_while_writing_leaves_the_earlier_folder_as_it_was(tmp_path):
    out = tmp_path / "out"
    before = _earlier(out)
    with pytest.raises(RuntimeError, match="broken"), whole_directory(out) as staged:
        write_text(staged / "a.txt", "new a\n")
        raise RuntimeError("broken")
    assert _contents(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(KeyboardInterrupt), whole_directory(tmp_path / "new") as staged:  # Ctrl-C, a new folder
        write_text(staged / "a.txt", "new a\n")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_full_disk_names_the_file_by_its_place_in_the_folder(tmp_path, monkeypatch):
    out = tmp_path / "out"
    before = _earlier(out)

    def disk_full(*args, **kwargs):
        raise OSError(28, os.strerror(28))

    monkeypatch.setattr(files.os, "replace", disk_full)
    with pytest.raises(WriteError) as error, whole_directory(out) as staged:
        write_text(staged / "a.txt", "new a\n")
    assert str(error.value) == (
        f"could not write {out / 'a.txt'}: No space left on device (ENOSPC); its previous version is intact. Free "
        "space, or make the directory writable"
    )
    assert _contents(out) == before


WRITER = """
import sys, time
from pathlib import Path
from alternet.files import whole_directory, write_text
out = Path(sys.argv[1])
with whole_directory(out) as staged:
    write_text(staged / "a.txt", "new a\\n")
    print("writing", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGTERM", "SIGINT"])
def test_a_writer_stopped_by_any_signal_mid_folder_leaves_the_earlier_one_intact(tmp_path, stop):
    """SIGTERM and SIGKILL end the process where it is (no ``finally``): the earlier folder is whole, and what was
    staged lies in a hidden sibling that the next writer removes; SIGINT unwinds and removes it at once."""
    out = tmp_path / "out"
    before = _earlier(out)
    writer = subprocess.Popen(  # SIGINT at its default, as a terminal starts it (the suite may run with it ignored)
        [sys.executable, "-c", textwrap.dedent(WRITER), str(out)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=as_a_terminal_starts_it,
    )
    try:
        assert writer.stdout.readline().strip() == "writing"
        writer.send_signal(getattr(signal, stop))
        writer.wait(timeout=30)
    finally:
        writer.kill()
    assert _contents(out) == before
    left = stale_directories(out)
    assert len(left) == (0 if stop == "SIGINT" else 1)
    with whole_directory(out) as staged:  # the next writer clears what a killed one left
        write_text(staged / "a.txt", "again\n")
    assert _contents(out) == {"a.txt": "again\n"} and stale_directories(out) == []


def _run_folder(out):
    """A folder of a run's records beside an earlier command's products."""
    (out / ".hydra").mkdir(parents=True)
    (out / ".hydra" / "config.yaml").write_text("records\n")
    (out / "evaluate.log").write_text("log\n")
    (out / "metrics.json").write_text("earlier metrics\n")
    (out / "plot.png").write_text("earlier plot\n")
    (out / "0-a").mkdir()
    (out / "0-a" / "metrics.json").write_text("earlier a\n")
    return {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()}


PRODUCT = lambda path: path.name in ("metrics.json", "plot.png", "0-a", "new.png")  # noqa: E731


def test_products_replace_the_earlier_products_whole_and_leave_the_rest(tmp_path):
    """The new products take the earlier ones' place (an earlier product the new set lacks goes too); the run's
    records and log, which are not products, stay; nothing staged is left."""
    out = tmp_path / "out"
    before = _run_folder(out)
    with files.whole_products(out, PRODUCT) as staged:
        assert staged.parent == out and staged.name.startswith(".products.")
        write_text(staged / "metrics.json", "new metrics\n")
        write_text(staged / "new.png", "new plot\n")
        assert {
            str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file() and p.parent != staged
        } == before
    assert {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()} == {
        ".hydra/config.yaml": "records\n",
        "evaluate.log": "log\n",
        "metrics.json": "new metrics\n",
        "new.png": "new plot\n",
    }


def test_products_stopped_or_failing_to_move_in_leave_the_earlier_ones(tmp_path, monkeypatch):
    out = tmp_path / "out"
    before = _run_folder(out)
    with pytest.raises(KeyboardInterrupt), files.whole_products(out, PRODUCT) as staged:
        write_text(staged / "metrics.json", "new metrics\n")
        raise KeyboardInterrupt
    assert {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()} == before
    rename = os.rename

    def refuse_the_second(source, target):  # the second new product cannot move in: all goes back
        if Path(target) == out / "new.png":
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        rename(source, target)

    monkeypatch.setattr(files.os, "rename", refuse_the_second)
    refused = f"could not put the new files in {out}: .*the earlier ones are unchanged"
    with pytest.raises(WriteError, match=refused), files.whole_products(out, PRODUCT) as staged:
        write_text(staged / "metrics.json", "new metrics\n")
        write_text(staged / "new.png", "new plot\n")
    assert {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir()) == [".hydra", "0-a", "evaluate.log", "metrics.json", "plot.png"]


PRODUCTS_WRITER = """
import sys, time
from pathlib import Path
from alternet.files import whole_products, write_text
out = Path(sys.argv[1])
with whole_products(out, lambda path: path.name == "a.txt") as staged:
    write_text(staged / "a.txt", "new a\\n")
    print("writing", flush=True)
    time.sleep(60)
"""


def test_products_killed_mid_way_leave_the_earlier_ones_and_the_next_writer_clears_the_rest(tmp_path):
    out = tmp_path / "out"
    before = _earlier(out)
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PRODUCTS_WRITER), str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "writing"
        writer.kill()
        writer.wait(timeout=30)
    finally:
        writer.kill()
    assert {p.name: p.read_text() for p in out.iterdir() if p.is_file()} == before
    assert len([p for p in out.iterdir() if p.name.startswith(".products.")]) == 1
    with files.whole_products(out, lambda path: path.name == "a.txt") as staged:
        write_text(staged / "a.txt", "again\n")
    assert _contents(out) == {"a.txt": "again\n", "only_earlier.txt": "earlier only\n"}


SIGNALLED_WRITER = """
import os, signal, sys
from pathlib import Path
from alternet import files
out, whole, sent = Path(sys.argv[1]), sys.argv[2] == "folder", getattr(signal, sys.argv[3])
signal.signal(signal.SIGTERM, lambda *args: print("its own handler ran"))  # a scheduler's: a requeue
swap, move = files._swap, files._move
def signalled(do):  # a stop while the new folder is being put in place (the stop signals blocked)
    def done(*args, **kwargs):
        os.kill(os.getpid(), sent)
        return do(*args, **kwargs)
    return done
files._swap, files._move = signalled(swap), signalled(move)
try:
    with files.whole_directory(out) if whole else files.whole_products(out, lambda p: True) as staged:
        files.write_text(staged / "a.txt", "new a\\n")
except files.StoppedWhenWritten as error:
    print(error)
"""


@pytest.mark.parametrize("whole", ["folder", "products"])
@pytest.mark.parametrize("sent", ["SIGINT", "SIGTERM"])
def test_a_stop_while_the_folder_is_put_in_place_says_it_is_complete(tmp_path, whole, sent):
    """A stop signal waits while the new folder is put in place; a Ctrl-C then stops the command without saying that
    the earlier folder is kept (the new one is there, complete); a scheduler's signal goes to its own handler."""
    out = tmp_path / "out"
    _earlier(out)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SIGNALLED_WRITER), str(out), whole, sent],
        capture_output=True,
        text=True,
        preexec_fn=as_a_terminal_starts_it,
        timeout=60,
    )
    said = f"stopped by SIGINT once {out} was written: it is complete" if sent == "SIGINT" else "its own handler ran"
    assert done.stdout.strip() == said, done.stderr
    assert _contents(out) == {"a.txt": "new a\n"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_worker_ends_with_the_command_that_started_it_and_releases_its_lock(tmp_path):
    """A command killed outright (SIGKILL, the OOM killer) left its workers running for minutes: they went on writing
    its output and held its folder's lock, which the next command then refused under the dead command's pid."""
    lock = tmp_path / ".lock"
    command = textwrap.dedent(
        f"""
        import multiprocessing, os, sys, time
        from pathlib import Path
        from alternet.files import die_with_parent, lock_file

        def work():
            die_with_parent()
            time.sleep(60)

        held = lock_file(Path({str(lock)!r}))
        worker = multiprocessing.get_context("fork").Process(target=work)
        worker.start()
        print(worker.pid, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", command], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    for _ in range(100):  # the kernel signals it at once; dead, it may stay a zombie until something reaps it
        if not _alive(worker):
            break
        time.sleep(0.05)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived the command that started it")
    files.lock_file(lock).close()  # free: no LockBusy


def test_an_output_through_a_link_is_written_into_the_folder_it_names(tmp_path):
    """A folder written whole was put in the link's place: the link became a folder and its target got nothing."""
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    out = files.check_output_dir(tmp_path / "link", "output", lambda _: False, "ours", whole=lambda name: True)
    assert out == tmp_path / "target"
    with whole_directory(out) as staged:
        write_text(staged / "a.txt", "new\n")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "target" / "a.txt").read_text() == "new\n"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "target" / "inner").symlink_to(tmp_path / "loop1")  # a good link, then a loop below it
    (tmp_path / "target" / "gone").symlink_to(tmp_path / "nowhere")
    cases = [("dangling", "is a link to .*nowhere, which does not exist"), ("loop1/x", "leads back")]
    cases += [("link/inner/x", "leads back"), ("link/gone/x", "is a link to .*nowhere, which does not exist")]
    for where, message in cases:
        with pytest.raises(WriteError, match=rf"^output .* cannot be made: .* {message}"):
            files.check_output_dir(tmp_path / where, "output", lambda _: False, "ours")


def test_a_yaml_file_that_does_not_parse_is_named_in_one_line(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("data: [unclosed\n  foo: : :\n")
    with pytest.raises(files.AlternetError, match=r"config\.yaml is unreadable or not valid YAML: .*line \d+") as error:
        files.read_yaml(path)
    assert "\n" not in str(error.value)


def _alive(pid: int) -> bool:
    """Running or sleeping: not gone, and not a zombie (dead, not yet reaped by its new parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
