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

from harness import knobs
from harness.android.meminfo import ProcessMemInfo
from harness.cell import Cell
from harness.engines.llamalog import EngineMemoryLog, cpu_buffer
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


#: llama.cpp's name of the CPU device
CPU_NAME = "CPU"


def asked_layers(cell: Cell, model_layers: int) -> int:
    """The layers the cell offloads, counted as llama.cpp counts them (``model_layers`` is its
    M: the repeating layers and the output layer): none on the CPU, else ``harness.knobs``'
    repeating layers plus the output layer."""
    if cell.compute_device == knobs.CPU_DEVICE:
        return 0
    repeating = knobs.offloaded_layers(cell.n_gpu_layers, model_layers - 1)
    return repeating + int(knobs.output_offloaded(cell.n_gpu_layers))


def offload_not_applied(cell: Cell, log: EngineMemoryLog | None) -> str | None:
    """What the engine's log says it did, against what the cell asked; None when they agree or
    the log says nothing of a model load (an engine that is not llama.cpp, a lost stderr).

    llama-bench's JSON only echoes its ``-ngl``/``-dev``; the log is what the load did: its
    ``offloaded N/M layers`` line, each layer's device and the buffers the weights went to. A
    load that fits the model to the device's memory (llama.cpp's fit) offloads fewer layers
    than asked while the JSON still echoes the request.
    """
    if log is None or not (log.buffer_names or log.layer_devices or log.model_layers):
        return None
    total = log.model_layers or len(log.layer_devices) or None
    asked = asked_layers(cell, total) if total else None
    said: list[str] = []
    if asked is not None and log.offloaded_layers is not None \
            and log.offloaded_layers != asked:
        said.append(f"offloaded {log.offloaded_layers}/{total} layers")
    on_device = [d for d in log.layer_devices if d != CPU_NAME]
    if log.layer_devices and asked is not None and len(on_device) != asked:
        said.append(f"{len(on_device)}/{len(log.layer_devices)} layers assigned to a device")
    foreign = sorted({d for d in on_device if d != cell.compute_device})
    if foreign:
        said.append(f"layers on {', '.join(foreign)}")
    said += _buffer_problems(cell, log)
    if not said:
        return None
    where = "the CPU only" if cell.compute_device == knobs.CPU_DEVICE else cell.compute_device
    layers = f"{asked}/{total}" if asked is not None else knobs.gpu_layers_text(
        cell.n_gpu_layers)
    return f"asked {layers} layers on {where}, the engine's log says {'; '.join(said)}"


def _buffer_problems(cell: Cell, log: EngineMemoryLog) -> list[str]:
    """The buffers against the cell: on the CPU only, every buffer is the CPU's (a device's
    pinned host buffer, ``Vulkan_Host``, is the device's backend at work); with layers
    offloaded, some weights are in a device's buffer; with none, none are."""
    if cell.compute_device == knobs.CPU_DEVICE:
        others = [n for n in log.buffer_names if not cpu_buffer(n)]
        return [f"buffers on {', '.join(others)}"] if others else []
    weights = sorted({n for n, kind, size in log.device_buffers if kind == "model" and size})
    if cell.n_gpu_layers != 0 and log.buffer_names and not weights:
        return [f"no weights on a device (buffers: {', '.join(log.buffer_names)})"]
    if cell.n_gpu_layers == 0 and weights:
        return [f"weights on {', '.join(weights)}"]
    return []


@dataclass(frozen=True)
class AcceleratorMemory:
    """A trial's accelerator (GPU/NPU) memory as the phone reported it, and the host's rest."""

    device_bytes: int | None  # peak; None: unreadable
    source: str  # where it was read, or "unreadable: <why>"
    host_bytes: int | None  # peak of the process's memory less its device buffers


KGSL_SOURCE = "kgsl /sys/class/kgsl/kgsl/proc/PID/kernel_max"
GPUMEM_SOURCE = "dumpsys gpu --gpumem (GpuService, per process)"
DUMPSYS_SOURCE = "dumpsys meminfo graphics (memtrack)"
NO_GPU_MEMORY = ("unreadable: the phone has no /sys/class/kgsl (not an Adreno/kgsl GPU), "
                 "dumpsys gpu --gpumem gave no snapshot (no gpu_mem_total tracepoint) and "
                 "dumpsys meminfo shows no graphics rows (no memtrack HAL)")


def accelerator_memory(memories: Sequence[ProcessMemory], kgsl: bool,
                       dumpsys: Sequence[ProcessMemInfo], peak: int | None = None,
                       peak_mapped: int | None = None, vm_hwm_kb: int | None = None,
                       gpumem: Sequence[int | None] = ()) -> AcceleratorMemory:
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
            return AcceleratorMemory(max([peak or 0, *(g for _, g in pairs)]), KGSL_SOURCE,
                                max(hosts) if hosts else None)
    graphics = [d for d in dumpsys if d.mtrack_kb is not None]
    host = max((_kb(d.pss_kb) - _kb(d.mtrack_kb) for d in graphics if d.pss_kb is not None),
               default=None)
    said = [g for g in gpumem if g is not None]
    if said:
        return AcceleratorMemory(max(said), GPUMEM_SOURCE, host)
    if graphics:
        return AcceleratorMemory(max(_kb(d.mtrack_kb) for d in graphics), DUMPSYS_SOURCE, host)
    return AcceleratorMemory(None, NO_GPU_MEMORY, None)


def _kb(value: int | None) -> int:
    return (value or 0) * 1024


def gpu_throttled(states: Sequence[GpuState]) -> bool | None:
    """The GPU was held below its clock by heat in some reading (None: never read)."""
    if not states:
        return None
    return any(s.capped for s in states)
