"""Fixtures for engine builds (owned by the engine-builds area).

``host_build`` and ``slow_build`` are host builds of the llama.cpp vendored in the pinned
llama-cpp-python sdist. They are compiled once per machine into $HARNESS_CACHE/builds/<key>
(about 5 minutes each on 2 cores, niced, one at a time) and copied into a per-session builds
root, so a fresh CI machine pays once and later sessions only copy a few MB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.artifacts.builds import Build
from harness.artifacts.cmake_build import ensure_host_build


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
