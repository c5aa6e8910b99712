"""The import rule of docs/architecture.md, checked from the source (tools/layers.py)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from helpers import ROOT

spec = importlib.util.spec_from_file_location("layers", ROOT / "tools" / "layers.py")
layers = sys.modules["layers"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layers)


def test_every_import_of_the_package_points_down_the_floors():
    problems = [reason for item in layers.all_imports() if (reason := layers.violation(item))]
    assert problems == []


def test_the_import_graph_of_the_package_has_no_cycle():
    """No circle between packages or kernel modules (an entry point's import counts like any other)."""
    edges = layers.graph(layers.all_imports())
    state: dict[str, str] = {}

    def visit(unit: str, path: list[str]) -> None:
        state[unit] = "open"
        for target in sorted(edges.get(unit, ())):
            assert state.get(target) != "open", " -> ".join([*path, unit, target])
            if target not in state:
                visit(target, [*path, unit])
        state[unit] = "done"

    for unit in sorted(edges):
        if unit not in state:
            visit(unit, [])


def test_no_two_modules_import_each_other_deferred_imports_included():
    assert layers.module_cycle(layers.module_graph()) is None


def test_the_module_cycle_rule_sees_a_deferred_import_and_ignores_type_checking(tmp_path):
    closed = fake_package(
        tmp_path / "a",
        {
            "data/config.py": "def section():\n    from .registry import TABLE  # deferred\n",
            "data/registry.py": "from .config import section\n",
        },
    )
    assert layers.module_cycle(layers.module_graph(closed)) == [
        "alternet.data.config",
        "alternet.data.registry",
        "alternet.data.config",
    ]
    typing_only = fake_package(
        tmp_path / "b",
        {
            "training/step.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .module import M\n",
            "training/module.py": "from .step import S\n",
        },
    )
    assert layers.module_cycle(layers.module_graph(typing_only)) is None


def test_every_package_of_alternet_is_on_a_floor():
    units = {path.stem if path.is_file() else path.name for path in (ROOT / "alternet").iterdir()}
    units = {u for u in units if not u.startswith(("_", ".")) and u not in ("conf", "py")}
    assert units <= set(layers.FLOOR_OF), units - set(layers.FLOOR_OF)


def fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "alternet"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"training/run.py": "from ..evaluation import Evaluator\n"}, "sideways import"),
        ({"models/zoo.py": "from alternet.runs.weights import load_model\n"}, "upward import"),
        # a package that spans floors: its kernel modules may not import the one above (runs.weights needs models)
        ({"runs/directories.py": "from .weights import load_model\n"}, "upward import"),
        ({"tracking.py": "from .runs.directories import RunDir\nfrom .runs import weights\n"}, "upward import"),
        ({"hub/load.py": "from ..apps.train import train\n"}, "upward import"),
        ({"data/x.py": "def f():\n    from ..models import create_model\n"}, "imports inside functions"),
        ({"files.py": "from .training import build_module\n"}, "upward import"),
        ({"newpkg/x.py": "from ..models import create_model\n"}, "on no floor"),
        # entry points obey the floor of their file: no exemption for `python -m` modules or __main__ blocks
        ({"hub/__main__.py": "from ..apps.export import main\n"}, "upward import"),
        ({"data/cifar_c.py": 'if __name__ == "__main__":\n    from ..apps import corruptions\n'}, "upward import"),
        ({"report/cli.py": "from ..apps.report import main\n"}, "upward import"),
        ({"apps/cli.py": "import alternet.__main__\n"}, "upward import"),  # `python -m alternet` sits above apps
        ({"report/__main__.py": 'if __name__ == "__main__":\n    def f():\n        from ..runs import x\n'}, "inside"),
    ],
)
def test_the_rule_catches_imports_that_break_it(tmp_path, files, expected):
    root = fake_package(tmp_path, files)
    problems = [reason for item in layers.all_imports(root) if (reason := layers.violation(item))]
    assert len(problems) == 1 and expected in problems[0], problems


def test_downward_imports_are_allowed_entry_points_included(tmp_path):
    root = fake_package(
        tmp_path,
        {
            "apps/train.py": "from ..training import build_module\nfrom ..hub import export\n",
            "apps/cli.py": "from ..hub import cli\nfrom ..report import cli as report\nfrom ..data import cifar_c\n",
            "hub/__main__.py": "from .cli import main\n",
            "report/__main__.py": "from .cli import main\n",
            "data/cifar_c.py": 'from ..files import write_json\nif __name__ == "__main__":\n    from . import x\n',
            "__main__.py": "from .apps.cli import main\n",
            "files.py": "from .errors import AlternetError\n",
        },
    )
    assert [layers.violation(item) for item in layers.all_imports(root)] == [None] * 11


# The libraries that take config sections take them typed (alternet.typed): none of them looks a key of the config
# up by its name. Names the config travels under, and the one module that checks plain mappings (the augment
# sections of a recipe, per data family: data/augment.py, which reads them for the data modules).
CONFIG_NAMES = {"config", "cfg", "recipe", "trainer", "performance", "callbacks", "callbacks_cfg", "opt_cfg", "section"}
LIBRARIES = ("training", "data", "models", "evaluation", "analysis")
CHECKS_PLAIN_MAPPINGS = {"data/augment.py"}


def config_lookups(source: str) -> list[str]:
    """``config["key"]`` and ``config.get("key")`` on a name the config travels under."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            target, key = node.value, node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target, key = (
                node.func.value,
                node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None,
            )
        else:
            continue
        if isinstance(target, ast.Name) and target.id in CONFIG_NAMES and isinstance(key, str):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_library_looks_a_config_key_up_by_its_name():
    package = ROOT / "alternet"
    found = {
        str(path.relative_to(package)): lookups
        for library in LIBRARIES
        for path in sorted((package / library).rglob("*.py"))
        if str(path.relative_to(package)) not in CHECKS_PLAIN_MAPPINGS and (lookups := config_lookups(path.read_text()))
    }
    assert found == {}


def test_the_lookup_finder_finds_both_spellings():
    assert config_lookups('recipe["batch_size"]\nconfig.get("seed")\nrecipe.batch_size\nrow["x"]') == [
        "1: recipe['batch_size']",
        "2: config.get('seed')",
    ]
