"""stop_phones returns only once each daemon has exited and, if ours, been reaped.

The daemons here are stand-ins: small Python processes whose command line names the daemon
module, recorded in a slot's running.json as ``start_phones`` records a real one. A process that
is exiting reads an empty /proc/PID/cmdline while it still runs (it frees its memory first), so
the 200 MB stand-in keeps that window open long enough for a stop that watches the command line
to return too early.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from harness.testing.adbserver import free_port
from harness.virtual import control
from harness.virtual.control import DAEMON_MODULE, PhoneInfo, list_phones, stop_phones

BIG_EXIT = ("b = bytearray(200 << 20)\n"
            "for i in range(0, len(b), 4096): b[i] = 1\n"
            "print('ready', flush=True)\n"
            "import time; time.sleep(300)\n")
DEAF = ("import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n")


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@pytest.fixture
def stand_ins(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    """(sim home, started stand-ins); any still running at the end is killed by its pid."""
    started: list[subprocess.Popen[bytes]] = []
    yield tmp_path / "sim", started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def _start(home: Path, started: list[subprocess.Popen[bytes]], code: str, name: str,
           module: str = DAEMON_MODULE) -> PhoneInfo:
    process = subprocess.Popen([sys.executable, "-c", code, module], stdout=subprocess.PIPE)
    started.append(process)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    phone_dir = home / "phones" / name
    phone_dir.mkdir(parents=True)
    port = free_port()  # no adb server there: disconnecting is skipped quietly
    info = PhoneInfo(name, f"127.0.0.1:{port}", port, process.pid, "p", "m", str(phone_dir),
                     free_port())
    (phone_dir / "running.json").write_text(json.dumps(asdict(info)))
    return info


def test_stop_returns_after_each_daemon_has_exited_and_been_reaped(
        stand_ins: tuple[Path, list[subprocess.Popen[bytes]]]) -> None:
    home, started = stand_ins
    infos = [_start(home, started, BIG_EXIT, f"big-{i}") for i in range(2)]
    assert {p.pid for p in list_phones(home) if p.running} == {i.pid for i in infos}
    stopped = stop_phones(home=home)
    assert sorted(p.pid for p in stopped) == sorted(i.pid for i in infos)
    for info in infos:
        assert _state(info.pid) is None, f"pid {info.pid} is {_state(info.pid)} after stop"
        assert not (Path(info.path) / "running.json").exists()
    assert not any(p.running for p in list_phones(home))


def test_a_daemon_that_ignores_sigterm_is_killed_within_the_bound(
        stand_ins: tuple[Path, list[subprocess.Popen[bytes]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    home, started = stand_ins
    monkeypatch.setattr(control, "STOP_GRACE_S", 0.5)
    info = _start(home, started, DEAF, "deaf-1")
    began = time.monotonic()
    stop_phones([info.serial], home=home)
    assert _state(info.pid) is None
    assert started[0].returncode is None  # reaped by stop, not by Popen
    assert time.monotonic() - began < 10


def test_a_recorded_pid_that_is_no_daemon_is_left_alone(
        stand_ins: tuple[Path, list[subprocess.Popen[bytes]]]) -> None:
    home, started = stand_ins
    info = _start(home, started, DEAF, "other-1", module="not-a-phone")
    assert list_phones(home)[0].running is False  # not our daemon: not listed as running
    control._stop([info])
    assert _state(info.pid) not in (None, "Z")
