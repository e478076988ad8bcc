"""`harness sim`: start, stop, list, wipe and inject faults into virtual phones."""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
import yaml

from harness.device import get_device
from harness.doctor.capture import read_bundle, read_profile
from harness.doctor.probe import ProbeRecord, run_probe
from harness.doctor.replay import UNREPLAYABLE, differences, replay_profile
from harness.doctor.sources import BY_ID
from harness.virtual.config import MEMORY_MODEL_CHOICES
from harness.virtual.control import (
    DEFAULT_PROFILE,
    PhoneInfo,
    fault_state,
    list_phones,
    set_fault,
    sim_home,
    start_phones,
    stop_phones,
    wipe_phones,
)
from harness.virtual.phone import FAULT_KINDS

CAPTURE_NOTE = "capture.json"  # in a replaying phone's state: the capture and what differs

@click.group("sim")
def sim() -> None:
    """Virtual phones: real ADB devices served from a sandbox on this host.

    \b
    Example:
      harness sim start --profile budget-4gb --count 2
      adb devices -l
      harness sim stop --all
    """


@sim.command("start")
@click.option("--profile", default=None,
              help=f"Device profile name (devices/*.yaml) or path to a profile YAML "
                   f"[default: {DEFAULT_PROFILE}].")
@click.option("--from-capture", "capture", type=click.Path(path_type=Path), default=None,
              help="Start phones that answer as the phone of this capture (harness capture): "
                   "its props, RAM, clusters, refused paths and unmodelled services.")
@click.option("--count", default=1, show_default=True, type=int, help="Number of phones.")
@click.option("--ram-mb", type=int, default=None,
              help="Memory the low-memory killer allows (default: the profile's available_mb).")
@click.option("--storage-mb", type=int, default=None,
              help="Size of the virtual disk (default: the profile's storage_free_mb).")
@click.option("--abi", type=click.Choice(["arm64-v8a", "x86_64"]), default=None,
              help="CPU ABI (default: the profile's). x86_64 runs host builds natively; an ABI "
                   "other than the host's runs its binaries in qemu-user, marked as emulated.")
@click.option("--shell", "shell", type=click.Choice(["mksh", "dash"]), default="mksh",
              show_default=True, help="The phone's /system/bin/sh (Android's is mksh).")
@click.option("--memory-model", type=click.Choice(MEMORY_MODEL_CHOICES), default="auto",
              show_default=True,
              help="cgroup: the host kernel enforces the phone's memory (page cache reclaimed, "
                   "mmap'd files paged from throttled storage; needs root and cgroup v1); "
                   "simulated: every resident page counts; auto: cgroup where possible.")
@click.option("--storage-mb-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Storage read speed in MB/s (default: the profile's storage.read_mb_s); "
                   "no faster than this host's disk.")
@click.option("--json", "as_json", is_flag=True, help="Print the phones as JSON.")
def start(profile: str | None, capture: Path | None, count: int, ram_mb: int | None,
          storage_mb: int | None, abi: str | None, shell: str, memory_model: str,
          storage_mb_s: float | None, as_json: bool) -> None:
    """Start phones and connect them to the adb server (ANDROID_ADB_SERVER_PORT, default 5037).

    The phone's shell is mksh with toybox applets, as on Android.

    \b
    Example:
      harness sim start --profile flagship-16gb --count 4 --json
      harness sim start --abi x86_64 --count 2      # runs host builds of llama.cpp
      harness sim start --profile small-2gb-emmc --ram-mb 128 --storage-mb-s 100
      harness sim start --from-capture a54.zip --abi x86_64
    """
    if capture is not None and profile is not None:
        raise click.UsageError("give --profile or --from-capture, not both")
    captured = None
    if capture is not None:
        captured, profile = _capture_profile(capture)
    phones = start_phones(profile or DEFAULT_PROFILE, count, ram_mb=ram_mb,
                          storage_mb=storage_mb, abi=abi, shell=shell,
                          memory_model=memory_model, storage_mb_s=storage_mb_s)
    if capture is not None and captured is not None:
        for phone in phones:
            _note_differences(phone, capture, captured)
    if as_json:
        click.echo(json.dumps([asdict(p) for p in phones], indent=2))
        return
    for phone in phones:
        click.echo(phone.serial)


def _capture_profile(capture: Path) -> tuple[list[ProbeRecord], str]:
    """The capture's records, and the path of the replay profile written for it."""
    _, records = read_bundle(capture)
    profile = replay_profile(read_profile(capture), records)
    folder = sim_home() / "captures"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{profile.get('name') or 'captured'}.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return records, str(path)


def _note_differences(phone: PhoneInfo, capture: Path, captured: list[ProbeRecord]) -> None:
    """Ask the new phone what it cannot replay; keep the differences for `sim status`."""
    device = get_device(phone.serial)
    here = [run_probe(device, BY_ID[sid], 0) for sid in UNREPLAYABLE]
    said = differences(captured, here, platform.release())
    (phone.sandbox.state / CAPTURE_NOTE).write_text(json.dumps(
        {"capture": str(capture.absolute()), "differs": said}, indent=2))
    for line in said:
        click.echo(f"{phone.serial}: differs from the capture: {line}", err=True)


def _capture_note(phone: PhoneInfo) -> dict[str, Any]:
    try:
        data = json.loads((phone.sandbox.state / CAPTURE_NOTE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@sim.command("stop")
@click.argument("serials", nargs=-1)
@click.option("--all", "stop_all", is_flag=True, help="Stop every running virtual phone.")
def stop(serials: tuple[str, ...], stop_all: bool) -> None:
    """Disconnect phones from adb and stop them (their storage is kept).

    \b
    Example:
      harness sim stop 127.0.0.1:40123
      harness sim stop --all
    """
    if not serials and not stop_all:
        raise click.UsageError("name a SERIAL or pass --all")
    stopped = stop_phones(None if stop_all else list(serials))
    for phone in stopped:
        click.echo(f"stopped {phone.serial} ({phone.name})")


@sim.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the phones as JSON.")
def status(as_json: bool) -> None:
    """List virtual phones, running or stopped, with their faults.

    \b
    Example:
      harness sim status --json
    """
    phones = list_phones()
    if as_json:
        rows = [{**asdict(p), "faults": fault_state(p) if p.running else {},
                 "capture": _capture_note(p) or None} for p in phones]
        click.echo(json.dumps(rows, indent=2))
        return
    if not phones:
        click.echo("no virtual phones (start one with: harness sim start)")
    for phone in phones:
        state = f"running pid {phone.pid}" if phone.running else "stopped"
        if phone.stopped_why:
            state += f": {phone.stopped_why}"
        click.echo(f"{phone.serial or '-':<22} {phone.name:<22} {phone.model:<14} {state}"
                   f"{_memory_words(phone)}")
        note = _capture_note(phone)
        if note:
            click.echo(f"  replays {note.get('capture')}")
        for line in note.get("differs", []):
            click.echo(f"  differs from the capture: {line}")


def _memory_words(phone: PhoneInfo) -> str:
    """How a running phone's memory and storage are modelled, and why when not by the kernel."""
    if not phone.running or not phone.memory_model:
        return ""
    words = f"  memory: {phone.memory_model}"
    if phone.memory_note:
        words += f" ({phone.memory_note})"
    if phone.storage_read_mb_s is not None:
        words += f"  storage: {phone.storage_read_mb_s:g} MB/s"
        if phone.storage_read_iops is not None:
            words += f", {phone.storage_read_iops} reads/s"
    elif phone.storage_read_iops is not None:
        words += f"  storage: {phone.storage_read_iops} reads/s"
    elif phone.storage_note:
        words += f"  storage: {phone.storage_note}"
    if phone.readahead_kb is not None:
        words += f", own disk (readahead {phone.readahead_kb} KB)"
    elif phone.disk_note:
        words += f", {phone.disk_note}"
    if phone.cpu_note:
        words += f"  cpu: {phone.cpu_note}"
    return words


@sim.command("wipe")
@click.argument("phones", nargs=-1)
@click.option("--all", "wipe_all", is_flag=True, help="Wipe every stopped virtual phone.")
def wipe(phones: tuple[str, ...], wipe_all: bool) -> None:
    """Delete the storage of stopped phones (by serial or slot name).

    \b
    Example:
      harness sim wipe midrange-8gb-1
      harness sim wipe --all
    """
    if not phones and not wipe_all:
        raise click.UsageError("name a SERIAL or slot, or pass --all")
    for phone in wipe_phones(None if wipe_all else list(phones)):
        click.echo(f"wiped {phone.name}")


@sim.command("fault")
@click.argument("serial")
@click.argument("kind", type=click.Choice(FAULT_KINDS))
@click.argument("value", required=False)
def fault(serial: str, kind: str, value: str | None) -> None:
    """Inject a fault: drop [SECONDS], hang, crash (next command), disk-full, disk-ok,
    thermal STATUS (0..6), thermal-release, battery-saver on|off, charging none|usb|ac,
    screen on|off, doze ACTIVE|IDLE (or another deviceidle state), clear (every fault off,
    power as the profile sets it).

    \b
    Example:
      harness sim fault 127.0.0.1:40123 thermal 4
      harness sim fault 127.0.0.1:40123 crash
      harness sim fault 127.0.0.1:40123 charging none
    """
    set_fault(serial, kind, value)
    click.echo(f"{serial}: {kind}{' ' + value if value else ''}")


COMMANDS: list[click.Command] = [sim]
