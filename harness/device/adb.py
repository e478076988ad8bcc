"""A phone reached through the adb server with adbutils; real and virtual phones alike.

Commands run over shell protocol v2 (``shell,v2,raw:``), which carries stdout, stderr and the
exit code separately (137 for a SIGKILLed process). The timeout is a deadline for the whole
command, not a per-read socket timeout, so a chatty process cannot outlive it. Closing the
stream on timeout makes adbd send SIGHUP to the shell's direct child only: a process that must
not outlive its deadline (the engine) is killed by pid as well (see ``harness.run.trial``).
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import adbutils
from adbutils.errors import AdbConnectionError

from harness.device.base import (
    DeviceFacts,
    Progress,
    ShellResult,
    shell_command,
)
from harness.device.facts import gather_facts
from harness.errors import (
    AdbServerDownError,
    DeviceError,
    DeviceLostError,
    DeviceTimeoutError,
    not_run,
)
from harness.units import MIB

DEVICE_TMP = "/data/local/tmp"
_LOST_MARKERS = ("not found", "offline", "closed", "no devices", "disconnected")


def server_port() -> int:
    """The adb server port that ``ANDROID_ADB_SERVER_PORT`` names (default 5037), as adb does."""
    raw = os.environ.get("ANDROID_ADB_SERVER_PORT", "5037").strip()
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise DeviceError(f"ANDROID_ADB_SERVER_PORT={raw!r} is not a port number")
    return int(raw)


class ServerRefused(AdbConnectionError):
    """adbutils' connection error for "no adb server listens here", with the address."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        detail = "" if "refused" in reason.lower() else f" ({reason})"
        super().__init__(f"no adb server listens on {host}:{port}{detail}")
        self.host, self.port = host, port


class _RunningServerConnection(adbutils.AdbConnection):
    """A connection to an adb server that is already running, or an error.

    adbutils' own connection runs ``adb start-server`` when the connection is refused: a daemon
    on the port of the *environment* (5037 when unset), whichever port the client was given. The
    harness never starts a server the caller did not choose.
    """

    def __init__(self, host: str, port: int) -> None:
        self._address = (host, port)
        super().__init__(host, port)

    def _safe_connect(self) -> socket.socket:
        try:
            sock: socket.socket = self._create_socket()
        except AdbConnectionError as error:
            reason = str(error).removeprefix("connect to adb server failed: ")
            raise ServerRefused(*self._address, reason) from error
        return sock


class AdbClient(adbutils.AdbClient):
    """adbutils' client that never starts an adb server (see ``_RunningServerConnection``)."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None,
                 socket_timeout: float | None = None) -> None:
        port = server_port() if port is None else port
        super().__init__(host=host, port=port, socket_timeout=socket_timeout)
        self._socket_timeout = socket_timeout

    def make_connection(self, timeout: float | None = None) -> adbutils.AdbConnection:
        timeout = timeout or self._socket_timeout
        try:
            connection = _RunningServerConnection(self.host, self.port)
        except TimeoutError as error:
            raise adbutils.AdbTimeout("connect to adb server timeout") from error
        if timeout:
            connection.conn.settimeout(timeout)
        return connection


def adb_client(port: int | None = None) -> AdbClient:
    """The adb server on ``port``, else the one ``ANDROID_ADB_SERVER_PORT`` names, as adb does.

    Only a running server is used: a refused connection raises (``translate_error`` makes it an
    ``AdbServerDownError``) instead of starting a server on 5037 behind the caller's back.
    """
    return AdbClient(host="127.0.0.1", port=port)


def adb_version(binary: str) -> str:
    """What ``adb version`` says of itself, e.g. ``36.0.0-13206524`` or ``29.0.6-debian``."""
    import subprocess

    try:
        text = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=30,
                              check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for line in text.splitlines():
        if line.startswith("Version "):
            return line.split(None, 1)[1].strip()
    return text.splitlines()[0].strip() if text.strip() else "unknown"


def adb_identity() -> dict[str, Any]:
    """Which adb a run went through, for its meta: the server's protocol version (what the
    harness speaks to) and the adb program this machine's adb clients resolve (adbutils' rule:
    ``ADBUTILS_ADB_PATH``, else the first on PATH, else the one in its wheel) with its version.
    The wheel's adb and Debian's 29.0.6 both work (tests/virtual/test_adb_path.py runs each)."""
    found: dict[str, Any] = {"server_version": None, "program": None, "program_version": None}
    with contextlib.suppress(Exception):
        found["server_version"] = adb_client().server_version()
    with contextlib.suppress(Exception):
        program = str(adbutils.adb_path())
        found.update(program=program, program_version=adb_version(program))
    return found


SHOWN_CHARS = 160  # of a command, in an error message


def one_line(command: str) -> str:
    """A command as an error message shows it: whitespace runs as one space, the long ones cut."""
    text = " ".join(command.split())
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


def translate_error(error: BaseException, serial: str, what: str) -> DeviceError:
    """An adbutils/socket failure as a DeviceError naming the device and the failed command."""
    text = str(error) or type(error).__name__
    if isinstance(error, ServerRefused):
        return AdbServerDownError(
            f"{what}: {text}; the harness never starts one itself: run "
            f"`adb -P {error.port} start-server`, or point ANDROID_ADB_SERVER_PORT at yours",
            serial)
    if isinstance(error, AdbConnectionError):
        port = os.environ.get("ANDROID_ADB_SERVER_PORT", "5037")
        return DeviceError(f"{what}: cannot reach the adb server on port {port} ({text})", serial)
    lost = isinstance(error, EOFError | ConnectionError) or any(
        marker in text.lower() for marker in _LOST_MARKERS)
    if lost:
        return DeviceLostError(f"{what}: device connection lost ({text})", serial)
    return DeviceError(f"{what}: {text}", serial)


SYNC_CHUNK = 64 * 1024  # the sync protocol's largest DATA packet (v1; no sendrecv_v2 needed)
SYNC_BATCH = 16  # DATA packets per socket write: 1 MiB, also the progress step
PROGRESS_EVERY = MIB  # report push progress per MiB, not per packet
SYNC_TIMEOUT_S = 600.0  # socket timeout of a push, as adbutils' open_transport gives it
_SYNC_HEADER = struct.Struct("<4sI")


def _expect_okay(connection: Any, what: str) -> None:
    """The server's OKAY, or its FAIL as an error. A server that hangs up instead (no answer at
    all) has lost the device's transport while we asked: EOFError, which is a lost device
    (``translate_error``), not adbutils' "Unknown data: b''"."""
    data = connection.read(4)
    if data == b"OKAY":
        return
    if data == b"FAIL":
        raise adbutils.AdbError(connection.read_string_block())
    if not data:
        raise EOFError(f"the adb server closed the connection while {what}")
    raise adbutils.AdbError(f"unknown answer from the adb server: {data!r}")


class _DirectConnection(_RunningServerConnection):
    """A push's or a shell command's connection: closed at once, without adbutils' sleep.

    adbutils' ``close`` half-closes the socket and then sleeps 10 ms. By the time a push closes,
    the phone has answered OKAY or FAIL for the whole file; by the time a shell command closes,
    its exit packet has arrived, or its deadline has passed and closing is what ends it (the
    server closes the stream either way, on FIN or on RST). There is nothing to wait for.
    """

    def close(self) -> None:
        if not self.closed:
            self.conn.close()


def _sync_send(conn: Any, stream: io.BufferedIOBase, remote: str, mode: int, total: int,
               progress: Progress | None) -> None:
    """Sync SEND with full 64 KiB DATA packets, 16 of them (1 MiB) per ``sendall``.

    The file is read with ``readinto`` straight into a buffer laid out as the packets go on the
    wire (``DATA`` + length + 64 KiB, repeated), so no byte is copied in Python: one read per
    packet, one socket write per MiB (adbutils sends 4 KiB packets, at half the speed).
    """
    target = f"{remote},{mode}".encode()
    conn.sendall(_SYNC_HEADER.pack(b"SEND", len(target)) + target)
    slot = _SYNC_HEADER.size + SYNC_CHUNK
    buffer = bytearray(slot * SYNC_BATCH)
    view = memoryview(buffer)
    done = reported = 0
    while True:
        end = read = 0
        for start in range(0, len(buffer), slot):
            count = stream.readinto(view[start + _SYNC_HEADER.size:start + slot])
            if not count:
                break
            _SYNC_HEADER.pack_into(buffer, start, b"DATA", count)
            end, read = start + _SYNC_HEADER.size + count, read + count
            if count < SYNC_CHUNK:  # a short read: the packets so far are contiguous, send them
                break
        if not read:
            break
        conn.sendall(view[:end])
        done += read
        if progress is not None and (done - reported >= PROGRESS_EVERY or done == total):
            progress(done, total)
            reported = done
    conn.sendall(_SYNC_HEADER.pack(b"DONE", int(time.time())))
    header = _recv_exact(conn, 8)
    status, length = _SYNC_HEADER.unpack(header)
    if status == b"FAIL":
        message = _recv_exact(conn, length).decode(errors="replace")
        raise OSError(message)
    if status != b"OKAY":
        raise OSError(f"unexpected sync reply {status!r}")
    with contextlib.suppress(OSError):  # the file is complete; QUIT only ends the service
        conn.sendall(_SYNC_HEADER.pack(b"QUIT", 0))
    if progress is not None and total == 0:
        progress(0, 0)


def _recv_exact(conn: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            raise ConnectionError("connection closed during sync")
        data += part
    return data


class AdbDevice:
    """One device of the adb server, by serial."""

    def __init__(self, serial: str, client: adbutils.AdbClient | None = None) -> None:
        self._serial = serial
        if client is not None and not isinstance(client, AdbClient):
            client = AdbClient(client.host, client.port)  # one that never starts a server
        self._client = client or adb_client()

    @property
    def serial(self) -> str:
        return self._serial

    def __repr__(self) -> str:
        return f"AdbDevice({self._serial!r})"

    def shell(self, cmd: str | Sequence[str], timeout: float | None = None) -> ShellResult:
        command = shell_command(cmd)
        shown = one_line(command)  # errors name the command on one line (a script has many)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            connection = self._direct_connection(timeout)
        except Exception as error:
            raise translate_error(error, self._serial, shown) from error
        try:
            try:
                self._open_service(connection, f"shell,v2,raw:{command}")
            except (adbutils.AdbTimeout, TimeoutError):  # the deadline covers the handshake too
                raise DeviceTimeoutError(f"command timed out: {shown}", self._serial) from None
            except Exception as error:  # refused or offline: the command never ran
                raise not_run(translate_error(error, self._serial, shown)) from error
            return _read_shell_v2(connection.conn, deadline, shown, self._serial)
        except DeviceError:
            raise
        except Exception as error:
            raise translate_error(error, self._serial, shown) from error
        finally:
            connection.close()

    def push(self, local: str | Path, remote: str, progress: Progress | None = None) -> None:
        source = Path(local)
        what = f"push {source} -> {remote}"
        try:
            total = source.stat().st_size
            mode = 0o755 if os.access(source, os.X_OK) else 0o644
            connection = self._sync_connection()
            try:
                self._open_service(connection, "sync:")
                with source.open("rb") as stream:
                    _sync_send(connection.conn, stream, remote, mode, total, progress)
            finally:
                connection.close()
        except OSError as error:
            raise DeviceError(f"{what}: {error}", self._serial) from error
        except Exception as error:
            raise translate_error(error, self._serial, what) from error

    def _sync_connection(self) -> _DirectConnection:
        """A server connection for one push (see ``_direct_connection``)."""
        return self._direct_connection(SYNC_TIMEOUT_S)

    def _direct_connection(self, timeout: float | None) -> _DirectConnection:
        """A server connection for one push or shell command, without ``open_transport``.

        adbutils' ``open_transport`` asks the server for its version on a connection of its own
        first, which adbutils closes with a 10 ms sleep: with the command's own close, 20 ms of
        a 100 MiB push's 0.2 s, and of every shell command (23 ms for ``true``, 1.6 ms
        without). ``host:transport:SERIAL`` (``_open_service``) is understood by every server
        version. ``timeout`` is the socket's; None blocks, as ``open_transport(timeout=None)``.
        """
        try:
            connection = _DirectConnection(self._client.host, self._client.port)
        except TimeoutError as error:
            raise adbutils.AdbTimeout("connect to adb server timeout") from error
        connection.conn.settimeout(timeout)
        # as adb's client: without it the 8-byte DONE waits for the ACK of what went before
        # (Nagle), up to the 40 ms delayed-ACK timer when nothing else is in flight
        connection.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _open_service(self, connection: _DirectConnection, service: str) -> None:
        """Switch ``connection`` to this device, then open ``service`` on it (FAIL raises)."""
        connection.send_command(f"host:transport:{self._serial}")
        _expect_okay(connection, "switching to the device")
        connection.send_command(service)
        _expect_okay(connection, "opening the service")

    def facts(self) -> DeviceFacts:
        return gather_facts(self, kind="adb", storage_path=DEVICE_TMP)


def _read_shell_v2(
    sock: socket.socket, deadline: float | None, command: str, serial: str,
) -> ShellResult:
    """Packets ``[id:u8][len:u32 LE][data]`` until the exit packet (id 3)."""
    buffer = bytearray()
    stdout, stderr = bytearray(), bytearray()

    def need(size: int) -> bytes:
        while len(buffer) < size:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DeviceTimeoutError(f"command timed out: {command}", serial)
                sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise DeviceTimeoutError(f"command timed out: {command}", serial) from None
            if not chunk:
                raise DeviceLostError(f"stream closed before the exit code: {command}", serial)
            buffer.extend(chunk)
        data = bytes(buffer[:size])
        del buffer[:size]
        return data

    while True:
        header = need(5)
        length = int.from_bytes(header[1:5], "little")
        data = need(length) if length else b""
        if header[0] == 1:
            stdout.extend(data)
        elif header[0] == 2:
            stderr.extend(data)
        elif header[0] == 3:
            return ShellResult(
                exit_code=data[0] if data else 255,
                stdout=stdout.decode("utf-8", errors="replace"),
                stderr=stderr.decode("utf-8", errors="replace"),
            )
