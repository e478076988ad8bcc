"""Start, stop, list, wipe and inject faults into virtual phones (the library behind `harness sim`).

Each phone is one background daemon process; its slot directory (``<home>/phones/<name>``) holds
the sandbox, which persists across stop and start until wiped, and ``running.json`` while it runs.
Phones are stopped by the pid recorded there, after checking that the pid is still our daemon.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.errors import ConfigError, DeviceError
from harness.logcause import failed_at_start, log_size
from harness.profiles import DeviceProfile, find_profile
from harness.testing.adbserver import free_port
from harness.virtual import cpu
from harness.virtual.config import PhoneConfig
from harness.virtual.gpu import provision_gpu
from harness.virtual.phone import FAULT_KINDS, FAULT_VALUES
from harness.virtual.provision import config_from_profile, provision, release
from harness.virtual.sandbox import STOPPED_WHY, Sandbox

DEFAULT_PROFILE = "midrange-8gb"
DAEMON_MODULE = "harness.virtual.daemon"


@dataclass(frozen=True)
class PhoneInfo:
    name: str
    serial: str
    port: int
    pid: int
    profile: str
    model: str
    path: str  # the phone directory (sandbox) on the host
    adb_port: int
    running: bool = True
    abi: str = ""
    memory_model: str = ""  # cgroup or simulated (harness.virtual.provision)
    memory_note: str = ""
    storage_read_mb_s: float | None = None  # None: not throttled (the host's disk speed)
    storage_note: str = ""
    storage_read_iops: int | None = None  # None: reads a second not limited
    readahead_kb: int | None = None  # /data on the phone's own disk: its read_ahead_kb
    disk_note: str = ""  # why /data is on the host's disk instead
    stopped_why: str = ""  # a stopped phone that stopped itself: why (execshim.c)
    cpu_note: str = ""  # its CPUs its own or shared with the host (harness.virtual.cpu)

    @property
    def sandbox(self) -> Sandbox:
        return Sandbox(Path(self.path))


def _config(phone_dir: Path) -> PhoneConfig | None:
    try:
        return PhoneConfig.load(Sandbox(phone_dir).state / "config.json")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def sim_home(home: Path | None = None) -> Path:
    """Where phones keep their state; absolute, since each phone's daemon has its own cwd."""
    if home is not None:
        return home.absolute()
    if os.environ.get("HARNESS_HOME"):
        return (Path(os.environ["HARNESS_HOME"]) / "sim").absolute()
    return Path.home() / ".local" / "state" / "harness" / "sim"


def adb_server_port() -> int:
    """The adb server to talk to, named as adb itself names it."""
    raw = os.environ.get("ANDROID_ADB_SERVER_PORT", "5037")
    if not raw.isdigit():
        raise ConfigError(f"ANDROID_ADB_SERVER_PORT={raw!r} is not a port number")
    return int(raw)


def _is_daemon(pid: int) -> bool:
    """``pid`` is a live virtual-phone daemon (by its command line; no side effects)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return DAEMON_MODULE.encode() in cmdline and state != "Z"


def _alive_daemon(pid: int) -> bool:
    """True if ``pid`` is a live (not zombie) virtual-phone daemon; reaps it if it is our child."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return _is_daemon(pid)


def _record(phone_dir: Path) -> PhoneInfo | None:
    try:
        data = json.loads((phone_dir / "running.json").read_text())
        info = PhoneInfo(**data)
    except (OSError, ValueError, TypeError):
        return None
    return info if _alive_daemon(info.pid) else None


def list_phones(home: Path | None = None) -> list[PhoneInfo]:
    """Every phone slot, running or not (stopped ones carry running=False and pid 0)."""
    phones = []
    root = sim_home(home) / "phones"
    for phone_dir in sorted(root.glob("*")) if root.is_dir() else []:
        record = _record(phone_dir)
        if record is not None:
            phones.append(record)
            continue
        last = _last(phone_dir)
        phones.append(PhoneInfo(phone_dir.name, last.get("serial", ""), int(last.get("port", 0)),
                                0, last.get("profile", ""), last.get("model", ""), str(phone_dir),
                                int(last.get("adb_port", 0)), running=False,
                                stopped_why=_stopped_why(phone_dir)))
    return phones


def _stopped_why(phone_dir: Path) -> str:
    try:
        return (Sandbox(phone_dir).state / STOPPED_WHY).read_text().strip()
    except OSError:
        return ""


def _last(phone_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((phone_dir / "last.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return not 5554 <= port <= 5585


def _launch(phone_dir: Path, port: int) -> int:
    sandbox = Sandbox(phone_dir)
    (sandbox.state / "ready").unlink(missing_ok=True)
    log_path = phone_dir / "daemon.log"
    offset = log_size(log_path)
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    process = subprocess.Popen(
        [sys.executable, "-m", DAEMON_MODULE, str(phone_dir), str(port)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=phone_dir,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise DeviceError(failed_at_start("virtual phone daemon exited at start",
                                                  log_path, offset))
            if (sandbox.state / "ready").exists():
                return process.pid
            time.sleep(0.05)
    except BaseException:  # stopped while it boots (Ctrl-C, SIGTERM): it stops what it began
        process.terminate()
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise
    process.kill()
    process.wait()
    raise DeviceError(failed_at_start(f"virtual phone on port {port} did not start within 20 s",
                                      log_path, offset))


def _server_listening(adb_port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", adb_port), timeout=2):
            return True
    except OSError:
        return False


def _adb_client(adb_port: int):  # type: ignore[no-untyped-def]
    """A client that never starts a server itself (adbutils' own would, on a refused connection)."""
    from harness.device.adb import adb_client

    if not _server_listening(adb_port):
        raise DeviceError(f"no adb server listens on 127.0.0.1:{adb_port} "
                          "(ANDROID_ADB_SERVER_PORT); start one with: adb start-server")

    return adb_client(adb_port)


def connect(serial: str, adb_port: int, timeout: float = 20) -> None:
    """``adb connect`` and wait until the server lists the phone as ``device``."""
    client = _adb_client(adb_port)
    deadline = time.monotonic() + timeout
    try:
        answer = client.connect(serial, timeout=timeout)
        if "connected" not in answer or "fail" in answer or "unable" in answer:
            raise DeviceError(f"adb server on port {adb_port} answered: {answer}", serial)
        while time.monotonic() < deadline:
            states = {d.serial: d.state for d in client.list()}
            if states.get(serial) == "device":
                return
            time.sleep(0.1)
    except DeviceError:
        raise
    except Exception as error:
        raise DeviceError(f"cannot connect through the adb server on port {adb_port}: {error}. "
                          "Is it running (adb start-server)?", serial) from error
    raise DeviceError(f"adb server on port {adb_port} did not bring it online", serial)


def disconnect(serial: str, adb_port: int) -> None:
    with contextlib.suppress(Exception):
        _adb_client(adb_port).disconnect(serial)


def start_phones(profile: str | DeviceProfile = DEFAULT_PROFILE, count: int = 1,
                 ram_mb: int | None = None, storage_mb: int | None = None,
                 home: Path | None = None, connect_adb: bool = True, abi: str | None = None,
                 shell: str = "mksh", memory_model: str = "auto",
                 storage_mb_s: float | None = None) -> list[PhoneInfo]:
    """Start ``count`` phones of a profile in their slots (reusing stopped slots' storage).

    ``abi`` overrides the profile's (``x86_64`` runs host builds natively); ``shell`` is the
    phone's /system/bin/sh, mksh as on Android unless a test compares with dash.
    ``memory_model`` is ``auto`` (the host kernel's cgroups where allowed), ``cgroup`` or
    ``simulated`` (``harness.virtual.provision``); ``storage_mb_s`` overrides the profile's
    storage read speed.
    """
    if count < 1:
        raise ConfigError(f"--count must be at least 1, got {count}")
    prof = find_profile(profile) if isinstance(profile, str) else profile
    adb_port = adb_server_port()
    if connect_adb:
        _adb_client(adb_port)  # fail before starting anything when no server listens
    root = sim_home(home) / "phones"
    root.mkdir(parents=True, exist_ok=True)
    started: list[PhoneInfo] = []
    slot = 0
    try:
        while len(started) < count:
            slot += 1
            name = f"{prof.name}-{slot}"
            phone_dir = root / name
            if _record(phone_dir) is not None:
                continue
            config = config_from_profile(prof, name, ram_mb, storage_mb, abi, shell,
                                         storage_mb_s)
            config = provision_gpu(config)  # lavapipe and the layer, or refused: one line
            sandbox = Sandbox(phone_dir)
            sandbox.create()
            config = provision(config, phone_dir, memory_model, storage_mb_s is not None)
            config = _with_cpu(config)
            (sandbox.state / "config.json").write_text(config.to_json())
            last_port = int(_last(phone_dir).get("port", 0))
            port = last_port if last_port and _port_free(last_port) else free_port()
            try:
                pid = _launch(phone_dir, port)
            except BaseException:
                release(config)
                raise
            info = _info(config, name, port, pid, prof, phone_dir, adb_port)
            (phone_dir / "running.json").write_text(json.dumps(asdict(info)))
            (phone_dir / "last.json").write_text(json.dumps(
                {"serial": info.serial, "port": port, "profile": prof.name, "model": prof.model,
                 "adb_port": adb_port}))
            started.append(info)
            if connect_adb:
                connect(info.serial, adb_port)
    except BaseException:
        _stop(started)
        raise
    return started


def _with_cpu(config: PhoneConfig) -> PhoneConfig:
    """The phone's CPUs: its own (its daemon runs ahead of the host's work) where allowed."""
    reason = cpu.blocked()
    nice = cpu.PHONE_NICE if reason is None else None
    return dataclasses.replace(config, cpu_nice=nice, cpu_note=cpu.note(nice, reason or ""))


def _info(config: PhoneConfig, name: str, port: int, pid: int, prof: DeviceProfile,
          phone_dir: Path, adb_port: int) -> PhoneInfo:
    throttled = config.storage_read_mb_s if not config.storage_note else None
    iops = config.storage_read_iops if not config.storage_note else None
    return PhoneInfo(name, f"127.0.0.1:{port}", port, pid, prof.name, prof.model,
                     str(phone_dir), adb_port, abi=config.abi, memory_model=config.memory_model,
                     memory_note=config.memory_note, storage_read_mb_s=throttled,
                     storage_note=config.storage_note, storage_read_iops=iops,
                     readahead_kb=config.storage_readahead_kb if config.disk else None,
                     disk_note=config.disk_note, cpu_note=config.cpu_note)


STOP_GRACE_S = 15.0  # from SIGTERM until SIGKILL
KILL_WAIT_S = 15.0  # from SIGKILL until giving up on an unkillable process


class _Daemon:
    """A phone daemon being stopped, held by a pidfd: no signal or wait can hit a reused pid.

    Whether it is our daemon is decided once, before signalling: a process that is exiting has
    already dropped its memory and so reads an empty /proc/PID/cmdline while it is still running
    (closing its sockets, freeing pages), so the command line cannot tell whether it has exited.
    Exited means a zombie or gone (a pidfd turns readable); our own child is then reaped.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd: int | None = None
        try:
            self._fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.ours = False
            return
        except (OSError, AttributeError):  # no pidfds (before Linux 5.3): poll /proc instead
            pass
        self.ours = _is_daemon(pid)

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if self._fd is not None:
                signal.pidfd_send_signal(self._fd, sig)
            else:
                os.kill(self.pid, sig)

    def exited(self) -> bool:
        if self._fd is not None:
            return _readable(self._fd, 0)
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state in ("Z", "X")

    def wait(self, timeout: float) -> bool:
        """True once the process has exited (within ``timeout`` seconds); reaps our child."""
        deadline = time.monotonic() + timeout
        while True:
            if self._fd is not None:
                done = _readable(self._fd, max(0.0, min(0.5, deadline - time.monotonic())))
            else:
                done = self.exited()
            if done:
                self._reap()
                return True
            if time.monotonic() >= deadline:
                return False
            if self._fd is None:
                time.sleep(0.05)

    def _reap(self) -> None:
        with contextlib.suppress(ChildProcessError, OSError):  # not our child: its parent reaps
            if self._fd is not None:
                os.waitid(os.P_PIDFD, self._fd, os.WEXITED)
            else:
                os.waitpid(self.pid, 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _readable(fd: int, timeout: float) -> bool:
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(timeout * 1000)))


def _stop(phones: list[PhoneInfo]) -> None:
    """Stop the daemons and return once each has exited and (if our child) been reaped.

    SIGTERM lets a daemon kill its phone's processes; one that has not exited within
    ``STOP_GRACE_S`` gets SIGKILL. An unkillable one is an error naming its pid.
    """
    for info in phones:
        disconnect(info.serial, info.adb_port)
    daemons = [(info, _Daemon(info.pid)) for info in phones]
    stuck: list[str] = []
    try:
        for _, daemon in daemons:
            if daemon.ours:  # anything else (exited, or the pid reused) is left alone
                daemon.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for info, daemon in daemons:
            if not daemon.ours or daemon.wait(deadline - time.monotonic()):
                _stopped(info)
                continue
            daemon.signal(signal.SIGKILL)
            if daemon.wait(KILL_WAIT_S):
                _stopped(info)
            else:
                stuck.append(f"{info.serial} (pid {info.pid})")
    finally:
        for _, daemon in daemons:
            daemon.close()
    if stuck:
        raise DeviceError(f"virtual phone daemon did not exit {KILL_WAIT_S:.0f} s after SIGKILL: "
                          + ", ".join(stuck))


def _stopped(info: PhoneInfo) -> None:
    """The daemon is gone: its cgroups go too (it removes them itself unless it was killed)."""
    config = _config(Path(info.path))
    if config is not None:
        release(config)
    (Path(info.path) / "running.json").unlink(missing_ok=True)


def _match(phones: list[PhoneInfo], targets: list[str] | None, what: str) -> list[PhoneInfo]:
    if targets is None:
        return phones
    chosen = []
    for target in targets:
        found = [p for p in phones if target in (p.serial, p.name)]
        if not found:
            known = ", ".join(f"{p.serial or '-'} ({p.name})" for p in phones) or "none"
            raise ConfigError(f"no {what} virtual phone '{target}' (known: {known})")
        chosen.extend(found)
    return chosen


def stop_phones(targets: list[str] | None = None, home: Path | None = None) -> list[PhoneInfo]:
    """Stop the named phones (serial or slot name), or all running ones when ``targets`` is None."""
    running = [p for p in list_phones(home) if p.running]
    chosen = _match(running, targets, "running")
    _stop(chosen)
    return chosen


def wipe_phones(targets: list[str] | None = None, home: Path | None = None) -> list[PhoneInfo]:
    """Delete the storage of stopped phones; a running phone must be stopped first."""
    chosen = _match(list_phones(home), targets, "known")
    busy = [p for p in chosen if p.running]
    if busy:
        raise ConfigError(f"virtual phone {busy[0].serial} is running; stop it first "
                          f"(harness sim stop {busy[0].serial})")
    for info in chosen:
        shutil.rmtree(info.path)
    return chosen


def set_fault(serial: str, kind: str, value: str | int | float | None = None,
              home: Path | None = None, timeout: float = 10) -> None:
    """Arm a fault on a running phone; returns once the phone has taken it."""
    if kind not in FAULT_KINDS:
        raise ConfigError(f"unknown fault '{kind}' (known: {', '.join(FAULT_KINDS)})")
    if kind == "thermal" and (value is None or not str(value).isdigit() or int(value) > 6):
        raise ConfigError("fault 'thermal' needs a status 0..6, "
                          "e.g. harness sim fault SERIAL thermal 3")
    words = FAULT_VALUES.get(kind)
    if words is not None and str(value).upper() not in {w.upper() for w in words if value}:
        raise ConfigError(f"fault '{kind}' takes one of {', '.join(words)}, got {value!r}, "
                          f"e.g. harness sim fault SERIAL {kind} {words[0]}")
    if kind == "drop" and value is not None:
        try:
            float(value)
        except ValueError as error:
            raise ConfigError(f"fault 'drop' takes seconds to refuse reconnection, got {value!r}") \
                from error
    info = _match([p for p in list_phones(home) if p.running], [serial], "running")[0]
    control = info.sandbox.control
    request = control / f"{time.time_ns()}.json"
    tmp = control / f".{request.name}.tmp"
    tmp.write_text(json.dumps({"kind": kind, "value": value}))
    os.replace(tmp, request)
    deadline = time.monotonic() + timeout
    while request.exists():
        if time.monotonic() > deadline:
            request.unlink(missing_ok=True)
            raise DeviceError(f"the phone did not take fault '{kind}' within {timeout:.0f} s",
                              serial)
        time.sleep(0.05)


def fault_state(info: PhoneInfo) -> dict[str, object]:
    try:
        data = json.loads((info.sandbox.state / "faults.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
