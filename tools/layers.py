"""The import rule of the alternet package, checked from the source: ``python tools/layers.py`` prints the
package-level import graph and every import that breaks the rule (exit status 1 if any).

Floors, bottom to top (docs/architecture.md explains each)::

    kernel       errors, files, seeds, tracking, progress,     (may import each other)
                 dataset_facts, architectures, hardware,
                 typed, launch, lazy, runs (but runs.weights)
    foundations  models, data, metrics                         (the kernel)
    run records  runs.weights, and the package root's facade   (kernel, foundations)
    libraries    training, evaluation, analysis, hub, report   (anything below, never each other)
    apps         apps                                          (anything below)
    command      __main__: ``python -m alternet``              (apps)

A module imports only from floors below its own (kernel modules also from each other). A unit is a package or module
right below alternet, or a module of a package that spans floors (``runs.weights``): its dotted name. There are no
exceptions: an entry point (a ``__main__.py``, an ``if __name__ == "__main__":`` block) obeys the rule of the floor its
file is on.
No two modules may import each other, through any chain (deferred imports count: :func:`module_cycle`).
No alternet import may hide inside a function (it would dodge the rule, or a cycle), except one marked
``# deferred`` on its line: an import put off until it is needed, so that ``import alternet``, the typed configs and
the commands' ``--help`` stay free of torch (alternet/lazy.py says why). A deferred import obeys the floors too.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "alternet"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
FLOORS: tuple[tuple[str, ...], ...] = (
    (
        "errors",
        "typed",
        "files",
        "seeds",
        "tracking",
        "progress",
        "dataset_facts",
        "architectures",  # torch-free: the model families' specs, layouts, names and config sections
        "hardware",
        "launch",
        "lazy",
        "runs",  # runs/__init__.py imports nothing; its modules but runs.weights (the model in a checkpoint)
        "runs.directories",
        "runs.summary",
        "runs.checkpoint_files",
        "runs.checkpoints",
        "runs.ownership",
        "runs.records",
    ),
    ("models", "data", "metrics"),
    ("runs.weights", ""),  # "" is the package root, alternet/__init__.py (the facade: create_model, list_models)
    ("training", "evaluation", "analysis", "hub", "report"),
    ("apps",),
    ("__main__",),  # alternet/__main__.py: `python -m alternet`, the `alternet` command (apps/cli.py)
)
KERNEL = 0
FLOOR_OF = {unit: floor for floor, units in enumerate(FLOORS) for unit in units}


@dataclass(frozen=True)
class Import:
    source: Path
    line: int
    importer: str  # unit: the first name below alternet ("" for the root)
    imported: str
    in_function: bool
    deferred: bool = False  # marked "# deferred" on its line: allowed inside a function

    def __str__(self) -> str:
        where = f"{PACKAGE}/{self.source.as_posix().rsplit(f'/{PACKAGE}/', 1)[-1]}:{self.line}"
        return f"{where}: {self.importer or PACKAGE} imports {PACKAGE}.{self.imported}".rstrip(".")


def _module_name(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _unit(parts: list[str]) -> str:
    """The unit a module (``["alternet", "runs", "layout"]``) belongs to: its longest dotted prefix on a floor."""
    names = [".".join(parts[1:end]) for end in range(len(parts), 1, -1)]
    return next((name for name in names if name in FLOOR_OF), parts[1] if len(parts) > 1 else "")


def imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    """Every import of an alternet module in ``path`` (a file of the package at ``root``), with whether it sits in
    a function."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module[:-1]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_function = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets: list[list[str]] = []
            if isinstance(child, ast.ImportFrom):
                base = package[: len(package) - child.level + 1] if child.level else []
                target = base + (child.module.split(".") if child.module else [])
                # `from . import x` / `from .pkg import x`: x may be a submodule (of a package that spans floors)
                targets = [[*target, alias.name] for alias in child.names]
            elif isinstance(child, ast.Import):
                targets = [alias.name.split(".") for alias in child.names]
            units = {_unit(target) for target in targets if target and target[0] == PACKAGE}
            for imported in sorted(units):
                if imported not in FLOOR_OF:
                    imported = ""  # `from alternet import create_model`: the root
                deferred = "# deferred" in lines[child.lineno - 1]
                found.append(Import(path, child.lineno, _unit(module), imported, child_function, deferred))
            visit(child, child_function)

    source = path.read_text()
    lines = source.splitlines()
    visit(ast.parse(source), False)
    return found


def all_imports(root: Path = ROOT) -> list[Import]:
    """The imports of every module of the package at ``root``."""
    return [item for path in sorted(root.rglob("*.py")) for item in imports_of(path, root)]


def violation(item: Import) -> str | None:
    """Why ``item`` breaks the rule, or None."""
    if item.importer == item.imported:
        return None
    if item.importer not in FLOOR_OF:
        return f"{item}: {item.importer!r} is on no floor; add it to FLOORS in tools/layers.py"
    if item.imported not in FLOOR_OF:
        return f"{item}: {item.imported!r} is on no floor; add it to FLOORS in tools/layers.py"
    if item.in_function and not item.deferred:
        return f"{item}: imports inside functions are not allowed (move it to the top, or mark it # deferred)"
    floor, target = FLOOR_OF[item.importer], FLOOR_OF[item.imported]
    if target < floor or (floor == target == KERNEL):
        return None
    direction = "upward" if target > floor else "sideways"
    return f"{item}: {direction} import (floor {floor} -> floor {target})"


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at run time, deferred imports included (a cycle they close fails
    as late as the first call that runs them) and ``if TYPE_CHECKING:`` blocks left out (never run)."""
    modules = {".".join(_module_name(path, root)): path for path in sorted(root.rglob("*.py"))}
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

        def visit(node: ast.AST, name: str = name, package: list[str] = package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                targets: list[str] = []
                if isinstance(child, ast.ImportFrom):
                    base = package[: len(package) - child.level + 1] if child.level else []
                    target = base + (child.module.split(".") if child.module else [])
                    for alias in child.names:  # `from . import x`: x may be a submodule
                        submodule = ".".join([*target, alias.name])
                        targets.append(submodule if submodule in modules else ".".join(target))
                elif isinstance(child, ast.Import):
                    targets = [alias.name for alias in child.names]
                edges[name].update(t for t in targets if t in modules and t != name)
                visit(child)

        visit(ast.parse(path.read_text()))
    return edges


def module_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the module graph (its modules in order, the first again at the end), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(edges):
        if module not in state and (found := visit(module)):
            return found
    return None


def graph(imports: list[Import]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for item in imports:
        if item.importer != item.imported:
            edges[item.importer or "(root)"].add(item.imported or "(root)")
    return edges


def main() -> int:
    imports = all_imports()
    for floor, units in reversed(list(enumerate(FLOORS))):
        for unit in units:
            targets = sorted(graph(imports).get(unit or "(root)", ()))
            print(f"floor {floor}  {unit or '(root)':12s} -> {', '.join(targets) or '-'}")
    problems = [reason for item in imports if (reason := violation(item))]
    if cycle := module_cycle(module_graph()):
        problems.append(f"a cycle of module imports: {' -> '.join(cycle)}")
    print("\n".join(problems) if problems else "no violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
