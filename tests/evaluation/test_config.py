"""The evaluation settings' schema (alternet/evaluation/config.py): its tables are the ones the torch code runs by."""

from alternet.evaluation.config import PRECISIONS
from alternet.evaluation.inference import AUTOCAST


def test_every_precision_the_schema_allows_has_its_autocast_and_no_other():
    assert tuple(AUTOCAST) == PRECISIONS
