"""``harness devices``: the attached devices and what they are."""

from __future__ import annotations

import dataclasses
import json

import click
from rich.console import Console
from rich.table import Table

from harness.device import Device, DeviceFacts, LocalDevice, list_devices
from harness.errors import DeviceError
from harness.units import GIB, KIB


def _gib(kb: int | None) -> str:
    return f"{kb * KIB / GIB:.1f}" if kb is not None else "-"


def _collect(devices: list[Device]) -> list[tuple[str, DeviceFacts | None, str | None]]:
    rows: list[tuple[str, DeviceFacts | None, str | None]] = []
    for device in devices:
        try:
            rows.append((device.serial, device.facts(), None))
        except DeviceError as error:  # one broken phone must not hide the others
            rows.append((device.serial, None, str(error)))
    return rows


@click.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list for scripts.")
@click.option("--local", "include_local", is_flag=True,
              help="Also list this host as the device 'local'.")
def devices_command(as_json: bool, include_local: bool) -> None:
    """List attached devices (adb server of ANDROID_ADB_SERVER_PORT) with their facts.

    \b
    Example:
      harness devices
      harness devices --json | jq '.[].model'
    """
    devices = list_devices()
    if include_local:
        devices.append(LocalDevice())
    rows = _collect(devices)
    if as_json:
        click.echo(json.dumps([
            {**dataclasses.asdict(facts), "big_cpus": list(facts.big_cpus)} if facts
            else {"serial": serial, "error": error}
            for serial, facts, error in rows
        ], indent=2))
        return
    if not rows:
        click.echo("No devices attached (start virtual phones with `harness sim start`).")
        return
    table = Table("serial", "model", "manufacturer", "SoC", "Android", "ABI", "RAM GiB",
                  "free GiB", "cores", "storage GiB")
    for serial, facts, error in rows:
        if facts is None:
            table.add_row(serial, f"[red]{error}[/red]")
            continue
        android = (f"{facts.android_release} (SDK {facts.android_sdk})"
                   if facts.android_release else "-")
        cores = f"{facts.cpu_count} ({facts.cpu_layout})" if facts.cpu_count else "-"
        table.add_row(serial, facts.model or "-", facts.manufacturer or "-", facts.soc or "-",
                      android, facts.abi or "-", _gib(facts.total_ram_kb),
                      _gib(facts.available_ram_kb), cores, _gib(facts.free_storage_kb))
    Console(width=160).print(table)


COMMANDS: list[click.Command] = [devices_command]
