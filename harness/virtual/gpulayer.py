"""GPU memory of a virtual phone's processes, counted by a Vulkan layer of our own.

A real phone reports how much GPU memory a process holds (the kgsl driver's per-process
accounting, ``dumpsys meminfo``'s "Graphics" row), and an engine running its model on the GPU
keeps most of its weights there. A virtual phone has no GPU: its engines run Vulkan on Mesa's
software driver (lavapipe), where device memory is plain heap the kernel cannot tell apart from
the rest. To report the same figure, every process on a virtual phone can load
``VK_LAYER_HARNESS_gpu_memory`` (``gpumem_layer.c`` beside this file): a Vulkan layer, the
loader's standard interception point, that passes every call down unchanged and counts what
``vkAllocateMemory`` / ``vkFreeMemory`` hand out. It writes ``<report dir>/<pid>`` atomically
after every change, one line ``<current_bytes> <peak_bytes> <live_allocations>``.

- ``ensure_gpu_layer`` compiles the layer once per (source, compiler, flags) into
  ``<cache root>/gpulayer/<key>/`` with its manifest ``gpumem_layer.json`` beside it.
- ``layer_environment`` is what a process's environment needs for the loader to load the layer
  (it is an explicit layer: without these variables nothing changes) and for it to report.
- ``parse_report`` / ``read_reports`` read the reports back; a process without a report never
  created a Vulkan device memory allocation under the layer.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from harness.artifacts.devicetools import compiler_identity
from harness.artifacts.ladder import atomic_output, default_cache_root, exclusive
from harness.errors import BuildError
from harness.virtual.gpureport import GpuMemory, parse_report, read_reports

__all__ = [
    "LAYER_NAME",
    "LAYER_SOURCE",
    "REPORT_ENV",
    "GpuMemory",
    "ensure_gpu_layer",
    "layer_cache_key",
    "layer_environment",
    "layer_manifest",
    "parse_report",
    "read_reports",
]

LAYER_NAME = "VK_LAYER_HARNESS_gpu_memory"
LAYER_SOURCE = Path(__file__).with_name("gpumem_layer.c")
LIBRARY_NAME = "libgpumem_layer.so"
MANIFEST_NAME = "gpumem_layer.json"
REPORT_ENV = "HARNESS_GPU_MEM_DIR"  # read by the layer when it is loaded
API_VERSION = "1.3.239"  # the Vulkan headers the layer is written against (Debian 12)
# -fvisibility=hidden: only the three VK_LAYER_EXPORT entry points leave the library.
FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-shared", "-fPIC", "-fvisibility=hidden",
         "-pthread", "-s")
COMPILE_TIMEOUT_S = 120
HEADERS_HINT = "install the Vulkan headers (apt-get install libvulkan-dev)"


def layer_cache_key(source: bytes, identity: str, flags: Sequence[str]) -> str:
    """Content key of one build: the source's bytes, the compiler's identity and the flags."""
    text = json.dumps([hashlib.sha256(source).hexdigest(), identity, list(flags)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def layer_manifest() -> dict[str, object]:
    """The layer's JSON manifest; the library sits next to it (a path relative to the file)."""
    return {
        "file_format_version": "1.2.0",
        "layer": {
            "name": LAYER_NAME,
            "type": "INSTANCE",
            "library_path": f"./{LIBRARY_NAME}",
            "api_version": API_VERSION,
            "implementation_version": "1",
            "description": "Harness: counts each process's Vulkan device memory",
        },
    }


def _find_cc() -> str:
    found = shutil.which("cc") or shutil.which("gcc")
    if found is None:
        raise BuildError("the GPU memory layer needs a C compiler (cc), which is not on PATH: "
                         "install gcc (apt-get install gcc)")
    return found


def ensure_gpu_layer(cache_dir: Path | None = None) -> Path:
    """The directory holding the compiled layer and its manifest, made on first use.

    ``cache_dir`` replaces the cache root ($HARNESS_CACHE or ~/.cache/harness). A missing
    compiler or missing Vulkan headers is a one-line BuildError naming what to install.
    """
    compiler = _find_cc()
    source = LAYER_SOURCE.read_bytes()
    key = layer_cache_key(source, compiler_identity(compiler), FLAGS)
    root = cache_dir if cache_dir is not None else default_cache_root()
    layer_dir = root / "gpulayer" / key
    library, manifest = layer_dir / LIBRARY_NAME, layer_dir / MANIFEST_NAME
    if library.is_file() and manifest.is_file():
        return layer_dir
    with exclusive(layer_dir):
        if library.is_file() and manifest.is_file():  # made by another process meanwhile
            return layer_dir
        # Holding the lock, no one else writes here: temporaries are from a killed run.
        for stale in layer_dir.glob(".*.tmp-*"):
            stale.unlink()
        with atomic_output(library) as tmp:
            _compile(compiler, tmp)
        # The manifest last: its presence says the library beside it is complete.
        with atomic_output(manifest) as tmp:
            tmp.write_text(json.dumps(layer_manifest(), indent=2) + "\n")
    return layer_dir


def _compile(compiler: str, out: Path) -> None:
    argv = [compiler, *FLAGS, "-o", str(out), str(LAYER_SOURCE)]
    try:
        result = subprocess.run(argv, capture_output=True, text=True,
                                timeout=COMPILE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BuildError(f"compiling the GPU memory layer: {error}") from error
    if result.returncode == 0:
        return
    missing = [line for line in result.stderr.splitlines()
               if "vulkan/" in line and ("No such file" in line or "not found" in line)]
    if missing:
        raise BuildError(f"the GPU memory layer needs the Vulkan headers, which {compiler} "
                         f"cannot find: {HEADERS_HINT}")
    tail = "\n".join(result.stderr.strip().splitlines()[-5:])
    raise BuildError(f"compiling the GPU memory layer failed (exit {result.returncode}): "
                     f"{shlex.join(argv)}\n{tail}")


def layer_environment(layer_dir: Path, report_dir: Path) -> dict[str, str]:
    """Variables that make the Vulkan loader load the layer and the layer report to report_dir.

    ``VK_LAYER_PATH`` points the loader at the manifest (it replaces, not extends, the
    explicit-layer search path); the layer is enabled by ``VK_INSTANCE_LAYERS`` (loaders before
    1.3.234 know only this one) and by ``VK_LOADER_LAYERS_ENABLE`` (the newer filter). Merge the
    result into the process's environment. ``report_dir`` must exist: the layer creates files,
    never directories, and skips reporting when it cannot write.
    """
    return {
        "VK_LAYER_PATH": str(layer_dir),
        "VK_INSTANCE_LAYERS": LAYER_NAME,
        "VK_LOADER_LAYERS_ENABLE": LAYER_NAME,
        REPORT_ENV: str(report_dir),
    }
