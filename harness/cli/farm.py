"""``harness farm``: stand up a phone farm on Dask distributed (scheduler, one agent per host)."""

from __future__ import annotations

import json
import shlex
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from harness.errors import ConfigError
from harness.farm import require_distributed
from harness.farm.agent import Agent, AgentConfig, default_log_dir, listen_address
from harness.farm.artifacts import check_cache_dir, default_cache_dir
from harness.farm.scheduler import SchedulerConfig, exec_scheduler, scheduler_command
from harness.farm.security import (
    CA_CERT,
    CA_KEY,
    TLS_ENV,
    init_farm,
    reissue_farm,
    resolve,
    scheduler_url,
)

F = TypeVar("F", bound=Callable[..., Any])


def tls_options(function: F) -> F:
    """``--tls DIR`` (the farm's certificates) and ``--insecure`` (plaintext): one is required."""
    function = click.option(
        "--insecure", is_flag=True,
        help="Plaintext, no credentials: anyone who reaches the farm can use it.")(function)
    return click.option(
        "--tls", "tls_dir", type=click.Path(path_type=Path), default=None, envvar=TLS_ENV,
        metavar="DIR",
        help=f"The farm's certificates from `harness farm init DIR` (or ${TLS_ENV}).")(function)


def say_insecure(role: str) -> None:
    """The one line every --insecure command prints (stderr): what it gives up."""
    click.echo(f"farm {role}: --insecure: plaintext and no credentials; anyone who reaches "
               "this farm can use it", err=True)


@click.group("farm")
def farm() -> None:
    """Run `harness run` across USB hosts on Dask distributed (needs harness[farm]).

    Every connection is TLS with the farm's own certificates (harness farm init);
    --insecure, on every command, runs in plaintext.

    \b
    Example:
      harness farm init ~/farm-tls                                  # once: CA + certificates
      harness farm scheduler --host 10.0.0.2 --tls ~/farm-tls       # once, on any machine
      harness farm agent --scheduler tls://10.0.0.2:8786 --tls ~/farm-tls   # every USB host
      harness run matrices/smoke.yaml --backend dask --scheduler tls://10.0.0.2:8786 \\
          --tls ~/farm-tls
    """


@farm.command("init")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--days", default=825, show_default=True, help="Validity of the certificates.")
@click.option("--name", default="harness farm", show_default=True,
              help="The farm's name in the certificates' subjects (--reissue keeps the CA's).")
@click.option("--reissue", is_flag=True,
              help="Keep FOLDER's CA and keys; write new role certificates (for ones made "
                   "before roles, or to renew).")
@click.option("--json", "as_json", is_flag=True, help="Print the files written as JSON.")
def init_command(folder: Path, days: int, name: str, reissue: bool, as_json: bool) -> None:
    """Make the farm's certificate authority and a certificate per role in FOLDER.

    Writes ca.pem and ca.key (the CA: keep ca.key on this machine), and for each of
    scheduler, agent and driver a ROLE.pem and ROLE.key; each certificate carries
    its role, and the scheduler refuses a worker without the agent's or a client
    without the driver's. Copy ca.pem with the role's two files to each machine and
    pass the folder with --tls. An existing CA is never overwritten: --reissue
    signs new role certificates with it instead (same ca.pem and keys; copy each
    host its role's new .pem).

    \b
    Example:
      harness farm init ~/farm-tls
      scp ~/farm-tls/{ca.pem,agent.pem,agent.key} usb-host-2:farm-tls/
      harness farm init ~/farm-tls --reissue     # then copy agent.pem, driver.pem, ...
    """
    written = reissue_farm(folder, days) if reissue else init_farm(folder, name, days)
    if as_json:
        click.echo(json.dumps({"folder": str(written[0].parent),
                               "files": [p.name for p in written]}))
        return
    click.echo(f"farm certificates in {written[0].parent}: "
               + ", ".join(p.name for p in written))
    if reissue:
        click.echo(f"same CA ({CA_CERT}); copy each host its role's new .pem (and any new .key)")
    else:
        click.echo(f"keep {CA_KEY} here; each host needs {CA_CERT} and its role's .pem and .key")


def _parse_tags(tags: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    parsed = []
    for tag in tags:
        kind, sep, value = tag.partition(":")
        if not sep or not kind or not value:
            raise ConfigError(f"--tag {tag!r}: write KIND:VALUE, e.g. --tag rack:a3")
        parsed.append((kind, value))
    return tuple(parsed)


@farm.command("agent")
@click.option("--scheduler", required=True, envvar="HARNESS_SCHEDULER", metavar="ADDR",
              help="The Dask scheduler, e.g. tls://lab1:8786 (or $HARNESS_SCHEDULER).")
@click.option("--name", "host", default=None,
              help="This USB host's name in worker names and the host: tag [hostname].")
@click.option("--listen-host", default=None, metavar="ADDR",
              help="Address the workers bind and advertise [this host's address on the route "
                   "to the scheduler]; the scheduler and the driver must reach it.")
@click.option("--tag", "tags", multiple=True, metavar="KIND:VALUE",
              help="An extra resource tag on every worker, e.g. rack:a3 (repeatable).")
@click.option("--no-soc-tag", is_flag=True, help="Do not tag workers with the phone's SoC.")
@click.option("--max-restarts", default=3, show_default=True,
              help="Restarts of a worker that died while its phone stayed attached.")
@click.option("--poll", "poll_s", default=1.0, show_default=True,
              help="Seconds between looks at the adb server's device list.")
@click.option("--log-dir", type=click.Path(path_type=Path), default=None,
              help="Worker logs [$HARNESS_HOME/farm/<name>].")
@click.option("--cache", "cache_dir", type=click.Path(path_type=Path), default=None,
              help="This host's cache of builds and models, by sha256 "
                   "[$HARNESS_CACHE/farm/artifacts].")
@click.option("--json", "as_json", is_flag=True, help="Print events as JSON lines.")
@tls_options
def agent_command(scheduler: str, host: str | None, listen_host: str | None,
                  tags: tuple[str, ...], no_soc_tag: bool, max_restarts: int, poll_s: float,
                  log_dir: Path | None, cache_dir: Path | None, as_json: bool,
                  tls_dir: Path | None, insecure: bool) -> None:
    """Start one Dask worker per phone on this host's adb server, until stopped.

    Each worker has one thread, the name <serial>@<host> and the resources
    device:<serial>=1 (serial with every character but letters and digits as _),
    host:<name>=1 and soc:<soc>=1. The workers bind this host's address on the
    route to the scheduler (the first line says which) unless --listen-host names
    another. A phone that goes away has its worker stopped; a phone plugged in
    (here or moved from another host) gets one. Builds and models come from the
    driver by sha256 into --cache, once per host. Stop with Ctrl-C or SIGTERM: the
    workers are stopped first.

    \b
    Example:
      harness farm agent --scheduler tls://lab1:8786 --tls ~/farm-tls --name usb-host-2
      harness farm agent --scheduler tls://lab1:8786 --tls ~/farm-tls --tag rack:a3 \\
          --listen-host 10.0.0.12 --cache /data/harness-cache
    """
    require_distributed()
    tls = resolve("agent", tls_dir, insecure)
    scheduler = scheduler_url(scheduler, tls)
    if tls is None:
        say_insecure("agent")
    name = host or socket.gethostname()
    listen, listen_from = listen_address(scheduler, listen_host)
    config = AgentConfig(scheduler=scheduler, host=name, listen_host=listen, tls=tls,
                         tags=_parse_tags(tags), soc_tag=not no_soc_tag,
                         max_restarts=max_restarts, log_dir=log_dir or default_log_dir(name),
                         cache_dir=check_cache_dir(cache_dir or default_cache_dir()))

    def show(kind: str, details: dict[str, Any]) -> None:
        if as_json:
            click.echo(json.dumps({"event": kind, "time": round(time.time(), 3), **details}))
        else:
            click.echo(f"{kind:<9} " + " ".join(f"{k}={v}" for k, v in details.items()))

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    show("agent", {"host": name, "scheduler": scheduler, "listen_host": listen,
                   "listen_host_from": listen_from, "cache": str(config.cache_dir),
                   "security": "tls" if tls else "insecure"})
    Agent(config, on_event=show).run(stop, poll_s)


@farm.command("scheduler")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind: this machine's LAN address for a real farm.")
@click.option("--port", default=8786, show_default=True, help="Port (0: any free port).")
@click.option("--worker-ttl", default="120s", show_default=True,
              help="A worker silent this long (hung host) is removed; its job waits again.")
@click.option("--allowed-failures", default=2, show_default=True,
              help="Times a job may kill its worker before it is given up.")
@click.option("--dashboard-address", default=None,
              help="Turn the dashboard on at PORT or 127.0.0.1:PORT (off by default; "
                   "127.0.0.1 only).")
@click.option("--scheduler-file", type=click.Path(path_type=Path), default=None,
              help="Write the scheduler's address to this JSON file.")
@click.option("--dry-run", is_flag=True, help="Print the command instead of starting it.")
@tls_options
def scheduler_command_(host: str, port: int, worker_ttl: str, allowed_failures: int,
                       dashboard_address: str | None, scheduler_file: Path | None,
                       dry_run: bool, tls_dir: Path | None, insecure: bool) -> None:
    """Start a Dask scheduler for the farm (or bring your own `dask scheduler`).

    With --tls it takes TLS connections only, from peers whose certificate the farm's
    CA signed; anything else is refused with one line on its log.

    \b
    Example:
      harness farm scheduler --host 10.0.0.2 --port 8786 --tls ~/farm-tls
      harness farm scheduler --insecure     # plaintext, 127.0.0.1 only
    """
    require_distributed()
    tls = resolve("scheduler", tls_dir, insecure)
    if tls is None:
        say_insecure("scheduler")
    config = SchedulerConfig(host=host, port=port, worker_ttl=worker_ttl,
                             allowed_failures=allowed_failures,
                             dashboard_address=dashboard_address, scheduler_file=scheduler_file,
                             tls=tls)
    if dry_run:
        argv, env = scheduler_command(config)
        click.echo(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " "
                   + shlex.join(argv))
        return
    exec_scheduler(config)


COMMANDS: list[click.Command] = [farm]
