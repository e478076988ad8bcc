"""A virtual phone with a GPU (profile key ``gpu:``): Vulkan on lavapipe, the GPU memory of each
process in kgsl's nodes and in ``dumpsys meminfo``, and the GPU's modelled clock, load and
thermal cap (harness/virtual/gpu.py, docs/virtual-phone.md "GPU").

The pure parts (profile key, props, formats, node model, the layer's kgsl nodes on the host)
run without a phone; the end-to-end tests start gpu-phone, gpu-phone-mali and a plain x86_64
phone on the test's private adb server and run a small Vulkan program of their own on them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fixtures_phones import PhoneFactory, VirtualPhone

from harness.android import parse_gpumem
from harness.android.meminfo import parse_meminfo
from harness.device.adb import AdbDevice
from harness.errors import ConfigError, DeviceError
from harness.profiles import find_profile, parse_profile
from harness.run.offload import KGSL_SOURCE, accelerator_memory
from harness.run.ondevice import Rates, parse
from harness.run.trial import launch_command
from harness.testing.adbserver import AdbServer
from harness.virtual import formats, gpulayer
from harness.virtual import gpu as gpumodel
from harness.virtual.config import GpuConfig, PhoneConfig, parse_gpu
from harness.virtual.control import start_phones
from harness.virtual.phone import Phone
from harness.virtual.provision import config_from_profile
from harness.virtual.sandbox import Sandbox
from virtual.procwait import wait_for
from virtual.vulkan_c import program

REPO = Path(__file__).resolve().parent.parent.parent
GPU_PHONE = str(REPO / "devices" / "virtual" / "gpu-phone.yaml")
MALI_PHONE = str(REPO / "devices" / "virtual" / "gpu-phone-mali.yaml")
MIB = 1 << 20
KIB = 1024
LAVAPIPE_ICD = Path(f"/usr/share/vulkan/icd.d/lvp_icd.{os.uname().machine}.json")
VULKAN_H = Path("/usr/include/vulkan/vulkan.h")
ADRENO = GpuConfig("Adreno (TM) 740", "qualcomm", max_khz=680000, min_khz=220000)
FIXTURE = "meminfo_app_pixel3_android12_gracker_systemui.txt"
# run_on_phone's start(phone, *args) -> (pid, the adb client running it)
Start = Callable[..., tuple[int, subprocess.Popen[str]]]

# Allocates MIB mebibytes of host-visible device memory on the first Vulkan device, writes
# every byte (an engine uploading its weights), prints its pid, then for SECONDS either sleeps
# or spins (argv[3] "spin": the CPU work lavapipe's shaders would be), frees it all and prints
# "done"; argv[4] (0 unless given): seconds to wait, the device open, before allocating and
# again after freeing (a buffer that lives between two sampler ticks). Its own program:
# nothing of llama.cpp's.
VKALLOC = program(r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vulkan.h>
#define CHECK(call) do { VkResult r_ = (call); if (r_ != VK_SUCCESS) { \
    fprintf(stderr, "%s failed: %d\n", #call, (int)r_); return 1; } } while (0)
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static void wait_s(double seconds) {
    struct timespec nap = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&nap, NULL);
}
int main(int argc, char **argv) {
    VkDeviceSize mib = argc > 1 ? (VkDeviceSize)atol(argv[1]) : 6;
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    int spin = argc > 3 && strcmp(argv[3], "spin") == 0;
    double quiet = argc > 4 ? atof(argv[4]) : 0.0;
""", r"""    wait_s(quiet);
    VkPhysicalDeviceMemoryProperties memory_types;
    vkGetPhysicalDeviceMemoryProperties(physical, &memory_types);
    uint32_t type = 0;
    while (type < memory_types.memoryTypeCount &&
           !(memory_types.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
        type++;
    if (type == memory_types.memoryTypeCount) {
        fprintf(stderr, "no host-visible memory\n");
        return 1;
    }
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = mib << 20, .memoryTypeIndex = type};
    VkDeviceMemory memory;
    CHECK(vkAllocateMemory(device, &mai, NULL, &memory));
    void *mapped;
    CHECK(vkMapMemory(device, memory, 0, VK_WHOLE_SIZE, 0, &mapped));
    memset(mapped, 1, (size_t)(mib << 20));
    printf("%ld\n", (long)getpid());
    fflush(stdout);
    double end = now() + seconds;
    volatile unsigned long sum = 0;
    while (now() < end) {
        if (spin) {
            for (int i = 0; i < 1000000; i++) sum += (unsigned long)i;
        } else {
            struct timespec nap = {0, 20 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
    }
    vkUnmapMemory(device, memory);
    vkFreeMemory(device, memory, NULL);
    vkDestroyDevice(device, NULL);
    vkDestroyInstance(instance, NULL);
    wait_s(quiet);
    puts("done");
    return 0;
}
""")


# ----- the profile key and the props ----------------------------------------------------------
def test_gpu_profiles_parse_and_name_their_gpu() -> None:
    adreno, mali = find_profile(GPU_PHONE), find_profile(MALI_PHONE)
    assert adreno.gpu == ADRENO and adreno.abi == "x86_64"
    assert (adreno.ram_mb, adreno.available_mb) == (3072, 1536)
    assert mali.gpu == GpuConfig("Mali-G715", "arm", 850000, 265000, readable=False)
    assert find_profile("midrange-8gb").gpu is None


@pytest.mark.parametrize(("gpu", "message"), [
    ({"name": "X", "vendor": "nvidia", "max_khz": 2, "min_khz": 1},
     r"p.yaml: gpu.vendor must be one of qualcomm, arm, imagination, other, got 'nvidia'"),
    ({"name": "X", "vendor": "arm", "max_khz": 1, "min_khz": 2},
     r"p.yaml: gpu: min_khz \(2\) must not be above max_khz \(1\)"),
    ({"name": "X", "vendor": "arm", "max_khz": 1.5, "min_khz": 1},
     r"p.yaml: gpu.max_khz must be a positive whole number of kHz, got 1.5"),
    ({"name": "X", "vendor": "arm", "max_khz": 2, "min_khz": 1, "readable": "no"},
     r"p.yaml: gpu.readable must be true or false, got 'no'"),
    ({"name": "X", "vendor": "arm", "max_khz": 2, "min_khz": 1, "gpumem": 1},
     r"p.yaml: gpu.gpumem must be true or false, got 1"),
    ({"name": "X", "vendor": "arm", "max_khz": 2, "min_khz": 1, "cores": 4},
     r"p.yaml: gpu: unknown key 'cores'"),
    ({"name": "X", "vendor": "arm", "max_khz": 2}, r"p.yaml: gpu: missing key 'min_khz'"),
    ({"name": "", "vendor": "arm", "max_khz": 2, "min_khz": 1}, r"p.yaml: gpu.name must be"),
    ("adreno", r"p.yaml: gpu must be a mapping"),
])
def test_gpu_key_errors_name_the_file_and_key(gpu: object, message: str) -> None:
    data = {"name": "p", "props": dict(find_profile("midrange-8gb").props), "ram_mb": 4096,
            "available_mb": 2048, "storage_free_mb": 1024, "gpu": gpu,
            "clusters": [{"name": "big", "cores": 2, "max_khz": 2000000, "capacity": 1024}]}
    with pytest.raises(ConfigError, match=message):
        parse_profile(data, "p.yaml")
    assert parse_gpu(None, "p.yaml: gpu") is None


def test_phone_config_keeps_the_gpu_through_its_snapshot() -> None:
    config = config_from_profile(find_profile(GPU_PHONE), "gpu-phone-1")
    again = PhoneConfig.from_mapping(json.loads(config.to_json()))
    assert again == config and again.gpu == ADRENO
    plain = config_from_profile(find_profile("midrange-8gb"), "m-1", abi="x86_64")
    assert PhoneConfig.from_mapping(json.loads(plain.to_json())).gpu is None


def test_gpu_props_say_the_vulkan_hal_and_that_it_is_emulated() -> None:
    adreno = config_from_profile(find_profile(GPU_PHONE), "g-1")
    assert adreno.props["ro.hardware.vulkan"] == "adreno"
    assert adreno.props["ro.harness.gpu_emulated"] == "lavapipe"
    assert "ro.harness.emulated_cpu" not in adreno.props  # x86_64 runs natively
    mali = config_from_profile(find_profile(MALI_PHONE), "m-1")
    assert mali.props["ro.hardware.vulkan"] == "mali"
    plain = config_from_profile(find_profile("midrange-8gb"), "p-1", abi="x86_64")
    assert "ro.hardware.vulkan" not in plain.props
    assert "ro.harness.gpu_emulated" not in plain.props
    other = gpumodel.gpu_props(dataclasses.replace(ADRENO, vendor="other"),
                               {"ro.hardware.vulkan": "samsung"})
    assert other == {"ro.hardware.vulkan": "samsung", "ro.harness.gpu_emulated": "lavapipe"}


def test_a_gpu_on_an_emulated_cpu_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_profile(find_profile(GPU_PHONE), "g-1", abi="arm64-v8a")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{GPU_PHONE}: gpu: ")
    assert "lavapipe, which runs only natively" in message and "--abi x86_64" in message


def test_missing_lavapipe_refuses_the_phone_naming_the_package(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gpumodel, "ICD_DIRS", (tmp_path / "icd.d",))
    config = config_from_profile(find_profile(GPU_PHONE), "g-1")
    with pytest.raises(DeviceError) as caught:
        gpumodel.provision_gpu(config)
    assert "\n" not in str(caught.value)
    assert "apt-get install mesa-vulkan-drivers" in str(caught.value)
    # a broken manifest, or one naming a missing driver, is refused the same way
    (tmp_path / "icd.d").mkdir()
    manifest = tmp_path / "icd.d" / LAVAPIPE_ICD.name
    manifest.write_text(json.dumps({"ICD": {"library_path": str(tmp_path / "gone.so")}}))
    with pytest.raises(DeviceError, match=r"reinstall .*mesa-vulkan-drivers$"):
        gpumodel.provision_gpu(config)
    # start_phones refuses before it makes anything, and never starts the phone without a GPU
    home = tmp_path / "sim"
    with pytest.raises(DeviceError, match="mesa-vulkan-drivers"):
        start_phones(GPU_PHONE, home=home, connect_adb=False)
    assert not list((home / "phones").glob("*"))


def test_a_layer_that_cannot_be_built_refuses_the_phone_naming_the_package(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _need_vulkan()
    source = tmp_path / "gpumem_layer.c"
    source.write_text("#include <vulkan/not_a_header.h>\n")
    monkeypatch.setattr(gpulayer, "LAYER_SOURCE", source)
    config = config_from_profile(find_profile(GPU_PHONE), "g-1")
    with pytest.raises(DeviceError) as caught:
        gpumodel.provision_gpu(config, tmp_path / "cache")
    assert "\n" not in str(caught.value) and "apt-get install libvulkan-dev" in str(caught.value)
    source.write_text("this is not C\n")  # any other failure still names what the layer needs
    with pytest.raises(DeviceError) as caught:
        gpumodel.provision_gpu(config, tmp_path / "cache")
    assert "\n" not in str(caught.value) and "libvulkan-dev" in str(caught.value)
    plain = config_from_profile(find_profile("midrange-8gb"), "p-1", abi="x86_64")
    assert gpumodel.provision_gpu(plain) == plain  # no GPU: nothing needed


def test_shell_environment_of_each_kind_of_phone(tmp_path: Path) -> None:
    config = dataclasses.replace(config_from_profile(find_profile(GPU_PHONE), "g-1"),
                                 gpu_layer_dir=str(tmp_path / "layer"),
                                 vulkan_icd=str(LAVAPIPE_ICD))
    root, state = tmp_path / "root", tmp_path / "state"
    env = gpumodel.shell_environment(config, root, state)
    assert env == {
        "GGML_VK_VISIBLE_DEVICES": "0", "GGML_VK_DISABLE_F16": "1",
        "GGML_VK_DISABLE_COOPMAT": "1", "VK_ICD_FILENAMES": str(LAVAPIPE_ICD),
        "VK_LAYER_PATH": str(tmp_path / "layer"), "VK_INSTANCE_LAYERS": gpulayer.LAYER_NAME,
        "VK_LOADER_LAYERS_ENABLE": gpulayer.LAYER_NAME,
        "HARNESS_GPU_MEM_DIR": str(state / "gpu"),
        "HARNESS_GPU_KGSL_DIR": str(root / "sys/class/kgsl/kgsl/proc"),
    }
    mali = dataclasses.replace(config, gpu=dataclasses.replace(ADRENO, readable=False))
    assert "HARNESS_GPU_KGSL_DIR" not in gpumodel.shell_environment(mali, root, state)
    plain = config_from_profile(find_profile("midrange-8gb"), "p-1", abi="x86_64")
    assert gpumodel.shell_environment(plain, root, state) == {}


# ----- dumpsys meminfo -------------------------------------------------------------------------
ROLLUP = {"Rss": 30000, "Pss": 25000, "Anonymous": 18000, "Pss_Anon": 18000, "Pss_File": 7000,
          "Private_Dirty": 18000, "Private_Clean": 5000, "SwapPss": 0}


def _line(text: str, label: str) -> str:
    return next(x for x in text.splitlines() if x.strip().startswith(label))


def _ends(line: str) -> list[int]:
    """Where each word of a line ends (the column a right-aligned number belongs to)."""
    return [m.end() for m in re.finditer(r"\S+", line)]


def test_meminfo_shows_gpu_memory_as_gl_mtrack_and_graphics_with_total_unchanged() -> None:
    text = formats.meminfo_process(7, "llama-bench", ROLLUP, {"VmStk": 200}, 34, 1000,
                                   graphics_kb=6144)
    assert _line(text, "GL mtrack").split() == ["GL", "mtrack", "6144", "6144", "0", "0", "6144"]
    # the GPU's memory leaves the native heap, where lavapipe put it: TOTAL stays smaps' Pss
    assert _line(text, "Native Heap").split()[2:7] == ["11656", "11656", "0", "0", "11656"]
    assert _line(text, "TOTAL ").split()[1:6] == ["25000", "18000", "5000", "0", "30000"]
    assert "TOTAL PSS:    25000            TOTAL RSS:    30000" in text
    assert _line(text, "Graphics:").split() == ["Graphics:", "6144", "6144"]
    assert _line(text, "Native Heap:").split() == ["Native", "Heap:", "11656", "11656"]
    parsed = parse_meminfo(text)
    assert parsed is not None and parsed.graphics_kb == 6144 and parsed.pss_kb == 25000
    assert parsed.native_heap_kb == 11656 and parsed.rss_kb == 30000
    # before Android 11: no Rss column, the same rows
    old = formats.meminfo_process(7, "x", ROLLUP, {"VmStk": 200}, 29, 1000, graphics_kb=6144)
    assert _line(old, "GL mtrack").split() == ["GL", "mtrack", "6144", "6144", "0", "0"]
    assert "TOTAL:    25000" in old and _line(old, "Graphics:").split() == ["Graphics:", "6144"]


def test_meminfo_gpu_memory_not_yet_resident_counts_on_top() -> None:
    """More GPU memory than heap (allocated, never written): the heap goes to 0, never below,
    and TOTAL is smaps' Pss plus the part smaps has not seen, as a phone's driver would hold."""
    text = formats.meminfo_process(7, "x", ROLLUP, {"VmStk": 200}, 34, 1000, graphics_kb=20000)
    assert _line(text, "Native Heap").split()[2:7] == ["0", "0", "0", "0", "0"]
    assert _line(text, "TOTAL ").split()[1] == str(25000 - 17800 + 20000)
    assert "TOTAL PSS:    27200" in text and _line(text, "Graphics:").split()[1] == "20000"


def test_meminfo_without_gpu_memory_or_memtrack_is_the_plain_table() -> None:
    """A process without GPU memory, and every process of a phone without a memtrack HAL (the
    unreadable, Mali-like GPU): no GL mtrack row, Graphics 0, exactly the table without a GPU."""
    plain = formats.meminfo_process(7, "x", ROLLUP, {"VmStk": 200}, 34, 1000)
    assert formats.meminfo_process(7, "x", ROLLUP, {"VmStk": 200}, 34, 1000, 0) == plain
    assert "GL mtrack" not in plain and _line(plain, "Graphics:").split() == ["Graphics:", "0", "0"]
    assert _line(plain, "Native Heap").split()[2] == "17800"
    assert "TOTAL PSS:    25000" in plain


def test_gl_mtrack_row_is_laid_out_as_a_phone_prints_it(shared_android_fixtures: Path) -> None:
    """The row and the summary line stand where a Pixel 3's (Android 12) do: each number ends
    under its column's title, and the App Summary's Graphics is read back the same way."""
    sample = (shared_android_fixtures / FIXTURE).read_text().splitlines()
    ours = formats.meminfo_process(7, "x", ROLLUP, {}, 34, 1000, graphics_kb=10163).splitlines()
    for lines in (sample, ours):
        header = next(x for x in lines if x.split()[:2] == ["Pss", "Private"])
        row = next(x for x in lines if x.strip().startswith("GL mtrack"))
        assert _ends(row)[2:7] == _ends(header)[:5]  # Pss, Private x2, Swap, Rss
        assert row.split()[2:7] == ["10163", "10163", "0", "0", "10163"]
        graphics = next(x for x in lines if x.strip().startswith("Graphics:"))
        summary = next(x for x in lines if x.strip().startswith("Native Heap:"))
        assert _ends(graphics)[-2:] == _ends(summary)[-2:]  # the Pss and Rss columns
        # in the table's order: after the mmaps, before Unknown
        where = {x[:13].strip(): i for i, x in enumerate(lines) if x[:13].strip()}
        assert where[".so mmap"] < where["GL mtrack"] < where["Unknown"] < where["TOTAL"]
    parsed = parse_meminfo("\n".join(ours))
    assert parsed is not None and parsed.graphics_kb == 10163


# ----- the node model -----------------------------------------------------------------------------
def test_busy_share_is_the_gpu_holders_share_of_busy_cpu() -> None:
    assert gpumodel.busy_percent({10: 30, 11: 10}, {10}) == 75
    assert gpumodel.busy_percent({10: 30, 11: 10}, set()) == 0  # nobody holds GPU memory
    assert gpumodel.busy_percent({10: 0, 11: 0}, {10}) == 0  # an idle phone
    assert gpumodel.busy_percent({10: 5}, {10}) == 100
    assert gpumodel.busy_percent({}, {10}) == 0
    assert gpumodel.busy_percent({10: 5, 11: -3}, {10}) == 100  # a counter reset counts 0


def test_clock_follows_busy_between_min_and_max() -> None:
    idle = gpumodel.gpu_nodes(ADRENO, 0, 0)
    assert (idle.gpuclk_hz, idle.max_gpuclk_hz, idle.thermal_pwrlevel) == (220e6, 680e6, 0)
    half = gpumodel.gpu_nodes(ADRENO, 50, 1)  # LIGHT does not cap
    assert (half.gpuclk_hz, half.max_gpuclk_hz, half.thermal_pwrlevel) == (450e6, 680e6, 0)
    full = gpumodel.gpu_nodes(ADRENO, 100, 0)
    assert full.gpuclk_hz == 680e6 and full.busy_percent == 100
    assert gpumodel.gpu_nodes(ADRENO, 150, 0) == full  # clamped
    files = gpumodel.device_files(half)
    assert files == {"gpuclk": "450000000\n", "max_gpuclk": "680000000\n",
                     "gpu_busy_percentage": "50 %\n", "thermal_pwrlevel": "0\n",
                     "devfreq/cur_freq": "450000000\n", "devfreq/min_freq": "220000000\n",
                     "devfreq/max_freq": "680000000\n"}


@pytest.mark.parametrize(("status", "cap_hz", "level"), [
    (2, 544_000_000, 1), (3, 408_000_000, 2), (4, 272_000_000, 3), (6, 272_000_000, 3)])
def test_thermal_status_caps_the_clock(status: int, cap_hz: int, level: int) -> None:
    busy = gpumodel.gpu_nodes(ADRENO, 100, status)
    assert (busy.max_gpuclk_hz, busy.thermal_pwrlevel) == (cap_hz, level)
    assert busy.gpuclk_hz == cap_hz  # never above the cap
    idle = gpumodel.gpu_nodes(ADRENO, 0, status)
    assert idle.gpuclk_hz == 220_000_000 <= idle.max_gpuclk_hz
    assert gpumodel.device_files(busy)["devfreq/max_freq"] == "680000000\n"  # devfreq's range


def test_cap_never_goes_below_the_minimum_clock() -> None:
    narrow = GpuConfig("G", "other", max_khz=500000, min_khz=400000)
    capped = gpumodel.gpu_nodes(narrow, 100, 5)
    assert capped.max_gpuclk_hz == capped.gpuclk_hz == 400_000_000


def test_sweep_removes_exited_processes_and_keeps_live_ones(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    live, dead = os.getpid(), 4_000_000  # beyond pid_max: never a process
    for pid in (live, dead):
        (root / gpumodel.KGSL_PROC / str(pid)).mkdir(parents=True)
        (root / gpumodel.KGSL_PROC / str(pid) / "kernel").write_text("4096\n")
        (state / "gpu").mkdir(parents=True, exist_ok=True)
        (state / "gpu" / str(pid)).write_text("4096 4096 1\n")
    (state / "gpu" / f"{dead}.tmp").write_text("junk")
    gone = gpumodel.sweep(root, state, lambda pid: pid == live)
    assert gone == [dead]
    assert sorted(p.name for p in (root / gpumodel.KGSL_PROC).iterdir()) == [str(live)]
    assert sorted(p.name for p in (state / "gpu").iterdir()) == [str(live)]
    assert gpumodel.holders(state / "gpu") == {live: 4096}


def _gpu_phone(tmp_path: Path, gpu: GpuConfig) -> Phone:
    config = dataclasses.replace(config_from_profile(find_profile(GPU_PHONE), "g-1"), gpu=gpu,
                                 gpu_layer_dir=str(tmp_path / "layer"),
                                 vulkan_icd=str(LAVAPIPE_ICD))
    phone = Phone(Sandbox(tmp_path / "g-1"), config)
    phone.sandbox.state.mkdir(parents=True)
    gpumodel.prepare_folders(config, phone.sandbox.root, phone.sandbox.state)
    return phone


def test_tick_writes_kgsl_device_nodes_and_a_gpu_zone(tmp_path: Path) -> None:
    phone = _gpu_phone(tmp_path, ADRENO)
    me, other = os.getpid(), os.getppid()
    (phone.sandbox.state / "gpu" / str(me)).write_text(f"{6 * MIB} {6 * MIB} 1\n")
    phone._spent = {me: 30, other: 10}  # the GPU holder burned 3/4 of the phone's CPU time
    zone = phone.sandbox.root / "sys/class/thermal/thermal_zone4"
    phone._write_gpu(zone, status=0)
    device = phone.sandbox.root / "sys/class/kgsl/kgsl-3d0"
    assert (device / "gpu_busy_percentage").read_text() == "75 %\n"
    assert (device / "gpuclk").read_text() == "565000000\n"  # 220 + 0.75 x 460 MHz
    assert (device / "devfreq/cur_freq").read_text() == "565000000\n"
    assert (zone / "type").read_text() == "gpuss-0\n"
    assert (zone / "temp").read_text() == f"{round(phone.thermal.die_c * 1000)}\n"
    phone._write_gpu(zone, status=3)  # SEVERE: capped at 60 %
    assert (device / "max_gpuclk").read_text() == "408000000\n"
    assert (device / "gpuclk").read_text() == "408000000\n"
    assert (device / "thermal_pwrlevel").read_text() == "2\n"
    truth = json.loads((phone.sandbox.state / "gpu.json").read_text())
    assert truth["holders"] == {str(me): 6 * MIB} and truth["busy_percent"] == 75


def test_unreadable_gpu_has_no_kgsl_at_all(tmp_path: Path) -> None:
    phone = _gpu_phone(tmp_path, dataclasses.replace(ADRENO, readable=False))
    (phone.sandbox.state / "gpu" / str(os.getpid())).write_text(f"{MIB} {MIB} 1\n")
    phone._spent = {os.getpid(): 10}
    zone = phone.sandbox.root / "sys/class/thermal/thermal_zone4"
    phone._write_gpu(zone, status=0)
    assert not (phone.sandbox.root / "sys/class/kgsl").exists() and not zone.exists()
    assert (phone.sandbox.state / "gpu").is_dir()  # the layer still reports: truth for tests


def test_sandbox_maps_kgsl_like_thermal(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path / "p")
    assert sandbox.host_path("/sys/class/kgsl/kgsl/proc/12/kernel") == \
        sandbox.root / "sys/class/kgsl/kgsl/proc/12/kernel"
    assert sandbox.rewrite_command("cat /sys/class/kgsl/kgsl-3d0/gpuclk") == \
        f"cat {sandbox.root}/sys/class/kgsl/kgsl-3d0/gpuclk"


# ----- a real Vulkan program ------------------------------------------------------------------
def _need_vulkan() -> str:
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("needs a C compiler (cc): apt-get install gcc")
    if not VULKAN_H.is_file():
        pytest.skip(f"needs the Vulkan headers ({VULKAN_H}): apt-get install libvulkan-dev")
    if not LAVAPIPE_ICD.is_file():
        pytest.skip(f"needs Mesa's software Vulkan driver ({LAVAPIPE_ICD}): "
                    "apt-get install mesa-vulkan-drivers")
    return compiler


@pytest.fixture(scope="module")
def vkalloc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test's Vulkan program, built for this host (the x86_64 phones run it natively)."""
    compiler = _need_vulkan()
    out = tmp_path_factory.mktemp("vkalloc")
    (out / "vkalloc.c").write_text(VKALLOC)
    subprocess.run([compiler, "-std=c11", "-O1", "-Wall", "-o", str(out / "vkalloc"),
                    str(out / "vkalloc.c"), "-lvulkan"], check=True, timeout=60)
    return out / "vkalloc"


@pytest.fixture
def layer_dir(vkalloc: Path) -> Path:
    return gpulayer.ensure_gpu_layer()


def test_layer_keeps_kgsl_nodes_of_a_live_process(vkalloc: Path, layer_dir: Path,
                                                  tmp_path: Path) -> None:
    kgsl, reports = tmp_path / "kgsl-proc", tmp_path / "reports"
    kgsl.mkdir()
    reports.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VK_", "HARNESS_GPU"))}
    env |= gpulayer.layer_environment(layer_dir, reports) | {
        "VK_ICD_FILENAMES": str(LAVAPIPE_ICD), gpumodel.KGSL_ENV: str(kgsl)}
    with subprocess.Popen([str(vkalloc), "6", "1.5"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            pid = process.stdout.readline().strip()
            assert pid == str(process.pid), process.stderr.read() if process.stderr else ""
            folder = kgsl / pid
            nodes = {p.name: p.read_text() for p in folder.iterdir()}
            assert nodes == {"kernel": f"{6 * MIB}\n", "kernel_max": f"{6 * MIB}\n",
                             "gpumem_mapped": f"{6 * MIB}\n", "user": "0\n",
                             "user_max": "0\n", "gpumem_unmapped": "0\n"}  # no temporaries
            assert set(nodes) == set(gpumodel.KGSL_PROC_FILES)
            _, err = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, err
    assert (kgsl / pid / "kernel").read_text() == "0\n"  # freed before it exited
    assert (kgsl / pid / "kernel_max").read_text() == f"{6 * MIB}\n"  # its peak stays
    assert gpulayer.read_reports(reports)[int(pid)].current_bytes == 0


# ----- on phones ----------------------------------------------------------------------------------
def _sh(server: AdbServer, phone: VirtualPhone, command: str) -> subprocess.CompletedProcess[str]:
    return server.adb("-s", phone.serial, "shell", command, timeout=60)


def _out(server: AdbServer, phone: VirtualPhone, command: str) -> str:
    result = _sh(server, phone, command)
    assert result.returncode == 0, (command, result.stdout, result.stderr)
    return result.stdout


@pytest.fixture
def run_on_phone(adb_server: AdbServer, vkalloc: Path) -> Iterator[Start]:
    """``start(phone, *args) -> pid``: pushes the Vulkan program and starts it through
    ``adb shell``; every program started is ended (its adb client killed) at teardown."""
    started: list[subprocess.Popen[str]] = []

    def start(phone: VirtualPhone, *args: str) -> tuple[int, subprocess.Popen[str]]:
        target = "/data/local/tmp/vkalloc"
        pushed = adb_server.adb("-s", phone.serial, "push", str(vkalloc), target)
        assert pushed.returncode == 0, adb_server.said(pushed)
        command = shlex.join([target, *args])
        process = subprocess.Popen(
            [adb_server.binary, "-H", "127.0.0.1", "-P", str(adb_server.port), "-s",
             phone.serial, "shell", command], env={**os.environ, **adb_server.env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.isdigit():
            process.kill()
            _, err = process.communicate(timeout=10)
            pytest.fail(f"the Vulkan program said {line!r}: {err}")
        return int(line), process

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=10)


def _finish(process: subprocess.Popen[str]) -> None:
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0 and out.endswith("done\n"), (out, err)


def test_gpu_phone_shows_a_vulkan_programs_memory_clock_and_cap(
        adb_server: AdbServer, virtual_phones: PhoneFactory, run_on_phone: Start) -> None:
    phone = virtual_phones(profile=GPU_PHONE, ram_mb=400)[0]
    assert _out(adb_server, phone, "echo $GGML_VK_VISIBLE_DEVICES") == "0\n"
    assert _out(adb_server, phone, "getprop ro.hardware.vulkan") == "adreno\n"
    facts = AdbDevice(phone.serial).facts()
    assert facts.gpu_emulated == "lavapipe" and facts.cpu_emulation is None

    pid, process = run_on_phone(phone, "6", "4", "spin")
    proc = f"/sys/class/kgsl/kgsl/proc/{pid}"
    assert _out(adb_server, phone, f"cat {proc}/kernel") == f"{6 * MIB}\n"
    nodes = _out(adb_server, phone, f"cd {proc} && cat user gpumem_mapped gpumem_unmapped")
    assert nodes == f"0\n{6 * MIB}\n0\n"
    meminfo = _out(adb_server, phone, f"dumpsys meminfo {pid}")
    assert _line(meminfo, "GL mtrack").split()[2:4] == [str(6 * KIB), str(6 * KIB)]
    assert _line(meminfo, "Graphics:").split()[1] == str(6 * KIB)

    device = "/sys/class/kgsl/kgsl-3d0"

    def read(name: str) -> str:
        return _out(adb_server, phone, f"cat {device}/{name}").strip()

    # spinning, the program is (nearly) all the phone's CPU time: the GPU is busy, clocked up
    assert wait_for(lambda: int(read("gpu_busy_percentage").split()[0]) >= 50, 3, 0.2)
    assert int(read("gpuclk")) > 220_000_000 and read("thermal_pwrlevel") == "0"
    phone.fault("thermal", 3)  # SEVERE: the GPU is capped at 60 % of 680 MHz
    assert wait_for(lambda: read("max_gpuclk") == "408000000", 2, 0.1)
    assert read("thermal_pwrlevel") == "2"
    assert int(read("gpuclk")) <= 408_000_000
    # the stock policy: kgsl's nodes are its vendor's to open (this one does), the thermal
    # zones (the GPU's gpuss-0 is the fifth) and the devfreq class are denied
    assert int(read("devfreq/cur_freq")) == int(read("gpuclk"))
    zones = _sh(adb_server, phone, "cat /sys/class/thermal/thermal_zone*/type")
    assert zones.returncode == 1
    assert "/sys/class/thermal/thermal_zone4/type: Permission denied" in zones.stderr
    devfreq = _sh(adb_server, phone, "cat /sys/class/devfreq/3d00000.qcom,kgsl-3d0/cur_freq")
    assert devfreq.returncode == 1 and devfreq.stderr.endswith(
        "/sys/class/devfreq/3d00000.qcom,kgsl-3d0/cur_freq: Permission denied\n")
    phone.fault("thermal-release")
    _finish(process)
    # kgsl drops an exited process's node: so does the phone's next tick
    assert wait_for(lambda: _sh(adb_server, phone, f"ls {proc}").returncode != 0, 3, 0.1)


def test_the_sampler_keeps_a_gpu_peak_that_lived_between_two_ticks(
        adb_server: AdbServer, virtual_phones: PhoneFactory, vkalloc: Path) -> None:
    """6 MiB allocated, written and freed within milliseconds, half a second after the program
    opened its device and half a second before it exits: the sampler's ticks (10-50 ms) see
    kgsl's ``kernel`` at 0 before and after, and its ``kernel_max`` at 6 MiB from then on."""
    phone = virtual_phones(profile=GPU_PHONE, ram_mb=400)[0]
    target = "/data/local/tmp/vkalloc"
    pushed = adb_server.adb("-s", phone.serial, "push", str(vkalloc), target)
    assert pushed.returncode == 0, adb_server.said(pushed)
    workdir = "/data/local/tmp/harness/trials/peak"
    line = launch_command(workdir, [target, "6", "0", "nap", "0.5"], None, Rates())
    done = _sh(adb_server, phone, line)
    assert done.returncode == 0 and done.stdout.endswith("done\n"), adb_server.said(done)
    folder = Path(phone.root, workdir.lstrip("/"))
    assert wait_for(lambda: (folder / "t1").is_file(), 10)  # the sampler's last write
    sampled = parse((folder / "smp").read_text(), float((folder / "t0").read_text().split()[0]))
    assert sampled.kgsl and sampled.gpu_peak_bytes == 6 * MIB, sampled
    found = accelerator_memory([t.memory for t in sampled.ticks if t.memory], sampled.kgsl, [],
                          sampled.gpu_peak_bytes, sampled.gpu_peak_mapped_bytes)
    assert (found.device_bytes, found.source) == (6 * MIB, KGSL_SOURCE)


def test_mali_phone_hides_gpu_memory_and_a_phone_without_gpu_has_no_vulkan(
        adb_server: AdbServer, virtual_phones: PhoneFactory, run_on_phone: Start) -> None:
    mali = virtual_phones(profile=MALI_PHONE, ram_mb=400)[0]
    plain = virtual_phones(profile="midrange-8gb", ram_mb=400)[0]  # x86_64, no gpu key
    assert _out(adb_server, mali, "echo $GGML_VK_VISIBLE_DEVICES") == "0\n"
    assert _out(adb_server, mali, "getprop ro.hardware.vulkan") == "mali\n"
    pid, process = run_on_phone(mali, "6", "2")
    kgsl = _sh(adb_server, mali, "ls /sys/class/kgsl")
    assert kgsl.returncode != 0 and "No such file or directory" in adb_server.said(kgsl)
    kernel = _sh(adb_server, mali, f"cat /sys/class/kgsl/kgsl/proc/{pid}/kernel")
    assert kernel.returncode != 0 and "No such file or directory" in adb_server.said(kernel)
    meminfo = _out(adb_server, mali, f"dumpsys meminfo {pid}")
    assert f"** MEMINFO in pid {pid} [vkalloc] **" in meminfo
    assert "GL mtrack" not in meminfo and _line(meminfo, "Graphics:").split()[1:] == ["0", "0"]
    # the layer still counted it (truth for tests, in the phone's state folder)
    assert gpumodel.report_bytes(mali.sandbox / "state" / "gpu", pid) == 6 * MIB
    # and GpuService says it, as an Android 14 phone's does (the kernel's gpu_mem_total)
    gpumem = parse_gpumem(_out(adb_server, mali, "dumpsys gpu --gpumem"))
    assert gpumem is not None and gpumem.process_bytes(pid) == 6 * MIB
    assert gpumem.gpus[0].global_bytes == sum(gpumem.gpus[0].processes.values())
    _finish(process)
    assert _out(adb_server, plain, "dumpsys gpu --gpumem") == ""  # no GPU: no GpuService

    assert _out(adb_server, plain, "echo $GGML_VK_VISIBLE_DEVICES") == "\n"
    assert _out(adb_server, plain, "echo ${VK_ICD_FILENAMES:-none}") == "none\n"
    assert _out(adb_server, plain, "getprop ro.harness.gpu_emulated") == "\n"
    assert AdbDevice(plain.serial).facts().gpu_emulated is None
    assert _sh(adb_server, plain, "ls /sys/class/kgsl").returncode != 0
