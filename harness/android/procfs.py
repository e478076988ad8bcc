"""``/proc/<pid>/smaps_rollup`` and ``/proc/<pid>/status``.

Readable by the shell user for processes it launched, which is exactly the engine binary the
harness runs; these are the cheap per-sample alternative to ``dumpsys meminfo``.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.android._numbers import kb_value, to_int


@dataclass(frozen=True)
class SmapsRollup:
    """Totals over all mappings (KiB). ``Pss_Anon``/``Pss_File``/``Pss_Shmem`` need kernel 5.x."""

    pss_kb: int | None
    rss_kb: int | None
    swap_pss_kb: int | None
    pss_anon_kb: int | None = None
    pss_file_kb: int | None = None
    pss_shmem_kb: int | None = None
    swap_kb: int | None = None
    private_dirty_kb: int | None = None


@dataclass(frozen=True)
class ProcStatus:
    """Memory lines of ``status``. ``vm_hwm_kb`` is the kernel's peak RSS since the start."""

    name: str | None
    vm_rss_kb: int | None
    vm_hwm_kb: int | None
    vm_swap_kb: int | None
    rss_anon_kb: int | None = None
    rss_file_kb: int | None = None
    rss_shmem_kb: int | None = None
    pid: int | None = None
    threads: int | None = None


def _key_values(text: str) -> dict[str, str]:
    """``Key:  value`` lines (any indent, TAB or spaces); first occurrence wins."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key and " " not in key:
            found.setdefault(key, value.strip())
    return found


def parse_smaps_rollup(text: str) -> SmapsRollup | None:
    """``smaps_rollup``; None when it holds neither Pss nor Rss."""
    values = _key_values(text)

    def kb(key: str) -> int | None:
        return kb_value(values[key]) if key in values else None

    if kb("Pss") is None and kb("Rss") is None:
        return None
    return SmapsRollup(
        pss_kb=kb("Pss"), rss_kb=kb("Rss"), swap_pss_kb=kb("SwapPss"),
        pss_anon_kb=kb("Pss_Anon"), pss_file_kb=kb("Pss_File"), pss_shmem_kb=kb("Pss_Shmem"),
        swap_kb=kb("Swap"), private_dirty_kb=kb("Private_Dirty"),
    )


def parse_proc_status(text: str) -> ProcStatus | None:
    """``/proc/<pid>/status``; None when no memory line and no Name is found.

    ``name`` is the kernel comm: at most 15 characters, the head of a binary's file name but the
    tail of an app's package name.
    """
    values = _key_values(text)

    def kb(key: str) -> int | None:
        return kb_value(values[key]) if key in values else None

    if not any(key in values for key in ("Name", "VmRSS", "VmHWM", "VmSwap")):
        return None
    return ProcStatus(
        name=values.get("Name"), vm_rss_kb=kb("VmRSS"), vm_hwm_kb=kb("VmHWM"),
        vm_swap_kb=kb("VmSwap"), rss_anon_kb=kb("RssAnon"), rss_file_kb=kb("RssFile"),
        rss_shmem_kb=kb("RssShmem"), pid=to_int(values.get("Pid")),
        threads=to_int(values.get("Threads")),
    )
