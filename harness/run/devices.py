"""Which devices a run uses: serials, every attached device, or virtual phones (``sim:N``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harness.device import Device, get_device, list_devices
from harness.errors import ConfigError


@contextmanager
def open_devices(spec: str, profile: str, ram_mb: int | None) -> Iterator[list[Device]]:
    """Devices named by --devices; ``sim:N`` starts what is missing and stops it afterwards."""
    started: list[str] = []
    if spec.startswith("sim:"):
        from harness.virtual.control import list_phones, start_phones, stop_phones

        count_text = spec[4:]
        if not count_text.isdigit() or int(count_text) < 1:
            raise ConfigError(f"--devices {spec!r}: write sim:N with N >= 1, e.g. sim:2")
        count = int(count_text)
        running = [p.serial for p in list_phones() if p.running][:count]
        if len(running) < count:
            new = start_phones(profile, count - len(running), ram_mb=ram_mb)
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
