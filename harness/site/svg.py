"""Hand-made inline SVG: small, fast, and every piece of text escaped.

Charts are built as strings here rather than with matplotlib: a farm site has thousands of small
charts, and a polyline costs microseconds. Every text that reaches the SVG (titles, tooltips)
goes through ``markupsafe.escape``; numbers are formatted by this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 200
PAD_L, PAD_R, PAD_T, PAD_B = 52, 12, 12, 28


@dataclass(frozen=True)
class Line:
    """Values by position on the x axis (None: no value that night, the line breaks)."""

    name: str
    values: tuple[float | None, ...]
    colour: str = "#1f5fbf"


@dataclass(frozen=True)
class Marks:
    """Points drawn as hollow markers, never joined (throttled or invalid nights)."""

    name: str
    points: tuple[tuple[int, float], ...]  # (x position, value)
    colour: str = "#b26a00"
    shape: str = "circle"  # circle | cross


@dataclass(frozen=True)
class Chart:
    labels: tuple[str, ...]  # x positions' labels (nights)
    lines: tuple[Line, ...]
    marks: tuple[Marks, ...] = ()
    vlines: tuple[tuple[int, str], ...] = field(default_factory=tuple)  # (x, tooltip)
    unit: str = ""
    axis: tuple[float, float] | None = None  # a fixed value range (a share: 0 to 1)


def _fmt(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{min(digits, 3)}f}"


def _range(chart: Chart) -> tuple[float, float]:
    if chart.axis is not None:
        return chart.axis
    values = [v for line in chart.lines for v in line.values if v is not None]
    values += [v for m in chart.marks for _, v in m.points]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:
        lo, hi = lo - max(abs(lo) * 0.05, 0.5), hi + max(abs(hi) * 0.05, 0.5)
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def line_chart(chart: Chart) -> Markup:
    """The chart as one ``<svg>`` element: lines break where a night has no value."""
    n = max(len(chart.labels), 1)
    lo, hi = _range(chart)
    inner_w, inner_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B

    def x(i: int) -> float:
        return PAD_L + (inner_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return PAD_T + inner_h * (1 - (v - lo) / (hi - lo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'width="{WIDTH}" height="{HEIGHT}" role="img" class="chart">',
           f'<rect x="{PAD_L}" y="{PAD_T}" width="{inner_w}" height="{inner_h}" '
           'fill="#fafbfc" stroke="#d9dde5"/>']
    for k in range(5):
        tick = lo + (hi - lo) * k / 4
        out.append(f'<text x="{PAD_L - 4}" y="{y(tick) + 4:.1f}" text-anchor="end" '
                   f'font-size="10" fill="#5b6475">{escape(_fmt(tick))}</text>')
    step = max(1, math.ceil(n / 6))
    for i in range(0, len(chart.labels), step):
        out.append(f'<text x="{x(i):.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="10" '
                   f'fill="#5b6475">{escape(chart.labels[i])}</text>')
    for at, tip in chart.vlines:
        xv = x(at) - inner_w / n / 2
        out.append(f'<line x1="{xv:.1f}" x2="{xv:.1f}" y1="{PAD_T}" y2="{PAD_T + inner_h}" '
                   f'stroke="#c62828" stroke-dasharray="4 3"><title>{escape(tip)}</title></line>')
    for line in chart.lines:
        runs: list[list[str]] = [[]]
        for i, v in enumerate(line.values):
            if v is None or not math.isfinite(v):
                runs.append([])
            else:
                runs[-1].append(f"{x(i):.1f},{y(v):.1f}")
        for run in runs:
            if len(run) > 1:
                out.append(f'<polyline fill="none" stroke="{escape(line.colour)}" '
                           f'stroke-width="1.6" points="{" ".join(run)}"/>')
            elif run:
                cx, cy = run[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{escape(line.colour)}"/>')
    for mark in chart.marks:
        for i, v in mark.points:
            tip = escape(f"{mark.name} {chart.labels[i] if i < len(chart.labels) else ''}: "
                         f"{_fmt(v)} {chart.unit}")
            if mark.shape == "cross":
                out.append(f'<path d="M{x(i) - 4:.1f},{y(v) - 4:.1f}l8,8m0,-8l-8,8" '
                           f'stroke="{escape(mark.colour)}" stroke-width="1.5">'
                           f'<title>{tip}</title></path>')
            else:
                out.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3.5" fill="none" '
                           f'stroke="{escape(mark.colour)}" stroke-width="1.5">'
                           f'<title>{tip}</title></circle>')
    out.append("</svg>")
    return Markup("".join(out))


STRIP_COLOURS = {"ok": "#2e7d32", "warn": "#e0a000", "bad": "#c62828", "absent": "#d9dde5"}


def strip(cells: Sequence[tuple[str, str]], size: int = 11) -> Markup:
    """One square per night: (state, tooltip); states are ``STRIP_COLOURS``' keys."""
    width = max(len(cells), 1) * (size + 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{size}" '
           f'viewBox="0 0 {width} {size}" class="strip">']
    for i, (state, tip) in enumerate(cells):
        colour = STRIP_COLOURS.get(state, STRIP_COLOURS["absent"])
        out.append(f'<rect x="{i * (size + 1)}" y="0" width="{size}" height="{size}" '
                   f'fill="{colour}"><title>{escape(tip)}</title></rect>')
    out.append("</svg>")
    return Markup("".join(out))
