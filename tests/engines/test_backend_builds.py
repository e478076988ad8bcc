"""``harness build llama.cpp --backend``: the cmake options of llama.cpp's own docs, tested
exactly, and one line naming what a backend needs and this machine lacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.artifacts.cmake_build import (
    BACKEND_ENV,
    BACKEND_NAMES,
    HOST_BACKEND_VARIANTS,
    VULKAN_COMPAT,
    backend_defines,
    backend_problem,
    cmake_defines,
    host_variant_key,
)
from harness.cli import main

NDK = Path("/opt/ndk")


def test_vulkan_defines_and_the_host_header_shim() -> None:
    assert backend_defines("vulkan", "host") == {
        "GGML_VULKAN": "ON", "CMAKE_CXX_FLAGS": f"-I{VULKAN_COMPAT}"}
    assert backend_defines("vulkan", "arm64-v8a", ndk=NDK) == {"GGML_VULKAN": "ON"}
    assert (VULKAN_COMPAT / "vulkan" / "vulkan.hpp").is_file()
    assert backend_defines("cpu", "host") == {}


def test_opencl_and_hexagon_defines_follow_llama_cpp_docs() -> None:
    opencl = {"GGML_OPENCL": "ON", "GGML_OPENCL_USE_ADRENO_KERNELS": "ON",
              "GGML_OPENCL_EMBED_KERNELS": "ON"}
    assert backend_defines("opencl", "arm64-v8a", ndk=NDK) == opencl
    hexagon = backend_defines("hexagon", "arm64-v8a", ndk=NDK, hexagon_sdk=Path("/h/sdk"),
                              hexagon_tools=Path("/h/tools"))
    assert hexagon == {**opencl, "GGML_HEXAGON": "ON", "HEXAGON_SDK_ROOT": "/h/sdk",
                       "HEXAGON_TOOLS_ROOT": "/h/tools", "PREBUILT_LIB_DIR": "android_aarch64",
                       "GGML_OPENMP": "OFF", "GGML_LLAMAFILE": "OFF"}
    defines = cmake_defines("arm64-v8a", NDK, hexagon)
    assert defines["CMAKE_TOOLCHAIN_FILE"] == "/opt/ndk/build/cmake/android.toolchain.cmake"
    assert defines["ANDROID_ABI"] == "arm64-v8a" and defines["GGML_HEXAGON"] == "ON"
    assert BACKEND_NAMES["hexagon"] == ("opencl", "hexagon")
    assert BACKEND_ENV["hexagon"] == {"ADSP_LIBRARY_PATH": "{lib}"}


def _exists(paths: set[str]) -> object:
    return lambda path: str(path) in paths


def test_what_a_backend_needs_is_named_in_one_line() -> None:
    none: set[str] = set()
    vk = backend_problem("vulkan", "host", None, which=lambda _: None, exists=_exists(none))
    assert vk == ("--backend vulkan needs glslc, libvulkan-dev, spirv-headers: apt-get install "
                  "glslc libvulkan-dev spirv-headers (and mesa-vulkan-drivers to run on this "
                  "host)")
    assert "needs the Android NDK" in (backend_problem("opencl", "arm64-v8a", None) or "")
    assert "needs the Android NDK" in (backend_problem("vulkan", "arm64-v8a", None) or "")
    cl = backend_problem("opencl", "arm64-v8a", NDK, exists=_exists(none)) or ""
    assert cl.startswith("--backend opencl: /opt/ndk/toolchains/llvm/prebuilt/linux-x86_64/"
                         "sysroot/usr/include/CL/cl.h is missing")
    sysroot = NDK / "toolchains/llvm/prebuilt/linux-x86_64/sysroot"
    ready = {str(sysroot / "usr/include/CL/cl.h"),
             str(sysroot / "usr/lib/aarch64-linux-android/libOpenCL.so")}
    assert backend_problem("opencl", "arm64-v8a", NDK, exists=_exists(ready)) is None
    hx = backend_problem("hexagon", "arm64-v8a", NDK, exists=_exists(ready)) or ""
    assert hx.startswith("--backend hexagon needs the Hexagon SDK: --hexagon-sdk (not given")
    for problem in (vk, cl, hx):
        assert "\n" not in problem


def test_the_host_vulkan_variant_is_keyed_by_content_not_by_path() -> None:
    assert HOST_BACKEND_VARIANTS == {"host-vulkan": "vulkan"}
    key = host_variant_key("host-vulkan")
    assert key != host_variant_key("host-release") and len(key) == 16


def test_cli_refuses_opencl_without_an_ndk_and_makes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    source = tmp_path / "src"
    source.mkdir()
    (source / "CMakeLists.txt").write_text("")
    builds = tmp_path / "builds"
    result = CliRunner().invoke(main, ["build", "llama.cpp", "--source", str(source), "--name",
                                       "adreno", "--abi", "arm64-v8a", "--backend", "opencl",
                                       "--builds", str(builds)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--backend opencl needs the Android NDK" in lines[0]
    assert not builds.exists()
