"""What ``import alternet`` costs and what it still does (alternet/__init__.py, alternet/lazy.py): no torch, Lightning
or timm until something needs them, no effect outside the package, the package facades importing on first use, and the
zoo registered with timm when the models are imported. Each case in a fresh interpreter (imports are process state)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
import timm.data

import alternet
from alternet import training
from alternet.dataset_facts import FACTS

from helpers import HEAVY_IMPORTS, ROOT


def fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON value, returned."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


HEAVY_LOADED = f"sorted(m for m in {HEAVY_IMPORTS!r} if m in sys.modules)"


def test_import_alternet_has_no_effect_and_the_models_load_and_register_on_first_use():
    """In one fresh interpreter: ``import alternet`` installs no import hook, sets no environment variable, registers
    no resolver and loads no torch (nor do the schemas); ``import timm`` after it knows no alternet model; the models
    load on first use (``alternet.create_model``), and importing them registers the zoo with timm, as a plugin does.
    A model family's section is typed and checked from its spec without torch (alternet.architectures)."""
    seen = fresh(
        "import json, os, sys\nhooks, environ = list(sys.meta_path), dict(os.environ)\nimport alternet\n"
        "from omegaconf import OmegaConf\n"
        "effects = [sys.meta_path != hooks, dict(os.environ) != environ,"
        " OmegaConf.has_resolver('alternet.run_stamp')]\n"
        "import alternet.apps.config, alternet.training, alternet.evaluation, alternet.data\n"
        "from alternet.architectures.config import model_config\n"
        "section = model_config({'name': 'botnet_cifar', 'pretrained': None, 'buildup_rules': 'warn', 'heads': 2})\n"
        f"heavy = {HEAVY_LOADED}\n"
        "import timm\nbefore = timm.is_model('alternet_r50')\nmodel = alternet.create_model('alternet_tiny')\n"
        "print(json.dumps([effects, heavy, type(section).__name__, before, type(model).__name__, "
        "'alternet_r50' in alternet.list_models(), timm.is_model('alternet_r50')]))"
    )
    assert seen == [[False, False, False], [], "ByobModel", False, "AlterNet", True, True]


def test_a_facade_offers_its_names_and_refuses_others_by_name():
    assert "ClassificationModule" in dir(training) and training.ClassificationModule.__name__ == "ClassificationModule"
    with pytest.raises(AttributeError, match=r"module 'alternet\.training' has no attribute 'Missing'"):
        training.Missing  # noqa: B018
    with pytest.raises(AttributeError, match=r"module 'alternet' has no attribute 'Missing'"):
        alternet.Missing  # noqa: B018


def test_imagenet_statistics_are_timms():
    """dataset_facts writes timm's ImageNet mean and std down (torch-free: the schemas read it without timm)."""
    assert FACTS["in1k"].mean == timm.data.IMAGENET_DEFAULT_MEAN and FACTS["in1k"].std == timm.data.IMAGENET_DEFAULT_STD


def facade_tables() -> dict[str, dict[str, str]]:
    """Each package ``__init__`` that calls ``exports(__name__, {...})``: its table, read from the source."""
    tables = {}
    for init in sorted((ROOT / "alternet").rglob("__init__.py")):
        for node in ast.walk(ast.parse(init.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "exports":
                tables[init.parent.relative_to(ROOT).as_posix().replace("/", ".")] = ast.literal_eval(node.args[1])
    return tables


def test_no_facade_name_is_also_a_submodule_name():
    """``alternet.hub.export`` was both the export function and its module: whichever was imported first won, so
    ``from alternet.hub import export`` gave the module once another module had imported it (found by the
    lowest-versions run, whose import order differed). A name a facade offers must not be one of its submodules."""
    tables = facade_tables()
    facades = {
        "alternet.analysis",
        "alternet.data",
        "alternet.training",
        "alternet.evaluation",
        "alternet.hub",
        "alternet.report",
    }
    assert facades <= set(tables)
    clashes = {
        f"{package}.{name}"
        for package, table in tables.items()
        for name in table
        if (ROOT / package.replace(".", "/") / f"{name}.py").is_file()
        or (ROOT / package.replace(".", "/") / name).is_dir()
    }
    assert clashes == set()
    for package, table in tables.items():  # and each name is where the table says
        for name, module in table.items():
            path = ROOT / package.replace(".", "/") / module.replace(".", "/")
            source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()
            assert f" {name}" in source or f"{name} =" in source, f"{package}.{module} does not define {name}"
