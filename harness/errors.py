"""One root for every error the harness raises on purpose.

A ``HarnessError`` is a user-facing failure: the CLI prints its message on one line and exits
with ``exit_code`` (2 for bad input), never a traceback. Each layer has its own subclass so
callers can catch what they can handle.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Root of all deliberate harness errors; the message is shown to the user as is."""

    exit_code = 2


class ConfigError(HarnessError):
    """A matrix, profile, manifest or other input file is malformed."""


class DeviceError(HarnessError):
    """A device could not be reached or a command on it failed."""

    def __init__(self, message: str, serial: str | None = None) -> None:
        super().__init__(f"{serial}: {message}" if serial else message)
        self.serial = serial


class DeviceLostError(DeviceError):
    """The connection to a device is gone (unplugged, adb transport offline)."""


class NotRunError(DeviceError):
    """The command never ran: the device's shell for it could not be opened."""


class NotRunLostError(DeviceLostError, NotRunError):
    """The command never ran because the device's transport is gone."""


def not_run(error: DeviceError) -> NotRunError:
    """``error`` (already naming its device) as a command that never ran."""
    found = (NotRunLostError if isinstance(error, DeviceLostError) else NotRunError)(str(error))
    found.serial = error.serial
    return found


class DeviceTimeoutError(DeviceError):
    """A device command did not finish within its timeout (the command was stopped)."""


class AdbServerDownError(DeviceError):
    """No adb server listens where the harness was told to look.

    The harness never starts an adb server by itself (adbutils and the adb client would, on the
    port of the environment, which may be a user's 5037); the user starts one.
    """


class EngineError(HarnessError):
    """An engine adapter could not build a command line or parse the output."""


class BuildError(HarnessError):
    """An engine build could not be made, imported or read."""


class ModelError(HarnessError):
    """A model file is unreadable or not a valid GGUF."""


class StoreError(HarnessError):
    """The results store could not be read or written."""
