"""`harness run` end to end: virtual phones, the real llama-bench build, the tiny ladder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build
from harness.cli import main

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "matrices" / "smoke.yaml"

pytestmark = pytest.mark.slow


def run_cli(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(main, ["run", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_smoke_matrix_on_two_virtual_phones(
    sim_home: Path, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    results = tmp_path / "results"
    builds = str(host_build.path.parent)
    summary = run_cli(str(SMOKE), "--devices", "sim:2", "--results", str(results),
                      "--builds", builds)
    trials = store.read_table(results, "trials")
    samples = store.read_table(results, "samples")
    # 8 cells x 2 repetitions x 2 phones, every one of them ok
    assert len(trials) == 32
    assert summary["trials_by_outcome"] == {"ok": 32}
    assert trials["trial_id"].is_unique
    assert set(trials["device_serial"]) == {d["serial"] for d in summary["devices"]}
    # each virtual phone's memory model is said, and is what its trials stored
    for device in summary["devices"]:
        assert device["memory_model"] in ("cgroup", "simulated"), device
        stored = trials[trials["device_serial"] == device["serial"]]["memory_model"]
        assert set(stored) == {device["memory_model"]}
    assert (trials["tg_tps"] > 0).all() and (trials["pp_tps"] > 0).all()
    assert set(samples["trial_id"]) == set(trials["trial_id"])
    close = (trials["peak_rss_bytes"] - trials["vm_hwm_bytes"]).abs() <= 0.10 * trials[
        "vm_hwm_bytes"]
    assert close.all(), trials[["peak_rss_bytes", "vm_hwm_bytes"]]
    assert trials["predicted_peak_bytes"].notna().all()
    # llama.cpp's own KV figure, read from llama-bench -v (printed to 0.01 MiB), is what the
    # predictor said
    gap = (trials["kv_reported_bytes"] - trials["predicted_kv_bytes"]).abs()
    assert (gap <= 0.006 * 2**20).all(), gap
    assert all(d["bytes_pushed"] > 0 for d in summary["devices"])

    # the same matrix again on the same (restarted) phones pushes nothing
    again = run_cli(str(SMOKE), "--devices", "sim:2", "--results", str(results),
                    "--builds", builds)
    assert [d["bytes_pushed"] for d in again["devices"]] == [0, 0]
    assert again["trials_by_outcome"] == {"ok": 32}
    assert len(store.read_table(results, "trials")) == 64


def test_resume_runs_only_what_has_no_stored_outcome(
    sim_home: Path, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    results = tmp_path / "results"
    builds = str(host_build.path.parent)
    first = run_cli(str(SMOKE), "--devices", "sim:1", "--results", str(results),
                    "--builds", builds)
    run_id = str(first["run_id"])
    parts = sorted(store.run_files(results, "trials", run_id))
    # forget the last 5 trials as if the harness had been killed before writing them
    for part in parts[-5:]:
        part.unlink()
    resumed = run_cli("--resume", run_id, "--devices", "sim:1", "--results", str(results),
                      "--builds", builds)
    assert resumed["run_id"] == run_id
    assert resumed["trials_by_outcome"] == {"ok": 5}
    trials: pd.DataFrame = store.read_table(results, "trials")
    assert len(trials) == 16 and trials["trial_id"].is_unique
