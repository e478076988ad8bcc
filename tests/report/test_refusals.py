"""The conditions section's list of what each phone's shell could not read."""

from __future__ import annotations

import pandas as pd

from harness.report.data import refusals
from harness.report.html import environment
from harness.report.model import Conditions, Refusal


def test_refusals_count_trials_per_device_and_leave_out_the_overflow_note() -> None:
    df = pd.DataFrame({
        "device": ["a", "a", "a", "b"],
        "unreadable": ["pressure/memory: Permission denied; thermal_zone0/temp: Permission denied"
                       "; thermal_zone1/temp: Permission denied",
                       "pressure/memory: Permission denied; and 3 more", None, ""],
    })
    assert refusals(df) == (Refusal("a", "pressure/memory: Permission denied", 2),
                            Refusal("a", "thermal_zone*/temp: Permission denied", 1))
    assert refusals(df.drop(columns=["unreadable"])) == ()


def test_the_section_names_them_escaped() -> None:
    template = environment().get_template("_conditions.html.j2")
    html = template.render(data=type("D", (), {"conditions": Conditions(
        (), 0, True, (Refusal("<phone>", "x/<y>: Permission denied", 3),))})())
    assert "What the phones would not let the shell read" in html
    assert "&lt;phone&gt;" in html and "x/&lt;y&gt;: Permission denied" in html
    assert "<phone>" not in html
