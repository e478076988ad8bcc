"""Rendering: every section, escaping of hostile store strings, no external references."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

from harness.analysis.recommend import Pick
from harness.report.html import render_report
from harness.report.model import (
    DeviceRecommendations,
    Recommendation,
    ReportData,
    Timeline,
)
from harness.report.plots import timeline

SECTIONS = ("Run summary", "Throughput", "Memory", "Thermal", "Build comparison", "History",
            "Recommendations")


def test_every_section_heading_is_present(report_html: str) -> None:
    for heading in SECTIONS:
        assert f"<h2>{heading}</h2>" in report_html


def test_hostile_device_names_show_as_text(report_html: str) -> None:
    assert "<script" not in report_html.lower()
    assert "<b>x</b>" not in report_html
    assert "&lt;b&gt;x&lt;/b&gt;" in report_html
    assert "Pixel &lt;script&gt;alert(1)&lt;/script&gt;" in report_html
    # inside the SVGs too: matplotlib escapes its text, and $...$ is not parsed as math
    svg_text = "".join(re.findall(r"<svg.*?</svg>", report_html, re.S))
    assert "&lt;b&gt;x&lt;/b&gt;" in svg_text
    assert "Galaxy $x$ &amp; S23" in svg_text


def test_no_external_references_except_svg_namespaces(report_html: str) -> None:
    for match in re.finditer(r"https?://", report_html):
        before = report_html[max(0, match.start() - 20): match.start()]
        assert re.search(r'xmlns(:xlink)?="$', before), report_html[match.start() - 80:
                                                                     match.end() + 40]
    assert "<link" not in report_html and "<img" not in report_html
    assert "<?xml" not in report_html and "<!DOCTYPE svg" not in report_html


def test_element_ids_are_unique_across_inline_svgs(report_html: str) -> None:
    ids = Counter(re.findall(r'\bid="([^"]+)"', report_html))
    assert ids and max(ids.values()) == 1, ids.most_common(3)
    for ref in re.findall(r'url\(#([^)]+)\)', report_html):
        assert ids[ref] == 1, ref


def test_charts_are_bounded_by_top(report_data: ReportData) -> None:
    html = render_report(report_data, top=2)
    assert html.count("<svg") <= 1 + 2 + 1 + 1 + 2  # memory, timelines, thermal, forest, history


def test_recommendations_render_what_they_are_given(report_data: ReportData) -> None:
    pick = Pick(rank=1, config_id="c1", label="x", model="m", quant="Q4_0", n_ctx=512,
                type_k="f16", type_v="f16", threads=4, tg_tps=12.5, pp_tps=400.0,
                ttft_ms=None, peak_bytes=3 << 29, headroom_bytes=13 << 29, source="predicted",
                build_id="b<1>", engine="engines/<e>.yaml", n_trials=0, kl=None, top1=None,
                pareto=False, explanation="fits with <room> to spare")
    given = (DeviceRecommendations("phone <i>1</i>", (Recommendation("Q4_0 · ctx 512", pick),)),)
    html = render_report(dataclasses.replace(report_data, recommendations=given))
    section = html[html.index('id="recommendations"'):]
    assert "phone &lt;i&gt;1&lt;/i&gt;" in section and "predicted" in section
    assert "fits with &lt;room&gt; to spare" in section and "1.50 GiB" in section
    assert "b&lt;1&gt;" in section and "engines/&lt;e&gt;.yaml" in section
    empty = render_report(dataclasses.replace(report_data, recommendations=()))
    assert "No recommendation data" in empty


def test_svg_has_no_prologue_metadata_or_comments() -> None:
    line = Timeline("<tag> & $x$", "ok", True, (0.0, 1.0, 2.0), (1e9, 2e9, 2e9), (0, 2, 3),
                    (40.0, 45.0, 48.0))
    svg = timeline(line)
    assert svg.startswith("<svg ") and svg.rstrip().endswith("</svg>")
    assert "<metadata" not in svg and "<!--" not in svg
    assert "&lt;tag&gt; &amp; $x$" in svg
