"""``harness farm``: stand up a phone farm on Dask distributed (scheduler, one agent per host)."""

from __future__ import annotations

import json
import shlex
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import click

from harness.errors import ConfigError
from harness.farm import require_distributed
from harness.farm.agent import Agent, AgentConfig, default_log_dir
from harness.farm.artifacts import check_cache_dir, default_cache_dir
from harness.farm.scheduler import SchedulerConfig, exec_scheduler, scheduler_command


@click.group("farm")
def farm() -> None:
    """Run `harness run` across USB hosts on Dask distributed (needs harness[farm]).

    \b
    Example:
      harness farm scheduler --host 0.0.0.0            # once, on any machine
      harness farm agent --scheduler tcp://lab1:8786   # on every USB host
      harness run matrices/smoke.yaml --backend dask --scheduler tcp://lab1:8786
    """


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
              help="The Dask scheduler, e.g. tcp://lab1:8786 (or $HARNESS_SCHEDULER).")
@click.option("--name", "host", default=None,
              help="This USB host's name in worker names and the host: tag [hostname].")
@click.option("--listen-host", default=None,
              help="Address the workers listen on (one the scheduler and driver can reach).")
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
def agent_command(scheduler: str, host: str | None, listen_host: str | None,
                  tags: tuple[str, ...], no_soc_tag: bool, max_restarts: int, poll_s: float,
                  log_dir: Path | None, cache_dir: Path | None, as_json: bool) -> None:
    """Start one Dask worker per phone on this host's adb server, until stopped.

    Each worker has one thread, the name <serial>@<host> and the resources
    device:<serial>=1 (serial with every character but letters and digits as _),
    host:<name>=1 and soc:<soc>=1. A phone that goes away has its worker stopped;
    a phone plugged in (here or moved from another host) gets one. Builds and
    models come from the driver by sha256 into --cache, once per host. Stop with
    Ctrl-C or SIGTERM: the workers are stopped first.

    \b
    Example:
      harness farm agent --scheduler tcp://lab1:8786 --name usb-host-2 --tag rack:a3
      harness farm agent --scheduler tcp://lab1:8786 --cache /data/harness-cache
    """
    require_distributed()
    name = host or socket.gethostname()
    config = AgentConfig(scheduler=scheduler, host=name, listen_host=listen_host,
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
    show("agent", {"host": name, "scheduler": scheduler, "cache": str(config.cache_dir)})
    Agent(config, on_event=show).run(stop, poll_s)


@farm.command("scheduler")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; 0.0.0.0 (or the LAN address) for a real farm.")
@click.option("--port", default=8786, show_default=True, help="Port (0: any free port).")
@click.option("--worker-ttl", default="120s", show_default=True,
              help="A worker silent this long (hung host) is removed; its job waits again.")
@click.option("--allowed-failures", default=2, show_default=True,
              help="Times a job may kill its worker before it is given up.")
@click.option("--dashboard-address", default=None,
              help="Turn the dashboard on at this address (off by default).")
@click.option("--scheduler-file", type=click.Path(path_type=Path), default=None,
              help="Write the scheduler's address to this JSON file.")
@click.option("--dry-run", is_flag=True, help="Print the command instead of starting it.")
def scheduler_command_(host: str, port: int, worker_ttl: str, allowed_failures: int,
                       dashboard_address: str | None, scheduler_file: Path | None,
                       dry_run: bool) -> None:
    """Start a Dask scheduler for the farm (or bring your own `dask scheduler`).

    \b
    Example:
      harness farm scheduler --host 0.0.0.0 --port 8786
    """
    require_distributed()
    config = SchedulerConfig(host=host, port=port, worker_ttl=worker_ttl,
                             allowed_failures=allowed_failures,
                             dashboard_address=dashboard_address, scheduler_file=scheduler_file)
    if dry_run:
        argv, env = scheduler_command(config)
        click.echo(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " "
                   + shlex.join(argv))
        return
    exec_scheduler(config)


COMMANDS: list[click.Command] = [farm]
