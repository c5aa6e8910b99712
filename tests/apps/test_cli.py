"""The installed command line (``alternet``, the one console script; alternet/apps/cli.py): ``--help`` listing the
config groups, the configs packaged in the wheel and composed from ``pkg://alternet.conf`` in any directory, and
(slow) a non-editable install into a fresh venv that trains, evaluates and exports from a directory outside the
checkout. Every command and its spellings: tests/apps/test_commands.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from alternet.apps import cli

from helpers import HEAVY_IMPORTS, ROOT

# pytest-xdist: the whole module on one worker, so that its wheel (session-scoped) is made once
pytestmark = pytest.mark.xdist_group("test_cli")

SCRIPTS = {"alternet": "alternet.apps.cli:main"}  # the older alternet-train, -evaluate and -hub are retired


def package_files() -> set[str]:
    """Every file of the package's source tree and of conf/ (shipped as ``alternet.conf``), as wheel paths
    (``alternet/conf/train.yaml``)."""
    trees = {ROOT / "alternet": "alternet", ROOT / "conf": "alternet/conf"}
    return {
        f"{prefix}/{path.relative_to(root).as_posix()}"
        for root, prefix in trees.items()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and not path.name.startswith(".")
    }


def test_pyproject_lists_every_package_and_config_group():
    """setuptools' ``packages`` is a list (conf/ maps onto ``alternet.conf``, which discovery cannot express): a new
    package or config folder missing from it would leave the wheel without its files."""
    declared = set(re.findall(r'^    "(alternet[\w.]*)",$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE))
    modules = (ROOT / "alternet").rglob("__init__.py")
    packages = {p.parent.relative_to(ROOT).as_posix().replace("/", ".") for p in modules}
    groups = {
        "alternet." + d.relative_to(ROOT).as_posix().replace("/", ".")
        for d in [ROOT / "conf", *(ROOT / "conf").rglob("*")]
        if d.is_dir() and d.name != "__pycache__"
    }
    assert declared == packages | groups, declared ^ (packages | groups)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout (an in-tree build would leave build/ and egg-info behind)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "NOTICE"):
        shutil.copy2(ROOT / name, source / name)
    for tree in ("alternet", "conf"):
        shutil.copytree(ROOT / tree, source / tree, ignore=shutil.ignore_patterns("__pycache__", ".*"))
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    built = subprocess.run([*command, str(source), "-w", tmp / "dist"], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (path,) = (tmp / "dist").glob("alternet-*.whl")
    return path


def test_pyproject_declares_the_one_command():
    section = (ROOT / "pyproject.toml").read_text().split("[project.scripts]\n")[1].split("\n[")[0]
    assert dict(re.findall(r'^([\w-]+) = "(\S+)"$', section, re.MULTILINE)) == SCRIPTS
    for name, target in SCRIPTS.items():
        module, function = target.split(":")
        assert callable(getattr(sys.modules[module], function)), name
    assert cli.train_main.__wrapped__.__name__ == "train_main"  # Hydra mains
    assert cli.evaluate_main.__wrapped__.__name__ == "evaluate_main"


def test_the_checkout_scripts_are_the_installed_commands():
    """train.py and evaluate.py run the functions the console scripts run (so the two cannot drift apart)."""
    for script, function in (("train.py", "train_main"), ("evaluate.py", "evaluate_main")):
        assert f"from alternet.apps.cli import {function} as main" in (ROOT / script).read_text()


def test_the_wheel_holds_every_file_of_the_package_and_the_entry_points(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        declared = archive.read(entry_points).decode()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = archive.read(metadata).decode().split("\n\n")[0]
    assert "License-Expression: MIT" in headers  # PEP 639, and the notices of the Apache-2.0 sources it ports
    assert "Project-URL: Paper, https://arxiv.org/abs/2202.06709" in headers
    assert "Classifier: Topic :: Scientific/Engineering :: Image Recognition" in headers
    assert {n.rsplit("/", 1)[-1] for n in names if "/licenses/" in n} == {"LICENSE", "NOTICE"}
    expected = package_files()
    assert {n for n in expected if n.startswith("alternet/conf/")} >= {
        "alternet/conf/train.yaml",
        "alternet/conf/evaluate.yaml",
        "alternet/conf/hydra/launcher/slurm.yaml",
        "alternet/conf/experiment/paper/locality.yaml",
    }
    assert expected - names == set()  # every config (any depth), alexnet.yaml, every module
    parsed = dict(re.findall(r"^(\S+) = (\S+)$", declared.split("[console_scripts]")[1], re.MULTILINE))
    assert parsed == SCRIPTS


def test_the_packaged_config_composes_outside_the_checkout(tmp_path, monkeypatch):
    """``pkg://alternet.conf`` from a directory holding no configs; run directories are relative to that directory."""
    monkeypatch.chdir(tmp_path)
    with initialize_config_module("alternet.conf", version_base="1.3"):
        cfg = compose("train", overrides=["model=alternet_r50", "data=cifar100"], return_hydra_config=True)
        evaluation = compose("evaluate", overrides=["ckpt=RUN"], return_hydra_config=True)
    assert (cfg.model.name, cfg.data.name, cfg.recipe.name) == ("alternet_r50", "cifar100", "paper")
    assert (cfg.hydra.job.name, evaluation.hydra.job.name) == ("train", "evaluate")  # train.log, not cli.log
    run_dir = OmegaConf.select(cfg, "hydra.run.dir")
    eval_dir = OmegaConf.select(evaluation, "hydra.run.dir")
    assert run_dir.startswith("outputs/runs/") and eval_dir.startswith("outputs/eval/")  # under the current directory
    assert cfg.paths.data_dir == os.environ.get("ALTERNET_DATA_DIR", "data")


def run_help(main, argv0: str, monkeypatch, capsys, *overrides: str) -> str:
    monkeypatch.setattr(sys, "argv", [argv0, *overrides, "--help"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code in (0, None)
    return capsys.readouterr().out


def test_help_lists_the_config_groups_their_options_and_examples(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    text = run_help(cli.train_main, "train.py", monkeypatch, capsys)  # alternet train --help: test_commands
    groups = dict(re.findall(r"^([\w/]+): (.+)$", text, re.MULTILINE))
    assert {"model", "data", "recipe", "trainer", "experiment", "experiment/paper", "debug"} <= set(groups)
    assert {"alternet_r50", "alternet_tiny", "preresnet50", "vit_ti_cifar"} <= set(groups["model"].split(", "))
    assert {"cifar100", "digits", "imagefolder", "imagenet"} <= set(groups["data"].split(", "))
    assert {"paper", "weak", "fast"} <= set(groups["recipe"].split(", "))
    assert "locality" in groups["experiment/paper"].split(", ")
    assert text.startswith("alternet train: train an image classifier")
    assert "alternet train debug=fast" in text and "python train.py" in text and "alternet-train" not in text
    assert groups["hydra/launcher"] == "slurm" and groups["evaluation"] == "default"  # alternet's, as docs/ lists
    assert [g for g in groups if g.startswith("hydra/")] == ["hydra/launcher"]  # Hydra's own groups left out
    assert not list(tmp_path.iterdir())  # nothing written

    text = run_help(cli.evaluate_main, "evaluate.py", monkeypatch, capsys)
    assert text.startswith("alternet evaluate: score models")
    assert re.search(r"^analysis: .*fourier", text, re.MULTILINE) and "alternet evaluate ckpt=" in text
    groups = set(re.findall(r"^([\w/]+): ", text, re.MULTILINE))
    assert {"data", "analysis", "recipe"} <= groups and not groups & {"model", "trainer", "experiment", "debug"}

    (tmp_path / "conf" / "model").mkdir(parents=True)  # the user's own options: listed beside alternet's
    (tmp_path / "conf" / "model" / "my_tiny.yaml").write_text("defaults:\n  - alternet_tiny\n  - _self_\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    text = run_help(cli.train_main, "train.py", monkeypatch, capsys, searchpath)
    assert "my_tiny" in dict(re.findall(r"^([\w/]+): (.+)$", text, re.MULTILINE))["model"].split(", ")


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed (not editable). Its dependencies come from this interpreter's
    site-packages through a .pth file (nothing is downloaded); that directory holds the editable alternet only as an
    import hook, which a path added by a .pth file does not run, so ``import alternet`` finds the wheel's copy."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site) / "_alternet_test_deps.pth").write_text("".join(f"{path}\n" for path in ours))
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q"]
    done = subprocess.run([*install, str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return venv


def run_installed(venv: Path, command: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "WANDB_MODE": "disabled"}
    env |= {"NO_ALBUMENTATIONS_UPDATE": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_non_editable_install_trains_evaluates_and_exports_from_any_directory(installed, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    site = run_installed(installed, "python", "-c", "import alternet; print(alternet.__file__)", cwd=work)
    assert Path(site.stdout.strip()).is_relative_to(installed), site.stdout + site.stderr  # the wheel's copy

    helped = run_installed(installed, "alternet", "train", "--help", cwd=work)
    assert helped.returncode == 0 and re.search(r"^model: .*alternet_r50", helped.stdout, re.MULTILINE)

    listed = run_installed(installed, "alternet", "--help", cwd=work)
    assert listed.returncode == 0 and all(f"\n  {name} " in listed.stdout for name in cli.COMMANDS), listed.stdout

    trained = run_installed(installed, "alternet", "train", "debug=fast", cwd=work)  # the command ...
    assert trained.returncode == 0, trained.stderr[-3000:]
    (metrics,) = work.glob("outputs/runs/*/*/metrics.json")  # the run directory is under the current directory
    run_dir = metrics.parent
    assert (run_dir / "train.log").is_file() and (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert not list(installed.rglob("outputs"))  # nothing written inside the installed package

    evaluated = run_installed(installed, "python", "-m", "alternet", "evaluate", f"ckpt={run_dir}", cwd=work)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert len(list(work.glob("outputs/eval/*/*/metrics.json"))) == 1

    assert not (installed / "bin" / "alternet-train").exists()  # the retired console scripts are not installed
    exported = run_installed(installed, "alternet", "export", str(run_dir), "--out", "export", cwd=work)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (work / "export" / "model.safetensors").is_file()


def test_every_help_answers_without_torch():
    """``alternet --help`` and every ``alternet COMMAND --help`` import no torch, Lightning, timm or the image
    libraries (issue 54: under 2 s; the times themselves, as ratios to ``python -c pass``: ``python -m bench.help``).
    One fresh interpreter: a help that loaded any of them would leave it in ``sys.modules`` for the check after it."""
    code = (
        "import contextlib, io, json, sys\n"
        "from alternet.apps import cli\n"
        "seen = {}\n"
        f"for args in [[], *([name] for name in cli.COMMANDS)]:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        "        cli.main([*args, '--help'])\n"
        f"    loaded = sorted(m for m in {HEAVY_IMPORTS!r} if m in sys.modules)\n"
        "    seen[' '.join(args) or '-'] = [out.getvalue().count('\\n'), loaded]\n"
        "print(json.dumps(seen))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(seen) == ["-", *cli.COMMANDS]
    assert {command: loaded for command, (_, loaded) in seen.items() if loaded} == {}
    assert all(lines >= 5 for lines, _ in seen.values()), seen  # each printed its help


def exits_in_one_interpreter(lines: list[str], cwd: Path, preamble: str = "") -> tuple[dict[str, str], list[str]]:
    """Each command line (``alternet LINE``; ``""``: ``python train.py`` as a checkout runs it) in one fresh
    interpreter, after ``preamble``: what each exited with, and which heavy modules were imported by the end."""
    code = (
        "import json, os, runpy, sys, tempfile\n"
        "from alternet.apps import cli\n"
        f"{preamble}"
        "said = {}\n"
        f"for line in {lines!r}:\n"
        "    args = line.split()\n"
        "    sys.argv = ['alternet', *args]\n"
        "    try:\n"
        f"        cli.main(args) if args else runpy.run_path({str(ROOT / 'train.py')!r}, run_name='__main__')\n"
        "    except SystemExit as stop:\n"
        "        said[line or 'train.py'] = str(stop.code)\n"
        f"print(json.dumps([said, sorted(m for m in {HEAVY_IMPORTS!r} if m in sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    return said, loaded


def test_a_new_run_into_a_finished_runs_directory_is_refused_before_torch_is_imported(digits_run, tmp_path):
    """The refusal to overwrite a finished run waited for the resume checks' imports (~9 s) though a new run needs
    only what the directory holds. The run is left as it was."""
    from helpers.paths import fingerprint

    run = tmp_path / "run"
    shutil.copytree(digits_run, run)
    before = fingerprint(run)
    said, loaded = exits_in_one_interpreter([f"train debug=fast hydra.run.dir={run}"], tmp_path)
    assert loaded == []
    assert list(said.values()) == [
        f"error: run directory {run} already holds a finished run (metrics.json): resume it with ckpt_path=last, "
        "give this run its own directory (hydra.run.dir=...), or overwrite it with reuse_run_dir=true"
    ]
    after = fingerprint(run)
    assert after.keys() == before.keys()
    assert {k: v for k, v in after.items() if k != ".lock"} == {k: v for k, v in before.items() if k != ".lock"}


def test_a_command_run_in_a_deleted_directory_says_so_in_one_line_before_any_import():
    """A shell left in a folder deleted since: train and evaluate ended in a 40-line traceback from Hydra's
    ``os.getcwd()``, export in ``Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so`` (exit status 2). One fresh
    interpreter, as with the help: the commands, and train.py as a checkout runs it."""
    lines = ["train debug=fast", "evaluate ckpt=run", "export run --out e", ""]
    gone = "gone = tempfile.mkdtemp()\nos.chdir(gone)\nos.rmdir(gone)\n"
    said, loaded = exits_in_one_interpreter(lines, ROOT, preamble=gone)
    assert loaded == []
    assert list(said) == ["train debug=fast", "evaluate ckpt=run", "export run --out e", "train.py"]
    for line in said.values():
        assert line.startswith("error: the current directory cannot be read (No such file or directory): it was ")
        assert line.endswith("; cd to an existing directory and run the command again")


def test_a_push_without_a_token_or_of_nothing_is_refused_before_torch_is_imported(tmp_path):
    """``alternet push`` said "no Hugging Face token found" after ~10 s of imports (the exporter, the model card's
    timm): what was typed, the source and the credentials are known before torch is. One fresh interpreter with no
    token (HF_TOKEN unset, an empty HF_HOME); nothing is written."""
    export = tmp_path / "export"
    export.mkdir()
    (export / "config.json").write_text('{"alternet": {}}')
    work = tmp_path / "work"
    work.mkdir()
    cases = {
        f"push {export} me/model": "error: no Hugging Face token found: run `hf auth login`",
        f"push {export} me/model --revision a..b": "error: --revision 'a..b' is invalid: a git branch name",
        f"push {export} me//model": "error: 'me//model' is not a Hub repository id: use NAME or USER/NAME",
        "push /nonexistent/run me/model": "error: /nonexistent/run does not exist: pass an export directory, a run",
        f"push {ROOT / 'docs'} me/model": f"error: {ROOT / 'docs'} is neither an export directory (config.json), a",
        f"push {ROOT / 'README.md'} me/model": f"error: checkpoint {ROOT / 'README.md'} is not a torch checkpoint",
    }
    no_token = f"os.environ.pop('HF_TOKEN', None); os.environ['HF_HOME'] = {str(tmp_path / 'hf')!r}\n"
    said, loaded = exits_in_one_interpreter(list(cases), work, preamble=no_token)
    assert loaded == []
    assert list(said) == list(cases)
    for line, expected in cases.items():
        assert said[line].startswith(expected) and "\n" not in said[line], said[line]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["config.json", "export", "work"]


def test_a_value_its_command_refuses_is_said_before_torch_is_imported(tmp_path):
    """A misspelt value (``trainer.max_epochs=0``, an evaluation without ``ckpt`` or of a path that does not
    exist, a resume from a file that is none) was refused after the run directory's pre-flight had imported torch
    and Lightning: 8-10 s on a laptop for one line. The pre-flight types the config first, and so does a sweep's for
    each job; it tells a path that holds no checkpoint from the file system, and a layout that does not fit its
    widths, heads or windows from the model's spec. One fresh interpreter; nothing is written where the commands
    ran."""
    cases = {
        "train trainer.max_epochs=0": "error: trainer.max_epochs=0 is invalid: must be an integer >= 1",
        "train recipe.optimizer.lr=-1": "error: recipe.optimizer.lr=-1 is invalid: must be > 0",
        "train -m trainer.max_epochs=0,1": "error: sweep job 0 (trainer.max_epochs=0), before any job ran: trainer.max",
        "evaluate -m ckpt=/nonexistent/a,/nonexistent/b": "error: sweep job 0 (ckpt=/nonexistent/a), before any job ra",
        "train -m model.pretrained=/nonexistent/a,/nonexistent/b": "error: sweep job 0 (model.pretrained=/nonexistent/",
        "evaluate": "error: ckpt is required: alternet evaluate ckpt=SOURCE (",
        "evaluate ckpt=run logger=tensorboard": "error: logger.extra (and logger=tensorboard) apply to alternet train",
        "evaluate ckpt=[/nonexistent/a.ckpt]": "error: /nonexistent/a.ckpt does not exist: expected a run directory",
        "train model.pretrained=hf-hub:tiny": "error: hf-hub:tiny names no repository: expected hf-hub:OWNER/REPO",
        f"evaluate ckpt={ROOT / 'README.md'}": f"error: checkpoint {ROOT / 'README.md'} is not a torch checkpoint: it",
        f"evaluate ckpt={ROOT / 'docs'}": f"error: {ROOT / 'docs'} is neither a run directory (no checkpoints/ folder)",
        "train ckpt_path=/nonexistent/x.ckpt": "error: checkpoint /nonexistent/x.ckpt does not exist; no other checkpo",
        "evaluate ckpt=run analysis=[fourier] analysis.fourier.images=0": "error: analysis.fourier.images=0 is inva",
        "export /nonexistent/run --out e": "error: /nonexistent/run does not exist: pass a run directory or a Lightn",
        f"import-hdvw {ROOT / 'docs'} --out e": f"error: HDVW checkpoint {ROOT / 'docs'} is a directory: pass the file",
        "export --out e --license NOT x": "error: --license 'NOT' is not a Hugging Face Hub licence identifier (lower",
        "train seed=null": "error: seed=null is invalid: must be an integer, never null; `alternet train --cfg job` pr",
        "evaluate ckpt=run out_dir=null": "error: out_dir=null is invalid: it is the evaluation's directory (out_dir=",
        "train ckpt_path=best": "error: ckpt_path=best names no file: give a checkpoint's path (a run's checkpoints/",
        f"train ckpt_path={ROOT / 'docs'}": f"error: checkpoint {ROOT / 'docs'} is a directory, not a checkpoint: pass",
        f"evaluate ckpt=run ood.root={ROOT / 'alternet'}": f"error: ood.root={ROOT / 'alternet'} holds no images (.jpg",
        "evaluate ckpt=run ood.root=/nonexistent": "error: ood.root=/nonexistent is not a directory: give a folder of",
        "train +trainer.profilr=simple": "error: trainer.profilr is not an argument of lightning.Trainer (did you mean",
        "train debug=fast model.heads=[1,0,2]": "error: stage 2 ('CM'): has MSA blocks, so heads must be >= 1, got 0",
        "train model=coatnet_cifar model.widths=[1,2]": "error: widths has 2 value(s) [1, 2] but the layout has 4 stag",
        "train model=botnet_cifar model.heads=[1,2,3,5]": "error: stage 3 (CM): the attention width 64 (bottle_ratio",
    }
    said, loaded = exits_in_one_interpreter(list(cases), tmp_path)
    assert loaded == []
    assert list(said) == list(cases)
    for line, expected in cases.items():
        assert said[line].startswith(expected), said[line]
    assert list(tmp_path.iterdir()) == []
