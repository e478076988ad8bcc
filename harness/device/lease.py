"""Device leases: two harness processes never drive the same phone at once.

A lease is a small JSON file on the device itself (``/data/local/tmp/harness/lease.json``), so two
hosts that share a phone (a USB hub moved, a phone reached over Wi-Fi) see the same lease. It
names its holder (owner, host, pid, run) and expires at a time on the *device's* clock, so hosts
whose clocks disagree still agree on expiry. A background thread renews it while held.

Atomicity comes from the device's shell: a lease is created with ``set -C`` (O_EXCL, only one
creator wins); an expired lease (or one whose holder pid is dead on this same host) is taken over
by renaming it aside, checking that what was moved is the stale lease that was judged, and creating
a new one the same exclusive way; renewals replace the file with ``mv`` only while it still holds
our token. docs/reliability.md has the reasoning.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import re
import shlex
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from harness.device.base import Device
from harness.errors import DeviceError, HarnessError

LEASE_PATH = "/data/local/tmp/harness/lease.json"
DEFAULT_TTL_S = 60.0
log = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9._@:+-]")
_HELD: set[str] = set()  # tokens of the leases this process holds now


class DeviceBusyError(DeviceError):
    """Another harness process holds this device's lease."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, as read from the device."""

    owner: str
    host: str
    pid: int
    run: str
    token: str
    expires: int  # seconds since the epoch, device clock

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        try:
            data = json.loads(text)
            return cls(str(data["owner"]), str(data["host"]), int(data["pid"]),
                       str(data.get("run", "")), str(data["token"]), int(data["expires"]))
        except (ValueError, KeyError, TypeError):
            return None  # a corrupt lease names no one: it is as good as expired

    def describe(self) -> str:
        until = datetime.fromtimestamp(self.expires, UTC).strftime("%H:%M:%S UTC")
        run = f", run {self.run}" if self.run else ""
        return f"{self.owner}@{self.host} (pid {self.pid}{run}) until {until}"


def _safe(text: str) -> str:
    """Names go into a printf format on the device: keep them to harmless characters."""
    return _UNSAFE.sub("_", text)[:64] or "unknown"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DeviceLease:
    """Hold a device's lease for the length of a ``with`` block (renewed in the background)."""

    def __init__(self, device: Device, run: str = "", ttl_s: float = DEFAULT_TTL_S,
                 path: str = LEASE_PATH) -> None:
        self.device = device
        self.ttl_s = ttl_s
        self.path = path
        self.token = uuid.uuid4().hex
        self.owner = _safe(getpass.getuser())
        self.host = _safe(socket.gethostname())
        self.pid = os.getpid()
        self.run = _safe(run) if run else ""
        self.lost = threading.Event()  # set when someone else took the lease over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- shell pieces -------------------------------------------------------------------------

    def _write(self, target: str) -> str:
        """Shell that writes our lease (expiry from the device clock) to ``target``."""
        body = (f'{{"owner":"{self.owner}","host":"{self.host}","pid":{self.pid},'
                f'"run":"{self.run}","token":"{self.token}","expires":%d}}')
        return (f"printf {shlex.quote(body)} $(( $(date +%s) + {int(self.ttl_s)} ))"
                f" > {shlex.quote(target)}")

    def _sh(self, script: str) -> str:
        result = self.device.shell(script, timeout=30)
        return result.stdout

    # --- acquire / renew / release ------------------------------------------------------------

    def acquire(self) -> None:
        """Take the lease or raise ``DeviceBusyError`` naming the holder."""
        path = shlex.quote(self.path)
        folder = shlex.quote(self.path.rsplit("/", 1)[0])
        for _ in range(3):
            out = self._sh(
                f"mkdir -p {folder}; if (set -C; {self._write(self.path)}) 2>/dev/null; "
                f"then echo @@acquired; else echo @@held $(date +%s); cat {path}; fi")
            first, _, rest = out.partition("\n")
            if first.strip() == "@@acquired":
                return
            if not first.startswith("@@held"):
                raise DeviceError(f"cannot read the lease {self.path}: {out.strip()[:200]}",
                                  self.device.serial)
            now = int(first.split()[1]) if first.split()[1:] else 0
            holder = Holder.parse(rest.strip())
            if holder is not None and not self._stale(holder, now):
                raise DeviceBusyError(
                    f"in use by {holder.describe()} (lease {self.path}); wait for that run to "
                    "end, or stop it; a lease of a dead run expires by itself",
                    self.device.serial)
            self._take_over(rest.strip())
        raise DeviceBusyError(f"lease {self.path} keeps changing hands; try again",
                              self.device.serial)

    def _stale(self, holder: Holder, device_now: int) -> bool:
        if holder.expires < device_now:
            return True
        if holder.host != self.host:
            return False
        if holder.pid == self.pid:  # ours, left behind when the device went away at release
            return holder.token not in _HELD
        return not _pid_alive(holder.pid)

    def _take_over(self, judged: str) -> None:
        """Move the stale lease aside; if what moved is not what was judged, put it back."""
        path = shlex.quote(self.path)
        aside = shlex.quote(f"{self.path}.stale-{self.token}")
        moved = self._sh(f"mv {path} {aside} 2>/dev/null && cat {aside}")
        if moved.strip() and moved.strip() != judged:  # a fresh lease: not ours to take
            self._sh(f"(set -C; cat {aside} > {path}) 2>/dev/null; rm -f {aside}")
        else:
            self._sh(f"rm -f {aside}")

    def renew(self) -> bool:
        """Push the expiry forward while the lease is still ours; False when it is not."""
        tmp = f"{self.path}.tmp-{self.token}"
        out = self._sh(
            f"grep -q {shlex.quote(self.token)} {shlex.quote(self.path)} 2>/dev/null && "
            f"{self._write(tmp)} && mv -f {shlex.quote(tmp)} {shlex.quote(self.path)} && "
            "echo @@renewed")
        return "@@renewed" in out

    def release(self) -> None:
        self._sh(f"grep -q {shlex.quote(self.token)} {shlex.quote(self.path)} 2>/dev/null && "
                 f"rm -f {shlex.quote(self.path)}; true")

    def holder(self) -> Holder | None:
        return Holder.parse(self._sh(f"cat {shlex.quote(self.path)} 2>/dev/null"))

    # --- background renewal -------------------------------------------------------------------

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if not self.renew():
                    self.lost.set()
                    log.warning("%s: lease taken over by another process", self.device.serial)
                    return
            except HarnessError as error:  # a device away for a moment: try at the next tick
                log.debug("%s: lease renewal failed: %s", self.device.serial, error)

    def __enter__(self) -> DeviceLease:
        self.acquire()
        _HELD.add(self.token)
        self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                        name=f"lease-{self.device.serial}")
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        _HELD.discard(self.token)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=35)
        with contextlib.suppress(HarnessError):
            self.release()


@contextlib.contextmanager
def hold(device: Device, run: str = "", ttl_s: float = DEFAULT_TTL_S) -> Iterator[DeviceLease]:
    with DeviceLease(device, run, ttl_s) as lease:
        yield lease
