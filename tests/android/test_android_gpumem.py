"""``dumpsys gpu --gpumem`` in the shapes GpuService prints (frameworks/native
services/gpuservice/gpumem/GpuMem.cpp, Android 12-15): figures below are made up."""

from __future__ import annotations

from harness.android import parse_gpumem

SNAPSHOT = """Memory snapshot for GPU 0:
Global total: 391626752
Proc 504 total: 170385408
Proc 1708 total: 33767424
Proc 16513 total: 348479488
"""


def test_a_snapshot_gives_each_process_and_the_global_total() -> None:
    found = parse_gpumem(SNAPSHOT)
    assert found is not None and found.message is None
    (gpu,) = found.gpus
    assert gpu.gpu_id == 0 and gpu.global_bytes == 391626752
    assert gpu.processes == {504: 170385408, 1708: 33767424, 16513: 348479488}
    # per-process totals count shared buffers in each holder: more than the global total here
    assert sum(gpu.processes.values()) > gpu.global_bytes
    assert found.process_bytes(16513) == 348479488
    assert found.process_bytes(777) == 0  # not listed in a valid snapshot: holds none


def test_other_sections_of_dumpsys_gpu_are_skipped_and_imported_memory_is_read() -> None:
    text = ("GpuService state:\n  Game Driver: unsupported\n\n"
            "Memory snapshot for GPU 0:\nGlobal total: N/A, imported: N/A\n"
            "Proc 10 total: 4096, imported: 1024\nProc 11 total: 8192, imported: 0\n"
            "Memory snapshot for GPU 1:\nGlobal total: 65536, imported: 0\n"
            "Proc 10 total: 512, imported: 0\n")
    found = parse_gpumem(text)
    assert found is not None
    first, second = found.gpus
    assert first.global_bytes is None and first.imported == {10: 1024, 11: 0}
    assert second.gpu_id == 1 and second.global_bytes == 65536
    assert found.process_bytes(10) == 4096 + 512  # every GPU's share


def test_the_services_one_line_answers_and_a_phone_without_it() -> None:
    failed = parse_gpumem("Failed to initialize GPU memory eBPF\n")
    assert failed is not None and failed.gpus == () and failed.process_bytes(1) is None
    empty = parse_gpumem("GPU memory usage maps are empty\n")
    assert empty is not None and empty.process_bytes(1) == 0  # nobody holds GPU memory yet
    assert parse_gpumem("Can't find service: gpu\n") is None
    assert parse_gpumem("") is None
    assert parse_gpumem("Proc 1 total: 5\n") is None  # no snapshot header: not GpuService's
