"""Facts about the public data sets that more than one layer needs: class counts and per-channel normalisation
statistics (0-1 pixels). The data modules normalise with them; the model registry's tagged ``pretrained_cfg``s
(``alternet_r50.cifar100``) describe weights trained on them."""

from __future__ import annotations

from typing import NamedTuple


class DataSetFacts(NamedTuple):
    num_classes: int
    image_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


FACTS = {
    "cifar10": DataSetFacts(10, 32, (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": DataSetFacts(100, 32, (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    # timm's tag for ImageNet-1k, with timm's IMAGENET_DEFAULT_MEAN / _STD (written here: this module is imported
    # before timm, which registers the zoo when it is imported: alternet/__init__.py)
    "in1k": DataSetFacts(1000, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
