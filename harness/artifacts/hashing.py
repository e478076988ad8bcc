"""SHA-256 of files: the one way builds, models and ladders are named by their bytes.

``file_sha256`` reads the file every time (builds are verified against what is on disk now);
``cached_file_sha256`` remembers each digest in this process by (path, size, mtime), because
hashing a multi-GB model takes seconds and the planner, the push cache and the store all want it.
Both raise ``OSError`` for a file they cannot read; callers say what the file was.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from harness.units import MIB

BLOCK = MIB  # bytes read at a time

_CACHE: dict[tuple[str, int, int], str] = {}
_LOCK = threading.Lock()


def file_sha256(path: Path | str) -> str:
    """The hex SHA-256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def cached_file_sha256(path: Path | str) -> str:
    """``file_sha256``, computed once per file version (path, size, mtime) in this process."""
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    value = file_sha256(path)
    with _LOCK:
        _CACHE[key] = value
    return value


def sha256_cache_size() -> int:
    """How many digests are cached (for tests and diagnostics)."""
    return len(_CACHE)
