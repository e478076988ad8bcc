"""A phone as a shareable bundle (``harness capture``): the doctor's probes, scrubbed.

The zip holds ``manifest.json`` (schema, harness version, the date only, probe ids, the scrub
report, each member's sha256), ``probes.jsonl`` (one scrubbed ``ProbeRecord`` a line),
``capabilities.md`` (the doctor's table) and ``profile.yaml`` (a virtual-phone profile derived
from the answers: props, RAM, storage, CPU clusters). ``bundle`` is pure; ``write_bundle`` and
``read_bundle`` are the edges, and reading refuses what is not a capture in one line.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness import __version__
from harness.android import parse_getprop, parse_head_dump, parse_proc_meminfo, read_cpu_topology
from harness.device.base import parse_df_available_kb
from harness.doctor.probe import ProbeRecord
from harness.doctor.report import Diagnosis
from harness.doctor.scrub import ScrubReport
from harness.errors import ConfigError
from harness.profiles import REQUIRED_PROPS

CAPTURE_SCHEMA = 1
MEMBERS = ("manifest.json", "probes.jsonl", "capabilities.md", "profile.yaml")
_MIN_FREQ = re.compile(r"/cpu(\d+)/cpufreq/cpuinfo_min_freq$")
_PART = re.compile(r"^CPU part\s*:\s*(0x[0-9a-fA-F]+)", re.MULTILINE)


def capabilities_markdown(diagnosis: Diagnosis) -> str:
    facts = diagnosis.facts
    lines = [f"# {facts.get('manufacturer') or '?'} {facts.get('model') or '?'}, Android "
             f"{facts.get('android_release') or '?'}", "",
             "| measurement | source | fallback | lost / refused |", "|---|---|---|---|"]
    for row in diagnosis.capabilities:
        cell = "; ".join(part for part in (row.lost or "", row.refusals) if part)
        lines.append(f"| {row.measurement} | {row.source or 'none'} | {row.fallback or '-'} | "
                     f"{cell.replace('|', '/')} |")
    lines += ["", "## Warnings", ""]
    lines += [f"- {w}" for w in diagnosis.warnings] or ["- none"]
    return "\n".join(lines) + "\n"


def _answer(records: Mapping[str, ProbeRecord], sid: str) -> str:
    record = records.get(sid)
    return record.stdout if record is not None and record.error == "ok" else ""


def derived_profile(records: Mapping[str, ProbeRecord], name: str) -> dict[str, Any]:
    """A virtual-phone profile (devices/*.yaml) from the scrubbed answers."""
    props = parse_getprop(_answer(records, "props"))
    # what a profile must name and the phone did not say (an old release has no ro.soc.*)
    props = {**{key: "unknown" for key in REQUIRED_PROPS}, **props}
    meminfo = parse_proc_meminfo(_answer(records, "meminfo"))
    free_kb = parse_df_available_kb(_answer(records, "storage"))
    files = parse_head_dump(_answer(records, "cpu.topology"))
    topology = read_cpu_topology(files)
    parts = _PART.findall(_answer(records, "cpuinfo"))
    # (a path as the phone printed it: a sandbox may print it under a prefix)
    lowest = {int(m.group(1)): text.strip() for path, text in files.items()
              if (m := _MIN_FREQ.search(path)) is not None}
    clusters = []
    by_cpu = {c.cpu: c for c in topology.cpus}
    for index, members in enumerate(reversed(topology.clusters)):  # littlest first
        first = by_cpu[members[0]]
        top = first.cpuinfo_max_khz or 0
        low = lowest.get(members[0], "")
        clusters.append({
            "name": f"cluster{index}", "cores": len(members), "max_khz": top,
            "min_khz": int(low) if low.strip().isdigit() else top // 4,
            "capacity": first.capacity or 1024,
            "part": parts[members[0]] if members[0] < len(parts) else "0xd05"})
    model = props.get("ro.product.model", "phone")
    total_mb = (meminfo.mem_total_kb or 0) // 1024 if meminfo else 0
    available_mb = (meminfo.mem_available_kb or 0) // 1024 if meminfo else 0
    return {
        "name": name,
        "description": f"{props.get('ro.product.manufacturer', '?')} {model}, captured "
                       f"(Android {props.get('ro.build.version.release', '?')})",
        "props": props,
        "ram_mb": total_mb,
        "available_mb": available_mb,
        "storage_free_mb": (free_kb or 0) // 1024,
        "clusters": clusters,
    }


def completed_profile(derived: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A derived profile with what the answers did not say given (``given`` wins; its props
    are added to the derived ones)."""
    props = {**dict(derived.get("props") or {}), **dict(given.get("props") or {})}
    return {**dict(derived), **dict(given), "props": props}


def bundle(records: Sequence[ProbeRecord], diagnosis: Diagnosis, report: ScrubReport,
           name: str, today: datetime.date, given: Mapping[str, Any] | None = None,
           published: Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """The zip's members, scrubbed records in; the manifest names every other member's hash.
    ``given``: profile values the answers do not say; ``published``: a capture made from
    published texts (``harness.doctor.texts``) says so, with each text's source."""
    by_id = {r.id: r for r in records}
    profile = completed_profile(derived_profile(by_id, name), given or {})
    members = {
        "probes.jsonl": "".join(json.dumps(r.to_json(), sort_keys=True) + "\n"
                                for r in records).encode(),
        "capabilities.md": capabilities_markdown(diagnosis).encode(),
        "profile.yaml": yaml.safe_dump(profile, sort_keys=False).encode(),
    }
    manifest = {
        "schema": CAPTURE_SCHEMA, "harness": __version__, "date": today.isoformat(),
        "probes": [r.id for r in records], "scrub": report.to_json(),
        "sha256": {member: hashlib.sha256(data).hexdigest() for member, data in members.items()},
        **({"published": dict(published)} if published else {}),
    }
    return {"manifest.json": (json.dumps(manifest, indent=2) + "\n").encode(), **members}


def write_bundle(members: Mapping[str, bytes], path: Path) -> None:
    """Written whole to a temporary file, then renamed: an existing capture is never half
    overwritten."""
    tmp = path.with_name(path.name + ".part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member in MEMBERS:
            archive.writestr(member, members[member])
    tmp.replace(path)


def read_profile(path: Path) -> dict[str, Any]:
    """The derived profile of a capture (read after ``read_bundle`` accepted it)."""
    with zipfile.ZipFile(path) as archive:
        if "profile.yaml" not in archive.namelist():
            raise ConfigError(f"{path}: not a capture: it has no profile.yaml")
        data = yaml.safe_load(archive.read("profile.yaml"))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: profile.yaml is not a profile")
    return data


def read_bundle(path: Path) -> tuple[dict[str, Any], list[ProbeRecord]]:
    """The manifest and the probe records of a capture; ConfigError (one line) otherwise."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (make a capture with harness capture)")
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as error:
        raise ConfigError(f"{path}: not a capture (not a zip file: {error})") from error
    with archive:
        names = set(archive.namelist())
        for member in ("manifest.json", "probes.jsonl"):
            if member not in names:
                raise ConfigError(f"{path}: not a capture: it has no {member} "
                                  "(make one with harness capture)")
        try:
            manifest = json.loads(archive.read("manifest.json"))
            schema = int(manifest["schema"])
        except (ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"{path}: manifest.json is not a capture's manifest") from error
        if schema > CAPTURE_SCHEMA:
            raise ConfigError(f"{path}: capture schema {schema} is newer than this harness "
                              f"reads ({CAPTURE_SCHEMA}); upgrade harness")
        try:
            records = [ProbeRecord.from_json(json.loads(line)) for line in
                       archive.read("probes.jsonl").decode().splitlines() if line.strip()]
        except (ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"{path}: probes.jsonl has a line that is not a probe record "
                              f"({error})") from error
    return manifest, records
