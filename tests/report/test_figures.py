"""The sweep report's figures (alternet/report/figures.py)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

from alternet.report import figures


def test_variants_of_long_labels_fit_their_figures(tmp_path):
    """A sweep over several keys, one a folder's path, gave labels wider than the figure: Matplotlib warned that
    "constrained_layout not applied because axes sizes collapsed to zero" (a multi-line warning in the middle of
    the report's output) and the legend ran off both sides. Each label now wraps at 40 characters."""
    keys = ["recipe.batch_size", "data", "data.image_size", "data.num_workers", "data.root"]
    values = [["16", "-", "-", "-", "-"], ["4", "imagefolder", "16", "0", "/datasets/shared/group/our_images/v2"]]
    runs = [
        SimpleNamespace(
            overrides=dict(zip(keys, value)) | {"seed": str(seed)},
            train_nll=1.0 + index,
            test_error=0.3 + index / 10,
            robustness=None,
            curves={"train_clean/nll": [2.0, 1.5, 1.0 + index]},
        )
        for index, value in enumerate(values)
        for seed in (0, 1)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Matplotlib's layout warning fails the test
        figures.error_vs_train_nll(runs, keys, tmp_path / "error_vs_train_nll.png")
        figures.metrics_vs(runs, "data.root", keys, tmp_path / "metrics_vs_data_root.png")
        figures.train_nll_curves(runs, keys, tmp_path / "train_nll_curves.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "error_vs_train_nll.png",
        "metrics_vs_data_root.png",
        "train_nll_curves.png",
    ]
