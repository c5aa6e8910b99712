"""Errors of the analysis toolkit (user-facing: the message says what is wrong and how to fix it)."""

from __future__ import annotations

from ..errors import AlternetError, ConfigValueError


class AnalysisError(AlternetError, RuntimeError):
    """An analysis that cannot run on the given model or data."""


class AnalysisConfigError(ConfigValueError):
    """An unknown analysis name, an unknown config key or an impossible budget."""
