"""The doctor's pure parts: an answer's error class, the capability rows and the warnings."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.doctor.probe import ProbeRecord, classify
from harness.doctor.report import capability, diagnose
from harness.doctor.sources import BY_ID, MEASUREMENTS, SOURCES
from harness.matrix import Requirements

GPU = next(m for m in MEASUREMENTS if m.name == "GPU memory")
THERMAL = next(m for m in MEASUREMENTS if m.name == "thermal status and temperatures")

HAL = """Thermal Status: 0
HAL Ready: true
HAL connection:
	ThermalHAL 2.0 connected: yes
Current temperatures from HAL:
	Temperature{mValue=31.5, mType=3, mName=skin, mStatus=0}
"""


def record(sid: str, error: str = "ok", stdout: str = "x", stderr: str = "",
           exit_code: int | None = 0, detail: str = "") -> ProbeRecord:
    return ProbeRecord(sid, BY_ID[sid].command, exit_code, stdout, stderr, error, detail, 3)


def healthy() -> dict[str, ProbeRecord]:
    """Every probe answered usably (the stdout of those the warnings read is realistic)."""
    found = {s.id: record(s.id) for s in SOURCES}
    found["thermal.hal"] = record("thermal.hal", stdout=HAL)
    found["storage"] = record("storage", stdout="Filesystem 1K-blocks Used Available Use% "
                              "Mounted on\n/dev/block/dm-5 100000000 20000000 80000000 20% /data\n")
    found["battery_saver"] = record("battery_saver", stdout="0\n")
    found["doze"] = record("doze", stdout="ACTIVE\n")
    found["selinux_denials"] = record("selinux_denials", stdout="--------- beginning of main\n")
    return found


@pytest.mark.parametrize(("exit_code", "stdout", "stderr", "expected"), [
    (1, "", "cat: /proc/pressure/memory: Permission denied\n", "EACCES"),
    (1, "", "cat: /sys/class/kgsl/kgsl/proc: No such file or directory\n", "ENOENT"),
    (127, "", "/system/bin/sh: getenforce: inaccessible or not found\n", "not found"),
    (255, "", "Can't find service: gpu\n", "not found"),
    (0, "Permission Denial: can't dump gpu from pid=1, uid=2000\n", "", "EACCES"),
    (2, "", "grep: /sys/class/thermal/thermal_zone9/temp: Invalid argument\n", "error"),
    (0, "", "", "unusable"),
    (0, "12\n", "", "ok"),
])
def test_an_answer_is_classed_by_what_the_phone_said(exit_code: int, stdout: str, stderr: str,
                                                     expected: str) -> None:
    error, detail = classify(exit_code, stdout, stderr)
    assert error == expected
    assert (detail == "") == (expected == "ok")


def test_a_partly_refused_answer_that_is_usable_is_ok_and_names_the_refusal() -> None:
    check = BY_ID["thermal.zones"].check
    stdout = ("/sys/class/thermal/thermal_zone0/type:cpu\n"
              "/sys/class/thermal/thermal_zone0/temp:41000\n")
    stderr = "grep: /sys/class/thermal/thermal_zone1/temp: Permission denied\n"
    assert classify(2, stdout, stderr, check) == (
        "ok", "grep: /sys/class/thermal/thermal_zone1/temp: Permission denied")


def test_a_thermal_hal_that_is_not_ready_is_unusable() -> None:
    check = BY_ID["thermal.hal"].check
    assert classify(0, "Thermal Status: 0\nHAL Ready: false\n", "", check) == (
        "unusable", "thermal HAL not ready: no temperatures")
    assert classify(0, HAL, "", check) == ("ok", "")


def test_the_first_working_source_serves_and_the_refused_ones_before_it_are_named() -> None:
    records = {
        "gpu.kgsl": record("gpu.kgsl", "ENOENT", "", exit_code=1,
                           detail="ls: /sys/class/kgsl/kgsl/proc: No such file or directory"),
        "gpu.gpumem": record("gpu.gpumem"),
        "gpu.memtrack": record("gpu.memtrack", "unusable", detail="no GL mtrack row"),
    }
    row = capability(GPU, records)
    assert (row.source, row.fallback, row.lost) == ("gpu.gpumem", None, None)
    assert [(r.source, r.error) for r in row.refused] == [("gpu.kgsl", "ENOENT")]
    records["gpu.gpumem"] = record("gpu.gpumem", "unusable", detail="no snapshot")
    lost = capability(GPU, records)
    assert lost.source is None and lost.lost == GPU.lost
    assert [r.error for r in lost.refused] == ["ENOENT", "unusable", "unusable"]


def test_a_working_fallback_is_named() -> None:
    row = capability(THERMAL, healthy())
    assert (row.source, row.fallback, row.refused) == ("thermal.hal", "thermal.zones", ())


def test_a_healthy_phone_has_no_warning_and_exit_0() -> None:
    diagnosis = diagnose("s", {}, list(healthy().values()))
    assert diagnosis.warnings == ()
    assert diagnosis.exit_code == 0
    assert all(row.usable for row in diagnosis.capabilities)


def _fixture(folder: Path, name: str) -> str:
    text = (folder / name).read_text(encoding="utf-8")
    return text.split("\n", 1)[1]  # the first line names the source


def test_what_makes_results_wrong_or_noisy_is_warned_about(shared_android_fixtures: Path) -> None:
    records = healthy()
    records["battery_saver"] = record("battery_saver", stdout="1\n")
    records["doze"] = record("doze", stdout="IDLE\n")
    records["thermal.hal"] = record("thermal.hal", stdout=_fixture(
        shared_android_fixtures, "thermalservice_throttling_status2_hidl_thresholds_bort.txt"))
    records["storage"] = record("storage", stdout=(
        "Filesystem 1K-blocks Used Available Use% Mounted on\n"
        "/dev/block/dm-5 100000000 98900000 1100000 99% /data\n"))
    battery = _fixture(shared_android_fixtures, "dumpsys_battery_samsung_s24_gekko.txt")
    unplugged = battery.replace("USB powered: true", "USB powered: false").replace(
        "  status: 2", "  status: 3")  # discharging
    records["battery"] = record("battery", stdout=unplugged)
    records["power"] = record("power", "unusable", "", detail="no power manager fields")
    records["selinux_denials"] = record("selinux_denials", stdout=(
        "12-07 10:00:00.000  1234  1234 W sh: type=1400 audit(0.0:1): avc:  denied  { read } "
        "for name=\"memory\" dev=\"proc\" scontext=u:r:shell:s0 "
        "tcontext=u:object_r:proc_pressure_mem:s0 tclass=file permissive=0\n"
        "12-07 10:00:00.000  999  999 W app: avc: denied { read } scontext=u:r:untrusted_app:s0\n"))
    records["pressure"] = record("pressure", "EACCES", "", exit_code=1,
                                 detail="cat: /proc/pressure/memory: Permission denied")
    diagnosis = diagnose("s", {}, list(records.values()), Requirements(charging=True))
    said = "\n".join(diagnosis.warnings)
    assert "battery saver is on" in said
    assert "in Doze (IDLE)" in said
    assert "thermal status is 2 (MODERATE)" in said
    assert "low storage: 1074 MiB free" in said
    assert "the battery is not charging; the matrix requires charging: true" in said
    assert "1 SELinux denials of the shell" in said and "proc_pressure_mem" in said
    assert "screen and plug cannot be read" in said
    assert "memory pressure" not in said  # lost, but it does not change results
    assert diagnosis.exit_code == 1
    pressure = next(r for r in diagnosis.capabilities if r.measurement == "memory pressure")
    assert pressure.source is None and pressure.refused[0].error == "EACCES"


def test_a_record_survives_its_json_line() -> None:
    one = record("pressure", "EACCES", "", "cat: x: Permission denied\n", 1, "denied")
    assert ProbeRecord.from_json(one.to_json()) == one
