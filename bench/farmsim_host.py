"""One simulated USB host of the simulated farm: ``python -m bench.farmsim_host CONFIG HOST``.

A real agent starts one ``dask worker`` process per phone. 200 such processes, each importing
Dask and harness, do not fit the start-up time of a 2-core machine, so a simulated host
runs its phones' workers as Dask ``Worker`` objects in one process and one event loop: each is a
worker of its own to the scheduler (its own connection, heartbeats, name ``<serial>@<host>``,
one thread, the resources ``device:<serial>=1`` and ``host:<host>=1`` the agent gives), running
the farm's job function on a stand-in phone (``bench.farmsim_phone``). What the agent does
around them (polling adb, restarting dead workers) is not simulated; an unplugged phone's worker
is closed and a new one started when the phone is plugged back, as the agent would. Killing this
process (its process group) is losing the host.

CONFIG is a JSON file: the scheduler's address, the farm's TLS folder, each host's serials and
the stand-in's settings (``SimConfig``). The host writes ``<state>/<host>.ready`` once all its
workers are up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from bench.farmsim_phone import SimConfig, SimPhone, install
from harness.farm.artifacts import CACHE_ENV
from harness.farm.naming import HOST, device_resource, tag_resource, worker_name
from harness.farm.security import TLS_ENV, FarmTLS


def worker_security(tls: FarmTLS) -> Any:
    """The agent's certificate on both sides of a worker (its server and its client)."""
    from distributed import Security

    return Security(tls_ca_file=str(tls.ca_file), tls_client_cert=str(tls.cert_file),
                    tls_client_key=str(tls.key_file), tls_worker_cert=str(tls.cert_file),
                    tls_worker_key=str(tls.key_file), require_encryption=True)


class SimHost:
    """The workers of one host's phones, in this process's event loop."""

    def __init__(self, host: str, serials: list[str], scheduler: str, tls: FarmTLS,
                 unplug_s: float) -> None:
        self.host = host
        self.serials = serials
        self.scheduler = scheduler
        self.security = worker_security(tls)
        self.unplug_s = unplug_s
        self.workers: dict[str, Any] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    async def start(self, serial: str) -> None:
        from distributed import Worker

        resources = {device_resource(serial): 1.0, tag_resource(HOST, self.host): 1.0}
        self.workers[serial] = await Worker(
            self.scheduler, nthreads=1, name=worker_name(serial, self.host),
            resources=resources, security=self.security, host="127.0.0.1",
            dashboard=False, dashboard_address="127.0.0.1:0", death_timeout=60, preload=[])

    async def replug(self, serial: str) -> None:
        """The phone unplugged: its worker stops; plugged back after ``unplug_s``: a new one."""
        await self.workers.pop(serial).close()
        await asyncio.sleep(self.unplug_s)
        SimPhone.plugged_out[serial].clear()
        await self.start(serial)

    def unplug(self, serial: str) -> None:
        """Called from a job's thread: the phone goes away now."""
        assert self.loop is not None
        SimPhone.plugged_out.setdefault(serial, threading.Event()).set()
        asyncio.run_coroutine_threadsafe(self.replug(serial), self.loop)

    async def run(self, ready: Path) -> None:
        self.loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        self.loop.add_signal_handler(signal.SIGTERM, stop.set)
        await asyncio.gather(*(self.start(serial) for serial in self.serials))
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.write_text(f"{os.getpid()}\n")
        await stop.wait()
        for worker in list(self.workers.values()):
            with contextlib.suppress(Exception):
                await worker.close()


# Dask's per-worker background work that costs a USB host, not the scheduler, and that one
# process of many workers would pay many times over: the statistical profiler (a stack sample
# every 10 ms per worker), the system monitor (psutil every 500 ms) and the event-loop tick
QUIET = {"distributed.worker.profile.enabled": False,
         "distributed.admin.system-monitor.interval": "5s",
         "distributed.admin.tick.interval": "500ms"}


def main(argv: list[str]) -> int:
    import dask

    config_path, host = Path(argv[0]), argv[1]
    dask.config.set(QUIET)
    logging.getLogger("distributed").setLevel(logging.WARNING)
    data = json.loads(config_path.read_text())
    sim = SimConfig.from_json(data["sim"])
    tls = FarmTLS(Path(data["tls"]), "agent")
    os.environ[CACHE_ENV] = str(Path(data["work"]) / f"cache-{host}")  # the host's cache
    os.environ[TLS_ENV] = str(tls.folder)  # for the artifact service, as the agent passes it
    simhost = SimHost(host, data["hosts"][host], data["scheduler"], tls, sim.unplug_s)
    install(sim, simhost.unplug)
    asyncio.run(simhost.run(sim.state / f"{host}.ready"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
