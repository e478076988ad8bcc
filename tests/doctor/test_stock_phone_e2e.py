"""A trial on the stock (strict) virtual phone: it still runs, its readings come from the sources
a phone allows the shell, and what it could not read is exactly what the doctor found refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build
from harness.cli import main
from harness.device import get_device
from harness.doctor.capture import read_bundle
from harness.doctor.coverage import covered_by, normalise_path
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STOCK = str(REPO / "devices" / "virtual" / "stock.yaml")
MATRIX = """
name: stock
axes:
  build: [host-release]
  model: [tiny]
  quant: [Q8_0]
  n_ctx: [256]
  kv: [f16]
  threads: [1]
models:
  tiny: {ladder: tiny}
workload: {n_prompt: 32, n_gen: 64, n_depth: fill}
repetitions: 2
cooldown: {max_thermal_status: 1, max_temperature_c: 90, min_battery_pct: 0, max_wait_s: 1}
timeout: {trial_s: 120}
"""


def _source(reason: str) -> str | None:
    """The doctor's source for a trial's ``unreadable`` reason (``thermal_zone0/temp: ...``)."""
    path = reason.rsplit(": ", 1)[0]
    if not path.startswith("/"):
        path = f"/sys/class/thermal/{path}"
    found = covered_by(normalise_path(path))
    return found.id if found is not None else None


def test_a_trial_on_the_stock_phone_reads_what_a_phone_allows_and_names_the_rest(
        virtual_phones: Any, tmp_path: Path, host_build: Build,
        tiny_ladder: dict[str, Path]) -> None:
    (phone,) = virtual_phones(1, profile=STOCK)
    doctor = CliRunner().invoke(main, ["doctor", "--serial", phone.serial, "--json"])
    assert doctor.exit_code == 0, doctor.output
    (diagnosis,) = json.loads(doctor.stdout)
    refused = {p["id"] for p in diagnosis["probes"] if p["error"] == "EACCES"}
    absent = {p["id"] for p in diagnosis["probes"] if p["error"] == "ENOENT"}
    assert refused == {"pressure", "thermal.zones"}

    matrix = tmp_path / "stock.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "r"
    execute(matrix, [get_device(phone.serial)],
            RunOptions(results=results, builds=host_build.path.parent))
    trials = store.read_table(results, "trials")
    assert (trials["outcome"] == "ok").all(), trials[["outcome", "error"]]
    for row in trials.itertuples():
        reasons = row.unreadable.split("; ")
        denied = [r for r in reasons if r.endswith("Permission denied")]
        missing = [r for r in reasons if r.endswith("No such file or directory")]
        assert len(denied) + len(missing) == len(reasons), reasons
        assert "/proc/pressure/memory: Permission denied" in denied
        # what the trial could not read is what the doctor found refused, source for source;
        # a node this phone lacks (no GPU: no kgsl) the doctor found absent too
        assert {_source(r) for r in denied} == refused
        assert {_source(r) for r in missing} <= absent
    # heat from the thermal HAL, never a zero for the refused zones
    assert trials["start_thermal_status"].notna().all()
    assert (trials["max_temp_c"] > 0).all()
    samples = store.read_table(results, "samples")
    read = samples["max_temp_c"].dropna()
    assert len(read) and (read > 0).all()  # the HAL's sensors, while the zones are refused
    assert not pd.isna(trials["tg_tps"]).any()


def test_a_trial_on_a_replayed_capture_cannot_read_what_the_captured_phone_refused(
        virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))
    (phone,) = virtual_phones(1, profile=STOCK)
    bundle = tmp_path / "stock.zip"
    runner = CliRunner()
    assert runner.invoke(main, ["capture", "--serial", phone.serial, "-o", str(bundle)]
                         ).exit_code == 0
    _, records = read_bundle(bundle)
    refused = {r.id for r in records if r.error == "EACCES"}
    started = runner.invoke(main, ["sim", "start", "--from-capture", str(bundle), "--abi",
                                   "x86_64", "--json"])
    try:
        assert started.exit_code == 0, started.output
        serial = json.loads(started.stdout)[0]["serial"]
        matrix = tmp_path / "stock.yaml"
        matrix.write_text(MATRIX)
        results = tmp_path / "r"
        execute(matrix, [get_device(serial)],
                RunOptions(results=results, builds=host_build.path.parent))
    finally:
        runner.invoke(main, ["sim", "stop", "--all"])
    trials = store.read_table(results, "trials")
    assert (trials["outcome"] == "ok").all(), trials[["outcome", "error"]]
    for row in trials.itertuples():
        denied = [r for r in row.unreadable.split("; ") if r.endswith("Permission denied")]
        assert {_source(r) for r in denied} == refused == {"pressure", "thermal.zones"}
