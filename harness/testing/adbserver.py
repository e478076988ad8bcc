"""A private adb server: its own port, HOME and no mDNS/emulator scanning.

Tests and the demo never touch a user's adb server on 5037. The server runs in the foreground
(``adb nodaemon server``) as our own child, so we know its pid and stop it by that pid.

Which adb: ``ADBUTILS_ADB_PATH`` when set, else the one inside the adbutils wheel, not the first
on PATH (which adbutils would prefer): a private server is the same program wherever it runs.
``adb_clients`` lists every adb this machine has (the wheel's, and a different one on PATH such
as Debian's 29.0.6, what many users have), so tests can run against each.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.errors import DeviceError
from harness.logcause import failed_at_start, log_size


def bundled_adb() -> str:
    """The adb inside the adbutils wheel."""
    import adbutils

    return str(Path(adbutils.__file__).resolve().parent / "binaries" / "adb")


def adb_binary() -> str:
    """``ADBUTILS_ADB_PATH`` when set, else the wheel's adb (module docstring)."""
    return os.environ.get("ADBUTILS_ADB_PATH") or bundled_adb()


def adb_clients() -> list[str]:
    """Every adb this machine offers, the default first: the wheel's (or ADBUTILS_ADB_PATH),
    then the first one on PATH when it is another program (Debian's, a platform-tools)."""
    found = [adb_binary()]
    on_path = shutil.which("adb")
    if on_path and os.path.realpath(on_path) != os.path.realpath(found[0]):
        found.append(on_path)
    return found


def free_port() -> int:
    """A free TCP port on 127.0.0.1 outside adb's emulator scan range 5554-5585."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not 5554 <= port <= 5585:
            return port


@dataclass
class AdbServer:
    port: int
    home: Path
    process: subprocess.Popen[bytes]
    binary: str = ""  # the adb the server runs, and its clients use (a mismatch restarts it)

    @property
    def env(self) -> dict[str, str]:
        """Variables that point adb, adbutils and harness at this server."""
        return {
            "ANDROID_ADB_SERVER_PORT": str(self.port),
            "ADBUTILS_ADB_PATH": self.binary,
            "HOME": str(self.home),
            "ADB_MDNS": "0",
            "ADB_EMU": "0",
        }

    def adb(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run the real adb client against this server.

        ``-H 127.0.0.1`` (not "localhost") makes the client fail when the server is gone instead
        of starting a daemon of its own there, which nobody would stop.
        """
        return subprocess.run(
            [self.binary, "-H", "127.0.0.1", "-P", str(self.port), *args],
            env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout,
        )

    @staticmethod
    def said(result: subprocess.CompletedProcess[str]) -> str:
        """What the adb client printed, on either stream: its own errors ("adb: error: ...",
        "remote open failed: ...") go to stderr in recent adbs, to stdout in 29.0.6."""
        return result.stdout + result.stderr

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_adb_server(home: Path | None = None, port: int | None = None,
                     binary: str | None = None) -> AdbServer:
    binary = binary or adb_binary()
    home = home or Path(tempfile.mkdtemp(prefix="harness-adb-home-"))
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    env = {**os.environ, "HOME": str(home), "ADB_MDNS": "0", "ADB_EMU": "0",
           "ADB_MDNS_AUTO_CONNECT": "0"}
    env.pop("ANDROID_ADB_SERVER_ADDRESS", None)  # a server given a host name aborts at start
    log_path = home / "adb-server.log"
    offset = log_size(log_path)
    log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the server
    process = subprocess.Popen(
        [binary, "-P", str(port), "nodaemon", "server"],
        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    log.close()
    server = AdbServer(port=port, home=home, process=process, binary=binary)
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise DeviceError(failed_at_start(f"adb server on port {port} exited at start",
                                                  log_path, offset))
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return server
            except OSError:
                time.sleep(0.1)
    except BaseException:  # stopped while it starts (Ctrl-C, SIGTERM): not left behind
        server.stop()
        raise
    server.stop()
    raise DeviceError(failed_at_start(f"adb server on port {port} did not listen within 15 s",
                                      log_path, offset))


@contextmanager
def private_adb_server(home: Path | None = None,
                       binary: str | None = None) -> Iterator[AdbServer]:
    """Start a private adb server (``binary``, else ``adb_binary``) and stop it (by its pid)
    however the block ends."""
    server = start_adb_server(home, binary=binary)
    try:
        yield server
    finally:
        server.stop()
