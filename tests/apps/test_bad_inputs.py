"""Bad inputs as a user types them, through the real command lines: each must fail before any work with one line
naming the key or file (exit status non-zero, no traceback), so no change can quietly turn one back into a
traceback deep inside training.

The catalogue runs ``train.py`` / ``evaluate.py`` as ``__main__`` in this process (their Hydra entry points,
argument parsing and error handling, as a user's command runs them; a fresh interpreter costs ~8 s a case); one case
of each also runs as a real subprocess to check the exit status and stderr end to end."""

import importlib.util
import re
import shlex
import warnings

import pytest
import torch

from alternet.report import build_report

from helpers import assert_one_line_error, compose_train, main_output, run_main, run_script

TRAIN = [
    # (arguments, what the error must say)
    (  # Lightning clipped at one value while the run recorded, resumed and reported the recipe's other
        ["trainer.gradient_clip_val=1.0"],
        "error: trainer.gradient_clip_val=1 is not recipe.grad_clip=5: the run records, resumes and reports the "
        "recipe's clip; set recipe.grad_clip=1 instead (trainer.gradient_clip_val follows it)",
    ),
    (  # Lightning's 0 is no clipping: the advice names the recipe's spelling of it
        ["trainer.gradient_clip_val=0"],
        "error: trainer.gradient_clip_val=0 is not recipe.grad_clip=5: the run records, resumes and reports the "
        "recipe's clip; set recipe.grad_clip=null instead",
    ),
    (
        ["trainer.gradient_clip_val=null"],
        "error: trainer.gradient_clip_val=null is not recipe.grad_clip=5: the run records, resumes and reports the "
        "recipe's clip; set recipe.grad_clip=null instead",
    ),
    (  # Lightning's *-true converts the whole module: an EMA in bf16 stayed near its first weights
        ["trainer.precision=bf16-true", "recipe.ema.decay=0.9999"],
        "error: recipe.ema.decay=0.9999 with trainer.precision=bf16-true: the EMA's weights would be bf16 (8 "
        "significant bits), too coarse for its per-step change (0.0001 of the gap to the weights: an EMA that barely "
        "moves); use trainer.precision=bf16-mixed, or recipe.ema.decay=null",
    ),
    (["recipe.epochs=-1"], "error: recipe.epochs=-1 is invalid: must be an integer >= 1"),
    (["recipe.batch_size=0"], "error: recipe.batch_size=0 is invalid: must be an integer >= 1"),
    (["data.val_size=5000"], "error: data.val_size=5000 is not smaller than the 1437 training images"),
    (["recipe.batch_size=100000"], "error: recipe.batch_size=100000 is larger than the 1257 training images"),
    (  # most crops blank padding, some wholly: accepted before
        ["recipe.augment.arrays.crop_padding=100"],
        "error: recipe.augment.arrays.crop_padding=100 is not smaller than the 16-px images (data.image_size)",
    ),
    (  # a W&B preset's tags outlive logger=csv: "logger.wandb.project must be set" advised the opposite
        ["experiment=alternet_r50_cifar100", "data=digits", "model=alternet_tiny", "trainer=cpu", "logger=csv"],
        "error: logger.wandb holds tags but no project: a preset's W&B settings outlive logger=csv; add "
        "logger.wandb=null to switch W&B off",
    ),
    (  # Lightning's own refusal as the fit starts: a traceback, and a run directory left behind
        ["+trainer.val_check_interval=100"],
        "error: trainer settings rejected by Lightning: `val_check_interval` (100) must be less than or equal to",
    ),
    (  # the hold-out took the images: it says so, and what makes room
        ["data.val_size=1400"],
        "error: recipe.batch_size=64 is larger than the 37 training images left after data.val_size=1400: the "
        "learning rate is scaled for 64 images a step; choose recipe.batch_size <= 37, or lower data.val_size",
    ),
    (
        ["model.name=alternet_r9000"],
        "error: unknown model 'alternet_r9000'. alternet models: alternet_laptop, alternet_r101",
    ),
    (["model=alternet_r9000"], "error: model=alternet_r9000 is not an option of model (did you mean 'alternet_r50'?)"),
    (  # a group set to null: Hydra's 47-line ValueError traceback
        ["data=null"],
        "error: data=null is invalid: data= chooses one of its options (the options are cifar10, cifar100, digits, "
        "imagefolder, imagenet); leave it out for the default",
    ),
    (  # W&B's own refusal came as a traceback once the data had loaded, leaving the run directory behind
        ["logger=wandb", "logger.wandb.project='my/proj:x'"],
        "error: logger.wandb.project='my/proj:x' is invalid: must be a W&B project name (at most 128 characters",
    ),
    (["logger=wandb", f"logger.wandb.tags=[{'t' * 80}]"], "error: logger.wandb.tags: 'tttttttttttttttttttt...' has 80"),
    (["logger=wandb", "logger.wandb.entity='team name'"], "error: logger.wandb.entity='team name' is invalid: must be"),
    (["logger=wandb", f"logger.wandb.group={'g' * 129}"], "is invalid: must be a group name of 1 to 128 characters"),
    (
        ["data=imagenet_21k"],
        "error: data=imagenet_21k is not an option of data (did you mean 'imagenet'?); the options",
    ),
    (
        ["experiment=paper/localty"],
        "experiment=paper/localty is not an option of experiment (did you mean 'paper/locali",
    ),
    (["recipe.optimizer.lrx=1"], "error: recipe.optimizer.lrx is not a key of recipe.optimizer (did you mean 'lr'?)"),
    (["recipe.lr=["], "error: cannot read the override 'recipe.lr=[': no viable alternative at input '['"),
    (["data.root=/data/über"], "error: cannot read the override 'data.root=/data/über'; quote a value holding spaces"),
    (["model.window=3"], "error: stage 2 ('CM'): window 3 does not divide the stage's 8x8 feature map"),
    (["data=cifar100", "data.root=/nonexistent"], "error: cifar100 not found: looked in /nonexistent/cifar-100-python"),
    (["ckpt_path=/nonexistent.ckpt"], "error: checkpoint /nonexistent.ckpt does not exist"),
    (["ckpt_path=''"], "error: ckpt_path='' is invalid: it must name a checkpoint file"),  # not Lightning's `.fit(...)`
    (
        ["recipe.optimizer.name=adam"],
        "recipe.optimizer.name='adam' is not one of ['adamw', 'sgd'] (did you mean 'adamw'?)",
    ),
    (["recipe=fast", "recipe.schedule.name=cosin"], "recipe.schedule.name='cosin' is not one of"),
    (
        ["++trainer.max_epoch=1"],
        "trainer.max_epoch is not an argument of lightning.Trainer (did you mean 'max_epochs'?)",
    ),
    (["seed=abc"], "error: seed=abc is invalid: must be an integer"),
    (["trainer.max_epochs=1.0"], "error: trainer.max_epochs=1.0 is invalid: must be an integer"),  # it read =1
    (["data.image_size=112000"], "error: data.image_size=112000 with recipe.batch_size=64 needs 8,972.2 GiB for one"),
    (["data.image_size=100000"], "error: stage 2 ('CM'): the automatic attention window 7 does not divide the stag"),
    (["~model.widths"], "error: ~model.widths deletes nothing: model.widths is null already (its default) or is n"),
    (["~recipe.ema.decay"], "error: ~recipe.ema.decay deletes nothing: recipe.ema.decay is null already; ~KEY rem"),
    (["hydra.searchpath=[file:///nonexistent/conf]"], "hydra.searchpath names file:///nonexistent/conf, which is not"),
    (["~recipe.bach_size"], "error: ~recipe.bach_size: recipe.bach_size is not a key of recipe (did you mean 'batch"),
    (["~seed"], "error: ~seed: seed cannot be removed, the command always needs a value; set seed=VALUE instead"),
    (["~trainer.max_epochs"], "error: ~trainer.max_epochs: trainer.max_epochs cannot be removed, the command always"),
    (["~recipe"], "error: ~recipe: recipe cannot be removed, the command always needs a value"),  # a ${recipe...}
    (["~recipe.epochs"], "error: ~recipe.epochs: recipe.epochs cannot be removed, the command always needs a value"),
    (
        ["~recipe.grad_clip"],
        "cannot be removed, the command always needs a value; set recipe.grad_clip=null or another",
    ),
    (["~logger"], "error: ~logger: logger cannot be removed, the command always needs a value"),  # was AttributeError
    (["evaluate.calibration.n_bins=10000000000"], "evaluate.calibration.n_bins=10000000000 is invalid: must be an"),
    (["data=imagefolder"], "data.root must be set"),
    (
        ["model.attention=windows"],
        "model.attention='windows' is not one of ['window', 'global', 'focused_linear', 'position_only']",
    ),
    (["data.image_size=40"], "the automatic attention window 4 does not divide the stage's 10x10 feature map"),
    (["trainer.precision=17"], "trainer.precision=17 is not one of ['auto', 'transformer-engine', "),
    pytest.param(
        ["trainer.accelerator=gpu"],
        "trainer.accelerator=gpu but this machine has no usable CUDA GPU",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU"),
    ),
    (["trainer.devices=0"], "trainer.devices=0 is invalid: must be auto, -1 (all), a count >= 1"),
    (["++trainer.strategy=ddp_foo"], "trainer settings rejected by Lightning: You selected an invalid strategy name"),
    pytest.param(  # a Lightning callback's missing package, found as the fit starts: a traceback and Hydra's records
        ["callbacks.extra=[{_target_:lightning.pytorch.callbacks.DeviceStatsMonitor}]"],
        "callback settings (callbacks.*) rejected by Lightning: `DeviceStatsMonitor` cannot log CPU stats",
        marks=pytest.mark.skipif(importlib.util.find_spec("psutil") is not None, reason="psutil is installed here"),
    ),
    (["callbacks.checkpoint.monitor=val/foo"], "callbacks.checkpoint.monitor=val/foo is not a metric the run logs"),
    (["callbacks.checkpoint.train_time_interval=banana"], "callbacks.checkpoint.train_time_interval='banana' is"),
    (["callbacks.checkpoint.train_time_interval='1:00:00:00:30'"], "train_time_interval='1:00:00:00:30' is invalid"),
    (["callbacks.checkpoint.train_time_interval='1:-30'"], "callbacks.checkpoint.train_time_interval='1:-30' is"),
    (["callbacks.checkpoint.train_time_interval=true"], "callbacks.checkpoint.train_time_interval=True is invalid"),
    (["callbacks.checkpoint.train_time_interval=inf"], "callbacks.checkpoint.train_time_interval=inf is invalid"),
    (
        ["recipe.augment.arrays.randaugment=banana"],
        "recipe.augment.arrays.randaugment='banana' is invalid: a RandAugment policy starts with 'rand'",
    ),
    (  # timm's own parser (image files): an assertion, a bare int() error, or a section skipped silently
        ["recipe.augment.files.randaugment=rand-mnine-n2"],
        "recipe.augment.files.randaugment='rand-mnine-n2' is invalid: its section 'mnine' is not one of timm's",
    ),
    (["recipe.augment.arrays.cutout={holes: 1, size: 100}"], "cutout.size=100 is larger than the 16-px images"),
    (["trainer.precision=transformer-engine"], "rejected by Lightning: Requirement 'transformer_engine"),
    (["callbacks.checkpoint.every_n_train_steps=-1"], "callbacks.checkpoint.every_n_train_steps=-1 is invalid"),
    (["callbacks.preemption.signals=[SIGFOO]"], "callbacks.preemption.signals has unknown signal names ['SIGFOO']"),
    (["callbacks.preemption.sync_every_n_steps=0"], "callbacks.preemption.sync_every_n_steps must be a positive"),
    (["evaluate.calibration.n_bins=0"], "evaluate.calibration.n_bins=0 is invalid: must be an integer in [1, 100,000]"),
    (["evaluate.precision=8"], "evaluate.precision='8' is not one of ['32', 'bf16', '16']"),
    (["model.pretrained=/nonexistent"], "error: /nonexistent does not exist: expected a run directory"),
    (["data=imagefolder", "data.root=/nonexistent"], "imagefolder: /nonexistent/train not found"),
    (["recipe.label_smoothing=1.5"], "recipe.label_smoothing=1.5 is invalid: must be in [0, 1)"),
    (["model.layout=[C,M]"], "model.layout=['C', 'M'] is invalid: must be a string"),
    (["model.layout=C|MC|CM"], "stage 2 ('MC'): the first block of a stage changes resolution/width"),
    (["data.subset=1.5"], "data.subset=1.5 is invalid: a fraction of the training split in (0, 1]"),
    (["data.train_clean_size=-1"], "data.train_clean_size=-1 is invalid: an image count >= 0"),
    # the after-training evaluation's files, checked before training rather than at its end
    (["evaluate.after_training=true", "evaluate.robustness.root=/nonexistent"], "CIFAR-C directory /nonexistent does"),
    (["evaluate.after_training=true", "evaluate.ood.root=/nonexistent"], "ood.root=/nonexistent is not a directory"),
]

EVALUATE = [
    (["ckpt=/nonexistent/model.ckpt"], "error: /nonexistent/model.ckpt does not exist: expected a run directory"),
    (["ckpt={run}", "data=cifar100"], "predicts 10 classes (digits) but data=cifar100 has 100"),
    ([], "ckpt is required"),
    pytest.param(
        ["ckpt={run}", "device=cuda"],
        "device=cuda but this machine has no usable CUDA GPU",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU"),
    ),
    (["ckpt=[[{run}]]"], "error: ckpt holds a list ("),  # not "... does not exist" of a path that does
    (["ckpt={{a:1}}"], "error: ckpt holds a mapping ({'a': 1}), which names no model: give one source"),
    # every checkpoint of a run without EMA lacks it: no other is advised, and the EMA choice is named
    (
        ["ckpt={run}", "use_ema=true"],
        "has no EMA weights: the run had no recipe.ema, so none of its checkpoints has; use",
    ),
    (["ckpt={run}", "device=tpu9"], "device='tpu9' is invalid: use auto, cpu, cuda or cuda:N"),
    (["ckpt={run}", "calibration.n_bins=0"], "calibration.n_bins=0 is invalid: must be an integer in [1, 100,000]"),
    (["ckpt={run}", "precision=17"], "error: precision='17' is not one of ['32', 'bf16', '16']"),
    (["ckpt={run}", "batch_size=0"], "error: batch_size=0 is invalid: must be an integer >= 1"),
    (["ckpt={run}", "data=imagefolder"], "error: data.root must be set: e.g. alternet evaluate data.root=..."),
    (["ckpt={run}", "analysis=null"], "error: analysis=null is invalid: analysis= chooses one of its options (the"),
    (["ckpt={run}", "evaluation=default"], "error: evaluation= is not chosen on the command line: its settings sit at"),
    (["ckpt={run}", "analysis=[fourier,fourir]"], "error: analysis=fourir is not an option of analysis (did you mean"),
    (  # generated corruptions' cache under a file: the setting named, before any image is scored
        ["ckpt={run}", "robustness.enabled=true", "robustness.cache_dir={run}/config.yaml/c"],
        "config.yaml is a file; choose another directory with robustness.cache_dir",
    ),
    (["ckpt={run}", "robustness.root=/nonexistent"], "CIFAR-C directory /nonexistent does not exist"),
    (
        ["ckpt={run}", "analysis=[fourier]", "analysis.variance.images=16"],
        "error: analysis.variance sets the budget of an analysis not chosen: add it to the list "
        "(analysis=[fourier,variance])",
    ),
    (  # the checkpoint's own data: no data group, so its keys are set by choosing one
        ["ckpt={run}", "data.download=true"],
        "error: data.download sets a data set's key, and alternet evaluate scores on the checkpoint's own data unless "
        "data=NAME chooses one: choose it first (data=NAME data.download=...), or give the data's directory with "
        "data_root=DIR",
    ),
]


def _case(case):
    """(arguments, message) of a catalogue entry, plain or a ``pytest.param``."""
    return case.values if hasattr(case, "values") else case


@pytest.mark.parametrize(("arguments", "message"), TRAIN, ids=[" ".join(_case(c)[0]) for c in TRAIN])
def test_bad_training_input_fails_in_one_line_before_work(arguments, message, tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    code, stderr = run_main("train.py", [*arguments, f"hydra.run.dir={run_dir}"], monkeypatch, capsys)
    assert code != "0" and message in code + stderr
    assert "Traceback" not in stderr and "\n" not in code
    assert not run_dir.exists()  # no training, and no run directory holding only Hydra's records left behind


def test_an_unknown_option_lists_the_options_on_the_users_searchpath_too(tmp_path, monkeypatch, capsys):
    (tmp_path / "conf" / "data").mkdir(parents=True)
    (tmp_path / "conf" / "data" / "mydata.yaml").write_text("defaults:\n  - digits\n  - _self_\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    code, stderr = run_main(
        "train.py", ["data=mydat", searchpath, f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys
    )
    assert (
        "data=mydat is not an option of data (did you mean 'mydata'?); the options are cifar10, cifar100, digits, "
        "imagefolder, imagenet, mydata" in code + stderr
    )


def test_an_option_on_the_users_searchpath_hidden_by_a_built_in_one_is_named(tmp_path, monkeypatch, capsys):
    """Hydra reads alternet's own ``data/digits.yaml`` first: the user's of that name was silently never read."""
    (tmp_path / "conf" / "data").mkdir(parents=True)
    (hidden := tmp_path / "conf" / "data" / "digits.yaml").write_text("defaults:\n  - _base\n  - _self_\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    code, stderr = run_main(
        "train.py", [searchpath, "data.val_size=1400", f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys
    )
    assert (
        f"{hidden} is not read: data=digits is alternet's own option, which Hydra finds first; give yours "
        "another name (data=my_digits)" in stderr
    )
    assert "data.val_size=1400" in code  # the run's own refusal follows


def test_a_sweep_asked_for_its_config_is_told_how_in_one_line(monkeypatch, capsys):
    code, stderr = run_main("train.py", ["-m", "seed=0,1", "--cfg", "job"], monkeypatch, capsys)
    assert code.startswith("error: Only one of --run, --multirun, --cfg") and "drop -m" in code
    assert "Traceback" not in stderr


@pytest.mark.parametrize("devices", ["1", "auto"])
def test_a_one_process_run_started_as_several_slurm_tasks_is_refused(tmp_path, monkeypatch, capsys, devices):
    """srun -n 2 without DDP: both tasks trained into runs/slurm-JOB.STEP, the second past rank 0's lock."""
    for key, value in {"SLURM_JOB_ID": "1236", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"}.items():
        monkeypatch.setenv(key, value)
    arguments = ["debug=fast", f"trainer.devices={devices}", f"hydra.run.dir={tmp_path / 'run'}"]
    code, _ = run_main("train.py", arguments, monkeypatch, capsys)
    assert code.startswith("error: SLURM runs this command as 2 tasks (srun -n 2, or --ntasks-per-node), but ")
    assert "(trainer=ddp trainer.devices=2)" in code and not (tmp_path / "run").exists()


def test_a_run_directory_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, capsys):
    """A name longer than the file system allows (ENAMETOOLONG): two chained tracebacks after a Hydra warning."""
    run_dir = tmp_path / ("x" * 300)
    code, stderr = run_main("train.py", [f"hydra.run.dir={run_dir}"], monkeypatch, capsys)
    assert code.startswith(f"error: run directory {run_dir} cannot be made: File name too long (ENAMETOOLONG)")
    assert "Traceback" not in stderr and "\n" not in code and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (["model.layout=C|CM|CM,C|CM|MC"], "sweep job 1 (model.layout=C|CM|MC), before any job ran: stage 3 ('MC'):"),
        (["seed=0,1", "data.subset=0.5,1.5"], "sweep job 1 (seed=0 data.subset=1.5), before any job ran: data.subset="),
        (["seed=0,1", "data.subset=1.5", "+note=${hydra:job.num}"], "sweep job 0 (seed=0 data.subset=1.5 +note="),
        (  # the data a job keeps: arrays are read before the first job (it trained, then job 1 was refused)
            ["data.subset=1.0,0.05"],
            "sweep job 1 (data.subset=0.05), before any job ran: recipe.batch_size=64 is larger than the 63 training",
        ),
        (
            ["seed=0,1", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"],
            "sweep job 0 (seed=0 trainer=ddp trainer.accelerator=cpu trainer.devices=2), before any job ran: "
            "trainer.devices=2: a local -m sweep runs its jobs one after another",
        ),
        (
            ["seed=0", "hydra/launcher=submitit_local", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"],
            "sweep job 0 (seed=0 trainer=ddp trainer.accelerator=cpu trainer.devices=2), before any job ran: "
            "trainer.devices=2: hydra/launcher=submitit_local runs each job as one process",
        ),
        (
            ["seed=0", "hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4", "hydra.launcher.tasks_per_node=2"],
            "sweep job 0 (seed=0 trainer=ddp trainer.devices=4), before any job ran: hydra.launcher.tasks_per_node=2 "
            "but trainer.devices=4: Lightning needs one SLURM task",
        ),
    ],
)
def test_a_sweep_checks_every_job_before_the_first_trains(sweep, message, tmp_path, monkeypatch, capsys):
    """A grid whose second job cannot build (or train) stops in one line naming that job, and the first never
    starts (not hours later, after the jobs before it have trained)."""
    arguments = ["-m", *sweep, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert code.startswith(f"error: {message}") and "before any job ran: " in code
    assert "Traceback" not in stderr and "\n" not in code
    assert not (tmp_path / "sweep" / "0").exists()


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (["model=alternet_tiny,nosuchmodel"], "sweep job 1 (model=nosuchmodel), before any job ran: model=nosuchmod"),
        (["seed=0,abc"], "sweep job 1 (seed=abc), before any job ran: seed=abc is invalid: must be an integer"),
        (["model=alternet_tiny,null"], "sweep job 1 (model=null), before any job ran: model=null is invalid: model="),
        (["recipe.optimizer.lr=interval(1e-3,1e-2)"], "BasicSweeper does not support sweep type : INTERVAL_SWEEP"),
        (["seed=0,0"], "sweep jobs 0 and 1 have the same overrides (seed=0): the second would train the same run"),
        pytest.param(
            ["seed=0,1", "hydra/sweeper=optuna"],
            "hydra/sweeper=optuna is not an option of hydra/sweeper; the options are basic, test_search (Hydra's "
            "plugin: pip install hydra-optuna-sweeper)",  # test_search: tests/hydra_plugins/
            marks=pytest.mark.skipif(
                importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None,
                reason="the optuna sweeper is installed here",
            ),
        ),
    ],
)
def test_a_sweep_job_that_cannot_compose_is_one_line_naming_it(sweep, message, tmp_path, monkeypatch, capsys):
    """Hydra turns an error in a sweep callback into a warning of its own (here a 40-line list of options and search
    paths) and reports it again when its sweeper composes the job; the pre-flight says it once, in one line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, stderr = run_main("train.py", ["-m", *sweep, f"hydra.sweep.dir={tmp_path}"], monkeypatch, capsys)
    assert code.startswith(f"error: {message}") and "\n" not in code and "Traceback" not in stderr
    assert [str(w.message) for w in caught if "Callback" in str(w.message)] == []
    assert not (tmp_path / "0").exists()


def test_sweep_jobs_given_one_folder_are_refused_before_any_runs(digits_run, tmp_path, monkeypatch, capsys):
    """A training sweep with a ``hydra.sweep.subdir`` that is the same for every job trained job 0, refused job 1
    with advice that did not fit and summed it up with job 0's numbers under job 1's overrides; an evaluation sweep
    with one ``out_dir`` wrote each job over the one before. Refused before any job runs, nothing written."""
    sweep = tmp_path / "sweep"
    train = ["-m", "debug=fast", "seed=0,1", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=same"]
    code, stderr = run_main("train.py", train, monkeypatch, capsys)
    assert_one_line_error(code, stderr, f"sweep jobs 0 and 1 would write into one folder, {sweep / 'same'}: hydra.")
    shown = "hydra.sweep.subdir='${hydra.job.num}_NAME'"
    assert code.endswith(shown) and shlex.split(shown) == ["hydra.sweep.subdir=${hydra.job.num}_NAME"]
    out = tmp_path / "scores"
    evaluate = ["-m", f"ckpt={digits_run},{digits_run / 'export'}", f"out_dir={out}", f"hydra.sweep.dir={sweep}"]
    code, stderr = run_main("evaluate.py", evaluate, monkeypatch, capsys)
    assert_one_line_error(code, stderr, f"sweep jobs 0 and 1 would write into one folder, {out}: out_dir names one")
    assert not sweep.exists() and not out.exists()


def test_a_sweep_of_evaluations_ends_without_a_training_summary(digits_run, tmp_path, monkeypatch, capsys):
    """The training sweep's summary read each evaluation's metrics.json as a run's and ended in Hydra's
    two-line UserWarning; each job writes into its own folder, and the sweep says where."""
    sweep = tmp_path / "sweep"
    arguments = ["-m", f"ckpt={digits_run}", "max_images=20", "batch_size=10,20", f"hydra.sweep.dir={sweep}"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, stdout, stderr = main_output("evaluate.py", arguments, monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    assert [str(w.message) for w in caught if "Callback" in str(w.message)] == []
    assert stdout.rstrip().endswith(
        f"Sweep of evaluations ended: each job's results are in its out_dir ({sweep}/NUMBER unless set)"
    )
    assert all((sweep / job / "metrics.json").is_file() for job in ("0", "1"))


def test_a_sweep_job_that_fails_is_said_and_the_sweep_goes_on_with_its_other_jobs(tmp_path, monkeypatch, capsys):
    """A job refused as it starts (an image folder's data are checked by the job, not the pre-flight), like a job
    whose learning rate diverges, stopped a local sweep there: the jobs after it never ran, and a relaunch stopped
    at it again. It is said at once; the other jobs run; the sweep ends on one line summing them up."""
    from helpers.imagefolders import make_image_folder

    root = make_image_folder(tmp_path / "images", per_class=2, splits={"train": 2, "val": 1}, odd_formats=False)
    sweep = ["debug=fast", "data=imagefolder", f"data.root={root}", "data.image_size=16", "recipe.batch_size=4"]
    arguments = ["-m", *sweep, "data.subset=0.5,1.0", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    refused = "data.subset=0.5): recipe.batch_size=4 is larger than the 3 training images left after data.subset"
    assert re.search(rf"^error: sweep job 0 \(.*{re.escape(refused)}", stderr, re.M)  # at once, as the sweep goes on
    assert code.startswith("error: a sweep job failed (the first: sweep job 0 (") and refused in code
    assert "\n" not in code
    assert "; 1 of 2 jobs finished" in code and f"(summary: {tmp_path / 'sweep' / 'summary.csv'})" in code
    assert "Traceback" not in stderr
    rows = (tmp_path / "sweep" / "summary.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("1,") and ",ok," in rows[1]  # the job after it ran (job 0, refused
    # before any work, left no directory)


SEARCH = [
    "-m",
    "hydra/sweeper=test_search",
    "debug=fast",
]  # a sweeper choosing its jobs as it goes (tests/hydra_plugins)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["seed=0,1"],
            "TestSearch chooses each job's values by what the earlier jobs returned, and a run returns its ",
        ),
        (
            ["seed=0,1", "optimized_metric=val/nll", "hydra.sweeper.direction=maximize"],
            "hydra.sweeper.direction=maximize would look for the worst optimized_metric=val/nll: set "
            "hydra.sweeper.direction=minimize",
        ),
        (
            ["seed=0,1", "optimized_metric=val/acc"],  # the default direction: Optuna's enum, minimize
            "hydra.sweeper.direction=minimize would look for the worst optimized_metric=val/acc: set "
            "hydra.sweeper.direction=maximize",
        ),
        (
            ["seed=0,1", "optimized_metric=val/nll", "trainer=ddp", "trainer.accelerator=cpu"],
            "the search's jobs (debug=fast seed=0 optimized_metric=val/nll trainer=ddp trainer.accelerator=cpu: a job "
            "it may draw), before any job ran: trainer.devices=2: a local -m sweep runs its jobs one after another",
        ),
        (
            ["seed=0,1", "optimized_metric=val/nll", "data.subset=2.0"],
            "the search's jobs (debug=fast seed=0 optimized_metric=val/nll data.subset=2.0: a job it may draw), before "
            "any job ran: data.subset=2.0 is invalid",
        ),
        (
            ["recipe.optimzer.lr=0.1,0.2", "optimized_metric=val/nll"],  # the sweeper found it at its first job
            "the search's jobs (debug=fast recipe.optimzer.lr=0.1 optimized_metric=val/nll: a job it may draw), before "
            "any job ran: recipe.optimzer is not a key of recipe (did you mean 'optimizer'?)",
        ),
    ],
)
def test_a_search_is_refused_before_any_job_where_it_cannot_search(arguments, message, tmp_path, monkeypatch, capsys):
    """A search (Optuna's sweeper) optimises what its jobs return, in the direction that improves it, and its jobs
    are not known before it runs: the settings they share are checked once, before the first."""
    code, stderr = run_main("train.py", [*SEARCH, *arguments, f"hydra.sweep.dir={tmp_path / 's'}"], monkeypatch, capsys)
    assert code.startswith(f"error: {message}") and "\n" not in code and "Traceback" not in stderr
    assert not (tmp_path / "s").exists()


def test_a_search_is_checked_at_values_it_may_draw_not_at_defaults_none_of_its_jobs_holds():
    """A swept data.val_size (default 0) was checked at 0, and optimized_metric=val/nll refused for lack of a
    validation split that every job had; a ${hydra.job.num} in an override failed the whole pre-flight (unchecked)."""
    from omegaconf import OmegaConf

    from alternet.apps.hydra.preflight import _a_search_job

    task = ["a=choice(x,y)", "b=tag(log,interval(1e-4,1e-2))", "c=int(interval(1,10))", "d=interval(0,1)", "e=3"]
    config = OmegaConf.create(
        {"hydra": {"overrides": {"task": task, "hydra": ["hydra.sweep.subdir=${hydra.job.num}"]}}}
    )
    assert _a_search_job(config) == ["a=x", "b=0.001", "c=6", "d=0.5", "e=3"]


def test_a_search_into_folders_of_an_earlier_ones_nested_jobs_is_refused(tmp_path, monkeypatch, capsys):
    """hydra.sweep.subdir=${hydra.job.num}/run nests each job a level down, and its ${hydra.job.num} failed the
    pre-flight (Hydra said so in a warning and launched the search unchecked over the earlier one's jobs)."""
    (tmp_path / "s" / "0" / "run" / ".hydra").mkdir(parents=True)
    subdir = "hydra.sweep.subdir=${hydra.job.num}/run"
    arguments = [*SEARCH, "seed=0,1", "optimized_metric=val/nll", subdir, f"hydra.sweep.dir={tmp_path / 's'}"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Callback SweepPreflight.on_multirun_start raised ..."
        code, _ = run_main("train.py", arguments, monkeypatch, capsys)
    assert code.startswith(f"error: hydra.sweep.dir={tmp_path / 's'} holds 1 job folder of an earlier sweep")


def test_a_search_goes_on_past_a_failed_job_ends_on_its_failure_and_is_not_continued_in_its_directory(
    tmp_path, monkeypatch, capsys
):
    """A search's sweeper goes on past a failed job and ended with exit status 0; its job refused before any work
    left a folder the summary called unfinished. Launched again into the same directory, it would number its jobs
    from 0 with new values, overwriting the finished jobs' records and handing their results back: refused."""
    sweep = tmp_path / "s"
    arguments = [*SEARCH, "recipe.optimizer.lr=0.001,-1", "optimized_metric=val/nll", f"hydra.sweep.dir={sweep}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert (
        "error: sweep job 1 (debug=fast optimized_metric=val/nll recipe.optimizer.lr=-1): recipe.optimizer.lr" in stderr
    )
    assert code.startswith("error: a sweep job failed (the first: sweep job 1 (") and "\n" not in code
    assert sorted(path.name for path in sweep.iterdir()) == ["0", "summary.csv", "summary.png"]
    records = (sweep / "0" / ".hydra" / "overrides.yaml").read_text()
    code, _ = run_main("train.py", [*arguments, "ckpt_path=last"], monkeypatch, capsys)
    assert code.startswith(f"error: hydra.sweep.dir={sweep} holds 1 job folder of an earlier sweep, and TestSearch ")
    assert (sweep / "0" / ".hydra" / "overrides.yaml").read_text() == records
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "holds no multirun.yaml: it is no -m sweep's directory" (a search has none)
        report = build_report(sweep, tmp_path / "report", wandb=False)
    summary = (report["out_dir"] / "summary.md").read_text()
    assert "A search by TestSearch: each job's values were drawn for it" in summary
    assert "1 job finished. Started, not finished" not in summary and "completes" not in summary


class _RecordedInAWorker(list):
    """The command's record of failed jobs as a launcher whose jobs run in worker processes (joblib's) leaves it:
    each job's failure is recorded in its worker, none here."""

    def append(self, failure):
        pass


def test_a_search_past_jobs_that_failed_in_worker_processes_ends_on_a_failure(tmp_path, monkeypatch, capsys):
    """Under joblib's launcher a search's failed jobs failed in other processes, and the search ended with exit
    status 0: its folder's jobs that did not finish say it (a search's folder holds this launch's jobs only)."""
    from alternet.apps import cli

    monkeypatch.setattr(cli, "FAILED", _RecordedInAWorker())
    sweep = tmp_path / "s"
    arguments = [*SEARCH, "recipe.optimizer.lr=1e30,0.001", "optimized_metric=val/nll", f"hydra.sweep.dir={sweep}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert code == (
        "error: search job 0 failed in the launcher's worker process (the search went on past it): each job's "
        "train.log ends on why"
    )
    assert "Traceback" not in stderr and "non-finite" in (sweep / "0" / "train.log").read_text().splitlines()[-1]
    assert (sweep / "1" / "metrics.json").is_file()
    from alternet.apps.hydra.sweep import SEARCH_JOBS_UNFINISHED

    assert not SEARCH_JOBS_UNFINISHED  # read once: a later command in this process ran no search


def test_a_sweep_a_stop_signal_stops_sums_up_its_jobs(tmp_path, monkeypatch, capsys):
    """A stop signal stops the whole sweep (its job's stop line), and the jobs before it are summed up."""
    stop = "callbacks.extra=choice([],[{_target_:helpers.callbacks.SignalBeforeStep,step:2}])"  # job 1: at step 2
    arguments = ["-m", "debug=fast", stop, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert "error: stopped by SIGTERM at global step 2" in stderr and "Traceback" not in stderr  # the job's line
    assert code.startswith("error: the sweep stopped; 1 of 2 jobs finished. Started, not finished: 1 (job 1).")
    assert code.endswith("its command again with ckpt_path=last completes it")  # the sweep's, last
    rows = (tmp_path / "sweep" / "summary.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["0", "1"] and ",ok," in rows[1]
    log = (tmp_path / "sweep" / "1" / "train.log").read_text().splitlines()
    assert "stopped by SIGTERM at global step 2" in log[-1]  # the job's folder says why it stopped
    search = ["-m", "hydra/sweeper=test_search", "debug=fast", stop, "optimized_metric=val/nll"]
    code, stderr = run_main("train.py", [*search, f"hydra.sweep.dir={tmp_path / 'search'}"], monkeypatch, capsys)
    assert code.startswith("error: the sweep stopped; 1 job finished. Started, not finished: 1 (job 1).")
    assert code.endswith(
        "its finished jobs are kept; a new search goes to a new hydra.sweep.dir (its values are "
        "drawn anew: Optuna continues a study from hydra.sweeper.storage)"
    )  # not the grid's relaunch


def test_a_diverged_sweep_job_says_why_in_its_log_and_is_not_said_to_be_completed_by_a_relaunch(
    tmp_path, monkeypatch, capsys
):
    """The jobs line promises each job's train.log says why it stopped, and names the diverged job, whose resume
    is its own command (a lower learning rate), not the sweep's."""
    arguments = ["-m", "debug=fast", "recipe.optimizer.lr=1e30", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert "error: sweep job 0 (debug=fast recipe.optimizer.lr=1e+30): non-finite" in stderr
    assert "Stopped at a non-finite loss: job 0 (its train.log ends on the command" in code and "\n" not in code
    log = (tmp_path / "sweep" / "0" / "train.log").read_text().splitlines()
    assert (
        "non-finite" in log[-1] and log[-1].endswith("recipe.grad_clip=1.0") and "recipe.optimizer.lr=1e+29" in log[-1]
    )


def test_a_sweep_into_a_directory_holding_another_sweeps_jobs_stops_before_touching_them(tmp_path, monkeypatch, capsys):
    """Job 0's directory holds a job of other overrides (another sweep launched into the same directory): Hydra
    would rewrite its .hydra/ records before the job refused to resume it, so the sweep stops before it starts."""
    records = tmp_path / "sweep" / "0" / ".hydra"
    records.mkdir(parents=True)
    (records / "overrides.yaml").write_text("- seed=2\n- model=vit_mini_cifar\n")
    before = (records / "overrides.yaml").read_text()
    code, stderr = run_main(
        "train.py", ["-m", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}"], monkeypatch, capsys
    )
    assert code.startswith("error: sweep job 0 (seed=0) would run in ") and "holds a job of other overrides" in code
    assert "hydra.sweep.dir=NEW_DIR" in code and "Traceback" not in stderr and "\n" not in code
    assert (records / "overrides.yaml").read_text() == before and list(records.iterdir()) == [
        records / "overrides.yaml"
    ]
    assert not (tmp_path / "sweep" / "multirun.yaml").exists()


def test_hydra_run_dir_given_to_a_sweep_is_refused_with_the_way_to_run_one_job(tmp_path, monkeypatch, capsys):
    arguments = ["-m", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}", f"hydra.run.dir={tmp_path / 'one'}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert "Traceback" not in stderr
    assert code.startswith(f"error: hydra.run.dir={tmp_path / 'one'}: this is a sweep") and "hydra.mode=RUN" in code
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "one").exists()


@pytest.mark.parametrize(("arguments", "message"), EVALUATE, ids=[" ".join(_case(c)[0]) or "no ckpt" for c in EVALUATE])
def test_bad_evaluation_input_fails_in_one_line_before_work(
    arguments, message, digits_run, tmp_path, monkeypatch, capsys
):
    arguments = [a.format(run=digits_run) for a in arguments]
    out = tmp_path / "eval"
    code, stderr = run_main("evaluate.py", [*arguments, f"hydra.run.dir={out}"], monkeypatch, capsys)
    assert code != "0" and message in code + stderr
    assert "Traceback" not in stderr and "\n" not in code
    assert not out.exists()  # nothing scored, and no directory holding only Hydra's records left behind


@pytest.mark.parametrize(
    ("script", "case"),
    [  # a fresh interpreter each (~9 s), so slow: the default suite sees a fresh interpreter end on a user's error
        # through the same exit (errors.exit_with_error) in train.py's AVX2 bf16 refusal (tests/training/
        # test_precision.py) and `python -m alternet push` to an unreachable hub (tests/hub/test_hub_card.py)
        pytest.param("train.py", TRAIN[9], marks=pytest.mark.slow),
        pytest.param("evaluate.py", EVALUATE[0], marks=pytest.mark.slow),
    ],
)
def test_a_bad_input_exits_non_zero_with_one_line_on_stderr(script, case, tmp_path):
    arguments, message = case
    result = run_script(script, *arguments, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and message in result.stderr.strip().splitlines()[-1]  # as in-process


@pytest.mark.parametrize("value", ["/data/über", "it's $HOME", 'say "hi" `now`', "a\\b (c)", "x!y", "end\\' (\\"])
def test_the_quoting_advice_works_when_pasted_into_a_posix_shell(value):
    """The advice for an override Hydra cannot read gives the override quoted for Hydra and for the shell: pasted
    into sh, it reaches Hydra as one argument that Hydra reads back as the value typed."""
    import re
    import subprocess

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    from alternet.apps.hydra.composition import composition_error

    override = f"data.root={value}"
    try:
        OverridesParser.create().parse_overrides([override])
    except OverrideParseException as error:
        message = composition_error(error, "train")
    else:
        pytest.skip(f"Hydra reads {override!r} unquoted")
    pasted = re.search(r"\(in the shell: (.*)\)$", message).group(1)
    words = subprocess.run(["sh", "-c", f"printf '%s\\n' {pasted}"], capture_output=True, text=True, check=True)
    (argument,) = words.stdout.splitlines()
    (parsed,) = OverridesParser.create().parse_overrides([argument])
    assert parsed.key_or_group == "data.root" and parsed.value() == value


@pytest.mark.parametrize(
    ("script", "arguments", "message"),
    [
        ("train.py", ["debug=fast", "recipe.epochs=${oc.env:ALTERNET_NOT_SET}"], "recipe.epochs=${oc.env:ALTERNET_NOT"),
        ("train.py", ["debug=fast", "trainer.max_epochs=${recipe.nope}"], "Interpolation key 'recipe.nope' not found"),
        ("evaluate.py", ["ckpt=x", "max_images=${oc.env:ALTERNET_NOT_SET}"], "Environment variable 'ALTERNET_NOT_SET'"),
    ],
)
def test_an_interpolation_that_cannot_be_resolved_is_one_line_and_leaves_no_directory(
    script, arguments, message, tmp_path, monkeypatch, capsys
):
    """An unset environment variable or a missing key in ${...} was OmegaConf's 129-line traceback, and the run left
    its directory of Hydra records behind."""
    monkeypatch.delenv("ALTERNET_NOT_SET", raising=False)
    code, stderr = run_main(script, [*arguments, f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys)
    assert code.startswith("error: ") and "cannot be resolved" in code and message in code and "\n" not in code
    assert "Traceback" not in stderr and not (tmp_path / "run").exists()


def test_an_option_of_the_users_that_is_not_valid_yaml_is_one_line(tmp_path, monkeypatch, capsys):
    """Its indentation wrong: yaml.scanner's traceback, the only composition error that was not one line."""
    (tmp_path / "conf" / "recipe").mkdir(parents=True)
    (tmp_path / "conf" / "recipe" / "mine.yaml").write_text("defaults:\n  - paper\n  - _self_\nmixup:\n  a: 1\n b: 2\n")
    arguments = ["debug=fast", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "recipe=mine"]
    code, stderr = run_main("train.py", [*arguments, f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys)
    assert_one_line_error(code, stderr, "mine.yaml, line 6, column 2 is not valid YAML (", "fix that line of the file")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("option", ["mine", "lab/mine"])
def test_an_experiment_of_the_users_without_its_package_header_says_to_add_it(option, tmp_path, monkeypatch, capsys):
    """Without `# @package _global_` an experiment's keys land under `experiment`: the error was Hydra's "In
    'experiment/mine': ConfigKeyError raised while composing config:; Key 'experiment' not in 'TrainConfig'"."""
    (tmp_path / "conf" / "experiment" / "lab").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / f"{option}.yaml").write_text("trainer:\n  max_epochs: 2\n")
    arguments = ["debug=fast", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", f"experiment={option}"]
    code, stderr = run_main("train.py", [*arguments, f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys)
    said = f"experiment/{option}.yaml puts its keys under experiment, which the config does not have: begin the file"
    assert_one_line_error(code, stderr, said, "with the line `# @package _global_`")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("mine", "experiment/mine.yaml in the working directory is not on Hydra's search path; add {searchpath}"),
        ("experiment/mine.yaml", "an option is named, not a file: experiment=mine {searchpath}"),
        ("mine.yaml", "an option is named, not a file: experiment=mine {searchpath}"),
        ("loose.yaml", "an option is named, not a file: put loose.yaml into a folder DIR/experiment/ as NAME.yaml"),
    ],
    ids=["in-the-working-directory", "named-by-its-path", "named-by-its-file-name", "outside-a-group-folder"],
)
def test_an_experiment_file_off_the_search_path_says_how_to_put_it_on(option, said, tmp_path, monkeypatch, capsys):
    """A newcomer's experiment/mine.yaml in the working directory, or a file named by its path, was "not an option
    of experiment; `alternet train --help` lists its 22 options": Hydra reads options from its search path only. The
    advice, pasted in a POSIX shell, composes the file (a folder with a space in its name)."""
    folder = tmp_path / "my runs"
    (folder / "experiment").mkdir(parents=True)
    (folder / "experiment" / "mine.yaml").write_text("# @package _global_\ntrainer:\n  max_epochs: 2\n")
    (folder / "loose.yaml").write_text("# @package _global_\n")
    monkeypatch.chdir(folder)
    searchpath = shlex.quote(f"hydra.searchpath=['file://{folder}']")  # Hydra's quotes (a space), then the shell's
    code, stderr = run_main(
        "train.py", [f"experiment={option}", f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys
    )
    assert_one_line_error(
        code, stderr, f"experiment={option} is not an option of experiment: ", said.format(searchpath=searchpath)
    )
    assert not (tmp_path / "run").exists()
    if option != "loose.yaml":  # the advice, as the shell hands it over, composes the file
        words = shlex.split(code.split("; add ")[-1] if option == "mine" else code.split("not a file: ")[-1])
        overrides = ["experiment=mine", *words] if option == "mine" else words
        assert compose_train(*overrides).trainer.max_epochs == 2
