"""alternet.launch: one run directory for every rank of a torchrun or srun job; launches a sweep cannot run."""

import pytest

from alternet.errors import ConfigValueError
from alternet.launch import check_sweep_launch, devices_per_job, is_remote, launched_rank, run_stamp

JOB_ENV = ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_ID")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TORCHELASTIC_RUN_ID": "abc", "WORLD_SIZE": "2"}, "torchrun-abc"),
        ({"SLURM_NTASKS": "8", "SLURM_JOB_ID": "123", "SLURM_STEP_ID": "0"}, "slurm-123.0"),
        ({"TORCHELASTIC_RUN_ID": "abc", "WORLD_SIZE": "1"}, None),  # one process: its own time
        ({"SLURM_NTASKS": "1", "SLURM_JOB_ID": "123", "SLURM_STEP_ID": "0"}, None),  # one task (a sweep job's)
    ],
)
def test_a_multi_process_job_names_its_run_directory_after_the_job(env, expected, monkeypatch):
    for name in JOB_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stamp = run_stamp()
    if expected is None:
        assert stamp.count("/") == 1 and stamp[:4].isdigit()  # DATE/TIME
    else:
        assert stamp == expected


def test_hydra_resolves_the_run_directory_through_the_stamp(monkeypatch):
    from omegaconf import OmegaConf

    import alternet.apps.config  # noqa: F401  registers the resolver, where the commands compose

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    monkeypatch.setenv("WORLD_SIZE", "4")
    config = OmegaConf.create({"dir": "runs/${alternet.run_stamp:}"})
    assert config.dir == "runs/torchrun-job7"


def test_torchrun_without_a_run_id_is_refused_in_one_line_as_the_command_says_it(tmp_path, monkeypatch, capsys):
    """torchrun's TORCHELASTIC_RUN_ID is "none" without --rdzv-id (multi-node static rendezvous, --master-port): every
    such job would share runs/torchrun-none, the next refused or, with ckpt_path=last, resuming another's run."""
    from helpers.processes import run_command

    for name in JOB_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.chdir(tmp_path)
    code, stderr = run_command(["train", "debug=fast"], monkeypatch, capsys)
    assert code.startswith("error: torchrun started this job without a run id") and "--rdzv-id" in code
    assert "\n" not in code and "Traceback" not in stderr and not (tmp_path / "runs").exists()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    assert run_stamp() == "torchrun-job7"


@pytest.mark.parametrize(
    ("devices", "accelerator", "gpus", "expected"),
    [
        (1, "cpu", 0, 1),
        (4, "gpu", 8, 4),
        ([0, 1], "gpu", 8, 2),
        ("2", "cpu", 0, 2),
        (-1, "gpu", 8, 8),
        ("auto", "auto", 0, None),
        ("auto", "cpu", 0, None),
    ],
)
def test_devices_per_job(devices, accelerator, gpus, expected):
    assert devices_per_job(devices, accelerator, gpus) == expected


BASIC = {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}
SLURM = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"}


def test_a_local_sweep_of_single_device_jobs_and_a_matching_slurm_launch_pass(tmp_path, monkeypatch):
    check_sweep_launch(BASIC, {"trainer": {"devices": 1, "accelerator": "cpu"}}, visible_gpus=0)
    check_sweep_launch(BASIC, {"trainer": {"devices": "auto", "accelerator": "auto"}}, visible_gpus=1)
    job = {"trainer": {"devices": 4, "accelerator": "gpu", "num_nodes": 2}}
    (tmp_path / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # a SLURM login node's
    check_sweep_launch({**SLURM, "tasks_per_node": 4, "nodes": 2}, job, visible_gpus=0)


def test_a_slurm_launcher_runs_its_jobs_elsewhere():
    assert is_remote(SLURM) and not is_remote(BASIC)
    assert not is_remote({"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"})


def test_a_slurm_sweep_where_slurm_is_not_is_refused_in_one_line(tmp_path, monkeypatch):
    """submitit's own refusal ('Could not detect "srun"') was a traceback once the sweep had started."""
    monkeypatch.setenv("PATH", str(tmp_path))
    job = {"trainer": {"devices": 4, "accelerator": "gpu", "num_nodes": 1}}
    with pytest.raises(ConfigValueError, match=r"^hydra/launcher=slurm submits the jobs with SLURM's commands \(srun"):
        check_sweep_launch({**SLURM, "tasks_per_node": 4, "nodes": 1}, job, visible_gpus=0)


def test_a_local_sweep_of_jobs_on_every_visible_gpu_is_refused():
    with pytest.raises(ConfigValueError, match="a local -m sweep"):
        check_sweep_launch(BASIC, {"trainer": {"devices": -1, "accelerator": "gpu"}}, visible_gpus=2)


def test_a_slurm_launch_with_other_node_counts_is_refused():
    job = {"trainer": {"devices": 4, "accelerator": "gpu", "num_nodes": 2}}
    with pytest.raises(ConfigValueError, match=r"hydra\.launcher\.nodes=1 but trainer\.num_nodes=2"):
        check_sweep_launch({**SLURM, "tasks_per_node": 4, "nodes": 1}, job, visible_gpus=0)


NODE_ENV = (*JOB_ENV, "RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LSB_JOBID", "LSB_DJOB_RANKFILE")


def test_several_nodes_need_a_launcher_that_starts_them(tmp_path, monkeypatch, capsys):
    """One command per node (Lightning's NODE_RANK launch): each node's first process took the run for its own
    before the Trainer knew its rank; refused on every node before anything is written."""
    from alternet.launch import check_nodes_launched

    from helpers import assert_one_line_error, run_main

    for name in NODE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NODE_RANK", "1")
    nodes = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=1", "trainer.num_nodes=2", "debug=fast"]
    code, stderr = run_main("train.py", [*nodes, f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys)
    assert_one_line_error(code, stderr, "trainer.num_nodes=2: start the nodes' processes with a launcher, torchrun")
    assert not (tmp_path / "run").exists()
    check_nodes_launched(1)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")  # torchrun's
    check_nodes_launched(2)


@pytest.mark.parametrize(
    "env",
    [{}, {"RANK": "1"}, {"LOCAL_RANK": "2", "SLURM_PROCID": "0"}, {"SLURM_PROCID": "3"}, {"JSM_NAMESPACE_RANK": "4"}],
)
def test_the_launched_rank_is_the_one_lightning_reads(env, monkeypatch):
    """The run-directory pre-flight and the run pick the rank that takes the lock without Lightning; Lightning's
    ``rank_zero_only`` (its loggers, its printing) must name the same process, or the rank that logs would not be
    the one that holds the run directory."""
    from lightning.fabric.utilities.rank_zero import _get_rank

    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert launched_rank() == (_get_rank() or 0)
