"""The dashboard in a real browser, as a person walks it: headless Chromium opens the index from
the built folder (file://), follows its links to a device, a configuration and a night, and
each page renders its headings with no console message (its search script included), the
hostile names kept as text. Skipped (loudly) only where /usr/bin/chromium is not installed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
from sitefixtures import Site, parse

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="!!! /usr/bin/chromium IS NOT INSTALLED: the browser walk of the dashboard did NOT "
           "run (apt-get install -y chromium) !!!",
)


def _dom(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The page's DOM after its scripts ran, and the console lines Chromium logged."""
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--no-first-run",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--allow-file-access-from-files", "--dump-dom", page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines()
               if ":CONSOLE" in line or "Uncaught" in line]
    return done.stdout, console


def _link(dom: str, page: Path, pattern: str) -> Path:
    """The first link of ``dom`` (the page at ``page``) whose target matches ``pattern``."""
    for ref in parse(dom).refs:
        if re.search(pattern, ref) and "://" not in ref:
            target = (page.parent / unquote(ref.split("#", 1)[0])).resolve()
            assert target.is_file(), f"{page.name} links to {ref}, which is not there"
            return target
    raise AssertionError(f"{page.name} has no link matching {pattern!r}")


def test_index_to_device_configuration_build_and_night_in_a_browser(
        farm_site: Site, tmp_path: Path) -> None:
    index = farm_site.root / "index.html"
    dom, console = _dom(index, tmp_path / "p0")
    assert console == [], console
    for heading in ("Alerts", "Phones, last"):
        assert f"<h2>{heading}" in dom
    assert "Pixel &lt;script&gt;alert(1)&lt;/script&gt;" in dom  # a hostile name, as text
    assert "<script>alert(1)</script>" not in dom
    night = _link(dom, index, r"(^|/)nights/")

    device = _link(dom, index, r"(^|/)devices/")
    dom, console = _dom(device, tmp_path / "p1")
    assert console == [], console
    assert "<h2>Availability per night</h2>" in dom

    config = _link(dom, device, r"(^|/)configs/")
    dom, console = _dom(config, tmp_path / "p2")
    assert console == [], console
    assert "<h2>Nights</h2>" in dom and "<svg" in dom
    build = _link(dom, config, r"(^|/)builds/")

    dom, console = _dom(night, tmp_path / "p3")
    assert console == [], console
    assert "<h2>Comparison with the previous night</h2>" in dom

    dom, console = _dom(build, tmp_path / "p4")
    assert console == [], console
    assert "<h2>Where it ran</h2>" in dom
