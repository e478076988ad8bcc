"""Compile the engine builds a test session needs, in the background, while its other tests run.

    python tests/prebuild.py host-release host-slow host-wrong host-vulkan arm64-release

Each build is made in the harness's cache (``ensure_*_build``, niced, cached by content: a
build already there costs a copy) in the order given, and a line ``done NAME`` or
``failed NAME: why`` is printed as each ends. The session's build fixtures
(tests/fixtures_builds.py) start it after collection, wait for their build's line, then take
the build from the cache; so a fresh machine's compiles overlap the tests that need none,
instead of each starting when its first test asks. SIGTERM stops it and the compile in flight
(harness.interrupt).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures_builds import PLANTED_BUG

from harness.artifacts.builds import Build
from harness.artifacts.cmake_build import (
    CROSS_VARIANTS,
    ensure_cross_build,
    ensure_host_build,
)
from harness.artifacts.patched import ensure_patched_host_build
from harness.errors import HarnessError
from harness.interrupt import Interrupted, interruptible

PATCHED = {"host-wrong": [PLANTED_BUG]}


def maker(name: str) -> Callable[[Path], Build]:
    """How the build called ``name`` is made (as its fixture makes it)."""
    if name in PATCHED:
        return lambda root: ensure_patched_host_build(name, PATCHED[name], root)
    if name in CROSS_VARIANTS:
        return lambda root: ensure_cross_build(name, root)
    return lambda root: ensure_host_build(name, root)


def main(names: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="prebuild-") as root:
        for name in names:
            try:
                maker(name)(Path(root))
            except (HarnessError, OSError) as error:
                print(f"failed {name}: {str(error).splitlines()[0]}", flush=True)
                continue
            print(f"done {name}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        with interruptible():
            sys.exit(main(sys.argv[1:]))
    except Interrupted as stop:
        sys.exit(128 + stop.signum)
