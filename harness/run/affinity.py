"""Whether a cell's CPU affinity and thread count took effect, read back from the phone.

Asking is not getting: llama.cpp ignored ``-C``/``--cpu-strict`` on Android until its fix, a
mask naming offline or absent CPUs is refused by the kernel, and an OpenMP build applies no mask
with one thread. The on-device watcher (``harness.run.trial``) records what the kernel says:
the distinct ``Cpus_allowed_list`` values over the engine's threads (with how many threads
there were), and the largest ``Threads:`` count of the process. A trial whose applied CPUs are
not within the requested mask, or that ran fewer threads than asked, is flagged
(``config_not_applied``) and kept out of verdicts, never silently labelled with its request.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.android.cpu import format_cpu_range, mask_cpus, parse_cpu_range


@dataclass(frozen=True)
class Readback:
    """What the watcher saw of the engine's threads."""

    threads_seen: int | None  # most threads the process had at once
    applied_cpus: frozenset[int] | None  # CPUs allowed over all threads, while most ran


@dataclass(frozen=True)
class AffinityCheck:
    applied_affinity: str | None  # e.g. "4-7"
    affinity_applied: bool | None  # None when nothing was requested or nothing was seen
    threads_seen: int | None
    not_applied: str | None  # the reason the trial is flagged, None when it is not


def parse_readback(threads_text: str, affinity_log: str) -> Readback:
    """The watcher's ``mem`` third field (most ``Threads:``) and its ``aff`` log.

    Each ``aff`` line is ``<tasks> <Cpus_allowed_list> ...`` (distinct lists over the tasks),
    written when it changes. The applied set is read from the last line with the most tasks: the
    compute threads are all up and have applied their masks by then (a new thread starts with its
    creator's mask and pins itself a moment later).
    """
    rows: list[tuple[int, frozenset[int]]] = []
    for line in affinity_log.splitlines():
        words = line.split()
        if len(words) < 2 or not words[0].isdigit():
            continue
        cpus = frozenset(cpu for word in words[1:] for cpu in parse_cpu_range(word))
        if cpus:
            rows.append((int(words[0]), cpus))
    threads = int(threads_text) if threads_text.strip().isdigit() else None
    most = max((n for n, _ in rows), default=None)
    if most is not None:
        threads = max(threads or 0, most)
    applied = next((cpus for n, cpus in reversed(rows) if n == most), None)
    return Readback(threads_seen=threads or None, applied_cpus=applied)


def check_applied(requested_mask: str | None, threads_asked: int,
                  readback: Readback) -> AffinityCheck:
    """Flag a trial whose threads ran outside the requested CPUs, or fewer than asked.

    ``requested_mask`` is the hex mask the engine was given (None: all CPUs, nothing to check).
    Nothing seen means nothing is flagged: the check needs the watcher's evidence.
    """
    applied = readback.applied_cpus
    applied_text = format_cpu_range(applied) if applied else None
    reasons: list[str] = []
    within: bool | None = None
    if requested_mask is not None and applied is not None:
        wanted = mask_cpus(requested_mask)
        within = bool(wanted) and applied <= wanted
        if not within:
            reasons.append(f"affinity {requested_mask} (CPUs {format_cpu_range(wanted)}) "
                           f"requested, threads ran on CPUs {applied_text}")
    seen = readback.threads_seen
    if seen is not None and seen < threads_asked:
        reasons.append(f"{threads_asked} threads asked, at most {seen} ran")
    return AffinityCheck(applied_affinity=applied_text, affinity_applied=within,
                         threads_seen=seen, not_applied="; ".join(reasons) or None)
