"""The rendered report in a real browser: headless Chromium screenshots it and logs no console
message. Skipped (loudly) only where /usr/bin/chromium is not installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.report.model import ReportData

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="!!! /usr/bin/chromium IS NOT INSTALLED: the browser test of the HTML report did NOT "
           "run (apt-get install -y chromium) !!!",
)


def _chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """One headless run with a fresh profile, no network services, bounded in time."""
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--no-first-run",
           f"--user-data-dir={profile}", *extra, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def console_messages(stderr: str) -> list[str]:
    """Console output Chromium logs with --enable-logging=stderr (the page has no scripts, so
    any console line is an error: a blocked resource, a parse problem, a script)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def test_console_detector_catches_a_console_error(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text('<p>x</p><script>console.error("bad thing")</script>')
    done = _chromium(page, tmp_path / "profile", "--enable-logging=stderr", "--v=0",
                     "--dump-dom")
    assert any("bad thing" in line for line in console_messages(done.stderr)), done.stderr[-2000:]


def test_report_opens_without_console_errors_and_is_not_blank(
    report_html: str, report_data: ReportData, tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    page.write_text(report_html, encoding="utf-8")
    dom = _chromium(page, tmp_path / "profile-dom", "--enable-logging=stderr", "--v=0",
                    "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    for heading in ("Run summary", "Build comparison", "Recommendations"):
        assert f"<h2>{heading}</h2>" in dom.stdout
    assert "&lt;b&gt;x&lt;/b&gt;" in dom.stdout  # the browser kept the hostile name as text

    png = tmp_path / "report.png"
    shot = _chromium(page, tmp_path / "profile-shot", f"--screenshot={png}",
                     "--window-size=1280,2000")
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    import matplotlib.image

    pixels = np.asarray(matplotlib.image.imread(png))[..., :3]
    assert pixels.shape[:2] == (2000, 1280)
    colours = np.unique((pixels.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50  # text, tables and heatmap colours, not a blank page
    inked = (pixels < 0.9).any(axis=2)
    assert inked.mean() > 0.02 and inked[1000:].mean() > 0.01  # content beyond the header
