"""Hosts in their own Linux network namespaces on this machine, for farm tests (needs root).

``lab_network(["h1", "h2"])`` makes one namespace for "ctl" (the scheduler and the driver) with a
Linux bridge at 10.231.0.1/24, and one namespace per host, each linked to the bridge by a veth
pair (10.231.0.11, .12, ... /24). Every interface is created directly inside our namespaces (the
host's end is ``eth0``, the bridge's end ``p11``, ``p12``, ...), so none ever appears in the
root namespace. Namespaces are named after this process (``hx<pid>n<k>-<host>``), so tests in
other processes never meet them.

Commands run on a host through ``ip netns exec NS unshare --uts sh -c 'hostname ...; exec ...'``:
every step execs, so the pid of the Popen is the pid of the program itself, and the host has a
hostname of its own. A virtual phone stays in the root namespace (on 127.0.0.1:PORT); a "cable"
(an in-process TCP relay) makes 127.0.0.1:PORT inside one host's namespace reach it, as a USB
cable plugs a phone into one machine. Each host can have a private adb server of its own.

At exit, also when the block raises: cables are unplugged, the processes we started are stopped
(SIGTERM, then SIGKILL), anything else still inside our namespaces is killed, and the namespaces
are deleted (their interfaces go with them). Processes are only ever signalled by pid, and only
when they are ours or live in one of our namespaces. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from harness.logcause import failed_at_start, log_size
from harness.testing.adbserver import AdbServer, adb_binary, free_port

T = TypeVar("T")

CTL = "ctl"
SUBNET = "10.231.0"
PREFIX_LEN = 24
FIRST_HOST_OCTET = 11
BRIDGE = "br0"
HOST_LINK = "eth0"
NETNS_DIR = Path("/var/run/netns")
CLONE_NEWNET = 0x40000000
IP_TIMEOUT_S = 30.0  # one `ip` command
STOP_GRACE_S = 5.0  # from SIGTERM until SIGKILL, for all of a network's processes together
GONE_WAIT_S = 10.0  # from SIGKILL until a process must be gone
EXEC_WAIT_S = 30.0  # from Popen until the program runs (ip, unshare and sh have exec'd)
WRAPPER_STEPS = (0, 4, 6)  # where `ip netns exec NS`, `unshare --uts` and `sh -c` start
HOSTNAME_WRAPPER = 'hostname "$0" || exit 125; exec "$@"'
_HOST_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
_networks = itertools.count()  # several networks in one process get different names


class NetError(RuntimeError):
    """The kit could not set up, use or take down a network."""


def _ip(*args: str) -> None:
    """Run one `ip` command; raise with what it said when it fails."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True,
                            timeout=IP_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise NetError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _enter_netns(path: Path) -> None:
    """Move the calling thread (only it) into the network namespace at ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc().setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), str(path))
    finally:
        os.close(fd)


def call_in_netns(path: Path, fn: Callable[[], T], timeout: float = 30) -> T:
    """Run ``fn()`` in a new thread that first enters the network namespace at ``path``, and
    return its result. Sockets it makes stay in that namespace after the thread ends. ``fn``
    must be bounded and must not start threads (they would inherit the namespace)."""
    results: list[T] = []
    errors: list[BaseException] = []

    def body() -> None:
        try:
            _enter_netns(path)
            results.append(fn())
        except BaseException as error:  # handed to the caller
            errors.append(error)

    thread = threading.Thread(target=body, name=f"netkit-{path.name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise NetError(f"a call inside {path.name} did not return within {timeout:.0f} s")
    if errors:
        raise errors[0]
    return results[0]


def _netns_id(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of a network namespace file, or None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _kill(pid: int, netns: tuple[int, int] | None = None) -> bool:
    """SIGKILL ``pid`` through a pidfd; with ``netns``, only if it still lives in that network
    namespace after the pidfd is held (so a reused pid is never hit). True if signalled."""
    if pid in (os.getpid(), os.getppid()):
        return False
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if netns is not None and _netns_id(f"/proc/{pid}/ns/net") != netns:
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _wait_all(processes: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
    """Reap the processes, waiting at most ``timeout`` for all of them together."""
    deadline = time.monotonic() + timeout
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))


def _wait_for_exec(process: subprocess.Popen[bytes], command: Sequence[str],
                   timeout: float = EXEC_WAIT_S) -> None:
    """Wait until ``process`` (started as ``command``, the wrapped argv) is past its wrappers:
    its command line is none of the steps ``ip netns exec``, ``unshare`` and ``sh -c`` go
    through (the program may change it itself: a script's interpreter, a program that execs
    another), or it has ended; kill it and raise after ``timeout``."""
    steps = {b"".join(os.fsencode(arg) + b"\0" for arg in command[start:])
             for start in WRAPPER_STEPS}
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        with contextlib.suppress(OSError):
            line = Path(f"/proc/{process.pid}/cmdline").read_bytes()
            if line and line not in steps:
                return
        if time.monotonic() > deadline:
            process.kill()
            process.wait(timeout=GONE_WAIT_S)
            raise NetError(f"{list(command)} did not start within {timeout:.0f} s")
        time.sleep(0.005)


@functools.cache
def netns_unavailable() -> str | None:
    """Why this machine cannot run the kit (None when it can), found once with a real attempt:
    a namespace with a bridge and a veth pair, a command with its own hostname, and setns."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "hostname", "sh"):
        if shutil.which(tool) is None:
            return f"no '{tool}' on PATH"
    name = f"hx{os.getpid()}probe"
    try:
        _ip("netns", "add", name)
    except (NetError, OSError, subprocess.TimeoutExpired) as error:
        return f"cannot make a network namespace: {error}"
    try:
        _ip("-n", name, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
        result = subprocess.run(["ip", "netns", "exec", name, "unshare", "--uts", "sh", "-c",
                                 HOSTNAME_WRAPPER, "probe", "hostname"], capture_output=True,
                                text=True, timeout=IP_TIMEOUT_S)
        if result.stdout.strip() != "probe":
            return f"cannot give a namespace its own hostname: {result.stderr.strip()}"
        call_in_netns(NETNS_DIR / name, lambda: None)
    except (NetError, OSError, subprocess.TimeoutExpired) as error:
        return f"cannot set up a network namespace: {error}"
    finally:
        with contextlib.suppress(NetError, OSError, subprocess.TimeoutExpired):
            _ip("netns", "del", name)
    return None


def _serial_port(serial: str) -> int:
    address, _, port = serial.rpartition(":")
    if address != "127.0.0.1" or not port.isdigit():
        raise NetError(f"not a virtual phone's serial (127.0.0.1:PORT): {serial!r}")
    return int(port)


@dataclass
class HostAdbServer(AdbServer):
    """A private adb server running inside a host's namespace; ``adb()`` runs the client there
    too (a client in the root namespace would not reach it)."""

    net: Network | None = field(default=None, repr=False)
    host: str = ""

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, "ADB_MDNS_AUTO_CONNECT": "0"}

    def adb(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        assert self.net is not None
        env = {**os.environ, **self.env}
        env.pop("ANDROID_ADB_SERVER_ADDRESS", None)
        return self.net.run(self.host, [self.binary, "-H", "127.0.0.1", "-P", str(self.port),
                                        *args], env=env, timeout=timeout)

    def devices(self) -> dict[str, str]:
        """serial -> state (device, offline, ...) as this server lists them."""
        result = self.adb("devices")
        if result.returncode != 0:
            raise NetError(f"adb devices on {self.host}: {self.said(result)}")
        found = {}
        for line in result.stdout.splitlines()[1:]:
            serial, _, state = line.partition("\t")
            if state:
                found[serial] = state.strip()
        return found


class _Cable:
    """A TCP relay: connections accepted by ``listener`` (a socket inside a host's namespace)
    are relayed to 127.0.0.1:``port`` in the root namespace. All of its threads run in the root
    namespace; a connection to the phone is made from one of them."""

    def __init__(self, serial: str, host: str, port: int, listener: socket.socket) -> None:
        self.serial, self.host, self.port, self.listener = serial, host, port, listener
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        listener.settimeout(0.2)  # the accept loop looks at _stopped this often
        self._acceptor = threading.Thread(target=self._accept, daemon=True,
                                          name=f"cable-{serial}-{host}")
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            thread = threading.Thread(target=self._relay, args=(client,), daemon=True,
                                      name=f"cable-{self.serial}-conn")
            with self._lock:
                if self._stopped.is_set():
                    client.close()
                    return
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
                self._sockets.append(client)
            thread.start()

    def _relay(self, client: socket.socket) -> None:
        try:
            phone = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        except OSError:  # no phone there (any more): the host sees the connection end
            self._forget(client)
            return
        phone.settimeout(None)
        with self._lock:
            self._sockets.append(phone)
            stopped = self._stopped.is_set()
        if not stopped:
            back = threading.Thread(target=_pump, args=(phone, client), daemon=True,
                                    name=f"cable-{self.serial}-back")
            back.start()
            _pump(client, phone)
            back.join()  # ends when the phone closes, or when the cable is unplugged
        self._forget(client, phone)

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                with contextlib.suppress(ValueError):
                    self._sockets.remove(sock)
                sock.close()

    def close(self, timeout: float = 10) -> None:
        """Stop accepting, cut every relayed connection (both ways) and wait for the threads."""
        self._stopped.set()
        self._acceptor.join(timeout)
        self.listener.close()
        with self._lock:
            threads = list(self._threads)
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked on it
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes until ``source`` ends or fails, then pass the end on to ``sink``."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@dataclass
class Host:
    name: str
    netns: str  # the namespace's name (ip netns)
    address: str
    port: str = ""  # the bridge's end of its veth pair, inside ctl ("" for ctl itself)


@dataclass
class Network:
    """The namespaces of one lab; use through ``lab_network``."""

    root: Path  # logs and the adb servers' homes
    hosts: dict[str, Host]  # ctl first
    prefix: str  # every namespace name of ours starts with it
    processes: dict[str, list[subprocess.Popen[bytes]]] = field(default_factory=dict)
    cables: dict[str, _Cable] = field(default_factory=dict)  # serial -> its cable
    adb: dict[str, HostAdbServer] = field(default_factory=dict)
    made: list[str] = field(default_factory=list)  # namespaces created, to delete

    @classmethod
    def plan(cls, names: Sequence[str], root: Path) -> Network:
        """The lab's hosts and addresses, nothing created yet."""
        if len(set(names)) != len(names) or CTL in names:
            raise NetError(f"host names must be unique and not {CTL!r}: {list(names)}")
        bad = [n for n in names if not _HOST_NAME.fullmatch(n)]
        if bad or len(names) > 200:
            raise NetError(f"host names must look like h1 or alpha (at most 200): {bad}")
        prefix = f"hx{os.getpid()}n{next(_networks)}-"
        hosts = {CTL: Host(CTL, prefix + CTL, f"{SUBNET}.1")}
        for octet, name in enumerate(names, FIRST_HOST_OCTET):
            hosts[name] = Host(name, prefix + name, f"{SUBNET}.{octet}", f"p{octet}")
        return cls(root, hosts, prefix, {name: [] for name in hosts})

    # -- set-up and take-down ------------------------------------------------------------

    def _add_netns(self, name: str) -> None:
        if (NETNS_DIR / name).exists():  # left by a dead process that had our pid
            _ip("netns", "del", name)
        _ip("netns", "add", name)
        self.made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def start(self) -> None:
        """Create the namespaces, the bridge and one veth pair per host."""
        ctl = self.hosts[CTL].netns
        self._add_netns(ctl)
        _ip("-n", ctl, "link", "add", BRIDGE, "type", "bridge", "stp_state", "0",
            "forward_delay", "0")
        _ip("-n", ctl, "addr", "add", f"{self.hosts[CTL].address}/{PREFIX_LEN}", "dev", BRIDGE)
        _ip("-n", ctl, "link", "set", BRIDGE, "up")
        for host in self.hosts.values():
            if host.name == CTL:
                continue
            self._add_netns(host.netns)
            _ip("link", "add", HOST_LINK, "netns", host.netns, "type", "veth",
                "peer", "name", host.port, "netns", ctl)
            _ip("-n", ctl, "link", "set", host.port, "master", BRIDGE, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/{PREFIX_LEN}",
                "dev", HOST_LINK)
            _ip("-n", host.netns, "link", "set", HOST_LINK, "up")

    def close(self) -> None:
        """Unplug every cable, stop every process, delete the namespaces. Goes through all of
        it even when a step fails, then raises the first failure."""
        failures: list[BaseException] = []
        for serial in list(self.cables):
            try:
                self.unplug(serial)
            except Exception as error:
                failures.append(error)
        ours = [p for procs in self.processes.values() for p in procs if p.poll() is None]
        for process in ours:
            with contextlib.suppress(OSError):
                process.terminate()
        _wait_all(ours, STOP_GRACE_S)
        for name in self.hosts:
            try:
                self.kill_host(name)
            except Exception as error:
                failures.append(error)
        for netns in reversed(self.made):
            try:
                _ip("netns", "del", netns)
            except Exception as error:
                failures.append(error)
        self.made.clear()
        if failures:
            raise NetError(f"taking down the lab network: {failures}") from failures[0]

    # -- addresses and links ---------------------------------------------------------------

    def _host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise NetError(f"no host {name!r} (known: {', '.join(self.hosts)})") from None

    def address(self, host: str) -> str:
        """The host's IP address on the lab network (ctl: the bridge's)."""
        return self._host(host).address

    def netns(self, host: str) -> str:
        """The name of the host's network namespace (for `ip netns exec`)."""
        return self._host(host).netns

    def _set_link(self, host: str, state: str) -> None:
        port = self._host(host).port
        if not port:
            raise NetError(f"{host} has no link of its own (it holds the bridge)")
        _ip("-n", self.hosts[CTL].netns, "link", "set", port, state)

    def link_down(self, host: str) -> None:
        """Pull the host's network cable at the bridge: it keeps running, unreachable."""
        self._set_link(host, "down")

    def link_up(self, host: str) -> None:
        """Put the host's network cable back."""
        self._set_link(host, "up")

    # -- processes -----------------------------------------------------------------------

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as run on the host: in its namespace, with its own hostname (every step
        execs, so the process that runs is ``argv[0]`` itself, under the same pid)."""
        return ["ip", "netns", "exec", self._host(host).netns, "unshare", "--uts",
                "sh", "-c", HOSTNAME_WRAPPER, host, *argv]

    def popen(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              log: Path | None = None, errlog: Path | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` on the host (``env`` as for subprocess: None keeps ours). Its output
        goes to ``log`` (appended), else nowhere; its stderr with it, or to ``errlog``.
        Returns once the pid runs ``argv`` itself (``ip``, ``unshare`` and ``sh`` have exec'd
        it) or has ended. The kit stops it at exit."""
        with contextlib.ExitStack() as files:
            sink = files.enter_context(open(log, "ab")) if log is not None else None
            errors = files.enter_context(open(errlog, "ab")) if errlog is not None else None
            process = subprocess.Popen(
                self.command(host, argv), env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL, stdout=sink or subprocess.DEVNULL,
                stderr=errors or subprocess.STDOUT)
        self.processes[host].append(process)
        _wait_for_exec(process, self.command(host, argv))
        return process

    def run(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a short command on the host and capture its output (text); TimeoutExpired
        after ``timeout`` seconds (the command is killed)."""
        return subprocess.run(self.command(host, argv), env=None if env is None else dict(env),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)

    def call(self, host: str, fn: Callable[[], T], timeout: float = 30) -> T:
        """Run ``fn()`` in a thread inside the host's namespace (``call_in_netns``)."""
        return call_in_netns(NETNS_DIR / self._host(host).netns, fn, timeout)

    def pids_in(self, host: str) -> list[int]:
        """Live processes whose network namespace is the host's (never this process)."""
        wanted = _netns_id(NETNS_DIR / self._host(host).netns)
        if wanted is None:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid() and \
                    _netns_id(f"/proc/{entry}/ns/net") == wanted:
                found.append(int(entry))
        return sorted(found)

    def kill_host(self, host: str) -> list[int]:
        """SIGKILL every process the kit started on the host and any other process inside its
        namespace, then wait (bounded) until they are gone; returns the pids signalled. The
        host stays (a crashed machine rebooted): its namespace, links and cables are kept, and
        ``adb_server`` starts its adb server again, on the same port."""
        netns = _netns_id(NETNS_DIR / self._host(host).netns)
        killed = []
        ours = [p for p in self.processes[host] if p.poll() is None]
        for process in ours:
            with contextlib.suppress(OSError):
                process.kill()
                killed.append(process.pid)
        for pid in self.pids_in(host) if netns else []:
            if pid not in killed and _kill(pid, netns):
                killed.append(pid)
        _wait_all(self.processes[host], GONE_WAIT_S)
        deadline = time.monotonic() + GONE_WAIT_S
        while (left := self.pids_in(host)) and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = [p.pid for p in self.processes[host] if p.poll() is None]
        if left or alive:
            raise NetError(f"processes on {host} outlived SIGKILL: {sorted({*left, *alive})}")
        self.processes[host] = []
        return killed

    # -- phones ------------------------------------------------------------------------

    def plug(self, serial: str, host: str) -> None:
        """Plug the virtual phone ``serial`` (127.0.0.1:PORT in the root namespace) into the
        host: 127.0.0.1:PORT inside the host's namespace now reaches it."""
        port = _serial_port(serial)
        netns = self._host(host).netns
        if serial in self.cables:
            raise NetError(f"{serial} is plugged into {self.cables[serial].host}; unplug it "
                           "first")

        def listen() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(16)
            except BaseException:
                sock.close()
                raise
            return sock

        listener = call_in_netns(NETNS_DIR / netns, listen)
        self.cables[serial] = _Cable(serial, host, port, listener)

    def unplug(self, serial: str) -> None:
        """Pull the phone's cable: its listener and every relayed connection are closed."""
        cable = self.cables.pop(serial, None)
        if cable is None:
            raise NetError(f"{serial} is not plugged in")
        cable.close()

    def plugged(self, serial: str) -> str | None:
        """The host the phone is plugged into, if any."""
        cable = self.cables.get(serial)
        return cable.host if cable else None

    def _unused_port(self) -> int:
        """A free port no other host's adb server has: each host's port is its own (the kernel
        hands the port a probe just released out again, so two hosts drew the same one)."""
        taken = {server.port for server in self.adb.values()}
        for _ in range(100):
            port = free_port()
            if port not in taken:
                return port
        raise NetError(f"no free port outside {sorted(taken)} in 100 draws")

    def adb_server(self, host: str, binary: str | None = None) -> HostAdbServer:
        """The host's private adb server (``adb -P PORT nodaemon server`` in its namespace,
        HOME of its own, no mDNS or emulator scan), started on first use or after it died."""
        server = self.adb.get(host)
        if server is not None and server.process.poll() is None:
            return server
        binary = binary or adb_binary()
        home = self.root / f"adb-{host}"
        home.mkdir(parents=True, exist_ok=True)
        port = server.port if server else self._unused_port()
        env = {**os.environ, "HOME": str(home), "ADB_MDNS": "0", "ADB_EMU": "0",
               "ADB_MDNS_AUTO_CONNECT": "0"}
        env.pop("ANDROID_ADB_SERVER_ADDRESS", None)  # a server given a host name aborts
        offset = log_size(home / "adb-server.log")
        process = self.popen(host, [binary, "-P", str(port), "nodaemon", "server"], env=env,
                             log=home / "adb-server.log")
        server = HostAdbServer(port=port, home=home, process=process, binary=binary, net=self,
                               host=host)

        def listening() -> bool:
            with contextlib.suppress(OSError), \
                    socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
            return False

        deadline = time.monotonic() + 30
        while not self.call(host, listening):
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise NetError(failed_at_start(f"adb server on {host} did not listen on {port}",
                                               home / "adb-server.log", offset))
            time.sleep(0.1)
        self.adb[host] = server
        return server

    def connect_phone(self, serial: str, host: str, timeout: float = 60) -> HostAdbServer:
        """Plug the phone into the host (unless it is), ``adb connect`` it on the host's adb
        server and wait until that server lists it as ``device``."""
        if self.plugged(serial) != host:
            self.plug(serial, host)
        server = self.adb_server(host)
        deadline = time.monotonic() + timeout
        said, asked = "", 0.0
        while time.monotonic() < deadline:
            state = server.devices().get(serial)
            if state == "device":
                return server
            if state is None or time.monotonic() - asked > 10:  # not there, or stuck offline
                if state is not None:
                    server.adb("disconnect", serial, timeout=30)
                said = server.said(server.adb("connect", serial, timeout=30)).strip()
                asked = time.monotonic()
            time.sleep(0.2)
        raise NetError(f"{host}'s adb server did not list {serial} as a device within "
                       f"{timeout:.0f} s (adb connect said: {said!r}; devices: "
                       f"{server.devices()})")


@contextlib.contextmanager
def lab_network(hosts: Sequence[str], root: Path | None = None) -> Iterator[Network]:
    """A lab network with ctl and ``hosts``; everything is taken down when the block ends.
    ``root`` (made if missing) keeps the adb servers' homes and logs; when None, a temporary
    folder does, removed at the end."""
    folder = root or Path(tempfile.mkdtemp(prefix="netkit-"))
    folder.mkdir(parents=True, exist_ok=True)
    net = Network.plan(list(hosts), folder)
    try:
        net.start()
        yield net
    finally:
        try:
            net.close()
        finally:
            if root is None:
                shutil.rmtree(folder, ignore_errors=True)
