"""A captured phone's layouts with live values, its offline CPUs, and the stock policy's classes
(pure: no phone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.android.battery import parse_battery
from harness.android.thermal import parse_thermalservice
from harness.doctor.probe import ProbeRecord
from harness.doctor.replay import differences, offline_cpus, replay_profile
from harness.errors import ConfigError
from harness.profiles import parse_android
from harness.virtual import formats
from harness.virtual.config import POLICY_CLASSES, AndroidRules

# a vendor's thermalservice: spaces, an AIDL HAL line, a power sensor and a percent sensor
LAYOUT = """IsStatusOverride: false
Thermal Status: 0
Cached temperatures:
  Temperature{mValue=31.299999, mType=0, mName=CPU0, mStatus=0}
HAL Ready: true
HAL connection:
  ThermalHAL AIDL 1  connected: yes
Current temperatures from HAL:
  Temperature{mValue=31.299999, mType=0, mName=CPU0, mStatus=0}
  Temperature{mValue=30.1, mType=0, mName=CPU4, mStatus=0}
  Temperature{mValue=28.5, mType=2, mName=battery, mStatus=0}
  Temperature{mValue=3350.0, mType=6, mName=vbat, mStatus=0}
  Temperature{mValue=77.0, mType=8, mName=soc, mStatus=0}
Current cooling devices from HAL:
  CoolingDevice{mValue=0, mType=2, mName=cpufreq-cpu4}
  CoolingDevice{mValue=0, mType=0, mName=fan}
"""
LIVE_TEMPS = [formats.Temperature("cpu-big", 0, 48.25, 2),
              formats.Temperature("cpu-little", 0, 46.2, 2),
              formats.Temperature("battery", 2, 36.0, 0),
              formats.Temperature("skin", 3, 40.0, 2)]


def test_a_filled_layout_keeps_the_vendors_lines_and_takes_the_live_readings() -> None:
    text = formats.filled_thermalservice(LAYOUT, 2, LIVE_TEMPS,
                                         [formats.Cooling("thermal-cpufreq-4", 2, 1)])
    assert "  ThermalHAL AIDL 1  connected: yes\n" in text  # the HAL line, as printed
    assert "  Temperature{mValue=48.2, mType=0, mName=CPU4, mStatus=2}\n" in text  # hottest CPU
    assert "mValue=3350.0, mType=6, mName=vbat" in text  # not a temperature: as captured
    assert "mValue=77.0, mType=8, mName=soc" in text
    assert "  CoolingDevice{mValue=1, mType=2, mName=cpufreq-cpu4}\n" in text
    assert "  CoolingDevice{mValue=0, mType=0, mName=fan}\n" in text
    found = parse_thermalservice(text)
    assert found is not None and found.status == 2 and found.hal_connection is not None
    assert "AIDL" in found.hal_connection
    assert {t.name: t.value for t in found.temperatures}["battery"] == 36.0
    assert text.count("\n") == LAYOUT.count("\n")


BATTERY = """Current Battery Service state:
  AC powered: false
  USB powered: true
  Wireless powered: false
  Max charging current: 1500000
  status: 2
  health: 2
  present: true
  level: 85
  scale: 100
  voltage: 4213
  temperature: 310
  technology: Li-ion
  LED Charging: true
  mSecPlugTypeSummary: 2
"""


def test_filled_fields_take_live_values_where_the_phone_prints_the_same_keys() -> None:
    live = formats.battery(41, 33.4, overheat=False, charging="none")
    text = formats.filled_fields(BATTERY, live)
    assert "  LED Charging: true\n  mSecPlugTypeSummary: 2\n" in text  # One UI's own lines
    found = parse_battery(text)
    assert found is not None
    assert (found.level, found.temperature_c) == (41, 33.4)
    assert "  USB powered: false\n" in text and "  status: 3\n" in text
    assert text.count("\n") == BATTERY.count("\n")


def _record(sid: str, stdout: str, error: str = "ok", stderr: str = "") -> ProbeRecord:
    return ProbeRecord(id=sid, command=sid, exit=0 if error == "ok" else 1, stdout=stdout,
                       stderr=stderr, error=error, detail="", ms=1)


def test_offline_cpus_are_the_possible_ones_not_online() -> None:
    dump = ("==> /sys/devices/system/cpu/possible <==\n0-7\n\n"
            "==> /sys/devices/system/cpu/online <==\n0-5\n\n")
    assert offline_cpus(_record("cpu.topology", dump)) == [6, 7]
    assert offline_cpus(_record("cpu.topology", dump.replace("0-5", "0-7"))) == []
    assert offline_cpus(_record("cpu.topology", "", error="EACCES")) == []


def test_a_replay_profile_carries_layouts_replies_and_the_exact_refusals() -> None:
    records = [
        _record("thermal.hal", LAYOUT), _record("battery", BATTERY),
        _record("uname", "Linux localhost 5.15.148-android14-11 #1 SMP PREEMPT aarch64 Toybox\n"),
        _record("pressure", "", error="EACCES",
                stderr="cat: /proc/pressure/memory: Permission denied\n"),
        _record("cpu.topology", "==> /sys/devices/system/cpu/possible <==\n0-7\n\n"
                "==> /sys/devices/system/cpu/online <==\n0-6\n\n"),
    ]
    android = replay_profile({"name": "x", "android": {}}, records)["android"]
    assert android["layouts"] == {"thermalservice": LAYOUT, "battery": BATTERY}
    assert android["readable"] == "all"  # the capture's refusals are the whole policy
    assert android["unreadable"] == ["/proc/pressure/memory"]
    assert android["offline_cpus"] == [7]
    assert [r["command"] for r in android["replies"]] == ["uname"]
    rules = parse_android(android, "profile.android", 8)
    assert rules.denied() == ("/proc/pressure/memory",)
    said = differences(records, [], kernel="6.1.0-host")
    assert said == ["kernel: the capture's '5.15.148-android14-11', here '6.1.0-host' "
                    "(uname answers as the capture did)"]


def test_the_stock_policy_denies_every_class_unless_the_vendor_opens_it() -> None:
    stock = AndroidRules().denied()
    for globs in POLICY_CLASSES.values():
        assert set(globs) <= set(stock)
    assert parse_android({"readable": "all"}, "p.android", 8).denied() == ()
    opened = parse_android({"readable": ["kgsl"], "unreadable": ["/x"]}, "p.android", 8)
    assert "/sys/class/kgsl/*" not in opened.denied() and "/x" in opened.denied()
    assert "/proc/pressure/*" in opened.denied()
    with pytest.raises(ConfigError, match=r"p.android.readable must be 'all' or a list of psi"):
        parse_android({"readable": ["gpu"]}, "p.android", 8)
    with pytest.raises(ConfigError, match=r"p.android.layouts must map thermalservice"):
        parse_android({"layouts": {"power": "x"}}, "p.android", 8)


def test_the_stock_and_permissive_profiles_say_so() -> None:
    from harness.profiles import load_profile_file

    virtual = Path(__file__).resolve().parents[2] / "devices" / "virtual"
    assert load_profile_file(virtual / "stock.yaml").android.denied() == AndroidRules().denied()
    assert load_profile_file(virtual / "permissive.yaml").android.denied() == ()


@pytest.mark.parametrize("title", ["SwapPss", "Swap", "Swapped"])
def test_meminfos_swap_column_is_replayed_as_titled_and_still_parses(title: str) -> None:
    from harness.android.meminfo import parse_meminfo

    rollup = {"Rss": 4000, "Pss": 3000, "Anonymous": 2500, "SwapPss": 120,
              "Private_Dirty": 2400, "Private_Clean": 100}
    sdk = 29 if title == "Swapped" else 33
    text = formats.meminfo_process(4242, "llama-bench", rollup, {"VmStk": 100}, sdk, 1000,
                                   swap_title=title)
    header = text.splitlines()[4]
    assert header.split()[:4] == ["Pss", "Private", "Private", title]
    android = replay_profile({"android": {}}, [_record("meminfo.dumpsys", text)])["android"]
    assert android["meminfo_swap"] == title
    found = parse_meminfo(text)
    assert found is not None and found.swap_pss_kb == 120 and found.pss_kb == 3000
    assert (found.rss_kb is None) == (sdk < 30)
