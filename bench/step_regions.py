"""How to cut a training step into compiled regions (issue 72): the choices torch allows, measured on one machine, on
a step with the paper recipe's parts (mixup/cutmix on the device, smoothed soft-target loss, clipping, AdamW, EMA,
the non-finite flag), written out in plain torch so that only the cut differs:

  * ``eager``: nothing compiled;
  * ``backbone``: the model compiled, the rest eager (alternet's step before the whole step);
  * ``regions``: the forward with mixing and loss compiled (its backward compiled with it by AOTAutograd) and the
    update compiled; the eager autograd engine in between stores the gradients;
  * ``regions+ca``: the same with compiled autograd, which also compiles the gradients' storing
    (``alternet.training.step``'s choice);
  * ``regions+grad``: the same with ``torch.autograd.grad`` returning the gradients to the update (no ``.grad``;
    Lightning's backward hooks and DDP's gradient hooks would not run).

    python -m bench.step_regions [--model alternet_tiny] [--batch 2] [--size 16] [--steps 100] [--rounds 3]

Per arm: the operators dispatched outside compiled code in a step (``bench.syncs.EagerOperators``) and
the median step time over ``--rounds`` rounds of ``--steps`` steps, the arms alternated round by round after one
untimed round (which compiles). At a small batch the step time is mostly the host's. Inductor's default mode.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from alternet.models import create_model
from alternet.training.step import mix

from .harness import add_harness_arguments, begin, finish, row, summarise, timing_row
from .syncs import EagerOperators

ARMS = ("eager", "backbone", "regions", "regions+ca", "regions+grad")
CLASSES = 10


class Step:
    """One arm's training step over a fixed batch."""

    def __init__(self, arm: str, args: argparse.Namespace):
        torch.manual_seed(0)
        self.arm = arm
        self.model = create_model(args.model, num_classes=CLASSES, img_size=args.size)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.ema = [p.detach().clone() for p in self.params]
        self.state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in self.params]
        self.step_count = torch.zeros(())
        self.images = torch.randn(args.batch, 3, args.size, args.size)
        self.labels = torch.randint(0, CLASSES, (args.batch,))
        backbone = torch.compile(self.model) if arm == "backbone" else self.model
        self.net = backbone
        compiled = arm.startswith("regions")
        self.forward = torch.compile(self.forward_loss) if compiled else self.forward_loss
        self.update = torch.compile(self.apply_update) if compiled else self.apply_update

    def numbers(self) -> torch.Tensor:
        """lr, then one mixing row per image (a cut box on the first half of the images, a blend on the rest)."""
        rows = [[0.7, 1.0, 2.0, 9.0, 3.0, 11.0] if i % 2 else [0.6, 0.6, 0, 0, 0, 0] for i in range(len(self.labels))]
        return torch.tensor([1e-3, *[v for r in rows for v in r]])

    def forward_loss(self, numbers: torch.Tensor) -> torch.Tensor:
        rows = numbers[1:].view(len(self.labels), 6)
        images, targets = mix(self.images, self.labels, rows, CLASSES, 0.1)
        logits = self.net(images)
        return torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()

    @torch.no_grad()
    def apply_update(self, numbers: torch.Tensor, grads: list[torch.Tensor]) -> torch.Tensor:
        found = ~torch.isfinite(torch.stack(torch._foreach_norm(grads, float("inf"))).max())
        keep = (~found).float()
        safe = [torch.where(found, 0.0, g) for g in grads]
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(safe)))
        safe = torch._foreach_mul(safe, keep * torch.clamp(5.0 / (total + 1e-6), max=1.0))
        lr = numbers[0]
        averages, squares = [m for m, _ in self.state], [v for _, v in self.state]
        self.step_count.add_(keep)
        torch._foreach_mul_(self.params, 1.0 - lr * 0.05 * keep)
        torch._foreach_add_(averages, torch._foreach_mul(torch._foreach_sub(safe, averages), 0.1 * keep))
        torch._foreach_mul_(squares, 1.0 - 0.001 * keep)
        torch._foreach_addcmul_(squares, safe, safe, value=0.001)
        step = torch.clamp(self.step_count, min=1.0)
        denominators = torch._foreach_add(
            torch._foreach_div(torch._foreach_sqrt(squares), (1 - 0.999**step) ** 0.5), 1e-8
        )
        updates = torch._foreach_mul(torch._foreach_div(averages, denominators), lr * keep / (1 - 0.9**step))
        torch._foreach_sub_(self.params, updates)
        torch._foreach_add_(self.ema, torch._foreach_mul(torch._foreach_sub(self.params, self.ema), 1e-3 * keep))
        return found

    def __call__(self) -> None:
        numbers = self.numbers()
        loss = self.forward(numbers)
        if self.arm == "regions+grad":
            self.update(numbers, list(torch.autograd.grad(loss, self.params)))
            return
        if self.arm == "regions+ca":
            with torch._dynamo.compiled_autograd._enable(torch.compile(dynamic=False)):
                loss.backward()
        else:
            loss.backward()
        self.update(numbers, [p.grad for p in self.params])
        for p in self.params:
            p.grad = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="alternet_tiny")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100, help="steps per round")
    add_harness_arguments(parser, rounds=3)
    args = parser.parse_args()
    facts = begin(args, "step_regions")
    steps = {arm: Step(arm, args) for arm in ARMS}
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for index in range(args.warmup + args.rounds):
        for arm, step in steps.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            if index >= args.warmup:
                seconds[arm].append((time.perf_counter() - start) / args.steps)
    operators = {}
    for arm, step in steps.items():
        with EagerOperators() as ops:
            step()
        operators[arm] = ops.count
    case = f"{args.model} {args.size}px batch {args.batch} cpu fp32"
    print(f"{case}, {args.rounds} rounds of {args.steps} steps:")
    print(f"  {'arm':<14} {'ms/step':>8} {'eager operators':>16}")
    for arm in ARMS:
        print(f"  {arm:<14} {summarise(seconds[arm]).median * 1000:>8.2f} {operators[arm]:>16}")
    rows = [timing_row(f"{case} {arm}", "step median", seconds[arm]) for arm in ARMS]
    rows += [row(f"{case} {arm}", "eager operators per step", operators[arm], "1") for arm in ARMS]
    finish(args, "step_regions", rows, facts)


if __name__ == "__main__":
    main()
