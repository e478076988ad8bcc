"""A shell command the adb server could not open on the device never ran (``NotRunError``):
the trial path tries such a launch again instead of recording the trial lost."""

from __future__ import annotations

from typing import Any

import pytest

from harness.device.adb import AdbDevice
from harness.errors import DeviceLostError, DeviceTimeoutError, NotRunError, NotRunLostError


def test_a_shell_the_server_cannot_open_never_ran_and_one_that_ran_did(
        virtual_phone: Any) -> None:
    with pytest.raises(NotRunLostError, match="not found") as caught:
        AdbDevice("127.0.0.1:1").shell("true", timeout=10)
    assert isinstance(caught.value, DeviceLostError)  # still a lost device to its callers
    assert str(caught.value).startswith("127.0.0.1:1: true: ")  # the serial named once
    with pytest.raises(DeviceTimeoutError) as ran:
        AdbDevice(virtual_phone.serial).shell("sleep 30", timeout=0.5)
    assert not isinstance(ran.value, NotRunError)
