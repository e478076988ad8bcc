"""Scrubbing a phone's probe answers before they leave the machine (``harness capture``).

First by allowlist: of ``getprop``'s listing only the properties that say what the phone is
(``ro.product.*``, ``ro.build`` version, fingerprint, id, type and tags, ``ro.soc.*``,
``ro.board.*``, ``ro.hardware*``) are kept. Then what identifies the phone or its owner is
replaced everywhere (commands, answers, details) by a consistent pseudonym: the serial (as adb
names it and as the phone's properties do), IMEIs, MAC and IP addresses, e-mail addresses, UUIDs
(boot ids among them), ``POWER_SUPPLY_SERIAL_NUMBER``, a host name other than ``localhost``
(``uname -a``'s second word), and third-party package names (those ``pm list packages -3``
lists, and the apps lmkd's lines name outside the system's namespaces).

Pure: records in, records and a report out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from harness.android.props import parse_getprop
from harness.doctor.probe import ProbeRecord

_KEPT_PROPS = re.compile(
    r"^(?:ro\.product\..+|ro\.build\.version\..+|ro\.build\.(?:fingerprint|id|type|tags)"
    r"|ro\.soc\..+|ro\.board\..+|ro\.hardware(?:\..+)?)$")
_SERIAL_PROPS = ("ro.serialno", "ro.boot.serialno", "ril.serialnumber")
_PROP_LINE = re.compile(r"^\[(?P<key>[^\]]*)\]: \[")
_MAC = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}(?![0-9A-Fa-f:])")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}\b")
_EMAIL = re.compile(r"\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b")
_IPV4 = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}"
                   r"(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\d.])")
_IPV6 = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{1,4}:){1,7}:?(?::?[0-9A-Fa-f]{1,4}){1,7}"
                   r"(?![0-9A-Fa-f:])")
_IMEI = re.compile(r"(?<!\d)\d{15}(?!\d)")
_SUPPLY_SERIAL = re.compile(r"(POWER_SUPPLY_SERIAL_NUMBER=)(\S+)")
_PACKAGE_LINE = re.compile(r"^package:(\S+)\s*$", re.MULTILINE)
_KILLED = re.compile(r"Kill '([\w.]+)'")
SYSTEM_PACKAGES = ("android", "com.android.", "com.google.android.", "com.qualcomm.",
                   "com.qti.", "com.samsung.", "com.sec.", "vendor.", "system")


@dataclass(frozen=True)
class ScrubReport:
    props_dropped: int = 0
    replaced: dict[str, int] = field(default_factory=dict)  # kind -> occurrences

    def lines(self) -> list[str]:
        said = [f"getprop: {self.props_dropped} properties outside the allowlist dropped"]
        said += [f"{kind}: {count} replaced" for kind, count in sorted(self.replaced.items())]
        return said

    def to_json(self) -> dict[str, object]:
        return {"props_dropped": self.props_dropped, "replaced": dict(self.replaced)}


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _system(name: str) -> bool:
    return any(name == p or name.startswith(p) for p in SYSTEM_PACKAGES)


def listed_packages(text: str) -> list[str]:
    """The names ``pm list packages`` printed."""
    return _PACKAGE_LINE.findall(text)


def third_party_packages(records: Iterable[ProbeRecord]) -> list[str]:
    """Third-party apps: ``pm list packages -3``'s, and those lmkd's lines name."""
    found: set[str] = set()
    for record in records:
        if record.id == "packages":
            found.update(listed_packages(record.stdout))
        found.update(name for name in _KILLED.findall(record.stdout) if not _system(name))
    return sorted(found, key=lambda n: (-len(n), n))  # longest first: no prefix eats another


def _allowlisted(listing: str) -> tuple[str, int]:
    kept: list[str] = []
    dropped = 0
    for line in listing.splitlines():
        match = _PROP_LINE.match(line)
        if match is not None and not _KEPT_PROPS.match(match.group("key")):
            dropped += 1
            continue
        kept.append(line)
    return "\n".join(kept) + ("\n" if listing.endswith("\n") else ""), dropped


class _Pseudonyms:
    """The same value gets the same pseudonym everywhere, counted by kind."""

    def __init__(self) -> None:
        self.names: dict[tuple[str, str], str] = {}
        self.counts: Counter[str] = Counter()

    def name(self, kind: str, value: str, times: int = 1) -> str:
        self.counts[kind] += times
        key = (kind, value)
        if key not in self.names:
            index = sum(1 for k, _ in self.names if k == kind) + 1
            self.names[key] = f"{kind}-{index}"
        return self.names[key]


def _replace(text: str, names: _Pseudonyms, literals: Sequence[tuple[str, str]]) -> str:
    for kind, value in literals:
        if value and value in text:
            text = text.replace(value, names.name(kind, value, text.count(value)))
    text = _SUPPLY_SERIAL.sub(lambda m: m.group(1) + names.name("supply-serial", m.group(2)),
                              text)
    text = _EMAIL.sub(lambda m: names.name("email", m.group(0)), text)
    text = _UUID.sub(lambda m: names.name("uuid", m.group(0).lower()), text)
    text = _MAC.sub(lambda m: names.name("mac", m.group(0).lower()), text)
    text = _IPV4.sub(lambda m: names.name("ip", m.group(0)), text)
    text = _IPV6.sub(lambda m: names.name("ip", m.group(0).lower())
                     if "::" in m.group(0) or m.group(0).count(":") == 7 else m.group(0), text)
    return _IMEI.sub(lambda m: names.name("imei", m.group(0)) if _luhn(m.group(0))
                     else m.group(0), text)


def scrub(records: Sequence[ProbeRecord], serial: str) -> tuple[list[ProbeRecord], ScrubReport]:
    """The records with nothing that identifies the phone or its owner, and what was done."""
    props = next((r.stdout for r in records if r.id == "props"), "")
    values = parse_getprop(props)
    serials = sorted({serial, *(values[k] for k in _SERIAL_PROPS if values.get(k))},
                     key=len, reverse=True)
    literals = [("serial", s) for s in serials if len(s) >= 4]
    uname = next((r.stdout.split() for r in records if r.id == "uname"), [])
    if len(uname) > 1 and uname[1] != "localhost" and len(uname[1]) >= 4:
        literals.append(("host", uname[1]))
    literals += [("app", name) for name in third_party_packages(records)]
    names = _Pseudonyms()
    dropped = 0
    out: list[ProbeRecord] = []
    for record in records:
        stdout = record.stdout
        if record.id == "props":
            stdout, dropped = _allowlisted(stdout)
        out.append(replace(
            record, command=_replace(record.command, names, literals),
            stdout=_replace(stdout, names, literals),
            stderr=_replace(record.stderr, names, literals),
            detail=_replace(record.detail, names, literals)))
    return out, ScrubReport(dropped, dict(names.counts))
