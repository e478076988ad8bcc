"""Kill lines of the low-memory killer daemon (logcat tag ``lowmemorykiller``).

The line is found by its own shape, wherever it sits, so the threadtime prefix, the Android
Studio copy prefix, or none at all make no difference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_KILL = re.compile(
    r"Kill '(?P<process>.*)' \((?P<pid>\d+)\), uid (?P<uid>\d+), "
    r"(?:oom_score_adj|oom_adj) (?P<adj>-?\d+) to free (?P<rss>\d+) ?kB(?P<rest>.*)$"
)
_ANON = re.compile(r"(\d+) ?kB anon rss")
_SWAP = re.compile(r"(\d+) ?k[bB] swap")
_REASON = re.compile(r"reason: (.*)$")


@dataclass(frozen=True)
class LmkdKill:
    """One lmkd kill. Android 11 prints no swap; ``reason`` is None when lmkd gave none."""

    process: str
    pid: int
    uid: int
    oom_score_adj: int
    rss_kb: int
    swap_kb: int | None = None
    anon_rss_kb: int | None = None
    reason: str | None = None


def parse_lmkd_kill(line: str) -> LmkdKill | None:
    """An lmkd ``Kill '...'`` line (Android 11, 12-15 and the newer extended format), or None."""
    match = _KILL.search(line.rstrip())
    if match is None:
        return None
    rest = match.group("rest")
    anon, swap, reason = _ANON.search(rest), _SWAP.search(rest), _REASON.search(rest)
    return LmkdKill(
        process=match.group("process"),
        pid=int(match.group("pid")),
        uid=int(match.group("uid")),
        oom_score_adj=int(match.group("adj")),
        rss_kb=int(match.group("rss")),
        swap_kb=int(swap.group(1)) if swap else None,
        anon_rss_kb=int(anon.group(1)) if anon else None,
        reason=reason.group(1).strip() if reason else None,
    )


def parse_lmkd_kills(text: str) -> tuple[LmkdKill, ...]:
    """Every kill line of a logcat excerpt, in order."""
    kills = (parse_lmkd_kill(line) for line in text.splitlines())
    return tuple(kill for kill in kills if kill is not None)
