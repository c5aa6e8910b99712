"""Runs on disk: everything a run directory holds and how each command reads it. The modules, and which checkpoint
stands for a run: docs/architecture.md ("Floors and the import rule", "Where each concern lives").

Every module takes a :class:`RunDir`, never a bare path. The package imports nothing here, so that the file names
are cheap to import (no torch) for whoever only names a run's files.
"""
