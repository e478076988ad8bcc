"""Back-to-back trials on a virtual phone: two adb round trips each, every check still recorded.

The device's shell is counted from outside (``bench.overhead.counted``, the figure's own
counter) and each command is put in the trial whose span it started in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common import Timeline
from bench.overhead import counted, per_trial
from harness import store
from harness.artifacts.builds import Build
from harness.device import get_device
from harness.run.laps import PHASES
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

MATRIX = """
name: back-to-back
axes:
  build: [host-release]
  model: [tiny]
  quant: [Q8_0]
  n_ctx: [256]
  kv: [f16]
  threads: [1]
models:
  tiny: {ladder: tiny}
workload: {n_prompt: 16, n_gen: 8, n_depth: 0}
repetitions: 4
cooldown: {max_thermal_status: 6, max_temperature_c: 100, min_battery_pct: 0, max_wait_s: 5}
timeout: {trial_s: 120}
"""
# what each trial must still have read and stored: pre-flight, gate, baseline, end state
RECORDED = ("boot_id", "start_mem_available_bytes", "start_thermal_status", "start_temp_c",
            "cooldown_source", "battery_saver", "charging", "screen_on", "max_temp_c",
            "max_thermal_status", "vm_hwm_bytes")


def test_back_to_back_trials_make_two_round_trips_each_and_record_every_check(
    virtual_phone: object, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    device = get_device(virtual_phone.serial)  # type: ignore[attr-defined]
    timeline = Timeline()
    with counted(device) as shells:
        execute(matrix, [device], RunOptions(results=results, builds=host_build.path.parent),
                on_event=timeline)
    rows = per_trial(timeline.events, shells.calls)
    trials = store.read_table(results, "trials")
    assert len(rows) == 4 and list(trials["outcome"]) == ["ok"] * 4
    # the first trial reads the phone's conditions before its launch; so does the second when
    # the run's one bandwidth probe ran on the phone after the first (the reading is stale)
    assert "conditions" in rows[0]["shells"]
    assert ("conditions" in rows[1]["shells"]) == ("bandwidth" in rows[0]["shells"])
    assert [r["round_trips"] for r in rows[2:]] == [2, 2]  # the launch, one read after it
    assert all(set(r["shells"]) == {"launch", "evidence"} for r in rows[2:])
    for column in RECORDED:
        assert trials[column].notna().all(), column
    # each trial's laps came with its done event
    assert all(set(PHASES) - {"output_check"} <= set(r["timings"]) for r in rows)
    assert all(r["engine_s"] and r["engine_s"] > 0 for r in rows)  # its t0 .. t1 stamps
