"""A capture made from a phone's printed output (``harness capture --from-texts FOLDER``).

For a phone nobody here can plug in: its answers as published (a bug report, another project's
test fixtures) become a capture bundle that ``harness sim start --from-capture`` replays. The
folder holds one ``<probe id>.txt`` per answer (``thermal.hal.txt`` is ``dumpsys
thermalservice``; ids as ``harness doctor --json`` names them), each starting with a line
``# SOURCE: ...`` that says where the text was published, and a ``phone.yaml``: the bundle's
``name``, a ``description``, ``texts:`` for answers kept elsewhere (probe id -> a path relative
to the folder, same first line), and ``profile:`` for what the texts do not say and a virtual phone
needs (RAM, CPU clusters), each value with its source in a comment. Probes without a text are
left out of the bundle, not invented. ``read_texts`` is the edge; the rest is pure.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.android import parse_getprop
from harness.doctor.capture import bundle
from harness.doctor.probe import ProbeRecord, classify
from harness.doctor.report import diagnose
from harness.doctor.scrub import scrub
from harness.doctor.sources import BY_ID
from harness.errors import ConfigError

CITATION = "# SOURCE: "
PHONE = "phone.yaml"
PHONE_KEYS = {"name", "description", "texts", "profile", "expected"}


@dataclass(frozen=True)
class TextPhone:
    name: str
    description: str
    records: tuple[ProbeRecord, ...]
    sources: Mapping[str, str]  # probe id -> where its text was published
    profile: Mapping[str, Any] = field(default_factory=dict)  # what the texts do not say
    expected: Mapping[str, Any] = field(default_factory=dict)  # what the texts say, for tests


def record(probe: str, text: str) -> ProbeRecord:
    """A published answer as a probe record, classed as the doctor classes a live one (an
    answer the harness cannot read is ``unusable``, not ok)."""
    source = BY_ID[probe]
    error, detail = classify(0, text, "", source.check)
    return ProbeRecord(id=probe, command=source.probe_command(0), exit=0, stdout=text,
                       stderr="", error=error, detail=detail, ms=0)


def read_texts(folder: Path) -> TextPhone:
    """The folder's texts and phone.yaml; ConfigError (one line, naming the file) otherwise."""
    meta_path = folder / PHONE
    if not meta_path.is_file():
        raise ConfigError(f"{meta_path}: no such file (a folder of texts needs a phone.yaml "
                          "naming the phone: see docs/real-phones.md)")
    try:
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f"{meta_path}: not YAML ({str(error).splitlines()[0]})") from error
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise ConfigError(f"{meta_path}: must be a mapping with a name")
    unknown = set(meta) - PHONE_KEYS
    if unknown:
        raise ConfigError(f"{meta_path}: unknown key {sorted(unknown)[0]!r} "
                          f"(known: {', '.join(sorted(PHONE_KEYS))})")
    listed = meta.get("texts") or {}
    if not isinstance(listed, dict):
        raise ConfigError(f"{meta_path}: texts must map probe ids to paths")
    paths = {path.name[: -len(".txt")]: path for path in sorted(folder.glob("*.txt"))}
    paths.update({str(k): folder / str(v) for k, v in listed.items()})
    records, sources = [], {}
    for probe, path in paths.items():
        if probe not in BY_ID:
            raise ConfigError(f"{path}: no probe named {probe!r} (the file's name is the "
                              f"probe id, e.g. thermal.hal.txt; harness doctor --json lists them)")
        if not path.is_file():
            raise ConfigError(f"{meta_path}: {probe}: no such file {path} (the reference "
                              "samples live in ../shared beside the repository)")
        try:
            first, _, text = path.read_text(encoding="utf-8").partition("\n")
        except UnicodeDecodeError as error:
            raise ConfigError(f"{path}: not UTF-8 text ({error.reason})") from error
        if not first.startswith(CITATION):
            raise ConfigError(f"{path}: the first line must say where the text was published "
                              f"({CITATION}...)")
        records.append(record(probe, text))
        sources[probe] = first[len(CITATION):].strip()
    if not records:
        raise ConfigError(f"{folder}: no <probe id>.txt files")
    # a text answers every probe that sends its command (meminfo's graphics rows and its
    # process table are one `dumpsys meminfo`)
    for read in list(records):
        for other in BY_ID.values():
            if other.id not in sources and other.command == BY_ID[read.id].command:
                records.append(record(other.id, read.stdout))
                sources[other.id] = sources[read.id]
    profile, expected = meta.get("profile") or {}, meta.get("expected") or {}
    if not isinstance(profile, dict) or not isinstance(expected, dict):
        raise ConfigError(f"{meta_path}: profile and expected must be mappings")
    return TextPhone(meta["name"], str(meta.get("description") or ""), tuple(records), sources,
                     profile, expected)


def members(phone: TextPhone, today: datetime.date) -> dict[str, bytes]:
    """The capture bundle's members: scrubbed as a live capture is, the texts' sources in the
    manifest, the derived profile completed by phone.yaml's ``profile``."""
    records, report = scrub(phone.records, "")
    props = parse_getprop(next((r.stdout for r in records if r.id == "props"), ""))
    given = dict(phone.profile.get("props") or {})
    facts = {"manufacturer": given.get("ro.product.manufacturer",
                                       props.get("ro.product.manufacturer")),
             "model": given.get("ro.product.model", props.get("ro.product.model")),
             "android_release": given.get("ro.build.version.release",
                                          props.get("ro.build.version.release"))}
    diagnosis = diagnose("texts", facts, records)
    given = {"description": phone.description, **phone.profile} if phone.description \
        else dict(phone.profile)
    return bundle(records, diagnosis, report, phone.name, today, given,
                  {"description": phone.description, "sources": dict(phone.sources)})
