"""The cgroup memory model: the host kernel reclaims the phone's page cache and reads it back at
the phone's storage speed, so a mapped file bigger than the phone pages instead of being killed.

These tests need root and cgroup v1 memory/blkio (this project's machines have them); where the
host cannot give a phone a cgroup they skip, naming why, and the simulated model's own tests
(test_memory_and_heat.py) still run.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from fixtures_phones import PhoneFactory, VirtualPhone

from harness.errors import ConfigError
from harness.testing.adbserver import AdbServer
from harness.virtual import cgroups
from harness.virtual.control import list_phones, stop_phones
from harness.virtual.provision import cgroup_name

MB = 1_000_000
SMALL = Path(__file__).resolve().parents[2] / "devices" / "virtual" / "small-ram.yaml"


def _cgroups_or_skip(tmp_path: Path) -> None:
    reason = cgroups.probe(tmp_path)
    if reason is not None:
        pytest.skip(f"no cgroup memory model here: {reason}")


def _sh(server: AdbServer, phone: VirtualPhone, command: str,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return server.adb("-s", phone.serial, "shell", command, timeout=timeout)


def _push(server: AdbServer, phone: VirtualPhone, local: Path, name: str) -> str:
    target = f"/data/local/tmp/{name}"
    pushed = server.adb("-s", phone.serial, "push", str(local), target, timeout=300)
    assert pushed.returncode == 0, pushed.stderr
    return target


def _random_file(path: Path, megabytes: int) -> Path:
    with open(path, "wb") as handle:
        for _ in range(megabytes):
            handle.write(os.urandom(1 << 20))
    return path


def _scan_result(stdout: str) -> dict[str, int]:
    words = stdout.split("hwm_kb", 1)[1].split()
    return {"hwm_kb": int(words[0]), "read_bytes": int(words[2]), "majflt": int(words[4])}


def test_a_mapped_file_bigger_than_the_phone_pages_and_a_heap_that_big_is_killed(
        adb_server: AdbServer, virtual_phones: PhoneFactory, phone_programs: dict[str, Path],
        tmp_path: Path) -> None:
    _cgroups_or_skip(tmp_path)
    (phone,) = virtual_phones(ram_mb=96, storage_mb_s=400)
    assert _sh(adb_server, phone, "getprop ro.harness.memory_model").stdout.strip() == "cgroup"
    assert _sh(adb_server, phone, "getprop ro.harness.storage_read_mb_s").stdout.strip() == "400"
    scan = _push(adb_server, phone, phone_programs["scan"], "scan")
    _sh(adb_server, phone, f"chmod 755 {scan}")
    weights = _push(adb_server, phone, _random_file(tmp_path / "w.bin", 160), "w.bin")
    run = _sh(adb_server, phone, f"{scan} {weights} 3")
    assert run.returncode == 0, run.stdout + run.stderr  # paged, not killed
    found = _scan_result(run.stdout)
    assert found["hwm_kb"] <= 96 * 1024  # resident never above the phone's limit
    # every pass read the file again: three passes, each ~160 MB from the phone's storage
    assert found["read_bytes"] >= 2.5 * 160 * 2**20, found
    # the same memory as a heap cannot be reclaimed: the kernel finds the phone out of memory
    hog = _push(adb_server, phone, phone_programs["hog"], "hog")
    _sh(adb_server, phone, f"chmod 755 {hog}")
    killed = _sh(adb_server, phone, f"{hog} 160")
    assert killed.returncode == 137 and "allocated" not in killed.stdout


def test_storage_reads_at_the_profile_s_speed_and_halving_it_doubles_a_cold_read(
        adb_server: AdbServer, virtual_phones: PhoneFactory, phone_programs: dict[str, Path],
        tmp_path: Path) -> None:
    _cgroups_or_skip(tmp_path)
    fast, slow = (virtual_phones(ram_mb=256, storage_mb_s=speed)[0] for speed in (80, 40))
    local = _random_file(tmp_path / "cold.bin", 40)
    seconds = {}
    for phone, speed in ((fast, 80), (slow, 40)):
        target = _push(adb_server, phone, local, "cold.bin")  # a push leaves it uncached
        seconds[speed] = _timed_read(adb_server, phone, target)
        # the throttle is a ceiling: a cold read takes at least size / speed
        assert seconds[speed] >= 0.9 * 40 * 2**20 / (speed * MB), seconds
    assert seconds[40] >= 1.6 * seconds[80], seconds
    # a second read is from the phone's page cache, at memory speed
    assert _timed_read(adb_server, slow, "/data/local/tmp/cold.bin") < seconds[40] / 2


def _timed_read(server: AdbServer, phone: VirtualPhone, path: str) -> float:
    """Seconds ``cat`` takes to read ``path``, timed on the phone (its uptime, no adb in it)."""
    clock = "read -r t _ < /proc/uptime; echo $t"
    run = _sh(server, phone, f"{clock}; cat {path} > /dev/null; {clock}")
    assert run.returncode == 0, run.stderr
    start, end = (float(x) for x in run.stdout.split())
    return end - start


def test_a_cold_read_is_held_to_the_profile_s_reads_a_second(
        adb_server: AdbServer, virtual_phones: PhoneFactory, tmp_path: Path) -> None:
    """400 MB/s but 200 reads a second: a 24 MB file read in readahead-sized (128 KB) requests
    takes its requests / 200 seconds, ten times what its bytes alone would."""
    _cgroups_or_skip(tmp_path)
    iops, speed = 200, 400
    data = yaml.safe_load(SMALL.read_text())
    data.update(name="small-iops", storage={**data["storage"], "read_iops": iops,
                                            "read_mb_s": speed})
    profile = tmp_path / "small-iops.yaml"
    profile.write_text(yaml.safe_dump(data))
    (phone,) = virtual_phones(profile=str(profile), memory_model="cgroup")
    shell = ("getprop ro.harness.storage_read_iops; getprop ro.harness.storage_read_mb_s")
    run = adb_server.adb("-s", phone.serial, "shell", shell, timeout=60)
    assert run.stdout.split() == [str(iops), str(speed)], run.stdout
    config = json.loads((phone.sandbox / "state" / "config.json").read_text())
    groups = cgroups.PhoneCgroups.from_json(config["cgroups"])
    assert groups is not None and groups.blkio is not None and groups.device is not None
    throttle = (groups.blkio / "blkio.throttle.read_iops_device").read_text().split()
    assert throttle == [groups.device, str(iops)]
    target = _push(adb_server, phone, _random_file(tmp_path / "cold.bin", 24), "cold.bin")
    before = cgroups.reads(groups)
    assert before is not None
    seconds = _timed_read(adb_server, phone, target)
    after = cgroups.reads(groups)
    assert after is not None
    requests, read = after[0] - before[0], after[1] - before[1]
    assert read >= 24 * 2**20, (requests, read)  # the whole file came from the disk
    assert requests / iops >= 5 * read / (speed * MB), (requests, read)  # reads/s binds
    assert seconds >= 0.8 * requests / iops, (seconds, requests)


def test_status_names_the_memory_model_and_stop_removes_the_cgroups(
        virtual_phones: PhoneFactory, tmp_path: Path) -> None:
    _cgroups_or_skip(tmp_path)
    (phone,) = virtual_phones(ram_mb=128, storage_mb_s=100, memory_model="cgroup")
    info = next(p for p in list_phones(phone.home) if p.serial == phone.serial)
    assert info.memory_model == "cgroup" and info.storage_read_mb_s == 100
    data = phone.root / "data"
    if info.readahead_kb is not None:  # its own disk: /data is a file system of its own
        assert info.readahead_kb == 128 and os.path.ismount(data)
    else:
        assert info.disk_note.startswith("/data on the host's disk")
    config = json.loads((phone.sandbox / "state" / "config.json").read_text())
    groups = cgroups.PhoneCgroups.from_json(config["cgroups"])
    assert groups is not None and groups.memory.is_dir() and groups.blkio is not None
    limit = int((groups.memory / "memory.limit_in_bytes").read_text())
    assert limit <= 128 * 2**20  # the phone's limit, less its background apps
    # and no swap on top of it, whatever the host has: memory + swap is the memory alone
    memsw = groups.memory / cgroups.MEMSW_LIMIT
    if memsw.exists():
        assert int(memsw.read_text()) == limit
    else:
        assert (groups.memory / "memory.swappiness").read_text().strip() == "0"
    stop_phones([phone.serial], home=phone.home)
    assert not groups.memory.exists() and not groups.blkio.exists()
    assert not os.path.ismount(data)  # unmounted, its loop device detached


def test_a_storage_speed_beyond_the_host_disk_is_refused_and_nothing_is_left(
        virtual_phones: PhoneFactory, tmp_path: Path) -> None:
    _cgroups_or_skip(tmp_path)
    with pytest.raises(ConfigError, match="more than this host's disk"):
        virtual_phones(ram_mb=128, storage_mb_s=10_000_000)
    assert not [p for p in list_phones(tmp_path / "sim") if p.running]
    slot = tmp_path / "sim" / "phones" / "midrange-8gb-1"
    parent = cgroups.controller_dirs()["memory"]  # where this process's phones would nest
    assert not (parent / (cgroups.PREFIX + cgroup_name(slot))).exists()


def test_a_shell_that_cannot_join_the_phone_s_cgroup_stops_the_phone_and_runs_nothing(
        adb_server: AdbServer, virtual_phones: PhoneFactory, tmp_path: Path) -> None:
    _cgroups_or_skip(tmp_path)
    (phone,) = virtual_phones(ram_mb=128, storage_mb_s=100, memory_model="cgroup")
    config = json.loads((phone.sandbox / "state" / "config.json").read_text())
    groups = cgroups.PhoneCgroups.from_json(config["cgroups"])
    assert groups is not None and groups.blkio is not None
    # the storage cgroup holds only the shells while they run: between two it can go, and a
    # shell started after that finds no cgroup.procs to join
    assert _sh(adb_server, phone, "echo joined").stdout.strip() == "joined"
    groups.blkio.rmdir()
    marker = phone.root / "data" / "local" / "tmp" / "ran"
    refused = _sh(adb_server, phone, "touch /data/local/tmp/ran; echo ran")
    assert refused.returncode == 126, (refused.returncode, refused.stdout, refused.stderr)
    assert "ran" not in refused.stdout and not marker.exists()  # nothing ran unconfined
    line = f"cannot join its cgroup {groups.blkio}/cgroup.procs (No such file or directory)"
    assert line in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    stopped = None
    for _ in range(200):  # the daemon stops on its SIGTERM: bounded wait, 20 s
        stopped = next(p for p in list_phones(phone.home) if p.serial == phone.serial)
        if not stopped.running:
            break
        time.sleep(0.1)
    assert stopped is not None and not stopped.running
    assert line in stopped.stopped_why
    assert line in (phone.sandbox / "daemon.log").read_text()
    assert not groups.memory.exists()  # the daemon released the rest as it stopped
