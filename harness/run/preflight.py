"""Before each trial: the phone's power state (against the run's requirements) and a baseline.

One shell round trip (mksh + toybox), ``conditions_command``, reads three things at once, and the
cooldown gate polls it until the phone is cool, so its last reading is the phone just before
the launch:

* the gate's state (``probe.STATE_SERVICES`` and ``probe.state_files``: thermal status,
  temperatures, battery, clocks);
* the pre-flight state (``SERVICES``): screen/wakefulness, stay-awake, plug and charging,
  battery saver, Doze; the first reading is checked against the run's requirements before any
  waiting;
* the baseline (``BASELINE`` and the ``lmkd`` section): boot id and uptime, MemTotal and
  MemAvailable, memory pressure, and the lmkd kill lines already in the log, so the end of the
  trial can tell what happened *during* it.

The system services are asked all at once (``_concurrently``).

Turning the text into values and checking requirements are pure functions, tested on text.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.android.battery import is_charging, parse_battery
from harness.android.kernel import (
    MemoryPressure,
    parse_boot_id,
    parse_memory_pressure,
    parse_uptime,
)
from harness.android.meminfo import parse_proc_meminfo
from harness.android.power import (
    DOZING_STATES,
    parse_dumpsys_power,
    parse_idle_state,
    parse_low_power,
    parse_stay_on_setting,
)
from harness.matrix import Requirements
from harness.run.probe import (
    MARK,
    STATE_SERVICES,
    split_sections,
    state_files,
    state_from_output,
)
from harness.run.state import DeviceState

# lmkd's kill lines (tag lowmemorykiller); the tail is enough, the baseline only has to cover
# what a trial can add
LMKD_LINES = "logcat -d -s lowmemorykiller 2>/dev/null | tail -n 100"
BOOT_ID = "/proc/sys/kernel/random/boot_id"


# Where the concurrent service queries write their answers (one folder per shell, removed after).
SCRATCH = "/data/local/tmp/harness/pre.$$"


def _command(sections: list[tuple[str, str]]) -> str:
    return "; ".join(f"echo {MARK}{name}; {command}" for name, command in sections)


def _concurrently(sections: list[tuple[str, str]], then: str, meanwhile: str = "") -> str:
    """Sections whose commands ask the phone's system services, asked all at once.

    Each of ``dumpsys``, ``settings`` and ``logcat`` is a round trip to a system service that
    takes tens of milliseconds on a phone (a process start on the virtual phone); one after the
    other they made the pre-trial read the largest part of the harness's overhead per trial.
    Each answer goes to its own file, then the sections are printed in order; without a
    writable scratch folder they run one after the other. ``then`` runs after them, while the
    answers are still in ``$d``; ``meanwhile`` (its own sections) while they are asked, or
    first when they run one after the other.
    """
    during = f"{meanwhile}; " if meanwhile else ""
    jobs = " ".join(f"{{ {command}; }} > \"$d/{name}\" 2>/dev/null &" for name, command in sections)
    shown = "; ".join(f"echo {MARK}{name}; cat \"$d/{name}\"" for name, _ in sections)
    plain = "; ".join(f"echo {MARK}{name}; {command} 2>/dev/null" for name, command in sections)
    return (f"d={SCRATCH}; if mkdir -p \"$d\" 2>/dev/null; then {jobs} {during}wait; {shown}; "
            f"{then}; rm -rf \"$d\"; else {during}{plain}; {then}; fi")


# (dumpsys battery, for charging and its source, is the state command's "battery" section).
# stay_on_while_plugged_in is asked only of a phone whose dumpsys power has no mStayOn.
SERVICES = [
    ("power", "dumpsys power"),
    ("low_power", "settings get global low_power"),
    ("deep", "dumpsys deviceidle get deep"),
    ("lmkd", LMKD_LINES),
]
STAY_ON = (f"grep -q mStayOn= \"$d/power\" 2>/dev/null || {{ echo {MARK}stay_on; "
           "settings get global stay_on_while_plugged_in 2>/dev/null; }")
# file reads keep their stderr: a denied /proc/pressure is recorded as unreadable, not guessed
BASELINE = _command([
    ("boot_id", f"cat {BOOT_ID}"),
    ("uptime", "cat /proc/uptime"),
    ("meminfo", "cat /proc/meminfo"),
    ("pressure", "cat /proc/pressure/memory"),
])


@dataclass(frozen=True)
class Preflight:
    """The phone's power state before a trial; None where it could not be read."""

    screen_on: bool | None = None
    stay_awake: bool | None = None
    charging: bool | None = None  # battery status "charging"
    charge_source: str | None = None  # none, ac, usb, wireless, dock
    battery_saver: bool | None = None
    doze_state: str | None = None  # deep idle state

    @property
    def dozing(self) -> bool | None:
        return None if self.doze_state is None else self.doze_state in DOZING_STATES


def preflight_from_output(text: str) -> Preflight:
    sections = split_sections(text)
    power = parse_dumpsys_power(sections.get("power", ""))
    battery = parse_battery(sections.get("battery", ""))
    stay_setting = parse_stay_on_setting(sections.get("stay_on", ""))
    stay_awake = power.stay_on if power is not None and power.stay_on is not None else (
        None if stay_setting is None else stay_setting != 0)
    charging = is_charging(battery.status if battery is not None else None,
                           battery.plugged if battery is not None else None,
                           power.is_powered if power is not None else None)
    source = battery.plugged if battery is not None and battery.plugged is not None else (
        power.plug_source if power is not None else None)
    return Preflight(
        screen_on=power.screen_on if power is not None else None,
        stay_awake=stay_awake,
        charging=charging,
        charge_source=source,
        battery_saver=parse_low_power(sections.get("low_power", "")),
        doze_state=parse_idle_state(sections.get("deep", "")),
    )


_SAYS = {
    "screen_on": ("the screen is {}", "on", "off"),
    "stay_awake": ("stay-awake is {}", "on", "off"),
    "charging": ("the battery is {}", "charging", "not charging"),
    "battery_saver": ("battery saver is {}", "on", "off"),
    "doze": ("the phone is {}", "in Doze", "not in Doze"),
}


def unmet_requirement(require: Requirements, state: Preflight) -> str | None:
    """The first requirement the phone does not meet, in words; None when all are met.

    A state that could not be read does not meet a requirement on it: a run that asks for the
    screen on must not measure a phone whose screen it cannot see.
    """
    for key, wanted in require.items():
        have = state.dozing if key == "doze" else getattr(state, key)
        template, yes, no = _SAYS[key]
        if have is None:
            return (f"{key} could not be read (the matrix requires "
                    f"{key}: {str(wanted).lower()})")
        if have != wanted:
            return (f"{template.format(yes if have else no)}; the matrix requires "
                    f"{key}: {str(wanted).lower()}")
    return None


@dataclass(frozen=True)
class Baseline:
    """The phone just before the engine starts (what the end of the trial is compared with)."""

    boot_id: str | None = None
    uptime_s: float | None = None
    mem_total_kb: int | None = None
    mem_available_kb: int | None = None
    pressure: MemoryPressure | None = None
    lmkd_lines: tuple[str, ...] = ()


def lmkd_lines(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if "Kill '" in line)


def baseline_from_output(text: str) -> Baseline:
    sections = split_sections(text)
    meminfo = parse_proc_meminfo(sections.get("meminfo", ""))
    return Baseline(
        boot_id=parse_boot_id(sections.get("boot_id", "")),
        uptime_s=parse_uptime(sections.get("uptime", "")),
        mem_total_kb=meminfo.mem_total_kb if meminfo else None,
        mem_available_kb=meminfo.mem_available_kb if meminfo else None,
        pressure=parse_memory_pressure(sections.get("pressure", "")),
        lmkd_lines=lmkd_lines(sections.get("lmkd", "")),
    )


def rebooted(before: Baseline, boot_id: str | None, uptime_s: float | None) -> bool | None:
    """Whether the phone booted again since ``before``: a new boot id, or failing that an uptime
    that went backwards. None when neither could be read both times."""
    if before.boot_id is not None and boot_id is not None:
        return boot_id != before.boot_id
    if before.uptime_s is not None and uptime_s is not None:
        return uptime_s < before.uptime_s
    return None


@dataclass(frozen=True)
class Conditions:
    """One reading of ``conditions_command``."""

    state: DeviceState
    preflight: Preflight
    baseline: Baseline


def conditions_command(big_cpu: int, meanwhile: str = "") -> str:
    """The gate's state, the pre-flight state and the baseline in one shell; every system
    service asked at once (``_concurrently``), ``meanwhile`` run while they answer."""
    services = _concurrently([*STATE_SERVICES, *SERVICES], then=STAY_ON, meanwhile=meanwhile)
    return "; ".join([services, state_files(big_cpu), BASELINE])


def conditions_from_output(text: str, errors: str = "") -> Conditions:
    """All three from one output; ``errors`` (its stderr) names the files it could not read."""
    return Conditions(state_from_output(text, errors), preflight_from_output(text),
                      baseline_from_output(text))
