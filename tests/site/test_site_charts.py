"""The dashboard's charts: a share stays within 0 to 1, whatever its points (issue 48, item 9)."""

from __future__ import annotations

import re

from harness.site import render, svg


def _ticks(chart: str) -> list[float]:
    """The y axis's tick labels (right-aligned at the plot's left edge)."""
    return [float(t) for t in re.findall(r'text-anchor="end"[^>]*>([-\d.]+)</text>', chart)]


def test_a_throttled_share_of_one_night_keeps_its_axis_within_zero_and_one() -> None:
    nights = [{"night": "2026-03-02", "present": True, "trials": 12, "failed": 0,
               "throttled": 5, "invalid": 0, "throttled_share": 0.417,
               "battery_temp_c": 31.0, "max_temp_c": 44.0}]
    charts = render.device_charts({"nights": nights})
    ticks = _ticks(str(charts["share"]))
    assert ticks == [0.0, 0.25, 0.5, 0.75, 1.0]
    # a chart of other values still fits its points
    temps = _ticks(str(charts["temps"]))
    assert min(temps) < 31.0 and max(temps) > 44.0


def test_an_axis_given_is_the_axis_drawn() -> None:
    chart = svg.Chart(labels=("a", "b"), lines=(svg.Line("x", (0.997, None)),), axis=(0.0, 1.0))
    assert _ticks(str(svg.line_chart(chart)))[0] == 0.0
    assert _ticks(str(svg.line_chart(chart)))[-1] == 1.0


def test_two_builds_without_a_configuration_in_common_are_not_called_unchanged() -> None:
    template = render.environment().get_template("_flagged.html.j2")

    def shown(verdicts: dict[str, int]) -> str:
        comparison = {"title": "host-vulkan vs baseline host-slow", "baseline": "host-slow",
                      "candidate": "host-vulkan", "engine": "llama-bench",
                      "verdicts": verdicts, "flagged": []}
        return template.render(comparisons=[comparison], limit=10, href=lambda p: p)

    assert "Nothing to compare: host-vulkan and host-slow ran no configuration in common" in \
        shown({})
    assert "No regression or improvement" not in shown({})
    assert "No regression or improvement" in shown({"no_change": 4})
