"""A llama.cpp source tree for tests and the demo, taken from the llama-cpp-python sdist.

The harness must build llama.cpp without internet access beyond PyPI; the llama-cpp-python source
distribution carries llama.cpp under ``vendor/llama.cpp`` (plus the submodule's git objects, which
we do not need). We extract that folder once into ``$HARNESS_CACHE/src/llama.cpp-<version>/`` via a
temporary directory and an atomic rename, so a crash never leaves a half-extracted tree that later
looks complete. The submodule commit is read from the sdist's git metadata and written next to the
tree in ``harness-source.json``, because the extracted tree itself is no git checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BuildError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SOURCE_INFO = "harness-source.json"
_VENDOR = "vendor/llama.cpp/"
_SUBMODULE_HEAD = ".git/modules/vendor/llama.cpp/HEAD"


@dataclass(frozen=True)
class SourceInfo:
    """Where a llama.cpp tree came from: what goes into a build's manifest when git cannot say."""

    origin: str  # e.g. "llama-cpp-python-0.3.36 sdist"
    version: str  # the llama-cpp-python version that vendors this tree
    commit: str | None  # full llama.cpp commit hash of the vendored submodule


def cache_root() -> Path:
    """``$HARNESS_CACHE`` or ``~/.cache/harness``: the same root scripts/llama_wheel.py uses."""
    root = os.environ.get("HARNESS_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "harness"


def sdist_path() -> Path:
    """The cached sdist, fetched from PyPI by scripts/llama_wheel.py when absent."""
    cached = cache_root() / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if cached.is_file():
        return cached
    script = Path(__file__).resolve().parents[2] / "scripts" / "llama_wheel.py"
    if not script.is_file():
        raise BuildError(
            f"{cached}: llama-cpp-python sdist missing; run scripts/llama_wheel.py --sdist"
        )
    result = subprocess.run(
        [sys.executable, str(script), "--sdist"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildError(f"could not download the llama-cpp-python sdist: {result.stderr.strip()}")
    return Path(result.stdout.strip())


def read_source_info(source: Path) -> SourceInfo | None:
    """The ``harness-source.json`` next to an extracted tree, or None for any other tree."""
    path = source / SOURCE_INFO
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return SourceInfo(origin=data["origin"], version=data["version"], commit=data.get("commit"))


def ensure_llama_source(sdist: Path | None = None, root: Path | None = None) -> Path:
    """Extract vendor/llama.cpp once and return the tree (cheap when already there)."""
    target = (root or cache_root() / "src") / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"
    if (target / SOURCE_INFO).is_file():
        return target
    archive = sdist or sdist_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=target.parent))
    try:
        commit = _extract_vendor(archive, tmp)
        info = {
            "origin": f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION} sdist",
            "version": LLAMA_CPP_PYTHON_VERSION,
            "commit": commit,
        }
        (tmp / SOURCE_INFO).write_text(json.dumps(info, indent=2) + "\n")
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / SOURCE_INFO).is_file():  # not a concurrent winner: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _extract_vendor(archive: Path, dest: Path) -> str | None:
    """Copy the members under ``*/vendor/llama.cpp/`` into ``dest``; return the submodule commit."""
    commit: str | None = None
    found = False
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            _top, _, rest = member.name.partition("/")
            if rest == _SUBMODULE_HEAD and member.isfile():
                handle = tar.extractfile(member)
                commit = handle.read().decode().strip() if handle else None
                continue
            if not rest.startswith(_VENDOR) or rest == _VENDOR:
                continue
            relative = rest[len(_VENDOR):]
            if relative == ".git" or relative.startswith(".git/"):
                continue  # a gitlink pointing into the sdist's .git: useless once extracted
            member.name = relative
            tar.extract(member, dest, filter="data")
            found = True
    if not found:
        raise BuildError(
            f"{archive}: no vendor/llama.cpp inside; is this a llama-cpp-python sdist?"
        )
    return commit
