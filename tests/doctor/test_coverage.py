"""The doctor probes every command the harness sends: the list of sources is the list of
command templates, and a command without a source fails here."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness.doctor.coverage import (
    Reference,
    covered_by,
    harness_files,
    normalise_path,
    references,
    scan,
    uncovered,
)
from harness.doctor.sources import BY_ID, MEASUREMENTS, SOURCES, Source

REPO = Path(__file__).resolve().parents[2]


def test_every_service_and_path_the_harness_sends_has_a_doctor_probe() -> None:
    found = scan(harness_files(REPO), REPO)
    # the scan reads the modules that talk to phones: their commands are there to be found
    texts = {ref.text for ref in found}
    for expected in ("dumpsys thermalservice", "dumpsys gpu", "/proc/pressure/memory",
                     "/proc/<pid>/smaps_rollup", "logcat -s lowmemorykiller",
                     "settings get global low_power", "getprop"):
        assert expected in texts
    missing = uncovered(found)
    assert missing == [], "commands without a doctor probe (add a Source to " \
        "harness/doctor/sources.py):\n" + "\n".join(map(str, missing))


def test_a_command_added_without_a_probe_fails_the_check(tmp_path: Path) -> None:
    """The check run on a copy of the harness to which one new command was added."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "harness", root / "harness",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    assert uncovered(scan(harness_files(root), root)) == []
    added = root / "harness" / "run" / "newprobe.py"
    added.write_text('"""A new reading: a docstring naming dumpsys sensorservice."""\n'
                     "def read(device, pid):\n"
                     "    return device.shell(f'dumpsys sensorservice; "
                     "cat /sys/class/devfreq/{pid}/cur_freq')\n")
    missing = uncovered(scan(harness_files(root), root))
    assert [str(ref) for ref in missing] == [
        "harness/run/newprobe.py:3: dumpsys sensorservice",
        "harness/run/newprobe.py:3: /sys/class/devfreq/*/cur_freq",
    ]
    # a source that probes them makes the check pass again
    extra = Source("sensors", "dumpsys sensorservice; cat /sys/class/devfreq/*/cur_freq",
                   ("dumpsys sensorservice", "/sys/class/devfreq/*"), "sensors")
    assert uncovered(scan(harness_files(root), root), (*SOURCES, extra)) == []


@pytest.mark.parametrize(("path", "normal"), [
    ("/proc/$p/io", "/proc/<pid>/io"),
    ("/proc/$$/stat", "/proc/<pid>/stat"),
    ("/proc/{}/smaps_rollup", "/proc/<pid>/smaps_rollup"),
    ("/proc/self/status", "/proc/<pid>/status"),
    ("/proc/1234/", "/proc/<pid>"),
    ("/proc/PID/io", "/proc/<pid>/io"),
    ("/proc/uptime", "/proc/uptime"),
    ("/sys/devices/system/cpu/cpu{}/cpufreq", "/sys/devices/system/cpu/cpu*/cpufreq"),
    ("/sys/class/thermal/$z/temp", "/sys/class/thermal/*/temp"),
])
def test_paths_are_normalised(path: str, normal: str) -> None:
    assert normalise_path(path) == normal


def test_references_in_a_composed_command() -> None:
    text = ("echo @@harness:x; dumpsys battery 2>/dev/null; settings get global low_power; "
            "logcat -d -s lowmemorykiller | tail -n 5; getprop ro.soc.model; "
            "cat /proc/$p/smaps_rollup")
    assert references(text) == ["dumpsys battery", "settings get global low_power",
                                "logcat -s lowmemorykiller", "getprop", "/dev/null",
                                "/proc/<pid>/smaps_rollup"]
    # words that merely contain a tool's name are not commands
    assert references("a dumpsys_interval_s knob, settings_value, /data.json") == []


def test_docstrings_are_not_commands_but_strings_are(tmp_path: Path) -> None:
    module = tmp_path / "harness" / "m.py"
    module.parent.mkdir()
    module.write_text('"""dumpsys foo"""\n\ndef f():\n    """cat /proc/bar"""\n'
                      '    return "dumpsys baz", f"cat /sys/{1}/qux"\n')
    assert scan([module], tmp_path) == [Reference("harness/m.py", 5, "dumpsys baz"),
                                        Reference("harness/m.py", 5, "/sys/*/qux")]


def test_a_covered_folder_covers_the_files_under_it_not_its_neighbours() -> None:
    assert covered_by("/sys/class/kgsl/kgsl/proc/<pid>/kernel") is BY_ID["gpu.kgsl"]
    assert covered_by("/sys/class/kgsl") is BY_ID["gpu.kgsl"]
    assert covered_by("/sys/class/kgslx") is None
    assert covered_by("dumpsys gpu") is BY_ID["gpu.gpumem"]
    assert covered_by("dumpsys gpux") is None


def test_the_sources_and_measurements_are_consistent() -> None:
    ids = [source.id for source in SOURCES]
    assert len(ids) == len(set(ids))
    named = {sid for m in MEASUREMENTS for sid in m.sources}
    assert named <= set(ids)
    # every source serves a measurement, or is read by the warnings and the identity lines
    assert set(ids) - named == {"id", "selinux", "toybox", "mksh", "shell", "selinux_denials",
                                "cpuinfo", "packages", "uname", "gpu.vkjson"}
    for source in SOURCES:
        command = source.probe_command(3)
        assert "{" not in command.replace("${KSH_VERSION", ""), source.id
        assert not re.search(r"\{cpu\}", command)
