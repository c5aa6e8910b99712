"""The LightningModule: loss, optimiser, schedule and metrics for any classifier in the model registry.

It knows nothing of a specific architecture: the backbone is built by name from plain hyperparameters
(so checkpoints load with ``torch.load(weights_only=True)`` and rebuild the model by themselves).
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from timm.loss import SoftTargetCrossEntropy
from timm.optim import param_groups_layer_decay
from torch import nn
from torchmetrics import MeanMetric, Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from ..architectures.config import ModelConfig, model_config
from ..data.mixing import recipe_mixup
from ..dataset_facts import DataFacts
from ..errors import ConfigValueError
from ..files import plain
from ..metrics import BinnedCalibrationError, TopKAccuracy
from ..models.factory import create_model, model_args
from ..models.flip import flip_averaged_logits
from ..models.params import decay_groups
from ..runs.checkpoints import DIGEST_KEY, to_host, weights_digest
from ..runs.weights import saved_hyperparameters
from ..typed import build
from .callbacks import max_steps_cut_the_epoch
from .config import ProgressiveResizeConfig, RecipeConfig
from .display import Hits, RunningLoss
from .guard import NonFiniteGuard, fused_optimizer_supported, uses_grad_scaler
from .optim import build_optimizer, build_scheduler, check_min_lr, rescale_learning_rates, scaled_lr
from .resume import BATCH_KEY, CLEAN_KEY, EPOCH_KEY, SCHEDULE_KEY, STEPS_KEY
from .step import WholeStep, ema_update_


def evaluation_metrics(num_classes: int) -> MetricCollection:
    """Accuracy, top-5 and 10-bin ECE (NLL is a mean over samples, kept beside them), counted exactly as evaluate.py
    does: top-5 from the logits (:func:`update_metrics`), the others from the probabilities."""
    return MetricCollection(
        {
            "acc": MulticlassAccuracy(num_classes, average="micro"),
            "top5": TopKAccuracy(5),  # a tie at the fifth place at its expectation, as evaluate.py
            "ece": BinnedCalibrationError(n_bins=10),
        },
        compute_groups=False,  # each metric updated with its own input
    )


def update_metrics(metrics: MetricCollection, logits: torch.Tensor, labels: torch.Tensor) -> None:
    """Update :func:`evaluation_metrics` with a batch: top-5 ranks the logits, as evaluate.py does (probabilities
    that softmax underflows to 0 would tie), accuracy and ECE read the probabilities."""
    probs = logits.softmax(dim=-1)
    for metric in metrics.values(copy_state=False):
        metric.update(logits if isinstance(metric, TopKAccuracy) else probs, labels)


class ClassificationModule(L.LightningModule):
    """Image classification with cross-entropy (optional mixup/cutmix and label smoothing).

    Args:
        model: the model's section (its ``name`` and the keywords of ``alternet.create_model``).
        recipe: the training recipe (optimizer, schedule, smoothing, mixup, EMA...).
        data: the facts of the built data module (:meth:`alternet.data.ImageDataModule.facts`).

    The checkpoint keeps the three in their plain form (``hyper_parameters``: weights_only-loadable), which
    Lightning's ``load_from_checkpoint`` passes back: read as every saved recipe is
    (:func:`alternet.runs.weights.saved_hyperparameters`).
    """

    def __init__(self, model: ModelConfig | Mapping, recipe: RecipeConfig | Mapping, data: DataFacts | Mapping) -> None:
        super().__init__()
        if isinstance(model, Mapping):  # load_from_checkpoint: the checkpoint's plain sections
            saved = {"hyper_parameters": {"model": model, "recipe": recipe, "data": data}}
            plain = saved_hyperparameters(saved, "the checkpoint")
            model, recipe = model_config(plain["model"]), build(RecipeConfig, plain["recipe"], "recipe.")
            data = DataFacts.from_dict(plain["data"])
        self.save_hyperparameters({"model": model.to_dict(), "recipe": recipe.to_dict(), "data": data.to_dict()})
        self.num_classes = int(data.num_classes)
        self.recipe = recipe
        args = model_args(
            model, num_classes=self.num_classes, img_size=data.image_size, drop_path_rate=recipe.drop_path_rate
        )
        self.model = create_model(model.name, **args)
        self.mixup = recipe_mixup(self.recipe, self.num_classes)
        smoothing = self.recipe.label_smoothing
        self.train_loss = SoftTargetCrossEntropy() if self.mixup else nn.CrossEntropyLoss(label_smoothing=smoothing)
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False) if self.recipe.ema.enabled else None
        self.train_hits = Hits()
        self.running_loss = RunningLoss()
        self.images_tested: int | None = None  # set by the test (on_test_epoch_end)
        self.epoch_loss = RunningLoss(max_age=0.0)  # train/nll_epoch: the mean over an epoch's steps, read at its end
        stages = ("val", "test", "val_ema", "test_ema") if self.ema is not None else ("val", "test")
        stages += ("train_clean",)  # the training subset in eval mode, without augmentation (data.train_clean_size)
        for stage in stages:
            setattr(self, f"{stage}_metrics", evaluation_metrics(self.num_classes).clone(prefix=f"{stage}/"))
            setattr(self, f"{stage}_nll", MeanMetric())
        self.channels_last = False
        self.guard = NonFiniteGuard(self)
        self.restored_clean: dict[str, float] = {}  # the checkpoint's train_clean/* values, when it was resumed
        self.steps_per_epoch: int | None = None  # the optimizer steps of an epoch of its schedule (once configured)
        self.lr_group = 0  # the optimizer's group train/lr shows: the one at the recipe's rate (once configured)
        self.progressive = _progressive_resize(
            self.recipe.progressive_resize, self.model, int(data.image_size), channels=len(data.mean)
        )

    # construction helpers -------------------------------------------------------------------

    def _apply(self, fn: Any, recurse: bool = True) -> ClassificationModule:
        """Lightning's ``*-true`` precisions convert the whole module (``module.to(dtype)``), and torchmetrics lets
        ``to`` convert its states: sums of NLL, bin counts and confidences kept in bf16 or fp16 drift (fp16 reaches
        inf past 65,504). The metrics keep the dtypes they were made with; only their device follows."""
        metrics = {metric: metric._dtype for metric in self.modules() if isinstance(metric, Metric)}  # inputs' dtype
        states = {
            (metric, name): getattr(metric, name).dtype
            for metric in metrics
            for name in metric._defaults
            if isinstance(getattr(metric, name), torch.Tensor)
        }
        super()._apply(fn, recurse)
        for metric, dtype in metrics.items():
            metric._dtype = dtype
        for (metric, name), dtype in states.items():
            setattr(metric, name, getattr(metric, name).to(dtype))
            metric._defaults[name] = metric._defaults[name].to(dtype)
        return self

    def use_channels_last(self) -> None:
        self.channels_last = True
        self.to(memory_format=torch.channels_last)

    @property
    def whole_step(self) -> WholeStep | None:
        """The compiled whole step (:meth:`compile_step`), or None: the step runs eagerly around the backbone."""
        return self.__dict__.get("_whole_step")

    def compile_step(self, mode: str, clip: float | None, clip_algorithm: str | None) -> None:
        """Compile the whole training step (:mod:`alternet.training.step`): Lightning's manual optimisation, the
        gradients clipped inside the step (the Trainer's own clipping off: ``gradient_clip_val=None``)."""
        self.automatic_optimization = False
        self.__dict__["_whole_step"] = WholeStep(self, mode, clip, clip_algorithm)

    def compile_model(self, **kwargs: Any) -> None:
        """Run the backbone through ``torch.compile`` for training; parameter names in checkpoints stay unchanged.
        One graph per input shape (``dynamic=False``: inductor fails to compile window attention over symbolic
        shapes, torch 2.14): training meets one shape (the loader drops a short last batch; a progressive resize
        adds its size), while evaluation, whose last batch is short, runs the backbone uncompiled rather than
        compiling (and under ``reduce-overhead`` capturing) a graph per batch shape."""
        self.__dict__["_compiled_model"] = torch.compile(self.model, **{"dynamic": False, **kwargs})

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Every checkpoint moves to host memory in one pass (:func:`alternet.runs.checkpoints.to_host`) and carries a
        digest of its weights; reading it verifies them (:mod:`alternet.runs.checkpoints`). A step whose non-finite
        flag is still on its way is read first (a mid-epoch or pre-emption checkpoint must not hold its NaN
        statistics: the guard stops the run instead, saving the state before it)."""
        self.guard.settle()
        checkpoint.update(to_host(dict(checkpoint)))
        checkpoint[DIGEST_KEY] = weights_digest(checkpoint["state_dict"])
        checkpoint[BATCH_KEY] = self.batch_factors  # a resume on another global batch is refused (training.resume)
        checkpoint[CLEAN_KEY] = self.train_clean  # the run's summary after a resume that trains no further epoch
        checkpoint[SCHEDULE_KEY] = self.recipe.epochs  # what its schedule spans (training.resume)
        checkpoint[STEPS_KEY] = self.steps_per_epoch  # and the steps of each of its epochs
        # the epoch so far, for its train/acc and train/nll_epoch after a resume inside it (empty at an epoch's end):
        # each rank's own sums (every rank saves each checkpoint, rank 0 writes it: the others' sums are gathered)
        so_far = torch.tensor([*self.train_hits.state(), *self.epoch_loss.state()], device=self.device)  # f32: MPS
        ranks = self.all_gather(so_far).reshape(-1, 4)
        checkpoint[EPOCH_KEY] = {"ranks": [{"hits": r[:2], "loss": r[2:]} for r in ranks.tolist()]}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A resumed run may change ``recipe.optimizer.lr`` (:data:`alternet.training.resume.APPLIED_ON_RESUME`):
        remember the ratio, applied in :meth:`on_train_start` once Lightning has restored the optimizer and schedule."""
        self.restored_clean = checkpoint.get(CLEAN_KEY) or {}
        ranks = (checkpoint.get(EPOCH_KEY) or {}).get("ranks") or []
        world = self._trainer.world_size if self._trainer is not None else 1  # loaded outside a Trainer: rank 0
        epoch = ranks[self.global_rank] if len(ranks) == world else {}  # its own share's sums
        self.train_hits.restore(*epoch.get("hits", (0.0, 0)))  # a resume at an epoch's end starts the next afresh
        self.epoch_loss.restore(*epoch.get("loss", (0.0, 0)))
        saved = (checkpoint.get("hyper_parameters") or {}).get("recipe", {}).get("optimizer", {}).get("lr")
        now = self.recipe.optimizer.lr
        self._lr_ratio = now / float(saved) if saved and now > 0 else 1.0

    @property
    def train_clean(self) -> dict[str, float]:
        """The last epoch's ``train_clean/*`` values (``data.train_clean_size``): logged by this session, else those
        of the checkpoint it resumed."""
        logged = {k: v for k, v in self.trainer.callback_metrics.items() if k.startswith("train_clean/")}
        return plain(logged) or dict(self.restored_clean)

    def on_train_start(self) -> None:
        if self.recipe.finetune.freeze_backbone:  # a true linear probe: the backbone's BatchNorm statistics fixed
            self.model.eval()  # here, as fitting starts (a run resumed mid-epoch gets no on_train_epoch_start);
            self.model.get_classifier().train()  # Lightning restores these modes after every validation
        self.__dict__["_ema_tensors"] = None  # gathered again at the first update: the module may have moved
        if self.whole_step is not None:
            self.whole_step.reset()
        ratio = getattr(self, "_lr_ratio", 1.0)
        self._lr_ratio = 1.0
        if ratio != 1.0:
            for optimizer, config in zip(self.trainer.optimizers, self.trainer.lr_scheduler_configs, strict=False):
                rescale_learning_rates(optimizer, config.scheduler, ratio)
        self.guard.on_train_start()

    # forward / steps -------------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        compiled = self.__dict__.get("_compiled_model")
        return (compiled if compiled is not None and self.training else self.model)(x)

    def training_size(self) -> int | None:
        """The size this epoch's training batches are downsampled to (``recipe.progressive_resize``), or None."""
        for size, until in self.progressive or ():
            if self.current_epoch < until:
                return size
        return None

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        if self.whole_step is not None:
            loss, correct = self.whole_step.run(images, labels, batch_idx)
        else:
            loss, correct = self._eager_step(images, labels, batch_idx)
        # No host sync and little host time on a step that logs nothing: the loss and the learning rate (a Python
        # float: a host-to-device copy) are logged on the loggers' steps only (each self.log costs ~1 ms of Python
        # on a 2-core CPU), the progress bar reads a running mean of the loss from the device when it refreshes, and
        # the accuracy is accumulated on the device and logged at the epoch's end.
        self.running_loss.add(loss)
        self.epoch_loss.add(loss)
        if correct is not None:
            self.train_hits.add(correct, len(labels))
        if self.trainer._logger_connector.should_update_logs:
            self.log("train/loss", loss, on_step=True, on_epoch=False, batch_size=len(labels))
            self.log("train/lr", self.optimizers().param_groups[self.lr_group]["lr"], on_step=True, on_epoch=False)
        return loss

    def _eager_step(
        self, images: torch.Tensor, labels: torch.Tensor, batch_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The loss of a batch and its correct predictions (None when mixed); Lightning's automatic optimisation
        does the rest. The backbone compiled or not."""
        targets = labels
        size = self.training_size()
        if size is not None:
            images = F.interpolate(images, size=size, mode="area")  # progressive resizing
        if self.mixup is not None:
            images, targets = self.mixup(images, labels)
        logits = self(images)
        loss = self.train_loss(logits, targets)
        self.guard.check_loss(loss, batch_idx)
        return loss, (logits.argmax(-1) == labels).sum() if self.mixup is None else None

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.guard.on_train_batch_start()

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.guard.before_optimizer_step(optimizer)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Lightning refuses to clip for a fused optimizer under any mixed precision, because under fp16 the
        gradients are still scaled here. Fused optimizers are built only without a GradScaler (bf16, fp32), where
        they are not, so those are clipped directly, as Lightning would."""
        fused = getattr(optimizer, "_step_supports_amp_scaling", False)
        if not gradient_clip_val or not fused or uses_grad_scaler(self.trainer):
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if gradient_clip_algorithm in (None, "norm"):
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)

    def on_train_epoch_end(self) -> None:
        self.guard.settle()
        if max_steps_cut_the_epoch(self.trainer, self.trainer.fit_loop.epoch_loop.batch_progress.current.ready):
            return  # its means continue in the resumed run, which logs them
        accuracy = self.train_hits.read()  # one sync an epoch
        if accuracy is not None:
            self.log("train/acc", accuracy, on_step=False, on_epoch=True, sync_dist=True)
        # HDVW's training NLL (ops/trains.py): the epoch mean of the training loss on the augmented, mixed batches,
        # label smoothing included; the clean one (train_clean/nll) is read in eval mode without augmentation
        nll = self.epoch_loss.read()
        if nll is not None:
            self.log(RunningLoss.EPOCH_KEY, nll, on_step=False, on_epoch=True, sync_dist=True)

    def on_validation_start(self) -> None:
        self.guard.settle()  # a mid-epoch validation (trainer.val_check_interval) must not score a skipped step
        if self.whole_step is not None:
            self.whole_step.evaluation_starts()

    def on_test_start(self) -> None:
        self._test_images = 0
        if self.whole_step is not None:
            self.whole_step.evaluation_starts()

    def on_test_epoch_end(self) -> None:
        """How many test images the test scored on every rank together (fewer than the split's with
        ``trainer.limit_test_batches``): ``images_tested``, read by the run's summary."""
        scored = torch.tensor(self._test_images, device=self.device)
        self.images_tested = int(self.trainer.strategy.reduce(scored, reduce_op="sum"))

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        """The EMA follows each optimizer step (a micro-batch of gradient accumulation is not one), inside the step:
        a mid-epoch checkpoint written after it (the callbacks' ``on_train_batch_end``) holds the step's EMA. The
        compiled whole step updates it itself."""
        super().optimizer_step(*args, **kwargs)
        if self.ema is not None:  # Lightning counts the step once this hook has returned
            self._update_ema(self.global_step + 1, self.guard.found)

    def restart_ema(self) -> None:
        """The EMA starts again from the model's weights (once ``model.pretrained``'s are in: it was copied from the
        new model's random ones)."""
        if self.ema is not None:
            self.ema.load_state_dict(self.model.state_dict())

    def ema_decay(self, step: int) -> float:
        """``recipe.ema.decay``; with ``recipe.ema.warmup`` it starts low and rises, min(decay, (1 + t) / (10 + t)),
        so early weights do not linger for thousands of steps (TensorFlow's ``ExponentialMovingAverage`` rule with
        ``num_updates=t``; timm's ModelEmaV3 warm-up, 1 - (1 + t / gamma) ** -power, is another)."""
        ema = self.recipe.ema
        return min(ema.decay, (1 + step) / (10 + step)) if ema.warmup else ema.decay

    def _ema_pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
        """The EMA's and the model's floating-point tensors (two aligned lists) and their other pairs, in state-dict
        order, gathered once per fit (:meth:`on_train_start`), when the module sits on its device in its memory
        format: walking both state dicts at every step cost 1.4 ms of a 2-core CPU's step for a linear model."""
        ema = self.ema.state_dict(keep_vars=True).values()
        model = self.model.state_dict(keep_vars=True).values()
        pairs = list(zip(ema, model, strict=True))
        floats = [(e, p) for e, p in pairs if e.dtype.is_floating_point]
        return (
            [e for e, _ in floats],
            [p for _, p in floats],
            [(e, p) for e, p in pairs if not e.dtype.is_floating_point],
        )

    @torch.no_grad()
    def _update_ema(self, step: int, skipped: torch.Tensor | None = None) -> None:
        """Move the EMA towards the weights after optimizer step ``step`` (counted from 1), by the compiled step's
        update; not at all where the device flag ``skipped`` is 1 (the fused optimizer skipped a non-finite step, as
        the compiled step does; a NaN statistic still moves in, and the guard restores the EMA's buffers)."""
        if self.__dict__.get("_ema_tensors") is None:
            self.__dict__["_ema_tensors"] = self._ema_pairs()
        ema, model, others = self.__dict__["_ema_tensors"]
        weight = 1.0 - self.ema_decay(step)
        ema_update_(ema, model, others, weight if skipped is None else weight * (1.0 - skipped))

    def _evaluate(self, stage: str, images: torch.Tensor, labels: torch.Tensor, model: nn.Module | None = None) -> None:
        net = model or self
        if self.whole_step is not None:  # compiled, the short last batch padded
            net = functools.partial(self.whole_step.predict, model or self.model)
        flip = self.recipe.test_flip and stage != "train_clean"  # train_clean measures the fit itself
        logits = (flip_averaged_logits(net, images) if flip else net(images)).float()
        metrics, nll = getattr(self, f"{stage}_metrics"), getattr(self, f"{stage}_nll")
        update_metrics(metrics, logits, labels)
        nll.update(F.cross_entropy(logits, labels, reduction="none"))
        for name, metric in metrics.items(keep_base=False):
            self.log(name, metric, on_step=False, on_epoch=True, prog_bar=name == "val/acc", add_dataloader_idx=False)
        self.log(f"{stage}/nll", nll, on_step=False, on_epoch=True, prog_bar=stage == "val", add_dataloader_idx=False)

    def validation_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        split = getattr(datamodule, "validation_sets", ["val"])[dataloader_idx]
        if split == "train_clean":
            self._evaluate("train_clean", *batch)
            return
        self._evaluate("val", *batch)
        if self.ema is not None:
            self._evaluate("val_ema", *batch, model=self.ema)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._test_images += len(batch[1])
        self._evaluate("test", *batch)
        if self.ema is not None:
            self._evaluate("test_ema", *batch, model=self.ema)

    # optimisation ----------------------------------------------------------------------------

    def _head_parameter_names(self) -> set[str]:
        """The classifier's parameters (timm's ``get_classifier``). A model without it (a user's module that does
        not follow timm's interface) has no head apart, which only fine-tuning needs."""
        if not hasattr(self.model, "get_classifier"):
            if self.recipe.finetune.freeze_backbone or self.recipe.finetune.backbone_lr_scale != 1.0:
                raise ConfigValueError(
                    f"recipe.finetune treats the classifier apart, and {type(self.model).__name__} has no "
                    "get_classifier() (timm's interface) to say which it is: add one to the model"
                )
            return set()
        head = self.model.get_classifier()
        return {name for name, p in self.model.named_parameters() if any(p is q for q in head.parameters())}

    def _parameter_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """Backbone and head groups (the backbone at ``finetune.backbone_lr_scale``, frozen for a linear probe),
        each split by weight decay."""
        exclude = self.recipe.no_decay_norm_bias
        layer_decay = self.recipe.layer_decay
        if layer_decay is not None:
            return self._layer_decay_groups(weight_decay, float(layer_decay), exclude)
        head_names = self._head_parameter_names()
        named = list(self.model.named_parameters())
        backbone = [(n, p) for n, p in named if n not in head_names]
        head = [(n, p) for n, p in named if n in head_names]
        if self.recipe.finetune.freeze_backbone:
            for _, param in backbone:
                param.requires_grad_(False)
        scale = self.recipe.finetune.backbone_lr_scale
        groups = decay_groups(
            self.model, weight_decay, exclude_norm_bias=exclude, named_params=backbone, lr_scale=scale
        )
        groups += decay_groups(self.model, weight_decay, exclude_norm_bias=exclude, named_params=head)
        return [g for g in groups if g["params"]]

    def _layer_decay_groups(self, weight_decay: float, layer_decay: float, exclude: bool) -> list[dict[str, Any]]:
        """timm's layer-wise learning-rate decay for fine-tuning (``recipe.layer_decay``): the head at the full
        rate, each earlier block (the model's ``group_matcher``) at ``layer_decay`` times the next one's."""
        if not hasattr(self.model, "group_matcher"):
            raise ConfigValueError(
                f"recipe.layer_decay needs a model with timm's group_matcher; {type(self.model).__name__} has none"
            )
        no_decay = getattr(self.model, "no_weight_decay", set)() if exclude else ()
        return param_groups_layer_decay(
            self.model,
            weight_decay,
            no_weight_decay_list=no_decay,
            weight_decay_exclude_1d=exclude,
            layer_decay=layer_decay,
        )

    def on_train_epoch_start(self) -> None:
        self.epoch_loss = RunningLoss(max_age=0.0)  # this epoch's steps only (after a mid-epoch resume: the rest)
        self.running_loss = RunningLoss()  # the progress lines' loss: never a mean across epochs
        self.train_hits = Hits()

    def configure_optimizers(self) -> dict[str, Any]:
        recipe = self.recipe
        opt_cfg = recipe.optimizer
        check_min_lr(recipe, self.global_batch)  # the command checked it where it could tell its devices
        lr = scaled_lr(recipe, self.global_batch)
        groups = self._parameter_groups(opt_cfg.weight_decay)
        fused = fused_optimizer_supported(self.device, self.trainer.precision)  # lets the guard skip on the device
        optimizer = build_optimizer(groups, opt_cfg, lr, fused=fused, stepped=self.whole_step is not None)
        rates = [float(group["lr"]) for group in optimizer.param_groups]
        self.lr_group = rates.index(max(rates))  # train/lr: the recipe's rate (the head's), not a decayed layer's
        steps_per_epoch = self.steps_per_epoch = self._steps_per_epoch()
        scheduler = build_scheduler(  # over the recipe's epochs: trainer.max_epochs only stops the run (it may resume)
            optimizer,
            recipe.schedule,
            steps_per_epoch=steps_per_epoch,
            epochs=recipe.epochs,
            warmup_epochs=recipe.warmup_epochs,
            base_lr=lr,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    @property
    def global_batch(self) -> int:
        """Images per optimizer step: the per-device batch, times the devices, times the accumulated batches."""
        return math.prod(self.batch_factors)

    @property
    def batch_factors(self) -> list[int]:
        """The global batch's factors: the per-device batch, the processes, the accumulated batches."""
        return [self.recipe.batch_size, self.trainer.world_size, self.trainer.accumulate_grad_batches]

    def _steps_per_epoch(self) -> int:
        """Optimizer steps per epoch, from the data module's batch count when it knows it: reading
        ``trainer.estimated_stepping_batches`` here would build the train loader before a resumed run restores the
        loader's position, and Lightning would then silently drop that position (Lightning issue #20550). Another
        data module's loader is counted by Lightning (``trainer.max_steps`` caps the run, not an epoch)."""
        steps = steps_per_epoch(getattr(self.trainer, "datamodule", None), self.trainer)
        if steps is not None:
            return steps
        _ = self.trainer.estimated_stepping_batches  # sets the training loader up, which counts its batches
        batches = self.trainer.num_training_batches
        return max(1, math.ceil(batches / self.trainer.accumulate_grad_batches)) if math.isfinite(batches) else 1


def steps_per_epoch(datamodule: Any, trainer: L.Trainer) -> int | None:
    """The optimizer steps of one epoch of a data module that counts its batches (``train_batches``), under the
    trainer's ``limit_train_batches`` and ``accumulate_grad_batches``; None for another data module."""
    if datamodule is None or not hasattr(datamodule, "train_batches"):
        return None
    batches = datamodule.train_batches()
    limit = trainer.limit_train_batches
    if isinstance(limit, int):
        batches = min(batches, limit)
    elif limit is not None:
        batches = int(batches * float(limit))
    return max(1, math.ceil(batches / trainer.accumulate_grad_batches))


def _progressive_resize(
    setting: ProgressiveResizeConfig, model: nn.Module, image_size: int, channels: int
) -> list[tuple[int, int]] | None:
    """``[(size, until_epoch), ...]`` of ``recipe.progressive_resize``: epochs before ``until_epoch`` (and after
    the stage before) train on batches downsampled to ``size`` px (an area average on the device; a step at half
    the side costs about a quarter), the rest at the data's own size. The model must run at every size: checked
    here, before any training, with one image, so a window that does not divide a feature map is refused now
    rather than at the first step."""
    if not setting.enabled:
        return None
    sizes, epochs = list(setting.sizes), list(setting.epochs)
    if sizes[-1] >= image_size:
        raise ConfigValueError(
            f"recipe.progressive_resize.sizes={sizes!r} is invalid: sizes below the training size {image_size}"
        )
    parameter = next(model.parameters())
    was_training = model.training
    try:
        for size in sizes:
            image = torch.zeros(1, channels, size, size, dtype=parameter.dtype, device=parameter.device)
            try:
                with torch.no_grad():
                    model.eval()(image)
            except (ValueError, RuntimeError) as error:
                first_line = str(error).strip().splitlines()[0]
                raise ConfigValueError(
                    f"recipe.progressive_resize.sizes: the model cannot run at {size}x{size} px ({first_line}); "
                    "choose sizes its feature maps allow, or none: recipe.progressive_resize.sizes=[] "
                    "recipe.progressive_resize.epochs=[]"
                ) from None
    finally:
        model.train(was_training)
    return list(zip(sizes, itertools.accumulate(epochs)))
