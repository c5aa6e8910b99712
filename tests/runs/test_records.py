"""A run's records (alternet/runs/records.py): the environment a run writes beside its config."""

import subprocess

import pytest

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


def test_an_import_that_fails_says_whether_the_module_is_missing_or_its_own_code_raised(tmp_path, monkeypatch):
    """A module that imported and then raised (a data set's name taken) was asked whether its package was
    installed."""
    from alternet.errors import ConfigValueError
    from alternet.runs.records import import_modules

    (tmp_path / "raising_module.py").write_text("raise ValueError('the name digits is taken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigValueError, match=r"\(ValueError: the name digits is taken\); its own code raised it$"):
        import_modules(["raising_module"])
    with pytest.raises(ConfigValueError, match=r"\(ModuleNotFoundError: .*\); is its package installed"):
        import_modules(["no_such_package.data"])


@pytest.mark.parametrize("value", [1e29, 1e-05, 0.1, "a+b", "/data/one class", "it's", "+x", "ü"])
def test_an_override_reads_back_as_its_value_and_a_number_is_left_unquoted(value):
    """A resume command's changed learning rate (a diverged run's, 1e+29 written as a number) reads back as the same
    value, and is not quoted as a string for the shell and Hydra."""
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    (argument,) = shlex.split(shlex.join([records.override("key", value)]))
    assert OverridesParser.create().parse_override(argument).value() == value
    if isinstance(value, float):
        assert records.override("key", value) == f"key={value}"


@pytest.mark.parametrize(
    "override", ["model.heads=[2, 2, 2]", "model.layout='C|CM|CM'", 'a="x$y"', "data.root=/a b/ü", "seed=3"]
)
def test_an_override_printed_for_the_shell_is_read_back_as_typed(override):
    """buildup's 'Train it with' command split model.heads=[2, 2, 2] into three words."""
    import subprocess

    from alternet.runs.records import shell_word

    read = subprocess.run(["bash", "-c", f"printf '%s\\0' {shell_word(override)}"], capture_output=True, check=True)
    assert read.stdout.decode().split("\0")[:-1] == [override]
