"""``harness run``: execute a matrix on devices and store every trial."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from harness.budget import DEFAULT_RESERVE_BYTES
from harness.cli.farm import say_insecure, tls_options
from harness.errors import ConfigError
from harness.farm.security import resolve
from harness.plan import parse_size
from harness.run.devices import open_devices
from harness.run.events import ERRORS, Kind
from harness.run.runner import RunOptions, RunSummary, execute, load_run_meta


class _Progress:
    """Per device: the current cell, trials done/total and an ETA; thread-safe."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("{task.fields[serial]:<18}"), BarColumn(), MofNCompleteColumn(),
            TimeRemainingColumn(), TextColumn("{task.description}"), console=console,
        )
        self.tasks: dict[str, Any] = {}
        self.lock = threading.Lock()

    def __call__(self, kind: str, serial: str, details: dict[str, Any]) -> None:
        with self.lock:
            if serial not in self.tasks:
                self.tasks[serial] = self.progress.add_task("", total=None, serial=serial)
            task = self.tasks[serial]
            if kind == Kind.PLANNED:
                self.progress.update(task, total=details["todo"], description="pushing")
            elif kind == Kind.PUSH:
                self.progress.update(task, description=(
                    f"push {details['name']} {details['done'] * 100 // max(details['total'], 1)}%"))
            elif kind == Kind.TRIAL:
                runs_on = details.get("runs_on", details["build"])
                # adaptive rounds raise the total as they are added
                self.progress.update(task, description=f"{runs_on} {details['label']}",
                                     total=details.get("total") or None)
            elif kind == Kind.ADAPTIVE:
                self.progress.console.print(
                    f"{serial}: {details['candidate']} vs {details['baseline']} "
                    f"{details['label']}: {details['step']} after {details['repetitions']} "
                    f"repetitions ({details['reason']})", markup=False, highlight=False)
            elif kind == Kind.OUTPUT_CHECK and details["status"] in ("mismatch", "error"):
                self.progress.console.print(
                    f"{serial}: output check {details['status']}: {details['build']} "
                    f"{details['model']} {details['quant']}: {details['detail']}", markup=False,
                    highlight=False)
            elif kind == Kind.DONE:
                self.progress.advance(task)
            elif kind in ERRORS:
                self.progress.update(task, description=f"[red]{details['error']}")


def _summary_table(summary: RunSummary) -> Table:
    outcomes = sorted(summary.outcomes())
    table = Table(title=f"run {summary.run_id} ({summary.wall_s:.0f} s)")
    table.add_column("device")
    for name in outcomes:
        table.add_column(name, justify="right")
    table.add_column("pushed", justify="right")
    table.add_column("not run", justify="right")
    table.add_column("memory model")
    for device in summary.devices:
        table.add_row(device.serial, *[str(device.outcomes.get(o, 0)) for o in outcomes],
                      f"{device.bytes_pushed / 1e6:.1f} MB", str(device.not_run),
                      device.memory_model or "the phone's own")
    return table


@click.command("run")
@click.argument("matrix", type=click.Path(path_type=Path), required=False)
@click.option("--devices", "devices_spec", default="all", show_default=True,
              help="Comma-separated serials, 'all' attached devices, or sim:N[:ABI] virtual "
                   "phones (of this host's ABI unless named, e.g. sim:1:arm64-v8a).")
@click.option("--results", type=click.Path(path_type=Path), default=Path("results"),
              show_default=True, help="Results store root.")
@click.option("--builds", type=click.Path(path_type=Path), default=None,
              help="Builds root (default $HARNESS_BUILDS or ./builds).")
@click.option("--resume", "resume", default=None, metavar="RUN_ID",
              help="Finish an interrupted run: only trials with no stored outcome run.")
@click.option("--reserve", default=f"{DEFAULT_RESERVE_BYTES >> 20}MiB", show_default=True,
              help="Memory to leave free on the device when deciding what fits.")
@click.option("--no-skip", is_flag=True, help="Run cells predicted not to fit, too.")
@click.option("--sample-interval", default=0.5, show_default=True, type=float,
              help="Seconds between memory samples (taken on the phone; 0: no sampling).")
@click.option("--status-interval", default=0.0, show_default=True, type=float,
              help="Seconds between thermal status reads during a trial (dumpsys "
                   "thermalservice forks on the phone; 0: before and after each trial only).")
@click.option("--dumpsys-interval", default=0.0, show_default=True, type=float,
              help="Seconds between `dumpsys meminfo <pid>` cross-checks during a trial "
                   "(system_server walks the engine's mappings; 0: never).")
@click.option("--profile", default="midrange-8gb", show_default=True,
              help="Profile of phones started by --devices sim:N.")
@click.option("--ram-mb", type=int, default=None, help="RAM limit of phones started by sim:N.")
@click.option("--backend", type=click.Choice(["local", "dask"]), default="local",
              show_default=True,
              help="local: this host's devices; dask: the farm's phones (docs/farm.md).")
@click.option("--scheduler", default=None, envvar="HARNESS_SCHEDULER", metavar="ADDR",
              help="Dask scheduler of the farm, for --backend dask (or $HARNESS_SCHEDULER).")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@tls_options
def run_command(matrix: Path | None, devices_spec: str, results: Path, builds: Path | None,
                resume: str | None, reserve: str, no_skip: bool, sample_interval: float,
                status_interval: float, dumpsys_interval: float, profile: str,
                ram_mb: int | None, backend: str, scheduler: str | None, as_json: bool,
                tls_dir: Path | None, insecure: bool) -> None:
    """Run MATRIX on devices, sampling memory and heat, and store every trial in Parquet.

    \b
    Example:
      harness run matrices/smoke.yaml --devices sim:2
      harness run --resume 20261129-091800-ab12cd --devices sim:2
      harness run matrices/smoke.yaml --backend dask --scheduler tls://lab1:8786 \\
          --tls ~/farm-tls
    """
    if resume:
        meta = load_run_meta(results, resume)
        matrix = matrix or Path(meta["matrix"])
    if matrix is None:
        raise ConfigError("name a MATRIX file, or --resume RUN_ID")
    if not matrix.is_file():
        raise ConfigError(f"{matrix}: no such matrix file")
    options = RunOptions(results=results, builds=builds,
                         reserve_bytes=parse_size(reserve, "--reserve"), no_skip=no_skip,
                         sample_interval_s=sample_interval, status_interval_s=status_interval,
                         dumpsys_interval_s=dumpsys_interval)
    console = Console(stderr=True)
    if backend == "dask":
        farm_summary = _run_on_farm(matrix, devices_spec, scheduler, options, resume, console,
                                    tls_dir, insecure)
        summary, summary_json = farm_summary.run, farm_summary.to_json()
    else:
        with open_devices(devices_spec, profile, ram_mb) as devices:
            if not devices:
                raise ConfigError(f"--devices {devices_spec!r} names no device")
            progress = _Progress(console)
            with progress.progress:
                summary = execute(matrix, devices, options, run_id=resume, on_event=progress)
        summary_json = summary.to_json()
    if as_json:
        click.echo(json.dumps(summary_json, indent=2))
    else:
        Console(file=sys.stdout).print(_summary_table(summary))
        click.echo(f"results: {results}  (run id {summary.run_id})")


def _run_on_farm(matrix: Path, devices_spec: str, scheduler: str | None, options: RunOptions,
                 resume: str | None, console: Console, tls_dir: Path | None,
                 insecure: bool) -> Any:
    """The dask backend (harness.farm, which alone imports Dask)."""
    from harness.farm import require_distributed
    from harness.farm.driver import execute_farm

    require_distributed()
    if not scheduler:
        raise ConfigError("--backend dask needs --scheduler ADDR (or $HARNESS_SCHEDULER), "
                          "e.g. tls://lab1:8786")
    if devices_spec.startswith("sim:"):
        raise ConfigError("--devices sim:N starts phones on this host; on the farm, start them "
                          "with `harness sim start` where an agent runs and name their serials")
    tls = resolve("driver", tls_dir, insecure)
    if tls is None:
        say_insecure("driver")
    serials = None if devices_spec == "all" else [
        s.strip() for s in devices_spec.split(",") if s.strip()]
    progress = _Progress(console)
    with progress.progress:
        return execute_farm(matrix, scheduler, options, serials, run_id=resume,
                            on_event=progress, tls=tls)


COMMANDS: list[click.Command] = [run_command]
