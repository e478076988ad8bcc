"""A trial's accelerator memory as the phone reports it (kgsl first, dumpsys gpu --gpumem second,
dumpsys meminfo's graphics rows third, else unreadable, never 0), the host's rest, and the
engine's own account of its offload."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from analysis.factory import cell

from harness.android.meminfo import ProcessMemInfo
from harness.cell import Cell
from harness.engines.llama_bench import parse_output
from harness.engines.llamalog import parse_memory_log
from harness.run.offload import (
    DUMPSYS_SOURCE,
    GPUMEM_SOURCE,
    KGSL_SOURCE,
    NO_GPU_MEMORY,
    accelerator_memory,
    asked_layers,
    engine_offload,
    gpu_throttled,
    offload_not_applied,
)
from harness.run.state import GpuState, ProcessMemory

KB = 1024

CELL = cell()  # a CPU cell of the tiny model (analysis/factory.py)


def _m(pss_kb: int, gpu: int | None, mapped: int | None = None) -> ProcessMemory:
    return ProcessMemory(pss_kb=pss_kb, rss_kb=pss_kb + 100, gpu_bytes=gpu,
                         gpu_mapped_bytes=gpu if mapped is None else mapped)


def test_kgsl_gives_the_peak_and_the_host_s_rest() -> None:
    found = accelerator_memory([_m(50_000, 0), _m(80_000, 20_000 * KB), _m(70_000, 12_000 * KB)],
                          kgsl=True, dumpsys=())
    assert found.device_bytes == 20_000 * KB and found.source == KGSL_SOURCE
    # the mapped GPU pages are inside PSS: the host holds the rest (60 MB at the 80 MB reading)
    assert found.host_bytes == 60_000 * KB
    # a phone whose GPU memory is not mapped into the process: PSS is the host's already
    real = accelerator_memory([_m(50_000, 30_000 * KB, mapped=0)], kgsl=True, dumpsys=())
    assert (real.device_bytes, real.host_bytes) == (30_000 * KB, 50_000 * KB)


def test_a_process_without_gpu_memory_on_a_kgsl_phone_has_zero_not_unknown() -> None:
    assert accelerator_memory([_m(50_000, 0)], kgsl=True, dumpsys=()).device_bytes == 0


def test_dumpsys_graphics_rows_when_there_is_no_kgsl() -> None:
    info = ProcessMemInfo(pid=1, name="llama-bench", pss_kb=90_000, graphics_kb=27_095,
                          mtrack_kb=27_095)
    found = accelerator_memory([_m(50_000, None)], kgsl=False, dumpsys=[info])
    assert found.source == DUMPSYS_SOURCE and found.device_bytes == 27_095 * KB
    assert found.host_bytes == (90_000 - 27_095) * KB


def test_gpuservice_before_memtrack_and_kgsl_before_both() -> None:
    """GpuService's per-process count is the kernel's (every Android 12+ GPU driver reports
    it); memtrack's rows are the vendor's choice. The host's rest still comes from meminfo."""
    info = ProcessMemInfo(pid=1, name="llama-bench", pss_kb=90_000, graphics_kb=20_000,
                          mtrack_kb=20_000)
    found = accelerator_memory([_m(50_000, None)], kgsl=False, dumpsys=[info],
                          gpumem=[None, 24_000 * KB, 30_000 * KB, 0])
    assert (found.source, found.device_bytes) == (GPUMEM_SOURCE, 30_000 * KB)
    assert found.host_bytes == (90_000 - 20_000) * KB
    alone = accelerator_memory([_m(50_000, None)], kgsl=False, dumpsys=(), gpumem=[8 * KB])
    assert (alone.source, alone.device_bytes, alone.host_bytes) == (GPUMEM_SOURCE, 8 * KB, None)
    kgsl = accelerator_memory([_m(50_000, 4 * KB)], kgsl=True, dumpsys=[info], gpumem=[9 * KB])
    assert (kgsl.source, kgsl.device_bytes) == (KGSL_SOURCE, 4 * KB)
    # every reading without a snapshot (a kernel without the tracepoint): not a source
    none = accelerator_memory([_m(50_000, None)], kgsl=False, dumpsys=[info], gpumem=[None, None])
    assert none.source == DUMPSYS_SOURCE


def test_no_channel_is_unreadable_never_zero() -> None:
    """A Mali phone: no kgsl, and dumpsys's Graphics 0 without memtrack rows says nothing."""
    no_hal = ProcessMemInfo(pid=1, name="llama-bench", pss_kb=90_000, graphics_kb=0)
    found = accelerator_memory([_m(50_000, None)], kgsl=False, dumpsys=[no_hal])
    assert found.device_bytes is None and found.host_bytes is None
    assert found.source == NO_GPU_MEMORY and found.source.startswith("unreadable: ")


def test_gpu_throttling_is_a_capped_level() -> None:
    assert gpu_throttled([]) is None
    assert gpu_throttled([GpuState(600_000, 680_000, 40.0, 0)]) is False
    assert gpu_throttled([GpuState(600_000, 680_000, 40.0, 0),
                          GpuState(400_000, 408_000, 90.0, 2)]) is True


def _record(**fields: object) -> str:
    base: dict[str, object] = {"n_prompt": 16, "n_gen": 0, "samples_ts": [10.0],
                               "samples_ns": [1], "gpu_info": "llvmpipe (LLVM 15.0.6, 256 bits)",
                               "devices": "Vulkan0", "n_gpu_layers": -1, "n_threads": 2}
    base.update(fields)
    return json.dumps(base)


def test_the_engine_s_account_is_stored() -> None:
    records = parse_output(_record() + "\n")
    log = parse_memory_log("load_tensors: offloaded 9/9 layers to GPU\n"
                           "load_tensors:      Vulkan0 model buffer size =     2.00 MiB\n")
    columns = engine_offload(records, log)
    assert columns == {"gpu_info": "llvmpipe (LLVM 15.0.6, 256 bits)", "devices_used": "Vulkan0",
                       "gpu_driver": None, "offloaded_layers": 9, "model_layers": 9,
                       "device_reported_bytes": 2 * 2**20}


def test_a_trial_shorter_than_the_memory_reads_has_its_host_from_the_high_water_mark() -> None:
    """Every m line came before the model was loaded; the kernel's VmHWM and the per-tick peak
    of mapped GPU memory still say what the host held."""
    early = ProcessMemory(pss_kb=5_000, rss_kb=6_000, vm_hwm_kb=150_000, gpu_bytes=0,
                          gpu_mapped_bytes=0)
    found = accelerator_memory([early], kgsl=True, dumpsys=(), peak=40_000 * KB,
                          peak_mapped=40_000 * KB)
    assert found.device_bytes == 40_000 * KB
    assert found.host_bytes == 110_000 * KB


def test_a_short_cpu_trial_on_a_kgsl_phone_has_its_host_from_the_high_water_mark() -> None:
    """A CPU cell never allocates GPU memory, so no tick reports a GPU peak; its reads all came
    before the model loaded. Its host memory is still the kernel's high-water mark (seen: 12 MB
    stored for a cell whose VmHWM was 148 MB, before this was fixed)."""
    early = ProcessMemory(pss_kb=10_000, rss_kb=11_000, vm_hwm_kb=150_000, gpu_bytes=0,
                          gpu_mapped_bytes=0)
    found = accelerator_memory([early], kgsl=True, dumpsys=())
    assert (found.device_bytes, found.host_bytes) == (0, 150_000 * KB)
    # GPU memory seen by m lines only: the most of it mapped comes off the high-water mark
    seen = ProcessMemory(pss_kb=60_000, rss_kb=61_000, vm_hwm_kb=150_000,
                         gpu_bytes=30_000 * KB, gpu_mapped_bytes=30_000 * KB)
    assert accelerator_memory([early, seen], kgsl=True, dumpsys=()).host_bytes == 120_000 * KB


# stderr of llama-bench -v from the host-vulkan build (llama.cpp 0c1e570, as vendored by
# llama-cpp-python 0.3.36) on lavapipe, captured 2026-12-07 with GGML_VK_VISIBLE_DEVICES=0;
# only the load's lines are kept (load_tensors, buffer sizes, the driver). tiny: 3 repeating
# layers (M = 4); bench: 8 (M = 9). -p 16 -n 0 -r 1, and -dev/-ngl as each file is named.
LOGS = Path(__file__).parent / "data" / "offload"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def _on(device: str, layers: int) -> Cell:
    return dataclasses.replace(CELL, compute_device=device, n_gpu_layers=layers)


def test_the_layers_a_cell_offloads_are_counted_as_llama_cpp_counts_them() -> None:
    """The output layer is one of M = n_layer + 1 and goes first (harness.knobs)."""
    bench = 9
    assert [asked_layers(_on("Vulkan0", n), bench)
            for n in (-1, 0, 1, 4, 9, 12)] == [9, 0, 1, 4, 9, 9]
    assert asked_layers(_on("none", 0), bench) == 0


@pytest.mark.parametrize(("name", "device", "layers"), [
    ("tiny-none-ngl0.log", "none", 0), ("tiny-vulkan0-ngl0.log", "Vulkan0", 0),
    ("tiny-vulkan0-ngl1.log", "Vulkan0", 1), ("tiny-vulkan0-ngl3.log", "Vulkan0", 3),
    ("tiny-vulkan0-all.log", "Vulkan0", -1)])
def test_a_load_that_did_what_the_cell_asked_passes(name: str, device: str,
                                                    layers: int) -> None:
    log = parse_memory_log(_log(name))
    assert offload_not_applied(_on(device, layers), log) is None


def test_a_fit_that_offloaded_fewer_layers_than_asked_is_not_applied_with_both_figures() -> None:
    """llama-bench -fitt fits the model to the device's memory: its JSON still echoes -ngl -1,
    the last load offloaded 2 of 9 layers (the dry runs before it offloaded 9, 4, 3, 2)."""
    log = parse_memory_log(_log("bench-q4-vulkan0-all-fit.log"))
    assert log.layer_devices == ("CPU",) * 7 + ("Vulkan0",) * 2  # the last load's
    said = offload_not_applied(_on("Vulkan0", -1), log)
    assert said == ("asked 9/9 layers on Vulkan0, the engine's log says offloaded 2/9 layers; "
                    "2/9 layers assigned to a device")


def test_a_load_of_other_layers_or_on_other_devices_is_not_applied() -> None:
    three = parse_memory_log(_log("tiny-vulkan0-ngl3.log"))
    assert offload_not_applied(_on("Vulkan0", -1), three) == (
        "asked 4/4 layers on Vulkan0, the engine's log says offloaded 3/4 layers; "
        "3/4 layers assigned to a device")
    # every layer on the device, for a cell that asked the CPU
    everything = parse_memory_log(_log("tiny-vulkan0-all.log"))
    said = offload_not_applied(CELL, everything) or ""
    assert said.startswith("asked 0/4 layers on the CPU only, the engine's log says "
                           "offloaded 4/4 layers; 4/4 layers assigned to a device; "
                           "layers on Vulkan0; buffers on Vulkan0, Vulkan_Host")
    # the same load, its layers named for another backend's device (an edited copy)
    other = parse_memory_log(_log("tiny-vulkan0-all.log").replace(
        "assigned to device Vulkan0", "assigned to device GPUOpenCL"))
    assert offload_not_applied(_on("Vulkan0", -1), other) == (
        "asked 4/4 layers on Vulkan0, the engine's log says layers on GPUOpenCL")


def test_ngl_0_without_dev_on_a_gpu_build_is_not_the_cpu() -> None:
    """A llama-bench run without -dev (as one too old for it runs) at -ngl 0 puts no layer on
    the device, yet the device's backend computes: its pinned compute buffer says so."""
    log = parse_memory_log(_log("tiny-nodev-ngl0.log"))
    assert (log.offloaded_layers, log.model_layers) == (0, 4)
    assert offload_not_applied(CELL, log) == (
        "asked 0/4 layers on the CPU only, the engine's log says buffers on Vulkan_Host")


def test_weights_nowhere_but_the_host_are_not_an_offload() -> None:
    """An older build that logs neither the offload line nor the layers' devices: its buffers
    alone say the weights stayed on the host."""
    cpu_only = "\n".join(line for line in _log("tiny-none-ngl0.log").splitlines()
                         if "offload" not in line and "assigned" not in line)
    said = offload_not_applied(_on("Vulkan0", 2),
                               parse_memory_log(cpu_only))
    assert said == "asked 2 layers on Vulkan0, the engine's log says no weights on a device " \
                   "(buffers: CPU, CPU_Mapped)"


def test_a_log_that_says_nothing_of_a_load_is_not_judged() -> None:
    """Engines beyond llama.cpp, or a lost stderr: nothing to compare."""
    assert offload_not_applied(_on("Vulkan0", -1), None) is None
    assert offload_not_applied(_on("GPU", -1),
                               parse_memory_log("pp=123.50 tok/s\n")) is None


def test_the_cpu_backend_s_own_buffer_types_are_the_cpu() -> None:
    """ggml-cpu's extra buffer types (repacked, KleidiAI, AMX) hold a CPU cell's weights too:
    the CPU log with such a line added (an edited copy) is still the CPU."""
    for name in ("CPU_REPACK", "CPU_KLEIDIAI", "AMX"):
        log = parse_memory_log(_log("tiny-none-ngl0.log") +
                               f"load_tensors: {name} model buffer size =     1.00 MiB\n")
        assert name in log.buffer_names
        assert offload_not_applied(CELL, log) is None, name
