"""From probe records to the doctor's answer: which source serves each measurement, its
fallback, what is lost, and the warnings about what would make results wrong or noisy.

Pure: the same records give the same report, whether they came from a phone just now or from a
capture's ``probes.jsonl``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.android.thermal import parse_thermalservice
from harness.device.base import parse_df_available_kb
from harness.doctor.backends import backends_json
from harness.doctor.probe import ProbeRecord
from harness.doctor.sources import BY_ID, MEASUREMENTS, Measurement
from harness.engines.devices import Capability as BuildDevices
from harness.matrix import Requirements
from harness.run.preflight import preflight_from_output, unmet_requirement
from harness.run.probe import MARK
from harness.units import GIB, KIB

SCHEMA_VERSION = 1
LOW_STORAGE_KB = 2 * GIB // KIB  # under 2 GiB free, a model and a build may not fit
HOT_STATUS = 2  # MODERATE: phones cap clocks from here on
SHELL_DENIAL = "scontext=u:r:shell:s0"

OK, CHANGES_RESULTS = 0, 1


@dataclass(frozen=True)
class Refusal:
    source: str
    error: str
    detail: str


@dataclass(frozen=True)
class Capability:
    """One row: a measurement, the source serving it, its fallback, and what is lost."""

    measurement: str
    source: str | None  # the serving source's id; None: lost
    gives: str | None
    fallback: str | None
    lost: str | None
    refused: tuple[Refusal, ...] = ()  # preferred sources that did not answer usably
    changes_results: bool = False

    @property
    def usable(self) -> bool:
        return self.source is not None

    @property
    def refusals(self) -> str:
        """``gpu.kgsl ENOENT; gpu.memtrack unusable``: the preferred sources that did not serve."""
        return "; ".join(f"{r.source} {r.error}" for r in self.refused)


@dataclass(frozen=True)
class Diagnosis:
    serial: str
    facts: Mapping[str, Any]
    capabilities: tuple[Capability, ...]
    warnings: tuple[str, ...]
    probes: tuple[ProbeRecord, ...] = field(default=())
    backends: BuildDevices | None = None  # what --build's --list-devices said

    @property
    def exit_code(self) -> int:
        return CHANGES_RESULTS if self.warnings else OK

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "serial": self.serial,
            "facts": dict(self.facts),
            "capabilities": [asdict(c) for c in self.capabilities],
            "warnings": list(self.warnings),
            "probes": [p.to_json() for p in self.probes],
            "backends": None if self.backends is None else backends_json(self.backends),
            "exit": self.exit_code,
        }


def capability(measurement: Measurement, records: Mapping[str, ProbeRecord]) -> Capability:
    working = [sid for sid in measurement.sources
               if sid in records and records[sid].error == "ok"]
    refused: list[Refusal] = []
    for sid in measurement.sources:
        if working and sid == working[0]:
            break
        record = records.get(sid)
        if record is not None and record.error != "ok":
            refused.append(Refusal(sid, record.error, record.detail))
    if not working:
        return Capability(measurement.name, None, None, None, measurement.lost,
                          tuple(refused), measurement.changes_results)
    serving = working[0]
    return Capability(measurement.name, serving, BY_ID[serving].gives,
                      working[1] if len(working) > 1 else None, None, tuple(refused),
                      measurement.changes_results)


def _stdout(records: Mapping[str, ProbeRecord], sid: str) -> str:
    record = records.get(sid)
    return record.stdout if record is not None and record.error == "ok" else ""


def preflight_text(records: Mapping[str, ProbeRecord]) -> str:
    """The probes' answers laid out as the pre-flight read's sections, so the doctor reads the
    phone's power state with the very parser each trial uses."""
    sections = {"power": "power", "battery": "battery", "low_power": "battery_saver",
                "deep": "doze", "stay_on": "stay_on"}
    return "\n".join(f"{MARK}{name}\n{_stdout(records, sid)}" for name, sid in sections.items())


def warnings(records: Mapping[str, ProbeRecord], capabilities: Sequence[Capability],
             require: Requirements | None = None) -> list[str]:
    """What would make results wrong or noisy on this phone, one line each."""
    found: list[str] = []
    state = preflight_from_output(preflight_text(records))
    if state.battery_saver:
        found.append("battery saver is on: it caps clocks; turn it off "
                     "(settings put global low_power 0)")
    if state.dozing:
        found.append(f"the phone is in Doze ({state.doze_state}): wake it and keep it awake "
                     "(Developer options > Stay awake)")
    thermal = parse_thermalservice(_stdout(records, "thermal.hal"))
    if thermal is not None and thermal.status is not None and thermal.status >= HOT_STATUS:
        found.append(f"thermal status is {thermal.status} ({thermal.status_name}): the phone "
                     "is throttling; let it cool before measuring")
    free_kb = parse_df_available_kb(_stdout(records, "storage"))
    if free_kb is not None and free_kb < LOW_STORAGE_KB:
        found.append(f"low storage: {free_kb // 1024} MiB free in /data/local/tmp; models and "
                     "builds need room (free some, or use a smaller matrix)")
    if require is not None:
        unmet = unmet_requirement(require, state)
        if unmet is not None:
            found.append(f"{unmet}: every trial would be skipped as precondition_failed")
    denials = [line for line in _stdout(records, "selinux_denials").splitlines()
               if "avc:" in line and SHELL_DENIAL in line]
    if denials:
        first = " ".join(denials[0][denials[0].index("avc:"):].split())
        found.append(f"{len(denials)} SELinux denials of the shell in logcat: a read the "
                     f"harness needs may be refused (first: {first[:200]})")
    for row in capabilities:
        if not row.usable and row.changes_results:
            found.append(f"{row.measurement} cannot be read: {row.lost}")
    return found


def diagnose(serial: str, facts: Mapping[str, Any], probes: Sequence[ProbeRecord],
             require: Requirements | None = None,
             backends: BuildDevices | None = None) -> Diagnosis:
    records = {record.id: record for record in probes}
    rows = tuple(capability(m, records) for m in MEASUREMENTS)
    said = warnings(records, rows, require)
    if backends is not None and backends.unknown is not None:
        said.append(f"build {backends.build} could not list its devices here: "
                    f"{backends.unknown}")
    return Diagnosis(serial, facts, rows, tuple(said), tuple(probes), backends)
