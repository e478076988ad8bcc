"""The farm agent: one Dask worker process per phone attached to this USB host.

It polls its adb server's device list (adb's ``track-devices`` only says that something changed;
a one-second poll of ``host:devices`` gives the same answer with no stream to keep alive). For
each online phone it starts one single-threaded worker (``--nthreads 1``, no nanny: the agent is
the nanny) named ``<serial>@<host>`` with the resources ``device:<serial>=1``, ``host:<host>=1``
and, when the phone reports one, ``soc:<soc>=1``. It stops that worker when the phone goes away,
and restarts a worker that died while its phone stayed, up to ``max_restarts`` times per
plug-in (a job that keeps killing its worker must not loop forever). Workers are stopped by their
pid, never by name. The workers are given the agent's artifact cache folder (``--cache``) in
``$HARNESS_FARM_CACHE``: the phones of one host share one cache.

The workers bind, and tell the scheduler, this host's address on the route to the scheduler
(``harness.farm.route``) unless ``--listen-host`` names another: on a real farm that is the
address the scheduler and the driver reach them at, with no flag. Because every farm host can
reach that address, a TLS worker checks the role of each peer's certificate
(``harness.farm.roles``): data transfer from a peer worker, everything else from the scheduler
only. Its HTTP routes (Dask's metrics and health) bind 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.farm.artifacts import CACHE_ENV, default_cache_dir
from harness.farm.naming import HOST, SOC, device_resource, tag_resource, worker_name
from harness.farm.route import route_address, scheduler_endpoint
from harness.farm.scheduler import ROLES_PRELOAD
from harness.farm.security import REQUIRE_ENCRYPTION_ENV, TLS_ENV, FarmTLS
from harness.logcause import cause, log_size, read_since

LOOPBACK_HTTP = "127.0.0.1:0"  # a worker's HTTP routes (metrics, health): this host only
AgentEvent = Callable[[str, dict[str, Any]], None]  # (kind, details)
Launcher = Callable[[Sequence[str], Path, Mapping[str, str]], "subprocess.Popen[bytes]"]


@dataclass(frozen=True)
class AgentConfig:
    scheduler: str  # tcp://host:port of the Dask scheduler
    host: str  # this USB host's name in worker names and the host: tag
    listen_host: str | None = None  # the address workers listen on (default: Dask's choice)
    tags: tuple[tuple[str, str], ...] = ()  # extra (kind, value) tags for every worker
    soc_tag: bool = True  # add soc:<ro.soc.model> when the phone reports it
    max_restarts: int = 3  # per phone plug-in
    death_timeout_s: float = 60.0  # a worker whose scheduler is gone this long exits
    log_dir: Path = field(default_factory=lambda: Path("farm-logs"))
    cache_dir: Path = field(default_factory=default_cache_dir)  # builds and models, by sha256
    python: str = sys.executable
    tls: FarmTLS | None = None  # the agent role's certificates; None: plaintext (--insecure)


def listen_address(scheduler: str, given: str | None) -> tuple[str, str]:
    """(the address the workers bind, where it came from): ``given`` (``--listen-host``), else
    this host's address on the route to the scheduler."""
    if given:
        return given, "--listen-host"
    address = route_address(scheduler, "pass --listen-host ADDR (this host's address on the "
                                       "farm's network)")
    return address, f"route to {scheduler_endpoint(scheduler)[0]}"


# Dask's statistical profiler samples every thread's stack each 10 ms, for a dashboard the farm
# keeps off: 1.1% of a core per idle worker on this host (0.53 -> 0.31 CPU s in 10 s for two),
# and it walks the job's stack while the phone's engine runs
NO_PROFILER = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}


def worker_env(config: AgentConfig) -> dict[str, str]:
    """What a worker's environment adds to the agent's: where its host's artifact cache is,
    the farm's certificates (for the artifact service), Dask's encryption requirement, and
    Dask's profiler off."""
    env = {CACHE_ENV: str(config.cache_dir), **NO_PROFILER}
    if config.tls is not None:
        env.update({TLS_ENV: str(config.tls.folder), **REQUIRE_ENCRYPTION_ENV})
    return env


def worker_argv(config: AgentConfig, serial: str, soc: str | None = None) -> list[str]:
    """The ``dask worker`` command line of one phone's worker."""
    tags = [(HOST, config.host), *config.tags]
    if soc:
        tags.append((SOC, soc))
    resources = [f"{device_resource(serial)}=1", *(f"{tag_resource(k, v)}=1" for k, v in tags)]
    argv = [config.python, "-m", "distributed.cli.dask_worker", config.scheduler,
            "--nthreads", "1", "--nworkers", "1", "--no-nanny",
            "--name", worker_name(serial, config.host), "--resources", " ".join(resources),
            "--no-dashboard", "--dashboard-address", LOOPBACK_HTTP,
            "--death-timeout", f"{config.death_timeout_s:g}"]
    if config.listen_host:
        argv += ["--host", config.listen_host]
    if config.tls is not None:  # the worker takes only the scheduler's requests (and peers' data)
        argv += ["--protocol", "tls", *config.tls.dask_args(), "--preload", ROLES_PRELOAD]
    return argv


def adb_online_serials() -> set[str]:
    """Serials of the phones this host's adb server lists as ``device``."""
    from harness.device import list_devices

    return {device.serial for device in list_devices()}


def adb_soc(serial: str) -> str | None:
    """The phone's SoC name (ro.soc.model, else ro.board.platform), if it tells."""
    from harness.device import get_device

    with contextlib.suppress(HarnessError):
        out = get_device(serial).shell(
            "getprop ro.soc.model; getprop ro.board.platform", timeout=10).stdout
        for line in out.splitlines():
            if line.strip():
                return line.strip()
    return None


def launch(argv: Sequence[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start a worker in its own session (a Ctrl-C at the agent's terminal reaches the agent,
    which then stops its workers in order), with ``env`` added to the agent's environment."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **env})


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL, by the pid we started; reaps it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


@dataclass
class _Slot:
    serial: str
    process: subprocess.Popen[bytes]
    log: Path  # the worker's log, and its size before this worker started
    offset: int
    restarts: int = 0
    given_up: bool = False

    def why(self) -> dict[str, str]:
        """The cause line this worker left in its log, and the log, for a died event."""
        found = cause(read_since(self.log, self.offset))
        return {"cause": found, "log": str(self.log)} if found else {"log": str(self.log)}


class Agent:
    """Keeps one worker per online phone; ``step`` is one look at the adb server."""

    def __init__(self, config: AgentConfig,
                 online: Callable[[], set[str]] = adb_online_serials,
                 soc: Callable[[str], str | None] = adb_soc,
                 launcher: Launcher = launch,
                 on_event: AgentEvent | None = None) -> None:
        self.config = config
        self.online = online
        self.soc = soc
        self.launcher = launcher
        self.on_event = on_event or (lambda kind, details: None)
        self.slots: dict[str, _Slot] = {}

    def workers(self) -> dict[str, int]:
        """serial -> pid of the live workers."""
        return {s: slot.process.pid for s, slot in self.slots.items()
                if slot.process.poll() is None}

    def _start(self, serial: str) -> tuple[subprocess.Popen[bytes], Path, int]:
        soc = self.soc(serial) if self.config.soc_tag else None
        argv = worker_argv(self.config, serial, soc)
        log = self.config.log_dir / f"{device_resource(serial).replace(':', '-')}.log"
        offset = log_size(log)
        process = self.launcher(argv, log, worker_env(self.config))
        self.on_event("started", {"serial": serial, "pid": process.pid,
                                  "name": worker_name(serial, self.config.host), "soc": soc,
                                  "log": str(log)})
        return process, log, offset

    def step(self) -> None:
        try:
            serials = self.online()
        except HarnessError as error:  # the adb server is down: keep what runs, say so
            self.on_event("adb_error", {"error": str(error)})
            return
        for serial in sorted(set(self.slots) - serials):
            gone = self.slots.pop(serial)
            stop_process(gone.process)
            self.on_event("stopped", {"serial": serial, "pid": gone.process.pid,
                                      "reason": "phone gone"})
        for serial in sorted(serials):
            slot = self.slots.get(serial)
            if slot is None:
                self.slots[serial] = _Slot(serial, *self._start(serial))
                continue
            code = slot.process.poll()
            if code is None or slot.given_up:
                continue
            if slot.restarts >= self.config.max_restarts:
                slot.given_up = True
                self.on_event("given_up", {"serial": serial, "exit": code,
                                           "restarts": slot.restarts, **slot.why()})
                continue
            slot.restarts += 1
            self.on_event("died", {"serial": serial, "pid": slot.process.pid, "exit": code,
                                   **slot.why()})
            slot.process, slot.log, slot.offset = self._start(serial)

    def run(self, stop: threading.Event, poll_s: float = 1.0) -> None:
        """Poll until ``stop`` is set, then stop every worker."""
        try:
            while not stop.is_set():
                self.step()
                stop.wait(poll_s)
        finally:
            self.close()

    def close(self) -> None:
        for serial, slot in list(self.slots.items()):
            stop_process(slot.process)
            self.on_event("stopped", {"serial": serial, "pid": slot.process.pid,
                                      "reason": "agent stopping"})
        self.slots.clear()


def default_log_dir(host: str) -> Path:
    """Worker logs under $HARNESS_HOME/farm/<host> (default ~/.local/state/harness)."""
    base = Path(os.environ["HARNESS_HOME"]) if os.environ.get("HARNESS_HOME") else (
        Path.home() / ".local" / "state" / "harness")
    return base / "farm" / host
