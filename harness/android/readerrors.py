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


def short_path(path: str) -> str:
    """``thermal_zone1/temp`` for a thermal file, ``/proc/<pid>/...`` for any pid's file.

    Only the part from ``/sys/`` or ``/proc/`` on counts: an applet that resolved the path
    somewhere else (a chroot, a sandbox) still names the same file.
    """
    for root in (_THERMAL, "/sys/", "/proc/"):
        if root in path:
            path = path[path.index(root):]
            break
    if path.startswith(_THERMAL):
        return path[len(_THERMAL):]
    return _PID.sub("/proc/<pid>/", path)


def parse_read_errors(text: str) -> tuple[str, ...]:
    """``short path: reason`` for every read error line, in order, once each.

    A path that still holds a glob (``thermal_zone*``) matched nothing: no file, not an error.
    """
    found: list[str] = []
    for line in text.splitlines():
        match = _ERROR.match(line.strip())
        if match is None or "*" in match.group("path"):
            continue
        reason = f"{short_path(match.group('path'))}: {match.group('reason').strip()}"
        if reason not in found:
            found.append(reason)
    return tuple(found)
