"""Device leases on a virtual phone: one holder at a time, renewal, expiry, takeover."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build
from harness.cli import main
from harness.device import get_device
from harness.device.lease import LEASE_PATH, DeviceBusyError, DeviceLease
from reliability.faultkit import engine_pids, wait_for, write_matrix


def lease_file(phone: Any) -> Path:
    return phone.root / LEASE_PATH.lstrip("/")


def test_a_second_holder_is_refused_with_the_holder_named(virtual_phone: Any) -> None:
    device = get_device(virtual_phone.serial)
    with DeviceLease(device, run="run-A") as first:
        with pytest.raises(DeviceBusyError) as refused:
            DeviceLease(device, run="run-B").acquire()
        message = str(refused.value)
        assert f"pid {os.getpid()}" in message and "run run-A" in message
        assert first.owner in message and first.host in message
        assert json.loads(lease_file(virtual_phone).read_text())["token"] == first.token
    assert not lease_file(virtual_phone).exists()  # released at the end of the block


def test_a_held_lease_is_renewed_past_its_ttl(virtual_phone: Any) -> None:
    device = get_device(virtual_phone.serial)
    with DeviceLease(device, ttl_s=3) as lease:
        first_expiry = json.loads(lease_file(virtual_phone).read_text())["expires"]
        wait_for(lambda: json.loads(lease_file(virtual_phone).read_text())["expires"]
                 > first_expiry + 1, timeout=10, poll=0.2)
        with pytest.raises(DeviceBusyError):
            DeviceLease(device).acquire()  # still held although the first ttl has passed
        assert not lease.lost.is_set()


def test_an_expired_lease_is_taken_over(virtual_phone: Any) -> None:
    device = get_device(virtual_phone.serial)
    stale = DeviceLease(device, run="crashed-host", ttl_s=1)
    stale.host = "another-host"  # only the expiry can free it: its pid means nothing here
    stale.acquire()  # never renewed, never released: its holder went away
    expires = json.loads(lease_file(virtual_phone).read_text())["expires"]
    # the device's clock (the one leases expire by) moves past its expiry
    wait_for(lambda: int(device.shell("date +%s").stdout) > expires, timeout=10, poll=0.2)
    with DeviceLease(device, run="next") as taker:
        assert json.loads(lease_file(virtual_phone).read_text())["token"] == taker.token
    assert not stale.renew()  # the old holder learns it lost the lease


def test_a_lease_whose_holder_pid_is_dead_on_this_host_is_taken_over(virtual_phone: Any) -> None:
    device = get_device(virtual_phone.serial)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ghost = DeviceLease(device, run="killed", ttl_s=3600)
    ghost.pid = dead.pid  # a harness that was SIGKILLed an hour before its lease expires
    ghost.acquire()
    with DeviceLease(device) as taker:
        assert json.loads(lease_file(virtual_phone).read_text())["pid"] == taker.pid


def test_a_lease_this_process_left_behind_is_reclaimed(virtual_phone: Any) -> None:
    device = get_device(virtual_phone.serial)
    DeviceLease(device, ttl_s=3600).acquire()  # its release failed: the device was away
    with DeviceLease(device) as again:
        assert json.loads(lease_file(virtual_phone).read_text())["token"] == again.token


def test_a_corrupt_lease_file_is_taken_over(virtual_phone: Any) -> None:
    lease_file(virtual_phone).parent.mkdir(parents=True, exist_ok=True)
    lease_file(virtual_phone).write_text('{"owner": "half-writ')
    with DeviceLease(get_device(virtual_phone.serial)) as taker:
        assert json.loads(lease_file(virtual_phone).read_text())["token"] == taker.token


def test_renewal_notices_a_takeover(virtual_phone: Any) -> None:
    device = get_device(virtual_phone.serial)
    with DeviceLease(device, ttl_s=1.5) as lease:
        other = DeviceLease(device)
        lease_file(virtual_phone).write_text(json.dumps(
            {"owner": "x", "host": "elsewhere", "pid": 1, "token": other.token,
             "expires": int(time.time()) + 3600}))
        assert lease.lost.wait(timeout=10)
    assert json.loads(lease_file(virtual_phone).read_text())["token"] == other.token


@pytest.mark.slow
def test_two_concurrent_runs_never_drive_the_same_phone(
    virtual_phone: Any, tmp_path: Path, host_build: Build, tiny_ladder: Any,
) -> None:
    matrix = write_matrix(tmp_path, reps=4)
    first_results, second_results = tmp_path / "r1", tmp_path / "r2"
    common = ["--devices", virtual_phone.serial, "--builds", str(host_build.path.parent),
              "--json"]
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(
        [sys.executable, "-c", "from harness.cli import main; main()", "run", str(matrix),
         "--results", str(first_results), *common],
        stdout=subprocess.PIPE, stderr=log, env=os.environ)
    try:
        wait_for(lambda: engine_pids(virtual_phone.root), timeout=120)
        second = CliRunner().invoke(main, ["run", str(matrix), "--results",
                                           str(second_results), *common])
        out, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
        log.close()
    assert second.exit_code == 2, second.output
    assert "Traceback" not in second.output
    assert "in use by" in second.output and f"pid {first.pid}" in second.output
    assert not store.part_files(second_results, "trials")  # the refused run touched nothing
    assert first.returncode == 0, (tmp_path / "first.log").read_text()
    assert json.loads(out)["trials_by_outcome"] == {"ok": 4}
    assert not lease_file(virtual_phone).exists()
