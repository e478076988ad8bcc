"""The ADB transport and shell-v2 wire formats, as pure functions (see VIRTUAL_PHONE.md).

Kept free of I/O so the framing can be tested byte by byte; the daemon only moves bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

A_CNXN = 0x4E584E43
A_AUTH = 0x48545541
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_CLSE = 0x45534C43
A_WRTE = 0x45545257
A_STLS = 0x534C5453

VERSION_MIN = 0x01000000
VERSION_SKIP_CHECKSUM = 0x01000001
MAX_PAYLOAD = 0x100000  # 1 MiB: with 4 KiB the adb server aborts on long service strings
HEADER = struct.Struct("<6I")
FEATURES = ("shell_v2", "cmd", "stat_v2", "ls_v2", "fixed_push_mkdir")

NAMES = {A_CNXN: "CNXN", A_AUTH: "AUTH", A_OPEN: "OPEN", A_OKAY: "OKAY", A_CLSE: "CLSE",
         A_WRTE: "WRTE", A_STLS: "STLS"}

# shell protocol v2 packet ids
SHELL_STDIN, SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT, SHELL_CLOSE_STDIN, SHELL_WINDOW = range(6)
SHELL_HEADER = struct.Struct("<BI")


class WireError(ValueError):
    """A peer sent a malformed message; the connection must be dropped."""


@dataclass(frozen=True)
class Message:
    command: int
    arg0: int
    arg1: int
    data: bytes = b""

    @property
    def name(self) -> str:
        return NAMES.get(self.command, hex(self.command))


def encode(message: Message, checksum: bool = False) -> bytes:
    """Header + payload; the checksum is only needed for peers older than 0x01000001."""
    check = sum(message.data) & 0xFFFFFFFF if checksum else 0
    header = HEADER.pack(message.command, message.arg0, message.arg1, len(message.data), check,
                         message.command ^ 0xFFFFFFFF)
    return header + message.data


def decode_header(raw: bytes, max_payload: int = MAX_PAYLOAD) -> tuple[int, int, int, int]:
    """(command, arg0, arg1, data_length) of a 24-byte header, or WireError."""
    if len(raw) != HEADER.size:
        raise WireError(f"short header ({len(raw)} bytes)")
    command, arg0, arg1, length, _check, magic = HEADER.unpack(raw)
    if magic != command ^ 0xFFFFFFFF:
        raise WireError(f"bad magic for command {command:#x}")
    if length > max_payload:
        raise WireError(f"payload of {length} bytes exceeds {max_payload}")
    return command, arg0, arg1, length


def banner(props: dict[str, str], features: tuple[str, ...] = FEATURES) -> bytes:
    """The device CNXN payload; the server reads only these three props and the features."""
    parts = []
    for key in ("ro.product.name", "ro.product.model", "ro.product.device"):
        value = "".join("_" if ch in ":;=," else ch for ch in props.get(key, "virtual"))
        parts.append(f"{key}={value}")
    parts.append("features=" + ",".join(features))
    return ("device::" + ";".join(parts)).encode()


def parse_service(data: bytes) -> str:
    return data.rstrip(b"\0").decode("utf-8", "replace")


def shell_packet(kind: int, data: bytes) -> bytes:
    return SHELL_HEADER.pack(kind, len(data)) + data


def split_shell_packets(buffer: bytearray) -> list[tuple[int, bytes]]:
    """Take every complete v2 packet off the front of ``buffer`` (host WRTEs do not align)."""
    packets = []
    while len(buffer) >= SHELL_HEADER.size:
        kind, length = SHELL_HEADER.unpack_from(buffer)
        end = SHELL_HEADER.size + length
        if len(buffer) < end:
            break
        packets.append((kind, bytes(buffer[SHELL_HEADER.size:end])))
        del buffer[:end]
    return packets


def exit_status(returncode: int) -> int:
    """Shell v2 exit byte: the code, or 128+signal (asyncio reports a signal as -N)."""
    if returncode < 0:
        return (128 - returncode) & 0xFF
    return returncode & 0xFF


def parse_shell_service(service: str) -> tuple[str, set[str], str] | None:
    """``shell,v2,raw:CMD`` → ("shell", {"v2","raw"}, "CMD"); also exec:; None otherwise."""
    head, sep, command = service.partition(":")
    if not sep:
        return None
    name, *args = head.split(",")
    if name not in ("shell", "exec"):
        return None
    return name, {a for a in args if a}, command
