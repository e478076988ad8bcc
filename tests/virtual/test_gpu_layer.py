"""The GPU memory layer: its report format, its build, and a real Vulkan program under it.

The end-to-end tests run a small C program on Mesa's software Vulkan driver (lavapipe) with the
layer enabled through the environment, and read back what the layer reported for its pid.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.errors import BuildError
from harness.virtual import gpulayer
from harness.virtual.gpulayer import (
    LAYER_NAME,
    GpuMemory,
    ensure_gpu_layer,
    layer_environment,
    parse_report,
    read_reports,
)
from virtual.vulkan_c import program

MIB = 1 << 20
LAVAPIPE_ICD = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")
VK_LAYER_H = Path("/usr/include/vulkan/vk_layer.h")
# Loader variables that could enable, disable or relocate layers from the test's own environment.
LOADER_VARIABLES = ("VK_LAYER_PATH", "VK_ADD_LAYER_PATH", "VK_INSTANCE_LAYERS",
                    "VK_LOADER_LAYERS_ENABLE", "VK_LOADER_LAYERS_DISABLE", "VK_ICD_FILENAMES",
                    "VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES", "VK_LOADER_DRIVERS_SELECT",
                    "VK_LOADER_DRIVERS_DISABLE", gpulayer.REPORT_ENV)

# Creates an instance and a device on the first physical device, allocates 1, 2 and 4 MiB from
# the first memory type a buffer may use, frees the 2 MiB one, prints "ok", then waits for its
# stdin to close and exits holding the rest (no vkDestroyDevice: the final report is 5 MiB).
ALLOCATOR = program(r"""
#include <stdio.h>
#include <vulkan/vulkan.h>
#define CHECK(call) do { VkResult r_ = (call); if (r_ != VK_SUCCESS) { \
    fprintf(stderr, "%s failed: %d\n", #call, (int)r_); return 1; } } while (0)
int main(void) {
""", r"""
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = 1 << 20,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkBuffer buffer;
    CHECK(vkCreateBuffer(device, &bci, NULL, &buffer));
    VkMemoryRequirements needs;
    vkGetBufferMemoryRequirements(device, buffer, &needs);
    vkDestroyBuffer(device, buffer, NULL);
    uint32_t type = 0;
    while (type < 32 && !(needs.memoryTypeBits & (1u << type))) type++;
    if (type == 32) {
        fprintf(stderr, "no memory type\n");
        return 1;
    }
    VkDeviceMemory memory[3];
    for (int i = 0; i < 3; i++) {
        VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                    .allocationSize = (VkDeviceSize)(1u << 20) << i,
                                    .memoryTypeIndex = type};
        CHECK(vkAllocateMemory(device, &mai, NULL, &memory[i]));
    }
    vkFreeMemory(device, memory[1], NULL);
    vkFreeMemory(device, VK_NULL_HANDLE, NULL);
    puts("ok");
    fflush(stdout);
    while (getchar() != EOF) {}
    return 0;
}
""")


def test_parse_report_reads_the_layer_line() -> None:
    assert parse_report("5242880 7340032 2\n") == GpuMemory(5 * MIB, 7 * MIB, 2)
    assert parse_report("0 0 0\n") == GpuMemory(0, 0, 0)
    big = 1 << 40
    assert parse_report(f"{big} {big} 1\n") == GpuMemory(big, big, 1)


@pytest.mark.parametrize("text", [
    "", "\n", "5242880 7340032\n", "5242880 7340032 2", "5242880 7340032 2\n\n",
    "a b c\n", "1.5 2 1\n", " 1 2 3\n", "1  2 3\n", "1\t2\t3\n", "1 2 3 \n", "0x10 16 1\n",
    "١ ٢ ٣\n",  # non-ASCII digits
    "8 4 1\n",  # current above peak
])
def test_parse_report_refuses_malformed_lines(text: str) -> None:
    assert parse_report(text) is None


@pytest.mark.parametrize("text", ["-1 2 3\n", "1 -2 3\n", "1 2 -3\n", "+1 2 3\n"])
def test_parse_report_refuses_signs(text: str) -> None:
    assert parse_report(text) is None


@pytest.mark.parametrize("text", ["1 2 3 4\n", "1 2 3 extra\n", "1 2 3\n4 5 6\n"])
def test_parse_report_refuses_extra_fields(text: str) -> None:
    assert parse_report(text) is None


def test_read_reports_skips_temporaries_and_junk(tmp_path: Path) -> None:
    (tmp_path / "101").write_text("3 4 1\n")
    (tmp_path / "101.tmp").write_text("9 9 9\n")
    (tmp_path / "102").write_text("garbage\n")
    (tmp_path / "notes").write_text("1 1 1\n")
    (tmp_path / "103").mkdir()
    (tmp_path / "104").write_bytes(b"\xff\xfe\n")
    assert read_reports(tmp_path) == {101: GpuMemory(3, 4, 1)}
    assert read_reports(tmp_path / "missing") == {}


def test_layer_environment_names_the_layer(tmp_path: Path) -> None:
    env = layer_environment(tmp_path / "layer", tmp_path / "reports")
    assert env == {"VK_LAYER_PATH": str(tmp_path / "layer"), "VK_INSTANCE_LAYERS": LAYER_NAME,
                   "VK_LOADER_LAYERS_ENABLE": LAYER_NAME,
                   "HARNESS_GPU_MEM_DIR": str(tmp_path / "reports")}


def test_missing_compiler_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(BuildError, match=r"apt-get install gcc") as caught:
        ensure_gpu_layer(tmp_path)
    assert "\n" not in str(caught.value)


def _need_toolchain() -> str:
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("needs a C compiler (cc)")
    if not VK_LAYER_H.is_file():
        pytest.skip(f"needs the Vulkan headers ({VK_LAYER_H}): apt-get install libvulkan-dev")
    return compiler


def test_missing_vulkan_headers_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    _need_toolchain()
    source = tmp_path / "gpumem_layer.c"
    source.write_text("#include <vulkan/no_such_header_here.h>\n")
    monkeypatch.setattr(gpulayer, "LAYER_SOURCE", source)
    with pytest.raises(BuildError, match=r"apt-get install libvulkan-dev") as caught:
        ensure_gpu_layer(tmp_path / "cache")
    assert "\n" not in str(caught.value)
    assert not list((tmp_path / "cache").rglob("*.so"))


@pytest.fixture
def allocator(tmp_path: Path) -> tuple[Path, Path]:
    """(layer directory, allocator program), both built under tmp_path."""
    compiler = _need_toolchain()
    if not LAVAPIPE_ICD.is_file():
        pytest.skip(f"needs Mesa's software Vulkan driver ({LAVAPIPE_ICD}): "
                    "apt-get install mesa-vulkan-drivers")
    layer_dir = ensure_gpu_layer(tmp_path / "cache")
    source = tmp_path / "allocator.c"
    source.write_text(ALLOCATOR)
    program = tmp_path / "allocator"
    subprocess.run([compiler, "-std=c11", "-O1", "-Wall", "-o", str(program), str(source),
                    "-lvulkan"], check=True, timeout=60)
    return layer_dir, program


def _clean_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LOADER_VARIABLES}
    env["VK_ICD_FILENAMES"] = str(LAVAPIPE_ICD)
    return env


def _run(program: Path, env: dict[str, str], check_alive: Path | None = None) -> int:
    """Runs the allocator to its "ok", optionally checks the live report, then lets it exit."""
    with subprocess.Popen([str(program)], env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stdin is not None
            line = process.stdout.readline()
            if line != "ok\n":
                process.kill()
                _, err = process.communicate(timeout=10)
                pytest.fail(f"allocator said {line!r}, exit {process.returncode}: {err}")
            if check_alive is not None:
                assert read_reports(check_alive) == {process.pid: GpuMemory(5 * MIB, 7 * MIB, 2)}
            _, err = process.communicate(timeout=10)  # closes stdin: the program exits
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 0, err
    return process.pid


def test_layer_counts_a_real_programs_allocations(allocator: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
    layer_dir, program = allocator
    manifest = json.loads((layer_dir / "gpumem_layer.json").read_text())
    assert manifest["file_format_version"] == "1.2.0"
    assert manifest["layer"]["name"] == LAYER_NAME
    assert (layer_dir / manifest["layer"]["library_path"]).resolve().is_file()
    assert ensure_gpu_layer(tmp_path / "cache") == layer_dir  # cached: made once

    reports = tmp_path / "reports"
    reports.mkdir()
    env = _clean_environment() | layer_environment(layer_dir, reports)
    pid = _run(program, env, check_alive=reports)
    assert read_reports(reports) == {pid: GpuMemory(5 * MIB, 7 * MIB, 2)}
    assert sorted(p.name for p in reports.iterdir()) == [str(pid)]  # no temporary left
    assert (reports / str(pid)).read_text() == f"{5 * MIB} {7 * MIB} 2\n"


def test_layer_is_not_loaded_without_its_environment(allocator: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    _, program = allocator
    reports = tmp_path / "reports"
    reports.mkdir()
    # The report directory alone: the layer is explicit, so the loader must not load it.
    env = _clean_environment() | {gpulayer.REPORT_ENV: str(reports)}
    _run(program, env)
    assert list(reports.iterdir()) == []
