"""`harness run` classifies from what a stock phone lets the shell see (issue 13), end to end.

Virtual phones follow a stock unrooted phone (contract in VIRTUAL_PHONE.md "Android fidelity"):
lmkd never names a shell-started engine, the kernel OOM killer logs nothing a shell can read,
thermal status may be stuck at 0, thermal zones may be denied, llama.cpp's affinity calls may
change nothing. Each test gives a phone one of those traits through its profile's ``android:``
mapping and checks what the harness stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from harness import store
from harness.artifacts.builds import Build
from harness.device import get_device
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MATRIX = """
name: {name}
axes:
  build: [host-release]
  model: [tiny]
  quant: [Q8_0]
  n_ctx: {n_ctx}
  kv: [f16]
  threads: [{threads}]
  affinity: [{affinity}]
models:
  tiny: {{ladder: tiny}}
workload: {{n_prompt: 32, n_gen: {n_gen}, n_depth: fill}}
repetitions: {reps}
cooldown: {{max_thermal_status: 1, max_temperature_c: {max_temp}, min_battery_pct: 0,
           max_wait_s: 1}}
timeout: {{trial_s: 120}}
{extra}
"""


def write_matrix(tmp_path: Path, name: str, *, n_ctx: list[int] | None = None,
                 n_gen: int = 16, reps: int = 1, threads: int = 1, affinity: str = "all",
                 max_temp: float = 90, extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(MATRIX.format(name=name, n_ctx=n_ctx or [256], n_gen=n_gen, reps=reps,
                                  threads=threads, affinity=affinity, max_temp=max_temp,
                                  extra=extra))
    return path


def profile(tmp_path: Path, name: str, base: str = "midrange-8gb",
            **changes: Any) -> str:
    """A profile file: ``base`` from devices/ with top-level keys replaced (e.g. android=...)."""
    data = yaml.safe_load((REPO / "devices" / f"{base}.yaml").read_text())
    data.update(changes, name=name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run(matrix: Path, phones: list[Any], results: Path, build: Build,
        **options: Any) -> pd.DataFrame:
    execute(matrix, [get_device(p.serial) for p in phones],
            RunOptions(results=results, builds=build.path.parent, **options))
    return store.read_table(results, "trials")


def is_true(value: Any) -> bool:
    """A stored nullable boolean that is true (pandas gives bool, numpy.bool_ or None)."""
    return value is not None and not pd.isna(value) and bool(value)


TWO_CPUS = [  # a little cpu0 and a big cpu1: a big-core mask is honourable on a 2-core host
    {"name": "little", "cores": 1, "max_khz": 1800000, "min_khz": 500000, "capacity": 512,
     "part": "0xd05"},
    {"name": "big", "cores": 1, "max_khz": 2400000, "min_khz": 600000, "capacity": 1024,
     "part": "0xd41"},
]


def test_kernel_oom_without_an_lmkd_line_for_the_engine_is_oom_killed_with_its_evidence(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    """No background app to kill either: only the engine's own exit, peak and stall remain."""
    lean = profile(tmp_path, "lean", base="budget-4gb", android={"background_apps": []})
    (phone,) = virtual_phones(1, profile=lean, ram_mb=28)
    matrix = write_matrix(tmp_path, "oom", n_ctx=[8192, 256])
    trials = run(matrix, [phone], tmp_path / "r", host_build, no_skip=True,
                 reserve_bytes=0).set_index("n_ctx")
    big = trials.loc[8192]
    assert big["outcome"] == "oom_killed", (big["error"], big["evidence"])
    signals = big["oom_signals"].split(",")
    assert "sigkill" in signals and "lmkd_named_engine" not in signals
    assert {"vm_hwm_near_available", "memory_pressure"} & set(signals), signals
    assert "exit 137 (SIGKILL) without a timeout" in big["evidence"]
    assert "Kill '" not in big["evidence"]  # nothing of lmkd: it never saw the engine
    assert big["start_mem_available_bytes"] > 0
    assert trials.loc[256]["outcome"] == "ok"  # the next cell still ran


def test_kernel_oom_that_takes_system_server_is_device_lost_with_the_reboot_recorded(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    rebooting = profile(tmp_path, "reboots", base="budget-4gb",
                        android={"oom_victim": "system_server"})
    (phone,) = virtual_phones(1, profile=rebooting, ram_mb=28)
    matrix = write_matrix(tmp_path, "reboot", n_ctx=[8192, 256])
    trials = run(matrix, [phone], tmp_path / "r", host_build, no_skip=True, reserve_bytes=0,
                 reconnect_s=60).set_index("n_ctx")
    lost = trials.loc[8192]
    assert lost["outcome"] == "device_lost"
    assert is_true(lost["boot_id_changed"])
    assert "reboot" in lost["oom_signals"].split(",")
    assert "rebooted" in lost["error"]
    after = trials.loc[256]
    assert after["outcome"] == "ok"  # the phone came back and the run went on
    assert after["boot_id"] != lost["boot_id"]  # it did boot again
    assert not is_true(after["boot_id_changed"]) and not pd.isna(after["boot_id_changed"])


def test_a_cpu_mask_the_engine_could_not_apply_is_flagged_and_kept_out_of_verdicts(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    honoured = profile(tmp_path, "pins", clusters=TWO_CPUS)
    ignored = profile(tmp_path, "ignores", clusters=TWO_CPUS, android={"affinity": "ignored"})
    (good,) = virtual_phones(1, profile=honoured)
    (bad,) = virtual_phones(1, profile=ignored)
    matrix = write_matrix(tmp_path, "pin", reps=2, threads=2, affinity="big")
    trials = run(matrix, [good, bad], tmp_path / "r", host_build)
    assert (trials["outcome"] == "ok").all(), trials[["outcome", "error"]]
    by_phone = {serial: rows for serial, rows in trials.groupby("device_serial")}
    pinned, loose = by_phone[good.serial], by_phone[bad.serial]
    assert (pinned["affinity"] == "0x2").all()
    assert (pinned["applied_affinity"] == "1").all(), pinned["applied_affinity"]
    assert pinned["affinity_applied"].eq(True).all() and pinned["config_not_applied"].isna().all()
    assert (pinned["threads_seen"] >= 2).all()
    assert loose["affinity_applied"].eq(False).all(), loose["applied_affinity"]
    assert (loose["applied_affinity"] == "0-1").all()
    assert loose["config_not_applied"].str.contains("affinity 0x2").all()
    from harness.analysis.frames import usable

    assert set(usable(trials)["device_serial"]) == {good.serial}


def test_a_hot_phone_with_thermal_status_stuck_at_zero_does_not_pass_the_gate(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    hot = {"ambient_c": 46.0}
    stuck = profile(tmp_path, "stuck", thermal=hot, android={"thermal_status_stuck": True})
    no_hal = profile(tmp_path, "nohal", thermal=hot,  # a vendor that opens its zones
                     android={"thermal_status_stuck": True, "thermal_hal": "not_ready",
                              "readable": ["thermal_zones"]})
    blind = profile(tmp_path, "blind", thermal=hot, android={
        "thermal_status_stuck": True, "thermal_hal": "not_ready",
        "unreadable": ["/sys/class/thermal/thermal_zone*/temp"]})
    phones = [virtual_phones(1, profile=p)[0] for p in (stuck, no_hal, blind)]
    matrix = write_matrix(tmp_path, "hot", max_temp=40)
    trials = run(matrix, phones, tmp_path / "r", host_build).set_index("device_serial")
    sources = {}
    for phone in phones:
        row = trials.loc[phone.serial]
        assert row["start_thermal_status"] in (0, None) or pd.isna(row["start_thermal_status"])
        assert row["cooldown_waited_s"] >= 1  # it waited its max_wait_s ...
        assert "°C > 40.0 °C" in row["cooldown_unmet"]  # ... and says why it gave up
        sources[phone.serial] = row["cooldown_source"]
    assert [sources[p.serial] for p in phones] == ["hal", "sysfs", "dumpsys_battery"]


def test_a_phone_in_battery_saver_fails_a_run_that_requires_it_off(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    saving, normal = virtual_phones(2)
    saving.fault("battery-saver", "on")
    matrix = write_matrix(tmp_path, "saver", reps=2,
                          extra="require: {screen_on: true, battery_saver: false}")
    trials = run(matrix, [saving, normal], tmp_path / "r", host_build)
    by_phone = {serial: rows for serial, rows in trials.groupby("device_serial")}
    refused = by_phone[saving.serial]
    assert (refused["outcome"] == "precondition_failed").all()
    assert refused["error"].str.contains(saving.serial, regex=False).all()
    assert refused["error"].str.contains("battery saver is on; the matrix requires "
                                         "battery_saver: false").all()
    assert refused["battery_saver"].eq(True).all() and refused["tg_tps"].isna().all()
    ran = by_phone[normal.serial]
    assert (ran["outcome"] == "ok").all()
    for column, value in (("screen_on", True), ("battery_saver", False),
                          ("doze_state", "ACTIVE"), ("charge_source", "usb")):
        assert ran[column].eq(value).all(), (column, ran[column])


def test_a_phone_with_unreadable_thermal_zones_still_runs_and_says_what_it_could_not_read(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    denied = profile(tmp_path, "denied", android={
        "unreadable": ["/sys/class/thermal/thermal_zone1/temp",
                       "/sys/class/thermal/thermal_zone3/*"],
        "smaps_rollup": False})
    (phone,) = virtual_phones(1, profile=denied)
    # long enough (about a second per trial) that the sampler's reads always meet the engine
    # alive, also on a loaded machine: 256 tokens ended before the first read once
    matrix = write_matrix(tmp_path, "denied", n_ctx=[2048], n_gen=1536, reps=2)
    results = tmp_path / "r"
    trials = run(matrix, [phone], results, host_build)
    assert (trials["outcome"] == "ok").all(), trials[["outcome", "error"]]
    for row in trials.itertuples():
        reasons = row.unreadable.split("; ")
        assert "thermal_zone1/temp: Permission denied" in reasons, reasons
        assert "thermal_zone3/temp: Permission denied" in reasons, reasons
        assert "/proc/<pid>/smaps_rollup: No such file or directory" in reasons, reasons
        assert len(reasons) == len(set(reasons))  # once per trial, not once per sample
    samples = store.read_table(results, "samples")
    memory = samples[samples["rss_bytes"].notna()]
    assert len(memory) and set(memory["source"]) <= {"device-sampler", "device-watch"}
    assert memory["pss_bytes"].isna().all()  # absent, not zero
    assert trials["vm_hwm_bytes"].notna().all()
