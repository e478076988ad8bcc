"""Real phones as fixtures: captures made from phones' published output (captures/public/), their
readings parsed to the values the texts print, and each replayed as a virtual phone that runs
matrices/smoke.yaml."""

from __future__ import annotations

import datetime
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from harness import store
from harness.android.battery import parse_battery
from harness.android.gpumem import parse_gpumem
from harness.android.meminfo import parse_meminfo, parse_proc_meminfo
from harness.android.thermal import parse_thermalservice
from harness.artifacts.builds import Build
from harness.cli import main
from harness.device import get_device
from harness.doctor.capture import read_bundle
from harness.doctor.texts import CITATION, members, read_texts
from harness.errors import ConfigError
from harness.run.runner import RunOptions, execute

REPO = Path(__file__).resolve().parents[2]
PUBLIC = REPO / "captures" / "public"
BUNDLES = ("samsung-aidl", "pixel-hal2", "qualcomm-throttling", "adreno-mtrack", "gpumem-only")


def _path(bundle: str, probe: str) -> Path:
    """A bundle's text of ``probe``: its own file, or the reference sample phone.yaml names
    (the project's samples in ../shared beside the repository are read, not copied)."""
    listed = yaml.safe_load((PUBLIC / bundle / "phone.yaml").read_text()).get("texts") or {}
    return PUBLIC / bundle / (listed.get(probe) or f"{probe}.txt")


def _has(bundle: str, probe: str) -> bool:
    return _path(bundle, probe).is_file()


def _text(bundle: str, probe: str) -> str:
    return _path(bundle, probe).read_text().partition("\n")[2]


def _complete(bundle: str) -> bool:
    listed = yaml.safe_load((PUBLIC / bundle / "phone.yaml").read_text()).get("texts") or {}
    return all(_has(bundle, probe) for probe in listed)


SHARED = pytest.mark.skipif(not all(_complete(b) for b in BUNDLES),
                            reason="the reference samples (../shared) are not beside the repo")


def _expected(bundle: str) -> dict[str, Any]:
    data = yaml.safe_load((PUBLIC / bundle / "phone.yaml").read_text())
    return dict(data["expected"])


@SHARED
@pytest.mark.parametrize("bundle", BUNDLES)
def test_each_text_says_where_it_was_published_and_is_usable(bundle: str) -> None:
    phone = read_texts(PUBLIC / bundle)
    assert all(r.error == "ok" for r in phone.records), [(r.id, r.detail) for r in phone.records]
    for path in {_path(bundle, r.id) for r in phone.records if _has(bundle, r.id)}:
        assert path.read_text().startswith(CITATION), path
    manifest = json.loads(members(phone, datetime.date(2026, 12, 7))["manifest.json"])
    assert set(manifest["published"]["sources"]) == {r.id for r in phone.records}


@pytest.mark.parametrize("bundle", [b for b in BUNDLES
                                    if _has(b, "thermal.hal")])
def test_thermal_readings_parse_to_the_printed_values(bundle: str) -> None:
    want = _expected(bundle)
    found = parse_thermalservice(_text(bundle, "thermal.hal"))
    assert found is not None and found.status == want["thermal_status"]
    temps = {t.name: t.value for t in found.temperatures}
    for name, value in want["temperatures"].items():
        assert temps[name] == pytest.approx(value, abs=1e-6), name
    cooling = {c.name: c.value for c in found.cooling_devices}
    assert want["cooling_devices"].items() <= cooling.items()
    assert bool(cooling) == bool(want["cooling_devices"])
    if want["thermal_hal"] == "aidl":
        assert found.hal_connection is not None and "AIDL" in found.hal_connection


@pytest.mark.parametrize("bundle", [b for b in BUNDLES if _has(b, "battery")])
def test_battery_readings_parse_to_the_printed_values(bundle: str) -> None:
    want = _expected(bundle)["battery"]
    found = parse_battery(_text(bundle, "battery"))
    assert found is not None
    assert (found.level, found.temperature_c, found.plugged, found.status) == (
        want["level"], want["temperature_c"], want["plugged"], want["status"])


@pytest.mark.parametrize("bundle", [b for b in BUNDLES if _has(b, "meminfo")])
def test_memory_readings_parse_to_the_printed_values(bundle: str) -> None:
    want = _expected(bundle)
    found = parse_proc_meminfo(_text(bundle, "meminfo"))
    assert found is not None
    assert (found.mem_total_kb, found.mem_available_kb) == (want["meminfo_total_kb"],
                                                            want["meminfo_available_kb"])


@SHARED
def test_adrenos_gl_mtrack_rows_are_the_apps_graphics_memory() -> None:
    want = _expected("adreno-mtrack")
    found = parse_meminfo(_text("adreno-mtrack", "meminfo.dumpsys"))
    assert found is not None and (found.pid, found.name) == (want["meminfo_pid"],
                                                             want["meminfo_package"])
    assert found.mtrack_kb == want["gfx_dev_kb"] + want["egl_mtrack_kb"] + want["gl_mtrack_kb"]
    assert found.graphics_kb == want["graphics_kb"]
    assert (found.pss_kb, found.rss_kb) == (want["total_pss_kb"], want["total_rss_kb"])


def test_gpu_memory_only_in_gpuservice_parses_to_its_totals() -> None:
    want = _expected("gpumem-only")
    found = parse_gpumem(_text("gpumem-only", "gpu.gpumem"))
    assert found is not None
    (gpu,) = found.gpus
    assert gpu.global_bytes == want["gpu_global_bytes"]
    assert len(gpu.processes) == want["gpu_process_count"]
    for pid, size in want["gpu_processes_bytes"].items():
        assert gpu.processes[pid] == size


def test_a_folder_that_is_not_texts_of_a_phone_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"phone\.yaml: no such file"):
        read_texts(tmp_path)
    (tmp_path / "phone.yaml").write_text("name: [x\n")
    with pytest.raises(ConfigError, match=r"phone\.yaml: not YAML"):
        read_texts(tmp_path)
    (tmp_path / "phone.yaml").write_text("name: x\n")
    (tmp_path / "thermal.txt").write_text("# SOURCE: here\nThermal Status: 0\n")
    with pytest.raises(ConfigError, match=r"thermal\.txt: no probe named 'thermal'"):
        read_texts(tmp_path)
    (tmp_path / "thermal.txt").rename(tmp_path / "thermal.hal.txt")
    (tmp_path / "thermal.hal.txt").write_text("Thermal Status: 0\n")
    with pytest.raises(ConfigError, match="the first line must say where the text was published"):
        read_texts(tmp_path)
    result = CliRunner().invoke(main, ["capture", "--from-texts", str(tmp_path),
                                       "-o", str(tmp_path / "x.zip")])
    assert result.exit_code == 2 and result.output.strip().count("\n") == 0, result.output
    assert not (tmp_path / "x.zip").exists()


@SHARED
@pytest.mark.slow
def test_the_public_phones_replay_and_run_the_smoke_matrix(
        adb_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host_build: Build,
        tiny_ladder: dict[str, Path]) -> None:
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "harness-home"))
    runner = CliRunner()
    serials: dict[str, str] = {}
    try:
        for bundle in BUNDLES:
            zipped = tmp_path / f"{bundle}.zip"
            made = runner.invoke(main, ["capture", "--from-texts", str(PUBLIC / bundle),
                                        "-o", str(zipped)])
            assert made.exit_code == 0, made.output
            read_bundle(zipped)  # a capture like any other
            with zipfile.ZipFile(zipped) as archive:
                assert "published" in json.loads(archive.read("manifest.json"))
            started = runner.invoke(main, ["sim", "start", "--from-capture", str(zipped),
                                           "--abi", "x86_64", "--json"])
            assert started.exit_code == 0, started.output
            serials[bundle] = json.loads(started.stdout)[0]["serial"]
        phones = {b: get_device(s) for b, s in serials.items()}
        # the vendors' layouts, live: sensor names, HAL lines and One UI's lines kept
        samsung = phones["samsung-aidl"]
        thermal = samsung.shell("dumpsys thermalservice").stdout
        assert "ThermalHAL AIDL 1  connected: yes" in thermal and "mName=SUBBAT" in thermal
        found = parse_thermalservice(thermal)
        assert found is not None and {t.name for t in found.temperatures} >= {"AP", "BAT", "SKIN"}
        battery_layout = _text("samsung-aidl", "battery")
        live = samsung.shell("dumpsys battery").stdout
        assert live.count("\n") == battery_layout.count("\n")
        assert parse_battery(live) is not None
        gpumem = phones["gpumem-only"].shell("dumpsys gpu --gpumem").stdout
        assert gpumem == _text("gpumem-only", "gpu.gpumem")
        results = tmp_path / "results"
        execute(REPO / "matrices" / "smoke.yaml", list(phones.values()),
                RunOptions(results=results, builds=host_build.path.parent))
    finally:
        runner.invoke(main, ["sim", "stop", "--all"])
    trials = store.read_table(results, "trials")
    per_phone = trials.groupby("device_model", observed=True)["outcome"]
    assert per_phone.size().to_dict() == {m: 16 for m in per_phone.size().index}
    assert len(per_phone.size()) == len(BUNDLES)
    assert (trials["outcome"] == "ok").all(), trials[["device_model", "outcome", "error"]]
