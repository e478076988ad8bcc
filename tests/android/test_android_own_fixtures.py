"""Parsers over fixtures we composed from the format rules (tests/data/android), and garbage."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.android import (
    cpu_mitigation_active,
    hottest_temperature,
    normalise_zone_temp,
    parse_battery,
    parse_cpuinfo,
    parse_getprop,
    parse_head_dump,
    parse_lmkd_kill,
    parse_lmkd_kills,
    parse_meminfo,
    parse_meminfo_summary,
    parse_proc_meminfo,
    parse_proc_status,
    parse_smaps_rollup,
    parse_thermalservice,
    parse_zone_listing,
    read_cpu_topology,
    read_thermal_zones,
)

Read = Callable[[str], str]


def test_meminfo_before_android_11_has_no_rss_and_plain_swap(own_sample: Read) -> None:
    info = parse_meminfo(own_sample("meminfo_native_pre_android11_swap_column.txt"))
    assert info is not None
    assert (info.pid, info.name, info.pss_kb, info.rss_kb) == (4321, "llama-bench", 4719904, None)
    assert (info.swap_pss_kb, info.swap_is_pss) == (1032, False)
    assert (info.private_dirty_kb, info.private_clean_kb, info.java_heap_kb) == (813772, 3904440, 0)


def test_meminfo_reads_only_the_first_of_two_blocks(own_sample: Read) -> None:
    info = parse_meminfo(own_sample("meminfo_native_android13_two_blocks.txt"))
    assert info is not None
    assert (info.pid, info.pss_kb, info.rss_kb, info.swap_pss_kb, info.swap_is_pss) == (
        777, 509100, 510204, 2048, True)
    assert info.native_heap_kb == 499000


def test_meminfo_title_swap_vs_swappss_decides_swap_kind() -> None:
    table = "\n".join([
        "** MEMINFO in pid 5 [x] **",
        "                   Pss  Private  Private  {swap}      Rss",
        "                 Total    Dirty    Clean    Dirty    Total",
        "                ------   ------   ------   ------   ------",
        "        TOTAL      100       90        5        7      150",
    ])
    pss = parse_meminfo(table.format(swap="SwapPss"))
    plain = parse_meminfo(table.format(swap="   Swap"))
    assert pss is not None and plain is not None
    assert (pss.swap_pss_kb, pss.swap_is_pss, pss.rss_kb) == (7, True, 150)
    assert (plain.swap_pss_kb, plain.swap_is_pss) == (7, False)


@pytest.mark.parametrize("name", ["meminfo_not_found.txt", "meminfo_dump_timeout.txt"])
def test_meminfo_without_a_process_is_none(own_sample: Read, name: str) -> None:
    assert parse_meminfo(own_sample(name)) is None
    assert parse_meminfo_summary(own_sample(name)) is None


def test_meminfo_summary_with_negative_lost_ram(own_sample: Read) -> None:
    summary = parse_meminfo_summary(own_sample("meminfo_system_negative_lost_ram.txt"))
    assert summary is not None
    assert (summary.total_ram_kb, summary.free_ram_kb, summary.used_ram_kb,
            summary.lost_ram_kb) == (11623144, 612004, 11240000, -228860)
    assert summary.ram_status == "critical"
    assert (summary.zram_physical_kb, summary.swap_used_kb, summary.swap_total_kb) == (
        1000000, 3000000, 6291452)
    assert [(p.name, p.pid, p.pss_kb) for p in summary.processes] == [
        ("llama-bench", 4321, 1234567), ("system", 1500, 98765)]


def test_thermalservice_hal_not_ready_gives_status_but_no_temperatures(own_sample: Read) -> None:
    service = parse_thermalservice(own_sample("thermalservice_hal_not_ready.txt"))
    assert service is not None
    assert (service.status, service.hal_ready, service.temperatures) == (3, False, ())
    assert service.status_name == "SEVERE"


def test_thermalservice_sentinels_bcl_and_nan_are_not_hottest(own_sample: Read) -> None:
    service = parse_thermalservice(own_sample("thermalservice_sentinels_and_status4.txt"))
    assert service is not None
    assert service.status == 4 and service.hal_connection == "ThermalHAL AIDL 2  connected: yes"
    assert len(service.temperatures) == 8
    assert [t.value for t in service.temperatures if t.name == "skin"] == [None]  # NaN
    top = hottest_temperature(service.temperatures)
    assert top is not None and (top.name, top.value, top.status) == ("big core cluster", 47.25, 4)
    assert cpu_mitigation_active(service)
    assert [(c.name, c.value) for c in service.cooling_devices] == [
        ("thermal-cpufreq-0", 0), ("thermal-cpufreq-7", 3)]


def test_battery_updates_stopped_cold_and_on_ac(own_sample: Read) -> None:
    battery = parse_battery(own_sample("battery_updates_stopped_cold.txt"))
    assert battery is not None
    assert (battery.level, battery.temperature_c, battery.status, battery.plugged) == (
        100, -1.5, 5, "ac")
    assert battery.updates_stopped and battery.status_name == "full" and battery.health == 3


def test_battery_all_unplugged_reads_none() -> None:
    text = "Current Battery Service state:\n  AC powered: false\n  USB powered: false\n  level: 5\n"
    battery = parse_battery(text)
    assert battery is not None and battery.plugged == "none" and battery.level == 5


def test_lmkd_android11_without_swap_and_other_variants(own_sample: Read) -> None:
    kills = parse_lmkd_kills(own_sample("lmkd_android11_and_variants.txt"))
    assert [(k.process, k.pid, k.oom_score_adj, k.rss_kb, k.swap_kb) for k in kills] == [
        ("com.example.a", 2345, 906, 45678, None),
        ("com.example.b", 2346, 0, 1000, None),
        ("llama-bench", 2347, -1000, 3000000, 12),
        ("a' 'quoted' name", 9, 1000, 1, 3),
    ]
    assert kills[0].reason is None
    assert kills[1].reason == "device is low on swap (1024kB < 2048kB) and thrashing (120%)"
    assert kills[2].reason is None and kills[3].anon_rss_kb == 2
    assert kills[3].reason == "device is stuck in direct reclaim (5000ms > 2000ms)"


def test_proc_status_and_old_kernel_rollup(own_sample: Read) -> None:
    status = parse_proc_status(own_sample("proc_status_llama_bench.txt"))
    assert status is not None
    assert (status.name, status.pid, status.vm_rss_kb, status.vm_hwm_kb, status.vm_swap_kb,
            status.threads) == ("llama-bench", 4321, 4100000, 4200000, 0, 9)
    rollup = parse_smaps_rollup(own_sample("smaps_rollup_kernel419_no_pss_anon.txt"))
    assert rollup is not None
    assert (rollup.pss_kb, rollup.rss_kb, rollup.swap_pss_kb, rollup.swap_kb) == (
        4099000, 4100000, 32, 64)
    assert (rollup.pss_anon_kb, rollup.pss_file_kb, rollup.pss_shmem_kb) == (None, None, None)


def test_topology_prefers_cpu_capacity(own_sample: Read) -> None:
    topology = read_cpu_topology(parse_head_dump(own_sample("sysfs_cpu_head_1_3_4_capacity.txt")))
    assert topology.clusters == ((7,), (4, 5, 6), (0, 1, 2, 3))
    assert topology.layout == "1+3+4" and topology.little_cpus == (0, 1, 2, 3)
    assert [c.cpu for c in topology.cpus if c.capped] == [7]
    assert topology.cpus[5].scaling_max_khz is None and not topology.cpus[5].capped


def test_thermal_zones_mixed_units_and_unreadable(own_sample: Read) -> None:
    zones = parse_zone_listing(own_sample("thermal_zone_listing_mixed_units.txt"))
    assert zones["thermal_zone3"] == ("battery", None)
    read = read_thermal_zones(zones)
    assert [(z.zone, z.type, z.celsius) for z in read] == [
        ("thermal_zone0", "cpu-0-0-usr", 41.0),
        ("thermal_zone1", "xo_therm", 33.0),
        ("thermal_zone2", "tsens_tz_sensor3", 45.2),
        ("thermal_zone6", "camera-therm", None),
        ("thermal_zone10", "cpu-1-0-usr", 55.5),
        ("thermal_zone11", "gpuss-0", 49.8),
    ]


@pytest.mark.parametrize(("raw", "celsius"), [
    (45000, 45.0), (452, 45.2), (45, 45.0), (-5000, -5.0), (-40000, None), (-274000, None),
    (999999, None),
])
def test_zone_unit_normalisation(raw: int, celsius: float | None) -> None:
    assert normalise_zone_temp(raw) == celsius


GARBAGE = ["", "\n\n", "garbage ] [ :: \x00 {}", "** MEMINFO in pid x [y] **",
           "Temperature{mValue=", "==> <==", "[a]: [b", "TOTAL PSS: abc", "processor\t: x"]


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_never_raises(text: str) -> None:
    assert parse_meminfo(text) is None
    assert parse_meminfo_summary(text) is None
    assert parse_thermalservice(text) is None
    assert parse_battery(text) is None
    assert parse_lmkd_kill(text) is None
    assert parse_smaps_rollup(text) is None
    assert parse_proc_status(text) is None
    assert parse_proc_meminfo(text) is None
    assert parse_getprop(text) == {}
    assert parse_cpuinfo(text).cores == ()
    assert read_cpu_topology(parse_head_dump(text)).cpus == ()
    assert read_thermal_zones(parse_zone_listing(text)) == ()
