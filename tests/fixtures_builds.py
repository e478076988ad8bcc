"""Fixtures for engine builds (owned by the engine-builds area).

``host_build`` and ``slow_build`` are host builds of the llama.cpp vendored in the pinned
llama-cpp-python sdist. They are compiled once per machine into $HARNESS_CACHE/builds/<key>
(about 5 minutes for the first on 2 cores, niced; host-slow's objects that its CPU flags do
not touch come from ccache) and copied into a per-session builds root, so a fresh CI machine
pays once and later sessions only copy a few MB.

``arm64_build`` is the same llama.cpp cross-compiled for arm64-v8a with Debian's
aarch64-linux-gnu compiler (no NDK): one static llama-bench that runs on an arm64 virtual phone
through qemu-aarch64. It is cached the same way (about 10 minutes on 2 cores the first time).

``vulkan_build`` is the same llama.cpp with its Vulkan backend (``host-vulkan``), for the
virtual GPU phone (Mesa's software Vulkan driver): cached the same way (5-10 minutes, once).

``wrong_build`` is host-release with one planted kernel bug (harness/artifacts/patched.py) in
the quantised-V path of flash attention: the output check's true positive, for the cells that
take that path only. Cached by content too; its tree is a copy of the vendored one, so ccache
compiles only the edited file.

On a fresh machine the builds the session's tests use are compiled in the background from the
start (tests/prebuild.py, one process, in the order of ``BUILDS``), and the modules that use
none run first: the compiles overlap them. A fixture waits for its build's line, then takes it
from the cache. ``HARNESS_PREBUILD=0`` turns this off (each fixture compiles when first asked).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.artifacts.builds import Build
from harness.artifacts.cmake_build import ensure_cross_build, ensure_host_build
from harness.artifacts.patched import SourceEdit, ensure_patched_host_build
from harness.errors import BuildError

# fixture -> the build it gives, in the order the background compiles them: the ones most
# tests use first; a module's tests run after the last build they use is due
BUILDS = {"host_build": "host-release", "slow_build": "host-slow", "wrong_build": "host-wrong",
          "vulkan_build": "host-vulkan", "arm64_build": "arm64-release"}
PREBUILD = Path(__file__).with_name("prebuild.py")
STOP_WAIT_S = 30.0


class Prebuilds:
    """tests/prebuild.py running in the background, and which of its builds have ended."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.ended: dict[str, str | None] = {}  # name -> None (done) or why it failed
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, str(PREBUILD), *names], stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True, process_group=0)
        self._reader = threading.Thread(target=self._read, name="prebuild", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            word, _, rest = line.strip().partition(" ")
            name, _, why = rest.partition(": ")
            if word in ("done", "failed"):
                with self._changed:
                    self.ended[name] = None if word == "done" else why
                    self._changed.notify_all()
        self.process.wait()
        with self._changed:
            self._changed.notify_all()

    def wait(self, name: str) -> None:
        """Until ``name`` has ended (or the process has), outside the test's timeout: the
        compile is the session's, not the test's. A failed build is the fixture's error."""
        with _no_timeout(), self._changed:
            self._changed.wait_for(lambda: name in self.ended
                                   or self.process.poll() is not None)
        why = self.ended.get(name)
        if why is not None:
            raise BuildError(f"{name}: {why} (compiled in the background by tests/prebuild.py)")

    def stop(self) -> None:
        """SIGTERM (it stops its compile in flight), then SIGKILL; reaped either way."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._reader.join(STOP_WAIT_S)


@contextlib.contextmanager
def _no_timeout() -> Iterator[None]:
    """pytest-timeout's alarm (its signal method) paused while a fixture waits for a build."""
    left, _ = signal.getitimer(signal.ITIMER_REAL)
    signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if left:
            signal.setitimer(signal.ITIMER_REAL, left)


_PREBUILDS = pytest.StashKey[Prebuilds]()


def _stage(item: pytest.Item) -> int:
    """The position in BUILDS of the last build an item uses (-1: none)."""
    return max((i for i, fixture in enumerate(BUILDS) if fixture in _fixtures(item)), default=-1)


def _fixtures(item: pytest.Item) -> tuple[str, ...]:
    return tuple(getattr(item, "fixturenames", ()))


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what will not run
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Whole modules reordered: those that use no build first, then by the last build they
    use (the order kept within a module and among equals); the builds used start compiling in
    the background."""
    stage: dict[str, int] = {}
    for item in items:
        stage[_module(item)] = max(stage.get(_module(item), -1), _stage(item))
    items.sort(key=lambda item: stage[_module(item)])
    used = [name for fixture, name in BUILDS.items()
            if any(fixture in _fixtures(item) for item in items)]
    if used and not config.option.collectonly and os.environ.get("HARNESS_PREBUILD") != "0":
        prebuilds = Prebuilds(used)
        config.stash[_PREBUILDS] = prebuilds
        config.add_cleanup(prebuilds.stop)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Nothing compiles past the session (an interrupted one included)."""
    prebuilds = session.config.stash.get(_PREBUILDS, None)
    if prebuilds is not None:
        prebuilds.stop()


def _wait(request: pytest.FixtureRequest, name: str) -> None:
    prebuilds = request.config.stash.get(_PREBUILDS, None)
    if prebuilds is not None and name in prebuilds.names:
        prebuilds.wait(name)


@pytest.fixture(scope="session")
def engine_builds_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide builds root holding copies of the cached host builds."""
    return tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="session")
def host_build(request: pytest.FixtureRequest, engine_builds_root: Path) -> Build:
    """``host-release``: the vendored llama.cpp for this host (GGML_NATIVE=OFF, AVX2 on)."""
    _wait(request, "host-release")
    return ensure_host_build("host-release", engine_builds_root)


@pytest.fixture(scope="session")
def slow_build(request: pytest.FixtureRequest, engine_builds_root: Path) -> Build:
    """``host-slow``: the same code with AVX/AVX2/FMA/F16C/BMI2 off: a true regression."""
    _wait(request, "host-slow")
    return ensure_host_build("host-slow", engine_builds_root)


@pytest.fixture(scope="session")
def arm64_build(request: pytest.FixtureRequest, engine_builds_root: Path) -> Build:
    """``arm64-release``: arm64-v8a, static, armv8.2-a+dotprod+fp16, via the cross compiler."""
    _wait(request, "arm64-release")
    return ensure_cross_build("arm64-release", engine_builds_root)


@pytest.fixture(scope="session")
def vulkan_build(request: pytest.FixtureRequest, engine_builds_root: Path) -> Build:
    """``host-vulkan``: GGML_VULKAN=ON beside the CPU backend (glslc, libvulkan-dev)."""
    _wait(request, "host-vulkan")
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
def wrong_build(request: pytest.FixtureRequest, engine_builds_root: Path) -> Build:
    """``host-wrong``: host-release with a planted bug in the quantised-V flash-attention path
    (see PLANTED_BUG): fast, right with an f16 KV cache, wrong with q4_0 V. Cached by content
    like the other host builds (ccache compiles the edited file only)."""
    _wait(request, "host-wrong")
    return ensure_patched_host_build("host-wrong", [PLANTED_BUG], engine_builds_root)
