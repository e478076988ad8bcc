"""A virtual phone's GPU: Mesa's lavapipe behind a phone GPU's name, memory nodes and clocks.

A profile with a ``gpu:`` key (harness.virtual.config.GpuConfig) gives the phone a Vulkan
device, the way a Qualcomm phone exposes its Adreno:

- **Real:** the Vulkan work. The phone's shell environment names lavapipe, Mesa's software
  driver, as the only Vulkan driver (``VK_ICD_FILENAMES``) and tells llama.cpp's Vulkan backend
  to use it (``GGML_VK_VISIBLE_DEVICES=0``: llama.cpp skips CPU-type devices otherwise; F16 and
  cooperative matrices off, as llama.cpp's own CI runs lavapipe). Lavapipe executes every
  shader on the host's CPU, inside the calling process, so the phone's heat, power, memory and
  throttling see that work as they see any other. The GPU memory each process allocates is
  really counted: every process loads the Vulkan layer of ``gpulayer.py``, which writes
  ``<state>/gpu/<pid>`` (``"<current> <peak> <live>\\n"``) and, on a readable GPU, kgsl's
  per-process nodes ``/sys/class/kgsl/kgsl/proc/<pid>/{kernel,kernel_max,user,user_max,
  gpumem_mapped,gpumem_unmapped}`` (decimal bytes) at every allocation and free.
- **Modelled:** the GPU's clock, load and thermal cap (``/sys/class/kgsl/kgsl-3d0/...``, a
  ``gpuss-0`` thermal zone). Their speeds are never a phone GPU's: the phone says
  ``ro.harness.gpu_emulated=lavapipe`` (``DeviceFacts.gpu_emulated``).

Lavapipe runs only natively, so a GPU is refused on a phone whose ABI is not the host's; a
host without lavapipe, the Vulkan loader or what the layer needs to build refuses to start
the phone (one line naming the Debian package), never starts it without its GPU.

The functions below are pure where they can be (the node model, the report reader), so tests
check them without a phone. ``gpulayer`` (which imports the build machinery) is imported only
where the layer is needed, to keep the phone's tools (``dumpsys``) fast to start.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from harness.errors import DeviceError, HarnessError
from harness.virtual.config import GpuConfig, PhoneConfig
from harness.virtual.gpureport import parse_report, read_reports

EMULATOR = "lavapipe"
EMULATED_PROP = "ro.harness.gpu_emulated"  # as ro.harness.emulated_cpu for the CPU
VULKAN_PROP = "ro.hardware.vulkan"  # the Vulkan HAL's name: vulkan.<value>.so on a phone
VULKAN_HARDWARE = {"qualcomm": "adreno", "arm": "mali", "imagination": "powervr"}
# llama.cpp's Vulkan backend: use device 0 even though it is a CPU-type device, without F16
# and cooperative matrices (what llama.cpp's CI sets for lavapipe)
GGML_ENV = {"GGML_VK_VISIBLE_DEVICES": "0", "GGML_VK_DISABLE_F16": "1",
            "GGML_VK_DISABLE_COOPMAT": "1"}
ICD_ENV = "VK_ICD_FILENAMES"
KGSL_ENV = "HARNESS_GPU_KGSL_DIR"  # read by the layer: where kgsl's per-process nodes go
FAULT_ENV = "HARNESS_GPU_FAULT"  # read by the layer: a GPU that drops work (wrong results)
ICD_DIRS = (Path("/usr/share/vulkan/icd.d"), Path("/etc/vulkan/icd.d"),
            Path("/usr/local/share/vulkan/icd.d"))
DRIVER_PACKAGE = "mesa-vulkan-drivers"
LOADER_PACKAGE = "libvulkan1"
LAYER_PACKAGES = "gcc libvulkan-dev"
REPORTS = "gpu"  # under the phone's state dir: the layer's reports, one file per pid
KGSL = "sys/class/kgsl"  # under the phone's root
KGSL_PROC = f"{KGSL}/kgsl/proc"
KGSL_DEVICE = f"{KGSL}/kgsl-3d0"
# the layer writes them (kgsl's per-process nodes; kgsl_sharedmem.c)
KGSL_PROC_FILES = ("kernel", "kernel_max", "user", "user_max", "gpumem_mapped",
                   "gpumem_unmapped")
ZONE_TYPE = "gpuss-0"
# the GPU's devfreq device as the devfreq class lists it (a Qualcomm phone's name for it)
DEVFREQ_DEVICE = "sys/class/devfreq/3d00000.qcom,kgsl-3d0"
# max_gpuclk's share of max_khz by thermal status (4 and above: the last); thermal_pwrlevel is
# the number of steps taken off
CAP_SHARES = (1.0, 1.0, 0.8, 0.6, 0.4)


# ----- start: what the host must have ------------------------------------------------------------
def lavapipe_icd(machine: str | None = None) -> Path:
    """Lavapipe's ICD manifest for this host's CPU, or a one-line DeviceError naming the
    package. The driver library it names must exist too."""
    name = f"lvp_icd.{machine or os.uname().machine}.json"
    for folder in ICD_DIRS:
        manifest = folder / name
        if not manifest.is_file():
            continue
        try:
            library = str(json.loads(manifest.read_text())["ICD"]["library_path"])
        except (OSError, ValueError, KeyError, TypeError):
            raise DeviceError(f"{manifest} is not a Vulkan driver manifest; reinstall it: "
                              f"apt-get install --reinstall {DRIVER_PACKAGE}") from None
        path = Path(library) if "/" in library else None
        if path is not None and not path.is_absolute():
            path = manifest.parent / path
        if path is not None and not path.is_file():
            raise DeviceError(f"{manifest} names {path}, which is missing; reinstall Mesa's "
                              f"Vulkan drivers: apt-get install --reinstall {DRIVER_PACKAGE}")
        return manifest
    raise DeviceError(f"a virtual phone with a GPU runs Vulkan on Mesa's lavapipe, and this "
                      f"host has none ({name} in {ICD_DIRS[0]}): apt-get install "
                      f"{DRIVER_PACKAGE}")


def check_loader() -> None:
    """The Vulkan loader (libvulkan.so.1), which every Vulkan program links against."""
    import ctypes.util  # runs ldconfig: only where a phone starts, never in its tools

    if ctypes.util.find_library("vulkan") is None:
        raise DeviceError("a virtual phone with a GPU needs the Vulkan loader (libvulkan.so.1): "
                          f"apt-get install {LOADER_PACKAGE}")


def provision_gpu(config: PhoneConfig, cache_dir: Path | None = None) -> PhoneConfig:
    """The config with its GPU's driver and memory layer resolved (compiled once, cached), or
    a one-line error naming the package to install. A phone without a GPU is left as it is."""
    if config.gpu is None:
        return replace(config, gpu_layer_dir="", vulkan_icd="")
    icd = lavapipe_icd()
    check_loader()
    from harness.virtual.gpulayer import ensure_gpu_layer

    try:
        layer = ensure_gpu_layer(cache_dir)
    except HarnessError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        hint = "" if "apt-get install" in first else \
            f" (it needs a C compiler and the Vulkan headers: apt-get install {LAYER_PACKAGES})"
        raise DeviceError(f"virtual phone {config.name} has a GPU, and its memory layer "
                          f"cannot be built: {first}{hint}") from error
    return replace(config, gpu_layer_dir=str(layer), vulkan_icd=str(icd))


def gpu_props(gpu: GpuConfig, props: Mapping[str, str]) -> dict[str, str]:
    """The phone's properties with its GPU's: the Vulkan HAL's name (unless the profile sets
    one) and that the GPU is emulated."""
    done = dict(props)
    hardware = VULKAN_HARDWARE.get(gpu.vendor)
    if hardware is not None:
        done.setdefault(VULKAN_PROP, hardware)
    done[EMULATED_PROP] = EMULATOR
    return done


# ----- boot: the shell's environment and the folders ---------------------------------------------
def shell_environment(config: PhoneConfig, root: Path, state: Path) -> dict[str, str]:
    """What the phone's shell adds for its GPU: the driver, llama.cpp's switches, the layer
    and where it reports. Nothing for a phone without a GPU (a Vulkan program then finds no
    device, as on a phone without Vulkan)."""
    gpu = config.gpu
    if gpu is None:
        return {}
    if not config.gpu_layer_dir or not config.vulkan_icd:
        raise DeviceError(f"virtual phone {config.name} has a GPU but no driver or layer in "
                          "its config (start it with harness sim start)")
    from harness.virtual.gpulayer import layer_environment

    # absolute: the layer writes from whatever directory its process runs in
    env = {**GGML_ENV, ICD_ENV: config.vulkan_icd,
           **layer_environment(Path(config.gpu_layer_dir), state.absolute() / REPORTS)}
    if gpu.readable:
        env[KGSL_ENV] = str(root.absolute() / KGSL_PROC)
    if gpu.drop_dispatches:
        env[FAULT_ENV] = f"drop_dispatches:{gpu.drop_dispatches}"
    return env


def prepare_folders(config: PhoneConfig, root: Path, state: Path) -> None:
    """At boot: an empty report folder; kgsl's tree on a readable GPU, none at all otherwise
    (``/sys/class/kgsl`` does not exist on a Mali phone: ENOENT)."""
    reports = state / REPORTS
    shutil.rmtree(reports, ignore_errors=True)
    shutil.rmtree(root / KGSL, ignore_errors=True)
    if config.gpu is None:
        return
    reports.mkdir(parents=True, exist_ok=True)
    if config.gpu.readable:
        (root / KGSL_PROC).mkdir(parents=True, exist_ok=True)


# ----- per-process memory ------------------------------------------------------------------------
def report_bytes(report_dir: Path, pid: int) -> int | None:
    """The GPU memory ``pid`` holds now as its layer last reported, or None (no report)."""
    try:
        with open(report_dir / str(pid), encoding="ascii") as handle:
            found = parse_report(handle.read(256))
    except (OSError, UnicodeDecodeError):
        return None
    return found.current_bytes if found is not None else None


def _pid_entries(folder: Path) -> Iterator[os.DirEntry[str]]:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.name.isascii() and entry.name.isdigit():
            yield entry


def holders(report_dir: Path) -> dict[int, int]:
    """pid -> bytes, for every process whose last report holds GPU memory."""
    return {pid: m.current_bytes for pid, m in read_reports(report_dir).items()
            if m.current_bytes}


def sweep(root: Path, state: Path, alive: Callable[[int], bool]) -> list[int]:
    """Remove kgsl's folder and the report of every process that has exited (kgsl drops a
    process's node when it exits); the pids removed."""
    gone: set[int] = set()
    for entry in _pid_entries(root / KGSL_PROC):
        if not alive(int(entry.name)):
            shutil.rmtree(entry.path, ignore_errors=True)
            gone.add(int(entry.name))
    reports = state / REPORTS
    for entry in _pid_entries(reports):
        if not alive(int(entry.name)):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
            with contextlib.suppress(OSError):
                os.unlink(reports / f"{entry.name}.tmp")
            gone.add(int(entry.name))
    return sorted(gone)


# ----- the device's nodes (the modelled part) ----------------------------------------------------
def busy_percent(cpu_ticks: Mapping[int, int], gpu_pids: Container[int]) -> int:
    """The GPU's load: the share of the phone's busy CPU time (``cpu_ticks``: pid -> ticks in
    the last tick) burned by processes that hold GPU memory (lavapipe runs the shaders in
    them), 0..100; 0 when the phone was idle."""
    total = sum(max(0, t) for t in cpu_ticks.values())
    if total <= 0:
        return 0
    on_gpu = sum(max(0, t) for pid, t in cpu_ticks.items() if pid in gpu_pids)
    return max(0, min(100, round(100 * on_gpu / total)))


def cap_share(status: int) -> float:
    """max_gpuclk's share of the GPU's maximum at a thermal status (MODERATE and up cap it)."""
    return CAP_SHARES[max(0, min(status, len(CAP_SHARES) - 1))]


def pwrlevel(status: int) -> int:
    """kgsl's thermal_pwrlevel: 0 uncapped, one more for each step of the cap."""
    return 0 if status < 2 else min(status, 4) - 1


@dataclass(frozen=True)
class GpuNodes:
    """What ``/sys/class/kgsl/kgsl-3d0`` shows at one tick."""

    busy_percent: int
    gpuclk_hz: int
    max_gpuclk_hz: int
    thermal_pwrlevel: int
    min_hz: int  # devfreq's range, which a thermal cap leaves alone
    max_hz: int


def gpu_nodes(gpu: GpuConfig, busy: int, status: int) -> GpuNodes:
    """The clock follows the load from min_khz (idle) to max_khz (100 %), never above the
    thermal cap; the cap never goes below min_khz."""
    busy = max(0, min(100, busy))
    cap_khz = max(gpu.min_khz, round(gpu.max_khz * cap_share(status)))
    khz = gpu.min_khz + (gpu.max_khz - gpu.min_khz) * busy / 100
    return GpuNodes(busy_percent=busy, gpuclk_hz=round(min(khz, cap_khz)) * 1000,
                    max_gpuclk_hz=cap_khz * 1000, thermal_pwrlevel=pwrlevel(status),
                    min_hz=gpu.min_khz * 1000, max_hz=gpu.max_khz * 1000)


def device_files(nodes: GpuNodes) -> dict[str, str]:
    """Files under ``/sys/class/kgsl/kgsl-3d0``, as kgsl prints them (Hz, ``"37 %"``)."""
    return {
        "gpuclk": f"{nodes.gpuclk_hz}\n",
        "max_gpuclk": f"{nodes.max_gpuclk_hz}\n",
        "gpu_busy_percentage": f"{nodes.busy_percent} %\n",
        "thermal_pwrlevel": f"{nodes.thermal_pwrlevel}\n",
        "devfreq/cur_freq": f"{nodes.gpuclk_hz}\n",
        "devfreq/min_freq": f"{nodes.min_hz}\n",
        "devfreq/max_freq": f"{nodes.max_hz}\n",
    }
