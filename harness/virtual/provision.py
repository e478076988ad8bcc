"""What the host gives a virtual phone before it boots: its memory model and its storage speed.

``provision`` turns the requested memory model (``auto``, ``cgroup``, ``simulated``) and the
profile's storage speed into cgroups (``harness.virtual.cgroups``) and the notes that say what
the phone is: ``ro.harness.memory_model`` and ``ro.harness.storage_read_mb_s`` among its
properties, so the harness records both with every trial, and ``harness sim status`` shows them.

``cgroup`` asked and impossible, or a storage speed beyond the host's disk: a ConfigError, one
line, nothing made. ``auto``: the cgroup when the host allows it, else the simulated model with
the reason as the note.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import replace
from pathlib import Path

from harness.errors import ConfigError
from harness.profiles import DeviceProfile
from harness.units import MB, MIB
from harness.virtual import cgroups, disk, reclaim, storage, zram
from harness.virtual.config import MEMORY_MODEL_CHOICES, ClusterConfig, PhoneConfig
from harness.virtual.gpu import gpu_props
from harness.virtual.userland import ABI_LISTS, ABI_MACHINES, ABI_QEMU, SHELLS, host_abi


def _props(config: PhoneConfig) -> dict[str, str]:
    props = dict(config.props)
    props["ro.harness.memory_model"] = config.memory_model
    throttled = config.storage_note == ""
    if config.storage_read_mb_s is not None and throttled:
        props["ro.harness.storage_read_mb_s"] = f"{config.storage_read_mb_s:g}"
    else:
        props.pop("ro.harness.storage_read_mb_s", None)
    if config.storage_read_iops is not None and throttled:
        props["ro.harness.storage_read_iops"] = str(config.storage_read_iops)
    else:
        props.pop("ro.harness.storage_read_iops", None)
    return props


def _simulated(config: PhoneConfig, note: str) -> PhoneConfig:
    storage_note = ("not throttled: the simulated memory model has no page cache of its own"
                    if config.storage_read_mb_s is not None or config.storage_read_iops is not None
                    else "")
    blocked = reclaim.capable()
    note += ("; clean file pages are paged out before a kill" if blocked is None else
             f"; it cannot reclaim file pages ({blocked}): an mmap'd model bigger than the "
             "phone is killed, not paged")
    swap = None
    if config.zram_mb:
        if blocked is not None:
            raise ConfigError(f"virtual phone {config.name}: the profile's zram_mb needs the "
                              f"simulated model to page out memory: {blocked}; or set zram_mb: 0")
        swap = _zram(config)
        note += f"; anonymous memory is paged out to its zram ({config.zram_mb} MB) next"
    done = dataclasses.replace(config, memory_model="simulated", memory_note=note, cgroups=None,
                               storage_note=storage_note, zram=swap.to_json() if swap else None)
    return dataclasses.replace(done, props=_props(done))


def cgroup_name(phone_dir: Path) -> str:
    """The phone's cgroup name: its slot, and its folder's hash (two sim homes may both have a
    ``midrange-8gb-1``; a stale cgroup of this very phone is the only one a start replaces)."""
    digest = hashlib.sha256(str(phone_dir.resolve()).encode()).hexdigest()[:10]
    return f"{phone_dir.name}-{digest}"


def provision(config: PhoneConfig, phone_dir: Path, requested: str = "auto",
              storage_asked: bool = False) -> PhoneConfig:
    """The config the phone boots with: its own disk and its cgroups made (when asked or
    possible) and recorded.

    ``storage_asked``: the storage speed was given for this start (``--storage-mb-s``), so one
    the host's disk cannot reach is refused; a profile's speed beyond it leaves the storage
    unthrottled with a note (a flagship's profile still starts on a slow host).
    """
    if requested not in MEMORY_MODEL_CHOICES:
        raise ConfigError(f"--memory-model must be one of {', '.join(MEMORY_MODEL_CHOICES)}, "
                          f"got {requested!r}")
    data = phone_dir / "root" / "data"
    data.mkdir(parents=True, exist_ok=True)
    config = _reachable_speed(config, phone_dir, strict=storage_asked or requested == "cgroup")
    if requested == "simulated":
        return _simulated(config, "simulated on request (--memory-model simulated)")
    if requested == "auto":
        reason = cgroups.probe(data)
        if reason is not None:
            return _simulated(config, f"simulated: {reason}")
    own, disk_note = _own_disk(config, phone_dir)
    speed = config.storage_read_mb_s
    read_bps = round(speed * MB) if speed is not None else None
    storage_note = config.storage_note
    # a storage left unthrottled (its note says why) is unthrottled in reads a second too
    read_iops = config.storage_read_iops if not storage_note else None
    if (read_bps or read_iops) and cgroups.block_device(data) is None:
        reason = (f"{data} is on no block device (tmpfs or overlay?), so its storage speed "
                  "cannot be throttled")
        if requested == "cgroup":
            disk.release(own)
            raise cgroups.CgroupError(f"virtual phone {config.name}: {reason}; put the sim home "
                                      "on a disk (HARNESS_HOME) or drop storage.read_mb_s and "
                                      "storage.read_iops")
        read_bps, read_iops, storage_note = None, None, f"not throttled: {reason}"
    swap = None
    try:
        swap = _zram(config)
        groups = cgroups.make(cgroup_name(phone_dir), config.limit_mb * MIB, read_bps, data,
                              swap.size_bytes if swap else 0, read_iops)
    except cgroups.CgroupError as error:
        disk.release(own)
        zram.remove(swap)
        if requested == "cgroup":
            raise
        return _simulated(config, f"simulated: {error}")
    done = dataclasses.replace(config, memory_model="cgroup", memory_note="",
                               cgroups=groups.to_json(), storage_note=storage_note,
                               disk=own.to_json() if own else None, disk_note=disk_note,
                               zram=swap.to_json() if swap else None)
    return dataclasses.replace(done, props=_props(done))


def _reachable_speed(config: PhoneConfig, phone_dir: Path, strict: bool) -> PhoneConfig:
    """The profile's storage speed, checked against the host's disk under the phone's slot."""
    speed = config.storage_read_mb_s
    device = cgroups.block_device(phone_dir)
    if speed is None or device is None:
        return config
    host = storage.host_read_mb_s(phone_dir, device)
    if strict:
        storage.check_reachable(speed, host, device, f"virtual phone {config.name}")
    elif speed > host:
        return dataclasses.replace(config, storage_read_mb_s=None, storage_note=(
            f"not throttled: this host's disk reads {host:.0f} MB/s, below the profile's "
            f"{speed:g} MB/s"))
    return config


def _own_disk(config: PhoneConfig, phone_dir: Path) -> tuple[disk.PhoneDisk | None, str]:
    """The phone's /data on its own loop device, or why it stays on the host's disk."""
    why = disk.probe()
    if why is None:
        try:
            return disk.attach(phone_dir, config.storage_mb, config.storage_readahead_kb), ""
        except disk.DiskError as error:
            why = str(error)
    return None, f"/data on the host's disk (its readahead, not the profile's): {why}"


def _zram(config: PhoneConfig) -> zram.ZramSwap | None:
    """The phone's zram swap, when its profile asks for one (ZramError, a CgroupError's kind of
    refusal, when it cannot be made)."""
    if not config.zram_mb:
        return None
    try:
        return zram.make(config.zram_mb * MIB, f"virtual phone {config.name}")
    except zram.ZramError as error:
        raise cgroups.CgroupError(str(error)) from error


def release(config: PhoneConfig) -> None:
    """Remove the phone's cgroups (its processes, if any are left, are killed first), switch
    off and remove its zram, and detach its own disk."""
    cgroups.remove(cgroups.PhoneCgroups.from_json(config.cgroups))
    zram.remove(zram.ZramSwap.from_json(dict(config.zram) if config.zram else None))
    disk.release(disk.PhoneDisk.from_json(dict(config.disk) if config.disk else None))


def config_from_profile(profile: DeviceProfile, name: str, ram_mb: int | None = None,
                        storage_mb: int | None = None, abi: str | None = None,
                        shell: str = "mksh", storage_mb_s: float | None = None) -> PhoneConfig:
    """``ram_mb`` overrides the memory the low-memory killer allows (tests use small values).

    ``abi`` makes a variant of the profile's phone with another CPU ABI (an x86_64 phone runs
    host builds natively, as Android's emulator images do); a phone whose ABI is not the host's
    runs its binaries in qemu-user and says so in ``ro.harness.emulated_cpu``.
    ``storage_mb_s`` overrides the profile's storage read speed (MB/s); the memory model is
    resolved when the phone starts (``harness.virtual.control``). A profile's ``gpu`` runs on
    lavapipe, natively only: on another ABI it is a ConfigError (``harness.virtual.gpu``).
    """
    abi = abi or profile.abi
    if abi not in ABI_MACHINES:
        raise ConfigError(f"{profile.source or profile.name}: a virtual phone's ABI must be one "
                          f"of {', '.join(ABI_MACHINES)}, not '{abi}' (use --abi)")
    if shell not in SHELLS:
        raise ConfigError(f"unknown phone shell '{shell}' (known: {', '.join(SHELLS)})")
    gpu = getattr(profile, "gpu", None)
    if gpu is not None and abi != host_abi():
        raise ConfigError(f"{profile.source or profile.name}: gpu: a virtual phone's GPU is "
                          f"Mesa's lavapipe, which runs only natively: this phone is {abi}, "
                          f"this host {host_abi()} (start it with --abi {host_abi()})")
    props = dict(profile.props) if gpu is None else gpu_props(gpu, profile.props)
    if abi != profile.abi:
        props["ro.product.cpu.abi"] = abi
        props["ro.product.cpu.abilist"] = ABI_LISTS[abi]
    if abi != host_abi():
        props["ro.harness.emulated_cpu"] = ABI_QEMU[abi]
    props.setdefault("ro.serialno", name)
    props.setdefault("sys.boot_completed", "1")
    props.setdefault("ro.build.type", "user")
    props.setdefault("ro.kernel.qemu", "0")
    props.setdefault("ro.logd.kernel", "false")  # user builds: no kernel lines in logcat
    limit_mb = ram_mb if ram_mb is not None else profile.available_mb
    android = replace(profile.android, background_apps=profile.android.apps(limit_mb))
    return PhoneConfig(
        name=name, profile=profile.name, props=props,
        ram_mb=max(profile.ram_mb, ram_mb or 0),
        limit_mb=limit_mb,
        storage_mb=storage_mb if storage_mb is not None else profile.storage_free_mb,
        clusters=tuple(ClusterConfig(c.name, c.cores, c.max_khz, c.min_khz, c.capacity, c.part)
                       for c in profile.clusters),
        thermal=dict(profile.thermal), battery_level=profile.battery_level,
        abi=abi, shell=shell, android=android,
        python=abi == host_abi(),  # the host's Python stands in for one: only on its ABI
        power_model=dict(getattr(profile, "power_model", {})),
        storage_read_mb_s=storage_mb_s if storage_mb_s is not None else profile.storage_read_mb_s,
        storage_readahead_kb=getattr(profile, "storage_readahead_kb", None) or 128,
        storage_read_iops=getattr(profile, "storage_read_iops", None),
        gpu=gpu, zram_mb=getattr(profile, "zram_mb", 0),
    )
