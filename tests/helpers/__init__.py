"""What the tests share that is not a fixture: paths, override lists, config composition, subprocess runners and
synthesized data (fixtures live in tests/conftest.py). ``tests/`` is on ``sys.path`` (pyproject's ``pythonpath``;
the probe scripts in tests/scripts/ insert it themselves), so every test and script imports ``from helpers import``."""

from helpers.configs import (
    DDP_CPU,
    DIGITS_RUN,
    FAST,
    PRESET_TWO_STEPS,
    TINY_ANALYSIS_BUDGETS,
    compose_train,
    datamodule_of,
    module_of,
    paper_recipe_in_miniature,
    resolved,
    typed,
)
from helpers.models import cached_repo
from helpers.paths import CONF, ROOT, SHARED_DATA, fingerprint
from helpers.processes import (
    HEAVY_IMPORTS,
    assert_one_line_error,
    main_output,
    module_output,
    run_main,
    run_script,
    run_warm,
    script_output,
    without_collection,
)

__all__ = [
    "CONF",
    "DDP_CPU",
    "DIGITS_RUN",
    "FAST",
    "HEAVY_IMPORTS",
    "PRESET_TWO_STEPS",
    "ROOT",
    "SHARED_DATA",
    "TINY_ANALYSIS_BUDGETS",
    "assert_one_line_error",
    "cached_repo",
    "compose_train",
    "datamodule_of",
    "fingerprint",
    "main_output",
    "module_of",
    "module_output",
    "paper_recipe_in_miniature",
    "resolved",
    "run_main",
    "run_script",
    "run_warm",
    "script_output",
    "typed",
    "without_collection",
]
