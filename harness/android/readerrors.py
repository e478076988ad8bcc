"""The lines toybox applets print when a file cannot be read: ``cat: PATH: Permission denied``.

A stock phone denies many files to the shell user (thermal zones, other processes' status,
``/proc/pressure``), and the harness records which ones, once per trial, instead of a crash or a
zero. The line names the path and the reason; this turns it into a short stable text.
"""

from __future__ import annotations

import re

# toybox and busybox: "APPLET: PATH: REASON"; mksh redirections: "sh: PATH: REASON"
_ERROR = re.compile(r"^(?:[\w.\[-]+: )+?(?P<path>/[^:]*): (?:open: )?(?P<reason>[A-Z][^:]*)$")
_PID = re.compile(r"^/proc/\d+/")
_THERMAL = "/sys/class/thermal/"


def device_path(path: str) -> str:
    """The part of a printed path from ``/sys/`` or ``/proc/`` on: an applet that resolved the
    path somewhere else (a chroot, a sandbox) still names the same file."""
    starts = [path.index(root) for root in ("/sys/", "/proc/") if root in path]
    return path[min(starts):] if starts else path


def read_errors(text: str) -> list[tuple[str, str]]:
    """``(device path, reason)`` of every read error line, in order (a path that still holds a
    glob matched nothing: no file, not an error)."""
    found = []
    for line in text.splitlines():
        match = _ERROR.match(line.strip())
        if match is not None and "*" not in match.group("path"):
            found.append((device_path(match.group("path")), match.group("reason").strip()))
    return found


def short_path(path: str) -> str:
    """``thermal_zone1/temp`` for a thermal file, ``/proc/<pid>/...`` for any pid's file."""
    path = device_path(path)
    if path.startswith(_THERMAL):
        return path[len(_THERMAL):]
    return _PID.sub("/proc/<pid>/", path)


def parse_read_errors(text: str) -> tuple[str, ...]:
    """``short path: reason`` for every read error line, in order, once each.

    A path that still holds a glob (``thermal_zone*``) matched nothing: no file, not an error.
    """
    found: list[str] = []
    for path, why in read_errors(text):
        reason = f"{short_path(path)}: {why}"
        if reason not in found:
            found.append(reason)
    return tuple(found)
