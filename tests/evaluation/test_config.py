"""The evaluation settings' schema (alternet/evaluation/config.py): its tables are the ones the torch code runs by."""

from omegaconf import OmegaConf

from alternet.evaluation.config import PRECISIONS
from alternet.evaluation.inference import AUTOCAST


def test_every_precision_the_schema_allows_has_its_autocast_and_no_other():
    assert tuple(AUTOCAST) == PRECISIONS


def test_a_robustness_baseline_that_names_no_file_is_refused_and_ood_images_without_a_folder_are_warned(tmp_path):
    """A baseline's metrics.json that does not exist was refused only once the model had loaded and its corruptions
    were generated (and never where robustness did not run); ``ood.max_images`` without ``ood.root`` did nothing,
    without a word."""
    import pytest

    from alternet.errors import AlternetWarning, ConfigValueError
    from alternet.evaluation.config import OodConfig, RobustnessConfig
    from alternet.typed import build

    from helpers import compose_train

    defaults = OmegaConf.to_container(compose_train().evaluate, resolve=True)
    missing = tmp_path / "metrics.json"
    with pytest.raises(ConfigValueError, match=f"^robustness.baseline={missing} is neither a built-in baseline"):
        build(RobustnessConfig, defaults["robustness"] | {"baseline": str(missing)}, "robustness.")
    missing.write_text("{}")
    for baseline in (str(missing), "alexnet", "alexnet_hdvw", None):
        build(RobustnessConfig, defaults["robustness"] | {"baseline": baseline}, "robustness.")
    with pytest.warns(AlternetWarning, match=r"^ood.max_images=10 does nothing without ood.root \(no out-of-dist"):
        build(OodConfig, {"root": None, "max_images": 10}, "ood.")
