"""Which devices a run uses: serials, every attached device, or virtual phones (``sim:N``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harness.device import Device, get_device, list_devices
from harness.errors import ConfigError


@contextmanager
def open_devices(spec: str, profile: str, ram_mb: int | None) -> Iterator[list[Device]]:
    """Devices named by --devices; ``sim:N[:ABI]`` starts what is missing and stops it afterwards.

    Virtual phones are of this host's ABI unless the spec names another (``sim:1:arm64-v8a``
    runs arm64 builds in qemu-user).
    """
    started: list[str] = []
    if spec.startswith("sim:"):
        from harness.virtual.control import list_phones, start_phones, stop_phones
        from harness.virtual.userland import ABI_MACHINES, host_abi

        count_text, _, abi = spec[4:].partition(":")
        abi = abi or host_abi() or "x86_64"
        if not count_text.isdigit() or int(count_text) < 1 or abi not in ABI_MACHINES:
            raise ConfigError(f"--devices {spec!r}: write sim:N with N >= 1, optionally with an "
                              f"ABI ({', '.join(ABI_MACHINES)}), e.g. sim:2 or sim:1:arm64-v8a")
        count = int(count_text)
        running = [p.serial for p in list_phones() if p.running and p.abi == abi][:count]
        if len(running) < count:
            new = start_phones(profile, count - len(running), ram_mb=ram_mb, abi=abi)
            started = [p.serial for p in new]
        serials = running + started
        try:
            yield [get_device(s) for s in serials]
        finally:
            if started:
                stop_phones(started)
        return
    if spec == "all":
        devices = list_devices()
        if not devices:
            raise ConfigError("--devices all: no device is attached (`harness devices` lists them)")
        yield devices
        return
    yield [get_device(s.strip()) for s in spec.split(",") if s.strip()]
