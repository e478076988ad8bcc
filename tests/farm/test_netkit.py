"""The network kit the farm tests use: hosts in their own network namespaces, each with its own
hostname and link to ctl's bridge, a phone plugged into one host at a time through a "cable",
and nothing of ours left when the block ends."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.testing.netns import Network, lab_network, netns_unavailable
from harness.virtual.control import start_phones, stop_phones

pytestmark = pytest.mark.slow

LISTEN = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
while True:
    server.accept()[0].close()
"""
CONNECT = """
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
"""
CTL_PORT = 7000


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    reason = netns_unavailable()
    if reason:
        pytest.skip(f"this machine cannot run hosts in network namespaces: {reason}")


def reaches(net: Network, host: str, address: str, port: int, timeout: float = 2) -> bool:
    """A TCP connection from ``host`` to address:port succeeds within ``timeout``."""
    result = net.run(host, [sys.executable, "-c", CONNECT, address, str(port), str(timeout)],
                     timeout=timeout + 60)
    return result.returncode == 0


def eventually(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def namespaces_named(prefix: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            timeout=30, check=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]


def test_hosts_have_their_own_network_hostname_and_link(tmp_path: Path) -> None:
    our_hostname = socket.gethostname()
    our_links = sorted(os.listdir("/sys/class/net"))
    with lab_network(["h1", "h2"], tmp_path / "net") as net:
        prefix = net.prefix
        assert sorted(os.listdir("/sys/class/net")) == our_links  # all made inside namespaces
        assert sorted(namespaces_named(prefix)) == sorted(h.netns for h in net.hosts.values())
        assert [net.address(h) for h in ("ctl", "h1", "h2")] == \
            ["10.231.0.1", "10.231.0.11", "10.231.0.12"]
        assert net.run("h1", ["hostname"]).stdout.strip() == "h1"
        assert net.run("ctl", ["hostname"]).stdout.strip() == "ctl"

        listener = net.popen("ctl", [sys.executable, "-c", LISTEN, "10.231.0.1", str(CTL_PORT)],
                             log=tmp_path / "listener.log")
        # the Popen's pid is the program itself, inside ctl's namespace
        argv = Path(f"/proc/{listener.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[0].decode() == sys.executable
        assert net.pids_in("ctl") == [listener.pid]
        assert eventually(lambda: reaches(net, "h2", "10.231.0.1", CTL_PORT), 30)
        assert reaches(net, "h1", "10.231.0.1", CTL_PORT)
        assert not reaches(net, "h1", "10.231.0.1", CTL_PORT + 1)  # refused: nobody there

        net.link_down("h2")
        began = time.monotonic()
        assert not reaches(net, "h2", "10.231.0.1", CTL_PORT, timeout=2)
        assert time.monotonic() - began < 30
        assert reaches(net, "h1", "10.231.0.1", CTL_PORT)  # h1's link is untouched
        net.link_up("h2")
        assert eventually(lambda: reaches(net, "h2", "10.231.0.1", CTL_PORT), 30)

        # kill_host: what the kit started on h1 and what that started, not h2's
        shell = net.popen("h1", ["sh", "-c", "sleep 300 & wait"])
        other = net.popen("h2", ["sleep", "300"])
        assert eventually(lambda: len(net.pids_in("h1")) == 2, 30)
        on_h1 = {pid: start_time(pid) for pid in net.pids_in("h1")}
        assert shell.pid in on_h1
        assert sorted(net.kill_host("h1")) == sorted(on_h1)
        assert net.pids_in("h1") == [] and shell.poll() is not None
        assert other.poll() is None and net.pids_in("h2") == [other.pid]
        assert net.run("h1", ["hostname"]).stdout.strip() == "h1"  # the host is still usable
        started = [listener, other]
    assert namespaces_named(prefix) == []
    assert all(p.poll() is not None for p in started)
    assert all(start_time(pid) != start for pid, start in on_h1.items())
    assert socket.gethostname() == our_hostname


def test_a_phone_is_plugged_into_one_host_then_moved_to_another(tmp_path: Path) -> None:
    home = tmp_path / "sim"
    try:
        phone = start_phones("midrange-8gb", 1, home=home, abi="x86_64", connect_adb=False)[0]
        serial = phone.serial
        with lab_network(["h1", "h2"], tmp_path / "net") as net:
            prefix = net.prefix
            h1 = net.connect_phone(serial, "h1")
            assert h1.devices() == {serial: "device"}
            shell = h1.adb("-s", serial, "shell", "echo", "hi")
            assert shell.stdout.strip() == "hi", h1.said(shell)
            assert net.run("h1", ["hostname"]).stdout.strip() == "h1"
            # h2 has no cable: the phone's port is not there, its adb server does not see it
            assert not reaches(net, "h2", "127.0.0.1", phone.port)
            h2 = net.adb_server("h2")
            assert serial not in h2.devices()
            assert h2.env["ANDROID_ADB_SERVER_PORT"] == str(h2.port) != str(h1.port)

            net.unplug(serial)  # the phone moves from h1's USB port to h2's
            assert eventually(lambda: h1.devices().get(serial) != "device", 30), h1.devices()
            assert not reaches(net, "h1", "127.0.0.1", phone.port)
            assert net.connect_phone(serial, "h2") is h2
            assert h2.devices() == {serial: "device"}
            shell = h2.adb("-s", serial, "shell", "echo", "hi")
            assert shell.stdout.strip() == "hi", h2.said(shell)
            assert h1.devices().get(serial) != "device"
            servers = [h1.process, h2.process]
            assert all(p.poll() is None for p in servers)
        assert namespaces_named(prefix) == []
        assert all(p.poll() is not None for p in servers)
        assert not [t.name for t in threading.enumerate() if t.name.startswith("cable-")]
    finally:
        stop_phones(home=home)


def test_everything_is_taken_down_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError, match="the test failed"), lab_network(["h1"]) as net:
        prefix, root = net.prefix, net.root
        sleeper = net.popen("h1", ["sleep", "300"])
        net.plug("127.0.0.1:9", "h1")  # a cable to a port where no phone listens
        raise RuntimeError("the test failed")
    assert namespaces_named(prefix) == []
    assert sleeper.poll() is not None
    assert not [t.name for t in threading.enumerate() if t.name.startswith("cable-")]
    assert not root.exists()  # the temporary folder the kit made
