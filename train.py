"""Train a model: `python train.py [model=alternet_r50] [data=cifar100] [recipe=paper] [key=value ...]`, the same as
`alternet train ...` (alternet/apps/cli.py), kept in a checkout for the paper-style command line.

With no arguments it trains a small AlterNet on scikit-learn's bundled digits on the CPU; `--help` lists the config
groups.
"""

from alternet.apps.cli import train_main as main

if __name__ == "__main__":
    main()
