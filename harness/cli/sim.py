"""`harness sim`: start, stop, list, wipe and inject faults into virtual phones."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from harness.virtual.config import MEMORY_MODEL_CHOICES
from harness.virtual.control import (
    DEFAULT_PROFILE,
    PhoneInfo,
    fault_state,
    list_phones,
    set_fault,
    start_phones,
    stop_phones,
    wipe_phones,
)
from harness.virtual.phone import FAULT_KINDS


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
@click.option("--profile", default=DEFAULT_PROFILE, show_default=True,
              help="Device profile name (devices/*.yaml) or path to a profile YAML.")
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
def start(profile: str, count: int, ram_mb: int | None, storage_mb: int | None,
          abi: str | None, shell: str, memory_model: str, storage_mb_s: float | None,
          as_json: bool) -> None:
    """Start phones and connect them to the adb server (ANDROID_ADB_SERVER_PORT, default 5037).

    The phone's shell is mksh with toybox applets, as on Android.

    \b
    Example:
      harness sim start --profile flagship-16gb --count 4 --json
      harness sim start --abi x86_64 --count 2      # runs host builds of llama.cpp
      harness sim start --profile small-2gb-emmc --ram-mb 128 --storage-mb-s 100
    """
    phones = start_phones(profile, count, ram_mb=ram_mb, storage_mb=storage_mb, abi=abi,
                          shell=shell, memory_model=memory_model, storage_mb_s=storage_mb_s)
    if as_json:
        click.echo(json.dumps([asdict(p) for p in phones], indent=2))
        return
    for phone in phones:
        click.echo(phone.serial)


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
        rows = [{**asdict(p), "faults": fault_state(p) if p.running else {}} for p in phones]
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


def _memory_words(phone: PhoneInfo) -> str:
    """How a running phone's memory and storage are modelled, and why when not by the kernel."""
    if not phone.running or not phone.memory_model:
        return ""
    words = f"  memory: {phone.memory_model}"
    if phone.memory_note:
        words += f" ({phone.memory_note})"
    if phone.storage_read_mb_s is not None:
        words += f"  storage: {phone.storage_read_mb_s:g} MB/s"
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
