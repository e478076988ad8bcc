"""The site's memo keys: what a remembered answer was computed from (inputs, code, schema).

A change point, a comparison or a recommendation is remembered under the digest of its inputs
and ``code_key()``, so an answer computed by other code or for another store schema is never
served again (as asv keys its results by the benchmark's code).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from harness.store import SCHEMA_VERSION as STORE_SCHEMA

SCHEMA_VERSION = 2


@functools.cache
def code_key() -> str:
    """What every memo key carries besides its inputs: the harness's own source (every module
    an answer can come from: analysis, planner, store) and the store's schema version, so an
    answer computed by other code is never served (as asv keys results by benchmark code)."""
    package = Path(__file__).resolve().parents[1]
    found = hashlib.sha256(f"{SCHEMA_VERSION}/{STORE_SCHEMA}".encode())
    for path in sorted(package.rglob("*.py")):
        found.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return found.hexdigest()[:16]


class Memo(Protocol):
    """A store of computed JSON values by key (the build keeps one on disk)."""

    def get(self, key: str, compute: Callable[[], Any]) -> Any: ...

    def peek(self, key: str) -> Any | None:
        """The value stored under ``key``, or None (nothing is computed)."""


class DictMemo:
    """A ``Memo`` in memory (tests, one-off builds)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self.values:
            self.values[key] = compute()
        return self.values[key]

    def peek(self, key: str) -> Any | None:
        return self.values.get(key)


def digest(value: Any, code: str = "") -> str:
    """SHA-256 of ``value`` as canonical JSON (a memo key: with ``code_key()``)."""
    text = code + json.dumps(value, sort_keys=True, separators=(",", ":"), default=str,
                             allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
