"""The phone's services process: its system-service tools answered without starting Python.

A phone's ``dumpsys``, ``getprop`` or ``logcat`` is a small binary that asks a service already
running (system_server, logd, init's property service). The virtual phone's tools are Python
(harness.virtual.phonetools); started per call they cost about 90 ms each, and a trial makes
nine or so (the cooldown gate's dumpsys thermalservice and battery, the power state, the logcat
evidence): most of its time around the engine. So, like Android's zygote, one process per phone
imports the tools once, listens on an abstract Unix socket and forks a child per call. The
phone's ``/system/bin/dumpsys`` is then ``phonecall`` (phonecall.c), which passes the caller's
stdin, stdout and stderr (SCM_RIGHTS) and arguments, and exits with the child's status. The
child runs the same ``phonetools.main`` with the caller's streams as its own, so what a tool
prints, where and with which status, is what it printed before.

The daemon starts it before the phone is ready (``start``) and stops it with the phone; it also
ends by itself within a second of its parent's death, so a killed daemon leaves nothing behind.
Like system_server, it is none of the phone's processes: it runs outside the phone's cgroups.
"""

from __future__ import annotations

import hashlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import traceback
from pathlib import Path

MODULE = "harness.virtual.zygote"
HEADER = struct.Struct("<Ii")  # payload length, the caller's parent pid
STATUS = struct.Struct("<i")
READY_S = 10.0
CALLER_ENV = "HARNESS_TOOL_CALLER"  # the pid that ran the tool (what `log` names)


def socket_name(state: Path) -> str:
    """The phone's abstract socket name: one per phone folder."""
    digest = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:16]
    return f"harness-phone-{digest}"


def _request(conn: socket.socket) -> tuple[list[str], list[int], int] | None:
    """(tool argv, the caller's stream fds, the caller's parent pid), or None if malformed."""
    data, fds, _flags, _address = socket.recv_fds(conn, HEADER.size, 3)
    while len(data) < HEADER.size:
        more = conn.recv(HEADER.size - len(data))
        if not more:
            break
        data += more
    if len(data) < HEADER.size or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    length, caller = HEADER.unpack(data)
    payload = b""
    while len(payload) < length:
        more = conn.recv(length - len(payload))
        if not more:
            break
        payload += more
    argv = [part.decode(errors="surrogateescape") for part in payload.split(b"\0")[:-1]]
    return argv, list(fds), caller


def _answer(conn: socket.socket, argv: list[str], fds: list[int], caller: int) -> None:
    """In the forked child: the caller's streams become ours, the tool runs, its status goes
    back; never returns."""
    from harness.virtual import phonetools

    code = 1
    try:
        for number, fd in enumerate(fds):
            os.dup2(fd, number)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ[CALLER_ENV] = str(caller)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        code = phonetools.main(argv)
    except BaseException:  # a tool's failure is the call's, never the services'
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            pass
        try:
            conn.sendall(STATUS.pack(code))
        finally:
            os._exit(0)


def serve(state: Path, parent: int) -> int:
    """Answer calls until the parent (the daemon) is gone or SIGTERM arrives."""
    from harness.virtual import phonetools  # noqa: F401 - imported once, before any fork

    os.environ["HARNESS_SIM_STATE"] = str(state)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + socket_name(state))
    listener.listen(64)
    print("ready", flush=True)
    while os.getppid() == parent:
        ready, _, _ = select.select([listener], [], [], 1.0)
        if not ready:
            continue
        conn, _ = listener.accept()
        with conn:
            try:
                request = _request(conn)
            except OSError:
                continue
            if request is None:
                continue
            argv, fds, caller = request
            if os.fork() == 0:
                listener.close()
                _answer(conn, argv, fds, caller)
            for fd in fds:
                os.close(fd)
    return 0


def start(state: Path) -> subprocess.Popen[bytes]:
    """The phone's services process, listening when this returns; a DeviceError if it cannot."""
    from harness.errors import DeviceError

    package_parent = Path(__file__).resolve().parent.parent.parent
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    env.pop("LD_PRELOAD", None)
    process = subprocess.Popen(
        [sys.executable, "-S", "-m", MODULE, str(state), str(os.getpid())],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], READY_S)
    line = process.stdout.readline() if ready else b""
    process.stdout.close()
    if line.strip() != b"ready":
        stop(process)
        raise DeviceError(f"the virtual phone's services did not start within {READY_S:.0f} s")
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str]) -> int:
    state, parent = Path(argv[0]), int(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return serve(state, parent)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
