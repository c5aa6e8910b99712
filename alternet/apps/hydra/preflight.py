"""Hydra callbacks that check a command before Hydra writes anything: Hydra records a job's config (``.hydra/``) in
its directory before the job's own checks run, so these give the checks that protect other runs' directories first.
Before a grid sweep's first job, every job checked (:class:`SweepPreflight`); before a single run, its directory's
lock taken (:class:`RunDirPreflight`, train and evaluate) and the run directory it was pointed at checked
(:class:`RunPreflight`). First of all, a single run's settings are typed and checked as its command will check
them (:func:`_typed`): this module imports neither torch nor Lightning, which take seconds to import, so a
misspelt value is one line in about a second; the command checks again, with everything that needs them."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from ...errors import AlternetError, exit_with_error
from ...files import check_output_dir, os_error_reason
from ...launch import (
    check_nodes_launched,
    check_sweep_launch,
    devices_per_job,
    is_remote,
    launched_rank,
    resolved_launcher,
    visible_gpus,
)
from ...runs.directories import GRID_SWEEPER, RunDir, SweepDir, search_sweeper, variant_overrides
from ...runs.ownership import (
    RunDirLock,
    check_fresh_run_dir,
    discard_unused_run_dir,
    note_created_by_this_process,
    note_search_dir,
)
from ...runs.records import import_modules
from ..config import EvaluateConfig, TrainConfig, check_sources, evaluate_config, train_config
from .composition import composition_error, null_group_error
from .sweep import is_search


def grid_jobs(config: DictConfig) -> list[list[str]] | None:
    """The overrides of every job of a multirun, as Hydra's grid sweeper expands them (its ``params`` and the
    command line's sweeps, a later override of a key replacing an earlier one, the cartesian product in launch
    order); ``None`` for a sweeper that chooses its jobs as it goes (Optuna, Ax ...), and for an interval sweep,
    which the grid sweeper refuses in its own words."""
    if config.hydra.sweeper.get("_target_") != GRID_SWEEPER:
        return None
    raw = OmegaConf.to_container(config.hydra, resolve=False)  # an override's ${...} stays text, as Hydra reads it
    params = [f"{key}={value}" for key, value in (raw["sweeper"].get("params") or {}).items()]
    choices: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides([*params, *raw["overrides"]["task"]]):
        key = override.get_key_element()
        if not override.is_sweep_override():
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            return None
    return [list(job) for job in itertools.product(*choices.values())]


class SweepPreflight(Callback):
    """Registered for training and evaluation (``conf/train.yaml``, ``conf/evaluate.yaml``): before a grid sweep's
    first job, every job's config composed and given the checks a single run gets before any work (training's
    :func:`validate_train_config`), and no two jobs given one folder, so a value that cannot run stops the sweep in
    one line now, not after the jobs before it have trained for hours. A job
    holding a value that only resolves once it runs (``${hydra:runtime.output_dir}`` in a key of its own) is left
    to check itself, as it does."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_a_run_directory(config)
        command = str(config.hydra.job.name)
        loader = GlobalHydra.instance().config_loader()
        if is_search(config):  # its jobs unknown until it runs: one of them, of values it may draw, checked
            _check_a_search(config)
            probe = _a_search_job(config)
            checked = [(f"the search's jobs ({' '.join(probe)}: a job it may draw), before any job ran", probe)]
        else:
            jobs = grid_jobs(config) or ()
            _refuse_repeated_jobs(jobs)
            _refuse_another_sweeps_directories(SweepDir(config.hydra.sweep.dir), jobs)
            made = (SweepDir(config.hydra.sweep.dir).path / str(index) for index in range(len(jobs)))
            note_created_by_this_process(made)
            checked = [(f"sweep job {i} ({' '.join(o)}), before any job ran", o) for i, o in enumerate(jobs)]
        outputs: dict[Path, int] = {}
        try:
            for index, (said, overrides) in enumerate(checked):
                try:
                    job = loader.load_sweep_config(config, overrides)
                except CompactHydraException as error:  # Hydra would print it as a warning, then its own report
                    exit_with_error(f"{said}: {composition_error(error, command)}")
                except ValueError as error:  # a group set to null
                    if (null := null_group_error(error, overrides, command)) is None:
                        raise
                    exit_with_error(f"{said}: {null}")
                with open_dict(job):
                    job.hydra.job.num = index
                HydraConfig.instance().set_config(job)  # what ${hydra:...} reads, as the launcher sets it per job
                if not is_search(config):
                    _refuse_a_shared_output(job, index, outputs)
                launcher = resolved_launcher(job)  # before the job's Hydra section goes
                plain = _resolved_before_it_runs(job)
                if plain is None:
                    continue
                try:
                    _check_job(command, launcher, plain)
                except AlternetError as error:
                    exit_with_error(f"{said}: {error}")
        finally:
            HydraConfig.instance().cfg = None  # unset, as the launcher expects to find it


def _refuse_a_shared_output(job: DictConfig, index: int, outputs: dict[Path, int]) -> None:
    """Two jobs writing into one folder (a ``hydra.sweep.subdir`` without the job's number, an evaluation's
    ``out_dir``) would each overwrite the one before and leave one job's results under another's overrides."""
    try:
        folder = Path(str(job.hydra.sweep.dir)) / str(job.hydra.sweep.subdir)
        output = folder
        if "out_dir" in job:  # an evaluation's: its job folder (paths.output_dir), unless set
            evaluation = job.copy()
            with open_dict(evaluation):
                evaluation.paths.output_dir = str(folder)  # ${hydra:runtime.output_dir}, as the launcher sets it
            output = Path(str(evaluation.out_dir))
    except OmegaConfBaseException:
        return  # resolved only once the job runs
    output = output.expanduser().absolute()
    if (first := outputs.setdefault(output, index)) == index:
        return
    if output != folder.expanduser().absolute():
        exit_with_error(
            f"sweep jobs {first} and {index} would write into one folder, {output}: out_dir names one folder for "
            "every job; leave it out (each job writes to hydra.sweep.dir/NUMBER), or score the models in one "
            "evaluation, ckpt=[A,B]"
        )
    raw = OmegaConf.to_container(job.hydra.sweep, resolve=False)["subdir"]
    exit_with_error(
        f"sweep jobs {first} and {index} would write into one folder, {output}: hydra.sweep.subdir={raw} names the "
        "same folder for every job; leave it out (each job's number) or make it differ by job, e.g. "
        "hydra.sweep.subdir='${hydra.job.num}_NAME'"
    )


def _check_job(command: str, launcher: dict[str, Any], plain: dict[str, Any]) -> None:
    """A sweep job's checks, as a single run gets them before any work: typed first (:func:`_typed`, before torch
    is imported) and the weights it reads (:func:`check_sources`: an evaluation's ``ckpt``, a training job's
    ``model.pretrained``); for training, then its launch, the checks that need torch, and an in-memory data set's
    first batch (an evaluation checks the rest as it starts)."""
    typed = _typed(command, plain)
    with warnings.catch_warnings():  # a run's missing best checkpoint: the job warns of it, once
        warnings.simplefilter("ignore")
        check_sources(typed)
    if command != "train":
        return
    from ...data import DATAMODULES  # deferred, as every import of torch and Lightning here (the module's doc)
    from ..checks import validate_train_config  # deferred
    from ..train import build_data  # deferred

    check_sweep_launch(launcher, plain, visible_gpus())
    with warnings.catch_warnings():  # each job prints its own warnings when it runs
        warnings.simplefilter("ignore")
        typed = validate_train_config(plain, here=not is_remote(launcher))  # a SLURM job: its node's GPUs
        if DATAMODULES[typed.data.name].IN_MEMORY:  # arrays: read in seconds (folders at the job)
            build_data(typed).check_before_fit()  # a batch the job's data can fill (data.subset)


def _task_overrides(config: DictConfig) -> list[str]:
    """The command line's overrides as typed (a ``${hydra.job.num}`` in one resolves only once a job runs)."""
    return [str(o) for o in OmegaConf.to_container(config.hydra.overrides, resolve=False)["task"]]


def _a_search_job(config: DictConfig) -> list[str]:
    """The overrides of a job a search may launch: its fixed ones, and for each searched key a value it may draw
    (a choice's first, an interval's middle: geometric for a log interval), so that the checks meet the values the
    jobs will hold, not the defaults none of them uses; a misspelt key is refused by Hydra as it composes it."""
    job = []
    for override in OverridesParser.create().parse_overrides(_task_overrides(config)):
        key = override.get_key_element()
        if not override.is_sweep_override():
            job.append(f"{key}={override.get_value_element_as_str()}")
        elif override.is_discrete_sweep():
            job.append(f"{key}={next(iter(override.sweep_string_iterator()))}")
        else:  # interval(a, b), maybe tagged log
            interval = override.value()
            low, high = interval.start, interval.end
            log = "log" in interval.tags and low > 0 and high > 0
            middle = (low * high) ** 0.5 if log else (low + high) / 2
            job.append(f"{key}={round(middle) if isinstance(low, int) and isinstance(high, int) else middle!r}")
    return job


def _check_a_search(config: DictConfig) -> None:
    """A search optimises the value its jobs return (``optimized_metric``), in the direction that improves it, and
    numbers its jobs from 0 again on each launch, with new values: a directory holding an earlier search's jobs
    would have their records overwritten and their finished runs handed back as the new values' results."""
    from ...metrics.table import metric_mode  # deferred: the metrics' torch (the module's doc)

    sweeper = search_sweeper(config.hydra.sweeper.get("_target_"))
    metric = config.get("optimized_metric")
    if metric is None:
        exit_with_error(
            f"{sweeper} chooses each job's values by what the earlier jobs returned, and a run returns its "
            "optimized_metric: set one, e.g. optimized_metric=val/nll hydra.sweeper.direction=minimize"
        )
    direction = config.hydra.sweeper.get("direction")
    direction = str(getattr(direction, "name", direction))  # Optuna's default is its Direction enum, not a string
    wanted = {"max": "maximize", "min": "minimize"}.get(metric_mode(metric) or "")
    if direction in ("minimize", "maximize") and wanted and direction != wanted:
        exit_with_error(
            f"hydra.sweeper.direction={direction} would look for the worst optimized_metric={metric}: set "
            f"hydra.sweeper.direction={wanted}"
        )
    sweep = SweepDir(config.hydra.sweep.dir)
    folders = [p for p in sweep.path.iterdir() if p.is_dir() and p.name[0] != "."] if sweep.path.is_dir() else []
    if earlier := [p for p in folders if p != sweep.report_dir]:  # job folders, or folders of them (a subdir)
        exit_with_error(
            f"hydra.sweep.dir={sweep.path} holds {len(earlier)} job folder{'s' * (len(earlier) > 1)} of an earlier "
            f"sweep, and {sweeper} numbers its jobs from 0 with new values on every launch: it would overwrite their "
            "records and hand their results back as the new values'. Launch it with hydra.sweep.dir=NEW_DIR (a "
            "search continues from its storage, e.g. Optuna's hydra.sweeper.storage and study_name)"
        )
    note_search_dir(sweep.path)


def _refuse_a_run_directory(config: DictConfig) -> None:
    """``hydra.run.dir`` names one run's directory; a multirun (``-m``, or a sweep preset that sets
    ``hydra.mode=MULTIRUN``) ignores it and numbers its jobs under ``hydra.sweep.dir`` from 0."""
    typed = OmegaConf.to_container(config.hydra.overrides, resolve=False)["hydra"]  # ${hydra.job.num}: unresolved
    given = [o for o in typed if str(o).split("=", 1)[0].lstrip("+~") == "hydra.run.dir"]
    if given:
        exit_with_error(
            f"{given[0]}: this is a sweep (-m, or a preset that sweeps), whose jobs go to "
            f"hydra.sweep.dir/<job number> ({config.hydra.sweep.dir}/0, /1, ...), not to hydra.run.dir. Pass "
            "hydra.mode=RUN to train one job in hydra.run.dir, or hydra.sweep.dir=DIR to place the sweep"
        )


def _refuse_repeated_jobs(jobs: Sequence[list[str]]) -> None:
    """Two jobs of the same overrides (``seed=0,0``) would train the same run twice, and a report would count it as
    two seeds."""
    first: dict[tuple[str, ...], int] = {}
    for index, overrides in enumerate(jobs):
        key = tuple(sorted(overrides))
        if key in first:
            exit_with_error(
                f"sweep jobs {first[key]} and {index} have the same overrides ({' '.join(overrides)}): the second "
                "would train the same run again; list each value once"
            )
        first[key] = index


def _refuse_another_sweeps_directories(sweep: SweepDir, jobs: Sequence[list[str]]) -> None:
    """A job directory that already holds a job of other overrides (another sweep launched into the same
    directory): Hydra would overwrite its records (``.hydra/``) before the job could refuse to resume it."""
    for index, overrides in enumerate(jobs):
        job = RunDir(sweep.path / str(index))
        recorded = job.overrides()  # none when the directory or Hydra's record of it does not exist
        if recorded and sorted(variant_overrides(recorded)) != sorted(variant_overrides(list(overrides))):
            exit_with_error(
                f"sweep job {index} ({' '.join(overrides)}) would run in {job.path}, which holds a job of other "
                f"overrides ({' '.join(recorded)}): Hydra would overwrite its records. Launch this sweep with "
                "hydra.sweep.dir=NEW_DIR, or with the overrides it was started with to continue it"
            )


def _resolved_before_it_runs(job: DictConfig) -> dict[str, Any] | None:
    """The job's config without Hydra's section, resolved; ``None`` when a value resolves only once it runs."""
    with open_dict(job):
        del job["hydra"]
        job.paths.output_dir = "set when the job runs"  # ${hydra:runtime.output_dir}, set by the launcher
    try:
        return OmegaConf.to_container(job, resolve=True)
    except OmegaConfBaseException:
        return None


def _run_values(config: DictConfig, run: RunDir) -> dict[str, Any] | None:
    """A single run's config but Hydra's section as its job will resolve it, in ``run``'s directory
    (``${hydra:...}`` read as Hydra's ``run_job`` will set it); ``None`` when a value does not resolve."""
    job = config.copy()
    with open_dict(job):
        job.hydra.runtime.output_dir = str(run.path.absolute())  # as run_job sets it; a link loop is the lock's to say
    before = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(job)
    try:
        with open_dict(job):
            del job["hydra"]
        return OmegaConf.to_container(job, resolve=True)
    except OmegaConfBaseException:
        return None
    finally:
        HydraConfig.instance().cfg = before


CONFIGS = {"train": train_config, "evaluate": evaluate_config}  # a job's name: its command's typed config


def _typed(command: str, values: dict[str, Any]) -> TrainConfig | EvaluateConfig:
    """``values`` typed and checked as ``command`` types them (its ``imports=`` first: what they register is known
    to the checks), before anything imports torch: a value the command refuses is one line in about a second, not
    after seconds of imports. Its warnings are the command's to print, once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import_modules(values.get("imports"))
        return CONFIGS[command](values)


def _checked_values(config: DictConfig, run: RunDir) -> TrainConfig | EvaluateConfig | None:
    """A single run's settings typed (:func:`_typed`) where its job is one of ours; ``None`` where a value resolves
    only as the job runs (left to the command)."""
    command = str(config.hydra.job.name)
    values = _run_values(config, run) if command in CONFIGS else None
    try:
        return None if values is None else _typed(command, values)
    except AlternetError as error:
        exit_with_error(error)


RUN_DIRECTORIES = {  # job name: (what its hydra.run.dir is called, whose files it holds, the key that sets it)
    "train": ("run directory", "a run of alternet's", "hydra.run.dir"),
    "evaluate": ("evaluation directory", "an evaluation of alternet's", "out_dir"),
}


def _output_checked(typed: TrainConfig | EvaluateConfig, run: RunDir) -> bool:
    """Whether the run directory's check was the command's check of its output: a training run's, and an
    evaluation's into its run directory (not one with ``out_dir`` elsewhere, which the command checks)."""
    return not isinstance(typed, EvaluateConfig) or Path(typed.out_dir).expanduser().absolute() == run.path.absolute()


class RunDirPreflight(Callback):
    """Registered for every command with a run directory (train, evaluate): before Hydra writes anything into
    ``hydra.run.dir``, rank 0 takes the directory's lock (:class:`alternet.runs.ownership.RunDirLock`, held for the
    command's life), so a second launch into a live run's directory is refused in one line and touches nothing, whatever
    the timing, and only the command that created the directory may remove it when it fails before any work."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run, job = RunDir(str(config.hydra.run.dir)), str(config.hydra.job.name)
        typed = _checked_values(config, run)
        if launched_rank() != 0:  # other ranks join rank 0's run
            return
        what, own, option = RUN_DIRECTORIES.get(job, ("run directory", f"a {job} job's", "hydra.run.dir"))
        lock = RunDirLock(run, what, option)
        try:
            lock.check_free()  # a live run there is reported as such, first
            check_output_dir(run.path, what, lambda path: RunDir(path).holds_job(job), own, option)
            lock.acquire()
        except AlternetError as error:
            exit_with_error(error)
        except OSError as error:  # a name too long for the file system (ENAMETOOLONG) ...
            exit_with_error(
                f"{what} {run.path} cannot be made: {os_error_reason(error)}; give it another one ({option}=...)"
            )
        if typed is not None and _output_checked(typed, run):  # the output first, then the weights it reads
            try:
                with warnings.catch_warnings():  # a run's missing best checkpoint: the command warns of it, once
                    warnings.simplefilter("ignore")
                    check_sources(typed)
            except AlternetError as error:
                discard_unused_run_dir(run)  # made by the lock above: a refused command leaves nothing
                exit_with_error(error)


class RunPreflight(RunDirPreflight):
    """Registered for training (``conf/train.yaml``): a single run pointed (``hydra.run.dir``) at a
    directory that holds a run, finished or interrupted, is given its run-directory checks before Hydra rewrites
    that run's ``.hydra/`` records: a new run that would overwrite it (no ``ckpt_path``, no ``reuse_run_dir``) and a
    resume with settings its checkpoint would not apply stop here, in the lines the run itself would print, and the
    directory is left as it was. The run repeats the checks once it owns the directory (:mod:`alternet.apps.train`)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:  # on every node, before any takes the lock
            check_nodes_launched(OmegaConf.select(config, "trainer.num_nodes", default=1))
        except AlternetError as error:
            exit_with_error(error)
        super().on_run_start(config, **kwargs)  # the lock first (apps.train finds it held)
        run = RunDir(str(config.hydra.run.dir))
        if not (run.is_finished() or run.checkpoint_files()):
            return  # nothing there whose records Hydra could overwrite
        if sorted(run.overrides()) == sorted(_task_overrides(config)):
            return  # the run's own command again (a requeued job): Hydra rewrites its records as they were
        plain = _run_values(config, run)
        if plain is None:
            return
        if plain["ckpt_path"] is None:  # a new run: what the directory holds is all there is to check
            try:
                check_fresh_run_dir(run, False, bool(plain["reuse_run_dir"]))
            except AlternetError as error:
                exit_with_error(error)
            return
        from ...runs.checkpoints import checkpoint_header, resume_checkpoint  # deferred (the module's doc)
        from ...training.builders import checkpoint_mode  # deferred
        from ...training.resume import check_resume_batch, check_resume_monitor, check_resume_settings  # deferred
        from ..checks import validate_train_config  # deferred

        try:
            resume = resume_checkpoint(plain["ckpt_path"], run, say=False)  # the run says it, once
            asked_last = plain.get("ckpt_path") == "last"
            check_fresh_run_dir(run, resume is not None, bool(plain["reuse_run_dir"]), asked_last=asked_last)
            if resume:
                with warnings.catch_warnings():  # the run prints its own warnings
                    warnings.simplefilter("ignore")
                    typed = validate_train_config(plain)
                header = checkpoint_header(resume)
                check_resume_settings(typed.model, typed.recipe, typed.data, resume, header, typed.seed)
                check_resume_monitor(
                    typed.callbacks.checkpoint.monitor, checkpoint_mode(typed.callbacks), resume, header
                )
                trainer = typed.trainer
                devices = devices_per_job(trainer.devices, trainer.accelerator, visible_gpus())
                if devices is not None:  # else the run checks it once its Trainer knows
                    batch = [typed.recipe.batch_size, devices * trainer.num_nodes, trainer.accumulate_grad_batches]
                    check_resume_batch(resume, header, batch)
        except AlternetError as error:
            exit_with_error(error)
