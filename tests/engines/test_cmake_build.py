"""The cmake command lines (exact, for host, Android and the arm64 cross compiler), the CPU
features a manifest records, and the pure helpers around a build."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.artifacts.cmake_build import (
    CROSS_VARIANTS,
    DEFAULT_TARGETS,
    GENERATOR_TARGET,
    HOST_VARIANTS,
    build_argv,
    build_llama_cpp,
    cmake_defines,
    collect_products,
    compile_llama_cpp,
    compiler_cache,
    configure_argv,
    cpu_features,
    cross_toolchain_text,
    cross_variant_key,
    ensure_cross_build,
    find_cross_compilers,
    host_variant_key,
    parse_defines,
    parse_progress,
    source_version,
    write_cross_toolchain,
)
from harness.artifacts.cpu_features import arm_features, derive_cpu_features
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


def test_arm64_without_ndk_configures_exactly_the_static_cross_build() -> None:
    """docs/design VIRTUAL_PHONE.md "arm64 without a phone": the toolchain file, native/OpenMP
    off, static link, armv8.2-a+dotprod+fp16; plus our target trimming."""
    toolchain = Path("/cache/toolchains/aarch64-linux-gnu.toolchain.cmake")
    defines = cmake_defines("arm64-v8a", None, toolchain=toolchain)
    argv = configure_argv(SOURCE, WORK, defines, generator="Ninja")
    assert argv == [
        "cmake", "-S", "/src/llama.cpp", "-B", "/cache/cmake/llama.cpp-arm64-v8a", "-G", "Ninja",
        "-DCMAKE_TOOLCHAIN_FILE=/cache/toolchains/aarch64-linux-gnu.toolchain.cmake",
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
        "-DCMAKE_EXE_LINKER_FLAGS=-static",
        "-DGGML_OPENMP=OFF",
        "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16",
    ]
    assert not any("ANDROID" in item for item in argv)
    # an NDK, when given, wins over the cross compiler: real phones keep the NDK build
    ndk = cmake_defines("arm64-v8a", NDK, toolchain=toolchain)
    assert ndk["CMAKE_TOOLCHAIN_FILE"].startswith(str(NDK))


def test_cross_toolchain_file_names_the_target_and_both_compilers() -> None:
    text = cross_toolchain_text(
        Path("/usr/bin/aarch64-linux-gnu-gcc"), Path("/usr/bin/aarch64-linux-gnu-g++")
    )
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == [
        "set(CMAKE_SYSTEM_NAME Linux)",
        "set(CMAKE_SYSTEM_PROCESSOR aarch64)",
        "set(CMAKE_C_COMPILER /usr/bin/aarch64-linux-gnu-gcc)",
        "set(CMAKE_CXX_COMPILER /usr/bin/aarch64-linux-gnu-g++)",
        "set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)",
    ]


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None,
                    reason="needs g++-aarch64-linux-gnu")
def test_cross_toolchain_is_written_once_into_the_cache(tmp_path: Path) -> None:
    path = write_cross_toolchain(tmp_path)
    assert path == tmp_path / "toolchains" / "aarch64-linux-gnu.toolchain.cmake"
    gcc, gxx = find_cross_compilers()
    assert path.read_text() == cross_toolchain_text(gcc, gxx)
    mtime = path.stat().st_mtime_ns
    assert write_cross_toolchain(tmp_path) == path
    assert path.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_cross_variant_key_ignores_where_cache_and_compilers_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = cross_variant_key("arm64-release")
    monkeypatch.setenv("PATH", str(tmp_path))  # no compilers at all: a cached build still counts
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "elsewhere"))
    assert cross_variant_key("arm64-release") == key
    assert key not in (host_variant_key("host-release"), host_variant_key("host-slow"))
    with pytest.raises(BuildError, match="unknown arm64 build"):
        cross_variant_key("arm64-fast")


def _no_cross_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH with cmake and git but no aarch64-linux-gnu-* (the package not installed)."""
    bin_dir = tmp_path / "path"
    bin_dir.mkdir()
    for tool in ("cmake", "git", "nice"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("ANDROID_NDK", raising=False)


def test_missing_cross_compiler_is_one_line_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_cross_compiler(tmp_path, monkeypatch)
    with pytest.raises(BuildError, match=r"install g\+\+-aarch64-linux-gnu") as error:
        find_cross_compilers()
    assert "\n" not in str(error.value)
    cache = tmp_path / "cache"
    with pytest.raises(BuildError, match=r"install g\+\+-aarch64-linux-gnu"):
        ensure_cross_build("arm64-release", tmp_path / "builds", cache=cache)
    with pytest.raises(BuildError, match=r"install g\+\+-aarch64-linux-gnu"):
        build_llama_cpp(tmp_path, tmp_path / "builds", "arm64", abi="arm64-v8a", cache=cache)
    assert not (tmp_path / "builds").exists()
    assert not (cache / "cmake").exists()


X86_ON = ["sse42", "f16c", "fma", "bmi2", "avx", "avx2"]


def test_cpu_features_of_host_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """GGML_NATIVE=OFF on a non-cross host build: ggml turns SSE4.2..AVX2 on, AVX-512/AMX off."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    defines = cmake_defines("host", extra=HOST_VARIANTS["host-release"])
    cpu = derive_cpu_features("x86_64", defines)
    assert cpu.arch == "x86_64"
    assert cpu.enabled == X86_ON
    assert cpu.arch_flags == ("-msse4.2", "-mf16c", "-mfma", "-mbmi2", "-mavx", "-mavx2")
    assert not cpu.has("avx512") and not cpu.has("amx_int8") and not cpu.kleidiai
    assert cpu.summary() == "x86_64 sse42 f16c fma bmi2 avx avx2"
    if os.uname().machine == "x86_64":
        assert cpu_features("host", defines) == cpu


def test_cpu_features_of_host_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    cpu = derive_cpu_features("x86_64", cmake_defines("host", extra=HOST_VARIANTS["host-slow"]))
    assert cpu.enabled == ["sse42"]
    assert cpu.arch_flags == ("-msse4.2",)
    assert dict(cpu.features) == {name: name == "sse42" for name, _ in cpu.features}


def test_cpu_features_of_the_arm64_cross_build() -> None:
    toolchain = Path("/t/aarch64-linux-gnu.toolchain.cmake")
    defines = cmake_defines("arm64-v8a", None, CROSS_VARIANTS["arm64-release"], toolchain=toolchain)
    cpu = cpu_features("arm64-v8a", defines)
    assert cpu.to_dict() == {
        "arch": "aarch64",
        "arch_flags": ["-march=armv8.2-a+dotprod+fp16"],
        "features": {"dotprod": True, "fp16": True, "i8mm": False, "sve": False, "sme": False},
        "kleidiai": False,
    }
    kleidi = cpu_features("arm64-v8a", {**defines, "GGML_CPU_KLEIDIAI": "ON"})
    assert kleidi.kleidiai and kleidi.summary() == "aarch64 dotprod fp16 kleidiai"


def test_cpu_features_of_the_ndk_build_follow_its_march() -> None:
    """No GGML_CPU_ARM_ARCH: the armv8-a baseline, unless a global -march is passed."""
    baseline = cpu_features("arm64-v8a", cmake_defines("arm64-v8a", NDK))
    assert baseline.arch_flags == () and baseline.enabled == []
    assert baseline.summary() == "aarch64 baseline"
    flags = {"CMAKE_C_FLAGS": "-O2 -march=armv8.6-a+nosve", "GGML_CPU_KLEIDIAI": "ON"}
    tuned = cpu_features("arm64-v8a", cmake_defines("arm64-v8a", NDK, flags))
    assert tuned.arch_flags == ("-march=armv8.6-a+nosve",)
    assert tuned.enabled == ["dotprod", "i8mm"] and tuned.kleidiai


def test_x86_defaults_are_off_when_reproducible_or_cross() -> None:
    """ggml's INS_ENB: SOURCE_DATE_EPOCH or a toolchain file turn SSE4.2..AVX2 defaults off."""
    defines = cmake_defines("host")
    assert derive_cpu_features("x86_64", defines, env={"SOURCE_DATE_EPOCH": "0"}).enabled == []
    cross = {**defines, "CMAKE_TOOLCHAIN_FILE": "x.cmake", "GGML_AVX2": "on"}
    assert derive_cpu_features("x86_64", cross, env={}).enabled == ["avx2"]


@pytest.mark.parametrize(
    "march",
    ["armv8-a", "armv8.2-a", "armv8.2-a+dotprod+fp16", "armv8.4-a", "armv8.6-a", "armv9-a",
     "armv8.2-a+sve", "armv8.2-a+fp16fml", "armv8.6-a+nodotprod", "armv9-a+nofp16",
     "armv8.2-a+i8mm"],
)
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None,
                    reason="needs g++-aarch64-linux-gnu")
def test_arm_features_agree_with_the_compilers_own_macros(march: str) -> None:
    macros = subprocess.run(
        ["aarch64-linux-gnu-gcc", f"-march={march}", "-dM", "-E", "-"], input="",
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()
    compiler = {
        "dotprod": "__ARM_FEATURE_DOTPROD" in macros,
        "fp16": "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC" in macros,
        "i8mm": "__ARM_FEATURE_MATMUL_INT8" in macros,
        "sve": "__ARM_FEATURE_SVE" in macros,
        "sme": "__ARM_FEATURE_SME" in macros,
    }
    assert arm_features(f"-march={march}") == compiler


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


def _tiny_tree(root: Path) -> Path:
    """A two-file stand-in for a llama.cpp tree: its top project is named like llama.cpp's, it
    has ``llama`` and ``ggml`` libraries and a ``llama-bench`` tool, and no llama.h."""
    tree = root / "tree"
    tree.mkdir()
    (tree / "lib.c").write_text("int tiny_llama(void) { return 0; }\n")
    (tree / "bench.c").write_text("int main(void) { return 0; }\n")
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.19)\n"
        'project("llama.cpp" C CXX)\n'
        "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
        "add_library(llama STATIC lib.c)\n"
        "add_library(ggml STATIC lib.c)\n"
        "add_executable(llama-bench bench.c)\n")
    return tree


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                    reason="needs cmake and a C++ compiler")
def test_a_tree_the_generator_does_not_compile_against_still_builds_its_tools(
        tmp_path: Path) -> None:
    """harness-generate is added through the project include and built last: where its llama.h
    calls do not exist (here no llama.h at all), the tree's tools still build, without it."""
    tree = _tiny_tree(tmp_path)
    products = compile_llama_cpp(tree, tmp_path / "work", {}, DEFAULT_TARGETS, jobs=2)
    assert GENERATOR_TARGET in DEFAULT_TARGETS
    assert (products / "llama-bench").is_file()
    assert not (products / GENERATOR_TARGET).exists()
    assert list(collect_products(products, DEFAULT_TARGETS)) == ["bin/llama-bench"]
    log = (tmp_path / "work" / "harness-build.log").read_text()
    assert "harness_generate.cpp" in log  # it was tried, and the log says why it failed
    # asked for alone, a generator that cannot build is the build's error
    with pytest.raises(BuildError):
        compile_llama_cpp(tree, tmp_path / "work", {}, (GENERATOR_TARGET,), jobs=2)


def test_every_compile_goes_through_ccache_where_installed_and_not_when_turned_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ccache").write_text("#!/bin/sh\nexit 0\n")
    (fake / "ccache").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    monkeypatch.delenv("HARNESS_CCACHE", raising=False)
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    defines = compiler_cache(tmp_path / "work")
    # the same launcher for C and C++: paths under the tree's folder hashed relative to it,
    # the objects in the harness's cache whatever HOME the build runs with
    assert defines == dict.fromkeys(
        ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER"),
        f"env;CCACHE_DIR={tmp_path / 'cache' / 'ccache'};CCACHE_BASEDIR={tmp_path / 'work'};"
        "CCACHE_NOHASHDIR=1;ccache")
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "mine"))
    launcher = compiler_cache(tmp_path)["CMAKE_C_COMPILER_LAUNCHER"]
    assert f"CCACHE_DIR={tmp_path / 'mine'};" in launcher  # the user's own cache, where set
    monkeypatch.setenv("HARNESS_CCACHE", "0")
    # off: ggml's own use of ccache (it finds ccache on PATH by itself) is off too
    assert compiler_cache(tmp_path / "work") == {"GGML_CCACHE": "OFF"}
    monkeypatch.setenv("HARNESS_CCACHE", "1")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert compiler_cache(tmp_path / "work") == {}  # not installed: plain compiles


def _ccache_counts(store: Path) -> dict[str, int]:
    out = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, check=True,
                         env={**os.environ, "CCACHE_DIR": str(store)}).stdout
    counts = dict(line.split("\t") for line in out.splitlines() if line.count("\t") == 1)
    hits = sum(int(counts.get(k, 0)) for k in ("direct_cache_hit", "preprocessed_cache_hit"))
    return {"hits": hits, "misses": int(counts.get("cache_miss", 0))}


@pytest.mark.skipif(any(shutil.which(t) is None for t in ("cmake", "c++", "ccache")),
                    reason="needs cmake, a C++ compiler and ccache")
def test_a_copy_of_a_tree_elsewhere_compiles_only_the_file_that_differs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the planted-bug tree beside the vendored one, or a bisect's worktree: the same files
    in another folder are not compiled again, the edited one is, and each build's objects
    are its own (the edited file's constant is in the second binary only)."""
    monkeypatch.delenv("HARNESS_CCACHE", raising=False)
    store = tmp_path / "ccache"
    monkeypatch.setenv("CCACHE_DIR", str(store))
    first = tmp_path / "vendored"
    first.mkdir()
    (first / "lib.c").write_text("int tiny_llama(void) { return 6; }\n")
    (first / "bench.c").write_text('#include <stdio.h>\nint tiny_llama(void);\n'
                                   'int main(void) { printf("%d\\n", tiny_llama()); return 0; }\n')
    (first / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.19)\n"
        'project("llama.cpp" C)\n'
        "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
        "add_library(llama STATIC lib.c)\n"
        "add_executable(llama-bench bench.c)\n"
        "target_link_libraries(llama-bench llama)\n")
    second = tmp_path / "patched" / "tree"
    shutil.copytree(first, second)
    (second / "lib.c").write_text("int tiny_llama(void) { return 7; }\n")
    built = compile_llama_cpp(first, tmp_path / "trees" / "a" / "build", {}, ("llama-bench",),
                              jobs=2)
    assert _ccache_counts(store) == {"hits": 0, "misses": 2}
    assert (tmp_path / "trees" / "a" / "src").resolve() == first  # the layout: <tree>/src
    again = compile_llama_cpp(second, tmp_path / "trees" / "b" / "build", {}, ("llama-bench",),
                              jobs=2)
    assert _ccache_counts(store) == {"hits": 1, "misses": 3}  # bench.c hit, lib.c compiled
    outputs = [subprocess.run([str(b / "llama-bench")], capture_output=True, text=True,
                              check=True).stdout for b in (built, again)]
    assert outputs == ["6\n", "7\n"]
