"""The phone's processes: host processes in the sessions its shells started.

Why sessions: every shell runs as a session leader (start_new_session), and a non-interactive sh
keeps its children, background jobs included, in that session; so ``nohup x &`` started by
``adb shell`` stays the phone's after the shell exits. A program that calls setsid escapes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str
    session: int
    cpu_ticks: int  # utime + stime
    rss_kb: int


def parse_stat(pid: int, text: str) -> ProcStat | None:
    """``/proc/<pid>/stat``; comm may hold spaces and parentheses: split at the last ')'."""
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < 0:
        return None
    fields = text[close_at + 2:].split()
    if len(fields) < 22:
        return None
    return ProcStat(
        pid=pid, comm=text[open_at + 1:close_at], state=fields[0], session=int(fields[3]),
        cpu_ticks=int(fields[11]) + int(fields[12]), rss_kb=int(fields[21]) * PAGE_KB,
    )


def read_stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return parse_stat(pid, handle.read())
    except (OSError, ValueError):
        return None


def allowed_cpus(mask: str) -> set[int]:
    """A Cpus_allowed_list (``"0-3,6"``) as a set; empty for anything unreadable."""
    found: set[int] = set()
    for span in filter(None, mask.replace(" ", "").split(",")):
        first, _, last = span.partition("-")
        if not first.isdigit() or not (last or first).isdigit():
            return set()
        found.update(range(int(first), int(last or first) + 1))
    return found


def runnable_threads(pid: int) -> list[str]:
    """The CPUs each thread of ``pid`` that is running or waiting for a CPU (state R) may use
    (its Cpus_allowed_list, e.g. ``"0-7"`` or ``"1"``); empty once the process is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    allowed: list[str] = []
    for tid in tasks:
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/stat") as handle:
                text = handle.read()
            close_at = text.rfind(")")
            if close_at < 0 or text[close_at + 2:close_at + 3] != "R":
                continue
            with open(f"{base}/status") as handle:
                mask = next((line.split(":", 1)[1].strip() for line in handle
                             if line.startswith("Cpus_allowed_list:")), "")
        except OSError:
            continue
        allowed.append(mask)
    return allowed


def session_members(sessions: set[int], ignore: set[int]) -> list[ProcStat]:
    """Live processes in ``sessions``; ``ignore`` caches pids known to be outside (updated)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in ignore:
            continue
        stat = read_stat(pid)
        if stat is None:
            continue
        if stat.session in sessions:
            if stat.state != "Z":
                found.append(stat)
        else:
            ignore.add(pid)
    return found


def read_text(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""
