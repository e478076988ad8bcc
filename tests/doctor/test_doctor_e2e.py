"""`harness doctor` on five kinds of virtual phone: their capability tables differ as the phones
do, the JSON meets its schema, and bad input is one line with exit code 2."""

from __future__ import annotations

import json
import shlex
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from harness.artifacts.builds import Build
from harness.cli import main
from harness.device import get_device
from harness.profiles import load_profile_file

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs/schemas/doctor.schema.json").read_text())
VIRTUAL = REPO / "devices" / "virtual"
PROFILES = (str(VIRTUAL / "stock.yaml"), str(VIRTUAL / "permissive.yaml"),
            str(VIRTUAL / "gpu-phone.yaml"),
            str(VIRTUAL / "gpu-phone-mali.yaml"), str(VIRTUAL / "small-ram.yaml"))


def _rows(diagnosis: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["measurement"]: row for row in diagnosis["capabilities"]}


def _probes(diagnosis: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {probe["id"]: probe for probe in diagnosis["probes"]}


def _refused(row: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["source"], r["error"]) for r in row["refused"]]


def test_doctor_tables_differ_as_the_phones_do(virtual_phones: Any) -> None:
    serials = {profile: virtual_phones(1, profile=profile)[0].serial for profile in PROFILES}
    result = CliRunner().invoke(main, ["doctor", "--devices", "all", "--json"])
    assert result.exit_code in (0, 1), result.output
    assert isinstance(result.exception, SystemExit | None), result.exception
    found = json.loads(result.stdout)
    jsonschema.validate(found, SCHEMA)
    by = {d["serial"]: d for d in found}
    assert set(by) == set(serials.values())
    assert result.exit_code == max(d["exit"] for d in found)
    stock, permissive, adreno, mali, small = (by[serials[p]] for p in PROFILES)

    # every phone answers as the shell user of a user build
    for diagnosis in found:
        probes = _probes(diagnosis)
        assert "uid=2000(shell)" in probes["id"]["stdout"]
        assert "context=u:r:shell:s0" in probes["id"]["stdout"]
        assert probes["selinux"]["stdout"].strip() == "Enforcing"
        assert probes["workdir"]["error"] == "ok"

    # the stock phone refuses what SELinux refuses the shell; the permissive one does not
    strict, loose = _probes(stock), _probes(permissive)
    for sid, path in (("pressure", "/proc/pressure/memory"),
                      ("thermal.zones", "/sys/class/thermal/thermal_zone")):
        assert strict[sid]["error"] == "EACCES", strict[sid]
        assert path in strict[sid]["detail"] and "Permission denied" in strict[sid]["detail"]
        assert loose[sid]["error"] == "ok", loose[sid]
    assert _rows(stock)["memory pressure"]["source"] is None
    assert _refused(_rows(stock)["memory pressure"]) == [("pressure", "EACCES")]
    assert _rows(permissive)["memory pressure"]["source"] == "pressure"
    heat_strict, heat_loose = (_rows(d)["thermal status and temperatures"]
                               for d in (stock, permissive))
    assert (heat_strict["source"], heat_strict["fallback"]) == ("thermal.hal", None)
    assert (heat_loose["source"], heat_loose["fallback"]) == ("thermal.hal", "thermal.zones")
    # what both still serve the same way
    for diagnosis in (stock, permissive):
        rows = _rows(diagnosis)
        assert rows["engine memory"]["source"] == "proc.rollup"
        assert rows["OOM kills"]["source"] == "lmkd"
        assert rows["CPU clock"]["source"] == "cpu.clock"

    # GPU memory: kgsl on the Adreno-class phone, GpuService on the Mali-class one, none without
    gpu = {name: _rows(d)["GPU memory"] for name, d in
           (("adreno", adreno), ("mali", mali), ("none", permissive))}
    assert gpu["adreno"]["source"] == "gpu.kgsl" and gpu["adreno"]["refused"] == []
    assert gpu["mali"]["source"] == "gpu.gpumem"
    assert _refused(gpu["mali"]) == [("gpu.kgsl", "ENOENT")]
    assert gpu["none"]["source"] is None
    assert ("gpu.kgsl", "ENOENT") in _refused(gpu["none"])
    assert _rows(adreno)["GPU clock"]["source"] == "gpu.clock"
    assert _rows(mali)["GPU clock"]["source"] is None

    # the small phone's free storage is below what a model and a build need
    assert any(w.startswith("low storage") for w in small["warnings"]), small["warnings"]
    assert small["exit"] == 1
    assert not any(w.startswith("low storage") for w in permissive["warnings"])


def test_the_table_names_each_measurement_its_source_and_what_is_lost(
        virtual_phones: Any) -> None:
    (phone,) = virtual_phones(1, profile=PROFILES[0])
    result = CliRunner().invoke(main, ["doctor", "--serial", phone.serial])
    assert result.exit_code == 0, result.output
    assert "memory pressure" in result.output
    assert "no PSI: OOM evidence from lmkd's lines" in result.output
    assert "pressure EACCES" in result.output
    assert "thermal.hal: thermal status and the HAL's sensors" in result.output
    assert "all usable" in result.output


def test_a_phone_that_breaks_a_matrix_requirement_is_warned_about(
        virtual_phones: Any, tmp_path: Path) -> None:
    (phone,) = virtual_phones(1, profile="midrange-8gb")
    matrix = tmp_path / "m.yaml"
    data = yaml.safe_load((REPO / "matrices/smoke.yaml").read_text())
    matrix.write_text(yaml.safe_dump({**data, "require": {"screen_on": False}}))
    result = CliRunner().invoke(main, ["doctor", "--serial", phone.serial, "--matrix",
                                       str(matrix), "--json"])
    assert result.exit_code == 1, result.output
    (diagnosis,) = json.loads(result.stdout)
    assert any("the screen is on; the matrix requires screen_on: false" in w
               for w in diagnosis["warnings"]), diagnosis["warnings"]


def test_bad_input_is_one_line_and_exit_2(adb_server: Any, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["doctor", "--serial", "no-such-phone"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "no online device with serial 'no-such-phone'" in result.output
    result = CliRunner().invoke(main, ["doctor", "--devices", "all"])
    assert result.exit_code == 2
    assert "no devices attached" in result.output
    result = CliRunner().invoke(main, ["doctor", "--matrix", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2
    assert "none.yaml" in result.output


@pytest.mark.slow
def test_with_a_build_the_doctor_lists_the_backends_it_can_run_on_each_phone(
        virtual_phones: Any, vulkan_build: Build) -> None:
    (gpu,) = virtual_phones(1, profile=PROFILES[2])
    (plain,) = virtual_phones(1, profile="midrange-8gb")
    found = {}
    for phone in (gpu, plain):
        result = CliRunner().invoke(main, [
            "doctor", "--serial", phone.serial, "--build", vulkan_build.name,
            "--builds", str(vulkan_build.path.parent), "--json"])
        assert isinstance(result.exception, SystemExit | None), result.exception
        (diagnosis,) = json.loads(result.stdout)
        jsonschema.validate([diagnosis], SCHEMA)
        found[phone] = diagnosis["backends"]
    assert found[gpu]["unknown"] is None
    assert [d["name"] for d in found[gpu]["devices"]] == ["Vulkan0"]
    assert "llvmpipe" in found[gpu]["devices"][0]["description"]
    assert "Vulkan0" not in [d["name"] for d in found[plain]["devices"]]
    text = CliRunner().invoke(main, ["doctor", "--serial", gpu.serial, "--build",
                                     vulkan_build.name, "--builds",
                                     str(vulkan_build.path.parent)])
    assert f"backends of build {vulkan_build.name} on this phone: CPU, Vulkan0 (llvmpipe" \
        in text.output


def test_an_unknown_build_is_one_line_and_exit_2(virtual_phones: Any, tmp_path: Path) -> None:
    (phone,) = virtual_phones(1)
    result = CliRunner().invoke(main, ["doctor", "--serial", phone.serial, "--build", "nope",
                                       "--builds", str(tmp_path)])
    assert result.exit_code == 2
    assert "no such build" in result.output and result.output.strip().count("\n") == 0


def test_capture_of_a_phone_with_planted_canaries_has_none_of_them(
        virtual_phones: Any, tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "devices/midrange-8gb.yaml").read_text())
    data["props"]["ro.serialno"] = "R5CANARY042"
    data["android"] = {"background_apps": [
        {"name": "com.canary.banking", "rss_mb": 50, "adj": 900}]}
    profile = tmp_path / "canary.yaml"
    profile.write_text(yaml.safe_dump({**data, "name": "canary"}))
    (phone,) = virtual_phones(1, profile=str(profile))
    planted = ("R5CANARY042", "jane.doe@example.org", "490154203237518", "3c:5a:b4:01:02:03",
               "com.canary.banking")
    device = get_device(phone.serial)
    device.shell("log -t canary " + shlex.quote(
        "owner jane.doe@example.org imei 490154203237518 wifi 3c:5a:b4:01:02:03 "
        "serial R5CANARY042 app com.canary.banking"))
    before = device.shell("logcat -d -s canary").stdout
    assert all(c in before for c in planted)  # they are on the phone
    out = tmp_path / "phone.zip"
    result = CliRunner().invoke(main, ["capture", "--serial", phone.serial, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "scrubbed: getprop:" in result.output and "scrubbed: app:" in result.output
    raw = out.read_bytes()
    with zipfile.ZipFile(out) as archive:
        blobs = [raw, *(archive.read(n) for n in archive.namelist())]
        profile_text = archive.read("profile.yaml")
    for canary in (*planted, phone.serial):
        assert not any(canary.lower().encode() in blob.lower() for blob in blobs), canary
    derived = tmp_path / "derived.yaml"
    derived.write_bytes(profile_text)
    loaded = load_profile_file(derived)
    assert loaded.props["ro.product.model"] == "SM-A546B"
    assert [c.cores for c in loaded.clusters] == [4, 4]


def test_capture_bad_input_is_one_line_exit_2_and_writes_nothing(
        adb_server: Any, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    for args, said in ((["--serial", "nope", "-o", str(folder / "phone.zip")],
                        "no online device"),
                       (["--serial", "nope", "-o", str(folder / "phone.tar")], ".zip"),
                       (["--serial", "nope", "-o", str(folder / "no/such/p.zip")],
                        "no such folder")):
        result = CliRunner().invoke(main, ["capture", *args])
        assert result.exit_code == 2, result.output
        assert said in result.output
    assert list(folder.iterdir()) == []
