"""Corrupted test sets, imported only by evaluation (and the ``alternet cifar-c`` command): the 15 CIFAR-C
corruptions (:mod:`.corruptions`), CIFAR-C files on disk, real or generated and cached (:mod:`.cifar_c`), and
ImageNet-C trees (:mod:`.imagenet_c`). ``alternet.data`` itself never imports this subpackage."""
