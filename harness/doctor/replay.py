"""A capture replayed as a virtual phone (``harness sim start --from-capture``).

The bundle's derived profile gives the phone its properties, RAM, storage and CPU clusters; to
it this adds what the phone refused: every path a probe was denied (``android.unreadable``, so
the virtual phone answers EACCES there too), and the answers of services the virtual phone has
no model for, given verbatim (``android.replies``: GpuService's memory and Vulkan answers,
``uname``), the thermal HAL's and battery service's own layouts with live values filled in
(``android.layouts``: vendor lines, sensor names and indentation kept), dumpsys meminfo's swap
column as titled there (its other columns follow the captured release), and the CPUs that were
offline. What cannot be replayed (the phone's kernel, toybox and mksh are this host's) is named
by ``differences``. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.android import parse_head_dump
from harness.android.cpu import parse_cpu_range
from harness.android.readerrors import read_errors
from harness.doctor.probe import ProbeRecord
from harness.doctor.scrub import listed_packages

# services a virtual phone answers verbatim from the capture (it has no model of them)
REPLIED = ("gpu.gpumem", "gpu.vkjson", "uname")
# services it answers in the captured phone's own layout, its live values filled in
LAYOUTS = {"thermal.hal": "thermalservice", "battery": "battery"}
# what the phone's userland says of itself: the virtual phone's is this host's
UNREPLAYABLE = ("toybox", "mksh")
_PID = re.compile(r"^/proc/\d+/")
# the swap column's title in dumpsys meminfo's process table: SwapPss, Swap or Swapped Dirty
_SWAP_TITLE = re.compile(r"^\s+Pss\s+Private\s+Private\s+(SwapPss|Swapped|Swap)\b", re.MULTILINE)
# a capture names the third-party apps, not their memory: each is replayed as a cached app
APP_MB, APP_ADJ = 50, 900


def denied_paths(records: Sequence[ProbeRecord]) -> list[str]:
    """Every path a probe was refused with EACCES, whatever the probe's class (a pid's folder
    as a glob)."""
    return sorted({_PID.sub("/proc/[0-9]*/", path) for record in records
                   for path, why in read_errors(record.stderr) if why == "Permission denied"})


def offline_cpus(topology: ProbeRecord | None) -> list[int]:
    """The CPUs a phone has (``possible``) that were not ``online`` when it was captured."""
    if topology is None or topology.error != "ok":
        return []
    files = parse_head_dump(topology.stdout)
    listed = {name: text for path, text in files.items() for name in ("possible", "online")
              if path.endswith(f"/sys/devices/system/cpu/{name}")}
    if set(listed) != {"possible", "online"}:
        return []
    return sorted(set(parse_cpu_range(listed["possible"])) - set(parse_cpu_range(listed["online"])))


def replay_profile(profile: Mapping[str, Any], records: Sequence[ProbeRecord]) -> dict[str, Any]:
    """The capture's derived profile, with its refusals and verbatim answers added."""
    by_id = {r.id: r for r in records}
    replies = [{"command": by_id[sid].command, "stdout": by_id[sid].stdout,
                "stderr": by_id[sid].stderr, "exit": by_id[sid].exit or 0}
               for sid in REPLIED if sid in by_id and by_id[sid].exit is not None]
    packages = by_id.get("packages")
    apps = ([{"name": name, "rss_mb": APP_MB, "adj": APP_ADJ}
             for name in listed_packages(packages.stdout)]
            if packages is not None and packages.error == "ok" else None)
    layouts = {service: by_id[sid].stdout for sid, service in LAYOUTS.items()
               if sid in by_id and by_id[sid].error == "ok"}
    # the capture's refusals are the whole policy: no class is denied beyond them
    android = {**dict(profile.get("android") or {}), "readable": "all",
               "unreadable": denied_paths(records), "replies": replies, "layouts": layouts}
    meminfo = by_id.get("meminfo.dumpsys")
    titled = _SWAP_TITLE.search(meminfo.stdout) if meminfo is not None else None
    if titled is not None:
        android["meminfo_swap"] = titled.group(1)
    offline = offline_cpus(by_id.get("cpu.topology"))
    if offline:
        android["offline_cpus"] = offline
    if apps is not None:
        android["background_apps"] = apps
    return {**dict(profile), "android": android}


def differences(captured: Sequence[ProbeRecord], here: Sequence[ProbeRecord],
                kernel: str) -> list[str]:
    """What the replayed phone is otherwise than the captured one, of what it cannot replay:
    ``toybox: the capture's 'toybox 0.8.11-android', here 'toybox 0.8.9'``, and the kernel
    (``uname`` answers as the capture did; ``kernel`` is the release this host runs)."""
    mine = {r.id: r.stdout.strip() for r in here}
    said = []
    for record in captured:
        if record.id in UNREPLAYABLE and mine.get(record.id) != record.stdout.strip():
            said.append(f"{record.id}: the capture's {record.stdout.strip()!r}, "
                        f"here {mine.get(record.id, '')!r}")
        words = record.stdout.split()
        if record.id == "uname" and record.error == "ok" and len(words) > 2 \
                and words[2] != kernel:
            said.append(f"kernel: the capture's {words[2]!r}, here {kernel!r} "
                        "(uname answers as the capture did)")
    return said
