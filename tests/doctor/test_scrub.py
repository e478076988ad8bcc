"""The capture's scrubber: golden before/after pairs, and planted canaries absent from every byte
of the bundle; a file that is not a capture is one line."""

from __future__ import annotations

import datetime
import json
import zipfile
from pathlib import Path

import pytest
import yaml

from harness.doctor.capture import CAPTURE_SCHEMA, bundle, read_bundle, write_bundle
from harness.doctor.probe import ProbeRecord
from harness.doctor.report import diagnose
from harness.doctor.scrub import scrub
from harness.errors import ConfigError
from harness.profiles import load_profile_file

SERIAL = "R5CT90ABCDE"
IMEI = "490154203237518"  # Luhn-valid
EMAIL = "jane.doe+phone@example.org"
MAC = "3C:5A:B4:01:02:03"
APP = "com.canary.banking"
HOST = "janes-workstation"
CANARIES = (SERIAL, IMEI, EMAIL, MAC.lower(), MAC, APP, HOST, "192.168.1.23",
            "fe80::1c2a:3bff:fe4d:5e6f", "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f", "SN-BATTERY-0042")

PROPS = f"""[gsm.version.baseband]: [A546BXXS8CXD1]
[persist.sys.timezone]: [Europe/Berlin]
[ro.boot.serialno]: [{SERIAL}]
[ro.build.fingerprint]: [samsung/a54xnsxx/a54x:14/UP1A.231005.007/A546BXXS8CXD1:user/release-keys]
[ro.build.host]: [21DJ4C12]
[ro.build.id]: [UP1A.231005.007]
[ro.build.tags]: [release-keys]
[ro.build.type]: [user]
[ro.build.user]: [dpi]
[ro.build.version.release]: [14]
[ro.build.version.sdk]: [34]
[ro.hardware]: [s5e8835]
[ro.product.cpu.abi]: [arm64-v8a]
[ro.product.model]: [SM-A546B]
[ro.serialno]: [{SERIAL}]
[ro.soc.model]: [s5e8835]
[wifi.interface]: [wlan0]
"""


def rec(sid: str, stdout: str, command: str = "", stderr: str = "") -> ProbeRecord:
    return ProbeRecord(sid, command or sid, 0, stdout, stderr, "ok", "", 5)


def records() -> list[ProbeRecord]:
    return [
        rec("props", PROPS),
        rec("meminfo", "MemTotal:        7864320 kB\nMemAvailable:    4257792 kB\n"),
        rec("storage", "Filesystem 1K-blocks Used Available Use% Mounted on\n"
                       "/dev/block/dm-46 110000000 30000000 80000000 28% /data\n"),
        rec("cpu.topology", "".join(
            f"==> /sys/devices/system/cpu/cpu{c}/cpu_capacity <==\n{cap}\n\n"
            f"==> /sys/devices/system/cpu/cpu{c}/cpufreq/cpuinfo_max_freq <==\n{top}\n\n"
            for c, cap, top in ((0, 470, 2002000), (1, 470, 2002000), (2, 1024, 2400000),
                                (3, 1024, 2400000)))),
        rec("boot_id", "6F1C2D3E-4A5B-4C6D-8E7F-9A0B1C2D3E4F\n"),
        rec("packages", f"package:{APP}\npackage:com.whatsapp\n"),
        rec("lmkd", f"12-07 10:00:00.000   556   556 I lowmemorykiller: Kill '{APP}' (4242), "
                    "uid 10230, oom_score_adj 900 to free 81920kB rss, 0kB swap; reason: low "
                    "watermark is breached\n"),
        rec("power_supply", "POWER_SUPPLY_SERIAL_NUMBER=SN-BATTERY-0042\n"
                            "POWER_SUPPLY_CURRENT_NOW=-320000\n"),
        rec("selinux_denials", f"12-07 10:00:01.000  1000  1000 I wifi: connected {MAC} "
                               "ip 192.168.1.23 fe80::1c2a:3bff:fe4d:5e6f\n"
                               f"12-07 10:00:02.000  1000  1000 I account: {EMAIL} imei {IMEI}\n"),
        rec("id", "uid=2000(shell) gid=2000(shell) context=u:r:shell:s0\n",
            stderr=f"adb -s {SERIAL} shell id\n"),
        rec("uname", f"Linux {HOST} 6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC x86_64 Toybox\n"),
    ]


def test_golden_before_and_after() -> None:
    out, report = scrub(records(), SERIAL)
    by = {r.id: r for r in out}
    assert by["props"].stdout == (
        "[ro.build.fingerprint]: [samsung/a54xnsxx/a54x:14/UP1A.231005.007/A546BXXS8CXD1:user/"
        "release-keys]\n"
        "[ro.build.id]: [UP1A.231005.007]\n[ro.build.tags]: [release-keys]\n"
        "[ro.build.type]: [user]\n[ro.build.version.release]: [14]\n"
        "[ro.build.version.sdk]: [34]\n[ro.hardware]: [s5e8835]\n"
        "[ro.product.cpu.abi]: [arm64-v8a]\n[ro.product.model]: [SM-A546B]\n"
        "[ro.soc.model]: [s5e8835]\n")
    assert by["boot_id"].stdout == "uuid-1\n"
    assert by["packages"].stdout == "package:app-1\npackage:app-2\n"
    assert by["lmkd"].stdout.startswith("12-07 10:00:00.000   556   556 I lowmemorykiller: "
                                        "Kill 'app-1' (4242), uid 10230")
    assert by["power_supply"].stdout == ("POWER_SUPPLY_SERIAL_NUMBER=supply-serial-1\n"
                                         "POWER_SUPPLY_CURRENT_NOW=-320000\n")
    assert by["selinux_denials"].stdout == (
        "12-07 10:00:01.000  1000  1000 I wifi: connected mac-1 ip ip-1 ip-2\n"
        "12-07 10:00:02.000  1000  1000 I account: email-1 imei imei-1\n")
    assert by["id"].stderr == "adb -s serial-1 shell id\n"
    assert by["uname"].stdout == ("Linux host-1 6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC x86_64 "
                                  "Toybox\n")
    # untouched: what is not an identifier
    assert by["meminfo"].stdout == records()[1].stdout
    assert report.props_dropped == 7
    assert report.replaced == {"app": 3, "email": 1, "host": 1, "imei": 1, "ip": 2, "mac": 1,
                               "serial": 1, "supply-serial": 1, "uuid": 1}
    assert "getprop: 7 properties outside the allowlist dropped" in report.lines()


def test_a_non_luhn_fifteen_digit_number_is_not_an_imei() -> None:
    out, _ = scrub([rec("vmstat", "pgpgin 490154203237519\n")], SERIAL)
    assert out[0].stdout == "pgpgin 490154203237519\n"


def test_no_canary_survives_in_any_byte_of_the_bundle(tmp_path: Path) -> None:
    out, report = scrub(records(), SERIAL)
    diagnosis = diagnose("captured", {"model": "SM-A546B"}, out)
    members = bundle(out, diagnosis, report, "sm-a546b", datetime.date(2026, 12, 7))
    path = tmp_path / "phone.zip"
    write_bundle(members, path)
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        contents = [archive.read(name) for name in archive.namelist()]
        assert archive.namelist() == ["manifest.json", "probes.jsonl", "capabilities.md",
                                      "profile.yaml"]
    for canary in CANARIES:
        for blob in (raw, *contents):
            assert canary.encode() not in blob, canary
            assert canary.lower().encode() not in blob.lower(), canary
    manifest, back = read_bundle(path)
    assert back == out
    assert manifest["schema"] == CAPTURE_SCHEMA and manifest["date"] == "2026-12-07"
    assert manifest["probes"] == [r.id for r in out]
    assert manifest["scrub"]["props_dropped"] == 7
    # the derived profile is one the virtual phone can load
    profile_path = tmp_path / "sm-a546b.yaml"
    profile_path.write_bytes(members["profile.yaml"])
    profile = load_profile_file(profile_path)
    assert profile.name == "sm-a546b"
    assert [(c.cores, c.max_khz, c.capacity) for c in profile.clusters] == [
        (2, 2002000, 470), (2, 2400000, 1024)]
    assert yaml.safe_load(members["profile.yaml"])["ram_mb"] == 7680


@pytest.mark.parametrize(("members", "said"), [
    (None, "not a capture (not a zip file"),
    ({"manifest.json": "{}"}, "it has no probes.jsonl"),
    ({"probes.jsonl": ""}, "it has no manifest.json"),
    ({"manifest.json": json.dumps({"schema": CAPTURE_SCHEMA + 1}), "probes.jsonl": ""},
     f"capture schema {CAPTURE_SCHEMA + 1} is newer than this harness reads"),
    ({"manifest.json": json.dumps({"schema": 1}), "probes.jsonl": "{\"id\": 1}\n"},
     "probes.jsonl has a line that is not a probe record"),
])
def test_what_is_not_a_capture_is_refused_in_one_line(tmp_path: Path, members: dict[str, str]
                                                       | None, said: str) -> None:
    path = tmp_path / "x.zip"
    if members is None:
        path.write_text("not a zip")
    else:
        with zipfile.ZipFile(path, "w") as archive:
            for name, text in members.items():
                archive.writestr(name, text)
    with pytest.raises(ConfigError) as caught:
        read_bundle(path)
    assert said in str(caught.value) and "\n" not in str(caught.value)
    assert str(path) in str(caught.value)
