"""`harness demo` end to end on one virtual phone (the smoke matrix, the README's first command
with a smaller matrix), then its dashboard walked in Chromium: index -> phone -> configuration
-> night -> build -> the demo's report, no console message, no broken link."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.artifacts.builds import Build
from harness.cli import main
from harness.testing.sitewalk import CHROMIUM, broken_links, walk

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not CHROMIUM.exists(), reason="!!! /usr/bin/chromium IS NOT INSTALLED: the demo's dashboard "
    "walk did NOT run (apt-get install -y chromium) !!!")]
REPO = Path(__file__).resolve().parents[2]


def test_the_demo_writes_a_report_and_a_dashboard_a_browser_walks(
        host_build: Build, tiny_ladder: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "demo"
    done = CliRunner().invoke(main, ["demo", "--root", str(root), "--phones", "1", "--matrix",
                                     str(REPO / "matrices" / "smoke.yaml")])
    assert done.exit_code == 0, done.output
    site = root / "reports" / "demo-site"
    assert f"demo: dashboard: {site / 'index.html'}" in done.output
    visits = walk(site, tmp_path / "walk")
    assert [v.kind for v in visits] == ["index", "device", "config", "night", "build", "report"]
    for visit in visits:
        assert visit.console == [], (visit.page, visit.console)
    assert "<h2>Run summary</h2>" in visits[-1].dom
    assert visits[-1].page.read_bytes() == (root / "reports" / "demo.html").read_bytes()
    assert broken_links(site) == []
