"""Runs on disk: everything a run directory holds and how each command reads it.

- :mod:`~alternet.runs.directories`: the file names of a run directory (:class:`RunDir`) and of a sweep's
  (:class:`SweepDir`), and which jobs a sweep holds;
- :mod:`~alternet.runs.summary`: a finished run's ``metrics.json`` (:class:`RunSummary`);
- :mod:`~alternet.runs.checkpoints`: reading a checkpoint safely (``weights_only``, its digest), and which checkpoint
  stands for a run: for every command (evaluate, export, resume, fine-tune) a run directory's checkpoints are
  resolved *inside that directory*, its best (named in its ``metrics.json``, by file name so a moved or copied run
  still works), else the only ``best-*.ckpt``, else ``last.ckpt``;
- :mod:`~alternet.runs.ownership`: the lock a run holds on its directory, and what a new or refused run may do to one;
- :mod:`~alternet.runs.records`: ``config.yaml``, ``environment.json``, ``resumes.json`` and the command that resumes
  a run;
- :mod:`~alternet.runs.weights`: the model inside a training checkpoint (:func:`load_model`).

Every module takes a :class:`RunDir`, never a bare path. The package imports nothing here, so that the file names
are cheap to import (no torch) for whoever only names a run's files.
"""
