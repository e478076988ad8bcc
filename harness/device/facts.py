"""Discovering a device's facts through its shell, the same way for phones and this host.

Four round trips: ``getprop``, ``/proc/meminfo``, one loop that prints the CPU sysfs files in
``head`` layout, and ``df``. Each may fail on its own (no getprop on a plain Linux host, sysfs
denied); the fact is then None instead of the whole call failing.
"""

from __future__ import annotations

import shlex

from harness.android import (
    parse_cpu_range,
    parse_getprop,
    parse_head_dump,
    parse_proc_meminfo,
    read_cpu_topology,
)
from harness.device.base import Device, DeviceFacts, parse_df_available_kb

_CPU_FILES = (
    "/sys/devices/system/cpu/possible "
    "/sys/devices/system/cpu/cpu[0-9]*/cpu_capacity "
    "/sys/devices/system/cpu/cpu[0-9]*/topology/cpu_capacity "
    "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq "
    "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/related_cpus"
)
CPU_SYSFS_LOOP = (
    f"for f in {_CPU_FILES}; do "
    'if [ -r "$f" ]; then echo "==> $f <=="; cat "$f" 2>/dev/null; echo; fi; done'
)


def _abis(props: dict[str, str]) -> tuple[str, ...]:
    listed = [a.strip() for a in props.get("ro.product.cpu.abilist", "").split(",") if a.strip()]
    main = props.get("ro.product.cpu.abi")
    return tuple(listed or ([main] if main else []))


def _soc(props: dict[str, str]) -> str | None:
    model = props.get("ro.soc.model")
    if model:
        maker = props.get("ro.soc.manufacturer", "")
        return f"{maker} {model}".strip()
    for key in ("ro.chipname", "ro.board.platform", "ro.hardware"):
        if props.get(key):
            return props[key]
    return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def gather_facts(device: Device, kind: str, storage_path: str) -> DeviceFacts:
    """Facts of ``device``; ``storage_path`` is where artifacts go (``/data/local/tmp``)."""
    getprop = device.shell("getprop", timeout=30)
    props = parse_getprop(getprop.stdout) if getprop.ok else {}
    meminfo = device.shell("cat /proc/meminfo", timeout=30)
    memory = parse_proc_meminfo(meminfo.stdout) if meminfo.ok else None
    files = parse_head_dump(device.shell(CPU_SYSFS_LOOP, timeout=30).stdout)
    possible = parse_cpu_range(files.get("/sys/devices/system/cpu/possible", ""))
    topology = read_cpu_topology(files, cpu_count=len(possible) or None)
    df = device.shell(f"df -k {shlex.quote(storage_path)}", timeout=30)
    return DeviceFacts(
        serial=device.serial,
        kind=kind,
        model=props.get("ro.product.model"),
        manufacturer=props.get("ro.product.manufacturer"),
        soc=_soc(props),
        android_release=props.get("ro.build.version.release"),
        android_sdk=_int(props.get("ro.build.version.sdk")),
        abi=props.get("ro.product.cpu.abi"),
        abis=_abis(props),
        cpu_emulation=props.get("ro.harness.emulated_cpu") or None,
        gpu_emulated=props.get("ro.harness.gpu_emulated") or None,
        total_ram_kb=memory.mem_total_kb if memory else None,
        available_ram_kb=memory.mem_available_kb if memory else None,
        cpu_count=len(topology.cpus) or None,
        cpu_layout=topology.layout or None,
        big_cpus=topology.big_cpus,
        free_storage_kb=parse_df_available_kb(df.stdout) if df.ok else None,
        memory_model=props.get("ro.harness.memory_model") or None,
        storage_read_mb_s=_float(props.get("ro.harness.storage_read_mb_s")),
    )


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None
