"""Exceptions the engine raises on purpose. Each carries a one-line message meant for a user."""


class TrifitError(Exception):
    """Base class: a problem the user can act on (bad input, missing adapter, limits)."""


class SceneError(TrifitError, ValueError):
    """A scene file or scene object breaks a rule of the model (the message names rule and entry)."""


class ImageError(TrifitError, ValueError):
    """An image cannot be read or is unusable (unreadable, too large, empty)."""


class AdapterError(TrifitError, RuntimeError):
    """No usable GPU adapter, or a request beyond what the adapter allows."""


class SettingsError(TrifitError, ValueError):
    """A fit setting of the wrong type, out of its range, or not one of its choices."""


class BatchError(TrifitError, ValueError):
    """A batch that cannot be run as one (ragged triangle counts, mismatched sizes)."""


class NumericalFault(TrifitError, ArithmeticError):
    """A NaN or inf appeared in the loss; the fit loop has already rolled back to good parameters."""

    def __init__(self, message: str, iteration: int):
        super().__init__(message)
        self.iteration = iteration


class DeviceLostError(AdapterError):
    """The GPU device was lost (driver reset, removal); a new one can be requested."""
