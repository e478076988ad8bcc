"""A battery power model of a phone, as pure functions, and readers of the phone's truth logs.

Why this model: it is the smallest one in which the harness's energy figures can be checked. The
load draws more the more cores are busy and the faster they clock (so throttling lowers power as
well as speed); the battery's terminal voltage sags under load and with a falling charge, so the
current a fuel gauge reports is not simply proportional to power; and a charger feeds the load
first, so a charging phone's battery current says little about the load. The phone writes what
a fuel gauge exposes (sysfs ``power_supply``, ``dumpsys battery``) and, for tests, the true load
power per tick (``state/power.log``).

    P = idle_w + w_per_core_ghz * busy_cores * f_ghz
    OCV = 3.5 + 0.7 * level / 100 V,   V = OCV + R * I_battery,   I_load = P / V

``I_battery`` is the net current into the battery: the charger's current minus the load's
(negative while discharging); with no charger it is ``-I_load``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

CURRENT_UNITS = ("uA", "mA")
DISCHARGE_SIGNS = ("negative", "positive")
CHARGER_KINDS = ("usb", "ac")
OVERHEAT_STATUS = 4  # thermal status from which a phone stops charging (BATTERY_HEALTH_OVERHEAT)
# BatteryManager.BATTERY_STATUS_* for the power_supply status words
STATUS_CODES = {"Charging": 2, "Discharging": 3, "Not charging": 4, "Full": 5}
_FLOAT_KEYS = ("idle_w", "w_per_core_ghz", "capacity_mah", "internal_ohm")
_KEYS = (*_FLOAT_KEYS, "current_unit", "discharge_sign", "charge_ma")


def _default_charge_ma() -> dict[str, float]:
    return {"usb": 500.0, "ac": 2000.0}


@dataclass(frozen=True)
class PowerParams:
    """Profile key ``power_model:``; every key is optional."""

    idle_w: float = 0.6  # the phone's draw with the engine idle
    w_per_core_ghz: float = 0.9  # per fully busy core per GHz of the big cluster's clock
    capacity_mah: float = 4500.0
    current_unit: str = "uA"  # current_now in uA, or mA as some vendors' gauges report it
    discharge_sign: str = "negative"  # current_now while discharging: negative (Pixel) or positive
    charge_ma: Mapping[str, float] = field(default_factory=_default_charge_ma)
    internal_ohm: float = 0.1

    @classmethod
    def from_profile(cls, data: Mapping[str, Any] | None,
                     where: str = "power_model") -> PowerParams:
        """Validate a ``power_model:`` mapping; errors name ``where`` and the key."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be a mapping of keys")
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key '{unknown[0]}' "
                              f"(allowed: {', '.join(sorted(_KEYS))})")
        stock = cls()
        values = {key: _number(data[key], f"{where}.{key}", positive=key == "capacity_mah")
                  for key in _FLOAT_KEYS if key in data}
        return cls(
            idle_w=values.get("idle_w", stock.idle_w),
            w_per_core_ghz=values.get("w_per_core_ghz", stock.w_per_core_ghz),
            capacity_mah=values.get("capacity_mah", stock.capacity_mah),
            internal_ohm=values.get("internal_ohm", stock.internal_ohm),
            current_unit=_word(data, "current_unit", CURRENT_UNITS, stock.current_unit, where),
            discharge_sign=_word(data, "discharge_sign", DISCHARGE_SIGNS, stock.discharge_sign,
                                 where),
            charge_ma=_charge_ma(data.get("charge_ma", {}), f"{where}.charge_ma"),
        )

    @property
    def capacity_uah(self) -> float:
        return self.capacity_mah * 1000.0


def _number(value: object, where: str, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{where} must be {'above' if positive else 'at least'} 0, got {value}")
    return float(value)


def _word(data: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str,
          where: str) -> str:
    value = data.get(key, default)
    if value not in choices:
        raise ConfigError(f"{where}.{key} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _charge_ma(data: object, where: str) -> dict[str, float]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping of charger kind to mA "
                          f"({', '.join(CHARGER_KINDS)})")
    unknown = sorted(set(data) - set(CHARGER_KINDS))
    if unknown:
        raise ConfigError(f"{where}: unknown charger '{unknown[0]}' "
                          f"(allowed: {', '.join(CHARGER_KINDS)})")
    return {**_default_charge_ma(),
            **{str(k): _number(v, f"{where}.{k}") for k, v in data.items()}}


# ----- the model ----------------------------------------------------------------------------
def load_power_w(params: PowerParams, busy_cores: float, f_ghz: float) -> float:
    """The phone's draw with ``busy_cores`` fully busy cores clocked at ``f_ghz``."""
    return params.idle_w + params.w_per_core_ghz * max(0.0, busy_cores) * max(0.0, f_ghz)


def ocv_v(level_pct: float) -> float:
    """Open-circuit voltage of the cell at this state of charge (linear, 3.5 V to 4.2 V)."""
    return 3.5 + 0.7 * min(100.0, max(0.0, level_pct)) / 100.0


def charger_a(params: PowerParams, charging: str) -> float:
    """What the charger of this kind (``none``, ``usb``, ``ac``) can deliver, in A."""
    return params.charge_ma.get(charging, 0.0) / 1000.0 if charging != "none" else 0.0


def _load_current_a(power_w: float, emf_v: float, ohm: float) -> float:
    """The root of ``ohm*I^2 - emf*I + P = 0`` the load runs at (the smaller one), in its
    cancellation-free form; past the most the source can give, that most (emf / 2R)."""
    discriminant = emf_v * emf_v - 4.0 * ohm * power_w
    if discriminant < 0:
        return emf_v / (2.0 * ohm)
    return 2.0 * power_w / (emf_v + math.sqrt(discriminant))


def currents_a(power_w: float, ocv: float, ohm: float, supply_a: float,
               can_charge: bool) -> tuple[float, float]:
    """(load current, net current into the battery) for a load of ``power_w``.

    The charger feeds the load first, up to ``supply_a``; the rest charges the battery if it
    may (not full, not too hot), and a load above the charger's current discharges it. The
    terminal voltage is ``ocv + ohm * net``.
    """
    load = _load_current_a(power_w, ocv + ohm * supply_a, ohm)
    net = supply_a - load
    if net > 0 and not can_charge:  # the charger gives only what the load takes
        load = power_w / ocv if ocv > 0 else 0.0
        net = min(0.0, supply_a - load)
    return load, net


def battery_status(charging: str, level: int, overheat: bool) -> str:
    """The power_supply status word: Charging, Discharging, Not charging (too hot) or Full."""
    if charging == "none":
        return "Discharging"
    if overheat:
        return "Not charging"
    return "Full" if level >= 100 else "Charging"


@dataclass(frozen=True)
class BatteryState:
    """The battery after a tick, and what its fuel gauge read during it."""

    charge_uah: float
    load_w: float = 0.0
    load_a: float = 0.0
    battery_a: float = 0.0  # net current into the battery: negative while discharging
    voltage_v: float = 0.0
    status: str = "Discharging"

    def level(self, params: PowerParams) -> int:
        return level_pct(self.charge_uah, params)


def level_pct(charge_uah: float, params: PowerParams) -> int:
    return max(0, min(100, round(100.0 * charge_uah / params.capacity_uah)))


def initial_battery(params: PowerParams, level: int, charging: str = "none") -> BatteryState:
    """A battery at ``level`` % (charge_counter = capacity * level), not loaded yet."""
    charge = params.capacity_uah * max(0, min(100, level)) / 100.0
    return BatteryState(charge_uah=charge, voltage_v=ocv_v(level),
                        status=battery_status(charging, level_pct(charge, params), False))


def step_battery(state: BatteryState, params: PowerParams, power_w: float, charging: str,
                 dt: float, overheat: bool = False) -> BatteryState:
    """Advance ``dt`` seconds during which the phone drew ``power_w`` with this charger."""
    exact_level = 100.0 * state.charge_uah / params.capacity_uah
    ocv = ocv_v(exact_level)
    can_charge = state.charge_uah < params.capacity_uah and not overheat
    load, net = currents_a(power_w, ocv, params.internal_ohm, charger_a(params, charging),
                           can_charge)
    charge = state.charge_uah + net * 1e6 * max(0.0, dt) / 3600.0
    charge = min(params.capacity_uah, max(0.0, charge))
    return BatteryState(charge_uah=charge, load_w=power_w, load_a=load, battery_a=net,
                        voltage_v=ocv + params.internal_ohm * net,
                        status=battery_status(charging, level_pct(charge, params), overheat))


def current_now(params: PowerParams, battery_a: float) -> int:
    """``current_now`` as the profile's gauge reports the net battery current: in uA or mA,
    negative or positive while discharging."""
    scale = 1e6 if params.current_unit == "uA" else 1e3
    sign = 1.0 if params.discharge_sign == "negative" else -1.0
    return round(sign * battery_a * scale)


def supply_files(state: BatteryState, params: PowerParams, charging: str,
                 temperature_c: float) -> dict[str, str]:
    """``/sys/class/power_supply`` files (path under it -> text) for this battery state, in the
    order they are written: the status last, so a reader that sees a new status (a charger just
    pulled) reads the current and voltage of that same state."""
    return {
        "battery/type": "Battery\n",
        "battery/present": "1\n",
        "battery/capacity": f"{state.level(params)}\n",
        "battery/current_now": f"{current_now(params, state.battery_a)}\n",
        "battery/voltage_now": f"{round(state.voltage_v * 1e6)}\n",
        "battery/charge_counter": f"{round(state.charge_uah)}\n",
        "battery/temp": f"{round(temperature_c * 10)}\n",
        "usb/type": "USB\n",
        "usb/online": f"{int(charging == 'usb')}\n",
        "ac/type": "Mains\n",
        "ac/online": f"{int(charging == 'ac')}\n",
        "battery/status": f"{state.status}\n",
    }


# ----- truth logs ---------------------------------------------------------------------------
def power_log_line(uptime_s: float, load_w: float, charging: bool) -> str:
    """One line of ``state/power.log``: from ``uptime_s`` on, the load drew ``load_w``."""
    return f"{uptime_s:.3f} {load_w:.6f} {int(charging)}\n"


def status_log_line(uptime_s: float, status: int) -> str:
    """One line of ``state/thermal.log``: the model's thermal status from ``uptime_s`` on."""
    return f"{uptime_s:.3f} {status}\n"


def trim_log(text: str, keep_chars: int) -> str:
    """The newest whole lines of ``text`` within its last ``keep_chars`` characters."""
    if len(text) <= keep_chars:
        return text
    tail = text[len(text) - keep_chars:]
    cut = tail.find("\n")
    return tail[cut + 1:] if cut >= 0 else ""


def _complete_lines(path: Path) -> list[list[str]]:
    """The whitespace-split fields of each complete line (a line still being appended is
    left out)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return []
    lines = text.split("\n")[:-1]  # the part after the last newline is unfinished
    return [line.split() for line in lines]


def read_power_log(path: Path) -> list[tuple[float, float, bool]]:
    """``state/power.log`` as (uptime_s, load_w, charging), oldest first; bad lines skipped."""
    entries = []
    for fields in _complete_lines(path):
        if len(fields) != 3 or fields[2] not in ("0", "1"):
            continue
        try:
            entries.append((float(fields[0]), float(fields[1]), fields[2] == "1"))
        except ValueError:
            continue
    return entries


def read_status_log(path: Path) -> list[tuple[float, int]]:
    """``state/thermal.log`` as (uptime_s, thermal status), oldest first; bad lines skipped."""
    entries = []
    for fields in _complete_lines(path):
        if len(fields) != 2:
            continue
        try:
            entries.append((float(fields[0]), int(fields[1])))
        except ValueError:
            continue
    return entries


def truth_energy_j(entries: Iterable[tuple[float, float, bool]], start_uptime: float,
                   end_uptime: float) -> float:
    """The load's energy between two uptimes, in J: each entry's power holds from its uptime to
    the next entry's (the last one's to the window's end); nothing before the first entry."""
    points = sorted((float(e[0]), float(e[1])) for e in entries)
    total = 0.0
    for index, (since, watts) in enumerate(points):
        until = points[index + 1][0] if index + 1 < len(points) else math.inf
        overlap = min(until, end_uptime) - max(since, start_uptime)
        if overlap > 0:
            total += watts * overlap
    return total
