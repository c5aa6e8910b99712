"""A real 2-process CPU DDP run (gloo), launched as a subprocess as a user would launch it."""

import json

import pytest

from helpers import run_warm


@pytest.mark.xdist_group("processes")  # 2-process DDP: one at a time, on the processes worker (helpers.warm)
def test_two_process_ddp_shards_data_and_agrees_on_metrics(tmp_path):
    result = run_warm("tests/scripts/ddp_probe.py", str(tmp_path), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    seen = [set(r["train_indices"]) for r in ranks]
    assert len(ranks[0]["train_indices"]) == len(ranks[1]["train_indices"]) > 0
    assert not seen[0] & seen[1], "ranks loaded overlapping training samples"
    assert len(seen[0] | seen[1]) >= 0.9 * 1257  # together they cover the epoch (minus the dropped tail)
    assert ranks[0]["test"] == ranks[1]["test"]  # metrics are synced across ranks
    assert (tmp_path / "metrics.json").is_file()  # written once, by rank 0
    assert "distributed_backend=gloo" in result.stderr + result.stdout
    for rank in ranks:  # no host sync on a step that logs nothing, Lightning's per-step SIGTERM broadcast included
        assert len(rank["syncs"]) > 3 and not any(rank["syncs"]), rank["syncs"]
