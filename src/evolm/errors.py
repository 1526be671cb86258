"""Errors the library raises. ``evolm.cli`` turns each into one line on stderr and a non-zero exit."""


class EvolmError(Exception):
    """Base class: a problem the user can fix (bad input, missing model, unreadable run directory)."""


class InputError(EvolmError):
    """A user-supplied file or value is malformed (the message names the file and line)."""


class ModelError(EvolmError):
    """A model cannot be found or loaded."""


class BackendError(EvolmError):
    """A generation backend failed (server unreachable after retries, optional package missing)."""


class RunError(EvolmError):
    """A run directory cannot be used (not resumable, corrupt checkpoint, config mismatch)."""
