"""The demo: the whole pipeline on this machine, with nothing but Python and a compiler.

Virtual phones on a private adb server, a real llama-bench compiled from the llama.cpp that ships
inside llama-cpp-python's source distribution, the synthetic model ladder, the smoke matrix, and
a report. Nothing touches a user's adb server on 5037.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.testing.adbserver import private_adb_server


@dataclass(frozen=True)
class DemoPaths:
    root: Path
    name: str = "demo"  # "real" for the real-model demo

    @property
    def builds(self) -> Path:
        return self.root / "builds"

    @property
    def results(self) -> Path:
        return self.root / "results" / self.name

    @property
    def report(self) -> Path:
        return self.root / "reports" / f"{self.name}.html"

    @property
    def site(self) -> Path:
        return self.root / "reports" / f"{self.name}-site"

    @property
    def home(self) -> Path:
        return self.root / ".cache" / "demo-home"


@contextmanager
def demo_environment(paths: DemoPaths) -> Iterator[None]:
    """A private adb server and sim state for the demo; restored and stopped afterwards."""
    from harness.artifacts.ladder import default_cache_root

    paths.home.mkdir(parents=True, exist_ok=True)
    saved = dict(os.environ)
    try:
        # The adb server gets its own HOME; the models cache stays where the ladder was made.
        os.environ["HARNESS_CACHE"] = str(default_cache_root())
        with private_adb_server(paths.home / "adb") as server:
            os.environ.update(server.env)
            os.environ["HARNESS_HOME"] = str(paths.home)
            try:
                yield
            finally:
                from harness.virtual.control import stop_phones

                stop_phones(home=paths.home / "sim")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def prepare_ladder(paths: DemoPaths, say: Callable[[str], None], ladder: str) -> str:
    """The ``ladder`` quant ladder in the models cache (made once, cached by content)."""
    from harness.artifacts.testmodels import ensure_ladder

    say(f"models: making the {ladder} quant ladder (cached by content)")
    ensure_ladder(ladder, progress=say)
    return f"models: the {ladder} ladder is ready"


def prepare_build(paths: DemoPaths, say: Callable[[str], None], variant: str) -> str:
    """A host build of the vendored llama.cpp (compiled once, cached by content) in
    ``paths.builds``: host-release, host-slow (without AVX/AVX2/FMA/F16C/BMI2, the demo's
    candidate) or host-vulkan (the Vulkan backend, for the virtual GPU phone)."""
    from harness.artifacts.cmake_build import ensure_host_build

    say(f"engine: {'finding' if build_cached(variant) else 'compiling'} {variant} "
        "(cached by content)")
    ensure_host_build(variant, paths.builds)
    return f"engine: {variant} is ready in {paths.builds}"


def ladder_cached(ladder: str) -> bool:
    """Whether every file of the ``ladder`` quant ladder is made already."""
    from harness.artifacts.testmodels import ladder_paths

    return all(path.is_file() for path in ladder_paths(ladder).values())


def build_cached(variant: str) -> bool:
    """Whether the host build ``variant`` is compiled already (the cache ensure_host_build uses)."""
    from harness.artifacts.builds import MANIFEST
    from harness.artifacts.cmake_build import host_variant_key
    from harness.artifacts.llama_source import cache_root

    name = f"{variant}-{host_variant_key(variant)}"
    return (cache_root() / "builds" / name / MANIFEST).is_file()


def build_demo_site(paths: DemoPaths) -> Path:
    """The farm dashboard of the demo's store in ``paths.site`` (``harness site build``), with
    the demo's report linked as the report of its latest night, as a farm's nightly report is;
    the site's index."""
    import shutil

    from harness.analysis.frames import nights
    from harness.site.build import build_site
    from harness.store import read_arrow

    started = read_arrow(paths.results, "trials", columns=["started_at", "run_id"]).to_pandas()
    latest = str(nights(started).max())
    staged = paths.root / ".cache" / f"{paths.name}-site-reports"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    if paths.report.is_file():
        shutil.copyfile(paths.report, staged / f"nightly-{latest}.html")
    build_site(paths.results, paths.site, reports=staged, title=f"harness {paths.name}")
    return paths.site / "index.html"
