"""Configure and compile llama.cpp with cmake, for this host or for arm64 (Android or Linux).

The command lines are made by pure functions (``cmake_defines``, ``configure_argv``,
``build_argv``) so the Android path can be tested exactly on a machine without an NDK; running
them is a thin layer (``compile_llama_cpp``) that streams cmake's output and reports progress.

Choices, and why:
- Host builds always pass ``GGML_NATIVE=OFF``: a native build on these machines enables AMX and
  segfaults on the first quantised matmul. With native off, ggml still enables SSE4.2/AVX/AVX2/
  BMI2/FMA/F16C, so a portable x86-64-v3 build is what "release" means here.
- Android follows llama.cpp's docs/android.md: the NDK toolchain file, ``ANDROID_ABI``,
  ``ANDROID_PLATFORM=android-28``, ``GGML_NATIVE/GGML_OPENMP/GGML_LLAMAFILE/LLAMA_OPENSSL=OFF``
  and no global ``-march`` (the docs warn it raises the baseline for every source; pass one with
  ``-D CMAKE_C_FLAGS=...`` when you mean it).
- arm64 without an NDK (no ``--ndk``, no ``$ANDROID_NDK``): Debian's ``aarch64-linux-gnu-gcc``/
  ``g++`` (package g++-aarch64-linux-gnu) through a toolchain file the harness writes into its
  cache, and one static ``llama-bench`` (``CMAKE_EXE_LINKER_FLAGS=-static``) that runs on any
  arm64 Linux kernel, a phone's included, and under ``qemu-aarch64`` on this host. OpenMP is off
  (with it on the static link fails: CMake picks libgomp.so), ``GGML_CPU_ARM_ARCH=
  armv8.2-a+dotprod+fp16`` is the baseline of current phone cores.
- Every manifest records the CPU features the build was compiled for (``cpu_features``), derived
  from the cmake defines actually passed.
- ``BUILD_SHARED_LIBS=OFF`` by default: one self-contained ``llama-bench`` to push to a phone, no
  ``LD_LIBRARY_PATH``. ``-D BUILD_SHARED_LIBS=ON`` still works: the libraries are collected into
  ``lib/`` and the binaries find them through an ``$ORIGIN/../lib`` rpath.
- Tests, examples, the server and the unified app are off; only the requested targets are
  built: ``llama-bench`` and ``harness-generate`` (the output check's greedy generator, our own
  source, added to the tree through cmake's project include) by default, neither needs
  ``common``.
- Backends (``--backend``) follow llama.cpp's docs: Vulkan ``GGML_VULKAN=ON`` (glslc and the
  Vulkan headers; the NDK brings both for Android); OpenCL for Adreno ``GGML_OPENCL=ON``,
  ``GGML_OPENCL_USE_ADRENO_KERNELS=ON``, ``GGML_OPENCL_EMBED_KERNELS=ON`` (docs/backend/
  OPENCL.md: the NDK with the OpenCL headers and ICD loader in its sysroot); Hexagon
  ``GGML_HEXAGON=ON`` with OpenCL beside it, ``HEXAGON_SDK_ROOT``/``HEXAGON_TOOLS_ROOT`` and
  ``PREBUILT_LIB_DIR=android_aarch64`` (docs/backend/snapdragon/CMakeUserPresets.json). What a
  backend needs is checked before cmake runs: one line names what is missing. The manifest
  records the backends and the launch environment (Hexagon: ``ADSP_LIBRARY_PATH`` = the build's
  lib/). Host Vulkan builds put ``vulkan_compat/`` first on the include path: Debian 12's Vulkan
  headers (1.3.239) lack VK_EXT_layer_settings, which ggml-vulkan.cpp names.
- The cmake work tree lives in the cache, one per (source tree, ABI, flags). Its CMakeCache.txt
  is dropped before each configure so one variant's ``-D`` never leaks into the next. A lock
  file keeps two builds out of the same tree.
- Every compile goes through ccache where it is installed (``compiler_cache``), in one layout:
  ``<tree>/build`` is cmake's folder and ``<tree>/src`` the source (a link to it, or a bisect's
  worktree itself), and ccache hashes paths under ``<tree>`` relative to it. So a file compiled
  with the same flags in any tree (host-release and the CLI's build of it, the planted-bug
  tree beside the vendored one, a bisect's first commit, host-slow's objects that its CPU flags
  do not touch) is compiled once per machine; only what differs is compiled again. The
  objects stay the compiler's own: ccache answers only for the same preprocessed source,
  compiler and flags, and the paths built into an object (``__FILE__``) are the relative ones.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from harness.artifacts.builds import (
    MANIFEST,
    Build,
    copy_build,
    git_commit,
    open_build,
    write_build,
)
from harness.artifacts.cpu_features import CpuFeatures, derive_cpu_features
from harness.artifacts.llama_source import (
    LLAMA_CPP_PYTHON_VERSION,
    cache_root,
    ensure_llama_source,
    read_source_info,
)
from harness.errors import BuildError

ABIS = ("host", "arm64-v8a")
BACKENDS = ("cpu", "vulkan", "opencl", "hexagon")
VULKAN_COMPAT = Path(__file__).with_name("vulkan_compat")  # our vulkan/vulkan.hpp, see above
_COMPAT_KEY = "<vulkan_compat>"  # the folder's place in cache keys (its content is keyed)
# what each backend adds to the manifest's backends, and the launch environment it needs
BACKEND_NAMES: dict[str, tuple[str, ...]] = {
    "cpu": (), "vulkan": ("vulkan",), "opencl": ("opencl",), "hexagon": ("opencl", "hexagon"),
}
BACKEND_ENV: dict[str, dict[str, str]] = {"hexagon": {"ADSP_LIBRARY_PATH": "{lib}"}}
# the NDK's sysroot, where OpenCL headers and the ICD loader are installed (docs/backend/OPENCL.md)
NDK_SYSROOT = Path("toolchains/llvm/prebuilt/linux-x86_64/sysroot")
ANDROID_PLATFORM = "android-28"
# harness-generate (generator/harness_generate.cpp, ours): greedy continuation of a prompt with
# a trial's knobs, for the output check (harness/run/outputcheck.py). It links only libllama, so
# it adds one source file to a build; generator/generator.cmake declares it in llama.cpp's tree
# (passed as the top-level project's include: the tree itself is never edited).
GENERATOR_TARGET = "harness-generate"
GENERATOR_DIR = Path(__file__).with_name("generator")
GENERATOR_INCLUDE = "CMAKE_PROJECT_llama.cpp_INCLUDE"
DEFAULT_TARGETS = ("llama-bench", GENERATOR_TARGET)
NDK_TOOLCHAIN = Path("build/cmake/android.toolchain.cmake")
# arm64 without an NDK: Debian's cross compiler.
CROSS_TRIPLE = "aarch64-linux-gnu"
CROSS_PACKAGE = "g++-aarch64-linux-gnu"
CROSS_TOOLCHAIN = f"{CROSS_TRIPLE}.toolchain.cmake"

# Options for every llama.cpp build: fewer targets, fewer dependencies.
_COMMON = {
    "CMAKE_BUILD_TYPE": "Release",
    "BUILD_SHARED_LIBS": "OFF",
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF",
    "LLAMA_BUILD_SERVER": "OFF",
    "LLAMA_BUILD_APP": "OFF",
    "LLAMA_CURL": "OFF",
    "LLAMA_OPENSSL": "OFF",
    "CMAKE_BUILD_RPATH": "$ORIGIN/../lib",
}
_HOST = {"GGML_NATIVE": "OFF"}
# docs/android.md of the vendored llama.cpp ("Cross-compile using Android NDK").
_ANDROID = {
    "GGML_NATIVE": "OFF",
    "GGML_OPENMP": "OFF",
    "GGML_LLAMAFILE": "OFF",
}
# docs/design VIRTUAL_PHONE.md "arm64 without a phone": one static binary, no OpenMP (its static
# link fails), dotprod + fp16 arithmetic as on every current phone core.
_CROSS = {
    "GGML_NATIVE": "OFF",
    "LLAMA_CURL": "OFF",
    "BUILD_SHARED_LIBS": "OFF",
    "CMAKE_EXE_LINKER_FLAGS": "-static",
    "GGML_OPENMP": "OFF",
    "GGML_CPU_ARM_ARCH": "armv8.2-a+dotprod+fp16",
}

_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")  # Unix Makefiles: "[ 42%] Building C object ..."
_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")  # Ninja: "[12/80] Building C object ..."
_DEFINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::[A-Z]+)?=(.*)$")
_CMAKE_VERSION = re.compile(r"set\(LLAMA_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)\)")
_SONAME_LIKE = re.compile(r"^lib.+\.so\.\d+$")  # libllama.so.0: what binaries link against

# Host variants for tests, the demo and build comparisons. "host-slow" switches off the x86 SIMD
# paths above SSE4.2 (AVX, AVX2, FMA, F16C, BMI2): same code, same results, measurably slower
# quantised matmuls, i.e. a true regression for the comparison layer to find.
HOST_VARIANTS: dict[str, dict[str, str]] = {
    "host-release": {},
    "host-slow": {
        "GGML_AVX": "OFF", "GGML_AVX2": "OFF", "GGML_FMA": "OFF", "GGML_F16C": "OFF",
        "GGML_BMI2": "OFF",
    },
}
# Host builds with a GPU backend, for the virtual GPU phone (Mesa's software Vulkan, lavapipe).
HOST_BACKEND_VARIANTS: dict[str, str] = {"host-vulkan": "vulkan"}
# arm64 variants built with the cross compiler (no NDK), for virtual phones under qemu-aarch64.
CROSS_VARIANTS: dict[str, dict[str, str]] = {
    "arm64-release": {},
}


def abi_name(abi: str) -> str:
    """The ABI as a manifest records it: ``host`` becomes this machine's architecture."""
    if abi not in ABIS:
        raise BuildError(f"unknown --abi {abi!r}; use one of {', '.join(ABIS)}")
    return os.uname().machine if abi == "host" else abi


def parse_defines(items: Sequence[str]) -> dict[str, str]:
    """``-D KEY=VAL`` options (``KEY:TYPE=VAL`` accepted, type dropped) in the order given."""
    defines: dict[str, str] = {}
    for item in items:
        match = _DEFINE.match(item)
        if not match:
            raise BuildError(f"-D {item!r}: expected KEY=VALUE, e.g. -D GGML_AVX2=OFF")
        defines[match.group(1)] = match.group(2)
    return defines


def cmake_defines(
    abi: str,
    ndk: Path | None = None,
    extra: Mapping[str, str] | None = None,
    *,
    toolchain: Path | None = None,
) -> dict[str, str]:
    """Every ``-D`` for one build: defaults for the ABI, then the user's overrides.

    ``arm64-v8a`` takes either ``ndk`` (Android's toolchain) or ``toolchain``, a cross toolchain
    file for Debian's aarch64-linux-gnu compiler (see ``write_cross_toolchain``).
    """
    defines = dict(_COMMON)
    if abi == "host":
        defines.update(_HOST)
    elif abi == "arm64-v8a" and ndk is not None:
        defines = {
            "CMAKE_TOOLCHAIN_FILE": str(ndk / NDK_TOOLCHAIN),
            "ANDROID_ABI": "arm64-v8a",
            "ANDROID_PLATFORM": ANDROID_PLATFORM,
            **defines,
            **_ANDROID,
        }
    elif abi == "arm64-v8a" and toolchain is not None:
        defines = {"CMAKE_TOOLCHAIN_FILE": str(toolchain), **defines, **_CROSS}
    elif abi == "arm64-v8a":
        raise BuildError(
            "--abi arm64-v8a needs the Android NDK (--ndk PATH or $ANDROID_NDK) or the "
            f"{CROSS_TRIPLE} cross toolchain file"
        )
    else:
        abi_name(abi)  # raises with the list of ABIs
    defines.update(extra or {})
    if defines.get("GGML_NATIVE", "OFF").upper() not in ("OFF", "0", "FALSE"):
        raise BuildError("-D GGML_NATIVE=ON: native builds use AMX on these machines and crash; "
                         "harness builds are never native")
    return defines


def backend_defines(backend: str, abi: str, *, ndk: Path | None = None,
                    hexagon_sdk: Path | None = None, hexagon_tools: Path | None = None,
                    compat: Path = VULKAN_COMPAT) -> dict[str, str]:
    """The ``-D`` options of one backend (llama.cpp's docs), on top of the ABI's."""
    if backend == "cpu":
        return {}
    if backend == "vulkan":
        host = {"CMAKE_CXX_FLAGS": f"-I{compat}"} if abi == "host" else {}
        return {"GGML_VULKAN": "ON", **host}
    opencl = {"GGML_OPENCL": "ON", "GGML_OPENCL_USE_ADRENO_KERNELS": "ON",
              "GGML_OPENCL_EMBED_KERNELS": "ON"}
    if backend == "opencl":
        return opencl
    if backend == "hexagon":
        return {**opencl, "GGML_HEXAGON": "ON", "HEXAGON_SDK_ROOT": str(hexagon_sdk),
                "HEXAGON_TOOLS_ROOT": str(hexagon_tools), "PREBUILT_LIB_DIR": "android_aarch64",
                "GGML_OPENMP": "OFF", "GGML_LLAMAFILE": "OFF"}
    raise BuildError(f"unknown --backend {backend!r}; use one of {', '.join(BACKENDS)}")


def backend_problem(backend: str, abi: str, ndk: Path | None, *,
                    hexagon_sdk: Path | None = None, hexagon_tools: Path | None = None,
                    which: Callable[[str], str | None] = shutil.which,
                    exists: Callable[[Path], bool] = Path.exists) -> str | None:
    """What a backend's build needs and this machine lacks, in one line (None: nothing)."""
    if backend in ("cpu",):
        return None
    if backend == "vulkan":
        if abi == "host":
            missing = [pkg for tool, pkg in (("glslc", "glslc"),) if which(tool) is None]
            if not exists(Path("/usr/include/vulkan/vulkan.hpp")):
                missing.append("libvulkan-dev")
            if not exists(Path("/usr/include/spirv/unified1/spirv.hpp")):
                missing.append("spirv-headers")
            if missing:
                return (f"--backend vulkan needs {', '.join(missing)}: apt-get install "
                        f"{' '.join(missing)} (and mesa-vulkan-drivers to run on this host)")
            return None
        if ndk is None:
            return ("--backend vulkan --abi arm64-v8a needs the Android NDK (--ndk PATH or "
                    "$ANDROID_NDK): it has the Vulkan headers and glslc")
        return None
    if ndk is None:
        return (f"--backend {backend} needs the Android NDK (--ndk PATH or $ANDROID_NDK) and "
                "--abi arm64-v8a; docs/gpu.md says how to set it up")
    if abi != "arm64-v8a":
        return f"--backend {backend} builds for phones only: use --abi arm64-v8a"
    sysroot = ndk / NDK_SYSROOT
    for need in (sysroot / "usr/include/CL/cl.h",
                 sysroot / "usr/lib/aarch64-linux-android/libOpenCL.so"):
        if not exists(need):
            return (f"--backend {backend}: {need} is missing: install the Khronos OpenCL "
                    "headers and ICD loader into the NDK's sysroot (docs/gpu.md)")
    if backend == "hexagon":
        for flag, path in (("--hexagon-sdk", hexagon_sdk), ("--hexagon-tools", hexagon_tools)):
            if path is None or not exists(path):
                shown = "not given" if path is None else f"{path} does not exist"
                return (f"--backend hexagon needs the Hexagon SDK: {flag} ({shown}; or "
                        "$HEXAGON_SDK_ROOT / $HEXAGON_TOOLS_ROOT)")
    return None


def cross_toolchain_text(cc: Path, cxx: Path) -> str:
    """A CMake toolchain file for Debian's aarch64-linux-gnu cross compiler."""
    sysroot = f"/usr/{CROSS_TRIPLE}"
    return "\n".join([
        "# Written by harness (harness/artifacts/cmake_build.py): Debian's aarch64 cross compiler.",
        "set(CMAKE_SYSTEM_NAME Linux)",
        "set(CMAKE_SYSTEM_PROCESSOR aarch64)",
        f"set(CMAKE_C_COMPILER {cc})",
        f"set(CMAKE_CXX_COMPILER {cxx})",
        f"set(CMAKE_FIND_ROOT_PATH {sysroot})",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)",
        "",
    ])


def find_cross_compilers() -> tuple[Path, Path]:
    """(gcc, g++) of Debian's aarch64 cross compiler on PATH, or a one-line BuildError."""
    found = [shutil.which(f"{CROSS_TRIPLE}-{tool}") for tool in ("gcc", "g++")]
    if found[0] is None or found[1] is None:
        missing = f"{CROSS_TRIPLE}-{'gcc' if found[0] is None else 'g++'}"
        raise BuildError(
            f"--abi arm64-v8a without --ndk needs the aarch64 cross compiler ({missing} not on "
            f"PATH): install {CROSS_PACKAGE} (apt-get install {CROSS_PACKAGE}) or pass --ndk PATH"
        )
    return Path(found[0]), Path(found[1])


def write_cross_toolchain(cache: Path) -> Path:
    """Write (or keep) ``<cache>/toolchains/aarch64-linux-gnu.toolchain.cmake``; return it."""
    text = cross_toolchain_text(*find_cross_compilers())
    path = cache / "toolchains" / CROSS_TOOLCHAIN
    if path.is_file() and path.read_text() == text:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def cpu_features(abi: str, defines: Mapping[str, str]) -> CpuFeatures:
    """The CPU features a build of ``abi`` with these cmake defines is compiled for."""
    return derive_cpu_features(abi_name(abi), defines)


def configure_argv(
    source: Path, work: Path, defines: Mapping[str, str], generator: str | None = None
) -> list[str]:
    """``cmake -S source -B work [-G gen] -DK=V ...`` in a stable order."""
    argv = ["cmake", "-S", str(source), "-B", str(work)]
    if generator:
        argv += ["-G", generator]
    argv += [f"-D{key}={value}" for key, value in defines.items()]
    return argv


def build_argv(work: Path, targets: Sequence[str], jobs: int) -> list[str]:
    """``cmake --build work --config Release -j N --target t ...``."""
    argv = ["cmake", "--build", str(work), "--config", "Release", "-j", str(jobs)]
    for target in targets:
        argv += ["--target", target]
    return argv


def parse_progress(line: str) -> float | None:
    """Fraction done (0..1) from a Makefile ``[ 42%]`` or Ninja ``[12/80]`` line, else None."""
    match = _PERCENT.match(line)
    if match:
        return min(int(match.group(1)), 100) / 100
    match = _NINJA.match(line)
    if match and int(match.group(2)) > 0:
        return int(match.group(1)) / int(match.group(2))
    return None


def work_dir(cache: Path, source: Path, abi: str,
             defines: Mapping[str, str] | None = None) -> Path:
    """The cmake folder for one (source, ABI, set of ``defines``), ``<tree>/build`` (see
    ``compile_llama_cpp`` for ``<tree>/src``): a source change rebuilds only what it touches,
    and builds that alternate between flag sets (host-release and host-slow, an A/B of two
    flags) each keep their own objects instead of recompiling everything in turn."""
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
    flags = "" if defines is None else "-" + hashlib.sha256(
        json.dumps(dict(defines), sort_keys=True).encode()).hexdigest()[:8]
    return cache / "trees" / f"{source.resolve().name}-{digest}-{abi}{flags}" / "build"


def compiler_cache(tree: Path) -> dict[str, str]:
    """cmake defines that compile through ccache, when it is installed (``HARNESS_CCACHE=0``
    turns it off, ggml's own use of it too). ccache returns an object only for the same
    preprocessed source, compiler and flags, so every build is still made from its own code;
    paths under ``tree`` (its ``src`` and ``build``) are hashed relative (``base_dir``), so a
    tree elsewhere with the same files hits. The objects go to ``$CCACHE_DIR``, else
    ``$HARNESS_CACHE/ccache`` (whatever HOME the build runs with, as the tests' adb does)."""
    if os.environ.get("HARNESS_CCACHE") == "0":
        return {"GGML_CCACHE": "OFF"}
    if shutil.which("ccache") is None:
        return {}
    # ccache's settings as its environment (its KEY=VALUE arguments need ccache 4.8)
    store = os.environ.get("CCACHE_DIR") or str(cache_root() / "ccache")
    launcher = f"env;CCACHE_DIR={store};CCACHE_BASEDIR={tree};CCACHE_NOHASHDIR=1;ccache"
    return {"CMAKE_C_COMPILER_LAUNCHER": launcher, "CMAKE_CXX_COMPILER_LAUNCHER": launcher}


def linked_source(source: Path, work: Path) -> Path:
    """``<tree>/src`` for the cmake folder ``work`` (``<tree>/build``): the source itself when
    it is there (a bisect's worktree), else a link to it, made or moved here."""
    link = work.parent / "src"
    if link.resolve() == source.resolve():
        return link
    if link.exists() and not link.is_symlink():
        raise BuildError(f"{link} is in the way of the link to {source}: remove it and retry")
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".src.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(source.resolve(), target_is_directory=True)
    os.replace(tmp, link)
    return link


def default_generator() -> str | None:
    return "Ninja" if shutil.which("ninja") else None


Progress = Callable[[float, str], None]


def compile_llama_cpp(
    source: Path,
    work: Path,
    defines: Mapping[str, str],
    targets: Sequence[str] = DEFAULT_TARGETS,
    jobs: int | None = None,
    progress: Progress | None = None,
    nice: bool = False,
) -> Path:
    """Configure + build in ``work`` (``<tree>/build``, the source at ``<tree>/src``, through
    ccache: see the module's docstring); return the folder holding the products
    (``<work>/bin``)."""
    if not (source / "CMakeLists.txt").is_file():
        raise BuildError(f"{source}: no CMakeLists.txt; --source must be a llama.cpp checkout")
    if shutil.which("cmake") is None:
        raise BuildError("cmake is not installed; install it (apt-get install cmake) and retry")
    work.mkdir(parents=True, exist_ok=True)
    defines = {**defines, **compiler_cache(work.parent)}
    if GENERATOR_TARGET in targets:
        defines = {**defines, GENERATOR_INCLUDE: str(GENERATOR_DIR / "generator.cmake")}
    prefix = ["nice", "-n", "15"] if nice and shutil.which("nice") else []
    with _locked(work / ".harness.lock"):
        source = linked_source(source, work)
        # A fresh cache each time: -D values of an earlier variant must not leak into this one.
        # Unchanged compile commands are not re-run, so only objects whose flags differ rebuild.
        (work / "CMakeCache.txt").unlink(missing_ok=True)
        generator = default_generator()
        _run(prefix + configure_argv(source, work, defines, generator), work, None)
        jobs = jobs or os.cpu_count() or 2
        tools = [t for t in targets if t != GENERATOR_TARGET]
        if tools:
            _run(prefix + build_argv(work, tools, jobs), work, progress)
        if GENERATOR_TARGET in targets:
            # ours, written against llama.h as vendored: a tree whose API differs (an old
            # commit in a bisect) still builds its tools, and its build has no generator
            (work / "bin" / GENERATOR_TARGET).unlink(missing_ok=True)
            try:
                _run(prefix + build_argv(work, [GENERATOR_TARGET], jobs), work, None)
            except BuildError:
                if not tools:
                    raise
    return work / "bin"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], work: Path, progress: Progress | None) -> None:
    """Run one cmake step, feeding progress lines; on failure keep the log and name it."""
    log = work / "harness-build.log"
    tail: list[str] = []
    with open(log, "a") as out:
        out.write("$ " + " ".join(argv) + "\n")
        # its own process group: a stopped build (Ctrl-C, SIGTERM) stops cmake, ninja and
        # every compiler they started, not cmake alone
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            process_group=0,
        )
        assert process.stdout is not None
        try:
            for line in process.stdout:
                out.write(line)
                tail = ([*tail, line.rstrip()])[-15:]
                fraction = parse_progress(line)
                if progress is not None and fraction is not None:
                    progress(fraction, line.strip())
            code = process.wait()
        except BaseException:
            stop_group(process)
            raise
    if code != 0:
        detail = "\n".join(tail)
        raise BuildError(f"{argv[argv.index('cmake')]} failed (exit {code}); log: {log}\n{detail}")


STOP_GRACE_S = 10.0


def stop_group(process: subprocess.Popen[str]) -> None:
    """Stop the process group we started (its leader is ours): SIGTERM first, which ninja
    passes on to the commands it runs in their own groups, then SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        if _group_gone(process, STOP_GRACE_S):
            break
    process.wait()


def _group_gone(process: subprocess.Popen[str], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        process.poll()  # the leader is reaped once it exits, so the group can empty
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def source_version(cmakelists: str) -> str | None:
    """``MAJOR.MINOR.PATCH`` from llama.cpp's top-level CMakeLists.txt (None if not declared)."""
    parts = dict(_CMAKE_VERSION.findall(cmakelists))
    if {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    return None


def source_commit(source: Path) -> tuple[str | None, str | None]:
    """(commit, origin): git HEAD of a checkout, else the vendored tree's recorded commit."""
    commit = git_commit(source)
    if commit:
        return commit, str(source.resolve())
    info = read_source_info(source)
    if info:
        return info.commit, info.origin
    return None, str(source.resolve())


def collect_products(products: Path, targets: Sequence[str]) -> dict[str, Path]:
    """The built executables plus shared libraries under the names the loader asks for.

    cmake leaves ``libllama.so -> libllama.so.0 -> libllama.so.0.5.0``; binaries are linked
    against the soname (``libllama.so.0``), so that is the one name kept, as a plain file.
    """
    files: dict[str, Path] = {}
    for target in targets:
        path = products / target
        if not path.is_file() and target == GENERATOR_TARGET:
            continue  # did not compile against this tree (see compile_llama_cpp)
        if not path.is_file():
            raise BuildError(f"{path}: target {target!r} was not produced; is it a llama.cpp tool?")
        files[f"bin/{target}"] = path
    libraries = sorted(products.glob("lib*.so*"))
    chosen: dict[Path, Path] = {}
    for path in libraries:
        real = path.resolve()
        best = chosen.get(real)
        if best is None or _soname_rank(path) < _soname_rank(best):
            chosen[real] = path
    for path in chosen.values():
        files[f"lib/{path.name}"] = path
    return files


def _soname_rank(path: Path) -> int:
    """0 for ``libx.so.N``, 1 for the real file, 2 for a development link such as ``libx.so``."""
    if _SONAME_LIKE.match(path.name):
        return 0
    return 2 if path.is_symlink() else 1


def build_llama_cpp(
    source: Path,
    root: Path,
    name: str,
    *,
    abi: str = "host",
    ndk: Path | None = None,
    extra: Mapping[str, str] | None = None,
    targets: Sequence[str] = DEFAULT_TARGETS,
    jobs: int | None = None,
    progress: Progress | None = None,
    nice: bool = True,
    replace: bool = False,
    cache: Path | None = None,
    backend: str = "cpu",
    hexagon_sdk: Path | None = None,
    hexagon_tools: Path | None = None,
) -> Build:
    """``harness build llama.cpp``: compile in the cache, then copy the products into a build."""
    source = source.resolve()
    cache = cache or cache_root()
    if backend not in BACKENDS:
        raise BuildError(f"unknown --backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if ndk is not None and not (ndk / NDK_TOOLCHAIN).is_file():
        raise BuildError(f"{ndk}: not an Android NDK (no {NDK_TOOLCHAIN}); check --ndk")
    problem = backend_problem(backend, abi, ndk, hexagon_sdk=hexagon_sdk,
                              hexagon_tools=hexagon_tools)
    if problem:
        raise BuildError(problem)
    cross = abi == "arm64-v8a" and ndk is None
    toolchain = write_cross_toolchain(cache) if cross else None
    target = root / name
    if target.exists() and not replace:
        raise BuildError(f"{target}: build exists; pick another --name or pass --replace")
    commit, origin = source_commit(source)
    overrides: dict[str, str] = {}
    if commit and git_commit(source) is None:  # cmake cannot ask git: tell it the commit
        overrides["LLAMA_BUILD_COMMIT"] = commit[:7]
    overrides.update(backend_defines(backend, abi, ndk=ndk, hexagon_sdk=hexagon_sdk,
                                     hexagon_tools=hexagon_tools))
    overrides.update(extra or {})
    defines = cmake_defines(abi, ndk, overrides, toolchain=toolchain)
    # The NDK and the cross compiler get separate trees: a toolchain never changes inside one;
    # so does each backend (a GPU backend's shaders and libraries stay out of the CPU tree).
    tree = f"{abi}-{CROSS_TRIPLE}" if cross else abi
    work = work_dir(cache, source, tree if backend == "cpu" else f"{tree}-{backend}", defines)
    products = compile_llama_cpp(source, work, defines, targets, jobs, progress, nice)
    cmakelists = source / "CMakeLists.txt"
    return write_build(
        root, name, collect_products(products, targets), engine="llama.cpp", abi=abi_name(abi),
        version=None if abi == "host" else source_version(cmakelists.read_text()),
        commit=commit, cmake_flags=[f"-D{k}={v}" for k, v in defines.items()], source=origin,
        cpu=cpu_features(abi, defines), replace=replace, backends=BACKEND_NAMES[backend],
        env=BACKEND_ENV.get(backend, {}),
    )


def generator_digest() -> str:
    """The content of the output check's generator (its source and cmake file), for cache keys:
    a build made with another generator is another build."""
    digest = hashlib.sha256()
    for name in ("generator.cmake", "harness_generate.cpp"):
        digest.update((GENERATOR_DIR / name).read_bytes())
    return digest.hexdigest()


def host_variant_key(variant: str) -> str:
    """Cache key of a host variant: source version + every cmake flag + machine + targets (and
    the content of our Vulkan compatibility header for a Vulkan build, not its path)."""
    backend = HOST_BACKEND_VARIANTS.get(variant, "cpu")
    if variant not in HOST_VARIANTS and backend == "cpu":
        known = ", ".join([*HOST_VARIANTS, *HOST_BACKEND_VARIANTS])
        raise BuildError(f"unknown host build {variant!r}; known: {known}")
    extra = {**HOST_VARIANTS.get(variant, {}),
             **backend_defines(backend, "host", compat=Path(_COMPAT_KEY))}
    defines = cmake_defines("host", None, extra)
    compat = "" if backend != "vulkan" else hashlib.sha256(
        (VULKAN_COMPAT / "vulkan" / "vulkan.hpp").read_bytes()).hexdigest()
    text = json.dumps([LLAMA_CPP_PYTHON_VERSION, defines, os.uname().machine, DEFAULT_TARGETS,
                       generator_digest(), *([compat] if compat else [])], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cross_variant_key(variant: str) -> str:
    """Cache key of an arm64 cross variant: source version + cmake flags + toolchain file.

    Neither the cache's location nor where the compilers are installed enters the key, so a
    cached build is found without looking for the compilers.
    """
    if variant not in CROSS_VARIANTS:
        raise BuildError(f"unknown arm64 build {variant!r}; known: {', '.join(CROSS_VARIANTS)}")
    placeholder = Path(f"<toolchains>/{CROSS_TOOLCHAIN}")
    defines = cmake_defines("arm64-v8a", None, CROSS_VARIANTS[variant], toolchain=placeholder)
    toolchain = cross_toolchain_text(Path(f"{CROSS_TRIPLE}-gcc"), Path(f"{CROSS_TRIPLE}-g++"))
    text = json.dumps([LLAMA_CPP_PYTHON_VERSION, defines, toolchain, DEFAULT_TARGETS,
                       generator_digest()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure_host_build(
    variant: str, root: Path, *, cache: Path | None = None, progress: Progress | None = None
) -> Build:
    """A host build of the vendored llama.cpp, compiled once per content key, copied to ``root``.

    The compiled build lives in ``$HARNESS_CACHE/builds/<variant>-<key>``; each builds root gets
    a copy named ``variant`` (reused when its files already match).
    """
    return _ensure_cached_build(
        variant, root, "host", host_variant_key(variant), HOST_VARIANTS.get(variant, {}), cache,
        progress, HOST_BACKEND_VARIANTS.get(variant, "cpu"))


def ensure_cross_build(
    variant: str, root: Path, *, cache: Path | None = None, progress: Progress | None = None
) -> Build:
    """An arm64-v8a build made with Debian's cross compiler (no NDK), like ``ensure_host_build``.

    One static ``llama-bench`` for any arm64 Linux; on this host it runs under ``qemu-aarch64``.
    Raises a one-line BuildError naming g++-aarch64-linux-gnu when the compiler is missing.
    """
    return _ensure_cached_build(
        variant, root, "arm64-v8a", cross_variant_key(variant), CROSS_VARIANTS[variant], cache,
        progress,
    )


def _ensure_cached_build(
    variant: str, root: Path, abi: str, key: str, extra: Mapping[str, str],
    cache: Path | None, progress: Progress | None, backend: str = "cpu",
) -> Build:
    cache = cache or cache_root()
    cached_root = cache / "builds"
    cached_name = f"{variant}-{key}"

    def build() -> None:
        build_llama_cpp(ensure_llama_source(root=cache / "src"), cached_root, cached_name,
                        abi=abi, extra=extra, progress=progress, nice=True, replace=True,
                        cache=cache, backend=backend)

    cached = cached_build(cached_root, cached_name, build)
    if cached.manifest.cpu is None:  # made before manifests recorded CPU features
        flags = [flag[2:] for flag in cached.manifest.cmake_flags if flag.startswith("-D")]
        cached = _with_cpu(cached, cpu_features(abi, parse_defines(flags)))
    return copy_build(cached, root, variant)


def cached_build(cached_root: Path, name: str, build: Callable[[], object]) -> Build:
    """``cached_root/name``, made by ``build`` if it is not there: by one process only, under a
    lock; another asking meanwhile (a second test process, a second run) waits and takes it."""
    if not (cached_root / name / MANIFEST).is_file():
        cached_root.mkdir(parents=True, exist_ok=True)
        with _locked(cached_root / f".{name}.lock"):
            if not (cached_root / name / MANIFEST).is_file():
                build()
    return open_build(cached_root, name)


def _with_cpu(build: Build, cpu: CpuFeatures) -> Build:
    """The same build with CPU features added to its manifest (files unchanged)."""
    m = build.manifest
    return write_build(
        build.path.parent, m.name, {f.path: build.path / f.path for f in m.files}, engine=m.engine,
        abi=m.abi, version=m.version, commit=m.commit, cmake_flags=m.cmake_flags,
        source=m.source, cpu=cpu, replace=True, backends=m.backends, env=dict(m.env),
    )
