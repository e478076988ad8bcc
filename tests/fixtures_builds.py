"""Fixtures for engine builds (owned by the engine-builds area).

``host_build`` and ``slow_build`` are host builds of the llama.cpp vendored in the pinned
llama-cpp-python sdist. They are compiled once per machine into $HARNESS_CACHE/builds/<key>
(about 5 minutes each on 2 cores, niced, one at a time) and copied into a per-session builds
root, so a fresh CI machine pays once and later sessions only copy a few MB.

``arm64_build`` is the same llama.cpp cross-compiled for arm64-v8a with Debian's
aarch64-linux-gnu compiler (no NDK): one static llama-bench that runs on an arm64 virtual phone
through qemu-aarch64. It is cached the same way (about 10 minutes on 2 cores the first time).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.artifacts.builds import Build
from harness.artifacts.cmake_build import ensure_cross_build, ensure_host_build


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
