"""Devices: the one protocol through which the harness touches phones and this host."""

from __future__ import annotations

from harness.device.base import (
    Device,
    DeviceFacts,
    Progress,
    ShellResult,
    shell_command,
)
from harness.device.local import LOCAL_SERIAL, LocalDevice
from harness.errors import DeviceError, DeviceTimeoutError


def list_devices() -> list[Device]:
    """Devices of the adb server (``ANDROID_ADB_SERVER_PORT``) that are online, by serial."""
    from harness.device.adb import AdbDevice, adb_client, translate_error

    client = adb_client()
    try:
        infos = client.list()
    except Exception as error:
        raise translate_error(error, "adb", "list devices") from error
    return [AdbDevice(info.serial, client) for info in sorted(infos, key=lambda i: i.serial)
            if info.state == "device"]


def get_device(serial: str) -> Device:
    """The device with this serial; ``local`` is this host."""
    if serial == LOCAL_SERIAL:
        return LocalDevice()
    for device in list_devices():
        if device.serial == serial:
            return device
    raise DeviceError(
        f"no online device with serial {serial!r}; `harness devices` lists the attached ones")


__all__ = [
    "LOCAL_SERIAL",
    "Device",
    "DeviceFacts",
    "DeviceTimeoutError",
    "LocalDevice",
    "Progress",
    "ShellResult",
    "get_device",
    "list_devices",
    "shell_command",
]
