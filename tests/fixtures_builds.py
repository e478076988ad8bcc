"""Fixtures for engine builds (owned by the engine-builds area).

``host_build`` and ``slow_build`` are host builds of the llama.cpp vendored in the pinned
llama-cpp-python sdist. They are compiled once per machine into $HARNESS_CACHE/builds/<key>
(about 5 minutes each on 2 cores, niced, one at a time) and copied into a per-session builds
root, so a fresh CI machine pays once and later sessions only copy a few MB.

``arm64_build`` is the same llama.cpp cross-compiled for arm64-v8a with Debian's
aarch64-linux-gnu compiler (no NDK): one static llama-bench that runs on an arm64 virtual phone
through qemu-aarch64. It is cached the same way (about 10 minutes on 2 cores the first time).

``vulkan_build`` is the same llama.cpp with its Vulkan backend (``host-vulkan``), for the
virtual GPU phone (Mesa's software Vulkan driver): cached the same way (5-10 minutes, once).

``wrong_build`` is host-release with one planted kernel bug (harness/artifacts/patched.py) in
the quantised-V path of flash attention: the output check's true positive, for the cells that
take that path only. Cached by content too (a full compile, about 5 minutes, once).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.artifacts.builds import Build
from harness.artifacts.cmake_build import ensure_cross_build, ensure_host_build
from harness.artifacts.patched import SourceEdit, ensure_patched_host_build


@pytest.fixture(scope="session")
def engine_builds_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide builds root holding copies of the cached host builds."""
    return tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="session")
def host_build(engine_builds_root: Path) -> Build:
    """``host-release``: the vendored llama.cpp for this host (GGML_NATIVE=OFF, AVX2 on)."""
    return ensure_host_build("host-release", engine_builds_root)


@pytest.fixture(scope="session")
def slow_build(engine_builds_root: Path) -> Build:
    """``host-slow``: the same code with AVX/AVX2/FMA/F16C/BMI2 off: a true regression."""
    return ensure_host_build("host-slow", engine_builds_root)


@pytest.fixture(scope="session")
def arm64_build(engine_builds_root: Path) -> Build:
    """``arm64-release``: arm64-v8a, static, armv8.2-a+dotprod+fp16, via the cross compiler."""
    return ensure_cross_build("arm64-release", engine_builds_root)


@pytest.fixture(scope="session")
def vulkan_build(engine_builds_root: Path) -> Build:
    """``host-vulkan``: GGML_VULKAN=ON beside the CPU backend (glslc, libvulkan-dev)."""
    return ensure_host_build("host-vulkan", engine_builds_root)


# The planted bug of ``wrong_build``: with flash attention, a quantised V cache (q8_0, q4_0)
# adds only the first half of each dequantised V row into the output (a wrong loop bound, as a
# vectorised tail often has). f16 and f32 V caches take another branch and stay right, so the
# build is right with the default KV cache and wrong only in that path: what an output check
# that runs with each trial's own KV types and attention must catch, and one that does not
# never sees.
QUANTISED_V_ROW = """                if (v_to_float) {
                    v_to_float(v_data, V32, DV);
                    ggml_vec_mad_f32(DV, VKQ32, V32, vs);"""
PLANTED_BUG = SourceEdit(
    path="ggml/src/ggml-cpu/ops.cpp",
    old=QUANTISED_V_ROW,
    new=QUANTISED_V_ROW.replace("ggml_vec_mad_f32(DV, VKQ32", "ggml_vec_mad_f32(DV/2, VKQ32", 1),
)


@pytest.fixture(scope="session")
def wrong_build(engine_builds_root: Path) -> Build:
    """``host-wrong``: host-release with a planted bug in the quantised-V flash-attention path
    (see PLANTED_BUG): fast, right with an f16 KV cache, wrong with q4_0 V. Cached by content
    like the other host builds (a full compile the first time)."""
    return ensure_patched_host_build("host-wrong", [PLANTED_BUG], engine_builds_root)
