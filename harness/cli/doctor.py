"""``harness doctor``: the first command to run on a new phone.

It probes every source the harness reads (``harness.doctor.sources``), one shell round trip
each, and prints which source will serve each measurement, its fallback, and what is lost; then
the warnings about what would make results wrong or noisy. Exit 0 when all is usable, 1 when
something changes results, 2 on bad input.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from harness.artifacts.builds import Build, builds_root, open_build
from harness.device import Device, get_device, list_devices
from harness.doctor.backends import build_backends
from harness.doctor.capture import bundle, write_bundle
from harness.doctor.probe import probe_all
from harness.doctor.report import Diagnosis, diagnose
from harness.doctor.scrub import scrub
from harness.doctor.texts import members as text_members
from harness.doctor.texts import read_texts
from harness.errors import DeviceError
from harness.matrix import Requirements, load_matrix


def _facts(device: Device) -> tuple[dict[str, str | int | None], int]:
    """The facts shown with the table, and the big core the clock probes read."""
    facts = device.facts()
    shown = {"model": facts.model, "manufacturer": facts.manufacturer, "soc": facts.soc,
             "android_release": facts.android_release, "android_sdk": facts.android_sdk,
             "abi": facts.abi, "total_ram_kb": facts.total_ram_kb,
             "cpu_layout": facts.cpu_layout}
    return shown, (facts.big_cpus[0] if facts.big_cpus else 0)


def examine(device: Device, require: Requirements | None, build: Build | None = None,
            console: Console | None = None) -> Diagnosis:
    facts, cpu = _facts(device)
    if console is None:
        probes = probe_all(device, cpu)
    else:
        with console.status(f"{device.serial}: probing") as status:
            probes = probe_all(device, cpu, progress=lambda source: status.update(
                f"{device.serial}: probing {source.id}"))
    backends = None
    if build is not None:
        if console is not None:
            console.print(f"{device.serial}: pushing {build.name} and asking its devices")
        backends = build_backends(device, build)
    return diagnose(device.serial, facts, probes, require, backends)


def render(diagnosis: Diagnosis, console: Console) -> None:
    facts = diagnosis.facts
    console.print(f"[bold]{diagnosis.serial}[/bold]: {facts.get('manufacturer') or '?'} "
                  f"{facts.get('model') or '?'}, Android {facts.get('android_release') or '?'}"
                  f", {facts.get('soc') or '?'}")
    table = Table("measurement", "source", "fallback", "lost / refused")
    for row in diagnosis.capabilities:
        refused = row.refusals
        if row.usable:
            source = f"{row.source}: {row.gives}"
            lost = f"[dim]{refused}[/dim]" if refused else ""
        else:
            source = "[red]none[/red]"
            lost = f"[red]{row.lost}[/red]" + (f" ({refused})" if refused else "")
        table.add_row(row.measurement, source, row.fallback or "-", lost)
    console.print(table)
    if diagnosis.backends is not None:
        found = diagnosis.backends
        listed = ", ".join(f"{d.name} ({d.description})" for d in found.devices)
        said = found.unknown or (f"CPU, {listed}" if listed else "CPU only")
        console.print(f"backends of build {found.build} on this phone: {said}")
    for warning in diagnosis.warnings:
        console.print(f"[yellow]warning[/yellow]: {warning}")
    if not diagnosis.warnings:
        console.print("[green]all usable[/green]: nothing found that changes results")


def _devices(serial: str | None, every: str | None) -> list[Device]:
    if serial is not None and every is not None:
        raise click.UsageError("give --serial or --devices all, not both")
    if every is not None:
        found = list_devices()
        if not found:
            raise DeviceError("no devices attached (harness devices lists them; start virtual "
                              "phones with `harness sim start`)")
        return found
    if serial is not None:
        return [get_device(serial)]
    found = list_devices()
    if len(found) != 1:
        raise DeviceError(f"{len(found)} devices attached: name one with --serial S, or use "
                          "--devices all")
    return found


@click.command("doctor")
@click.option("--serial", default=None, help="The phone to examine (harness devices lists them).")
@click.option("--devices", "every", type=click.Choice(["all"]), default=None,
              help="Examine every attached phone.")
@click.option("--matrix", "matrix_path", type=click.Path(path_type=Path), default=None,
              help="Also check the phone meets this matrix's `require:` (charging, screen...).")
@click.option("--build", "build_name", default=None,
              help="Push this build (harness build list) and show which backends it can run "
                   "here: CPU, Vulkan, OpenCL, Hexagon (its --list-devices).")
@click.option("--builds", type=click.Path(path_type=Path), default=None,
              help="Builds root (default $HARNESS_BUILDS or ./builds).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the diagnoses as JSON (docs/schemas/doctor.schema.json).")
def doctor_command(serial: str | None, every: str | None, matrix_path: Path | None,
                   build_name: str | None, builds: Path | None, as_json: bool) -> None:
    """Probe everything the harness reads on a phone: which source serves each measurement,
    its fallback, what is lost, and what would make results wrong or noisy.

    Exit 0 when all is usable, 1 when something changes results, 2 on bad input.

    \b
    Example:
      harness doctor --serial emulator-5554
      harness doctor --devices all --matrix matrices/smoke.yaml --json | jq '.[].warnings'
      harness doctor --serial emulator-5554 --build android-vulkan
    """
    require = load_matrix(matrix_path).require if matrix_path is not None else None
    build = open_build(builds_root(builds), build_name) if build_name is not None else None
    devices = _devices(serial, every)
    console = Console(width=160, stderr=as_json)
    diagnoses = [examine(device, require, build, None if as_json else console)
                 for device in devices]
    if as_json:
        click.echo(json.dumps([d.to_json() for d in diagnoses], indent=2))
    else:
        for diagnosis in diagnoses:
            render(diagnosis, console)
    click.get_current_context().exit(max(d.exit_code for d in diagnoses))


@click.command("capture")
@click.option("--serial", default=None, help="The phone to capture (harness devices lists them).")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="The bundle to write (a .zip).")
@click.option("--name", default=None,
              help="The derived profile's name (default: the phone's model, as a slug).")
@click.option("--from-texts", "texts", type=click.Path(path_type=Path, file_okay=False),
              default=None,
              help="Instead of a phone: a folder of its published answers, one "
                   "<probe id>.txt each (first line '# SOURCE: ...') and a phone.yaml "
                   "(docs/real-phones.md).")
def capture_command(serial: str | None, output: Path, name: str | None,
                    texts: Path | None) -> None:
    """Capture a phone as a shareable bundle: the doctor's probes, scrubbed of what identifies
    the phone or its owner, with its capability table and a derived virtual-phone profile.

    Only allowlisted properties are kept; serials, IMEIs, MAC and IP addresses, e-mail
    addresses, UUIDs and third-party package names are replaced by pseudonyms before anything
    is written. The scrub report is printed.

    With --from-texts, a phone nobody here can plug in: its answers as published (a bug
    report, another project's fixtures) make the bundle, each text's source kept in the
    manifest; probes without a text are left out.

    \b
    Example:
      harness capture --serial R5CT1234ABC -o a54.zip
      unzip -p a54.zip capabilities.md
      harness capture --from-texts captures/public/qualcomm-throttling -o throttling.zip
    """
    if output.suffix != ".zip":
        raise click.BadParameter(f"{output}: the bundle must be a .zip", param_hint="-o")
    if not output.parent.is_dir():
        raise DeviceError(f"{output.parent}: no such folder for the bundle")
    if texts is not None:
        if serial is not None:
            raise click.UsageError("--serial or --from-texts, not both")
        phone = read_texts(texts)
        members = text_members(phone, datetime.date.today())
        write_bundle(members, output)
        click.echo(f"{output}: {len(phone.records)} probes from published texts "
                   f"({phone.name}; each text's source in manifest.json)")
        return
    (device,) = _devices(serial, None)
    facts, cpu = _facts(device)
    console = Console(width=160, stderr=True)
    with console.status(f"{device.serial}: probing"):
        raw = probe_all(device, cpu)
    records, report = scrub(raw, device.serial)
    diagnosis = diagnose("captured", facts, records)
    slug = re.sub(r"[^a-z0-9]+", "-", str(facts.get("model") or "phone").lower()).strip("-")
    members = bundle(records, diagnosis, report, name or slug or "phone", datetime.date.today())
    write_bundle(members, output)
    for line in report.lines():
        click.echo(f"scrubbed: {line}")
    click.echo(f"{output}: {len(records)} probes, {len(diagnosis.warnings)} warnings")


COMMANDS: list[click.Command] = [doctor_command, capture_command]
