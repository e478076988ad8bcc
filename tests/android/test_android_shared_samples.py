"""Every parser over every relevant reference sample in ../shared/fixtures/android.

Expected values are read off the sample files by hand; the test skips when ../shared is absent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from android_samples import split_parts

from harness.android import (
    cpu_mitigation_active,
    hottest_temperature,
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
    read_cpu_topology,
    read_thermal_zones,
)

Read = Callable[[str], str]


@pytest.mark.parametrize(("name", "expected"), [
    ("meminfo_app_d_flag_recent_android_gracker_memorylab.txt",
     (20602, "com.androidperformance.memorylab", 337790, 421296, 162, True, 80824)),
    ("meminfo_app_full_a_d_android11_gracker_launcher3.txt",
     (21936, "com.android.launcher3", 105529, 187052, 0, False, 24380)),
    ("meminfo_app_oppo_pre_android11_gracker_launcher.txt",
     (10396, "com.oppo.launcher", 148046, None, 0, False, 69928)),
    ("meminfo_app_pixel3_android12_gracker_systemui.txt",
     (2084, "com.android.systemui", 96932, 182691, 0, False, 22136)),
])
def test_meminfo_reads_the_first_process_block(shared_sample: Read, name: str,
                                                expected: tuple[object, ...]) -> None:
    info = parse_meminfo(shared_sample(name))
    assert info is not None
    assert (info.pid, info.name, info.pss_kb, info.rss_kb, info.swap_pss_kb, info.swap_is_pss,
            info.native_heap_kb) == expected


def test_meminfo_private_columns_follow_their_titles_in_the_a_format(shared_sample: Read) -> None:
    info = parse_meminfo(shared_sample("meminfo_app_full_a_d_android11_gracker_launcher3.txt"))
    assert info is not None
    assert (info.private_dirty_kb, info.private_clean_kb) == (95048, 848)


def test_meminfo_summary_only_output_of_native_processes(shared_sample: Read) -> None:
    text = shared_sample(
        "meminfo_native_summary_s_flag_cameraserver_provider_aosp_platform_testing.txt")
    parts = [parse_meminfo(part) for part in split_parts(text)]
    assert [(p.pid, p.name, p.pss_kb, p.rss_kb, p.java_heap_kb) for p in parts if p] == [
        (14612, "android.hardwar", 550123, 584800, 0),
        (23081, "cameraserver", 9630, 24920, 0),
        (20264, "com.google.android.GoogleCamera", 195360, 344008, 7724),
    ]


def test_meminfo_system_summary_from_a_shield(shared_sample: Read) -> None:
    summary = parse_meminfo_summary(
        shared_sample("meminfo_system_summary_nvidia_shield_tv_kotlin_test.txt"))
    assert summary is not None
    assert (summary.total_ram_kb, summary.free_ram_kb, summary.used_ram_kb,
            summary.lost_ram_kb) == (3016708, 1097170, 1769972, 208199)
    assert summary.swap_total_kb == 524284
    assert summary.processes[0].name == "system" and summary.processes[0].pid == 3703
    assert summary.processes[2].pss_kb == 137665


def test_meminfo_system_summary_line_shapes_of_newer_android(shared_sample: Read) -> None:
    text = shared_sample(
        "meminfo_system_summary_tail_dmabuf_gpu_ion_variants_crossbench_PARTLY_EDITED.txt")
    first, second = (parse_meminfo_summary(part) for part in split_parts(text))
    assert first is not None and second is not None
    assert (first.total_ram_kb, first.used_ram_kb, first.lost_ram_kb) == (7698860, 3528301, 362207)
    assert (second.total_ram_kb, second.ram_status, second.swap_used_kb) == (
        3486196, "moderate", 745216)


@pytest.mark.parametrize(("name", "status", "count", "cooling", "hottest"), [
    ("thermalservice_emulator_bort.txt", 0, 1, 1, ("test temperature sensor", 30.8)),
    ("thermalservice_pixel3_sdm845_bort.txt", 0, 13, 5, ("cpu0-silver-usr", 32.300003)),
    ("thermalservice_pixel3a_android10_skia.txt", 0, 13, 4, ("cpu1-silver-usr", 44.1)),
    ("thermalservice_pixel6_tensor_android12_skia.txt", 0, 42, 0, ("LITTLE", 27.000002)),
    ("thermalservice_qualcomm_nsp_thresholds_bort.txt", 0, 14, 12, ("CPU1", 36.2)),
    ("thermalservice_samsung_a52_5g_android12_stackexchange.txt", 0, 9, 0, ("PA", 25.7)),
    ("thermalservice_samsung_aidl_thresholds_bort.txt", 0, 6, 0, ("AP", 34.6)),
    ("thermalservice_samsung_sdhms_android10_skia.txt", 0, 5, 4, ("TYPE_SKIN", 25.3)),
    ("thermalservice_throttling_status2_hidl_thresholds_bort.txt", 2, 11, 9, ("CPU6", 48.2)),
])
def test_thermalservice_uses_only_the_current_hal_section(
    shared_sample: Read, name: str, status: int, count: int, cooling: int,
    hottest: tuple[str, float],
) -> None:
    service = parse_thermalservice(shared_sample(name))
    assert service is not None
    assert (service.status, service.hal_ready) == (status, True)
    assert (len(service.temperatures), len(service.cooling_devices)) == (count, cooling)
    top = hottest_temperature(service.temperatures)
    assert top is not None and (top.name, top.value) == hottest


def test_thermalservice_keeps_names_with_spaces_and_skips_stale_cache(shared_sample: Read) -> None:
    pixel3 = parse_thermalservice(shared_sample("thermalservice_pixel3_sdm845_bort.txt"))
    assert pixel3 is not None
    # The cached section has cpu3-silver-usr at 57.2; the current HAL section says 31.4.
    assert {t.name: t.value for t in pixel3.temperatures}["cpu3-silver-usr"] == 31.400002
    emulator = parse_thermalservice(shared_sample("thermalservice_emulator_bort.txt"))
    assert emulator is not None
    assert emulator.cooling_devices[0].name == "test cooling device"
    assert emulator.cooling_devices[0].value == 100


def test_thermalservice_sees_cpu_mitigation_and_hal_flavours(shared_sample: Read) -> None:
    hot = parse_thermalservice(
        shared_sample("thermalservice_throttling_status2_hidl_thresholds_bort.txt"))
    cool = parse_thermalservice(shared_sample("thermalservice_pixel3_sdm845_bort.txt"))
    aidl = parse_thermalservice(shared_sample("thermalservice_samsung_aidl_thresholds_bort.txt"))
    assert hot is not None and cool is not None and aidl is not None
    assert hot.status_name == "MODERATE"
    assert cpu_mitigation_active(hot) and not cpu_mitigation_active(cool)
    assert aidl.hal_connection == "ThermalHAL AIDL 1  connected: yes"


def test_hottest_skips_bcl_and_ocp_values_on_tensor(shared_sample: Read) -> None:
    service = parse_thermalservice(shared_sample("thermalservice_pixel6_tensor_android12_skia.txt"))
    assert service is not None
    assert max(t.value or 0 for t in service.temperatures) == 11900.0  # ocp_gpu, not a temperature
    top = hottest_temperature(service.temperatures)
    assert top is not None and top.value is not None and top.value < 30


@pytest.mark.parametrize(("name", "expected"), [
    ("dumpsys_battery_pixel8pro_csharp_test.txt", (22, 28.0, 2, "usb", 3764)),
    ("dumpsys_battery_samsung_s24_gekko.txt", (75, 35.7, 2, "usb", 4156)),
    ("dumpsys_battery_xiaomi_miui_python_test.txt", (65, 37.7, 2, "usb", 4077)),
])
def test_battery_reads_the_first_block_only(shared_sample: Read, name: str,
                                            expected: tuple[object, ...]) -> None:
    battery = parse_battery(shared_sample(name))
    assert battery is not None
    assert (battery.level, battery.temperature_c, battery.status, battery.plugged,
            battery.voltage_mv) == expected


@pytest.mark.parametrize(("name", "count", "first"), [
    ("logcat_lmkd_emulator_pixel8_avd_events_maestro.txt", 4,
     ("com.google.android.gms.persistent", 3946, 10144, 100, 266188, 0)),
    ("logcat_lmkd_extended_anon_dmabuf_format_pixeltablet.txt", 1,
     ("com.tcs.vehicleassistant", 17757, 1010174, 0, 4445960, 2413008)),
    ("logcat_lmkd_kills_shell_native_lmkd_unit_test_stress_issue10.txt", 1,
     ("./lmkd_unit_test", 6870, 0, 1000, 2740708, 90208)),
    ("logcat_lmkd_pixel8_android_studio_format_executorch5582.txt", 4,
     ("com.google.android.apps.scone", 15964, 10137, 500, 92212, 33036)),
    ("shell_native_llm_killed_rk3588_rknn_llm249.txt", 4,
     ("com.android.externalstorage", 10280, 10028, 935, 45088, 33516)),
])
def test_lmkd_kill_lines_in_every_prefix_style(shared_sample: Read, name: str, count: int,
                                               first: tuple[object, ...]) -> None:
    kills = parse_lmkd_kills(shared_sample(name))
    assert len(kills) == count
    k = kills[0]
    assert (k.process, k.pid, k.uid, k.oom_score_adj, k.rss_kb, k.swap_kb) == first
    assert k.reason is not None and "watermark" in k.reason


def test_lmkd_extended_format_and_trailing_spaces(shared_sample: Read) -> None:
    text = shared_sample("logcat_lmkd_extended_anon_dmabuf_format_pixeltablet.txt")
    kill = parse_lmkd_kills(text)[0]
    assert kill.anon_rss_kb == 3990164
    unit = shared_sample("logcat_lmkd_kills_shell_native_lmkd_unit_test_stress_issue10.txt")
    assert parse_lmkd_kills(unit)[0].reason == (
        "low watermark is breached and swap is low (144184kB < 267412kB)")
    assert parse_lmkd_kill("Failed to open /proc/16854/oom_score_adj; errno=2") is None


def test_smaps_rollup_with_newer_kernel_fields(shared_sample: Read) -> None:
    rollup = parse_smaps_rollup(
        shared_sample("proc_smaps_rollup_linux_newer_kernel_pss_anon_crosvm_test.txt"))
    assert rollup is not None
    assert (rollup.pss_kb, rollup.rss_kb, rollup.swap_pss_kb, rollup.pss_anon_kb,
            rollup.pss_file_kb, rollup.pss_shmem_kb) == (580, 5940, 0, 367, 213, 0)


def test_proc_status_fragment_and_prefixed_report(shared_sample: Read) -> None:
    doc = parse_proc_status(shared_sample("proc_pid_status_fragment_systemui_perfetto_doc.txt"))
    assert doc is not None
    assert (doc.vm_hwm_kb, doc.vm_rss_kb, doc.vm_swap_kb, doc.rss_anon_kb) == (
        256972, 195272, 43960, 30184)
    xcrash = parse_proc_status(
        shared_sample("proc_pid_status_samsung_a01_android12_xcrash_prefixed.txt"))
    assert xcrash is not None
    assert (xcrash.name, xcrash.vm_rss_kb, xcrash.vm_hwm_kb, xcrash.vm_swap_kb) == (
        "om.app99.driver", 185780, 372852, 145460)
    assert xcrash.rss_anon_kb + xcrash.rss_file_kb + xcrash.rss_shmem_kb == xcrash.vm_rss_kb  # type: ignore[operator]


@pytest.mark.parametrize(("name", "total", "available", "swap_total"), [
    ("proc_meminfo_android6_goadb.txt", 3681628, 2243756, 524284),
    ("proc_meminfo_pixel3_android12_gracker.txt", 3665332, 2208220, 2097148),
])
def test_proc_meminfo(shared_sample: Read, name: str, total: int, available: int,
                      swap_total: int) -> None:
    info = parse_proc_meminfo(shared_sample(name))
    assert info is not None
    assert (info.mem_total_kb, info.mem_available_kb, info.swap_total_kb) == (
        total, available, swap_total)


@pytest.mark.parametrize(("name", "model", "sdk", "platform"), [
    ("getprop_selected_galaxy_s9_exynos9810_android8_pytorch_cpuinfo_mock.txt",
     "SM-G960F", "26", "exynos5"),
    ("getprop_selected_oppo_r9_mt6755_android5_pytorch_cpuinfo_mock.txt", "X9009", "22", "mt6755"),
    ("getprop_selected_pixel8_tensor_g3_android14_pytorch_cpuinfo_mock.txt",
     "Pixel 8", "34", "zuma"),
])
def test_getprop(shared_sample: Read, name: str, model: str, sdk: str, platform: str) -> None:
    props = parse_getprop(shared_sample(name))
    assert props["ro.product.model"] == model
    assert props["ro.build.version.sdk"] == sdk
    assert props["ro.board.platform"] == platform
    assert props["ro.product.cpu.abi"] == "arm64-v8a"


@pytest.mark.parametrize(("name", "names", "hardware"), [
    ("proc_cpuinfo_arm64_kirin970_biglittle_goadb.txt",
     ["Cortex-A53"] * 4 + ["Cortex-A73"] * 4, "Hisilicon Kirin970"),
    ("proc_cpuinfo_arm64_msm8953_goadb.txt", ["Cortex-A53"] * 8,
     "Qualcomm Technologies, Inc MSM8953"),
    ("proc_cpuinfo_galaxy_s9_exynos9810_android8_pytorch_cpuinfo_mock.txt",
     ["Cortex-A55"] * 4 + ["Exynos M3"] * 4, None),
    ("proc_cpuinfo_oppo_r9_mt6755_android5_pytorch_cpuinfo_mock.txt", ["Cortex-A53"], "MT6755"),
    ("proc_cpuinfo_pixel8_tensor_g3_android14_pytorch_cpuinfo_mock.txt",
     ["Cortex-A510"] * 4 + ["Cortex-A715"] * 4 + ["Cortex-X3"], None),
])
def test_cpuinfo_cores(shared_sample: Read, name: str, names: list[str],
                       hardware: str | None) -> None:
    info = parse_cpuinfo(shared_sample(name))
    assert [core.processor for core in info.cores] == list(range(len(names)))
    assert [core.name for core in info.cores] == names
    assert info.hardware == hardware


def test_cpuinfo_keeps_samsung_implementer(shared_sample: Read) -> None:
    info = parse_cpuinfo(
        shared_sample("proc_cpuinfo_galaxy_s9_exynos9810_android8_pytorch_cpuinfo_mock.txt"))
    assert (info.cores[7].implementer, info.cores[7].part) == (0x53, 0x002)


@pytest.mark.parametrize(("name", "layout", "big", "capped"), [
    ("sysfs_cpu_pixel8_tensor_g3_android14_pytorch_cpuinfo_mock.txt", "1+4+4",
     (4, 5, 6, 7, 8), ()),
    # Big cores capped at 1794000 of 2704000 at idle: a non-thermal cap, still reported.
    ("sysfs_cpu_galaxy_s9_exynos9810_android8_pytorch_cpuinfo_mock.txt", "4+4",
     (4, 5, 6, 7), (4, 5, 6, 7)),
])
def test_cpu_topology_from_max_frequencies(shared_sample: Read, name: str, layout: str,
                                           big: tuple[int, ...], capped: tuple[int, ...]) -> None:
    topology = read_cpu_topology(parse_head_dump(shared_sample(name)))
    assert topology.layout == layout
    assert topology.big_cpus == big
    assert tuple(c.cpu for c in topology.cpus if c.capped) == capped


def test_cpu_topology_reads_old_eas_capacity_location(shared_sample: Read) -> None:
    files = parse_head_dump(
        shared_sample("sysfs_cpu_oppo_r9_mt6755_android5_pytorch_cpuinfo_mock.txt"))
    cpu0 = read_cpu_topology(files).cpus[0]
    assert (cpu0.capacity, cpu0.cpuinfo_max_khz, cpu0.scaling_max_khz) == (314, 1950000, 1144000)
    assert cpu0.related_cpus == (0, 1, 2, 3) and cpu0.capped


def test_thermal_zones_of_a_snapdragon_865(shared_sample: Read) -> None:
    text = shared_sample("sysfs_thermal_zones_sm8250_retroid5_fpsmeter.txt")
    lines = text.splitlines()
    zones = {f"thermal_zone{i}": tuple(line.split(": ")) for i, line in enumerate(lines)}
    read = read_thermal_zones(zones)  # type: ignore[arg-type]
    by_type = {zone.type: zone.celsius for zone in read}
    assert by_type["cpu-1-1-usr"] == 34.2 and by_type["battery"] == 25.5
    assert by_type["camera-therm-usr"] is None  # -40000: disconnected thermistor
    for not_a_temperature in ("soc", "pm8150b-ibat-lvl0", "pm8150b-vbat-lvl2", "pm8150l-bcl-lvl0"):
        assert not_a_temperature not in by_type
    assert max(c for c in by_type.values() if c is not None) == 34.6


def test_every_shared_sample_is_covered(shared_android_fixtures: Path) -> None:
    """A new sample dropped into ../shared must get a test here (by its prefix)."""
    prefixes = ("meminfo_", "thermalservice_", "dumpsys_battery_", "logcat_lmkd_", "proc_",
                "getprop_", "sysfs_", "shell_native_")
    names = sorted(p.name for p in shared_android_fixtures.glob("*.txt"))
    assert names and all(name.startswith(prefixes) for name in names)
