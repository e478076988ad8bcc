"""The HTML regression report: data from the store, SVG charts, one self-contained file.

``load`` reads only the columns and parts a report needs, ``data`` and ``trends`` turn them into
the plain values of ``model``, ``plots`` draws them (the only matplotlib user) and ``html``
renders everything with jinja2 autoescaping. ``write_report`` ties the steps together.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.errors import StoreError
from harness.report.data import ReportOptions, build_report_data
from harness.report.model import ReportData

__all__ = ["ReportData", "ReportOptions", "build_report_data", "write_report"]


def write_report(options: ReportOptions, output: Path) -> ReportData:
    """Build and write the report atomically; returns its data (with stage timings)."""
    from harness.report.html import render_report

    data = build_report_data(options)
    start = time.perf_counter()
    text = render_report(data, options.top)
    data.timings["render"] = round(time.perf_counter() - start, 3)
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, output)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write report {output}: {error.strerror or error}") from error
    return data
