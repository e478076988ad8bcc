"""The push's sync SEND framing, byte by byte, against an in-memory socket (no phone, no server)."""

from __future__ import annotations

import io
import struct

import pytest

from harness.device.adb import SYNC_BATCH, SYNC_CHUNK, _sync_send


class Wire:
    """Records what is sent; answers with ``reply`` once DONE has gone out."""

    def __init__(self, reply: bytes = b"OKAY\0\0\0\0") -> None:
        self.sent = bytearray()
        self.writes = 0
        self.reply = reply

    def sendall(self, data: bytes | memoryview) -> None:
        self.sent += data
        self.writes += 1

    def recv(self, size: int) -> bytes:
        out, self.reply = self.reply[:size], self.reply[size:]
        return out


class Trickle(io.RawIOBase):
    """A stream that returns at most ``step`` bytes per read, as a pipe might."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.step = memoryview(data), step

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.step, len(self.data))
        buffer[:count] = self.data[:count]
        self.data = self.data[count:]
        return count


def packets(wire: bytes) -> list[tuple[bytes, bytes]]:
    """(id, payload) of every request; SEND's and DONE's lengths are a path and an mtime."""
    out, at = [], 0
    while at < len(wire):
        kind, length = struct.unpack_from("<4sI", wire, at)
        at += 8
        if kind in (b"DONE", b"QUIT"):
            out.append((kind, b""))
            continue
        out.append((kind, bytes(wire[at:at + length])))
        at += length
    return out


def test_full_packets_sixteen_per_write_and_progress_per_mib() -> None:
    data = bytes(range(256)) * (SYNC_CHUNK * SYNC_BATCH * 2 // 256) + b"tail"
    wire, calls = Wire(), []
    _sync_send(wire, io.BytesIO(data), "/data/x", 0o644,
               len(data), lambda d, t: calls.append((d, t)))
    got = packets(bytes(wire.sent))
    assert got[0] == (b"SEND", b"/data/x,420")
    data_packets = [p for k, p in got if k == b"DATA"]
    assert [len(p) for p in data_packets[:-1]] == [SYNC_CHUNK] * (2 * SYNC_BATCH)
    assert data_packets[-1] == b"tail"
    assert b"".join(data_packets) == data
    assert [k for k, _ in got[-2:]] == [b"DONE", b"QUIT"]
    assert wire.writes == 1 + 3 + 2  # SEND, three batches, DONE, QUIT
    assert calls == [(2**20, len(data)), (2 * 2**20, len(data)), (len(data), len(data))]


def test_short_reads_still_make_valid_packets() -> None:
    data = bytes(range(251)) * 1000
    wire = Wire()
    _sync_send(wire, Trickle(data, 10_007), "/x", 0o755, len(data), None)  # type: ignore[arg-type]
    got = packets(bytes(wire.sent))
    assert got[0] == (b"SEND", b"/x,493")
    assert b"".join(p for k, p in got if k == b"DATA") == data
    assert all(0 < len(p) <= SYNC_CHUNK for k, p in got if k == b"DATA")


def test_an_empty_file_is_one_send_and_done_and_reports_zero() -> None:
    wire, calls = Wire(), []
    _sync_send(wire, io.BytesIO(b""), "/e", 0o644, 0,
               lambda d, t: calls.append((d, t)))
    assert [k for k, _ in packets(bytes(wire.sent))] == [b"SEND", b"DONE", b"QUIT"]
    assert calls == [(0, 0)]


def test_the_phones_fail_reason_is_the_error() -> None:
    reason = b"write failed: No space left on device"
    wire = Wire(b"FAIL" + struct.pack("<I", len(reason)) + reason)
    with pytest.raises(OSError, match="No space left on device"):
        _sync_send(wire, io.BytesIO(b"abc"), "/f", 0o644, 3, None)
    assert not bytes(wire.sent).endswith(b"QUIT\0\0\0\0")
    with pytest.raises(OSError, match="unexpected sync reply"):
        _sync_send(Wire(b"WHAT\0\0\0\0"), io.BytesIO(b"abc"), "/f", 0o644, 3,
                   None)
