"""The device side of the ``llama-cpp-python`` engine: a Python with llama_cpp, and our bench.

A stock phone has no Python. Someone who measures llama-cpp-python on a phone pushes one built
for Android (with llama-cpp-python compiled for it) to ``PYTHON_HOME``; Termux's own Python is
not reachable from ``adb shell`` (it lives in the app's private data). The harness finds that
interpreter, reads llama_cpp's version (stored as the trial's build version), and pushes the few
modules of its bench (``harness.engines.pybench`` and what it imports, no third-party package)
next to the builds, content-addressed like every artefact.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path

PYTHON_HOME = "/data/local/tmp/python"
PYTHON_CANDIDATES = (f"{PYTHON_HOME}/bin/python3", f"{PYTHON_HOME}/bin/python")
REMOTE_ROOT = "/data/local/tmp/harness/py"
# The bench and its imports, relative to the folder holding the harness package.
BENCH_MODULES = (
    "harness/__init__.py", "harness/cell.py", "harness/errors.py",
    "harness/engines/__init__.py", "harness/engines/base.py",
    "harness/engines/llama_bench.py", "harness/engines/pybench.py",
)
_MARK = "@@harness:python"


@dataclass(frozen=True)
class PythonRuntime:
    path: str  # the interpreter on the device
    llama_cpp_version: str
    gpu_offload: bool = False  # llama_supports_gpu_offload(): the wheel has a GPU backend


def probe_command(candidates: tuple[str, ...] = PYTHON_CANDIDATES) -> str:
    """One shell line (mksh and toybox only) that names the first interpreter and its llama_cpp."""
    check = shlex.quote("import llama_cpp; print(llama_cpp.__version__, "
                        "'gpu=%d' % bool(llama_cpp.llama_supports_gpu_offload()))")
    words = " ".join(shlex.quote(c) for c in candidates)
    return (f"for p in {words}; do if [ -x \"$p\" ]; then echo {_MARK} \"$p\"; "
            f"\"$p\" -c {check} 2>&1 | tail -n 3; break; fi; done")


def parse_probe(output: str, serial: str) -> PythonRuntime | str:
    """The runtime, or why there is none (one line naming the phone and what to do)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    found = [i for i, line in enumerate(lines) if line.startswith(_MARK)]
    if not found:
        return (f"{serial} has no Python for llama-cpp-python: push a Python for Android with "
                f"llama-cpp-python to {PYTHON_HOME} (docs/engines.md)")
    path = lines[found[0]][len(_MARK):].strip()
    rest = lines[found[0] + 1:]
    version = rest[-1] if rest else ""
    if not rest or any(word in version for word in ("Error", "error", "not found")):
        detail = version or "no output"
        return f"{serial}: {path} cannot import llama_cpp ({detail}): pip install llama-cpp-python"
    words = version.split()
    gpu = len(words) > 1 and words[1] == "gpu=1"
    return PythonRuntime(path, words[0] if words else version, gpu_offload=gpu)


def bench_files(package_parent: Path | None = None) -> list[tuple[Path, str]]:
    """(file on this host, path relative to the pushed folder) for every bench module."""
    parent = package_parent or Path(__file__).resolve().parent.parent.parent
    return [(parent / rel, rel) for rel in BENCH_MODULES]


def remote_folder(shas: list[str]) -> str:
    digest = hashlib.sha256("|".join(shas).encode()).hexdigest()[:12]
    return f"{REMOTE_ROOT}/{digest}"
