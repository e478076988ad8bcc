"""A whole `harness run` through each adb this machine has: the wheel's, and Debian's 29.0.6
(what many users have on PATH; `./dev test` installs it), and the run's meta names which."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import store
from harness.artifacts.builds import Build
from harness.device import get_device
from harness.device.adb import adb_version
from harness.run.runner import RunOptions, execute, load_run_meta
from harness.testing.adbserver import AdbServer

pytestmark = [pytest.mark.slow, pytest.mark.each_adb_client]

SMOKE = Path(__file__).resolve().parents[2] / "matrices" / "smoke.yaml"


def test_the_smoke_matrix_runs_through_this_adb_and_the_meta_names_it(
        adb_server: AdbServer, virtual_phone: Any, tmp_path: Path, host_build: Build,
        tiny_ladder: Any) -> None:
    results = tmp_path / "r"
    summary = execute(SMOKE, [get_device(virtual_phone.serial)],
                      RunOptions(results=results, builds=host_build.path.parent))
    assert dict(summary.outcomes()) == {"ok": 16}
    trials = store.read_table(results, "trials")
    assert trials["vm_hwm_bytes"].notna().all() and trials["cache_resident_bytes"].notna().all()
    adb = load_run_meta(results, summary.run_id)["adb"]
    assert adb["program"] == adb_server.binary  # the fixture points adbutils at its server's
    assert adb["program_version"] == adb_version(adb_server.binary) != "unknown"
    assert adb["server_version"] == 41  # adb 1.0.41: both the wheel's and Debian's 29.0.6
