"""AdbDevice end to end: a virtual phone behind the real adb server, reached through adbutils.

These use the ``virtual_phone`` fixture (tests/fixtures_phones.py, owned by the virtual-phone
area); the phone speaks the ADB wire protocol, so this is the same path a USB phone takes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import adbutils
import pytest
from click.testing import CliRunner
from device_contract import (
    check_hostile_file_name_is_a_name,
    check_push_progress_and_content,
    check_shell_exit_codes_and_streams,
    check_shell_timeout,
)

from harness.cli import main
from harness.device import Device, DeviceTimeoutError, get_device, list_devices
from harness.device.adb import AdbDevice
from harness.errors import DeviceError, DeviceLostError

REMOTE = "/data/local/tmp/harness-device-test"


@pytest.fixture
def phone(virtual_phone: Any) -> AdbDevice:
    device = AdbDevice(virtual_phone.serial)
    device.shell(["mkdir", "-p", REMOTE], timeout=60)
    return device


def test_the_virtual_phone_is_listed_and_found(phone: AdbDevice) -> None:
    assert phone.serial in [d.serial for d in list_devices()]
    found = get_device(phone.serial)
    assert isinstance(found, AdbDevice) and isinstance(found, Device)
    with pytest.raises(DeviceError, match="no online device"):
        get_device("no-such-serial")


def test_shell_exit_codes_and_streams(phone: AdbDevice) -> None:
    check_shell_exit_codes_and_streams(phone)


def test_shell_timeout(phone: AdbDevice) -> None:
    check_shell_timeout(phone)


def test_hostile_file_name_is_a_name(phone: AdbDevice, tmp_path: Path) -> None:
    check_hostile_file_name_is_a_name(phone, tmp_path, REMOTE)


def test_push_progress_and_content(phone: AdbDevice, tmp_path: Path) -> None:
    check_push_progress_and_content(phone, tmp_path, REMOTE)


def test_push_makes_binaries_executable(phone: AdbDevice, tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho ran \"$@\"\n")
    tool.chmod(0o755)
    phone.push(tool, f"{REMOTE}/tool")
    assert phone.shell([f"{REMOTE}/tool", "a b"], timeout=60).stdout == "ran a b\n"


def test_push_reports_progress_per_mib_and_keeps_mode_and_mtime(phone: AdbDevice,
                                                                tmp_path: Path) -> None:
    payload = os.urandom(3 * 2**20 + 5)
    local = tmp_path / "three.bin"
    local.write_bytes(payload)
    calls: list[tuple[int, int]] = []
    before = int(time.time())
    phone.push(local, f"{REMOTE}/three.bin", progress=lambda d, t: calls.append((d, t)))
    total = len(payload)
    assert calls == [(2**20, total), (2 * 2**20, total), (3 * 2**20, total), (total, total)]
    mode, size, mtime = phone.shell(["stat", "-c", "%a %s %Y", f"{REMOTE}/three.bin"],
                                    timeout=60).stdout.split()
    assert (mode, size) == ("644", str(total))
    assert before <= int(mtime) <= time.time() + 1  # the push's time, as before
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    calls.clear()
    phone.push(empty, f"{REMOTE}/empty", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(0, 0)]
    assert phone.shell(["stat", "-c", "%s", f"{REMOTE}/empty"], timeout=60).stdout == "0\n"


def test_push_pays_no_sleeps_no_version_query_and_no_nagle_wait(
        phone: AdbDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """adbutils' open_transport asks the version on a second connection, and its close sleeps
    10 ms: 20 ms of a 100 MiB push's 0.2 s (bench figure 2). Without TCP_NODELAY the DONE
    after a small file waited for a delayed ACK: 44 ms for an empty file, 1 ms with it."""
    connection = phone._sync_connection()
    try:
        assert connection.conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        connection.close()
    local = tmp_path / "small.bin"
    local.write_bytes(b"x" * 100_000)
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)

    def no_version(*_: Any) -> int:
        raise AssertionError("push asked the server's version")

    monkeypatch.setattr(adbutils.AdbClient, "server_version", no_version)
    phone.push(local, f"{REMOTE}/small.bin")
    assert slept == []
    monkeypatch.undo()
    assert phone.shell(["cat", f"{REMOTE}/small.bin"], timeout=60).stdout == "x" * 100_000


def test_shell_pays_no_sleeps_and_no_version_query(
        phone: AdbDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a push: adbutils' open_transport asked the version on a second connection and each
    close slept 10 ms, 23 ms of a ``true`` that takes 1.6 ms without; a trial runs several."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)

    def no_version(*_: Any) -> int:
        raise AssertionError("shell asked the server's version")

    def no_open_transport(*_: Any, **__: Any) -> Any:
        raise AssertionError("shell went through adbutils' open_transport")

    monkeypatch.setattr(adbutils.AdbClient, "server_version", no_version)
    monkeypatch.setattr(adbutils.AdbDevice, "open_transport", no_open_transport)
    result = phone.shell("echo out; echo err >&2; exit 3", timeout=60)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    with pytest.raises(DeviceTimeoutError):
        phone.shell("sleep 30", timeout=0.5)
    with pytest.raises(DeviceLostError, match="not found"):
        AdbDevice("127.0.0.1:1").shell("true", timeout=10)
    assert slept == []
    monkeypatch.undo()
    assert phone.shell("echo back", timeout=60).stdout == "back\n"


def test_a_server_that_never_answers_is_a_shell_timeout() -> None:
    """The deadline covers the transport handshake too: a server that accepts the connection
    and says nothing is the command's timeout, in its words, not an endless wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # connections complete in the backlog; nobody reads or answers
        port = silent.getsockname()[1]
        device = AdbDevice("127.0.0.1:5555", adbutils.AdbClient("127.0.0.1", port))
        started = time.monotonic()
        with pytest.raises(DeviceTimeoutError) as caught:
            device.shell(["echo", "never"], timeout=0.5)
        assert time.monotonic() - started < 5
    assert str(caught.value) == "127.0.0.1:5555: command timed out: echo never"


def test_a_server_that_hangs_up_while_the_service_opens_is_a_lost_device() -> None:
    """The adb server closes a client's connection without OKAY or FAIL when the device's
    transport goes away as the service opens (a dropped phone, seen once in a fresh-machine
    run): that is the device lost, as the run classifies it, not an unknown answer."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]

        def answer_then_hang_up() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)  # host:transport:SERIAL
                conn.sendall(b"OKAY")
                conn.recv(4096)  # shell,v2,raw:...: the transport is gone, the server hangs up

        serving = threading.Thread(target=answer_then_hang_up, daemon=True)
        serving.start()
        device = AdbDevice("127.0.0.1:5555", adbutils.AdbClient("127.0.0.1", port))
        with pytest.raises(DeviceLostError) as caught:
            device.shell("true", timeout=5)
        serving.join(timeout=5)
    assert "device connection lost" in str(caught.value), caught.value


def test_push_errors_name_the_push_and_keep_the_phones_reason(
        virtual_phone: Any, phone: AdbDevice, tmp_path: Path) -> None:
    local = tmp_path / "small.bin"
    local.write_bytes(b"x" * 300_000)
    with pytest.raises(DeviceError, match=r"couldn't create file: Is a directory") as caught:
        phone.push(local, REMOTE)
    assert str(caught.value).startswith(f"{phone.serial}: push {local} -> {REMOTE}: ")
    virtual_phone.fault("disk-full")
    with pytest.raises(DeviceError, match="write failed: No space left on device"):
        phone.push(local, f"{REMOTE}/full.bin")
    virtual_phone.fault("disk-ok")
    phone.push(local, f"{REMOTE}/full.bin")  # the same connection path works again
    with pytest.raises(DeviceLostError) as lost:
        AdbDevice("127.0.0.1:1").push(local, "/data/local/tmp/x")
    assert str(lost.value).startswith("127.0.0.1:1: push ")
    assert "not found" in str(lost.value)


def test_facts_of_the_virtual_phone(phone: AdbDevice) -> None:
    facts = phone.facts()
    props = phone.shell("getprop ro.product.model", timeout=60).stdout.strip()
    assert facts.model == props and facts.model
    assert facts.kind == "adb" and facts.serial == phone.serial
    assert facts.android_sdk is not None and facts.android_sdk >= 21
    assert facts.abi and facts.total_ram_kb and facts.available_ram_kb
    assert facts.cpu_count and facts.cpu_layout
    assert facts.free_storage_kb is not None and facts.free_storage_kb > 0


def test_an_unknown_serial_raises_device_lost_naming_it(phone: AdbDevice) -> None:
    assert os.environ.get("ANDROID_ADB_SERVER_PORT") != "5037"  # the private server
    gone = AdbDevice("127.0.0.1:1")
    with pytest.raises(DeviceLostError) as caught:
        gone.shell("true", timeout=10)
    assert str(caught.value).startswith("127.0.0.1:1: true")


def test_a_dropped_connection_raises_device_lost(virtual_phone: Any, phone: AdbDevice) -> None:
    assert phone.shell("true", timeout=60).ok
    virtual_phone.fault("drop", 60)  # refuse reconnection for a minute
    with pytest.raises(DeviceLostError):
        for _ in range(50):  # the server may need a moment to see the transport go
            phone.shell("true", timeout=10)


def test_a_hung_command_times_out(virtual_phone: Any, phone: AdbDevice) -> None:
    virtual_phone.fault("hang")
    with pytest.raises(DeviceTimeoutError) as caught:
        phone.shell(["echo", "never"], timeout=2)
    assert phone.serial in str(caught.value) and "echo never" in str(caught.value)
    assert phone.shell("echo back", timeout=60).stdout == "back\n"


def test_devices_cli_lists_the_virtual_phone(phone: AdbDevice) -> None:
    result = CliRunner().invoke(main, ["devices", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [row["serial"] for row in rows] == [phone.serial]
    assert rows[0]["model"] == phone.shell("getprop ro.product.model", timeout=60).stdout.strip()


def test_an_error_names_a_many_line_command_on_one_short_line() -> None:
    from harness.device.adb import SHOWN_CHARS, one_line

    assert one_line("echo never") == "echo never"
    script = "p=$1\nwhile [ -d /proc/$p ]; do\n  read -t 0.05 -u3 _x\ndone\n" * 20
    shown = one_line(script)
    assert "\n" not in shown and len(shown) == SHOWN_CHARS and shown.endswith("…")
    assert shown.startswith("p=$1 while [ -d /proc/$p ]; do read -t 0.05")
