"""The dashboard in a real browser, as a person walks it: headless Chromium opens the index from
the built folder (file://), follows its links to a night, a phone, a configuration and a build
(``harness.testing.sitewalk``), and each page renders its headings with no console message (its
search script included), the hostile names kept as text. Skipped (loudly) only where
/usr/bin/chromium is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from sitefixtures import Site

from harness.testing.sitewalk import CHROMIUM, broken_links, walk

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="!!! /usr/bin/chromium IS NOT INSTALLED: the browser walk of the dashboard did NOT "
           "run (apt-get install -y chromium) !!!",
)
HEADINGS = {"index": ("Alerts", "Phones, last"), "device": ("Availability per night",),
            "config": ("Nights",), "night": ("Comparison with the previous night",),
            "build": ("Where it ran",)}


def test_index_to_device_configuration_build_and_night_in_a_browser(
        farm_site: Site, tmp_path: Path) -> None:
    visits = walk(farm_site.root, tmp_path)
    assert [v.kind for v in visits] == ["index", "device", "config", "night", "build"]
    for visit in visits:
        assert visit.console == [], (visit.page, visit.console)
        for heading in HEADINGS[visit.kind]:
            assert f"<h2>{heading}" in visit.dom, (visit.page, heading)
    index = visits[0].dom
    assert "Pixel &lt;script&gt;alert(1)&lt;/script&gt;" in index  # a hostile name, as text
    assert "<script>alert(1)</script>" not in index
    assert "<svg" in visits[2].dom
    assert broken_links(farm_site.root) == []
