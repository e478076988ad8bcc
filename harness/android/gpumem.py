"""``dumpsys gpu --gpumem``: GpuService's GPU memory, per GPU and per process (Android 12+).

GpuService reads the kernel's ``gpu_mem_total`` tracepoint (a GKI requirement for phones launched
on Android 12 or later, Adreno's and Mali's drivers alike) into a BPF map and prints, per GPU::

    Memory snapshot for GPU 0:
    Global total: 2291724288
    Proc 1203 total: 104857600
    Proc 18724 total: 2078720000

in bytes, processes by pid. ``Global total: N/A`` when the driver reports no global figure;
newer releases append ``, imported: N`` to each line (memory imported from other processes,
inside the total). The per-process totals may add up to more than the global total (shared
buffers count in every process that holds them). Instead of a snapshot it can print one line:
``Failed to initialize GPU memory eBPF`` (a kernel without the tracepoint),
``GPU memory usage maps are empty`` (no GPU memory anywhere yet) or ``Failed to initialize GPU
imported mem eBPF map``. A phone without the service says ``Can't find service: gpu``.

A process missing from a valid snapshot holds no GPU memory: GpuService lists every pid the
driver ever reported, with 0 once it frees everything.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_GPU = re.compile(r"^Memory snapshot for GPU (\d+):$")
_GLOBAL = re.compile(r"^Global total: (\d+|N/A)(?:, imported: (\d+|N/A))?$")
_PROC = re.compile(r"^Proc (\d+) total: (\d+)(?:, imported: (\d+))?$")
#: GpuService's one-line answers when it has no snapshot to print.
NO_SNAPSHOT = ("Failed to initialize GPU memory eBPF", "GPU memory usage maps are empty",
               "Failed to initialize GPU imported mem eBPF map")


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's snapshot."""

    gpu_id: int
    global_bytes: int | None  # None: "N/A"
    processes: Mapping[int, int] = field(default_factory=dict)  # pid -> bytes
    imported: Mapping[int, int] = field(default_factory=dict)  # pid -> imported bytes (newer)


@dataclass(frozen=True)
class GpuMemSnapshot:
    gpus: tuple[GpuMemory, ...] = ()
    # GpuService's own line when it printed no snapshot (one of NO_SNAPSHOT)
    message: str | None = None

    def process_bytes(self, pid: int) -> int | None:
        """``pid``'s GPU memory over every GPU: 0 when a snapshot does not list it, None when
        there is no snapshot at all (the service could not say)."""
        if not self.gpus:
            return 0 if self.message == NO_SNAPSHOT[1] else None
        return sum(g.processes.get(pid, 0) for g in self.gpus)


def parse_gpumem(text: str) -> GpuMemSnapshot | None:
    """GpuService's memory dump in ``text`` (other sections of ``dumpsys gpu`` are skipped);
    None when it holds neither a snapshot nor one of GpuService's memory lines."""
    gpus: list[GpuMemory] = []
    message: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if (head := _GPU.match(line)) is not None:
            gpus.append(GpuMemory(int(head.group(1)), None, {}, {}))
        elif gpus and (total := _GLOBAL.match(line)) is not None and total.group(1) != "N/A":
            gpus[-1] = dataclasses.replace(gpus[-1], global_bytes=int(total.group(1)))
        elif gpus and (proc := _PROC.match(line)) is not None:
            pid, last = int(proc.group(1)), gpus[-1]
            gpus[-1] = dataclasses.replace(
                last, processes={**last.processes, pid: int(proc.group(2))},
                imported={**last.imported, pid: int(proc.group(3))} if proc.group(3)
                else last.imported)
        elif line in NO_SNAPSHOT and message is None:
            message = line
    if not gpus and message is None:
        return None
    return GpuMemSnapshot(tuple(gpus), message)
