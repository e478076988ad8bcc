"""Which services and paths the harness's code sends to a phone, and which the doctor misses.

The harness composes its device commands from string literals (and f-strings) spread over the
modules that talk to phones. This reads every such literal in the source, leaving out docstrings,
and finds what reaches a phone in it: ``dumpsys``/``cmd`` services, ``settings get`` keys,
``logcat`` tags, ``getprop``, and absolute paths under ``/proc``, ``/sys``, ``/dev``, ``/vendor``,
``/system`` and ``/data``. Each must be covered by a ``Source`` (``harness.doctor.sources``), so
a new command without a doctor probe is found by ``uncovered`` before it reaches a user's phone.

Paths are normalised first: a pid (``$p``, ``$$``, ``{pid}``, ``self``, ``PID``, digits) after
``/proc/`` becomes ``<pid>``, any other f-string field or shell variable becomes ``*``.
Pure apart from reading the files it is given.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.doctor.sources import SOURCES, Source

_SERVICE = re.compile(r"\b(dumpsys|cmd)\s+([a-z][\w.]*)")
_SETTINGS = re.compile(r"\bsettings\s+get\s+(\w+)\s+(\w+)")
_LOGCAT = re.compile(r"\blogcat\b(?:[^;|\n]*?\s-s\s+(\w+))?")
_WORDS = re.compile(r"\b(getprop|getenforce|toybox)\b|\$\{?(KSH_VERSION)|(?:^|[;&|(]\s*)(id|df)\b")
_PATH = re.compile(r"(?<![\w.~-])/(?:proc|sys|dev|vendor|system|data)(?:/[^\s\"'`;|)<>&,]*)?")
_PID = re.compile(r"^/proc/(?:\$\$|\$\{?\w+\}?|\{[^}]*\}|self|PID|<pid>|\\d\+|\d+)(?=/|$)")
_FIELD = re.compile(r"\{[^}]*\}|\$\{?\w+\}?")
# roots and helpers' prefixes name no source on their own
_ROOTS = {"/proc", "/sys", "/dev", "/vendor", "/system", "/data"}

# Folders of the harness whose strings never reach a phone's shell as the harness's commands:
# the virtual phone (it serves them), test helpers, and the doctor's own list.
SKIPPED = ("harness/virtual/", "harness/testing/", "harness/doctor/")


@dataclass(frozen=True)
class Reference:
    file: str
    line: int
    text: str  # normalised: "dumpsys battery", "/proc/<pid>/io"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def _literals(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string literal but docstrings; an f-string with its fields as ``{}``."""
    docs = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant | ast.JoinedStr)}
    inner: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in docs or id(node) in inner:
            continue
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    inner.add(id(value))
                    parts.append(str(value.value))
                else:
                    parts.append("{}")
            yield node.lineno, "".join(parts)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def normalise_path(path: str) -> str:
    path = _PID.sub("/proc/<pid>", path.rstrip("/") or "/")
    return _FIELD.sub("*", path)


def references(text: str) -> list[str]:
    """What in one literal reaches a phone, normalised."""
    found = [f"{tool} {name}" for tool, name in _SERVICE.findall(text)]
    found += [f"settings get {ns} {key}" for ns, key in _SETTINGS.findall(text)]
    found += ["logcat" + (f" -s {tag}" if tag else "") for tag in _LOGCAT.findall(text)]
    found += [next(w for w in words if w) for words in _WORDS.findall(text)]
    found += [p for p in (normalise_path(m) for m in _PATH.findall(text)) if p not in _ROOTS]
    return found


def scan(files: Iterable[Path], root: Path) -> list[Reference]:
    """The references in ``files`` (paths shown relative to ``root``)."""
    found: list[Reference] = []
    for path in sorted(files):
        name = path.relative_to(root).as_posix()
        if name.startswith(SKIPPED):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=name)
        for line, text in _literals(tree):
            found += [Reference(name, line, ref) for ref in references(text)]
    return found


def covered_by(reference: str, sources: Iterable[Source] = SOURCES) -> Source | None:
    """The source whose ``covers`` match ``reference`` (a folder of a covered path counts)."""
    for source in sources:
        for pattern in source.covers:
            folder = reference.startswith("/") and fnmatch.fnmatchcase(reference + "/x", pattern)
            if folder or fnmatch.fnmatchcase(reference, pattern):
                return source
    return None


def uncovered(references_: Iterable[Reference],
              sources: Iterable[Source] = SOURCES) -> list[Reference]:
    listed = tuple(sources)
    return [ref for ref in references_ if covered_by(ref.text, listed) is None]


def harness_files(root: Path) -> list[Path]:
    """The harness's Python modules under ``root`` (the repository)."""
    return sorted((root / "harness").rglob("*.py"))
