"""A Hydra sweeper that chooses its jobs as it goes, as Optuna's does, for the tests of a search (tests/ is on
sys.path, so Hydra's plugin discovery finds this ``hydra_plugins`` package): ``hydra/sweeper=test_search`` launches
one job at a time, trying a swept key's values in order (``key=a,b`` or ``choice(a,b)``), reads the value each job
returns, and goes on past a failed job (Optuna's ``max_failure_rate=1.0``); ``direction`` (an enum, as Optuna's)
is only recorded."""

from dataclasses import dataclass
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper


class Direction(Enum):  # as Optuna's sweeper types its direction: an enum, not a string
    minimize = 1
    maximize = 2


@dataclass
class TestSearchConf:
    _target_: str = "hydra_plugins.alternet_test_search.TestSearch"
    direction: Direction = Direction.minimize


ConfigStore.instance().store(group="hydra/sweeper", name="test_search", node=TestSearchConf, provider="tests")


class TestSearch(Sweeper):
    def __init__(self, direction: Direction = Direction.minimize):
        self.direction = direction
        self.returned: list[float | None] = []

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> list[float | None]:
        parsed = OverridesParser.create().parse_overrides(arguments)
        fixed = [f"{o.get_key_element()}={o.get_value_element_as_str()}" for o in parsed if not o.is_sweep_override()]
        (swept,) = [o for o in parsed if o.is_sweep_override()]
        for index, value in enumerate(swept.sweep_string_iterator()):
            (done,) = self.launcher.launch([[*fixed, f"{swept.get_key_element()}={value}"]], initial_job_idx=index)
            try:
                self.returned.append(float(done.return_value))  # a failed job's return_value raises its error
            except Exception:
                self.returned.append(None)
        return self.returned
