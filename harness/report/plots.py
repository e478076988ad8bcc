"""Every chart of the report, as inline SVG text. The only module that imports matplotlib.

Why SVG text with ``svg.fonttype = none``: the labels stay text (small, searchable, printable),
and matplotlib escapes them itself, so a hostile device name is drawn as characters, never parsed
as markup. Math parsing is off so a ``$`` in a name is just a dollar sign. Several SVGs share one
HTML document, so every ``id`` and reference in a figure gets the figure's own prefix; the XML
prologue, doctype and the RDF metadata block (which names external vocabularies) are dropped.
Figures are made with ``matplotlib.figure.Figure`` directly, so no pyplot state leaks between
reports.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.figure import Figure

from harness.report.model import (
    ComparisonRow,
    HistorySeries,
    MemoryCell,
    SustainedLine,
    ThermalPoint,
    Timeline,
)
from harness.units import GIB, MIB

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#d62728")
RC: Any = {"svg.fonttype": "none", "svg.hashsalt": "harness-report", "text.parse_math": False,
      "font.size": 9, "axes.titlesize": 10, "axes.spines.top": False,
      "axes.spines.right": False, "svg.image_inline": True}
_ids = itertools.count(1)
_PROLOGUE = re.compile(r"^.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)


def to_svg(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element with document-unique ids."""
    buf = io.StringIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = _COMMENT.sub("", _METADATA.sub("", _PROLOGUE.sub("", buf.getvalue(), count=1)))
    prefix = f"f{next(_ids)}-"
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = svg.replace("url(#", f"url(#{prefix}").replace('xlink:href="#', f'xlink:href="#{prefix}')
    return svg.replace("<svg ", '<svg role="img" ', 1)


def _figure(width: float, height: float, left: float = 0.75, right: float = 0.2,
            bottom: float = 0.55, top: float = 0.35) -> Figure:
    """A figure with fixed margins in inches: a layout engine would cost 2-3× the drawing."""
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                        top=1 - top / height)
    return fig


def _text_width(labels: Sequence[str], points: float) -> float:
    """Rough width in inches of the longest label at a font size (DejaVu Sans averages)."""
    return max((len(label) for label in labels), default=0) * points * 0.6 / 72


def memory_scatter(cells: Sequence[MemoryCell]) -> str:
    """Measured against predicted peak per cell; the diagonal is a perfect prediction."""
    with matplotlib.rc_context(RC):
        devices = sorted({c.device for c in cells})
        legend = _text_width([*devices[: len(PALETTE)], "measured = predicted"], 7) + 0.5
        fig = _figure(4.8 + legend, 3.6, right=legend, bottom=0.5, top=0.15)
        ax = fig.subplots()
        biggest = max((v for c in cells for v in (c.measured_bytes, c.predicted_bytes) if v),
                      default=GIB)
        unit, name = (GIB, "GiB") if biggest >= GIB else (MIB, "MiB")
        for i, device in enumerate(devices[: len(PALETTE)]):
            pts = [(c.predicted_bytes / unit, c.measured_bytes / unit) for c in cells
                   if c.device == device and c.predicted_bytes]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(x, y, s=14, color=PALETTE[i], label=device, alpha=0.8)
        values = [v / unit for c in cells for v in (c.measured_bytes, c.predicted_bytes) if v]
        low, high = min(values, default=0.0) * 0.95, max(values, default=1.0) * 1.05
        ax.plot([low, high], [low, high], color="#555", lw=0.8, ls="--",
                label="measured = predicted")
        ax.set_xlabel(f"predicted peak ({name})")
        ax.set_ylabel(f"measured peak RSS ({name})")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return to_svg(fig)


def timeline(line: Timeline) -> str:
    """PSS over the trial with the thermal status on a second axis; throttling shaded."""
    with matplotlib.rc_context(RC):
        fig = _figure(5.6, 2.5, right=0.6, top=0.3, bottom=0.5)
        ax = fig.subplots()
        t = np.asarray(line.t_s, dtype=float)
        pss = np.array([np.nan if v is None else v / GIB for v in line.pss_bytes])
        status = np.array([np.nan if v is None else v for v in line.thermal_status])
        ax.plot(t, pss, color=PALETTE[0], lw=1.5, label="PSS")
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("PSS (GiB)", color=PALETTE[0])
        ax.set_title(line.title, fontsize=8)
        hot = np.nan_to_num(status) >= 2
        for start, end in _runs(hot, t):
            ax.axvspan(start, end, color="#d62728", alpha=0.12, lw=0)
        twin = ax.twinx()
        twin.step(t, status, where="post", color="#d62728", lw=1.0, label="thermal status")
        twin.set_ylim(-0.2, max(4.0, float(np.nanmax(status)) if np.isfinite(status).any() else 0))
        twin.set_ylabel("thermal status", color="#d62728")
        twin.spines["right"].set_visible(True)
        return to_svg(fig)


def _runs(mask: np.ndarray, t: np.ndarray) -> list[tuple[float, float]]:
    """Contiguous stretches of ``mask`` as (start, end) times."""
    out, start = [], None
    for i, on in enumerate(mask):
        if on and start is None:
            start = t[i]
        if not on and start is not None:
            out.append((float(start), float(t[i])))
            start = None
    if start is not None:
        out.append((float(start), float(t[-1])))
    return out


def _utc(points: Sequence[ThermalPoint]) -> Any:
    """Start times as naive UTC datetime64 (numpy has no time zones)."""
    return np.array([p.started_at.replace(tzinfo=None) for p in points], dtype="datetime64[s]")


def thermal_scatter(points: Sequence[ThermalPoint]) -> str:
    """Per-trial maximum temperature over time; throttled trials as red crosses."""
    with matplotlib.rc_context(RC):
        devices = sorted({p.device for p in points})
        legend = _text_width([*devices[:8], "throttled"], 7) + 0.5
        fig = _figure(6.6 + legend, 3.2, right=legend, bottom=0.8, top=0.15)
        ax = fig.subplots()
        for i, device in enumerate(devices):
            pts = [p for p in points if p.device == device and not p.throttled]
            if pts:
                ax.scatter(_utc(pts), [p.max_temp_c for p in pts], s=6,
                           alpha=0.5, color=PALETTE[i % (len(PALETTE) - 1)],
                           label=device if i < 8 else None)
        hot = [p for p in points if p.throttled]
        if hot:
            ax.scatter(_utc(hot), [p.max_temp_c for p in hot], marker="x",
                       s=22, color="#d62728", label="throttled")
        ax.set_ylabel("max temperature (°C)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        fig.autofmt_xdate(bottom=0.8 / 3.2)
        return to_svg(fig)


def comparison_forest(rows: Sequence[ComparisonRow], baseline: str, candidate: str) -> str:
    """Ratio candidate/baseline with its interval per cell; the band is ±3% noise."""
    colours = {"regression": "#d62728", "improvement": "#2ca02c", "same": "#7f7f7f",
               "unstable": "#ff7f0e"}
    with matplotlib.rc_context(RC):
        labels = [f"{r.device} · {r.config}" for r in rows]
        left = _text_width(labels, 7) + 0.2
        height = 0.8 + 0.2 * len(rows)
        fig = _figure(left + 4.2, height, left=left, bottom=0.5, top=0.1)
        ax = fig.subplots()
        y = np.arange(len(rows))[::-1]
        for yi, r in zip(y, rows, strict=True):
            if np.isfinite(r.ci_low) and np.isfinite(r.ci_high):
                ax.plot([r.ci_low, r.ci_high], [yi, yi], color=colours[r.verdict], lw=2)
            ax.plot([r.ratio], [yi], "o", color=colours[r.verdict], ms=4)
        ax.axvspan(0.97, 1.03, color="#999", alpha=0.15, lw=0)
        ax.axvline(1.0, color="#555", lw=0.8)
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(f"{rows[0].metric if rows else ''}: {candidate} / {baseline}")
        return to_svg(fig)


#: Up to this many nights a history plot puts one tick per night, labelled by its date, at evenly
#: spaced positions; a date axis would invent hour ticks between two or three nights.
FEW_NIGHTS = 7


def history_figure(series: HistorySeries) -> Figure:
    """Nightly medians with fitted levels; change points as dashed lines labelled by build.

    With few nights (``FEW_NIGHTS``) the nights are categories: one tick per night, its date;
    otherwise a date axis (gaps between nights show). A level spanning a single night is not
    drawn (it would be a line of no length)."""
    from harness.analysis.changepoints import ChangePoint, segment_means

    with matplotlib.rc_context(RC):
        fig = _figure(5.8, 2.6, bottom=0.75, top=0.3)
        ax = fig.subplots()
        few = len(series.nights) <= FEW_NIGHTS
        x: Any = (np.arange(len(series.nights)) if few
                  else np.array(series.nights, dtype="datetime64[D]"))
        ax.plot(x, series.medians, ".", color=PALETTE[0], ms=4 if not few else 6,
                label="nightly median")
        fake = [ChangePoint(i, 0.0, 0.0, 0.0, 0.0) for i in series.change_indices]
        for start, end, mean in segment_means(series.medians, fake):
            if end - start >= 2:
                ax.plot([x[start], x[end - 1]], [mean, mean], color="#333", lw=1)
        for index, mark in zip(series.change_indices, series.change_points, strict=True):
            ax.axvline(x[index], color="#d62728", ls="--", lw=1)
            ax.annotate(f"{mark.magnitude:+.1%} ({mark.build_before} → {mark.build_after})",
                        (x[index], max(series.medians)), fontsize=7, color="#d62728",
                        xytext=(3, -10), textcoords="offset points")
        if few:
            ax.set_xticks(x, [str(n) for n in series.nights])
            ax.set_xlim(-0.5, len(series.nights) - 0.5)
        ax.set_title(f"{series.device} · {series.config}", fontsize=8)
        ax.set_ylabel(f"{series.metric} (tok/s)")
        fig.autofmt_xdate(bottom=0.75 / 2.6)
        return fig


def history_chart(series: HistorySeries) -> str:
    """``history_figure`` as inline SVG."""
    return to_svg(history_figure(series))


def sustained_chart(device: str, lines: Sequence[SustainedLine]) -> str:
    """Generation rate per repetition over a sustained run, one line per trial, coloured by
    its configuration (one legend entry each)."""
    with matplotlib.rc_context(RC):
        names = {line.series: line.label for line in lines}
        legend = _text_width(list(names.values()), 7) + 0.5
        fig = _figure(5.8 + legend, 2.8, right=legend, bottom=0.5, top=0.3)
        ax = fig.subplots()
        seen: set[int] = set()
        for line in lines:
            colour = PALETTE[line.series % len(PALETTE)]
            ax.plot(line.t_s, line.tg_tps, color=colour, lw=1.2, alpha=0.8,
                    label=None if line.series in seen else line.label)
            seen.add(line.series)
        ax.set_xlabel("seconds since launch")
        ax.set_ylabel("tg (tok/s)")
        ax.set_ylim(bottom=0)
        ax.set_title(device, fontsize=8)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return to_svg(fig)
