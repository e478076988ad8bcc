"""``dumpsys thermalservice`` and ``/sys/class/thermal`` zones.

Only the ``Current temperatures from HAL`` section is trusted: ``Cached temperatures`` is stale.
Many "temperatures" are not temperatures at all (BCL voltage/current/percent, OCP limits in mA,
``-99.9`` for "n/a", ``0.0`` for an absent sensor), so picking the hottest sensor filters by type,
by name and by plausibility.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.android._numbers import to_float, to_int

STATUS_NAMES = ("NONE", "LIGHT", "MODERATE", "SEVERE", "CRITICAL", "EMERGENCY", "SHUTDOWN")

# AOSP TemperatureType values that measure volts, mA or percent rather than degrees.
NON_TEMPERATURE_TYPES = frozenset({6, 7, 8})  # BCL_VOLTAGE, BCL_CURRENT, BCL_PERCENTAGE
# Sensor/zone names that are battery-current-limit or power levels whatever their type says.
_NON_TEMPERATURE_NAME = re.compile(
    r"^(socd?|vbat|ibat)$|(^|[-_])(vbat|ibat|vph|bcl|ocp|vdroop\d*|smpl|batoilo)([-_]|$)|-lvl\d*$",
    re.IGNORECASE,
)
_PLAUSIBLE_C = (-30.0, 150.0)

_TEMPERATURE = re.compile(
    r"Temperature\{mValue=(?P<value>[^,]*), mType=(?P<type>-?\d+), "
    r"mName=(?P<name>.*), mStatus=(?P<status>-?\d+)\}"
)
_COOLING = re.compile(
    r"CoolingDevice\{mValue=(?P<value>[^,]*), mType=(?P<type>-?\d+), mName=(?P<name>.*)\}"
)
_CURRENT_TEMPS = "Current temperatures from HAL"
_CURRENT_COOLING = "Current cooling devices from HAL"


@dataclass(frozen=True)
class Temperature:
    """One HAL sensor: ``value`` in °C (None for NaN), ``type`` as AOSP TemperatureType."""

    name: str
    type: int
    value: float | None
    status: int


@dataclass(frozen=True)
class CoolingDevice:
    """One cooling device; a non-zero ``value`` on a CPU device means mitigation is active."""

    name: str
    type: int
    value: int | None


@dataclass(frozen=True)
class ThermalService:
    """What ``dumpsys thermalservice`` says now. Without a ready HAL the lists are empty."""

    status: int | None
    hal_ready: bool | None
    hal_connection: str | None = None
    temperatures: tuple[Temperature, ...] = ()
    cooling_devices: tuple[CoolingDevice, ...] = ()

    @property
    def status_name(self) -> str | None:
        if self.status is None or not 0 <= self.status < len(STATUS_NAMES):
            return None
        return STATUS_NAMES[self.status]


def parse_thermalservice(text: str) -> ThermalService | None:
    """The current HAL section of ``dumpsys thermalservice``; None when it is not that output."""
    status: int | None = None
    hal_ready: bool | None = None
    hal_connection: str | None = None
    temperatures: list[Temperature] = []
    cooling: list[CoolingDevice] = []
    section: str | None = None
    recognised = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Thermal Status:"):
            status, section, recognised = to_int(line.partition(":")[2]), None, True
        elif line.startswith("HAL Ready:"):
            hal_ready = line.partition(":")[2].strip().lower() == "true"
            section, recognised = None, True
        elif line.startswith("Temperature{"):
            match = _TEMPERATURE.search(line)
            if match is not None and section == _CURRENT_TEMPS:
                temperatures.append(Temperature(
                    name=match.group("name"), type=int(match.group("type")),
                    value=to_float(match.group("value")), status=int(match.group("status")),
                ))
        elif line.startswith("CoolingDevice{"):
            match = _COOLING.search(line)
            if match is not None and section == _CURRENT_COOLING:
                cooling.append(CoolingDevice(
                    name=match.group("name"), type=int(match.group("type")),
                    value=to_int(match.group("value")),
                ))
        elif line.endswith(":") and not raw[:1].isspace() and "{" not in line:
            section = line[:-1]
        elif section == "HAL connection" and "connected" in line and hal_connection is None:
            hal_connection = line
    if not recognised:
        return None
    return ThermalService(
        status=status, hal_ready=hal_ready, hal_connection=hal_connection,
        temperatures=tuple(temperatures), cooling_devices=tuple(cooling),
    )


def is_real_temperature(sensor: Temperature) -> bool:
    """True for a sensor that reports a plausible temperature in °C right now."""
    if sensor.type in NON_TEMPERATURE_TYPES or _NON_TEMPERATURE_NAME.search(sensor.name):
        return False
    if sensor.value is None or sensor.value == 0.0:  # 0.0 = absent sensor (SUBBAT, USB)
        return False
    return _PLAUSIBLE_C[0] < sensor.value < _PLAUSIBLE_C[1]  # -99.9 = Samsung "n/a"


def hottest_temperature(sensors: Iterable[Temperature]) -> Temperature | None:
    """The hottest real temperature, skipping BCL types, power levels and sentinel values."""
    real = [s for s in sensors if is_real_temperature(s)]
    return max(real, key=lambda s: s.value or 0.0) if real else None


def cpu_mitigation_active(service: ThermalService) -> bool:
    """Whether a CPU cooling device (``thermal-cpufreq-N``, type CPU) is engaged."""
    return any(
        (device.value or 0) > 0 and (device.type == 2 or "cpufreq" in device.name)
        for device in service.cooling_devices
    )


@dataclass(frozen=True)
class ThermalZone:
    """A ``thermal_zoneN`` with its temperature normalised to °C (None when unreadable)."""

    zone: str
    type: str
    celsius: float | None
    raw: int | None


def normalise_zone_temp(raw: int) -> float | None:
    """Sysfs units vary per zone: milli-°C (most), deci-°C (old tsens) or plain °C (old xo_therm).

    -40000 (disconnected thermistor), -274000 (invalid) and implausible results read as None.
    """
    magnitude = abs(raw)
    celsius = raw / 1000 if magnitude >= 1000 else raw / 10 if magnitude >= 150 else float(raw)
    if raw <= -40000 or not _PLAUSIBLE_C[0] < celsius < _PLAUSIBLE_C[1]:
        return None
    return celsius


def read_thermal_zones(
    zones: Mapping[str, tuple[str | None, str | None]],
) -> tuple[ThermalZone, ...]:
    """Zones from ``{zone: (type text, temp text)}`` read per directory (pairs never cross).

    Non-temperature zones (battery %, ibat/vbat levels, BCL) and zones whose type or temp could not
    be read (EACCES on recent builds) are left out. Output follows the zone number, not the lexical
    glob order (zone10 after zone2).
    """
    found: list[ThermalZone] = []
    for zone in sorted(zones, key=_zone_number):
        type_text, temp_text = zones[zone]
        if type_text is None or temp_text is None:
            continue
        name = type_text.strip()
        raw = to_int(temp_text)
        if not name or raw is None or _NON_TEMPERATURE_NAME.search(name):
            continue
        found.append(ThermalZone(zone=zone, type=name, celsius=normalise_zone_temp(raw), raw=raw))
    return tuple(found)


def parse_zone_listing(text: str) -> dict[str, tuple[str | None, str | None]]:
    """Lines ``zone|type|temp`` (what the device layer's one-shot shell loop prints) as a dict.

    A field left empty because the file was unreadable becomes None.
    """
    zones: dict[str, tuple[str | None, str | None]] = {}
    for line in text.splitlines():
        parts = line.rstrip("\r").split("|")
        if len(parts) != 3 or not parts[0].strip():
            continue
        zone = parts[0].strip().rstrip("/").rsplit("/", 1)[-1]
        zones[zone] = (parts[1] or None, parts[2] or None)
    return zones


_GREP_LINE = re.compile(r"^(?:.*/)?(?P<zone>thermal_zone\d+)/(?P<file>type|temp):(?P<value>.*)$")


def parse_zone_grep(text: str) -> dict[str, tuple[str | None, str | None]]:
    """``grep -H '' .../thermal_zone*/type .../thermal_zone*/temp`` as ``{zone: (type, temp)}``.

    One applet call reads every zone; a file it could not read has no line (its error went to
    stderr), so that half of the pair is None and ``read_thermal_zones`` leaves the zone out.
    """
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        match = _GREP_LINE.match(line.rstrip("\r"))
        if match is not None:
            found.setdefault(match.group("zone"), {}).setdefault(
                match.group("file"), match.group("value").strip())
    return {zone: (files.get("type") or None, files.get("temp") or None)
            for zone, files in found.items()}


_SURFACE_NAME = re.compile(r"skin|batt|xo[-_]?therm|quiet[-_]?therm", re.IGNORECASE)
SURFACE_TYPES = frozenset({2, 3})  # BATTERY, SKIN


def is_surface_sensor(sensor: Temperature) -> bool:
    """A skin or battery sensor (by type, or by name for vendors that mislabel types)."""
    return is_real_temperature(sensor) and (
        sensor.type in SURFACE_TYPES or bool(_SURFACE_NAME.search(sensor.name)))


def is_surface_zone(zone: ThermalZone) -> bool:
    """A thermal zone that measures the skin or the battery (skin-therm, xo-therm, battery...)."""
    return zone.celsius is not None and bool(_SURFACE_NAME.search(zone.type))


def _zone_number(zone: str) -> tuple[int, str]:
    digits = re.search(r"(\d+)$", zone)
    return (int(digits.group(1)) if digits else -1, zone)
