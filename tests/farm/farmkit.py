"""A farm on one machine for tests: a scheduler and two agents ("hosts") as subprocesses.

Each host has its own adb server, so a phone is reachable only from the host it is attached to,
as on a real farm. Every process is bound to 127.0.0.1 and stopped by its pid, also when a test
fails; workers are stopped by their agent, and any worker still alive afterwards by the pid the
scheduler reported for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.farm.naming import farm_phones
from harness.farm.security import FarmTLS, init_farm
from harness.testing.adbserver import AdbServer

HARNESS = str(Path(sys.executable).parent / "harness")


def _stop(process: subprocess.Popen[bytes], timeout: float = 15) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Farm:
    root: Path
    scheduler: str
    scheduler_process: subprocess.Popen[bytes]
    adb: dict[str, AdbServer]  # host -> its adb server
    tls: Path  # the farm's certificates (harness farm init): every process runs on TLS
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    seen_workers: dict[int, int] = field(default_factory=dict)  # worker pid -> agent pid

    @property
    def driver_tls(self) -> FarmTLS:
        return FarmTLS(self.tls, "driver")

    def cache(self, host: str) -> Path:
        """The host's artifact cache (each agent has its own, as on separate machines)."""
        return self.root / f"cache-{host}"

    def start_agent(self, host: str, max_restarts: int = 3) -> subprocess.Popen[bytes]:
        """``harness farm agent`` with no --listen-host: its workers bind the address on the
        route to the scheduler, 127.0.0.1."""
        env = {**os.environ, **self.adb[host].env, "PYTHONUNBUFFERED": "1"}
        log = open(self.root / f"agent-{host}.jsonl", "ab")  # noqa: SIM115 - for the child
        process = subprocess.Popen(
            [HARNESS, "farm", "agent", "--scheduler", self.scheduler, "--name", host,
             "--poll", "0.3", "--max-restarts", str(max_restarts),
             "--log-dir", str(self.root / f"logs-{host}"), "--cache", str(self.cache(host)),
             "--tls", str(self.tls), "--json"],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.agents[host] = process
        return process

    def stop_agent(self, host: str) -> None:
        """SIGTERM the agent (it stops its workers first) and wait for it."""
        _stop(self.agents.pop(host))

    def agent_events(self, host: str) -> list[dict[str, Any]]:
        path = self.root / f"agent-{host}.jsonl"
        events = []
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events

    def client(self) -> Any:
        from distributed import Client

        return Client(self.scheduler, timeout="20s", set_as_default=False,
                      security=self.driver_tls.security())

    def wait_for_phones(self, serials: set[str], timeout: float = 90) -> dict[str, str]:
        """serial -> worker name once every phone has a worker; remembers the workers' pids."""
        with self.client() as client:
            deadline = time.monotonic() + timeout
            while True:
                phones = farm_phones(client.scheduler_info()["workers"])
                if serials <= set(phones):
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"workers seen: {phones}; agents: "
                                         f"{ {h: self.agent_events(h) for h in self.agents} }")
                time.sleep(0.3)
            self.remember_workers(client)
            return phones

    def remember_workers(self, client: Any) -> dict[str, int]:
        """serial -> pid of each phone's worker (checked to be a child of one of our agents)."""
        pids: dict[str, int] = {}
        names = {addr: w["name"] for addr, w in client.scheduler_info()["workers"].items()}
        for addr, pid in client.run(os.getpid).items():
            agent = _parent(pid)
            assert agent in {a.pid for a in self.agents.values()}, (pid, agent)
            self.seen_workers[pid] = agent
            pids[str(names[addr]).rpartition("@")[0]] = pid
        return pids

    def kill_worker(self, pid: int) -> None:
        """SIGKILL one worker we started (its parent must be one of our agents)."""
        assert self.seen_workers.get(pid) in {a.pid for a in self.agents.values()}
        assert _parent(pid) == self.seen_workers[pid]
        os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        for process in self.agents.values():
            _stop(process)
        _stop(self.scheduler_process)
        for pid, agent in self.seen_workers.items():  # a worker its agent did not stop
            if _parent(pid) in (agent, 1):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _scheduler_address(path: Path) -> str | None:
    """The address in the scheduler's file, or None while it is missing or not yet whole."""
    try:
        return str(json.loads(path.read_text())["address"])
    except (OSError, ValueError, KeyError):
        return None


@contextlib.contextmanager
def local_farm(root: Path, adb: dict[str, AdbServer]) -> Iterator[Farm]:
    """A scheduler on 127.0.0.1 (dashboard off, TLS with certificates made for the farm), no
    agents yet; everything stopped at the end."""
    root.mkdir(parents=True, exist_ok=True)
    tls = root / "tls"
    init_farm(tls)
    address_file = root / "scheduler.json"
    log = open(root / "scheduler.log", "ab")  # noqa: SIM115 - for the child
    process = subprocess.Popen(
        [HARNESS, "farm", "scheduler", "--host", "127.0.0.1", "--port", "0",
         "--scheduler-file", str(address_file), "--allowed-failures", "3", "--tls", str(tls)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    farm: Farm | None = None
    try:
        deadline = time.monotonic() + 60
        address = _scheduler_address(address_file)
        while address is None:  # until the file is there and whole
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((root / "scheduler.log").read_text())
            time.sleep(0.1)
            address = _scheduler_address(address_file)
        farm = Farm(root, address, process, adb, tls)
        yield farm
    finally:
        if farm is not None:
            farm.close()
        else:
            _stop(process)
