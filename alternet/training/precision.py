"""``trainer.precision``: ``auto`` asks the hardware (bf16-mixed where bf16 is native, 32-true elsewhere), and a
reduced precision that this CPU would only emulate is refused before any work, unless the user insists
(``performance.allow_emulated_precision=true``): emulated bf16 costs an order of magnitude in time, not a saving."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import torch
from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT_STR, _PRECISION_INPUT_STR_ALIAS

from ..errors import ConfigValueError
from ..hardware import cpu_capability, cpu_native_bf16, cpu_native_fp16, cuda_bf16, describe_cpu

# Lightning's reduced-precision settings, by the number format a CPU would have to compute in
REDUCED = {
    **dict.fromkeys(("bf16-mixed", "bf16-true", "bf16"), "bf16"),
    **dict.fromkeys(("16-mixed", "16-true", "16"), "fp16"),
}


# trainer.precision: ours (auto) and Lightning's own (its Trainer's type, the one table of what it accepts)
PRECISIONS = ("auto", *get_args(_PRECISION_INPUT_STR), *get_args(_PRECISION_INPUT_STR_ALIAS))


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # what lightning.Trainer gets
    reason: str  # why, for the start banner


def device_type(accelerator: str) -> str:
    """The device kind ``trainer.accelerator`` trains on: ``auto`` is a GPU when one is visible (as Lightning)."""
    accelerator = str(accelerator)
    if accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if accelerator == "gpu" else accelerator


def choose_precision(requested: str, accelerator: str, allow_emulated: bool = False) -> PrecisionChoice:
    """The precision a run trains at, and why; a ``ConfigValueError`` for reduced precision this CPU would emulate."""
    requested, device = str(requested), device_type(accelerator)
    if requested == "auto":
        return _automatic(device)
    if device == "cpu" and requested in ("16-mixed", "16"):  # Lightning's CPU autocast has no fp16: it runs bf16
        raise ConfigValueError(
            f"trainer.precision={requested}: Lightning trains fp16 mixed precision on GPUs only (on a CPU it would run "
            "bf16-mixed and record 16-mixed); use trainer.precision=bf16-mixed, auto or 32-true"
        )
    if device == "cpu" and requested in REDUCED:
        number = REDUCED[requested]
        if not (cpu_native_bf16() if number == "bf16" else cpu_native_fp16()):
            if not allow_emulated:
                raise ConfigValueError(
                    f"trainer.precision={requested}: this CPU ({describe_cpu()}) has no native {number}, so it "
                    "would be emulated, an order of magnitude slower than fp32; use trainer.precision=auto (or "
                    "32-true), or performance.allow_emulated_precision=true to run it anyway"
                )
            return PrecisionChoice(requested, f"as set; {number} is emulated on this CPU (allow_emulated_precision)")
    return PrecisionChoice(requested, "as set")


def _automatic(device: str) -> PrecisionChoice:
    if device == "cuda":
        if cuda_bf16():
            return PrecisionChoice("bf16-mixed", "auto: this GPU computes bf16 natively")
        return PrecisionChoice("32-true", "auto: this GPU has no native bf16 (16-mixed is the explicit alternative)")
    if device == "cpu":
        if cpu_native_bf16():
            return PrecisionChoice("bf16-mixed", f"auto: this CPU computes bf16 natively ({cpu_capability()})")
        return PrecisionChoice(
            "32-true", f"auto: this CPU ({cpu_capability()}) has no native bf16; emulated, it is slower than fp32"
        )
    return PrecisionChoice("32-true", f"auto: 32-true on {device}")
