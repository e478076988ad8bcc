"""Wire framing, path mapping, the thermal model and the phone's text formats (no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.virtual import formats, thermal, wire
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
