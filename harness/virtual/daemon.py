"""The device side of the ADB transport over TCP: one process per virtual phone.

``python -m harness.virtual.daemon PHONE_DIR PORT`` serves the phone whose config is in
PHONE_DIR/state/config.json. Each TCP connection is its own transport (the adb server, or a client
speaking to the device directly). asyncio, because a phone mostly waits: on sockets, on its
commands' pipes and on its monitor's timer; four phones idle on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.virtual import cpu, wire, zygote
from harness.virtual.config import PhoneConfig
from harness.virtual.phone import GUARD_S, TICK_S, Phone
from harness.virtual.provision import release
from harness.virtual.sandbox import STOPPED_WHY, Sandbox
from harness.virtual.services import StreamClosed, open_service


class Stream:
    """One open stream: device id ``local``, host id ``remote``; honours OKAY flow control."""

    def __init__(self, conn: Connection, local: int, remote: int) -> None:
        self.conn = conn
        self.local = local
        self.remote = remote
        self.inbound: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.closed = False
        self.task: asyncio.Task[None] | None = None

    async def read(self) -> bytes | None:
        data = await self.inbound.get()
        if data is None:
            return None
        if not self.closed:
            await self.conn.send(wire.Message(wire.A_OKAY, self.local, self.remote))
        return data

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            await self.can_write.wait()
            if self.closed:
                raise StreamClosed
            self.can_write.clear()
            chunk, view = view[:self.conn.max_payload], view[self.conn.max_payload:]
            await self.conn.send(wire.Message(wire.A_WRTE, self.local, self.remote, bytes(chunk)))

    def host_closed(self) -> None:
        self.closed = True
        self.can_write.set()
        self.inbound.put_nowait(None)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.conn.send(wire.Message(wire.A_CLSE, self.local, self.remote))


class Connection:
    def __init__(self, phone: Phone, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.phone = phone
        self.reader = reader
        self.writer = writer
        self.max_payload = 4096
        self.checksum = True
        self.streams: dict[int, Stream] = {}
        self.next_id = 1
        self.lock = asyncio.Lock()

    async def send(self, message: wire.Message) -> None:
        async with self.lock:
            self.writer.write(wire.encode(message, self.checksum))
            await self.writer.drain()

    async def serve(self) -> None:
        try:
            while True:
                header = await self.reader.readexactly(wire.HEADER.size)
                command, arg0, arg1, length = wire.decode_header(header)
                data = await self.reader.readexactly(length) if length else b""
                await self.dispatch(wire.Message(command, arg0, arg1, data))
        except (asyncio.IncompleteReadError, ConnectionError, wire.WireError):
            pass
        finally:
            await self.drop()

    async def drop(self) -> None:
        for stream in list(self.streams.values()):
            stream.host_closed()
            if stream.task is not None:
                stream.task.cancel()
        self.streams.clear()
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()

    async def dispatch(self, msg: wire.Message) -> None:
        if msg.command == wire.A_CNXN:
            self.checksum = min(msg.arg0, wire.VERSION_SKIP_CHECKSUM) < wire.VERSION_SKIP_CHECKSUM
            self.max_payload = min(msg.arg1, wire.MAX_PAYLOAD) or 4096
            for stream in list(self.streams.values()):
                stream.host_closed()
            self.streams.clear()
            await self.send(wire.Message(wire.A_CNXN, wire.VERSION_SKIP_CHECKSUM, wire.MAX_PAYLOAD,
                                         wire.banner(dict(self.phone.config.props))))
        elif msg.command == wire.A_OPEN:
            await self.open(msg.arg0, wire.parse_service(msg.data))
        elif msg.command == wire.A_OKAY:
            target = self.streams.get(msg.arg1)
            if target is not None:
                target.can_write.set()
        elif msg.command == wire.A_WRTE:
            target = self.streams.get(msg.arg1)
            if target is not None and not target.closed:
                target.inbound.put_nowait(msg.data)
        elif msg.command == wire.A_CLSE:
            target = self.streams.pop(msg.arg1, None)
            if target is not None:
                target.host_closed()
        # AUTH/STLS and unknown commands are ignored: we never ask for either

    async def open(self, remote: int, service: str) -> None:
        handler = open_service(self.phone, service)
        if handler is None or remote == 0:
            await self.send(wire.Message(wire.A_CLSE, 0, remote))
            return
        local = self.next_id
        self.next_id += 1
        stream = Stream(self, local, remote)
        self.streams[local] = stream
        await self.send(wire.Message(wire.A_OKAY, local, remote))

        async def run() -> None:
            try:
                await handler(stream)
            except StreamClosed:
                pass
            except Exception as error:  # a bug in one service must not take the phone down
                print(f"service {service!r} failed: {error!r}", file=sys.stderr, flush=True)
            finally:
                with contextlib.suppress(Exception):
                    await stream.close()
                self.streams.pop(local, None)

        stream.task = asyncio.create_task(run())


async def _every(period_s: float, step: Callable[[], None], what: str) -> None:
    """Run ``step`` every ``period_s`` for ever; a failing step is logged and the loop goes on."""
    while True:
        try:
            step()
        except Exception as error:  # one bad step must not stop the killer or the heat model
            print(f"{what} failed: {error!r}", file=sys.stderr, flush=True)
        await asyncio.sleep(period_s)


def _shut_down(phone: Phone, services: subprocess.Popen[bytes],
               drop_all: Callable[[], None]) -> None:
    """The phone's processes, tools, connections and resources, ended in that order."""
    phone.signal_sessions(signal.SIGCONT)
    phone.kill_everything()
    zygote.stop(services)
    drop_all()
    release(phone.config)  # its cgroups and its own disk (harness sim stop does it too)
    why = phone.sandbox.state / STOPPED_WHY
    if why.exists():  # a shell could not join the phone's cgroups (execshim.c)
        print(why.read_text().strip(), file=sys.stderr, flush=True)
    (phone.sandbox.state / "ready").unlink(missing_ok=True)


async def serve(phone_dir: Path, port: int, config: PhoneConfig) -> None:
    sandbox = Sandbox(phone_dir)
    phone = Phone(sandbox, config)
    connections: set[Connection] = set()
    tasks: set[asyncio.Task[None]] = set()

    def drop_all() -> None:
        for conn in list(connections):
            conn.writer.close()

    phone.on_drop = drop_all
    loop = asyncio.get_running_loop()

    def watch_exit(fd: int, then: Callable[[], None]) -> None:
        def ended() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            then()

        loop.add_reader(fd, ended)

    phone.watch_exit = watch_exit
    phone.boot()
    services = zygote.start(sandbox.state)  # the phone's tools answer from here on

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < phone.faults.refuse_until:
            writer.close()
            return
        conn = Connection(phone, reader, writer)
        connections.add(conn)
        try:
            await conn.serve()
        finally:
            connections.discard(conn)

    server = await asyncio.start_server(accept, "127.0.0.1", port)
    stop = asyncio.Event()
    phone.on_stop = stop.set
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A phone's adbd starts its shells with SIGHUP at its default, so a closed stream ends them.
    # Started under `nohup` (or any parent that ignores it), this process would pass SIG_IGN on
    # to every shell, and no shell could even trap it. Caught here, it is reset at their exec.
    loop.add_signal_handler(signal.SIGHUP, lambda: None)

    # the killer and the heat model; the simulated memory model between ticks (Phone.guard)
    tasks.add(asyncio.create_task(_every(TICK_S, phone.tick, "monitor tick")))
    if phone.groups is None:
        tasks.add(asyncio.create_task(_every(GUARD_S, phone.guard, "memory guard")))
    tasks.add(asyncio.create_task(phone.throttle_loop()))
    tasks.add(asyncio.create_task(phone.uptime_loop()))
    (sandbox.state / "ready").write_text(str(port))
    try:
        await stop.wait()
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        _shut_down(phone, services, drop_all)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness.virtual.daemon")
    parser.add_argument("phone_dir", type=Path)
    parser.add_argument("port", type=int)
    args = parser.parse_args(argv)
    config = PhoneConfig.load(Sandbox(args.phone_dir).state / "config.json")
    cpu.claim(config.cpu_nice)  # before the first thread or child: all the phone starts inherits it
    asyncio.run(serve(args.phone_dir, args.port, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
