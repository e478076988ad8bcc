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
from pathlib import Path

from harness.errors import ConfigError
from harness.virtual import cgroups, disk, storage
from harness.virtual.config import MEMORY_MODEL_CHOICES, PhoneConfig

MIB = 1024 * 1024


def _props(config: PhoneConfig) -> dict[str, str]:
    props = dict(config.props)
    props["ro.harness.memory_model"] = config.memory_model
    if config.storage_read_mb_s is not None and config.storage_note == "":
        props["ro.harness.storage_read_mb_s"] = f"{config.storage_read_mb_s:g}"
    else:
        props.pop("ro.harness.storage_read_mb_s", None)
    return props


def _simulated(config: PhoneConfig, note: str) -> PhoneConfig:
    storage_note = ("not throttled: the simulated memory model has no page cache of its own"
                    if config.storage_read_mb_s is not None else "")
    done = dataclasses.replace(config, memory_model="simulated", memory_note=note, cgroups=None,
                               storage_note=storage_note)
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
    read_bps = round(speed * storage.MB) if speed is not None else None
    storage_note = config.storage_note
    if read_bps is not None and cgroups.block_device(data) is None:
        reason = (f"{data} is on no block device (tmpfs or overlay?), so its storage speed "
                  "cannot be throttled")
        if requested == "cgroup":
            disk.release(own)
            raise cgroups.CgroupError(f"virtual phone {config.name}: {reason}; put the sim home "
                                      "on a disk (HARNESS_HOME) or drop storage.read_mb_s")
        read_bps, storage_note = None, f"not throttled: {reason}"
    try:
        groups = cgroups.make(cgroup_name(phone_dir), config.limit_mb * MIB, read_bps, data)
    except cgroups.CgroupError as error:
        disk.release(own)
        if requested == "cgroup":
            raise
        return _simulated(config, f"simulated: {error}")
    done = dataclasses.replace(config, memory_model="cgroup", memory_note="",
                               cgroups=groups.to_json(), storage_note=storage_note,
                               disk=own.to_json() if own else None, disk_note=disk_note)
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


def release(config: PhoneConfig) -> None:
    """Remove the phone's cgroups (its processes, if any are left, are killed first) and
    detach its own disk."""
    cgroups.remove(cgroups.PhoneCgroups.from_json(config.cgroups))
    disk.release(disk.PhoneDisk.from_json(dict(config.disk) if config.disk else None))
