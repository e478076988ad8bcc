"""A phone's prepared state on its farm worker, kept from one run to the next.

Preparing a phone for a run costs seconds of the phone's own CPU: its facts, the sha256 of every
build and model file already on it (computed on the phone, to push only what is missing), and
the probes (each build's ``--list-devices``, the memory bandwidth, the output checks). A farm
worker serves one phone, so it keeps that state for the phone's serial and hands it to the first
job of every later run, after one round trip that checks it still holds:

- the phone's boot id: a phone that rebooted is prepared again from nothing;
- each file recorded as verified: its size, mtime, ctime and inode (``stat``) as they were when
  its sha256 was checked or it was pushed. A file missing or changed (a wiped phone, a hand-made
  edit) is checksummed again, and pushed when it no longer matches;
- the live facts (available memory, free storage) are read in the same round trip.

Probes are reused per build content (``harness.run.worker.Probed``), never across a reboot.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.android import parse_proc_meminfo
from harness.android.kernel import parse_boot_id
from harness.device.adb import DEVICE_TMP
from harness.device.base import Device, DeviceFacts, parse_df_available_kb
from harness.errors import DeviceError
from harness.run.preflight import BOOT_ID
from harness.run.probe import MARK, split_sections
from harness.run.worker import Probed

STAT_FORMAT = "%s %Y %Z %i"  # size, mtime, ctime, inode: any rewrite or replacement changes one


@dataclass(frozen=True)
class Check:
    """One round trip's answer: the boot, the live facts and each recorded file's stamp."""

    boot_id: str | None
    available_ram_kb: int | None
    total_ram_kb: int | None
    free_storage_kb: int | None
    stamps: Mapping[str, str]  # path -> its stat line; a path that is gone is absent


@dataclass
class PhoneState:
    """What the worker knows of its phone while the phone keeps ``boot_id``."""

    serial: str
    boot_id: str
    facts: DeviceFacts
    files: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (sha256, stamp)
    probed: Probed | None = None
    valid: dict[str, str] = field(default_factory=dict)  # path -> sha256, as of the last check


def _stat_loop(paths: Sequence[str]) -> str:
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (f"i=0; for f in {quoted}; do s=$(stat -c {shlex.quote(STAT_FORMAT)} \"$f\" "
            "2>/dev/null) && echo \"$i $s\"; i=$((i+1)); done; true")


def check_command(paths: Sequence[str]) -> str:
    """The one shell command behind ``Check`` (paths by position: a sandbox may rename them)."""
    parts = [f"echo {MARK}boot_id", f"cat {BOOT_ID}", f"echo {MARK}meminfo", "cat /proc/meminfo",
             f"echo {MARK}df", f"df -k {shlex.quote(DEVICE_TMP)}"]
    if paths:
        parts += [f"echo {MARK}stat", _stat_loop(paths)]
    return "; ".join(parts) + "; true"


def parse_stamps(text: str, paths: Sequence[str]) -> dict[str, str]:
    """``index size mtime ctime inode`` lines -> path -> stamp (pure)."""
    stamps: dict[str, str] = {}
    for line in text.splitlines():
        index, _, stamp = line.strip().partition(" ")
        if index.isdigit() and int(index) < len(paths) and len(stamp.split()) == 4:
            stamps[paths[int(index)]] = stamp
    return stamps


def parse_check(text: str, paths: Sequence[str]) -> Check:
    """The answer of ``check_command(paths)`` (pure)."""
    found = split_sections(text)
    memory = parse_proc_meminfo(found.get("meminfo", ""))
    return Check(boot_id=parse_boot_id(found.get("boot_id", "")),
                 available_ram_kb=memory.mem_available_kb if memory else None,
                 total_ram_kb=memory.mem_total_kb if memory else None,
                 free_storage_kb=parse_df_available_kb(found.get("df", "")),
                 stamps=parse_stamps(found.get("stat", ""), paths))


def still_valid(files: Mapping[str, tuple[str, str]], stamps: Mapping[str, str]
                ) -> dict[str, str]:
    """The recorded files whose stamp is unchanged: path -> sha256 (pure)."""
    return {path: sha for path, (sha, stamp) in files.items() if stamps.get(path) == stamp}


def live_facts(facts: DeviceFacts, check: Check) -> DeviceFacts:
    """The kept facts with this round trip's memory and storage (pure)."""
    return dataclasses.replace(facts, available_ram_kb=check.available_ram_kb,
                               total_ram_kb=check.total_ram_kb or facts.total_ram_kb,
                               free_storage_kb=check.free_storage_kb)


def revalidate(device: Device, kept: PhoneState | None) -> tuple[PhoneState, DeviceFacts]:
    """The phone's state for a new run, and its facts: ``kept`` when the phone kept its boot
    (with the files that are unchanged), else a new one from the phone's full facts."""
    paths = sorted(kept.files) if kept is not None else []
    check = parse_check(device.shell(check_command(paths), timeout=60).stdout, paths)
    if kept is not None and check.boot_id is not None and check.boot_id == kept.boot_id:
        kept.valid = still_valid(kept.files, check.stamps)
        kept.files = {p: kept.files[p] for p in kept.valid}
        return kept, live_facts(kept.facts, check)
    facts = device.facts()
    return PhoneState(device.serial, check.boot_id or "", facts), facts


class StateLedger:
    """``harness.run.deploy.Ledger`` over a ``PhoneState``: vouches for its valid files and
    records the stamps of files just verified or pushed (one round trip)."""

    def __init__(self, device: Device, state: PhoneState) -> None:
        self.device = device
        self.state = state

    def known(self, paths: Sequence[str]) -> dict[str, str]:
        if not self.state.boot_id:  # no boot id to tell a reboot by: vouch for nothing
            return {}
        return {p: self.state.valid[p] for p in paths if p in self.state.valid}

    def verified(self, sums: Mapping[str, str]) -> None:
        if not sums or not self.state.boot_id:
            return
        paths = sorted(sums)
        try:
            result = self.device.shell(_stat_loop(paths), timeout=60)
        except DeviceError:  # nothing recorded: the next run checksums these again
            return
        for path, stamp in parse_stamps(result.stdout, paths).items():
            self.state.files[path] = (sums[path], stamp)
            self.state.valid[path] = sums[path]
