"""What llama.cpp says about its own memory, read from its log.

With ``-v`` llama-bench (and llama-cpp-python with ``verbose=True``) lets llama.cpp log, per
context it creates, one line per KV cache::

    llama_kv_cache: size =   36.00 MiB (  2048 cells,  18 layers,  1/1 seqs), K (f16): ...

(a model with sliding-window attention has two such caches per context), and per model load the
buffers its weights went to (``CPU_REPACK model buffer size = ...`` for repacked matrices) and per
context its compute buffer. These are the engine's own figures, printed to 2 decimals of a MiB;
the harness stores them beside its predictions so the predictor is checked on every trial.

The same log has llama.cpp's load time (``llama_perf_context_print: load time = X ms``, after
each test): from the start of the model's load until its first batch was evaluated, so it counts
the page faults an mmap'd model defers to that batch. The first one is the launch's: later
contexts of the same model measure from the same start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MiB = 1024 * 1024
_KV = re.compile(r"llama_kv_cache:\s+size\s*=\s*([0-9.]+)\s*MiB\s*"
                 r"\(\s*(\d+)\s+cells,\s*(\d+)\s+layers")
_NEW_CONTEXT = re.compile(r"llama_context: constructing llama_context|llama_init_from_model:|"
                          r"llama_context: n_ctx\s*=")
_REPACK = re.compile(r"CPU_REPACK model buffer size\s*=\s*([0-9.]+)\s*MiB")
_COMPUTE = re.compile(r"CPU compute buffer size\s*=\s*([0-9.]+)\s*MiB")
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


def _mib(text: str) -> int:
    return round(float(text) * MiB)


def parse_memory_log(text: str) -> EngineMemoryLog:
    """The figures of ``text`` (an engine's stderr); None where the log says nothing."""
    contexts: list[list[KvLine]] = []
    current: list[KvLine] | None = None
    repack: int | None = None
    compute: int | None = None
    load: float | None = None
    for line in text.splitlines():
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
    if not filled:
        return EngineMemoryLog(None, (), repack, compute, load)
    biggest = max(filled, key=lambda c: sum(k.bytes for k in c))
    return EngineMemoryLog(sum(k.bytes for k in biggest), tuple(biggest), repack, compute, load)
