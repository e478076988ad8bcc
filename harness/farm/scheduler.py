"""``harness farm scheduler``: a Dask scheduler with the farm's settings.

Dask's HTTP routes (the dashboard, and with it off still its metrics, health and info pages)
bind 127.0.0.1 only: they have no TLS and no login, so they are for this machine (``ssh -L``
from elsewhere); the dashboard is off unless asked for. TLS with the farm's certificates
(``harness.farm.security``) unless started with ``--insecure``. ``worker-ttl`` removes a worker
whose host hung (no heartbeat) so its job can wait for the phone elsewhere; ``allowed-failures``
caps how often one job may kill its worker before it is given up. With TLS the scheduler also
checks the role in each peer's certificate (``--preload harness.farm.roles``): workers need the
agent's, clients the driver's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError
from harness.farm.security import REQUIRE_ENCRYPTION_ENV, FarmTLS

ROLES_PRELOAD = "harness.farm.roles"  # the role check of every request (see that module)
LOOPBACK = "127.0.0.1"
HTTP_OFF = f"{LOOPBACK}:0"  # where Dask's HTTP routes go with the dashboard off: any free port


@dataclass(frozen=True)
class SchedulerConfig:
    host: str = "127.0.0.1"
    port: int = 8786
    worker_ttl: str = "120s"
    allowed_failures: int = 2
    dashboard_address: str | None = None  # None: no dashboard
    scheduler_file: Path | None = None
    python: str = sys.executable
    tls: FarmTLS | None = None  # None: plaintext (--insecure)


def loopback_dashboard(given: str) -> str:
    """``--dashboard-address`` as 127.0.0.1:PORT (PORT, :PORT, localhost:PORT and
    127.0.0.1:PORT are taken); a ConfigError for any other address."""
    host, sep, port = given.rpartition(":")
    if not sep:
        host, port = "", given
    if host not in ("", LOOPBACK, "localhost") or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f"--dashboard-address {given}: the dashboard binds {LOOPBACK} only (its pages have no "
            f"TLS and no login); write PORT or {LOOPBACK}:PORT and reach it from elsewhere with "
            f"ssh -L PORT:{LOOPBACK}:PORT this-host")
    return f"{LOOPBACK}:{port}"


def scheduler_command(config: SchedulerConfig) -> tuple[list[str], dict[str, str]]:
    """The ``dask scheduler`` command line and the environment that carries the settings."""
    argv = [config.python, "-m", "distributed.cli.dask_scheduler",
            "--host", config.host, "--port", str(config.port)]
    if config.dashboard_address:
        argv += ["--dashboard", "--dashboard-address", loopback_dashboard(config.dashboard_address)]
    else:  # Dask still serves its other HTTP routes, by default on every interface
        argv += ["--no-dashboard", "--dashboard-address", HTTP_OFF]
    if config.scheduler_file:
        argv += ["--scheduler-file", str(config.scheduler_file)]
    env = {
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": config.worker_ttl,
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": str(config.allowed_failures),
    }
    if config.tls is not None:  # TLS only: a plaintext or certificate-less peer is refused
        argv += ["--protocol", "tls", *config.tls.dask_args(), "--preload", ROLES_PRELOAD]
        env.update(REQUIRE_ENCRYPTION_ENV)
    return argv, env


def exec_scheduler(config: SchedulerConfig) -> None:
    """Become the scheduler (same pid: whoever started us can stop it by that pid)."""
    argv, env = scheduler_command(config)
    os.execve(argv[0], argv, {**os.environ, **env})
