"""What a phone's power state is before a trial: screen, stay-awake, plug, battery saver, Doze.

Each of these changes how fast the same engine runs on the same phone (a dozing or saving phone
caps its clocks; a charging one runs hotter), so a trial stores them and a run may require them.
The sources are what an unrooted shell can read: ``dumpsys power`` (``mWakefulness=``,
``mStayOn=``, ``mIsPowered=``, ``mPlugType=``), ``settings get global low_power`` and
``stay_on_while_plugged_in``, and ``dumpsys deviceidle get deep|light``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.android._numbers import to_int

# BatteryManager.BATTERY_PLUGGED_* (mPlugType is one of them, 0 when unplugged)
PLUG_TYPES = {0: "none", 1: "ac", 2: "usb", 4: "wireless", 8: "dock"}
WAKEFULNESS = ("Awake", "Asleep", "Dreaming", "Dozing")
# DeviceIdleController's deep and light states, as ``dumpsys deviceidle get`` prints them
DEEP_IDLE_STATES = ("ACTIVE", "INACTIVE", "IDLE_PENDING", "SENSING", "LOCATING",
                    "IDLE_MAINTENANCE", "IDLE", "QUICK_DOZE_DELAY")
LIGHT_IDLE_STATES = ("ACTIVE", "INACTIVE", "PRE_IDLE", "IDLE", "WAITING_FOR_NETWORK",
                     "IDLE_MAINTENANCE", "OVERRIDE")
# deep states in which the phone defers work and caps its activity (Doze proper)
DOZING_STATES = frozenset({"IDLE", "IDLE_MAINTENANCE"})

_FIELD = re.compile(r"^\s*(m[A-Za-z]+)=(\S*)")
_DISPLAY = re.compile(r"Display Power: state=(\w+)")


@dataclass(frozen=True)
class PowerManagerState:
    """The fields of ``dumpsys power`` a benchmark cares about; None where a line is missing."""

    wakefulness: str | None  # Awake, Asleep, Dreaming, Dozing
    stay_on: bool | None  # the stay-awake setting is in force right now (plugged and set)
    is_powered: bool | None
    plug_type: int | None
    battery_level: int | None = None
    display_state: str | None = None  # "Display Power: state=ON|OFF|DOZE"

    @property
    def screen_on(self) -> bool | None:
        """Interactive: awake (the screen is on), or failing that the display power state."""
        if self.wakefulness is not None:
            return self.wakefulness == "Awake"
        if self.display_state is not None:
            return self.display_state.upper() == "ON"
        return None

    @property
    def plug_source(self) -> str | None:
        """``none``/``ac``/``usb``/``wireless``/``dock``, or None when unknown."""
        if self.plug_type is None:
            return None if self.is_powered is None else ("none" if not self.is_powered else None)
        return PLUG_TYPES.get(self.plug_type, f"type {self.plug_type}")


def _bool(text: str | None) -> bool | None:
    if text is None:
        return None
    lowered = text.strip().lower()
    return True if lowered == "true" else False if lowered == "false" else None


def parse_dumpsys_power(text: str) -> PowerManagerState | None:
    """``dumpsys power``; None when none of its fields is there (no service, denied, garbage).

    Keys are matched whole at the start of a line (``mWakefulness=`` but not
    ``mWakefulnessChanging=``); the first occurrence wins, as later sections repeat some keys
    per display group.
    """
    values: dict[str, str] = {}
    display: str | None = None
    for line in text.splitlines():
        match = _FIELD.match(line)
        if match is not None:
            values.setdefault(match.group(1), match.group(2))
        elif display is None and (found := _DISPLAY.search(line)) is not None:
            display = found.group(1)
    wakefulness = values.get("mWakefulness")
    if wakefulness is not None and wakefulness not in WAKEFULNESS:
        wakefulness = None
    state = PowerManagerState(
        wakefulness=wakefulness,
        stay_on=_bool(values.get("mStayOn")),
        is_powered=_bool(values.get("mIsPowered")),
        plug_type=to_int(values.get("mPlugType")),
        battery_level=to_int(values.get("mBatteryLevel")),
        display_state=display,
    )
    if all(v is None for v in (state.wakefulness, state.stay_on, state.is_powered,
                               state.plug_type, state.display_state)):
        return None
    return state


def parse_settings_value(text: str) -> str | None:
    """The value ``settings get NAMESPACE KEY`` printed; None for ``null`` (never set) or noise."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1 or lines[0] == "null" or " " in lines[0]:
        return None
    return lines[0]


def parse_low_power(text: str) -> bool | None:
    """``settings get global low_power``: battery saver on (``1``) or off (``0``, or never set).

    ``null`` means the setting was never written, which is off; anything else is unknown.
    """
    if text.strip() == "null":
        return False
    value = to_int(parse_settings_value(text))
    return None if value is None else value != 0


def parse_stay_on_setting(text: str) -> int | None:
    """``settings get global stay_on_while_plugged_in``: a bitmask (AC 1, USB 2, wireless 4)."""
    if text.strip() == "null":
        return 0
    return to_int(parse_settings_value(text))


def parse_idle_state(text: str, states: tuple[str, ...] = DEEP_IDLE_STATES) -> str | None:
    """One word of ``dumpsys deviceidle get deep|light``; None for anything else."""
    words = text.split()
    return words[0] if len(words) == 1 and words[0] in states else None
