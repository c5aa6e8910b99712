"""How a training run was launched, and what every process of it must agree on before any work.

* **The run directory.** Hydra names a run's directory after the time it composed its config. Lightning's own
  launcher hands rank 0's directory to the processes it starts, but ``torchrun`` and a plain ``srun`` start every
  rank as a command of its own, and each would compose its own time. Under those, the directory is named after the
  job instead (``TORCHELASTIC_RUN_ID``, or the SLURM job and step), the same on every rank and on every relaunch of
  the job, so ``ckpt_path=last`` finds the job's own checkpoint (:func:`run_stamp`, the ``${alternet.run_stamp:}``
  resolver of ``hydra.run.dir``).
* **A sweep that cannot launch.** A local ``-m`` sweep runs its jobs one after another in one process; a job that
  asks for several devices would have Lightning re-execute the command line per process, relaunching the sweep. A
  SLURM launcher whose tasks per node differ from ``trainer.devices`` queues jobs whose ranks Lightning then refuses
  (:func:`check_sweep_launch`, called by the sweep's preflight before any job is queued or run).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from .errors import ConfigValueError, exit_with_error


def run_stamp() -> str:
    """The run directory's name under ``paths.log_dir/runs``: the job's id under ``torchrun`` (``torchrun-ID``)
    or a multi-task ``srun`` step (``slurm-JOB.STEP``), otherwise the date and time to the microsecond."""
    env = os.environ
    if env.get("TORCHELASTIC_RUN_ID") and int(env.get("WORLD_SIZE", "1")) > 1:
        if env["TORCHELASTIC_RUN_ID"] == "none":  # torchrun's default without --rdzv-id: every such job alike
            exit_with_error(  # an error raised in a resolver reaches the user as OmegaConf's traceback
                "torchrun started this job without a run id (TORCHELASTIC_RUN_ID=none): its ranks, and every other "
                "job so started, would share runs/torchrun-none; pass --rdzv-id=NAME (or --standalone) to torchrun, "
                "or name the run directory with hydra.run.dir=DIR"
            )
        return f"torchrun-{env['TORCHELASTIC_RUN_ID']}"
    if int(env.get("SLURM_NTASKS", "1")) > 1 and env.get("SLURM_JOB_ID") and env.get("SLURM_STEP_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
    return datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f")


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("alternet.run_stamp"):
        OmegaConf.register_new_resolver("alternet.run_stamp", run_stamp, use_cache=True)
    if not OmegaConf.has_resolver("alternet.groups"):
        OmegaConf.register_new_resolver("alternet.groups", config_groups)


COMMAND_GROUPS = {  # the config groups each command takes on its command line (its --help lists them)
    "train": (
        "data",
        "model",
        "recipe",
        "trainer",
        "logger",
        "callbacks",
        "evaluation",
        "experiment",
        "experiment/paper",
        "debug",
        "hydra/launcher",
    ),
    "evaluate": ("data", "analysis", "logger", "recipe"),
}


def config_groups(command: str, searchpath: Sequence[str] = ()) -> str:
    """``group: option, option ...`` per line for the groups ``command`` takes (Hydra's ``$APP_CONFIG_GROUPS`` lists
    every group under ``conf/``, those the command refuses too), the options of the folders and packages on
    ``hydra.searchpath`` among them; options starting with ``_`` are shared bases."""
    roots = [resources.files("alternet.conf")]
    for entry in searchpath or ():
        scheme, _, where = str(entry).partition("://")
        with contextlib.suppress(ModuleNotFoundError, TypeError, ValueError):  # one that does not exist lists nothing
            roots.append(Path(where) if scheme == "file" else resources.files(where))
    lines = []
    for group in COMMAND_GROUPS[command]:
        options = sorted(
            {
                f.name.removesuffix(".yaml")
                for root in roots
                if root.joinpath(group).is_dir()
                for f in root.joinpath(group).iterdir()
                if f.name.endswith(".yaml") and not f.name.startswith("_")
            }
        )
        lines.append(f"{group}: {', '.join(options)}")
    return "\n".join(lines)


def devices_per_job(devices: Any, accelerator: str, visible_gpus: int) -> int | None:
    """How many processes ``trainer.devices`` starts: a count, a list's length, or (``-1``/``auto``) the visible
    GPUs on a GPU run; ``None`` when it cannot be told before the run (auto on a CPU: one)."""
    if isinstance(devices, bool):
        return None
    if isinstance(devices, int) and devices >= 1:
        return devices
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        return devices_per_job(int(devices), accelerator, visible_gpus)
    if devices in (-1, "auto", "-1") and accelerator in ("gpu", "cuda", "auto"):
        return visible_gpus or (None if accelerator == "auto" else 1)
    return None


def check_sweep_launch(launcher: Mapping[str, Any], job: Mapping[str, Any], visible_gpus: int) -> None:
    """Refuse, before any job starts, a sweep job its launcher cannot run: several devices per job under the local
    launcher, or a SLURM launcher whose tasks per node or nodes differ from ``trainer.devices`` / ``num_nodes``."""
    trainer = job["trainer"]
    target = str(launcher.get("_target_", ""))
    devices = devices_per_job(trainer.get("devices"), str(trainer.get("accelerator", "auto")), visible_gpus)
    if target.endswith("BasicLauncher") and devices is not None and devices > 1:
        raise ConfigValueError(
            f"trainer.devices={trainer.get('devices')}: a local -m sweep runs its jobs one after another in this "
            "process, and Lightning's DDP would re-execute the command line per device, relaunching the sweep. Run "
            "each job as a command of its own, sweep on SLURM (hydra/launcher=slurm), or set trainer.devices=1"
        )
    if target.endswith("submitit_launcher.LocalLauncher") and devices is not None and devices > 1:
        raise ConfigValueError(
            f"trainer.devices={trainer.get('devices')}: hydra/launcher=submitit_local runs each job as one process, "
            "and Lightning's DDP would re-execute submitit's command line per device, which Hydra cannot read. Sweep "
            "on SLURM (hydra/launcher=slurm: one task per device), or set trainer.devices=1"
        )
    if target.endswith("JoblibLauncher") and devices is not None and devices > 1:
        raise ConfigValueError(
            f"trainer.devices={trainer.get('devices')}: hydra/launcher=joblib runs each job in a worker process of "
            "joblib's, and Lightning's DDP would re-execute that worker's command line per device. Sweep on SLURM "
            "(hydra/launcher=slurm: one task per device), or set trainer.devices=1"
        )
    if is_remote(launcher):
        tasks, nodes = launcher.get("tasks_per_node"), launcher.get("nodes")
        if devices is None or tasks != devices:
            raise ConfigValueError(
                f"hydra.launcher.tasks_per_node={tasks} but trainer.devices={trainer.get('devices')}: Lightning needs "
                "one SLURM task per device and refuses the job once it has queued and started. Give both the same "
                "count (the slurm launcher's default ties them: leave tasks_per_node unset)"
            )
        if nodes != trainer.get("num_nodes", 1):
            raise ConfigValueError(
                f"hydra.launcher.nodes={nodes} but trainer.num_nodes={trainer.get('num_nodes')}: give both the same "
                "count (the slurm launcher's default ties them: leave nodes unset)"
            )
        if shutil.which("srun") is None:  # submitit's own refusal is a traceback, once the sweep has started
            raise ConfigValueError(
                "hydra/launcher=slurm submits the jobs with SLURM's commands (srun, sbatch), which this machine does "
                "not have: run the sweep on a SLURM cluster's login node, or hydra/launcher=submitit_local to run "
                "its jobs here"
            )


def is_remote(launcher: Mapping[str, Any]) -> bool:
    """Whether a sweep's launcher runs its jobs on other machines (SLURM's nodes) than the one it is started on."""
    return "SlurmLauncher" in str(launcher.get("_target_", ""))


def check_nodes_launched(num_nodes: Any) -> None:
    """Refuse ``trainer.num_nodes`` > 1 where no launcher starts the nodes' processes (torchrun, SLURM, LSF, MPI).
    Started as one command per node (Lightning's own launcher with ``NODE_RANK``), the first process of every node
    is rank 0 until the Trainer exists: each took the run for its own (a run directory and W&B run each, and a
    resume on one node only; or, in one directory, one refused while the other waited for it)."""
    if not str(num_nodes).strip().isdigit() or int(num_nodes) <= 1:  # a count, or text of one (${oc.env:...})
        return
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    launchers = (SLURMEnvironment, TorchElasticEnvironment, LSFEnvironment, MPIEnvironment)  # as Lightning detects
    if any(launcher.detect() for launcher in launchers):
        return
    raise ConfigValueError(
        f"trainer.num_nodes={num_nodes}: start the nodes' processes with a launcher, torchrun (--nnodes={num_nodes}) "
        "or SLURM (hydra/launcher=slurm, or srun in an sbatch script); started as one command per node (NODE_RANK), "
        "each node would take the run for its own"
    )


def launched_rank() -> int:
    """This process's rank as its launcher set it before any Trainer exists: torchrun's ``RANK``, the
    ``LOCAL_RANK`` Lightning gives the processes it starts, SLURM's ``SLURM_PROCID``, LSF's ``JSM_NAMESPACE_RANK``,
    the first set in that order; 0 where none is. What Lightning's ``rank_zero_only`` reads on import, read here
    without importing it (the pre-flights answer before torch is imported)."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if (value := os.environ.get(key)) is not None:
            return int(value)
    return 0


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def resolved_launcher(job: Any) -> dict[str, Any]:
    """The job's ``hydra.launcher`` section, its interpolations (``${trainer.devices}``) resolved against the job."""
    return OmegaConf.to_container(job.hydra.launcher, resolve=True)
