"""Which devices a build has on a phone (``--list-devices``), and what llama.cpp's log says
about a GPU run: device buffers, offloaded layers, the backend's driver line."""

from __future__ import annotations

import dataclasses

import pytest
from analysis.factory import cell

from harness.engines.devices import (
    Capability,
    ComputeDevice,
    capability_from_output,
    device_problem,
    parse_list_devices,
)
from harness.engines.llamalog import host_buffer, parse_memory_log
from harness.engines.pybench import PyBench

# as llama.cpp's common_print_available_devices prints (common/arg.cpp)
VULKAN = ("Available devices:\n"
          "  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)\n")
ADRENO = ("ggml_opencl: selected platform: 'QUALCOMM Snapdragon(TM)'\n"
          "Available devices:\n"
          "  GPUOpenCL: QUALCOMM Adreno(TM) 750 (0 MiB, 0 MiB free)\n"
          "  HTP0: Hexagon (2048 MiB, 2048 MiB free)\n")

CELL = cell()  # a CPU cell of the tiny model (analysis/factory.py)


def test_list_devices_is_read_as_printed() -> None:
    assert parse_list_devices(VULKAN) == (
        ComputeDevice("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", 2048, 2048),)
    assert [d.name for d in parse_list_devices(ADRENO) or ()] == ["GPUOpenCL", "HTP0"]
    assert parse_list_devices("Available devices:\n  (none)\n") == ()
    assert parse_list_devices("error: unknown argument: --list-devices\n") is None


def test_a_device_the_build_or_phone_lacks_is_unsupported_with_the_reason() -> None:
    vulkan = capability_from_output("host-vulkan", 0, VULKAN, "")
    assert device_problem("Vulkan0", vulkan, "S1") is None
    assert device_problem("none", vulkan, "S1") is None  # the CPU is always there
    cpu_only = capability_from_output("host-vulkan", 0, "Available devices:\n  (none)\n", "")
    problem = device_problem("Vulkan0", cpu_only, "S1") or ""
    assert "build host-vulkan on S1 has no device Vulkan0 (it has: none but the CPU)" in problem
    wrong = device_problem("HTP0", vulkan, "S1") or ""
    assert "(it has: Vulkan0)" in wrong
    old = capability_from_output("old", 1, "", "error: invalid parameter for argument: "
                                 "--list-devices\n")
    assert old.unknown is not None and "invalid parameter" in old.unknown
    assert "could not list its devices" in (device_problem("Vulkan0", old, "S1") or "")
    assert device_problem("Vulkan0", None, "S1") is None  # not asked: llama-bench decides


VULKAN_LOG = """ggml_vulkan: Found 1 Vulkan devices:
ggml_vulkan: 0 = llvmpipe (LLVM 15.0.6, 256 bits) (llvmpipe) | uma: 0 | fp16: 0 | bf16: 0
load_tensors: offloading output layer to GPU
load_tensors: offloading 3 repeating layers to GPU
load_tensors: offloaded 5/9 layers to GPU
load_tensors:      Vulkan0 model buffer size =    10.50 MiB
load_tensors:   CPU_Mapped model buffer size =    12.00 MiB
llama_kv_cache:    Vulkan0 KV buffer size =     0.75 MiB
llama_kv_cache:        CPU KV buffer size =     0.25 MiB
llama_context:    Vulkan0 compute buffer size =     4.00 MiB
llama_context: Vulkan_Host compute buffer size =     0.50 MiB
llama_context:        CPU compute buffer size =     1.00 MiB
llama_context:    Vulkan0 compute buffer size =     3.00 MiB
"""


def test_the_log_gives_device_buffers_layers_and_driver() -> None:
    log = parse_memory_log(VULKAN_LOG)
    MiB = 2**20
    # the largest compute buffer of each kind counts once; host buffers are not the device's
    assert log.device_bytes == round((10.5 + 0.75 + 4.0) * MiB)
    assert (log.offloaded_layers, log.model_layers) == (5, 9)
    assert log.driver is not None and log.driver.startswith("ggml_vulkan: 0 = llvmpipe")
    assert log.compute_bytes == 1 * MiB  # the CPU's own, as before
    assert host_buffer("CPU_REPACK") and host_buffer("Vulkan_Host") and not host_buffer("HTP0")
    cpu = parse_memory_log("llama_context:        CPU compute buffer size =     1.00 MiB\n")
    assert cpu.device_bytes is None and cpu.offloaded_layers is None and cpu.driver is None


# Older and other builds' lines, in the shapes their format strings give (figures made up):
# OpenCL's device lines, buffers named by the device, older Vulkan's "Vulkan0: ... | uma:".
OPENCL_OLD_LOG = """ggml_opencl: selected platform: 'QUALCOMM Snapdragon(TM)'
ggml_opencl: device: 'QUALCOMM Adreno(TM) 750 (OpenCL 3.0 Adreno(TM) 750)'
ggml_opencl: default device: 'QUALCOMM Adreno(TM) 750 (OpenCL 3.0 Adreno(TM) 750)'
load_tensors: offloaded 9/9 layers to GPU
load_tensors: Adreno (TM) 750 model buffer size =    20.00 MiB
load_tensors:   CPU_Mapped model buffer size =     4.00 MiB
llama_kv_cache_unified: Adreno (TM) 750 KV buffer size =     2.00 MiB
llama_context: Adreno (TM) 750 compute buffer size =     6.00 MiB
llama_context:  OpenCL_Host compute buffer size =     1.00 MiB
"""


@pytest.mark.parametrize(("log", "driver"), [
    (OPENCL_OLD_LOG, "ggml_opencl: device: 'QUALCOMM Adreno(TM) 750 (OpenCL 3.0 Adreno(TM) 750)'"),
    ("ggml_opencl: default device: 'QUALCOMM Adreno(TM) 840 (OpenCL 3.0 Adreno(TM) 840)'\n",
     "ggml_opencl: default device: 'QUALCOMM Adreno(TM) 840 (OpenCL 3.0 Adreno(TM) 840)'"),
    ("ggml_vulkan: Found 1 Vulkan devices:\n"
     "Vulkan0: Adreno (TM) 740 (Qualcomm Technologies Inc. Adreno Vulkan Driver) | uma: 1 | "
     "fp16: 1 | warp size: 64\n",
     "Vulkan0: Adreno (TM) 740 (Qualcomm Technologies Inc. Adreno Vulkan Driver) | uma: 1 | "
     "fp16: 1 | warp size: 64"),
    ("Available devices:\n  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (7802 MiB, 7802 MiB free)\n"
     "llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) "
     "- 7802 MiB free\n",
     "using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) - 7802 MiB free"),
])
def test_driver_lines_of_older_and_other_builds(log: str, driver: str) -> None:
    assert parse_memory_log(log).driver == driver


def test_buffers_named_by_their_device_count_as_the_device_s() -> None:
    log = parse_memory_log(OPENCL_OLD_LOG)
    MiB = 2**20
    assert log.device_bytes == (20 + 2 + 6) * MiB  # CPU_Mapped and OpenCL_Host stay the host's
    assert {name for name, _, _ in log.device_buffers} == {"Adreno (TM) 750"}
    assert (log.offloaded_layers, log.model_layers) == (9, 9)


def test_llama_cpp_python_offloads_only_where_its_wheel_can() -> None:
    gpu = dataclasses.replace(CELL, compute_device="Vulkan0", n_gpu_layers=-1)
    assert "no GPU backend" in (PyBench().supports(gpu) or "")
    assert PyBench(gpu_offload=True).supports(gpu) is None
    argv = PyBench(gpu_offload=True).argv(gpu, "python", "m.gguf")
    assert argv[argv.index("--device") + 1] == "Vulkan0"
    assert argv[argv.index("--n-gpu-layers") + 1] == "-1"
    assert PyBench().supports(CELL) is None
    assert "device none runs every layer" in (PyBench().supports(
        dataclasses.replace(CELL, n_gpu_layers=3)) or "")


def test_a_capability_names_its_devices() -> None:
    cap = Capability("b", (ComputeDevice("Vulkan0", "x"),))
    assert cap.names() == ("Vulkan0",) and cap.find("Vulkan0") is not None


def test_a_llama_bench_without_list_devices_gives_its_usage_and_so_its_dialect() -> None:
    """llama-bench answers a flag it lacks with an error line on stderr and its usage on stdout
    (parse_cmd_params); a usage without --device is a build too old for -dev, whose CPU cells
    of a GPU build are then unsupported rather than run with -ngl 0 alone."""
    from harness.engines.llama_bench import LlamaBench, dialect_from_help

    usage = ("usage: ./llama-bench [options]\n\noptions:\n  -h, --help\n"
             "  -ngl, --n-gpu-layers <n>                  (default: 99)\n"
             "  -mmp, --mmap <0|1>                        (default: 1)\n")
    found = capability_from_output(
        "old", 1, usage, "error: invalid parameter for argument: --list-devices\n")
    assert found.usage == usage and found.devices == ()
    assert found.unknown is not None and "no --list-devices" in found.unknown
    old = LlamaBench(dialect=dialect_from_help(found.usage), gpu_backends=("Vulkan",))
    reason = old.supports(CELL)
    assert reason is not None and "-ngl 0 alone" in reason
    # a failure of another kind says what it printed, and is not read as a usage
    other = capability_from_output("b", 134, "", "ggml_vulkan: no device\nAborted\n")
    assert other.usage is None and other.unknown == "--list-devices failed (exit 134): Aborted"
