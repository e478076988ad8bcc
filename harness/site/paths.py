"""Stable permalinks: every page's path is a pure function of what it is about.

A device, configuration or build name can hold anything (``/``, ``..``, ``<script>``, spaces,
non-ASCII), so a path keeps only a short readable slug of it and adds a hash of the whole
identity: two names never share a page and a name never escapes its folder.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NIGHT = re.compile(r"^\d{4}-\d{2}-\d{2}$")
SLUG_CHARS = 40


def short_hash(*parts: str) -> str:
    """A 10-hex-digit digest of ``parts`` (joined unambiguously)."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:10]


def slug(text: str) -> str:
    """``text`` with every run of characters unsafe in a file name as ``_``, shortened."""
    cleaned = _UNSAFE.sub("_", text).strip("._-")
    return cleaned[:SLUG_CHARS] or "x"


def device_page(serial: str) -> str:
    return f"devices/{slug(serial)}-{short_hash('device', serial)}.html"


def config_page(serial: str, config_id: str, engine: str) -> str:
    return (f"configs/{slug(serial)}-{slug(config_id)[:24]}-"
            f"{short_hash('config', serial, config_id, engine)}.html")


def build_page(build: str) -> str:
    return f"builds/{slug(build)}-{short_hash('build', build)}.html"


def night_page(night: str) -> str:
    if not _NIGHT.match(night):
        raise ValueError(f"not a night (YYYY-MM-DD): {night!r}")
    return f"nights/{night}.html"


def relative(from_page: str, to_page: str) -> str:
    """The href from one page to another (both site-relative POSIX paths, at most one folder
    deep)."""
    depth = from_page.count("/")
    return "../" * depth + to_page
