"""The phone's memory bandwidth, for the validity gate on decode speed (``harness.run.validity``).

From the device profile when it states ``memory_bandwidth_gbps`` (the memory's nominal peak);
otherwise measured once per phone and run by a small copy test on the phone itself: ``dd`` from
/dev/zero to /dev/null in 1 MiB blocks, timed. Android's toybox dd prints
``<bytes> bytes (<n> M) copied, <s> s, <rate>/s``; busybox's (the virtual phone's dd, Debian's
toybox has none) prints only its records lines, so the shell's clock (``date +%s%N``) around it
times the copy instead. A 1 MiB block stays in the caches, so the figure is one core's copy rate
into cache: above what the memory sustains, which is the safe side for a gate that flags only
impossible results. Virtual phones run their applets on the host, so there it is the host's.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.device.base import Device
from harness.errors import HarnessError
from harness.run.probe import MARK, split_sections
from harness.run.validity import Bandwidth
from harness.units import MIB

PROBE_MIB = 1024  # the first copy: about 0.1 s at 10 GB/s
MIN_PROBE_S = 0.2  # a shorter copy is timed again, larger, so the clock's step does not matter
MAX_PROBE_MIB = 32768
# "1073741824 bytes (1.0 G) copied, 0.104 s, 9.6 G/s" (toybox), "..., 0.0966 s, 11.1 GB/s" (GNU)
_DD_LINE = re.compile(r"(\d+)\s+bytes\b.*?copied,\s*([0-9]+(?:\.[0-9]+)?)\s*s")
_RECORDS_OUT = re.compile(r"^(\d+)\+(\d+) records out", re.MULTILINE)


def probe_command(count_mib: int) -> str:
    """The copy of ``count_mib`` MiB between two nanosecond clock readings."""
    return (f"echo {MARK}t0; date +%s%N; echo {MARK}dd; "
            f"dd if=/dev/zero of=/dev/null bs=1048576 count={int(count_mib)} 2>&1; "
            f"echo {MARK}t1; date +%s%N")


def _nanoseconds(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None  # a date without %N prints "...N"


def parse_probe(text: str, count_mib: int) -> tuple[int, float] | None:
    """(bytes copied, seconds) of one probe: dd's own figures when it prints them, else the
    clock readings around it (with dd's records confirming the whole count was copied)."""
    sections = split_sections(text)
    dd = sections.get("dd", "")
    match = _DD_LINE.search(dd)
    if match and float(match.group(2)) > 0:
        return int(match.group(1)), float(match.group(2))
    records = _RECORDS_OUT.search(dd)
    start, end = _nanoseconds(sections.get("t0", "")), _nanoseconds(sections.get("t1", ""))
    if records is None or int(records.group(1)) != count_mib or start is None or end is None:
        return None
    if end <= start:
        return None
    return count_mib * MIB, (end - start) / 1e9


def measure(device: Device) -> Bandwidth | None:
    """The copy rate of the phone, or None when its shell cannot time a copy."""
    count = PROBE_MIB
    while True:
        try:
            result = device.shell(probe_command(count), timeout=120)
        except HarnessError:
            return None
        found = parse_probe(result.stdout, count)
        if found is None:
            return None
        copied, seconds = found
        if seconds >= MIN_PROBE_S or count >= MAX_PROBE_MIB:
            return Bandwidth(copied / seconds / 1e9,
                             f"measured: dd {copied // MIB} MiB in {seconds:.3f} s")
        grow = MIN_PROBE_S / max(seconds, 1e-3) * 1.5
        count = min(MAX_PROBE_MIB, max(count * 2, int(count * grow)))


def from_profile(model: str | None, devices_dir: Path | None = None) -> Bandwidth | None:
    """``memory_bandwidth_gbps`` of the profile whose ``ro.product.model`` is the phone's."""
    from harness.profiles import profile_for_model

    profile = profile_for_model(model, devices_dir)
    if profile is not None and profile.memory_bandwidth_gbps:
        return Bandwidth(profile.memory_bandwidth_gbps, f"profile {profile.name}")
    return None
