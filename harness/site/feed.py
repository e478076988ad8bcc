"""The Atom feed of alerts: change points, builds that regressed against their baseline, and
nights with regressions, failures or missing phones.

Pure: ``atom(model, ...)`` returns the XML text; ElementTree escapes every text and attribute.
Entry ids are stable URNs, so a feed reader shows each alert once however often the site is
rebuilt; an entry's ``updated`` is its night (06:00 UTC, a morning reader's time).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from harness.site import paths
from harness.site.model import SiteModel
from harness.units import pct

ATOM = "http://www.w3.org/2005/Atom"
FEED_NIGHTS = 60
FEED_ID = "urn:harness-site:alerts"


def _when(night: str) -> str:
    return f"{night}T06:00:00Z"


def _link(base_url: str | None, path: str) -> str:
    return f"{base_url.rstrip('/')}/{path}" if base_url else path


def _flag_lines(comparisons: Sequence[dict[str, Any]], limit: int = 10) -> list[str]:
    lines = []
    for c in comparisons:
        for f in c["flagged"][:limit]:
            if f["verdict"] != "regression":
                continue
            lines.append(f"{f['device_name']} · {f['label']} · {f['metric']}: {pct(f['ratio'])} "
                         f"[{pct(f['ci_low'])}, {pct(f['ci_high'])}] ({c['title']})")
    return lines


def _regressions(comparisons: Sequence[dict[str, Any]]) -> int:
    return sum(1 for c in comparisons for f in c["flagged"] if f["verdict"] == "regression")


def entries(model: SiteModel) -> list[dict[str, str]]:
    """Every alert entry of the feed's window, newest first."""
    since = model.nights[max(0, len(model.nights) - FEED_NIGHTS)]
    out: list[dict[str, str]] = []
    for c in model.change_points(since):
        out.append({
            "id": "urn:harness-site:change:" + paths.short_hash(
                c["device"]["serial"], c["config_id"], c["engine"], c["metric"],
                c["night_after"]),
            "title": f"Change point: {c['device']['name']} · {c['label']}: {c['describe']}",
            "updated": _when(c["night_after"]), "path": c["path"],
            "text": f"{c['describe']}\n" + (f"bisect: {c['bisect']}" if c["bisect"]
                                                else c["bisect_note"])})
    for build in model.builds:
        last = model.nights_of(build)[-1]
        if last < since or model.baseline_of(build) is None:
            continue
        comparisons = model.build_comparison(build)
        n = _regressions(comparisons)
        if n:
            out.append({
                "id": "urn:harness-site:build:" + paths.short_hash(build),
                "title": f"Build {build}: {n} regressions against {model.baseline_of(build)}",
                "updated": _when(last), "path": paths.build_page(build),
                "text": "\n".join(_flag_lines(comparisons))})
    for night in model.nights:
        if night < since:
            continue
        data = model.night(night)
        n = _regressions(data["comparison"])
        parts = []
        if n:
            parts.append(f"{n} regressions against the previous night")
        if data["missing"]:
            parts.append("missing " + ", ".join(m["name"] for m in data["missing"]))
        if data["failures"]:
            parts.append(f"{len(data['failures'])} failed cells")
        if parts:
            out.append({
                "id": "urn:harness-site:night:" + night,
                "title": f"Night {night}: " + "; ".join(parts), "updated": _when(night),
                "path": paths.night_page(night),
                "text": "\n".join(["; ".join(parts), *_flag_lines(data["comparison"])])})
    return sorted(out, key=lambda e: (e["updated"], e["id"]), reverse=True)


def atom(model: SiteModel, title: str, base_url: str | None = None) -> str:
    """The feed as Atom XML text."""
    ET.register_namespace("", ATOM)
    feed = ET.Element(f"{{{ATOM}}}feed")
    ET.SubElement(feed, f"{{{ATOM}}}id").text = FEED_ID
    ET.SubElement(feed, f"{{{ATOM}}}title").text = f"{title}: alerts"
    ET.SubElement(feed, f"{{{ATOM}}}updated").text = _when(model.latest)
    ET.SubElement(feed, f"{{{ATOM}}}link", href=_link(base_url, "index.html"))
    ET.SubElement(ET.SubElement(feed, f"{{{ATOM}}}author"), f"{{{ATOM}}}name").text = \
        "harness site"
    for e in entries(model):
        entry = ET.SubElement(feed, f"{{{ATOM}}}entry")
        ET.SubElement(entry, f"{{{ATOM}}}id").text = e["id"]
        ET.SubElement(entry, f"{{{ATOM}}}title").text = e["title"]
        ET.SubElement(entry, f"{{{ATOM}}}updated").text = e["updated"]
        ET.SubElement(entry, f"{{{ATOM}}}link", href=_link(base_url, e["path"]))
        ET.SubElement(entry, f"{{{ATOM}}}content", type="text").text = e["text"]
    ET.indent(feed)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(feed, encoding="unicode") \
        + "\n"
