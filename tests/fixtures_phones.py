"""Fixtures for virtual phones (owned by the virtual-phone area).

Every phone is connected to the test's private ``adb_server`` and stopped by its pid at teardown,
also when the test fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.testing.adbserver import AdbServer
from harness.virtual.control import PhoneInfo, set_fault, start_phones, stop_phones


@dataclass(frozen=True)
class VirtualPhone:
    """A running virtual phone as tests see it."""

    info: PhoneInfo
    home: Path  # the sim state dir the phone was started in

    @property
    def serial(self) -> str:
        return self.info.serial

    @property
    def sandbox(self) -> Path:
        return Path(self.info.path)

    @property
    def root(self) -> Path:
        """What the phone calls '/' (data/local/tmp, sdcard, ...)."""
        return Path(self.info.path) / "root"

    def fault(self, kind: str, value: str | int | None = None) -> None:
        set_fault(self.serial, kind, value, home=self.home)


PhoneFactory = Callable[..., list[VirtualPhone]]


@pytest.fixture
def virtual_phones(adb_server: AdbServer, tmp_path: Path) -> Iterator[PhoneFactory]:
    """Factory: ``virtual_phones(count=2, profile="budget-4gb", ram_mb=150)``.

    Phones are x86_64 by default, so host builds run on them natively; ``abi="arm64-v8a"``
    gives the profile's arm64 phone, which runs arm64 builds in qemu-user.
    """
    home = tmp_path / "sim"

    def make(count: int = 1, profile: str = "midrange-8gb", ram_mb: int | None = None,
             storage_mb: int | None = None, abi: str | None = "x86_64",
             shell: str = "mksh", memory_model: str = "auto",
             storage_mb_s: float | None = None) -> list[VirtualPhone]:
        infos = start_phones(profile, count, ram_mb=ram_mb, storage_mb=storage_mb, home=home,
                             abi=abi, shell=shell, memory_model=memory_model,
                             storage_mb_s=storage_mb_s)
        return [VirtualPhone(info, home) for info in infos]

    try:
        yield make
    finally:
        stop_phones(home=home)


@pytest.fixture
def virtual_phone(virtual_phones: PhoneFactory) -> VirtualPhone:
    """One mid-range phone connected to the private adb server."""
    return virtual_phones()[0]
