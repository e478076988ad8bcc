#!/usr/bin/env python3
"""Build (once) and locate the llama-cpp-python wheel for this machine.

llama-cpp-python ships no binary wheel on PyPI, so pip compiles llama.cpp for it (about 6 minutes
on 2 cores). We compile it once per (version, CMAKE_ARGS) into a cache folder keyed by both, and
install from there afterwards. ``-DGGML_NATIVE=OFF`` is always passed: a native build uses AMX on
the CPUs of these machines and segfaults on the first quantised matmul.

Prints the directory holding the wheel (for ``pip install --find-links``). Standard library only:
it runs before the project is installed.

    python scripts/llama_wheel.py            # build if needed, print the wheel folder
    python scripts/llama_wheel.py --sdist    # download if needed, print the sdist path
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "0.3.36"
CMAKE_ARGS = "-DGGML_NATIVE=OFF"


def cache_root() -> Path:
    root = os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness"
    return Path(root)


def sdist_path() -> Path:
    """The llama-cpp-python source distribution, downloaded once from the package index."""
    folder = cache_root() / "sdist"
    wanted = folder / f"llama_cpp_python-{VERSION}.tar.gz"
    if wanted.is_file():
        return wanted
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
             "--no-deps", "--dest", tmp, f"llama-cpp-python=={VERSION}"],
            check=True,
        )
        (got,) = Path(tmp).glob("*.tar.gz")
        os.replace(got, wanted)
    return wanted


def wheel_dir() -> Path:
    extra = os.environ.get("CMAKE_ARGS", "")
    args = f"{CMAKE_ARGS} {extra}".strip()
    tag = f"{sys.implementation.cache_tag}-{os.uname().machine}"
    key = hashlib.sha256(f"{VERSION}|{args}|{tag}".encode()).hexdigest()[:16]
    folder = cache_root() / "wheels" / f"llama-cpp-python-{VERSION}-{key}"
    if any(folder.glob("llama_cpp_python-*.whl")):
        return folder
    source = sdist_path()
    print(f"compiling llama-cpp-python {VERSION} with CMAKE_ARGS='{args}' "
          "(once per machine, about 6 minutes on 2 cores)...", file=sys.stderr, flush=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        env = dict(os.environ, CMAKE_ARGS=args)
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", tmp,
             str(source)],
            check=True, env=env,
        )
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
        os.mkdir(tmp)  # TemporaryDirectory wants something to remove
    return folder


def main() -> int:
    if "--sdist" in sys.argv[1:]:
        print(sdist_path())
    else:
        print(wheel_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
