"""The benchmarks: each module is a command run from the repository root, ``python -m bench.NAME [--help]``, that prints
a header naming its machine, code and command, then its numbers, and appends them to ``bench/results/`` through
:mod:`bench.harness` (docs/benchmarks.md says what each measures)."""
