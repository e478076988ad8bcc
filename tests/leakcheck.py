"""The session must leave no adb server, virtual-phone daemon or app, phone cgroup or phone disk
behind (a pytest plugin).

At the start, the session puts a token of its own into the environment (``HARNESS_TEST_SESSION``),
which every process it starts inherits: subprocesses, virtual-phone daemons, and adb servers that
daemonize (``adb start-server`` forks a server that init adopts, so ancestry cannot tell). At the
end, after every fixture is torn down, any live adb process (by /proc/PID/exe or argv[0]) or
virtual-phone daemon (by its command line) that carries the token or descends from this pytest
process fails the run, naming the process; it is then stopped by its pid, since this session
started it. Nothing without the token is ever signalled. An adb server listening on 5037 that was
not there at the start is named too: a failure if this session started it, a warning otherwise
(another session on the same machine may have). A virtual phone of this session's (its slot
under the session's temporary folder) whose cgroups or /data mount are still there at the end
is a leak too, and they are removed (harness.virtual.cgroups, harness.virtual.disk); another
session's phones are never looked at.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.virtual import balloons, cgroups, disk, zygote
from harness.virtual.control import DAEMON_MODULE
from harness.virtual.provision import cgroup_name

TOKEN_VAR = "HARNESS_TEST_SESSION"
USER_ADB_PORT = 5037
GRACE_S = 3.0  # something still on its way out at the end is given this long


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # start time in clock ticks since boot: tells a reused pid apart
    kind: str
    cmdline: str

    def describe(self) -> str:
        return f"{self.kind} pid {self.pid}: {self.cmdline}"


@dataclass
class Baseline:
    token: str
    procs: set[tuple[int, int]]
    user_port_owners: set[int]


def phone_leftovers(base: Path) -> tuple[list[Path], list[Path]]:
    """(cgroup directories, /data mounts) still there of the virtual phones whose slots are
    under ``base`` (this session's temporary folder)."""
    groups: list[Path] = []
    mounts: list[Path] = []
    parents = list(cgroups.controller_dirs().values())
    for slot in sorted(base.glob("**/phones/*")):
        name = cgroups.PREFIX + cgroup_name(slot)
        groups += [parent / name for parent in parents if (parent / name).is_dir()]
        if os.path.ismount(slot / "root" / "data"):
            mounts.append(slot / "root" / "data")
    return groups, mounts


_BASELINE = pytest.StashKey[Baseline]()
_LEAKS = pytest.StashKey[list[str]]()
_NOTES = pytest.StashKey[list[str]]()


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _kind(pid: int, argv: list[str]) -> str | None:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    if exe == "adb" or (argv and os.path.basename(argv[0]) == "adb"):
        return "adb"
    if DAEMON_MODULE in argv:
        return "virtual-phone daemon"
    if zygote.MODULE in argv:
        return "virtual-phone services"
    if argv and argv[-1] == balloons.MARKER:
        return "virtual-phone app"
    return None


def watched_processes() -> list[Proc]:
    """Live (not zombie) adb processes and virtual-phone daemons on this machine."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        args = [a for a in argv.split("\0") if a]
        kind = _kind(pid, args)
        stat = _stat(pid)
        if kind is None or stat is None or stat[0] in ("Z", "X"):
            continue
        found.append(Proc(pid, stat[2], kind, " ".join(args)))
    return found


def _carries(pid: int, token: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{TOKEN_VAR}={token}".encode() in environ


def _descends_from_us(pid: int) -> bool:
    me = os.getpid()
    for _ in range(64):
        stat = _stat(pid)
        if stat is None or stat[1] <= 1:
            return False
        if stat[1] == me:
            return True
        pid = stat[1]
    return False


def listeners(port: int) -> set[int]:
    """Pids with a TCP socket listening on ``port`` (any address)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()  # sl local_address rem_address st ... inode
            if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    owners: set[int] = set()
    if not inodes:
        return owners
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") in inodes:
                    owners.add(int(name))
                    break
            except OSError:
                continue
    return owners


def _ours(proc: Proc, baseline: Baseline) -> bool:
    if proc.pid == os.getpid() or (proc.pid, proc.start) in baseline.procs:
        return False
    return _carries(proc.pid, baseline.token) or _descends_from_us(proc.pid)


def _still_there(proc: Proc) -> bool:
    stat = _stat(proc.pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[2] == proc.start


def _stop(proc: Proc) -> None:
    """Stop a leaked process this session started, by its pid; reap it if it is our child."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if not _still_there(proc):
            break
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while _still_there(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(proc.pid, os.WNOHANG)


def find_leaks(baseline: Baseline) -> tuple[list[Proc], list[str]]:
    """Processes this session started and left alive; notes about 5037 servers of others."""
    deadline = time.monotonic() + GRACE_S
    while True:
        leaked = [p for p in watched_processes() if _ours(p, baseline)]
        if not leaked or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    notes = []
    for pid in sorted(listeners(USER_ADB_PORT) - baseline.user_port_owners):
        if not any(p.pid == pid for p in leaked):
            notes.append(f"an adb server on port {USER_ADB_PORT} (pid {pid}) appeared during "
                         "the session but was not started by it; left alone")
    return leaked, notes


def pytest_configure(config: pytest.Config) -> None:
    token = f"{os.getpid()}-{secrets.token_hex(6)}"
    os.environ[TOKEN_VAR] = token
    config.stash[_BASELINE] = Baseline(
        token, {(p.pid, p.start) for p in watched_processes()}, listeners(USER_ADB_PORT))


@pytest.hookimpl(trylast=True)  # after the runner's own sessionfinish has torn fixtures down
def pytest_sessionfinish(session: pytest.Session) -> None:
    baseline = session.config.stash.get(_BASELINE, None)
    if baseline is None:
        return
    leaked, notes = find_leaks(baseline)
    messages = []
    user_port = listeners(USER_ADB_PORT)
    for proc in leaked:
        where = (f" - an adb server on {USER_ADB_PORT}, the user's port"
                 if proc.pid in user_port else "")
        messages.append(f"left alive by this test session: {proc.describe()}{where}")
    for proc in leaked:
        _stop(proc)
    factory = getattr(session.config, "_tmp_path_factory", None)
    groups, mounts = phone_leftovers(factory.getbasetemp()) if factory else ([], [])
    for mount in mounts:
        messages.append(f"left mounted by this test session: a virtual phone's /data at {mount}")
        image = mount.parent.parent / disk.IMAGE
        disk.release(disk.PhoneDisk(image, "", mount, disk.DEFAULT_READAHEAD_KB))
    for group in groups:
        messages.append(f"left by this test session: a virtual phone's cgroup {group}")
        cgroups.remove_dir(group)
    session.config.stash[_LEAKS] = messages
    session.config.stash[_NOTES] = notes
    if messages:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.stats.setdefault("leaked", []).extend(messages)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    messages = config.stash.get(_LEAKS, [])
    notes = config.stash.get(_NOTES, [])
    if messages:
        terminalreporter.write_sep("=", "leaked by the test session (run FAILED)",
                                   red=True, bold=True)
        for message in messages:
            terminalreporter.write_line(message, red=True)
        terminalreporter.write_line("(each was stopped by its pid, or removed, after being "
                                    "reported)")
    for note in notes:
        terminalreporter.write_line(f"note: {note}", yellow=True)
