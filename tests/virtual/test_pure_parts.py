"""Wire framing, path mapping, the thermal model and the phone's text formats (no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.profiles import parse_profile
from harness.virtual import formats, logstore, thermal, wire
from harness.virtual.config import AndroidRules, BackgroundApp
from harness.virtual.procs import parse_stat
from harness.virtual.sandbox import Sandbox, rewrite_paths


def test_messages_round_trip_and_bad_magic_is_refused() -> None:
    raw = wire.encode(wire.Message(wire.A_WRTE, 1, 2, b"abc"), checksum=True)
    assert wire.decode_header(raw[:24]) == (wire.A_WRTE, 1, 2, 3)
    assert raw[24:] == b"abc" and int.from_bytes(raw[16:20], "little") == sum(b"abc")
    broken = raw[:20] + b"\0\0\0\0"
    with pytest.raises(wire.WireError):
        wire.decode_header(broken)
    oversized = wire.encode(wire.Message(wire.A_WRTE, 1, 2, b"x" * 10))[:24]
    with pytest.raises(wire.WireError):
        wire.decode_header(oversized, max_payload=4)


def test_banner_names_the_product_and_strips_separators() -> None:
    text = wire.banner({"ro.product.name": "a;b", "ro.product.model": "M=1",
                        "ro.product.device": "d"}).decode()
    assert text == ("device::ro.product.name=a_b;ro.product.model=M_1;ro.product.device=d;"
                    "features=shell_v2,cmd,stat_v2,ls_v2,fixed_push_mkdir")


def test_shell_packets_split_across_writes() -> None:
    buffer = bytearray(wire.shell_packet(wire.SHELL_STDIN, b"hello") + b"\x04\x00")
    assert wire.split_shell_packets(buffer) == [(wire.SHELL_STDIN, b"hello")]
    buffer += b"\x00\x00\x00"
    assert wire.split_shell_packets(buffer) == [(wire.SHELL_CLOSE_STDIN, b"")]
    assert buffer == bytearray()


def test_exit_status_maps_signals_to_128_plus() -> None:
    assert wire.exit_status(3) == 3
    assert wire.exit_status(-9) == 137
    assert wire.exit_status(-11) == 139


def test_service_strings_are_parsed() -> None:
    assert wire.parse_shell_service("shell,v2,raw:ls -l") == ("shell", {"v2", "raw"}, "ls -l")
    assert wire.parse_shell_service("exec:cat x") == ("exec", set(), "cat x")
    assert wire.parse_shell_service("sync:") is None


def test_device_paths_map_into_the_sandbox_and_never_escape(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    assert box.host_path("/data/local/tmp/x") == tmp_path / "root/data/local/tmp/x"
    assert box.host_path("/storage/emulated/0/a") == tmp_path / "root/sdcard/a"
    assert box.host_path("/proc/123/status") == Path("/proc/123/status")
    assert box.host_path("/proc/meminfo") == tmp_path / "root/proc/meminfo"
    assert box.host_path("/../../etc/passwd") == tmp_path / "root/etc/passwd"
    assert box.host_path("/data/../../../etc") == tmp_path / "root/etc"


def test_commands_have_device_prefixes_rewritten_only_at_path_starts(tmp_path: Path) -> None:
    root = tmp_path / "root"
    command = ("cd /data/local/tmp && LD_LIBRARY_PATH=/data/local/tmp/lib ./x "
               "-m '/sdcard/m.gguf' > /data/out; cat /proc/meminfo /proc/1/status ./data/y")
    rewritten = rewrite_paths(command, root)
    assert rewritten == (
        f"cd {root}/data/local/tmp && LD_LIBRARY_PATH={root}/data/local/tmp/lib ./x "
        f"-m '{root}/sdcard/m.gguf' > {root}/data/out; cat {root}/proc/meminfo /proc/1/status "
        "./data/y"
    )
    assert rewrite_paths("/database /datax", root) == "/database /datax"
    assert rewrite_paths(rewritten, root) == rewritten  # idempotent


def test_cpu_work_heats_the_phone_and_idling_cools_it() -> None:
    params = thermal.ThermalParams(ambient_c=25.0, tau_s=40.0, heat_c_per_core_s=0.5)
    state = thermal.ThermalState(die_c=25.0)
    for _ in range(240):  # 60 s at two busy cores
        state = thermal.step(state, params, cpu_seconds=0.5, dt=0.25)
    hot = state.die_c
    assert hot > 50.0 and state.status(params) >= 2
    for _ in range(1200):  # 5 min idle
        state = thermal.step(state, params, cpu_seconds=0.0, dt=0.25)
    assert state.die_c < 26.0 < hot and state.status(params) == 0


def test_forced_status_wins_and_throttles_frequency() -> None:
    params = thermal.ThermalParams()
    state = thermal.ThermalState(die_c=params.ambient_c, forced_status=4)
    assert state.status(params) == 4
    assert thermal.duty(4) > thermal.duty(2) > thermal.duty(1) == 0.0
    assert thermal.capped_khz(2_400_000, 500_000, 4) < 2_400_000
    assert thermal.capped_khz(2_400_000, 500_000, 0) == 2_400_000
    assert thermal.ThermalParams.from_profile({"ambient_c": 30}).ambient_c == 30.0


def test_process_meminfo_has_rss_column_and_summary_on_sdk_30_plus() -> None:
    rollup = {"Rss": 5000, "Pss": 4000, "Anonymous": 3000, "Pss_Anon": 3000, "Pss_File": 1000,
              "Private_Dirty": 3000, "Private_Clean": 200, "SwapPss": 0}
    text = formats.meminfo_process(42, "llama-bench", rollup, {"VmStk": 100}, 34, 1000)
    assert "** MEMINFO in pid 42 [llama-bench] **" in text
    header = next(x for x in text.splitlines() if "Pss  Private" in x)
    assert header.split() == ["Pss", "Private", "Private", "SwapPss", "Rss", "Heap", "Heap", "Heap"]
    total = next(x for x in text.splitlines() if x.strip().startswith("TOTAL "))
    assert total.split()[1:6] == ["4000", "3000", "200", "0", "5000"]
    assert "TOTAL PSS:     4000            TOTAL RSS:     5000" in text
    old = formats.meminfo_process(42, "x", rollup, {}, 29, 1000)
    assert "TOTAL RSS" not in old and "TOTAL:     4000" in old


def test_lmkd_line_follows_android_12_format() -> None:
    line = formats.lmkd_kill_line(31, "python3", 99, 204800, 0, "min watermark is breached")
    assert line == ("Kill 'python3' (99), uid 2000, oom_score_adj 0 to free 204800kB rss, "
                    "0kB swap; reason: min watermark is breached")


def test_proc_stat_parsing_survives_odd_names() -> None:
    fields = "S 1 7 7 0 -1 4194560 100 0 0 0 30 12 0 0 20 0 1 0 500 1000000 256"
    stat = parse_stat(7, f"7 (a) b (c)) {fields} 0 0")
    assert stat is not None and stat.comm == "a) b (c)"
    assert stat.session == 7 and stat.cpu_ticks == 42 and stat.rss_kb == 256 * 4


BASE_PROFILE = {
    "name": "p", "props": {k: "1" for k in (
        "ro.product.model", "ro.product.manufacturer", "ro.product.name", "ro.product.device",
        "ro.soc.model", "ro.board.platform", "ro.build.version.release", "ro.build.version.sdk",
        "ro.product.cpu.abi")},
    "ram_mb": 4096, "available_mb": 2048, "storage_free_mb": 1024,
    "clusters": [{"name": "little", "cores": 4, "max_khz": 1800000, "capacity": 500},
                 {"name": "big", "cores": 4, "max_khz": 2400000, "capacity": 1024}],
}


@pytest.mark.parametrize(("android", "words"), [
    ({"oom_victim": "init"}, "x.yaml: android.oom_victim must be one of engine, system_server"),
    ({"smaps_rollup": "no"}, "x.yaml: android.smaps_rollup must be true or false"),
    ({"colour": 1}, "x.yaml: android: unknown key 'colour'"),
    ({"unreadable": ["sys/x"]}, "x.yaml: android.unreadable must be a list of absolute"),
    ({"offline_cpus": [8]}, "x.yaml: android.offline_cpus must list cpu numbers 0..7"),
    ({"offline_cpus": list(range(8))}, "must leave at least one cpu online"),
    ({"thermal_hal": 2.0}, "x.yaml: android.thermal_hal must be one of 2.0, 1.0, not_ready"),
    ({"logcat_ring_lines": 0}, "x.yaml: android.logcat_ring_lines must be at least 1"),
    ({"affinity": "strict"}, "x.yaml: android.affinity must be one of honoured, ignored"),
    ({"power": {"charging": "solar"}}, "x.yaml: android.power.charging must be one of none"),
    ({"power": {"doze": "DEEP"}}, "x.yaml: android.power.doze must be one of ACTIVE"),
    ({"power": {"wifi": True}}, "x.yaml: android.power: unknown key 'wifi'"),
    ({"background_apps": [{"name": "a", "rss_mb": "big", "adj": 900}]},
     "x.yaml: android.background_apps[0]: key 'rss_mb' must be int"),
    ({"background_apps": [{"name": "a b", "rss_mb": 1, "adj": 900}]},
     "android.background_apps[0].name must be a package name"),
    ({"background_apps": [{"name": "a", "rss_mb": 1}]},
     "x.yaml: android.background_apps[0]: missing key 'adj'"),
    ([], "x.yaml: android must be a mapping of keys"),
])
def test_profile_android_keys_are_validated_naming_file_and_key(android: object,
                                                                 words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_profile({**BASE_PROFILE, "android": android}, "x.yaml")
    assert words in str(caught.value)


def test_profile_android_keys_parse_and_default_to_a_stock_phone() -> None:
    stock = parse_profile(BASE_PROFILE, "x.yaml").android
    assert stock == AndroidRules()
    rules = parse_profile({**BASE_PROFILE, "android": {
        "background_apps": [{"name": "com.a", "rss_mb": 50, "adj": 905}],
        "oom_victim": "system_server", "smaps_rollup": False, "offline_cpus": [7, 6],
        "unreadable": ["/sys/class/thermal/thermal_zone1/temp"], "thermal_hal": "1.0",
        "power": {"charging": "ac", "doze": "IDLE"}}}, "x.yaml").android
    assert rules.background_apps == (BackgroundApp("com.a", 50, 905),)
    assert rules.offline_cpus == (6, 7) and rules.power.charging == "ac"
    assert rules.power.screen_on and rules.logcat_ring_lines == 4000
    # the stock apps shrink to a fifth of a small phone's limit; explicit apps are as given
    assert [a.rss_mb for a in stock.apps(8192)] == [180, 150, 120]
    assert sum(a.rss_mb for a in stock.apps(300)) <= 60
    assert rules.apps(300) == rules.background_apps


def test_new_device_paths_map_into_the_sandbox(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    for path in ("/proc/uptime", "/proc/pressure/memory", "/proc/sys/kernel/random/boot_id"):
        assert box.host_path(path) == tmp_path / "root" / path.lstrip("/")
        assert rewrite_paths(f"cat {path}", tmp_path / "root") == f"cat {tmp_path}/root{path}"


def test_logcat_ring_keeps_the_newest_lines_of_each_buffer(tmp_path: Path) -> None:
    for i in range(10):
        logstore.append(tmp_path, "main", "I", "t", 1, f"main{i}", epoch=1000.0 + i)
        logstore.append(tmp_path, "system", "I", "t", 1, f"system{i}", epoch=1000.5 + i)
    kept = [e.message for e in logstore.read(tmp_path, ring=3)]
    assert kept == ["main7", "system7", "main8", "system8", "main9", "system9"]
    logstore.trim(tmp_path, 3)
    assert [e.message for e in logstore.read(tmp_path)] == kept


def test_power_battery_and_thermal_texts() -> None:
    assert formats.cpu_list([0, 1, 2, 3, 6]) == "0-3,6" and formats.cpu_list([5]) == "5"
    assert formats.battery_status("none", 50) == 3 and formats.battery_status("usb", 100) == 5
    assert formats.battery_status("ac", 50, overheat=True) == 4  # plugged in, too hot to charge
    unplugged = formats.battery(50, 30.0, False, "none")
    assert "  USB powered: false\n" in unplugged and "  status: 3\n" in unplugged
    power = formats.Power(screen_on=True, plug_type=1, level=50, stay_on_setting=2,
                          battery_saver=False, deep="ACTIVE", light="ACTIVE")
    assert not power.stay_on  # set for USB only, plugged into AC
    assert "  mStayOn=false\n  mProximityPositive" in formats.dumpsys_power(power, 1000)
    assert formats.light_idle_state("IDLE") == "OVERRIDE"
    temps = [formats.Temperature("skin", 3, 40.0, 0)]
    not_ready = formats.thermalservice(0, [], [], False, [38.0], hal="not_ready")
    assert not_ready.endswith("HAL Ready: false\n") and "Temperature{" not in not_ready
    old = formats.thermalservice(0, temps, [], False, [38.0], hal="1.0")
    assert "\tThermalHAL 1.0 connected: yes\n" in old and "TemperatureThreshold" not in old
    assert formats.pressure([1.5, 0.25, 0.0], 1200, [0.0, 0.0, 0.0], 0) == (
        "some avg10=1.50 avg60=0.25 avg300=0.00 total=1200\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    app = formats.lmkd_kill_line(34, "com.a", 7, 100, 0, "min watermark is breached",
                                 uid=10123, adj=905)
    assert app.startswith("Kill 'com.a' (7), uid 10123, oom_score_adj 905 to free 100kB rss")


def test_tool_shims_replace_applet_links_without_writing_through_them(tmp_path: Path) -> None:
    """An older phone linked /system/bin/dmesg to toybox; the dmesg tool must not overwrite
    toybox through that link."""
    box = Sandbox(tmp_path / "phone")
    box.bin.mkdir(parents=True)
    applet = tmp_path / "toybox"
    applet.write_text("the real applet")
    (box.bin / "dmesg").symlink_to(applet)
    box.create()
    assert applet.read_text() == "the real applet"
    shim = box.bin / "dmesg"
    assert not shim.is_symlink() and "phonecall harness-phone-" in shim.read_text()
    assert shim.read_text().rstrip().endswith(' dmesg "$@"')
