"""Sending the doctor's probes to a phone: one shell round trip per source, stdout, stderr and
exit kept apart (phones differ mostly in stderr and exit).

``classify`` (pure) turns one answer into an error class: ``ok``, ``EACCES``, ``ENOENT``,
``not found`` (no such command or service), ``timeout``, ``unusable`` (it answered, but not
with what the harness reads: a thermal HAL that is not ready) or ``error``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from harness.device.base import Device
from harness.doctor.sources import SOURCES, Check, Source
from harness.errors import DeviceTimeoutError

ERROR_CLASSES = ("ok", "EACCES", "ENOENT", "not found", "timeout", "unusable", "error")
PROBE_TIMEOUT_S = 30.0
_NOT_FOUND = ("not found", "Can't find service", "inaccessible or not found", "Unknown command")


@dataclass(frozen=True)
class ProbeRecord:
    """One probe's answer (a line of a capture's ``probes.jsonl``)."""

    id: str
    command: str
    exit: int | None  # None: it timed out
    stdout: str
    stderr: str
    error: str  # one of ERROR_CLASSES
    detail: str  # why it is not ok, one line ("" when ok)
    ms: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeRecord:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__})


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def classify(exit_code: int, stdout: str, stderr: str,
             check: Check | None = None) -> tuple[str, str]:
    """``(error class, detail)`` of one answer.

    A usable answer is ``ok`` even when part of it was refused (a zone of many denied): the
    detail names the first refusal. Otherwise the refusal decides: EACCES, ENOENT, no such
    command or service, another failure, or an answer the harness cannot read.
    """
    if _first_line(stdout).startswith("Permission Denial"):  # a service refusing to dump
        return "EACCES", _first_line(stdout)
    reason = check(stdout) if check is not None else (
        None if stdout.strip() else "empty answer")
    if reason is None and (exit_code == 0 or stdout.strip()):
        return "ok", _first_line(stderr)
    said = f"{stderr}\n{stdout}"
    for marker, error in (("Permission den", "EACCES"), ("Operation not permitted", "EACCES"),
                          ("No such file or directory", "ENOENT")):
        line = next((line.strip() for line in said.splitlines() if marker in line), None)
        if line is not None:
            return error, line
    if exit_code == 127 or any(marker in said for marker in _NOT_FOUND):
        return "not found", _first_line(said) or f"exit {exit_code}"
    if exit_code != 0:
        return "error", _first_line(said) or f"exit {exit_code}"
    return "unusable", reason or "empty answer"


def run_probe(device: Device, source: Source, cpu: int,
              timeout_s: float = PROBE_TIMEOUT_S) -> ProbeRecord:
    command = source.probe_command(cpu)
    start = time.monotonic()
    try:
        result = device.shell(command, timeout=timeout_s)
    except DeviceTimeoutError as late:
        ms = int((time.monotonic() - start) * 1000)
        return ProbeRecord(source.id, command, None, "", "", "timeout", str(late), ms)
    ms = int((time.monotonic() - start) * 1000)
    error, detail = classify(result.exit_code, result.stdout, result.stderr, source.check)
    return ProbeRecord(source.id, command, result.exit_code, result.stdout, result.stderr,
                       error, detail, ms)


def probe_all(device: Device, cpu: int, sources: Iterable[Source] = SOURCES,
              progress: Callable[[Source], None] | None = None) -> list[ProbeRecord]:
    """Every source's probe, in order (a lost device raises ``DeviceLostError``)."""
    records = []
    for source in sources:
        if progress is not None:
            progress(source)
        records.append(run_probe(device, source, cpu))
    return records
