"""Did a trial's engine read its weights from storage while it decoded, and how much per token.

An engine whose mmap'd model does not fit the phone's memory keeps running: the kernel reclaims
weight pages and reads them back when they are needed again, once per token for a dense model
whose every weight is touched per token. The on-device sampler reads the engine's major faults
and its storage reads (``/proc/PID/io`` ``read_bytes``: bytes fetched from the block device,
page-cache hits not counted) with its memory lines; this module turns that cumulative series and
the decode window into per-token figures and the trial's ``paging`` label. Pure functions.

A page swapped back in from zram is a block read and a major fault too (``harness.virtual.
zram``): weights read from the model file are the engine's read bytes less the phone's swap-ins
(/proc/vmstat ``pswpin``, every process's, so an upper bound on the engine's: what is left is at
least what the engine read from files, and the engine's reads are at most what it read). So an
engine that maps its weights is labelled on both bounds: where they disagree (the swap-ins, some
of them perhaps another process's, are so large a share of the reads that they alone decide
the label) ``paging`` is unknown (None), and ``unknown`` says why with the figures; so too where
the swap-ins were not read and the engine had swap in use. An engine whose weights are not
file pages (read into memory, or locked) reads none of them back while decoding: its label is
the lower bound's.

Per token: the slope of the series over the decode window (its last ``n_gen / tg_tps``
seconds before the engine's end, from the last reading before it), times the seconds a token
took. Storage read once at load (a cold start) is before that window. The label: decoding read
at least ``PAGING_SHARE`` of the model file per generated token. A decode too short for two
readings is not paging when the storage could not have read that share per token at the speed
measured (a fast decode of a model that fits); else, with no usable window, the trial paged if
it read more than ``PAGING_TOTAL`` times the file in all. A paging trial is labelled, not
invalid: it is what the phone does with that model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.units import MB

PAGING_SHARE = 0.02  # of the model file read from storage per generated token
PAGING_TOTAL = 1.5  # times the model file read over the whole trial (no decode window)
MIN_WINDOW_POINTS = 2


@dataclass(frozen=True)
class Point:
    """The engine's cumulative paging counters at ``t_ms`` after its launch."""

    t_ms: int
    major_faults: int | None
    read_bytes: int | None
    swap_in_bytes: int | None = None  # the phone's swap-ins so far (every process's)
    swap_kb: int | None = None  # the engine's swapped-out memory at this reading


@dataclass(frozen=True)
class Paging:
    major_faults: int | None = None  # over the trial (the last reading)
    read_bytes: int | None = None
    read_bytes_per_token: float | None = None  # while decoding
    major_faults_per_token: float | None = None
    paging: bool | None = None
    swap_in_bytes: int | None = None  # the phone's swap-ins over the trial
    swap_in_bytes_per_token: float | None = None  # while decoding
    unknown: str | None = None  # why ``paging`` is None though the reads were measured

    def columns(self) -> dict[str, object]:
        return {"major_faults": self.major_faults, "read_bytes": self.read_bytes,
                "read_bytes_per_token": self.read_bytes_per_token,
                "major_faults_per_token": self.major_faults_per_token, "paging": self.paging,
                "swap_in_bytes": self.swap_in_bytes,
                "swap_in_bytes_per_token": self.swap_in_bytes_per_token,
                "paging_unknown": self.unknown}


def _last(points: Sequence[Point], name: str) -> int | None:
    values = [getattr(p, name) for p in points if getattr(p, name) is not None]
    return max(values) if values else None  # cumulative: the largest is the latest


def _slope(points: Sequence[Point], name: str, start_ms: float, end_ms: float) -> float | None:
    """Units per second of a cumulative counter over the decode window [start_ms, end_ms]:
    from the last reading at or before its start (a short window may hold one reading or none)
    to the last one inside it; None without two such readings."""
    known = sorted((p.t_ms, getattr(p, name)) for p in points if getattr(p, name) is not None)
    before = [r for r in known if r[0] <= start_ms][-1:]
    inside = [r for r in known if start_ms < r[0] <= end_ms]
    span = before + inside
    if len(span) < MIN_WINDOW_POINTS or span[-1][0] <= span[0][0]:
        return None
    return (span[-1][1] - span[0][1]) / ((span[-1][0] - span[0][0]) / 1000)


def _span(points: Sequence[Point], name: str) -> int | None:
    """How much a cumulative counter grew over the trial (last less first reading)."""
    values = [getattr(p, name) for p in sorted(points, key=lambda p: p.t_ms)
              if getattr(p, name) is not None]
    return max(values) - values[0] if values else None


def file_reads(read: float | None, swap_in: float | None) -> float | None:
    """Of bytes read (a trial's, or per token), those from files: less the swap-ins (None: not
    read, taken as none)."""
    return None if read is None else max(0.0, read - (swap_in or 0))


def analyse(points: Sequence[Point], end_ms: float | None, n_gen: int,
            tg_tps: float | None, model_bytes: int | None,
            storage_mb_s: float | None = None, maps_weights: bool = True) -> Paging:
    """The paging columns of one trial; ``end_ms``: the engine's end since its launch;
    ``maps_weights``: its weights are file pages the kernel may reclaim (mmap, unlocked)."""
    faults, read = _last(points, "major_faults"), _last(points, "read_bytes")
    swapped_in = _span(points, "swap_in_bytes")
    per_token_bytes = per_token_faults = per_token_swap = None
    if end_ms is not None and n_gen > 0 and tg_tps and tg_tps > 0 and math.isfinite(tg_tps):
        token_s = 1 / tg_tps
        start_ms = end_ms - n_gen * token_s * 1000
        rate = _slope(points, "read_bytes", start_ms, end_ms)
        per_token_bytes = rate * token_s if rate is not None else None
        fault_rate = _slope(points, "major_faults", start_ms, end_ms)
        per_token_faults = fault_rate * token_s if fault_rate is not None else None
        swap_rate = _slope(points, "swap_in_bytes", start_ms, end_ms)
        per_token_swap = swap_rate * token_s if swap_rate is not None else None
    swap_kb = max((p.swap_kb or 0 for p in points), default=0)
    paging, unknown = label_with_swap(per_token_bytes, per_token_swap, read, swapped_in,
                                      model_bytes, tg_tps, storage_mb_s, maps_weights)
    if swapped_in is None and swap_kb and maps_weights:
        paging, unknown = None, (f"the engine had {swap_kb} kB swapped out and the phone's "
                                 "swap-ins were not read: its storage reads cannot be told "
                                 "apart from pages back from swap")
    return Paging(faults, read, per_token_bytes, per_token_faults, paging,
                  swapped_in, per_token_swap, unknown)


def label_with_swap(per_token_bytes: float | None, per_token_swap: float | None,
                    read_bytes: float | None, swap_in_bytes: float | None,
                    model_bytes: int | None, tg_tps: float | None = None,
                    storage_mb_s: float | None = None,
                    maps_weights: bool = True) -> tuple[bool | None, str | None]:
    """The label on the engine's file reads, which lie between its reads less the phone's
    swap-ins and its reads: (label, why unknown). Both bounds give the same label, or the
    swap-ins decide it and it is unknown, with the figures."""
    low = label(file_reads(per_token_bytes, per_token_swap), file_reads(read_bytes, swap_in_bytes),
                model_bytes, tg_tps, storage_mb_s)
    if not maps_weights:
        return low, None  # its weights are not file pages: none of its reads are theirs
    high = label(per_token_bytes, read_bytes, model_bytes, tg_tps, storage_mb_s)
    if low == high or model_bytes is None:
        return low, None
    if per_token_bytes is not None:
        figures = (per_token_bytes, per_token_swap or 0.0, PAGING_SHARE * model_bytes,
                   "per generated token while decoding", f"{PAGING_SHARE:.0%} of the model")
    else:
        figures = (read_bytes or 0.0, swap_in_bytes or 0.0, PAGING_TOTAL * model_bytes,
                   "over the trial", f"{PAGING_TOTAL:g} times the model")
    return None, unknown_reason(*figures)


def unknown_reason(read: float, swap_in: float, line: float, where: str, line_is: str) -> str:
    """Why swap-ins leave the label unknown, with the figures (MB)."""
    return (f"the engine read {read / MB:.1f} MB {where} and the phone swapped in "
            f"{swap_in / MB:.1f} MB (every process's pages, /proc/vmstat pswpin): its file reads "
            f"were between {(file_reads(read, swap_in) or 0.0) / MB:.1f} and {read / MB:.1f} MB, "
            f"either side of the paging line ({line / MB:.1f} MB, {line_is})")


def label(per_token_bytes: float | None, read_bytes: float | None, model_bytes: int | None,
          tg_tps: float | None = None, storage_mb_s: float | None = None) -> bool | None:
    """True when decoding read the weights from storage (see the module's rule): the bytes
    are what was read from files (swap-ins taken out)."""
    if not model_bytes:
        return None
    if per_token_bytes is not None:
        return per_token_bytes >= PAGING_SHARE * model_bytes
    if tg_tps and storage_mb_s and tg_tps * PAGING_SHARE * model_bytes > storage_mb_s * MB:
        return False  # storage could not have fed a paging decode this fast
    if read_bytes is not None:
        return read_bytes > PAGING_TOTAL * model_bytes
    return None


#: a cold launch may find this share of the model still cached (a page or two another process
#: maps); a warm one must find at least WARM_SHARE of it
COLD_SHARE = 0.05
WARM_SHARE = 0.9


def cache_outcome(asked: str | None, resident: int | None, file_bytes: int | None,
                  tool_text: str) -> tuple[str | None, str | None]:
    """The ``cache`` a trial stores, and why it is ``unknown`` (None when the knob held): what
    the page-cache tool printed after evicting (cold) or reading in (warm) the model."""
    if asked not in ("cold", "warm"):
        return asked, None
    action = "evicting" if asked == "cold" else "reading in"
    if resident is None:
        said = next((line for line in tool_text.splitlines() if line.strip()), "")
        return "unknown", (f"{action} the model failed: {said.strip()}" if said
                           else f"{action} the model failed: the page-cache tool printed nothing")
    if not file_bytes:
        return asked, None
    share = resident / file_bytes
    if asked == "cold" and share > COLD_SHARE:
        return "unknown", (f"{action} the model left {share:.0%} of it cached (pages another "
                           "process maps stay)")
    if asked == "warm" and share < WARM_SHARE:
        return "unknown", (f"{action} the model left only {share:.0%} of it cached (memory "
                           "pressure reclaimed the rest)")
    return asked, None
