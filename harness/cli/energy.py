"""``harness energy join``: an external power monitor's samples as the trials' energy source."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from harness import store
from harness.analysis.monitor import join, parse_monitor_csv
from harness.errors import ConfigError


@click.group("energy")
def energy() -> None:
    """Energy per token from an external power monitor instead of the phone's gauge.

    \b
    Example:
      harness energy join monsoon.csv --name monsoon --serial R58N12345 --results results
    """


@energy.command("join")
@click.argument("csv_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--results", type=click.Path(path_type=Path, file_okay=False),
              default=Path("results"), show_default=True, help="Results store.")
@click.option("--name", default="monitor", show_default=True,
              help="The monitor's name, stored as energy_source monitor:NAME.")
@click.option("--serial", default=None, help="Only trials of this phone (the one on the monitor).")
@click.option("--idle-s", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds before each launch whose median draw is the idle baseline.")
@click.option("--json", "as_json", is_flag=True, help="Print the joined records as JSON.")
def join_command(csv_file: Path, results: Path, name: str, serial: str | None, idle_s: float,
                 as_json: bool) -> None:
    """Join a monitor's CSV to the trials it covers and store their energy.

    The CSV has a header row, a time column (timestamp in ISO 8601, or time/unix_s/epoch_s in
    epoch seconds, on a clock synchronised with this host's) and power_w/power_mw (or a current
    and a voltage column). Each trial inside the CSV's time range gets joules per prompt and
    generated token, the idle draw before its launch subtracted; the report and
    ``harness recommend --objective energy`` then use these figures instead of the phone's
    gauge. Nothing stored is changed: the records go to the store's energy table.

    \b
    Example:
      harness energy join monitor.csv --name usbmeter --serial sim-1 --json
    """
    try:
        text = csv_file.read_text()
    except OSError as error:
        raise ConfigError(f"{csv_file}: cannot read ({error.strerror or error})") from error
    samples = parse_monitor_csv(text, name, str(csv_file))
    trials = store.read_table(results, "trials") if results.is_dir() else None
    if trials is None or trials.empty:
        raise ConfigError(f"{results}: no trials in this store (use --results)")
    if serial is not None and serial not in set(trials["device_serial"]):
        raise ConfigError(f"--serial {serial}: no trials of that phone in {results}")
    records = join(trials, samples, idle_s=idle_s, serial=serial)
    if not records:
        raise ConfigError(f"{csv_file}: no stored trial lies inside its time range "
                          "(are the clocks synchronised? trials need schema 6: launched_at)")
    store.write_part(results, "energy", records, f"energy-{name}")
    if as_json:
        rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in vars(r).items() if k != "joined_at"} for r in records]
        click.echo(json.dumps({"joined": len(rows), "records": rows}, indent=2))
        return
    valid = sum(r.energy_valid for r in records)
    click.echo(f"joined {len(records)} trial(s) to {csv_file} ({valid} with an energy figure)")


COMMANDS = [energy]
