"""The one table of a split's metrics (alternet.metrics.table) drives training's logged metrics, the evaluator's
record, the console's test columns, the model card's results and the checkpoint monitor's choices."""

import numpy as np
import pytest

from alternet.hub.card import HUB_METRICS, TEST_METRICS
from alternet.metrics import calibration_metrics
from alternet.metrics.table import SPLIT_KEYS, SPLIT_METRICS
from alternet.training.module import evaluation_metrics


def test_every_consumer_reads_the_table():
    assert set(evaluation_metrics(10)) | {"nll"} == set(SPLIT_KEYS)  # NLL is averaged over samples beside them
    probs = np.random.default_rng(0).dirichlet(np.ones(10), size=50)
    labels = np.arange(50) % 10
    assert set(SPLIT_KEYS) <= set(calibration_metrics(probs, labels))
    assert {m.key: (m.hub_type, m.hub_name) for m in SPLIT_METRICS} == HUB_METRICS
    assert [key for key, _ in TEST_METRICS] == list(SPLIT_KEYS)


def test_the_checkpoint_monitor_chooses_among_the_tables_metrics():
    from alternet.apps.checks import check_monitor
    from alternet.errors import ConfigValueError

    from helpers import typed

    with pytest.raises(ConfigValueError, match="is not a metric the run logs at epoch end") as refused:
        check_monitor(typed("callbacks.checkpoint.monitor=val/brier"))
    assert all(f"val/{key}" in str(refused.value) for key in SPLIT_KEYS)
