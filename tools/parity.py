"""Parity of alternet's analysis instruments (``alternet/analysis/``) with the reference code's own (HDVW,
xxxnell/how-do-vits-work), read from a checkout the user gives by path; nothing of it is copied here. Each
instrument is computed both ways on the same model, weights and inputs, and the largest difference is printed.

    python -m tools.parity --reference ../how-do-vits-work
        [--instruments fourier variance landscape noise hessian fourier_timm variance_vit]
        [--seed 0] [--images 16] [--threads 1] [--no-record]

How HDVW's side is obtained:

* Fourier, variance: the notebooks' own cells, lifted at run time (the ``.ipynb`` JSON parsed, the statements that
  collect the block outputs and reduce them executed in a namespace, stopping before the plots), on HDVW's
  ``alternet_18`` (``models/alternet.py dnn_18``, CIFAR stem, window 4) with HDVW's block list (the notebook's
  ``blocks = [model.layer0, *model.layer1, ...]``). Ours: ``alternet/hub/hdvw.py`` converts the same weights to
  our ``alternet_r18``, and our instrument runs on it with our taps.
* Loss landscape: HDVW's ``ops/loss_landscapes.py`` (``create_bases``, ``get_loss_landscape``, hence ``ops/tests.test``
  and ``ops/norm.l2``), the ``kws`` of its notebook's call and the plotted loss of its plotting cell
  (``NLL + weight_decay * l2``), on a 3 x 3 grid. Its ``rand_basis`` (a global-RNG draw over the state dict) is
  replaced by the Gaussian draws our ``random_direction`` makes, renamed to HDVW's keys: the same raw directions
  go through both normalisations. The mixed batches come from the notebook's ``mixup_function`` (timm's Mixup
  with the config's arguments), drawn once and given to both sides.
* Fourier on timm's ResNet-50 and ViT-Ti (``fourier_timm``, the models of Fig. 2a and Fig. 8): the notebook's own
  ``model -> blocks`` cells for them (cells 5 and 6, the statements after their ``timm.create_model``), its latents
  and Fourier cells, on timm's models with seeded random weights at 224 px, against our taps
  (``alternet.analysis.blocks``), in both modes: eval (our default) and HDVW's (its notebook never calls ``.eval()``:
  BatchNorm on the batch's own statistics, one image; our ``bn_mode=batch batch_size=1``).
* Variance on Fig. 9's ViT (``variance_vit``): featuremap_variance.ipynb's CIFAR ViT-Ti, built by the notebook's own
  statement (cell 10) with seeded random weights, its block list and its latents and variance cells, against our
  ViT taps.
* Noise bands, Hessian maximum eigenvalue: HDVW publishes no code, so these rows are **self-checks**, printed in a
  table of their own: our code against our reading of the paper, not against HDVW's. They are re-typed here from
  their definitions: the bands as exact integer conditions on the FFT bin indices and the noise by an FFT mask in
  numpy; the statistic as the eigenvalue of largest magnitude of the exact Hessian
  (``torch.autograd.functional.hessian`` on a 1,847-parameter AlterNet, ``torch.linalg.eigvalsh``) of NLL + wd *
  sum ||w||, per mixed mini-batch.

Models and inputs are float64; HDVW's code computes in float64 except where it casts itself (its directions and its
``l2`` are float32), ours reduces in float32, so the tolerance is float32's: relative differences (to the largest
|HDVW value| compared) up to 1e-5. Both models are in eval mode: HDVW's notebooks leave BatchNorm in training mode, a
difference docs/analysis.md declares; the weights are random with randomised BatchNorm statistics (so eval-mode BN
is not the identity). Rows marked "declared" compare an alternative docs/analysis.md declares different from HDVW
(``high_frequency: nyquist``, ``estimator: population``, ``normalisation: filter``, ``regulariser:
decay_squared``): they show that the bench sees a difference of that kind. It needs ``einops`` (``pip install
einops``) for HDVW's models. The harness's header, rows and CSVs (``bench/results/parity-<machine class>.csv``);
nothing is timed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import io
import json
import math
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from omegaconf import OmegaConf
from torch import nn

from bench.harness import RESULTS_DIR, begin, finish, row
from bench.reference import import_reference

INSTRUMENTS = ("fourier", "variance", "landscape", "noise", "hessian", "fourier_timm", "variance_vit")
# HDVW publishes no code for these: its definitions are re-typed here, so their rows check our code against our
# reading of the paper (a self-check), not against HDVW's code
SELF_CHECKS = ("noise", "hessian")
# timm's models of the paper's Fig. 2a and Fig. 8, with the block lists of fourier_analysis.ipynb (cells 5 and 6)
TIMM_MODELS = ("resnet50", "vit_tiny_patch16_224")
TIMM_IMAGES = 2  # 224 px images in eval mode; HDVW's own protocol (training-mode BatchNorm) runs on one
CONFIG = "configs/cifar100_vit.yaml"  # the config HDVW's notebooks load (weight decay, mixup, normalisation)
FLOAT32_TOLERANCE = 1e-5  # relative: our instruments reduce in float32, HDVW's side here in float64
NUM_CLASSES = 100  # HDVW's config mixes for 100 classes
BATCH = 8  # images per batch on our side, and per mixed batch (both sides)


@dataclass(frozen=True)
class Comparison:
    """One compared quantity: the largest absolute difference, and that relative to the largest |HDVW value|."""

    instrument: str
    compared: str
    absolute: float
    relative: float
    tolerance: float = FLOAT32_TOLERANCE  # relative
    basis: str = "float32"  # what the tolerance allows for
    why: str = ""  # the cause, when it is known, of a difference beyond the tolerance
    declared: str = ""  # an alternative docs/analysis.md declares different from HDVW: the row shows the bench sees it

    @property
    def agrees(self) -> bool:
        return self.relative <= self.tolerance

    @property
    def against(self) -> str:
        """What the row compares our code with: HDVW's own code, or HDVW's definitions re-typed here."""
        return "self-check" if self.instrument in SELF_CHECKS else "HDVW's code"

    @property
    def verdict(self) -> str:
        if self.declared:
            if self.agrees:
                return f"agrees, though declared to differ ({self.declared}): the bench does not see it"
            return f"differs as declared: {self.declared}"
        if self.agrees:
            return f"agrees (rel <= {self.tolerance:.0e}, {self.basis})"
        return f"differs: {self.why or 'beyond ' + self.basis + ', not a declared difference'}"


def compare(
    instrument: str,
    compared: str,
    hdvw: Any,
    ours: Any,
    tolerance: float = FLOAT32_TOLERANCE,
    basis: str = "float32",
    declared: str = "",
) -> Comparison:
    """The largest difference of two equally shaped arrays (or lists of them), relative to HDVW's largest value."""
    hdvw_values = flat_values(hdvw)
    our_values = flat_values(ours)
    if hdvw_values.shape != our_values.shape:
        why = f"{hdvw_values.size} values vs {our_values.size}"
        return Comparison(instrument, compared, math.inf, math.inf, tolerance, basis, why, declared)
    absolute = float(np.max(np.abs(hdvw_values - our_values), initial=0.0))
    scale = float(np.max(np.abs(hdvw_values), initial=0.0))
    relative = absolute / scale if scale else absolute
    return Comparison(instrument, compared, absolute, relative, tolerance, basis, declared=declared)


def flat_values(values: Any) -> np.ndarray:
    """A tensor, array, number or a list of them as one flat float64 array."""
    pieces = values if isinstance(values, (list, tuple)) else [values]
    arrays = [p.detach().cpu().double().numpy() if isinstance(p, torch.Tensor) else np.asarray(p) for p in pieces]
    return np.concatenate([np.ravel(a).astype(np.float64) for a in arrays])


# the reference checkout ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """A checkout of how-do-vits-work: its root (on ``sys.path``), config and the modules this bench uses."""

    root: Path
    config: dict[str, Any]
    alternet: types.ModuleType  # models/alternet.py
    loss_landscapes: types.ModuleType  # ops/loss_landscapes.py

    def notebook(self, name: str) -> Path:
        return self.root / name


def load_reference(path: str | Path) -> Reference:
    """Import HDVW's ``models.alternet`` (its ``models/__init__.py`` imports every family and ``requests``, so the
    package is registered without running it: :func:`bench.reference.import_reference`) and ``ops.loss_landscapes``."""
    import matplotlib

    matplotlib.use("Agg")  # ops/tests.py and the notebooks' cells import pyplot
    root = Path(path).expanduser().resolve()
    needed = ["models/alternet.py", "ops/loss_landscapes.py", "fourier_analysis.ipynb", "featuremap_variance.ipynb"]
    missing = [name for name in [*needed, "losslandscape.ipynb", CONFIG] if not (root / name).is_file()]
    if missing:
        raise SystemExit(f"--reference {root}: not a how-do-vits-work checkout (no {', '.join(missing)})")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    alternet = import_reference(root, "models.alternet")
    loss_landscapes = import_reference(root, "ops.loss_landscapes")
    config = yaml.safe_load((root / CONFIG).read_text())  # the notebooks' yaml.load(f) needs PyYAML < 6
    return Reference(root, config, alternet, loss_landscapes)


# lifting a notebook's code ------------------------------------------------------------------------------------------


def code_cell(notebook: Path, marker: str) -> tuple[int, str]:
    """The index and source of the first code cell of ``notebook`` whose source contains ``marker``."""
    cells = json.loads(notebook.read_text())["cells"]
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and marker in source:
            return index, source
    raise SystemExit(f"{notebook.name}: no code cell contains {marker!r}; is this HDVW's notebook?")


def statements(source: str, start: str | None, stop: str | None) -> list[str]:
    """The cell's top-level statements from the first containing ``start`` up to (without) the next containing
    ``stop``."""
    found = [ast.get_source_segment(source, node) or "" for node in ast.parse(source).body]
    first = next(i for i, text in enumerate(found) if start is None or start in text)
    last = next((i for i in range(first + 1, len(found)) if stop is not None and stop in found[i]), len(found))
    return found[first:last]


def lift(
    reference: Reference,
    notebook: str,
    marker: str,
    namespace: dict[str, Any],
    start: str | None = None,
    stop: str | None = "plt.subplots",
) -> str:
    """Execute the statements of ``notebook``'s cell holding ``marker`` (``start`` to before ``stop``) in
    ``namespace``; returns where they came from."""
    index, source = code_cell(reference.notebook(notebook), marker)
    lifted = statements(source, start, stop)
    exec(compile("\n".join(lifted), f"{notebook}[cell {index}]", "exec"), namespace)  # HDVW's own statements
    head = lifted[0].splitlines()[0]
    return f"{notebook} cell {index} ({len(lifted)} statement{'s' * (len(lifted) > 1)} from `{head}`)"


def call_keywords(reference: Reference, notebook: str, function: str) -> dict[str, Any]:
    """The literal keyword arguments of the notebook's call to ``function`` (e.g. its ``kws``)."""
    _, source = code_cell(reference.notebook(notebook), function + "(")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(function):
            return {k.arg: ast.literal_eval(k.value) for k in node.keywords if isinstance(k.value, ast.List)}
    raise SystemExit(f"{notebook}: no call to {function}")


# models and inputs --------------------------------------------------------------------------------------------------


def randomise_norms(model: nn.Module, generator: torch.Generator) -> nn.Module:
    """BatchNorm scales, shifts and running statistics drawn at random, so eval-mode BN is not the identity and no
    parameter is all zeros (||w|| has no derivative at 0)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                channels = module.num_features
                module.weight.copy_(0.5 + torch.rand(channels, generator=generator))
                module.bias.copy_(0.1 * torch.randn(channels, generator=generator))
                module.running_mean.copy_(0.1 * torch.randn(channels, generator=generator))
                module.running_var.copy_(0.5 + 1.5 * torch.rand(channels, generator=generator))
    return model


@dataclass
class ModelPair:
    """HDVW's alternet_18 and our alternet_r18 holding its weights (converted by ``alternet/hub/hdvw.py``)."""

    hdvw: nn.Module
    ours: nn.Module
    renamed: dict[str, tuple[str, torch.Tensor]]  # our parameter name -> (HDVW's key, tensor)


def model_pair(reference: Reference, seed: int) -> ModelPair:
    from alternet.hub.hdvw import ARCHS, convert, rename_all
    from alternet.models import create_model

    torch.manual_seed(seed)
    hdvw = reference.alternet.dnn_18(num_classes=NUM_CLASSES, stem=False, window_size=4)
    randomise_norms(hdvw, torch.Generator().manual_seed(seed))
    arch = ARCHS["alternet_18"]
    converted = convert(hdvw.state_dict(), arch)
    ours = create_model(arch.architecture, num_classes=converted.num_classes, **converted.model_args)
    ours.load_state_dict(converted.state_dict)
    return ModelPair(hdvw.double().eval(), ours.double().eval(), rename_all(hdvw.state_dict(), arch))


def synthetic_images(count: int, size: int, seed: int) -> torch.Tensor:
    """Seeded normalised images with image-like spectra: white noise plus smooth blobs (float64)."""
    generator = torch.Generator().manual_seed(seed)
    white = torch.randn(count, 3, size, size, generator=generator, dtype=torch.float64)
    coarse = torch.randn(count, 3, size // 8, size // 8, generator=generator, dtype=torch.float64)
    smooth = nn.functional.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False)
    return 0.3 * white + smooth


def synthetic_labels(count: int, classes: int, seed: int) -> torch.Tensor:
    return torch.randint(0, classes, (count,), generator=torch.Generator().manual_seed(seed + 1))


def hdvw_mixup(reference: Reference, num_classes: int) -> tuple[Callable[..., Any], str]:
    """HDVW's training transform: losslandscape.ipynb's ``mixup_function`` applied to its config's ``train``."""
    train_args = copy.deepcopy(reference.config["train"])
    train_args["mixup"]["num_classes"] = num_classes
    namespace: dict[str, Any] = {"copy": copy, "train_args": train_args}
    origin = lift(reference, "losslandscape.ipynb", "def mixup_function", namespace, stop=None)
    return namespace["transform"], origin


def mixed_batches(
    transform: Callable[..., Any], images: torch.Tensor, labels: torch.Tensor, batch: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed (mixed images, soft targets) batches: one seeded draw of the transform, given to both sides."""
    np.random.seed(seed)
    torch.manual_seed(seed)
    return [transform(x.clone(), y) for x, y in zip(images.split(batch), labels.split(batch))]


# Fourier and variance ---------------------------------------------------------------------------------------------


def hdvw_blocks(reference: Reference, model: nn.Module) -> tuple[list[nn.Module], str]:
    """HDVW's ``model -> blocks`` list (featuremap_variance.ipynb: its ResNet's, which names HDVW's AlterNet as
    well: ``layer0``, every block of ``layer1`` .. ``layer4``, ``classifier``)."""
    namespace: dict[str, Any] = {"model": model}
    origin = lift(reference, "featuremap_variance.ipynb", "blocks = [", namespace, start="blocks = [", stop=None)
    return namespace["blocks"], origin


def hdvw_fourier(reference: Reference, namespace: dict[str, Any]) -> tuple[list[np.ndarray], str]:
    """fourier_analysis.ipynb's latents cell (from ``latents = []``) and its Fourier cell (up to the plots), run in
    ``namespace`` (which holds ``blocks``, the images ``xs`` and the model's ``name``): the profiles and their
    origin."""
    import einops

    namespace.update(torch=torch, np=np, rearrange=einops.rearrange)
    collect = lift(reference, "fourier_analysis.ipynb", "latents.append", namespace, start="latents = []", stop=None)
    reduce = lift(reference, "fourier_analysis.ipynb", "def fourier(", namespace)
    return [latent.numpy() for latent in namespace["fourier_latents"]], f"{collect}; {reduce}"


def hdvw_variances(reference: Reference, namespace: dict[str, Any]) -> tuple[list[float], str]:
    """featuremap_variance.ipynb's latents cell and its variance cell, up to the plot's settings (``if model.name ==
    "resnet_50": ...``, which warns for other models), run in ``namespace`` (which holds ``blocks``, ``model`` and
    ``dataset_test``): the variances and their origin."""
    namespace["torch"] = torch
    collect = lift(reference, "featuremap_variance.ipynb", "latents.append", namespace, stop=None)
    reduce = lift(reference, "featuremap_variance.ipynb", "variances.append", namespace, stop="model.name ==")
    return [float(v) for v in namespace["variances"]], f"{collect}; {reduce}"


def our_taps(model: nn.Module) -> list[Any]:
    from alternet.analysis.blocks import block_sequence

    return block_sequence(model).taps


def fourier_parity(reference: Reference, setup: Setup) -> tuple[list[Comparison], str]:
    """fourier_analysis.ipynb's latents (cell collecting them, from ``latents = []``) and its Fourier cell (up to
    the plots) vs ``alternet.analysis.fourier.delta_profiles`` (``high_frequency: hdvw``)."""
    from alternet.analysis.fourier import delta_profiles

    pair = setup.pair
    blocks, blocks_origin = hdvw_blocks(reference, pair.hdvw)
    hdvw, origin = hdvw_fourier(reference, {"blocks": blocks, "xs": setup.images, "name": pair.hdvw.name})
    taps = our_taps(pair.ours)
    ours = [values for _, values in delta_profiles(pair.ours, taps, setup.batches, "hdvw")]
    nyquist = [values for _, values in delta_profiles(pair.ours, taps, setup.batches, "nyquist")]
    points = sum(len(h) for h in hdvw)
    comparisons = [
        compare("fourier", f"Δ log amplitude profiles ({len(hdvw)} taps, {points} points)", hdvw, ours),
        compare("fourier", "Fig. 8 high-frequency point per tap", [h[-1:] for h in hdvw], [o[-1:] for o in ours]),
        compare(
            "fourier",
            "Fig. 8 point, high_frequency=nyquist",
            [h[-1:] for h in hdvw],
            [o[-1:] for o in nyquist],
            declared="its last point is the (π, π) bin, HDVW's (1 - 2/h)π",
        ),
    ]
    return comparisons, f"lifted: {blocks_origin}; {origin}"


def timm_model(name: str, seed: int) -> nn.Module:
    """timm's ``name`` with seeded random weights (its BatchNorm layers' too: timm zeroes each ResNet block's last
    BN scale, which would leave every residual branch silent), float64."""
    import timm

    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False)
    return randomise_norms(model, torch.Generator().manual_seed(seed)).double()


def hdvw_timm_profiles(reference: Reference, name: str, model: nn.Module, images: torch.Tensor) -> tuple[list, str]:
    """fourier_analysis.ipynb on timm's ``name``: its ``model -> blocks`` cell (cell 5 for ResNet-50, 6 for ViT-Ti;
    the statements after its ``timm.create_model``, given ``model``), its latents cell (CLS token and logits dropped)
    and its Fourier cell up to the plots."""
    start = "class PatchEmbed" if name.startswith("vit") else "blocks = ["
    namespace: dict[str, Any] = {"model": model, "nn": nn, "torch": torch, "copy": copy}
    blocks = lift(reference, "fourier_analysis.ipynb", f'name = "{name}"', namespace, start=start, stop=None)
    namespace.update(xs=images, name=name)
    profiles, origin = hdvw_fourier(reference, namespace)
    return profiles, f"{blocks}; {origin}"


def fourier_timm_parity(reference: Reference, setup: Setup) -> tuple[list[Comparison], str]:
    """The Fourier profiles of timm's ResNet-50 and ViT-Ti at 224 px with our taps (``analysis.blocks``) vs
    fourier_analysis.ipynb's block lists, in both BatchNorm modes: eval (our default) and HDVW's (its notebook never
    calls ``.eval()``: BatchNorm on the batch's own statistics, one image; ``bn_mode=batch batch_size=1``)."""
    from alternet.analysis.fourier import batch_statistics, delta_profiles

    images = synthetic_images(TIMM_IMAGES, 224, setup.seed)
    comparisons, origins = [], {}
    for name in TIMM_MODELS:
        model = timm_model(name, setup.seed)
        for mode, inputs in (("eval mode", images), ("training mode (HDVW's), one image", images[:1])):
            hdvw_model = copy.deepcopy(model)  # training mode moves the running statistics: a copy per side
            hdvw_model.train(mode != "eval mode")
            hdvw, origin = hdvw_timm_profiles(reference, name, hdvw_model, inputs.clone())
            ours_model = copy.deepcopy(model).eval()
            taps = our_taps(ours_model)
            with batch_statistics(ours_model) if mode != "eval mode" else contextlib.nullcontext():
                ours = [values for _, values in delta_profiles(ours_model, taps, [inputs.clone()], "hdvw")]
            points = sum(len(h) for h in hdvw)
            compared = f"{name} {mode}: profiles ({len(hdvw)} taps, {points} points)"
            comparisons.append(compare("fourier", compared, hdvw, ours))
            origins[name] = origin
    lifted = "; ".join(f"{name}: {origin}" for name, origin in origins.items())
    inputs = f"timm's models with seeded random weights, {TIMM_IMAGES} seeded 224 px images"
    return comparisons, f"{inputs}; lifted: {lifted}"


def variance_parity(reference: Reference, setup: Setup) -> tuple[list[Comparison], str]:
    """featuremap_variance.ipynb's latents cell and its variance cell (up to the plot) vs
    ``alternet.analysis.variance.mean_variances`` (``estimator: unbiased``)."""
    from alternet.analysis.variance import mean_variances

    pair = setup.pair
    blocks, blocks_origin = hdvw_blocks(reference, pair.hdvw)
    namespace = {"blocks": blocks, "model": pair.hdvw, "dataset_test": [(setup.images, setup.labels)]}
    hdvw, origin = hdvw_variances(reference, namespace)
    taps = our_taps(pair.ours)
    ours = mean_variances(pair.ours, taps, setup.batches, "unbiased")
    population = mean_variances(pair.ours, taps, setup.batches, "population")
    comparisons = [
        compare("variance", f"feature-map variance per tap ({len(hdvw)} taps)", hdvw, ours),
        compare(
            "variance",
            "the same, estimator=population",
            hdvw,
            population,
            declared="divisor H·W, not H·W - 1: 1/16 less on 4x4 maps",
        ),
    ]
    return comparisons, f"lifted: {blocks_origin}; {origin}"


def variance_vit_parity(reference: Reference, setup: Setup) -> tuple[list[Comparison], str]:
    """Fig. 9's ViT: featuremap_variance.ipynb's CIFAR ViT-Ti, built by its own statement (cell 10, seeded random
    weights), its block list (patch embedding, each attention and MLP residual), latents and variance cells, vs our
    ViT taps and ``mean_variances``."""
    import timm

    from alternet.analysis.variance import mean_variances

    notebook, cell = "featuremap_variance.ipynb", 'model.name = "vit_ti"'
    torch.manual_seed(setup.seed)
    namespace: dict[str, Any] = {"timm": timm, "torch": torch, "nn": nn, "copy": copy}
    built = lift(reference, notebook, cell, namespace, start="model = timm.models", stop="model.name")
    lift(reference, notebook, cell, namespace, start=cell, stop="models.stats")  # model.name, which cell 12 reads
    model = namespace["model"].double().eval()
    blocks = lift(reference, notebook, cell, namespace, start="class PatchEmbed", stop=None)
    namespace["dataset_test"] = [(setup.images, setup.labels)]
    hdvw, origin = hdvw_variances(reference, namespace)
    ours = mean_variances(model, our_taps(model), setup.batches, "unbiased")
    compared = f"CIFAR ViT-Ti (HDVW's cell 10): feature-map variance per tap ({len(hdvw)} taps)"
    return [compare("variance", compared, hdvw, ours)], f"lifted: {built}; {blocks}; {origin}"


# loss landscape -----------------------------------------------------------------------------------------------------

GRID = (-1.0, 0.0, 1.0)  # per axis: HDVW's notebook uses 21 points over [-1, 1]; 3 of them here


def raw_draws(model: nn.Module, seed: int) -> list[dict[str, torch.Tensor]]:
    """The Gaussian draws ``random_direction(model, Generator().manual_seed(seed), ...)`` makes for two
    directions, before normalisation: one per parameter, in ``named_parameters`` order."""
    generator = torch.Generator().manual_seed(seed)
    return [{name: torch.randn(p.shape, generator=generator) for name, p in model.named_parameters()} for _ in "xy"]


def under_hdvw_keys(draw: dict[str, torch.Tensor], pair: ModelPair) -> dict[str, torch.Tensor]:
    """A draw on our parameters as a basis on HDVW's state dict (its shapes; zeros for its buffers, which its
    ``ignore_bn`` zeroes anyway)."""
    hdvw_state = pair.hdvw.state_dict()
    basis = {key: torch.zeros(value.shape) for key, value in hdvw_state.items()}
    for ours, (theirs, _) in pair.renamed.items():
        if ours in draw:
            basis[theirs] = draw[ours].reshape(hdvw_state[theirs].shape)
    return basis


def under_our_names(basis: dict[str, torch.Tensor], pair: ModelPair) -> dict[str, torch.Tensor]:
    params = dict(pair.ours.named_parameters())
    return {
        ours: basis[theirs].reshape(params[ours].shape) for ours, (theirs, _) in pair.renamed.items() if ours in params
    }


@contextlib.contextmanager
def replaced(module: types.ModuleType, name: str, value: Any):
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def hdvw_landscape(
    reference: Reference, pair: ModelPair, batches: list[Any], draws: list[dict[str, torch.Tensor]]
) -> tuple[list[dict[str, torch.Tensor]], dict[tuple[float, float], dict[str, float]], str]:
    """HDVW's bases (``create_bases`` on our raw draws) and its ``get_loss_landscape`` on the 3 x 3 grid, with
    the notebook's ``kws`` and its plotted loss ``NLL + weight_decay * l2`` (losslandscape.ipynb's plot cell)."""
    lls = reference.loss_landscapes
    kws = call_keywords(reference, "losslandscape.ipynb", "get_loss_landscape")["kws"]
    queue = iter([under_hdvw_keys(draw, pair) for draw in draws])
    with replaced(lls, "rand_basis", lambda ws, gpu=True: next(queue)):
        bases = lls.create_bases(pair.hdvw, kws, gpu=False)
    span = dict(x_min=GRID[0], x_max=GRID[-1], n_x=len(GRID), y_min=GRID[0], y_max=GRID[-1], n_y=len(GRID))
    with contextlib.redirect_stdout(io.StringIO()):  # it prints every point's metrics
        grid = lls.get_loss_landscape(pair.hdvw, 1, batches, bases=bases, kws=kws, gpu=False, **span)
    points = [(float(x), float(y)) for x, y in grid]
    data = {"NLL": np.array([m[2] for m in grid.values()]), "l2": np.array([m[1] for m in grid.values()])}
    namespace: dict[str, Any] = {"data": data, "optim_args": reference.config["optim"]}
    plotted = lift(reference, "losslandscape.ipynb", 'data["loss"]', namespace, start='data["loss"]', stop="int(")
    weight_decay = reference.config["optim"]["weight_decay"]
    metrics = {
        point: dict(nll=nll, l2=weight_decay * l2, loss=loss, acc=float(m[5][0]))
        for point, nll, l2, loss, m in zip(points, data["NLL"], data["l2"], data["loss"], grid.values())
    }
    origin = f"ops/loss_landscapes.py create_bases + get_loss_landscape (kws {kws} from the notebook's call); {plotted}"
    return [under_our_names(basis, pair) for basis in bases], metrics, origin


def our_landscape(
    pair: ModelPair, batches: list[Any], seed: int, recipe: Any
) -> tuple[list[dict[str, torch.Tensor]], dict[tuple[float, float], dict[str, float]]]:
    """``alternet.analysis.landscape``: its directions (``normalisation: hdvw``) and ``measure`` at each point,
    with the packaged defaults' loss (``targets: training``, ``regulariser: hdvw``)."""
    from alternet.analysis.config import parse_config
    from alternet.analysis.landscape import LandscapeConfig, measure, random_direction, weight_offsets
    from alternet.analysis.objective import objective_of

    config = parse_config(LandscapeConfig, {"seed": seed}, "landscape")
    generator = torch.Generator().manual_seed(seed)
    directions = [random_direction(pair.ours, generator, config.normalisation) for _ in "xy"]
    objective = objective_of(pair.ours, recipe, config)
    squared = objective_of(pair.ours, recipe, replace(config, regulariser="decay_squared"))
    metrics = {}
    with weight_offsets(pair.ours) as move:
        for y in GRID:
            for x in GRID:
                move([x, y], directions)
                with torch.no_grad():
                    l2_squared = float(squared.l2())
                metrics[(x, y)] = measure(pair.ours, batches, objective) | {"l2_squared": l2_squared}
    return directions, metrics


def filter_directions(pair: ModelPair, seed: int) -> list[dict[str, torch.Tensor]]:
    """Our directions under ``normalisation: filter`` (Li et al.), from the same draws."""
    from alternet.analysis.landscape import random_direction

    generator = torch.Generator().manual_seed(seed)
    return [random_direction(pair.ours, generator, "filter") for _ in "xy"]


def landscape_parity(reference: Reference, setup: Setup) -> tuple[list[Comparison], str]:
    pair, batches = setup.pair, setup.mixed
    draws = raw_draws(pair.ours, setup.seed)
    hdvw_directions, hdvw, origin = hdvw_landscape(reference, pair, batches, draws)
    our_directions, ours = our_landscape(pair, batches, setup.seed, setup.recipe)
    names = list(our_directions[0])
    entries = sum(d.numel() for d in our_directions[0].values())
    points = sorted(hdvw)
    missing = set(points) ^ set(ours)
    if missing:
        raise SystemExit(f"landscape: the grids differ at {sorted(missing)}")

    def at_points(metrics: dict[tuple[float, float], dict[str, float]], key: str) -> list[float]:
        return [metrics[p][key] for p in points]

    def entries_of(directions: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        return [d[n] for d in directions for n in names]

    hdvw_entries = entries_of(hdvw_directions)
    comparisons = [
        compare(
            "landscape", f"directions (2 x {entries / 1e6:.1f} M entries)", hdvw_entries, entries_of(our_directions)
        ),
        *(
            compare("landscape", f"{label} at {len(points)} grid points", at_points(hdvw, key), at_points(ours, key))
            for key, label in (("nll", "NLL"), ("l2", "wd·Σ‖w‖"), ("loss", "NLL + wd·Σ‖w‖"), ("acc", "accuracy"))
        ),
        compare(
            "landscape",
            "directions, normalisation=filter",
            hdvw_entries,
            entries_of(filter_directions(pair, setup.seed)),
            declared="Li et al.'s per-filter norms, not HDVW's over dim 0",
        ),
        compare(
            "landscape",
            "L2 term, regulariser=decay_squared",
            at_points(hdvw, "l2"),
            at_points(ours, "l2_squared"),
            declared="½·wd·Σ‖w‖² over the decayed weights, not wd·Σ‖w‖ over all",
        ),
    ]
    return comparisons, f"lifted: {origin}; {setup.mixup_origin}"


# noise bands (re-typed) ---------------------------------------------------------------------------------------------


def retyped_band_mask(size: int, tenths: int) -> np.ndarray:
    """The band centred at ``tenths``/10 π, 0.1π wide, half open: bins (a, b) of a size x size FFT whose radial
    frequency 2·sqrt(a² + b²)/size (units of π, a and b the signed bin indices) lies in [c - 0.05, c + 0.05), in
    exact integers: ((2k - 1)·size)² <= 1600·(a² + b²) < ((2k + 1)·size)²."""
    index = np.arange(size)
    signed = np.minimum(index, size - index)  # |signed frequency index|; the Nyquist bin is size/2 either way
    radius_squared = signed[:, None] ** 2 + signed[None, :] ** 2
    low, high = ((2 * tenths - 1) * size) ** 2, ((2 * tenths + 1) * size) ** 2
    return (low <= 1600 * radius_squared) & (1600 * radius_squared < high)


def retyped_noisy_images(images: np.ndarray, white: np.ndarray, mask: np.ndarray, rms: float, std: np.ndarray):
    """White noise filtered by an FFT mask, scaled to RMS ``rms`` per pixel (in [0, 1] units) per image, divided
    by the normalisation's std and added (numpy, float64)."""
    noise = np.fft.ifft2(np.fft.fft2(white) * mask).real
    noise *= rms / np.sqrt(np.mean(noise**2, axis=(1, 2, 3), keepdims=True))
    return images + noise / std[None, :, None, None]


def noise_parity(reference: Reference, setup: Setup) -> tuple[list[Comparison], str]:
    """``alternet.analysis.noise`` (``bands: hdvw``): its masks, noisy images and ``band_accuracies`` vs the
    re-typed definition on the same white-noise draws (the same seeded generator sequence)."""
    from alternet.analysis.config import parse_config
    from alternet.analysis.noise import (
        NoiseConfig,
        band_accuracies,
        band_mask,
        band_noise,
        frequency_bands,
        noisy_batches,
    )

    model, images, labels = setup.pair.ours, setup.images, setup.labels
    std = np.array(reference.config["dataset"]["std"], dtype=np.float64)
    config = parse_config(NoiseConfig, {"seed": setup.seed, "images": len(images), "batch_size": len(images)}, "noise")
    batches = [(images, labels)]
    _, channels, size, _ = images.shape
    bands = frequency_bands(config)
    if len(bands) != 9:
        raise SystemExit(f"noise: bands=hdvw gives {len(bands)} bands, the paper has 9")
    generator = torch.Generator().manual_seed(config.seed)  # band_accuracies' draws, in its order
    mask_errors, hdvw_images, our_images, hdvw_accuracy = [], [], [], []
    for tenths, band in enumerate(bands, start=1):
        mask = retyped_band_mask(size, tenths)
        ours_mask = band_mask(size, size, band.low, band.high, closed=band.closed).numpy()
        mask_errors.append(float(np.sum(mask != ours_mask)))
        replay = torch.Generator()
        replay.set_state(generator.get_state())
        white = torch.randn(tuple(images.shape), generator=generator, dtype=torch.float64)
        noisy = retyped_noisy_images(images.numpy(), white.numpy(), mask, config.rms, std)
        ours_noise = band_noise(
            images.shape, torch.from_numpy(ours_mask), config.rms * math.sqrt(channels * size * size), replay
        )
        our_images.append(noisy_batches(batches, [ours_noise], list(std))[0][0].numpy())
        hdvw_images.append(noisy)
        with torch.no_grad():
            predictions = model(torch.from_numpy(noisy)).argmax(dim=-1)
        hdvw_accuracy.append(float((predictions == labels).double().mean()))
    ours_accuracy = band_accuracies(model, batches, list(std), config)
    comparisons = [
        Comparison(
            "noise", "FFT bins of the 9 bands (count differing)", max(mask_errors), max(mask_errors), 0.0, "exact"
        ),
        compare("noise", f"noisy images, 9 bands x {len(images)}", hdvw_images, our_images),
        compare("noise", f"accuracy per band ({len(images)} images)", hdvw_accuracy, ours_accuracy),
    ]
    return comparisons, (
        "re-typed (HDVW publishes no code): bands [c - 0.05π, c + 0.05π), c = 0.1π..0.9π, as exact integer "
        "conditions on the FFT bin indices; noise by an FFT mask (numpy), RMS per pixel, divided by the std"
    )


# Hessian maximum eigenvalue (re-typed) ------------------------------------------------------------------------------

TINY = dict(layout="C|CM", widths=(4, 8), heads=(1, 2), head_dim=4, stem="cifar")  # 1,847 parameters at 10 classes
TINY_SIZE, TINY_CLASSES, TINY_BATCH, TINY_MINIBATCHES = 8, 10, 4, 3


def exact_max_eigenvalue(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, weight_decay: float) -> float:
    """The eigenvalue of largest magnitude (sign kept) of the exact Hessian of NLL + wd * sum ||w|| over every
    parameter on one mini-batch: ``torch.autograd.functional.hessian`` and ``torch.linalg.eigvalsh``, float64.
    NLL is the soft-target cross-entropy HDVW's ``ops/tests.test`` takes of mixed targets."""
    from timm.loss import SoftTargetCrossEntropy

    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    names, shapes = [n for n, _ in named], [p.shape for _, p in named]
    sizes = [p.numel() for _, p in named]
    criterion = SoftTargetCrossEntropy()

    def loss(flat: torch.Tensor) -> torch.Tensor:
        weights = {n: w.view(s) for n, w, s in zip(names, flat.split(sizes), shapes)}
        logits = torch.func.functional_call(model, weights, (images,))
        return criterion(logits, targets) + weight_decay * sum(torch.linalg.vector_norm(w) for w in weights.values())

    theta = torch.cat([p.detach().flatten() for _, p in named])
    eigenvalues = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, theta))
    return float(eigenvalues[eigenvalues.abs().argmax()])


def hessian_parity(reference: Reference, setup: Setup) -> tuple[list[Comparison], str]:
    """``alternet.analysis.hessian.minibatch_max_eigenvalues`` (Lanczos extremes, fp32 copy, math attention, as
    ``hessian.run``) vs the exact Hessian's eigenvalue of largest magnitude, per mini-batch, on a tiny AlterNet."""
    from alternet.analysis.config import parse_config
    from alternet.analysis.hessian import HessianConfig, force_math_attention, minibatch_max_eigenvalues
    from alternet.analysis.objective import objective_of
    from alternet.models import create_model

    torch.manual_seed(setup.seed)
    model = create_model("alternet_tiny", num_classes=TINY_CLASSES, img_size=TINY_SIZE, **TINY)
    randomise_norms(model, torch.Generator().manual_seed(setup.seed)).eval()
    force_math_attention(model)
    transform, mixup_origin = hdvw_mixup(reference, TINY_CLASSES)
    count = TINY_BATCH * TINY_MINIBATCHES
    images = synthetic_images(count, TINY_SIZE, setup.seed)
    batches = mixed_batches(
        transform, images, synthetic_labels(count, TINY_CLASSES, setup.seed), TINY_BATCH, setup.seed
    )
    weight_decay = float(reference.config["optim"]["weight_decay"])
    exact = [exact_max_eigenvalue(copy.deepcopy(model).double(), x, t.double(), weight_decay) for x, t in batches]

    ours32 = copy.deepcopy(model).float().eval()
    params = [p for p in ours32.parameters() if p.requires_grad]
    batches32 = [(x.float(), t.float()) for x, t in batches]
    comparisons = []
    for label, overrides, tolerance, basis in (
        ("Lanczos run to convergence", {"minibatch_steps": 2000, "tol": 1e-9}, FLOAT32_TOLERANCE, "float32"),
        ("packaged defaults (<= 100 products, tol 1e-3)", {}, 1e-2, "Lanczos stopped at residual 1e-3"),
    ):
        config = parse_config(HessianConfig, {"seed": setup.seed, "minibatches": len(batches), **overrides}, "hessian")
        objective = objective_of(ours32, setup.recipe, config)
        with contextlib.redirect_stderr(io.StringIO()):
            maxima = minibatch_max_eigenvalues(ours32, params, batches32, objective, config)
        compared = f"max eigenvalue per mini-batch, {label}"
        comparison = compare("hessian", compared, exact, maxima.values, tolerance, basis)
        comparisons.append(comparison)
        setup.notes.append(
            f"hessian {label}: exact {', '.join(f'{v:.6g}' for v in exact)}; ours "
            f"{', '.join(f'{v:.6g}' for v in maxima.values)} ({', '.join(str(n) for n in maxima.products)} products)"
        )
    dim = sum(p.numel() for p in params)
    return comparisons, (
        "re-typed (HDVW publishes no code): eigvalsh of the exact Hessian (torch.autograd.functional.hessian, "
        f"float64) of soft-target NLL + wd·Σ‖w‖, largest |λ| per mini-batch; alternet_tiny {TINY['layout']} with {dim} "
        f"parameters, {len(batches)} mini-batches of {TINY_BATCH} {TINY_SIZE} px images mixed by {mixup_origin}"
    )


# the run ------------------------------------------------------------------------------------------------------------


class Setup:
    """What the instruments share: HDVW's model and ours, the inputs, HDVW's mixed batches, the recipe."""

    def __init__(self, reference: Reference, seed: int, images: int):
        self.reference, self.seed, self.count = reference, seed, images
        self.notes: list[str] = []
        self._pair: ModelPair | None = None
        self._mixed: list[Any] | None = None
        self.mixup_origin = ""

    @property
    def pair(self) -> ModelPair:
        if self._pair is None:
            self._pair = model_pair(self.reference, self.seed)
        return self._pair

    @property
    def images(self) -> torch.Tensor:
        return synthetic_images(self.count, 32, self.seed)

    @property
    def batches(self) -> list[torch.Tensor]:
        """The images in batches of ``BATCH``, as our instruments take them (HDVW's cells take them at once)."""
        return list(self.images.split(BATCH))

    @property
    def labels(self) -> torch.Tensor:
        return synthetic_labels(self.count, NUM_CLASSES, self.seed)

    @property
    def mixed(self) -> list[Any]:
        """The images mixed by HDVW's transform in batches of ``BATCH`` (mixup pairs within a batch)."""
        if self._mixed is None:
            transform, self.mixup_origin = hdvw_mixup(self.reference, NUM_CLASSES)
            self._mixed = mixed_batches(transform, self.images, self.labels, BATCH, self.seed)
        return self._mixed

    @property
    def recipe(self) -> Any:
        """Our paper recipe with the keys the objective reads from HDVW's config."""
        from alternet.apps.config import compose
        from alternet.training.config import RecipeConfig
        from alternet.typed import build

        config = self.reference.config
        overrides = [
            "recipe=paper",
            f"recipe.optimizer.weight_decay={float(config['optim']['weight_decay'])}",
            f"recipe.label_smoothing={float(config['train']['smoothing'])}",
            "recipe.no_decay_norm_bias=true",
        ]
        recipe = compose("train", overrides).recipe  # the recipe alone: the config's paths are a Hydra run's
        return build(RecipeConfig, OmegaConf.to_container(recipe, resolve=True), "recipe.")


RUNNERS: dict[str, Callable[[Reference, Setup], tuple[list[Comparison], str]]] = {
    "fourier": fourier_parity,
    "variance": variance_parity,
    "landscape": landscape_parity,
    "noise": noise_parity,
    "hessian": hessian_parity,
    "fourier_timm": fourier_timm_parity,
    "variance_vit": variance_vit_parity,
}


def print_table(comparisons: Sequence[Comparison]) -> None:
    """Two tables: the rows against HDVW's code, then the self-checks against its definitions re-typed here."""
    header = ("instrument", "compared", "max |diff|", "relative", "verdict")
    lines = [(c.instrument, c.compared, f"{c.absolute:.3g}", f"{c.relative:.3g}", c.verdict) for c in comparisons]
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    titles = {
        "HDVW's code": "Against HDVW's code (its notebooks' cells and ops/, run here):",
        "self-check": "Self-checks (HDVW publishes no code for these: its definitions re-typed here):",
    }
    for against, title in titles.items():
        rows = [line for line, c in zip(lines, comparisons) if c.against == against]
        if rows:
            print(title)
            for line in [header, tuple("-" * w for w in widths), *rows]:
                print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip())


def rows_of(comparisons: Sequence[Comparison]) -> list[dict[str, Any]]:
    rows = []
    for c in comparisons:
        case = f"{c.instrument}: {c.compared}"
        notes = f"{c.against}: {c.verdict}"
        rows.append(row(case, "max_abs_diff", c.absolute, "", notes=notes))
        rows.append(row(case, "max_rel_diff", c.relative, "", notes=notes))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, help="a checkout of xxxnell/how-do-vits-work")
    parser.add_argument("--instruments", nargs="+", choices=INSTRUMENTS, default=list(INSTRUMENTS))
    parser.add_argument("--seed", type=int, default=0, help="weights, images, mixing and directions (default 0)")
    parser.add_argument("--images", type=int, default=16, help="32 px images (even; default 16)")
    # nothing is timed: of the harness's options, the threads and the recording only
    parser.add_argument("--threads", type=int, default=1, help="torch threads, 0: torch's choice (default 1)")
    parser.add_argument("--no-record", action="store_true", help="print only; append nothing to --results-dir")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the per-machine CSVs are")
    args = parser.parse_args()
    if args.images < 2 or args.images % 2:
        parser.error(f"--images must be even and >= 2 (mixup pairs the images of a batch), got {args.images}")
    facts = begin(args, "parity")
    reference = load_reference(args.reference)
    setup = Setup(reference, args.seed, args.images)
    comparisons, sources = [], []
    for name in args.instruments:
        found, source = RUNNERS[name](reference, setup)
        comparisons += found
        sources.append(f"{name}: {source}")
    print(f"HDVW at {reference.root}; HDVW's alternet_18 (dnn_18, CIFAR stem, window 4, {NUM_CLASSES} classes) and our")
    print(f"alternet_r18 with its weights; {args.images} seeded 32 px images; float64; both models in eval mode;")
    print("relative = max |diff| / max |HDVW value| of the quantity compared")
    print_table(comparisons)
    print("\nHDVW's side:")
    print("\n".join(f"  {line}" for line in sources + setup.notes))
    finish(args, "parity", rows_of(comparisons), facts)


if __name__ == "__main__":
    main()
