"""``dumpsys battery``: only the first block, anchored on two-space-indented keys.

Vendor tails (Samsung, Xiaomi) repeat ``level:`` and ``temperature:`` in event logs, Android 14+
inserts one-space-indented ``Time when ...`` lines, and ``Capacity level: 2`` contains
``level: 2``; so keys are matched whole, after exactly two spaces, first occurrence wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.android._numbers import to_int

_KEY = re.compile(r"^  (?P<key>\S[^:]*):\s?(?P<value>.*)$")
_PLUGS = (("AC powered", "ac"), ("USB powered", "usb"), ("Wireless powered", "wireless"),
          ("Dock powered", "dock"))
STATUS_NAMES = {1: "unknown", 2: "charging", 3: "discharging", 4: "not charging", 5: "full"}
#: Battery statuses of a phone on external power: BatteryManager's numbers (``dumpsys battery``)
#: and power_supply's words (``/sys/class/power_supply/battery/status``).
POWERED_STATUSES = frozenset({2, 5, "Charging", "Full"})
_UNKNOWN_STATUSES = frozenset({1, "Unknown"})


def is_charging(status: int | str | None, plugged: str | None = None,
                powered: bool | None = None) -> bool | None:
    """Whether the phone runs on external power, the one rule of every reader (pre-flight,
    energy, charge counter): charging or full by its battery status, or plugged in (``dumpsys
    battery``'s plug lines), or powered (``dumpsys power``'s mIsPowered). A phone on a cable
    is charging here even when its battery holds (``not charging``, a charge limit): the cable
    feeds the phone and mixes into every battery reading. None: nothing says either way."""
    if status in POWERED_STATUSES or plugged not in (None, "none") or powered is True:
        return True
    if (status is not None and status not in _UNKNOWN_STATUSES) or plugged == "none" \
            or powered is False:
        return False
    return None


@dataclass(frozen=True)
class Battery:
    """Battery state. ``temperature_c`` in °C (the service prints tenths), ``voltage_mv`` in mV.

    ``plugged`` is ``ac``/``usb``/``wireless``/``dock``, ``none`` when all are false, or None when
    the lines are missing. ``updates_stopped`` means someone ran ``dumpsys battery set/unplug``
    and the values are fake until ``dumpsys battery reset``.
    """

    level: int | None
    temperature_c: float | None
    status: int | None
    plugged: str | None
    scale: int | None = None
    voltage_mv: int | None = None
    health: int | None = None
    updates_stopped: bool = False
    charge_counter_uah: int | None = None  # "Charge counter:" (µAh; coarse on some gauges)

    @property
    def status_name(self) -> str | None:
        return STATUS_NAMES.get(self.status) if self.status is not None else None


def parse_battery(text: str) -> Battery | None:
    """The first block of ``dumpsys battery``; None when no battery field is found."""
    values: dict[str, str] = {}
    started = False
    stopped = False
    for line in text.splitlines():
        line = line.rstrip("\r")
        if "UPDATES STOPPED" in line:
            stopped = True
        if line.startswith("Current Battery Service state"):
            started = True
            continue
        if not line.strip() or line.startswith("["):
            if started or values:
                break
            continue
        match = _KEY.match(line)
        if match is not None:
            started = True
            values.setdefault(match.group("key"), match.group("value").strip())
    if not any(key in values for key in ("level", "temperature", "status")):
        return None
    plugged: str | None = None
    if any(key in values for key, _ in _PLUGS):
        plugged = next((name for key, name in _PLUGS if values.get(key) == "true"), "none")
    tenths = to_int(values.get("temperature"))
    return Battery(
        level=to_int(values.get("level")),
        temperature_c=tenths / 10 if tenths is not None else None,
        status=to_int(values.get("status")),
        plugged=plugged,
        scale=to_int(values.get("scale")),
        voltage_mv=to_int(values.get("voltage")),
        health=to_int(values.get("health")),
        updates_stopped=stopped,
        charge_counter_uah=to_int(values.get("Charge counter")),
    )
