"""A page's data (``model``) to HTML: jinja2 with autoescape on, as ``harness report`` does.

Every value from the store reaches HTML through autoescaping; the only markup marked safe is the
SVG made by ``svg`` (which escapes its own text). ``RENDER_VERSION`` digests the templates and
the code that draws, so a new harness version rewrites every page once.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from jinja2 import Environment
from markupsafe import Markup

from harness.report.html import template_environment
from harness.site import paths, svg
from harness.units import MISSING, gib, pct

_HERE = Path(__file__).resolve().parent


def _render_version() -> str:
    h = hashlib.sha256()
    files = [*sorted((_HERE / "templates").glob("*")), _HERE / "svg.py", _HERE / "render.py",
             _HERE / "paths.py"]
    for path in files:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


RENDER_VERSION = _render_version()


def _num(value: Any, fmt: str = "{:.2f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    return fmt.format(value)


def _pct(value: Any) -> str:
    return pct(value) if isinstance(value, int | float) else MISSING


def _change(value: Any) -> str:
    return MISSING if value is None else f"{value * 100:+.1f}%"


def _gib(value: Any) -> str:
    return MISSING if value is None else gib(value)


def _share(value: Any) -> str:
    return MISSING if value is None else f"{value * 100:.0f}%"


def environment() -> Environment:
    env = template_environment("harness.site")
    env.filters.update(num=_num, pct=_pct, change=_change, gib=_gib, share=_share)
    return env


_ENV: Environment | None = None


def _env() -> Environment:
    global _ENV
    if _ENV is None:
        _ENV = environment()
    return _ENV


def config_charts(data: dict[str, Any]) -> list[Markup]:
    """One line chart per metric of a configuration page."""
    labels = tuple(n[5:] for n in data["nights"])  # MM-DD
    out = []
    for m in data["metrics"]:
        chart = svg.Chart(
            labels=labels, lines=(svg.Line(m["metric"], tuple(m["values"])),),
            marks=(svg.Marks("throttled", tuple((i, v) for i, v in m["throttled"])),
                   svg.Marks("invalid", tuple((i, v) for i, v in m["invalid"]),
                             colour="#c62828", shape="cross")),
            vlines=tuple((c["index"], c["describe"]) for c in m["changes"]),
            unit=m["metric"])
        out.append(svg.line_chart(chart))
    return out


def device_charts(data: dict[str, Any]) -> dict[str, Markup]:
    rows = data["nights"][-90:]
    labels = tuple(r["night"][5:] for r in rows)
    temps = svg.Chart(labels=labels, lines=(
        svg.Line("battery °C", tuple(r.get("battery_temp_c") for r in rows)),
        svg.Line("max °C", tuple(r.get("max_temp_c") for r in rows), colour="#b26a00")),
        unit="°C")
    share = svg.Chart(labels=labels, lines=(
        svg.Line("throttled share", tuple(r.get("throttled_share") for r in rows),
                 colour="#c62828"),), axis=(0.0, 1.0))  # a share: never outside 0 to 1
    strip = svg.strip([("absent", f"{r['night']}: no trials") if not r["present"] else
                       ("bad" if r["failed"] else "warn" if r["throttled"] or r["invalid"]
                        else "ok", f"{r['night']}: {r['trials']} trials, {r['failed']} failed, "
                        f"{r['throttled']} throttled") for r in rows])
    return {"temps": svg.line_chart(temps), "share": svg.line_chart(share), "strip": strip}


def render_page(page: str, data: dict[str, Any], title: str) -> str:
    """The HTML of the page at site path ``page`` showing ``data`` (a model dict)."""
    def href(target: str) -> str:
        return paths.relative(page, target)

    extra: dict[str, Any] = {}
    if data["kind"] == "config":
        extra["charts"] = config_charts(data)
    elif data["kind"] == "device":
        extra["charts"] = device_charts(data)
    elif data["kind"] == "index":
        extra["strips"] = {d["serial"]: svg.strip([(c["state"], c["tip"]) for c in d["strip"]])
                           for d in data["devices"]}
    template = _env().get_template(f"{data['kind']}.html.j2")
    return template.render(d=data, href=href, root=href(""), site_title=title,
                           page=page, **extra)
