"""Where a trial's model ran, as the engine tells it: the offload columns of a trial.

Pure functions over the engine's records (llama-bench's ``gpu_info`` and ``devices``) and its
log (``harness.engines.llamalog``: the device's buffers, the offloaded layers, the backend's
device and driver line). What the phone itself reports about the process's GPU memory is read
by the sampler (``harness.run.ondevice``) and stored beside these, never mixed with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.android.meminfo import ProcessMemInfo
from harness.cell import Cell
from harness.engines.llamalog import EngineMemoryLog
from harness.run.state import GpuState, ProcessMemory


def _first(records: Sequence[Any], key: str) -> Any:
    for record in records:
        value = record.as_dict().get(key)
        if value not in (None, ""):
            return value
    return None


def engine_offload(records: Sequence[Any], log: EngineMemoryLog | None) -> dict[str, Any]:
    """The trial columns the engine's own account fills (None where it says nothing)."""
    return {
        "gpu_info": _first(records, "gpu_info"),
        "devices_used": _first(records, "devices"),
        "gpu_driver": log.driver if log else None,
        "offloaded_layers": log.offloaded_layers if log else None,
        "model_layers": log.model_layers if log else None,
        "device_reported_bytes": log.device_bytes if log else None,
    }


def offload_mismatch(records: Sequence[Any], cell: Cell) -> str | None:
    """The engine ran on other devices or with other layers than the cell asked: a mismatch."""
    for record in records:
        data = record.as_dict()
        layers, devices = data.get("n_gpu_layers"), data.get("devices")
        if layers is not None and str(layers) != str(cell.n_gpu_layers):
            return f"asked n_gpu_layers={cell.n_gpu_layers}, engine ran n_gpu_layers={layers}"
        if devices not in (None, "") and str(devices) != cell.compute_device:
            return f"asked device={cell.compute_device}, engine ran devices={devices}"
    return None


@dataclass(frozen=True)
class DeviceMemory:
    """A trial's device (GPU/NPU) memory as the phone reported it, and the host's rest."""

    device_bytes: int | None  # peak; None: unreadable
    source: str  # where it was read, or "unreadable: <why>"
    host_bytes: int | None  # peak of the process's memory less its device buffers


KGSL_SOURCE = "kgsl /sys/class/kgsl/kgsl/proc/PID/kernel"
GPUMEM_SOURCE = "dumpsys gpu --gpumem (GpuService, per process)"
DUMPSYS_SOURCE = "dumpsys meminfo graphics (memtrack)"
NO_GPU_MEMORY = ("unreadable: the phone has no /sys/class/kgsl (not an Adreno/kgsl GPU), "
                 "dumpsys gpu --gpumem gave no snapshot (no gpu_mem_total tracepoint) and "
                 "dumpsys meminfo shows no graphics rows (no memtrack HAL)")


def device_memory(memories: Sequence[ProcessMemory], kgsl: bool,
                  dumpsys: Sequence[ProcessMemInfo], peak: int | None = None,
                  peak_mapped: int | None = None, vm_hwm_kb: int | None = None,
                  gpumem: Sequence[int | None] = ()) -> DeviceMemory:
    """The phone's report, in this order of preference, else unreadable (never 0):

    1. kgsl's per-process nodes (Adreno): the driver's own count for the process, with the
       part mapped into the process beside it; ``peak`` is its ``kernel_max`` (the driver's
       high-water mark, as the sampler last read it), the memory lines' ``kernel`` otherwise;
    2. ``dumpsys gpu --gpumem`` (``gpumem``: the engine's bytes per reading, None where the
       service printed no snapshot): the kernel's gpu_mem_total tracepoint per process, which
       every GPU driver of a phone launched on Android 12+ must report, read once a second;
    3. the graphics rows of ``dumpsys meminfo``: the vendor's memtrack HAL, which counts what
       the vendor chose to (often GL mtrack only).

    Host memory is what the process holds that is not the device's: its PSS (RSS where no
    PSS was read) less the GPU memory mapped into it (kgsl's ``gpumem_mapped``: those pages
    are inside PSS, the unmapped rest is not), at the same reading; with dumpsys, TOTAL PSS
    less the graphics rows (Android adds memtrack's graphics to TOTAL PSS). GpuService does not
    say how much of a process's GPU memory its PSS holds, so with it the host's part comes from
    meminfo's rows where the phone has them, else is not told. On the virtual phone (lavapipe)
    every GPU allocation is ordinary process memory, reported as mapped.
    ``vm_hwm_kb``: the high-water mark from any other read (the launch's watcher).
    """
    if kgsl:
        pairs = [(m, m.gpu_bytes) for m in memories if m.gpu_bytes is not None]
        if pairs or peak is not None:
            hosts = [_kb(m.pss_kb if m.pss_kb is not None else m.rss_kb)
                     - (m.gpu_mapped_bytes or 0)
                     for m, _ in pairs if (m.pss_kb or m.rss_kb) is not None]
            # a trial shorter than the memory reads: the kernel's high-water mark less the
            # most GPU memory mapped into it (every tick reads both; no per-tick peak: the
            # process never had GPU memory, or only m lines saw it). A lower bound of the
            # host's peak, since RSS is the host's part plus the mapped part at every moment.
            hwm = max([vm_hwm_kb or 0, *(m.vm_hwm_kb or 0 for m in memories)])
            if peak_mapped is None:
                peak_mapped = max((m.gpu_mapped_bytes or 0 for m in memories), default=0)
            if hwm:
                hosts.append(_kb(hwm) - peak_mapped)
            return DeviceMemory(max([peak or 0, *(g for _, g in pairs)]), KGSL_SOURCE,
                                max(hosts) if hosts else None)
    graphics = [d for d in dumpsys if d.mtrack_kb is not None]
    host = max((_kb(d.pss_kb) - _kb(d.mtrack_kb) for d in graphics if d.pss_kb is not None),
               default=None)
    said = [g for g in gpumem if g is not None]
    if said:
        return DeviceMemory(max(said), GPUMEM_SOURCE, host)
    if graphics:
        return DeviceMemory(max(_kb(d.mtrack_kb) for d in graphics), DUMPSYS_SOURCE, host)
    return DeviceMemory(None, NO_GPU_MEMORY, None)


def _kb(value: int | None) -> int:
    return (value or 0) * 1024


def gpu_throttled(states: Sequence[GpuState]) -> bool | None:
    """The GPU was held below its clock by heat in some reading (None: never read)."""
    if not states:
        return None
    return any(s.capped for s in states)
