"""``dumpsys meminfo`` (one process and the system summary) and ``/proc/meminfo``.

The per-process table changes shape across Android versions: no ``Rss Total`` column before
Android 11, ``SwapPss Dirty`` or ``Swap Dirty`` depending on the kernel, ``-a`` adds three columns,
rows without heap columns end in spaces or nothing. So the table is read by column *titles*
(the two header rows zipped), never by position, and rows simply fill the first N columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.android._numbers import grouped_kb, kb_value

_BLOCK = re.compile(r"^\s*\*\* MEMINFO in pid (\d+) \[(.*)\] \*\*\s*$")
_ROW = re.compile(r"^\s*(?P<label>.*?[^\d\s-].*?)\s+(?P<nums>-?\d+(?:\s+-?\d+)*)\s*$")
_SUMMARY_ROW = re.compile(r"^\s*(?P<label>[A-Za-z][A-Za-z ]*):(?P<rest>(?:\s+\d+){1,2})\s*$")
_TOTALS = re.compile(r"(TOTAL(?: PSS| RSS| SWAP PSS| SWAP \(KB\))?):\s+(-?\d+)")

# App Summary label -> field name of ProcessMemInfo (the Pss column).
_SUMMARY_FIELDS = {
    "Java Heap": "java_heap_kb",
    "Native Heap": "native_heap_kb",
    "Code": "code_kb",
    "Stack": "stack_kb",
    "Graphics": "graphics_kb",
    "Private Other": "private_other_kb",
    "System": "system_kb",
}


@dataclass(frozen=True)
class ProcessMemInfo:
    """The first ``** MEMINFO`` block of ``dumpsys meminfo <pid|pkg>`` (all values in KiB).

    ``rss_kb`` is None before Android 11 (no Rss column). ``swap_pss_kb`` is the swap the process
    is charged for; ``swap_is_pss`` says whether the device reported proportional swap (SwapPss)
    or plain swapped pages (``Swap``/``TOTAL SWAP (KB)``), since both appear on recent phones.
    """

    pid: int
    name: str
    pss_kb: int | None = None
    rss_kb: int | None = None
    swap_pss_kb: int | None = None
    swap_is_pss: bool | None = None
    private_dirty_kb: int | None = None
    private_clean_kb: int | None = None
    java_heap_kb: int | None = None
    native_heap_kb: int | None = None
    code_kb: int | None = None
    stack_kb: int | None = None
    graphics_kb: int | None = None
    private_other_kb: int | None = None
    system_kb: int | None = None
    # the graphics rows of the table (Gfx dev, EGL mtrack, GL mtrack: the GPU's memory as the
    # memtrack HAL reports it), summed; None when the table has none (no memtrack HAL: the
    # App Summary's "Graphics: 0" then says nothing)
    mtrack_kb: int | None = None


GRAPHICS_ROWS = ("Gfx dev", "EGL mtrack", "GL mtrack")


@dataclass(frozen=True)
class ProcessPss:
    """One ``NNN,NNNK: name (pid N ...)`` line of the system summary."""

    pss_kb: int
    name: str
    pid: int


@dataclass(frozen=True)
class MemInfoSummary:
    """``dumpsys meminfo`` without arguments: the RAM totals at the end (KiB)."""

    total_ram_kb: int | None
    free_ram_kb: int | None
    used_ram_kb: int | None
    lost_ram_kb: int | None
    ram_status: str | None = None
    zram_physical_kb: int | None = None
    swap_used_kb: int | None = None
    swap_total_kb: int | None = None
    processes: tuple[ProcessPss, ...] = ()


@dataclass(frozen=True)
class ProcMemInfo:
    """``/proc/meminfo`` fields the harness uses (KiB); absent lines read as None."""

    mem_total_kb: int | None
    mem_free_kb: int | None
    mem_available_kb: int | None
    buffers_kb: int | None = None
    cached_kb: int | None = None
    swap_total_kb: int | None = None
    swap_free_kb: int | None = None


def parse_meminfo(text: str) -> ProcessMemInfo | None:
    """The first process block of ``dumpsys meminfo <pid|pkg>``, or None (not found, timeout)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _BLOCK.match(line)), None)
    if start is None:
        return None
    head = _BLOCK.match(lines[start])
    assert head is not None
    end = next((i for i in range(start + 1, len(lines)) if _BLOCK.match(lines[i])), len(lines))
    block = lines[start + 1 : end]
    fields: dict[str, int | bool | None] = {}
    fields.update(_read_table(block))
    fields.update(_read_app_summary(block))
    _read_totals(block, fields)
    return ProcessMemInfo(pid=int(head.group(1)), name=head.group(2), **fields)  # type: ignore[arg-type]


def _read_table(block: list[str]) -> dict[str, int | bool | None]:
    """Numbers of the table's TOTAL row, addressed by column title."""
    dashes = next((i for i, line in enumerate(block) if line.strip().startswith("------")), None)
    if dashes is None or dashes < 2 or "App Summary" in block[dashes - 1]:
        return {}
    top, bottom = block[dashes - 2].split(), block[dashes - 1].split()
    if len(top) != len(bottom) or not top:
        return {}
    titles = [f"{a} {b}" for a, b in zip(top, bottom, strict=True)]
    graphics: int | None = None
    for line in block[dashes + 1 :]:
        if not line.strip():
            break
        match = _ROW.match(line)
        if match is not None and match.group("label").strip() in GRAPHICS_ROWS:
            graphics = (graphics or 0) + int(match.group("nums").split()[0])
        if match is None or match.group("label").strip() != "TOTAL":
            continue
        values = dict(zip(titles, (int(n) for n in match.group("nums").split()), strict=False))
        swap_title = next((t for t in titles if t.startswith("Swap")), None)
        return {
            "pss_kb": values.get("Pss Total"),
            "rss_kb": values.get("Rss Total"),
            "private_dirty_kb": values.get("Private Dirty"),
            "private_clean_kb": values.get("Private Clean"),
            "swap_pss_kb": values.get(swap_title) if swap_title else None,
            "swap_is_pss": swap_title.startswith("SwapPss") if swap_title else None,
            "mtrack_kb": graphics,
        }
    return {}


def _read_app_summary(block: list[str]) -> dict[str, int | bool | None]:
    """The Pss column of the App Summary rows (the Rss column only matters for totals)."""
    start = next((i for i, line in enumerate(block) if line.strip() == "App Summary"), None)
    if start is None:
        return {}
    found: dict[str, int | bool | None] = {}
    for line in block[start + 1 :]:
        if line.strip().startswith("TOTAL"):
            break
        match = _SUMMARY_ROW.match(line)
        if match is None:
            continue
        field = _SUMMARY_FIELDS.get(match.group("label").strip())
        numbers = match.group("rest").split()
        # A lone number far to the right is an Rss-only row (``Unknown:``); skip those.
        if field is not None and (len(numbers) == 2 or len(line.rstrip()) <= 40):
            found[field] = int(numbers[0])
    return found


def _read_totals(block: list[str], fields: dict[str, int | bool | None]) -> None:
    """``TOTAL PSS: N  TOTAL RSS: N  TOTAL SWAP PSS: N`` or ``TOTAL: N  TOTAL SWAP (KB): N``."""
    for line in block:
        pairs = dict(_TOTALS.findall(line))
        if line.strip().startswith("TOTAL") and any(k.startswith("TOTAL SWAP") for k in pairs):
            pss = pairs.get("TOTAL PSS", pairs.get("TOTAL"))
            if fields.get("pss_kb") is None and pss is not None:
                fields["pss_kb"] = int(pss)
            if fields.get("rss_kb") is None and "TOTAL RSS" in pairs:
                fields["rss_kb"] = int(pairs["TOTAL RSS"])
            if "TOTAL SWAP PSS" in pairs:
                fields["swap_pss_kb"], fields["swap_is_pss"] = int(pairs["TOTAL SWAP PSS"]), True
            elif "TOTAL SWAP (KB)" in pairs:
                fields["swap_pss_kb"], fields["swap_is_pss"] = int(pairs["TOTAL SWAP (KB)"]), False
            return


_SUMMARY_LINE = re.compile(r"^\s*(Total RAM|Free RAM|Used RAM|Lost RAM|ZRAM):\s*(.*)$")
_PROCESS_LINE = re.compile(r"^\s*([\d,]+)K: (.+?) \(pid (\d+)")
_ZRAM = re.compile(r"(-?[\d,]+)K physical used for\s+(-?[\d,]+)K in swap \(\s*(-?[\d,]+)K total")


def parse_meminfo_summary(text: str) -> MemInfoSummary | None:
    """The RAM totals of ``dumpsys meminfo`` (no arguments), or None without a Total RAM line."""
    values: dict[str, str] = {}
    processes: list[ProcessPss] = []
    in_by_process = False
    for line in text.splitlines():
        if line.startswith("Total PSS by process"):
            in_by_process = True
            continue
        if not line.strip() or line.startswith("Total PSS by"):
            in_by_process = in_by_process and bool(line.strip())
            continue
        match = _SUMMARY_LINE.match(line)
        if match is not None:
            values.setdefault(match.group(1), match.group(2))
            continue
        process = _PROCESS_LINE.match(line) if in_by_process else None
        if process is not None:
            pss = grouped_kb(process.group(1))
            if pss is not None:
                processes.append(ProcessPss(pss, process.group(2), int(process.group(3))))
    if "Total RAM" not in values:
        return None
    total = values["Total RAM"]
    status = re.search(r"\(status (\w+)\)", total)
    zram = _ZRAM.search(values.get("ZRAM", ""))
    return MemInfoSummary(
        total_ram_kb=grouped_kb(total),
        free_ram_kb=grouped_kb(values["Free RAM"]) if "Free RAM" in values else None,
        used_ram_kb=grouped_kb(values["Used RAM"]) if "Used RAM" in values else None,
        lost_ram_kb=grouped_kb(values["Lost RAM"]) if "Lost RAM" in values else None,
        ram_status=status.group(1) if status else None,
        zram_physical_kb=grouped_kb(zram.group(1)) if zram else None,
        swap_used_kb=grouped_kb(zram.group(2)) if zram else None,
        swap_total_kb=grouped_kb(zram.group(3)) if zram else None,
        processes=tuple(processes),
    )


_PROC_FIELDS = {
    "MemTotal": "mem_total_kb",
    "MemFree": "mem_free_kb",
    "MemAvailable": "mem_available_kb",
    "Buffers": "buffers_kb",
    "Cached": "cached_kb",
    "SwapTotal": "swap_total_kb",
    "SwapFree": "swap_free_kb",
}


def parse_proc_meminfo(text: str) -> ProcMemInfo | None:
    """``/proc/meminfo``; None when not even MemTotal is there."""
    found: dict[str, int | None] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        field = _PROC_FIELDS.get(key.strip())
        if sep and field is not None and field not in found:
            found[field] = kb_value(rest)
    if found.get("mem_total_kb") is None:
        return None
    return ProcMemInfo(
        mem_total_kb=found.get("mem_total_kb"),
        mem_free_kb=found.get("mem_free_kb"),
        mem_available_kb=found.get("mem_available_kb"),
        buffers_kb=found.get("buffers_kb"),
        cached_kb=found.get("cached_kb"),
        swap_total_kb=found.get("swap_total_kb"),
        swap_free_kb=found.get("swap_free_kb"),
    )
