"""Errors meant for the user: the CLIs print their message (no traceback) and exit non-zero."""


class AlternetError(Exception):
    """Base of errors whose message says what is wrong and how to fix it."""


class ConfigValueError(AlternetError, ValueError):
    """A configuration value that cannot work; the message names the key."""


class DataError(AlternetError, RuntimeError):
    """A data set that is missing, corrupt or inconsistent with the configuration."""


class CheckpointError(AlternetError, RuntimeError):
    """A checkpoint that is missing, unreadable or does not fit the model or data."""
