"""The cmake command lines (exact, for host and Android) and the pure helpers around a build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.artifacts.cmake_build import (
    HOST_VARIANTS,
    build_argv,
    cmake_defines,
    collect_products,
    configure_argv,
    host_variant_key,
    parse_defines,
    parse_progress,
    source_version,
)
from harness.errors import BuildError

NDK = Path("/opt/android-ndk-r27")
SOURCE = Path("/src/llama.cpp")
WORK = Path("/cache/cmake/llama.cpp-arm64-v8a")


def test_arm64_configure_command_is_exactly_the_documented_android_one() -> None:
    """docs/android.md: toolchain file, ANDROID_ABI, ANDROID_PLATFORM=android-28, native/OpenMP/
    llamafile/OpenSSL off, no global -march; plus our target trimming."""
    argv = configure_argv(SOURCE, WORK, cmake_defines("arm64-v8a", NDK), generator="Ninja")
    assert argv == [
        "cmake", "-S", "/src/llama.cpp", "-B", "/cache/cmake/llama.cpp-arm64-v8a", "-G", "Ninja",
        "-DCMAKE_TOOLCHAIN_FILE=/opt/android-ndk-r27/build/cmake/android.toolchain.cmake",
        "-DANDROID_ABI=arm64-v8a",
        "-DANDROID_PLATFORM=android-28",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_BUILD_APP=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DCMAKE_BUILD_RPATH=$ORIGIN/../lib",
        "-DGGML_NATIVE=OFF",
        "-DGGML_OPENMP=OFF",
        "-DGGML_LLAMAFILE=OFF",
    ]
    assert not any("-march" in item for item in argv)


def test_user_defines_override_the_android_defaults_and_come_last() -> None:
    defines = cmake_defines(
        "arm64-v8a", NDK, {"ANDROID_PLATFORM": "android-33", "CMAKE_C_FLAGS": "-march=armv8.7a"}
    )
    argv = configure_argv(SOURCE, WORK, defines)
    assert "-DANDROID_PLATFORM=android-33" in argv
    assert "-DANDROID_PLATFORM=android-28" not in argv
    assert argv[-1] == "-DCMAKE_C_FLAGS=-march=armv8.7a"
    assert "-G" not in argv


def test_host_build_always_turns_native_off() -> None:
    defines = cmake_defines("host")
    assert defines["GGML_NATIVE"] == "OFF"
    assert "CMAKE_TOOLCHAIN_FILE" not in defines
    with pytest.raises(BuildError, match="AMX"):
        cmake_defines("host", extra={"GGML_NATIVE": "ON"})


def test_android_without_ndk_is_a_clean_error() -> None:
    with pytest.raises(BuildError, match="--ndk"):
        cmake_defines("arm64-v8a", None)


def test_unknown_abi_is_rejected() -> None:
    with pytest.raises(BuildError, match="unknown --abi 'mips'"):
        cmake_defines("mips")


def test_build_command_names_each_target_and_the_job_count() -> None:
    assert build_argv(WORK, ["llama-bench", "llama-cli"], 2) == [
        "cmake", "--build", str(WORK), "--config", "Release", "-j", "2",
        "--target", "llama-bench", "--target", "llama-cli",
    ]


def test_defines_parse_key_value_and_drop_a_cmake_type() -> None:
    assert parse_defines(["GGML_AVX2=OFF", "CMAKE_C_FLAGS:STRING=-O2 -g", "EMPTY="]) == {
        "GGML_AVX2": "OFF", "CMAKE_C_FLAGS": "-O2 -g", "EMPTY": ""
    }
    with pytest.raises(BuildError, match="KEY=VALUE"):
        parse_defines(["-DGGML_AVX2=OFF"])


@pytest.mark.parametrize(
    ("line", "fraction"),
    [
        ("[ 42%] Building C object ggml/src/ggml.c.o", 0.42),
        ("[100%] Linking CXX executable ../../bin/llama-bench", 1.0),
        ("[12/80] Building CXX object src/llama.cpp.o", 0.15),
        ("-- Configuring done", None),
        ("In file included from [ 42%]", None),
    ],
)
def test_progress_is_read_from_make_and_ninja_lines(line: str, fraction: float | None) -> None:
    assert parse_progress(line) == fraction


def test_slow_variant_differs_from_release_only_in_simd_flags() -> None:
    release = cmake_defines("host", extra=HOST_VARIANTS["host-release"])
    slow = cmake_defines("host", extra=HOST_VARIANTS["host-slow"])
    changed = {k for k in slow if release.get(k) != slow[k]}
    assert changed == {"GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2"}
    assert host_variant_key("host-release") != host_variant_key("host-slow")
    with pytest.raises(BuildError, match="unknown host build"):
        host_variant_key("host-fast")


def test_products_keep_the_soname_of_each_library_once(tmp_path: Path) -> None:
    (tmp_path / "llama-bench").write_text("exe")
    (tmp_path / "libllama.so.0.5.0").write_text("lib")
    os.symlink("libllama.so.0.5.0", tmp_path / "libllama.so.0")
    os.symlink("libllama.so.0", tmp_path / "libllama.so")
    (tmp_path / "libggml-base.so").write_text("unversioned")
    files = collect_products(tmp_path, ["llama-bench"])
    assert sorted(files) == ["bin/llama-bench", "lib/libggml-base.so", "lib/libllama.so.0"]
    with pytest.raises(BuildError, match="'llama-cli' was not produced"):
        collect_products(tmp_path, ["llama-cli"])


def test_source_version_reads_the_top_level_cmakelists() -> None:
    text = "set(LLAMA_VERSION_MAJOR 0)\nset(LLAMA_VERSION_MINOR 5)\nset(LLAMA_VERSION_PATCH 0)\n"
    assert source_version(text) == "0.5.0"
    assert source_version("project(llama.cpp)") is None
