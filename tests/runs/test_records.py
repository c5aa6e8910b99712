"""A run's records (alternet/runs/records.py): the environment a run writes beside its config."""

import subprocess

from alternet.runs import records


def test_the_code_commit_is_read_once_a_process(monkeypatch):
    """A sweep's jobs in one process ran the code it imported: each records the commit read at the first record, not
    whatever the tree holds when the job starts."""
    records.code_commit.cache_clear()
    calls = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    first = records.environment()
    asked = len(calls)
    second = records.environment()
    assert first["git_commit"] == second["git_commit"] and len(calls) == asked  # git asked once, for both records
    assert calls[0][:2] == ["git", "rev-parse"]
    records.code_commit.cache_clear()
