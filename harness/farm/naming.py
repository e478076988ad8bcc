"""Names on the farm: Dask resources and worker names derived from adb serials.

A phone's worker carries the resource ``device:<clean serial>=1`` and the name
``<serial>@<host>``. Serials are cleaned because adb serials carry characters that Dask resource
names cannot: ``dask worker --resources`` splits on spaces, commas and ``=``, and a resource
given through Dask's configuration (``DASK_DISTRIBUTED__WORKER__RESOURCES__...``, YAML keys) cannot
hold ``.`` or ``:`` and treats ``-`` and ``_`` as the same character. So every character other
than ASCII letters and digits becomes ``_`` (``127.0.0.1:5555`` -> ``device:127_0_0_1_5555``).
The mapping back is kept by the worker's name, which holds the serial unchanged; two serials
that clean to the same name cannot share a farm run (``resource_map`` refuses them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from harness.errors import ConfigError

DEVICE = "device"
HOST = "host"
SOC = "soc"
_UNSAFE = re.compile(r"[^A-Za-z0-9]")


def clean(text: str) -> str:
    """``text`` with every character but ASCII letters and digits replaced by ``_``."""
    return _UNSAFE.sub("_", text.strip())


def tag_resource(kind: str, value: str) -> str:
    """A resource name such as ``host:lab_2`` or ``soc:sm8550``."""
    if not kind.isalnum():
        raise ConfigError(f"tag kind {kind!r}: use letters and digits only (e.g. rack:a3)")
    if not value.strip():
        raise ConfigError(f"tag {kind!r} has an empty value")
    return f"{kind}:{clean(value)}"


def device_resource(serial: str) -> str:
    """The resource that pins jobs to the phone with this adb serial."""
    return tag_resource(DEVICE, serial)


def worker_name(serial: str, host: str) -> str:
    return f"{serial}@{host}"


def serial_of(name: str) -> str | None:
    """The serial in a worker name ``<serial>@<host>``; None for other workers."""
    serial, at, host = name.rpartition("@")
    return serial if at and serial and host else None


def resource_map(serials: Iterable[str]) -> dict[str, str]:
    """serial -> device resource, refusing two serials that share a cleaned name."""
    mapping: dict[str, str] = {}
    owner: dict[str, str] = {}
    for serial in serials:
        resource = device_resource(serial)
        if resource in owner and owner[resource] != serial:
            raise ConfigError(
                f"devices {owner[resource]!r} and {serial!r} both map to the Dask resource "
                f"{resource!r}; run them in separate farm runs")
        owner[resource] = serial
        mapping[serial] = resource
    return mapping


def farm_phones(workers: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """serial -> worker name of the phones whose workers the scheduler knows.

    ``workers`` is the ``workers`` part of ``Client.scheduler_info()``; a worker counts when its
    name is ``<serial>@<host>`` and it carries that serial's device resource.
    """
    phones: dict[str, str] = {}
    for info in workers.values():
        name = str(info.get("name", ""))
        serial = serial_of(name)
        if serial is not None and device_resource(serial) in (info.get("resources") or {}):
            phones[serial] = name
    return phones
