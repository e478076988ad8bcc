"""What llama.cpp says about its own memory, read from its log.

With ``-v`` llama-bench (and llama-cpp-python with ``verbose=True``) lets llama.cpp log, per
context it creates, one line per KV cache::

    llama_kv_cache: size =   36.00 MiB (  2048 cells,  18 layers,  1/1 seqs), K (f16): ...

(a model with sliding-window attention has two such caches per context), and per model load the
buffers its weights went to (``CPU_REPACK model buffer size = ...`` for repacked matrices) and per
context its compute buffer. These are the engine's own figures, printed to 2 decimals of a MiB;
the harness stores them beside its predictions so the predictor is checked on every trial.

With a GPU or NPU backend the same lines name the device's buffers (``Vulkan0 model buffer
size``, ``Vulkan0 KV buffer size``, ``Vulkan0 compute buffer size``; host-side ones are named
``CPU...`` or ``..._Host``), ``load_tensors: offloaded 9/9 layers to GPU`` says how many layers
went there (llama.cpp counts the output layer), and the backend describes its device and driver
(``ggml_vulkan: 0 = llvmpipe (LLVM 15.0.6, 256 bits) (llvmpipe) | uma: 1 | ...``). Its debug
lines say where each layer went, the output layer numbered after the repeating ones
(``load_tensors: layer   8 assigned to device Vulkan0, is_swa = 0``); a load that fits the model
to the device's memory first loads it without memory several times, so the last load's lines
are the ones that ran.

The same log has llama.cpp's load time (``llama_perf_context_print: load time = X ms``, after
each test): from the start of the model's load until its first batch was evaluated, so it counts
the page faults an mmap'd model defers to that batch. The first one is the launch's: later
contexts of the same model measure from the same start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.units import MIB

_KV = re.compile(r"llama_kv_cache:\s+size\s*=\s*([0-9.]+)\s*MiB\s*"
                 r"\(\s*(\d+)\s+cells,\s*(\d+)\s+layers")
_NEW_CONTEXT = re.compile(r"llama_context: constructing llama_context|llama_init_from_model:|"
                          r"llama_context: n_ctx\s*=")
_REPACK = re.compile(r"CPU_REPACK model buffer size\s*=\s*([0-9.]+)\s*MiB")
_COMPUTE = re.compile(r"CPU compute buffer size\s*=\s*([0-9.]+)\s*MiB")
# the buffer's name: its backend's (Vulkan0, CPU_Mapped) in newer builds, the device's own name
# in older ones, spaces and all (``Adreno (TM) 750 KV buffer size``)
_BUFFER = re.compile(r"^\w+:\s+(\S.*?) (model|KV|compute) buffer size\s*=\s*([0-9.]+)\s*MiB")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_ASSIGNED = re.compile(r"\blayer\s+(\d+) assigned to device (\S+?),")
# the backend's line about its device and driver, across the builds a bisect can meet: newer
# Vulkan's "ggml_vulkan: 0 = ...", older Vulkan's "Vulkan0: ... | uma: ...", OpenCL's "device:"
# and "default device:" lines; llama.cpp's own "using device Vulkan0 (...) - N MiB free" only
# where the backend said nothing
_DRIVER = re.compile(r"^(ggml_vulkan: \d+ = .*|Vulkan\d+: .*\| uma: .*|"
                     r"ggml_opencl: (?:device|default device|OpenCL driver): .*|ggml_hexagon: .*)$")
_USING = re.compile(r"\b(using device \S+ \(.*\) - \d+ MiB free)\s*$")
_LOAD = re.compile(r"llama_perf_context_print:\s+load time\s*=\s*([0-9.]+)\s*ms")


@dataclass(frozen=True)
class KvLine:
    bytes: int
    cells: int
    layers: int


@dataclass(frozen=True)
class EngineMemoryLog:
    """The largest context's caches, the repacked weights and the largest compute buffer."""

    kv_bytes: int | None  # sum of one context's caches; the largest context when there are many
    kv_caches: tuple[KvLine, ...]  # that context's caches
    repack_bytes: int | None
    compute_bytes: int | None
    load_ms: float | None = None  # llama.cpp's load time of the launch's first context
    device_bytes: int | None = None  # model + KV + compute buffers on devices (not the host)
    device_buffers: tuple[tuple[str, str, int], ...] = ()  # (buffer, kind, bytes), largest
    offloaded_layers: int | None = None  # "offloaded N/M layers to GPU": N
    model_layers: int | None = None  # and M
    driver: str | None = None  # the backend's line about its device and driver
    buffer_names: tuple[str, ...] = ()  # every buffer's name, host ones too (CPU_Mapped, ...)
    layer_devices: tuple[str, ...] = ()  # the last load's device per layer (the output last)


def cpu_buffer(name: str) -> bool:
    """The CPU backend's buffers: CPU, CPU_Mapped, CPU_REPACK, CPU_KLEIDIAI, ... and AMX (the
    names of ggml-cpu's buffer types)."""
    return name.startswith("CPU") or name == "AMX"


def host_buffer(name: str) -> bool:
    """Buffers in the host's memory: the CPU's, and a device's pinned ones (Vulkan_Host, ...)."""
    return cpu_buffer(name) or name.endswith("_Host")


def _mib(text: str) -> int:
    return round(float(text) * MIB)


def parse_memory_log(text: str) -> EngineMemoryLog:
    """The figures of ``text`` (an engine's stderr); None where the log says nothing."""
    contexts: list[list[KvLine]] = []
    current: list[KvLine] | None = None
    repack: int | None = None
    compute: int | None = None
    load: float | None = None
    buffers: dict[tuple[str, str], int] = {}
    offloaded: tuple[int, int] | None = None
    driver: str | None = None
    using: str | None = None
    names: set[str] = set()
    layers: dict[int, str] = {}
    for line in text.splitlines():
        if (buf := _BUFFER.search(line.strip())) is not None:
            names.add(buf.group(1))
        if buf is not None and not host_buffer(buf.group(1)):
            key = (buf.group(1), buf.group(2))
            buffers[key] = max(buffers.get(key, 0), _mib(buf.group(3)))
        if (assigned := _ASSIGNED.search(line)) is not None:
            layers[int(assigned.group(1))] = assigned.group(2)
        if (off := _OFFLOADED.search(line)) is not None:
            offloaded = (int(off.group(1)), int(off.group(2)))
        if driver is None and (drv := _DRIVER.search(line.strip())) is not None:
            driver = drv.group(1)[:300]
        if using is None and (dev := _USING.search(line)) is not None:
            using = dev.group(1)[:300]
        if load is None and (timed := _LOAD.search(line)) is not None:
            load = float(timed.group(1))
        if _NEW_CONTEXT.search(line) and (current is None or current):
            current = []
            contexts.append(current)
        if (kv := _KV.search(line)) is not None:
            if current is None:
                current = []
                contexts.append(current)
            current.append(KvLine(_mib(kv.group(1)), int(kv.group(2)), int(kv.group(3))))
        elif (rp := _REPACK.search(line)) is not None:
            repack = max(repack or 0, _mib(rp.group(1)))
        elif (cp := _COMPUTE.search(line)) is not None:
            compute = max(compute or 0, _mib(cp.group(1)))
    filled = [c for c in contexts if c]
    biggest = max(filled, key=lambda c: sum(k.bytes for k in c)) if filled else []
    return EngineMemoryLog(
        sum(k.bytes for k in biggest) if filled else None, tuple(biggest), repack, compute, load,
        device_bytes=sum(buffers.values()) if buffers else None,
        device_buffers=tuple((n, k, b) for (n, k), b in sorted(buffers.items())),
        offloaded_layers=offloaded[0] if offloaded else None,
        model_layers=offloaded[1] if offloaded else None, driver=driver or using,
        buffer_names=tuple(sorted(names)),
        layer_devices=tuple(layers[i] for i in sorted(layers)))
