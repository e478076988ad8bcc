"""Several phones at once; stop leaves nothing behind; storage outlives a stop until wiped."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.testing.adbserver import AdbServer
from harness.virtual.control import list_phones, start_phones, stop_phones, wipe_phones
from virtual.procwait import alive


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_four_phones_run_at_once_and_stop_cleanly(adb_server: AdbServer, tmp_path: Path) -> None:
    home = tmp_path / "sim"
    try:
        phones = start_phones("budget-4gb", 4, home=home)
        listing = adb_server.adb("devices", "-l").stdout
        for phone in phones:
            assert f"{phone.serial}" in listing
            answer = adb_server.adb("-s", phone.serial, "shell", "getprop ro.product.model")
            assert answer.stdout.strip() == "22120RN86G"
        # a background process of one phone must not outlive the phone
        leftover = adb_server.adb("-s", phones[0].serial, "shell",
                                  "sleep 300 >/dev/null 2>&1 & echo $!").stdout.strip()
        assert alive(int(leftover))
    finally:
        stopped = stop_phones(home=home)
    assert len(stopped) == 4
    for phone in stopped:
        assert not alive(phone.pid)
        assert not _listening(phone.port)
    assert not alive(int(leftover))
    assert "127.0.0.1:" not in adb_server.adb("devices").stdout


def test_storage_persists_across_stop_and_start_until_wiped(adb_server: AdbServer,
                                                            tmp_path: Path) -> None:
    home = tmp_path / "sim"
    try:
        first = start_phones("midrange-8gb", 1, home=home)[0]
        adb_server.adb("-s", first.serial, "shell", "echo kept > /data/local/tmp/note")
        stop_phones([first.serial], home=home)
        with pytest.raises(ConfigError):
            stop_phones(["127.0.0.1:1"], home=home)
        second = start_phones("midrange-8gb", 1, home=home)[0]
        assert second.name == first.name
        note = adb_server.adb("-s", second.serial, "shell", "cat /data/local/tmp/note").stdout
        assert note == "kept\n"
        with pytest.raises(ConfigError, match="stop it first"):
            wipe_phones([second.name], home=home)
    finally:
        stop_phones(home=home)
    wiped = wipe_phones(home=home)
    assert [w.name for w in wiped] == [first.name]
    assert list_phones(home) == [] and not os.path.exists(first.path)
