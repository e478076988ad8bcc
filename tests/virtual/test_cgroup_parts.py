"""The pure parts of the cgroup memory model: what the kernel's files say, names, scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.virtual import balloons, cgroups, disk, storage

MOUNTS = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/blkio cgroup rw,relatime,blkio 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
"""
OWN = "9:name=systemd:/\n7:blkio:/\n4:memory:/process_api/45e07ed0\n1:cpu:/\n0::/\n"
STAT = """\
cache 58724352
rss 1048576
shmem 4096
workingset_refault_file 102401
total_cache 60000000
total_rss 2097152
total_shmem 8192
total_workingset_refault_file 102500
"""


def test_controllers_are_found_in_the_mounts_and_this_process_s_own_cgroups() -> None:
    assert cgroups.parse_mounts(MOUNTS) == {"memory": Path("/sys/fs/cgroup/memory"),
                                            "blkio": Path("/sys/fs/cgroup/blkio")}
    assert cgroups.parse_own_cgroups(OWN) == {"blkio": "/", "memory": "/process_api/45e07ed0"}


def test_memory_stat_reads_hierarchical_totals_first() -> None:
    stat = cgroups.parse_stat(STAT + "junk line\n")
    assert cgroups.anon_bytes(stat) == 2097152 + 8192
    assert cgroups.cache_bytes(stat) == 60000000
    assert cgroups.refaults(stat) == 102500
    local = cgroups.parse_stat("cache 5\nrss 7\nshmem 1\nworkingset_refault_file 3\n")
    assert (cgroups.anon_bytes(local), cgroups.cache_bytes(local), cgroups.refaults(local)) == \
        (8, 5, 3)


def test_phone_cgroups_and_disk_survive_their_json() -> None:
    groups = cgroups.PhoneCgroups(Path("/m/harness-x"), Path("/b/harness-x"), "7:3")
    assert cgroups.PhoneCgroups.from_json(groups.to_json()) == groups
    assert groups.procs_files == ("/m/harness-x/cgroup.procs", "/b/harness-x/cgroup.procs")
    assert cgroups.PhoneCgroups.from_json(None) is None
    own = disk.PhoneDisk(Path("/p/data.img"), "/dev/loop3", Path("/p/root/data"), 256)
    assert disk.PhoneDisk.from_json(own.to_json()) == own


def test_removing_refuses_anything_that_is_not_a_phone_cgroup(tmp_path: Path) -> None:
    other = tmp_path / "not-a-phone"
    other.mkdir()
    assert cgroups.remove_dir(other) is False and other.is_dir()  # never touched


def test_a_speed_beyond_the_host_disk_is_one_line_naming_both() -> None:
    storage.check_reachable(400, 1400, "254:0", "virtual phone p")
    with pytest.raises(ConfigError) as caught:
        storage.check_reachable(2000, 1400, "254:0", "virtual phone p")
    text = str(caught.value)
    assert "2000 MB/s" in text and "(1400 MB/s measured)" in text and "\n" not in text


def test_apps_outweigh_an_engine_in_the_kernel_s_order_and_keep_android_s() -> None:
    scores = [balloons.kernel_adj(a) for a in (0, 100, 700, 800, 900, 999)]
    assert scores == sorted(scores) and all(990 <= s <= 999 for s in scores)
    assert balloons.kernel_adj(700) < balloons.kernel_adj(900)
