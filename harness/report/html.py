"""Render ``ReportData`` to one self-contained HTML file with jinja2 (autoescape on).

Why self-contained: the report is mailed, attached to CI runs and opened offline, so CSS and
charts are inline and nothing is fetched. Every value from the store goes through autoescaping;
the only markup marked safe is matplotlib's SVG, whose text matplotlib has escaped itself.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from harness.report import plots
from harness.report.model import Heatmap, ReportData
from harness.units import MISSING, gib, pct


def _num(value: Any, fmt: str = "{:.1f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    return fmt.format(value)


def _gib(value: Any) -> str:
    """A byte size in GiB, or MiB below 1 GiB; a NaN reads as unknown."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    return gib(value)


def _when(value: datetime | None) -> str:
    return MISSING if value is None else f"{value:%Y-%m-%d %H:%M} UTC"


THERMAL_STATUS = ("none", "light", "moderate", "severe", "critical", "emergency", "shutdown")


def _thermal(value: int | None) -> str:
    """An Android thermal status with its name, e.g. ``3 (severe)``."""
    if value is None:
        return MISSING
    name = THERMAL_STATUS[value] if 0 <= value < len(THERMAL_STATUS) else "unknown"
    return f"{value} ({name})"


VIRIDIS = ((0x44, 0x01, 0x54), (0x3B, 0x52, 0x8B), (0x21, 0x91, 0x8C), (0x5E, 0xC9, 0x62),
           (0xFD, 0xE7, 0x25))


def heat_style(value: float | None, heatmap: Heatmap) -> str:
    """Inline CSS colouring one heatmap cell on a viridis scale of its own table's range.

    Heatmaps are HTML tables rather than images: crisp at any zoom, printable, selectable, and
    far cheaper to make than a matplotlib figure per device.
    """
    if value is None:
        return "background:#f0f0f0;color:#888"
    finite = [v for row in heatmap.values for v in row if v is not None]
    lo, hi = min(finite), max(finite)
    x = 0.5 if hi <= lo else (value - lo) / (hi - lo)
    pos = x * (len(VIRIDIS) - 1)
    i = min(int(pos), len(VIRIDIS) - 2)
    f = pos - i
    r, g, b = (round(a + (c - a) * f) for a, c in zip(VIRIDIS[i], VIRIDIS[i + 1], strict=True))
    text = "#000" if x > 0.55 else "#fff"
    return f"background:#{r:02x}{g:02x}{b:02x};color:{text}"


def template_environment(package: str) -> Environment:
    """jinja2 over ``package``'s templates/: autoescape on for every template, undefined names
    an error. The report and the dashboard (harness.site) render with it."""
    return Environment(
        loader=PackageLoader(package, "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )


def environment() -> Environment:
    env = template_environment("harness.report")
    env.filters.update(num=_num, gib=_gib, pct=pct, when=_when, thermal=_thermal)
    env.globals["heat_style"] = heat_style
    return env


def charts(data: ReportData, top: int) -> dict[str, Any]:
    """Every SVG of the report, bounded: ``top`` devices, history series and timelines."""
    by_device: dict[str, list[Heatmap]] = defaultdict(list)
    for m in data.heatmaps:
        by_device[m.device].append(m)
    comparison = data.comparison
    tg_rows = [r for r in comparison.rows if r.metric == "tg_tps"][:25]
    forest = (plots.comparison_forest(tg_rows, comparison.baseline_side,
                                      comparison.candidate_side) if tg_rows else "")
    return {
        "heatmaps": list(by_device.items())[:top],
        "memory": Markup(plots.memory_scatter(data.memory_cells)) if data.memory_cells else "",
        "timelines": [(t, Markup(plots.timeline(t))) for t in data.timelines[:top]],
        "thermal": Markup(plots.thermal_scatter(data.thermal_points))
        if data.thermal_points else "",
        "forest": Markup(forest) if forest else "",
        "history": [(s, Markup(plots.history_chart(s))) for s in data.history.series[:top]],
        "sustained": [(d, Markup(plots.sustained_chart(d.device, d.lines)) if d.lines else "")
                      for d in data.sustained.devices[:top]],
    }


def render_report(data: ReportData, top: int = 6) -> str:
    worst_memory = sorted((c for c in data.memory_cells if c.error is not None),
                          key=lambda c: -abs(c.error or 0.0))[:15]
    return environment().get_template("report.html.j2").render(
        data=data, charts=charts(data, top), worst_memory=worst_memory)
