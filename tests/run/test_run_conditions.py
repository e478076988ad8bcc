"""`harness run` under memory pressure and heat, on virtual phones with the real llama-bench."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from harness import store
from harness.artifacts.builds import Build
from harness.device import get_device
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

MATRIX = """
name: {name}
axes:
  build: [host-release]
  model: [tiny]
  quant: [Q8_0]
  n_ctx: {n_ctx}
  kv: [f16]
  threads: [1]
models:
  tiny: {{ladder: tiny}}
workload: {{n_prompt: 32, n_gen: {n_gen}, n_depth: fill}}
repetitions: {reps}
cooldown: {{max_thermal_status: 1, max_temperature_c: 90, min_battery_pct: 0, max_wait_s: 1}}
timeout: {{trial_s: 120}}
"""


def write_matrix(tmp_path: Path, name: str, n_ctx: list[int], n_gen: int, reps: int) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(MATRIX.format(name=name, n_ctx=n_ctx, n_gen=n_gen, reps=reps))
    return path


def test_cell_too_big_for_the_phone_is_oom_killed_and_the_run_goes_on(
    virtual_phones, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    (phone,) = virtual_phones(1, profile="budget-4gb", ram_mb=28)
    matrix = write_matrix(tmp_path, "oom", [8192, 256], n_gen=16, reps=1)
    results = tmp_path / "results"
    options = RunOptions(results=results, builds=host_build.path.parent, no_skip=True,
                         reserve_bytes=0)
    summary = execute(matrix, [get_device(phone.serial)], options)
    trials = store.read_table(results, "trials").set_index("n_ctx")
    assert dict(summary.outcomes()) == {"oom_killed": 1, "ok": 1}
    big = trials.loc[8192]
    assert big["outcome"] == "oom_killed"
    # a stock phone: lmkd kills the background apps, never the shell-started engine, and the
    # kernel's OOM kill of the engine leaves no line a shell can read
    signals = big["oom_signals"].split(",")
    assert "sigkill" in signals and "lmkd_named_engine" not in signals, signals
    assert "lmkd_killed_apps" in signals, signals
    assert "lmkd killed" in big["evidence"] and "uid 10" in big["evidence"]
    assert trials.loc[256]["outcome"] == "ok"  # the next cell still ran


def test_hot_phone_yields_throttled_and_slower_trials(
    virtual_phones, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    # The phones run one after the other, so neither engine competes with the other's for the
    # host's two cores: run side by side, a loaded host once gave the cool engine no more CPU
    # than the throttled one. CRITICAL stops the hot phone's processes 65% of the time.
    cool, hot = virtual_phones(2, profile="midrange-8gb")
    hot.fault("thermal", 4)
    matrix = write_matrix(tmp_path, "heat", [1024], n_gen=512, reps=4)
    results = tmp_path / "results"
    options = RunOptions(results=results, builds=host_build.path.parent)
    for phone in (cool, hot):
        execute(matrix, [get_device(phone.serial)], options)
    trials = store.read_table(results, "trials")
    assert (trials["outcome"] == "ok").all()
    by_phone = {serial: group for serial, group in trials.groupby("device_serial")}
    assert by_phone[hot.serial]["throttled"].all()
    assert not by_phone[cool.serial]["throttled"].any()
    assert by_phone[hot.serial]["max_thermal_status"].min() >= 4
    hot_tg = statistics.median(by_phone[hot.serial]["tg_tps"])
    cool_tg = statistics.median(by_phone[cool.serial]["tg_tps"])
    assert hot_tg < 0.8 * cool_tg, (hot_tg, cool_tg)
