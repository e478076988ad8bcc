"""llama.cpp's own memory figures, read from its log (the lines it prints with -v)."""

from __future__ import annotations

import pytest

from harness.engines.llamalog import parse_memory_log

MiB = 1024 * 1024

def kv(mib: float, cells: int, layers: int) -> str:
    """One cache line as llama-kv-cache.cpp formats it."""
    half = mib / 2
    return (f"llama_kv_cache: size = {mib:7.2f} MiB ({cells:6d} cells, {layers:3d} layers, "
            f" 1/1 seqs), K (f16): {half:7.2f} MiB, V (f16): {half:7.2f} MiB")


# Shaped as llama.cpp 0.3.36 prints them (llama-kv-cache.cpp, llama-context.cpp); two contexts
# as llama-bench makes them, one for the prompt test and one for the generation test.
LOG = f"""\
load_tensors:   CPU_REPACK model buffer size =    12.66 MiB
load_tensors:   CPU_Mapped model buffer size =   241.41 MiB
llama_context: constructing llama_context
llama_context: n_ctx         = 2048
llama_kv_cache_iswa: creating non-SWA KV cache, size = 2048 cells
{kv(6.00, 2048, 3)}
llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells
{kv(15.00, 1024, 15)}
sched_reserve:        CPU compute buffer size =   514.50 MiB
llama_context: constructing llama_context
llama_context: n_ctx         = 512
{kv(1.50, 512, 3)}
{kv(7.50, 512, 15)}
sched_reserve:        CPU compute buffer size =   466.27 MiB
"""


def test_the_largest_contexts_caches_are_summed() -> None:
    log = parse_memory_log(LOG)
    assert log.kv_bytes == 21 * MiB
    assert [(k.cells, k.layers) for k in log.kv_caches] == [(2048, 3), (1024, 15)]


def test_repack_and_compute_buffers_are_read() -> None:
    log = parse_memory_log(LOG)
    assert log.repack_bytes == round(12.66 * MiB)
    assert log.compute_bytes == round(514.50 * MiB)


def test_a_silent_log_gives_nothing() -> None:
    log = parse_memory_log('{"n_prompt": 32}\nsome other line\n')
    assert log.kv_bytes is None and log.kv_caches == () and log.repack_bytes is None


def test_caches_before_any_context_line_still_count() -> None:
    assert parse_memory_log(kv(9.0, 512, 18)).kv_bytes == 9 * MiB


def test_the_launch_s_load_time_is_the_first_one_llama_cpp_prints() -> None:
    perf = ("llama_perf_context_print:        load time =    2790.61 ms\n"
            "llama_perf_context_print: prompt eval time =     120.00 ms /    16 tokens\n")
    later = perf.replace("2790.61", "9000.00")  # the next context counts from the same start
    assert parse_memory_log(LOG + perf + later).load_ms == pytest.approx(2790.61)
    assert parse_memory_log(LOG).load_ms is None
