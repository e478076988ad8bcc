"""The cause of a started process's failure, read from its log, for the user's own terminal.

A daemon or server the harness starts writes to a log file; when it dies at start, the one line
that says why (a Python error's last line, a program's last message) is printed with the error
instead of only the log's path. Pure: ``cause`` takes the log's text; ``failed_at_start`` reads
the part of the log this launch wrote (from the offset it had before the launch).
"""

from __future__ import annotations

import re
from pathlib import Path

# "harness.errors.DeviceError: message" or "ValueError: message", the last line of a traceback
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit)"
                        r"|KeyboardInterrupt|SystemExit): ?(?P<message>.*)$")
_OUR_ERRORS = "harness.errors."
TAIL_BYTES = 64 * 1024
MAX_CAUSE_CHARS = 400


def cause(text: str) -> str:
    """The line of a log that says why its process stopped, or "" for an empty log.

    After a Python traceback, its exception line (the harness's own errors without their class
    name: they are written for the user); otherwise the last non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        for line in reversed(lines):
            match = _EXCEPTION.match(line)
            if match:
                return _short(match.group("message") if line.startswith(_OUR_ERRORS) else line)
    return _short(lines[-1])


def _short(line: str) -> str:
    return line if len(line) <= MAX_CAUSE_CHARS else line[:MAX_CAUSE_CHARS - 3] + "..."


def log_size(path: Path) -> int:
    """The log's size now: where the next launch's lines will start."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_since(path: Path, offset: int) -> str:
    """What was appended to ``path`` from ``offset`` on (its last TAIL_BYTES), "" if unreadable."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(offset, handle.seek(0, 2) - TAIL_BYTES))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def failed_at_start(what: str, log: Path, offset: int = 0) -> str:
    """``WHAT: CAUSE (log: PATH)``, or ``WHAT; see PATH`` when the log says nothing."""
    found = cause(read_since(log, offset))
    return f"{what}: {found} (log: {log})" if found else f"{what}; see {log}"
