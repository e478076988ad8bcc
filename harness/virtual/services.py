"""Device services behind ADB streams: shell (raw and v2), exec, sync, and one-line stubs.

A service is a coroutine taking a ``Channel`` (one open stream); it returns when done and the
daemon then closes the stream. If the host closes first, reads return None and writes raise
``StreamClosed``; the shell child then gets SIGHUP, as adbd sends it (see ``ShellSession``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import struct
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Protocol

from harness.virtual import cpu, wire
from harness.virtual.phone import Phone
from harness.virtual.sandbox import disk_used_bytes

CHUNK = 64 * 1024
SYNC_DATA_MAX = 64 * 1024
STAT_V1 = struct.Struct("<4sIII")
STAT_V2 = struct.Struct("<4sIQQIIIIQqqq")
DENT_V1 = struct.Struct("<4sIIII")
DENT_V2 = struct.Struct("<4sIQQIIIIQqqqI")
REQUEST = struct.Struct("<4sI")
DEVICE_SHELL = "/system/bin/sh"


class StreamClosed(Exception):
    """The host closed the stream."""


class Channel(Protocol):
    async def read(self) -> bytes | None: ...

    async def write(self, data: bytes) -> None: ...


Service = Callable[[Channel], Awaitable[None]]


def open_service(phone: Phone, name: str) -> Service | None:
    """The handler for a service string, or None to refuse it (the host gets CLSE)."""
    shell = wire.parse_shell_service(name)
    if shell is not None:
        kind, args, command = shell
        v2 = kind == "shell" and "v2" in args
        return lambda ch: run_shell(phone, ch, command, v2)
    if name.startswith("sync:"):
        return lambda ch: run_sync(phone, ch)
    replies = {"root:": "adbd cannot run as root in production builds\n",
               "unroot:": "adbd not running as root\n", "reboot:": "",
               "remount:": 'Not running as root. Try "adb root" first.\n'}
    for prefix, text in replies.items():
        if name.startswith(prefix):
            return _reply(text)
    if name.startswith("tcpip:"):
        port = name.partition(":")[2]
        return lambda ch: ch.write(f"restarting in TCP mode port: {port}\n".encode())
    return None


def _reply(text: str) -> Service:
    async def reply(ch: Channel) -> None:
        if text:
            await ch.write(text.encode())

    return reply


_FINISHING: set[asyncio.Task[int]] = set()  # shells whose host left, still being reaped


def _hang_up(pid: int) -> None:
    """adbd's answer to a closed stream: SIGHUP to its direct child only, not the group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGHUP)


async def _pipe_reader(pipe: IO[bytes] | None) -> asyncio.StreamReader | None:
    if pipe is None:
        return None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=CHUNK, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader


class ShellSession:
    """One shell child as adbd runs it: its own session, stdout and stderr read to EOF, reaped
    only then. A child (or a grandchild) that keeps those streams open keeps the stream open,
    and a finished child stays a zombie until then, as on a phone.
    """

    def __init__(self, phone: Phone, ch: Channel, script: str, v2: bool) -> None:
        self.ch = ch
        self.v2 = v2
        self.host_gone = False
        # argv[0] as adbd gives it, so the shell names itself /system/bin/sh in its messages
        argv = [DEVICE_SHELL, "-c", script] if script.strip() else [DEVICE_SHELL]
        self.proc = subprocess.Popen(
            argv, executable=phone.sandbox.bin / "sh", stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if v2 else subprocess.STDOUT,
            cwd=phone.sandbox.root, env=phone.shell_env, start_new_session=True,
        )
        phone.register_session(self.proc.pid)
        why = cpu.lead_session(self.proc.pid, phone.config.cpu_nice)  # ahead of the host's
        if why:
            print(why, file=sys.stderr, flush=True)  # the daemon's log

    def host_left(self) -> None:
        if not self.host_gone:
            self.host_gone = True
            if self.proc.returncode is None:
                _hang_up(self.proc.pid)

    async def pump(self, reader: asyncio.StreamReader | None, kind: int) -> None:
        if reader is None:
            return
        while chunk := await reader.read(CHUNK):
            if self.host_gone:
                continue  # drained to EOF all the same: the child must see its reader
            try:
                await self.ch.write(wire.shell_packet(kind, chunk) if self.v2 else chunk)
            except StreamClosed:
                self.host_left()

    async def feed(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.streams.FlowControlMixin(loop=loop), stdin)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        buffer = bytearray()
        try:
            while (data := await self.ch.read()) is not None:
                if not self.v2:
                    packets = [(wire.SHELL_STDIN, data)]
                else:
                    buffer += data
                    packets = wire.split_shell_packets(buffer)
                for kind, payload in packets:
                    with contextlib.suppress(ConnectionError, BrokenPipeError, RuntimeError):
                        if kind == wire.SHELL_STDIN and not writer.is_closing():
                            writer.write(payload)
                            await writer.drain()
                        elif kind == wire.SHELL_CLOSE_STDIN:
                            writer.close()
            self.host_left()  # the host closed a live stream
        finally:
            writer.close()

    async def finish(self, pumps: list[asyncio.Task[None]]) -> int:
        await asyncio.gather(*pumps)
        pause = 0.001  # EOF usually means the child is exiting: look again soon, then less often
        while (code := self.proc.poll()) is None:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
        return code


async def run_shell(phone: Phone, ch: Channel, command: str, v2: bool) -> None:
    fault = phone.take_command_fault()
    if fault == "hang":  # accept the command, never answer, until the host gives up
        while await ch.read() is not None:
            pass
        return
    script = "kill -SEGV $$" if fault == "crash" else phone.sandbox.rewrite_command(command)
    session = ShellSession(phone, ch, script, v2)
    pumps = [asyncio.create_task(session.pump(await _pipe_reader(session.proc.stdout),
                                              wire.SHELL_STDOUT)),
             asyncio.create_task(session.pump(await _pipe_reader(session.proc.stderr),
                                              wire.SHELL_STDERR))]
    feeder = asyncio.create_task(session.feed())
    finishing = asyncio.create_task(session.finish(pumps))
    try:
        code = await asyncio.shield(finishing)
        if v2 and not session.host_gone:
            await ch.write(wire.shell_packet(wire.SHELL_EXIT, bytes([wire.exit_status(code)])))
    except (StreamClosed, asyncio.CancelledError):
        session.host_left()  # the connection dropped: the child is reaped when it is done
        _FINISHING.add(finishing)
        finishing.add_done_callback(_FINISHING.discard)
        raise
    finally:
        feeder.cancel()
        phone.stop_if_refused()


class SyncReader:
    """Sync requests do not line up with host WRTE boundaries: read from a buffer."""

    def __init__(self, ch: Channel) -> None:
        self.ch = ch
        self.buffer = bytearray()

    async def exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            data = await self.ch.read()
            if data is None:
                raise StreamClosed
            self.buffer += data
        out = bytes(self.buffer[:count])
        del self.buffer[:count]
        return out


def _fail(message: str) -> bytes:
    data = message.encode()
    return REQUEST.pack(b"FAIL", len(data)) + data


def _stat_v2(tag: bytes, path: str, follow: bool) -> bytes:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as error:
        return STAT_V2.pack(tag, error.errno or 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return STAT_V2.pack(tag, 0, st.st_dev, st.st_ino, st.st_mode, st.st_nlink, 2000, 2000,
                        st.st_size, int(st.st_atime), int(st.st_mtime), int(st.st_ctime))


def _list(path: str, v2: bool) -> bytes:
    out = bytearray()
    try:
        names = [".", "..", *sorted(os.listdir(path))]
    except OSError:
        names = []
    for name in names:
        try:
            st = os.lstat(os.path.join(path, name))
        except OSError:
            continue
        raw = name.encode()
        if v2:
            out += DENT_V2.pack(b"DNT2", 0, st.st_dev, st.st_ino, st.st_mode, st.st_nlink, 2000,
                                2000, st.st_size, int(st.st_atime), int(st.st_mtime),
                                int(st.st_ctime), len(raw)) + raw
        else:
            out += DENT_V1.pack(b"DENT", st.st_mode, st.st_size & 0xFFFFFFFF,
                                int(st.st_mtime), len(raw)) + raw
    size = DENT_V2.size if v2 else DENT_V1.size
    return bytes(out) + b"DONE" + bytes(size - 4)


async def _send(phone: Phone, reader: SyncReader, spec: str) -> bytes:
    path_text, _, mode_text = spec.rpartition(",")
    if not path_text:
        path_text, mode_text = spec, "420"
    mode = int(mode_text) if mode_text.isdigit() else 0o644
    target = phone.sandbox.host_path(path_text)
    available = phone.storage_bytes() - disk_used_bytes(phone.sandbox)
    error = ""
    handle = None
    tmp = target.with_name(f".{target.name}.sync-tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = open(tmp, "wb")  # noqa: SIM115 - closed below on every path
    except OSError as exc:
        error = f"couldn't create file: {exc.strerror}"
    received = 0
    link_target = bytearray()
    mtime = 0
    while True:
        kind, length = REQUEST.unpack(await reader.exactly(REQUEST.size))
        if kind == b"DONE":
            mtime = length
            break
        if kind != b"DATA" or length > SYNC_DATA_MAX:
            error = error or f"invalid data message {kind!r}"
            break
        data = await reader.exactly(length)
        received += length
        if received > available and not error:
            error = "write failed: No space left on device"
        if error or handle is None:
            continue
        if stat.S_ISLNK(mode):
            link_target += data
        else:
            handle.write(data)
    if handle is not None:
        handle.close()
    if error:
        tmp.unlink(missing_ok=True)
        return _fail(error)
    try:
        if stat.S_ISLNK(mode):
            tmp.unlink(missing_ok=True)
            target.unlink(missing_ok=True)
            os.symlink(link_target.decode(), target)
        else:
            os.chmod(tmp, stat.S_IMODE(mode) or 0o644)
            os.utime(tmp, (mtime, mtime))
            os.replace(tmp, target)
            if phone.groups is not None:
                _uncache(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        return _fail(f"couldn't create file: {exc.strerror}")
    return REQUEST.pack(b"OKAY", 0)


def _uncache(path: Path) -> None:
    """A pushed file leaves no page cache behind: this daemon wrote it, so its pages would be
    charged to the host, not the phone, and an engine reading them would never pay for them.
    The phone's own processes then bring in (and are charged for) whatever they read."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


async def _recv(ch: Channel, path: str) -> None:
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed in finally
    except OSError as exc:
        await ch.write(_fail(exc.strerror or "open failed"))
        return
    try:
        out = bytearray()
        while chunk := handle.read(SYNC_DATA_MAX):
            out += REQUEST.pack(b"DATA", len(chunk)) + chunk
            if len(out) >= wire.MAX_PAYLOAD - SYNC_DATA_MAX - 8:
                await ch.write(bytes(out))
                out.clear()
        out += REQUEST.pack(b"DONE", 0)
        await ch.write(bytes(out))
    finally:
        handle.close()


async def run_sync(phone: Phone, ch: Channel) -> None:
    reader = SyncReader(ch)
    try:
        while True:
            kind, length = REQUEST.unpack(await reader.exactly(REQUEST.size))
            if kind == b"QUIT":
                return
            if length > 4096:
                await ch.write(_fail("path too long"))
                return
            arg = (await reader.exactly(length)).decode("utf-8", "replace")
            if kind == b"SEND":
                await ch.write(await _send(phone, reader, arg))
                continue
            path = str(phone.sandbox.host_path(arg))
            if kind == b"STAT":
                try:
                    st = os.lstat(path)
                    reply = STAT_V1.pack(b"STAT", st.st_mode, st.st_size & 0xFFFFFFFF,
                                         int(st.st_mtime))
                except OSError:
                    reply = STAT_V1.pack(b"STAT", 0, 0, 0)
                await ch.write(reply)
            elif kind in (b"STA2", b"LST2"):
                await ch.write(_stat_v2(kind, path, follow=kind == b"STA2"))
            elif kind in (b"LIST", b"LIS2"):
                await ch.write(_list(path, v2=kind == b"LIS2"))
            elif kind == b"RECV":
                # as adbd, which runs as the shell user, fails it (a missing file: ENOENT)
                denied = phone.read_error(arg) if os.path.lexists(path) else 0
                if denied:
                    await ch.write(_fail(f"open failed: {os.strerror(denied)}"))
                else:
                    await _recv(ch, path)
            else:
                code = int.from_bytes(kind, "little")
                await ch.write(_fail(f"unknown command {code:08x}"))
                return
    except StreamClosed:
        return
