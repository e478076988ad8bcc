"""The built site: its pages exist, link to each other, stay small and fetch nothing."""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlsplit

from sitefixtures import GONE_SERIAL, HOSTILE, HOT_SERIAL, Site

from harness.site import paths
from harness.testing.sitewalk import parse

MAX_PAGE_BYTES = 2 << 20


def test_every_kind_of_page_is_written(farm_site: Site) -> None:
    root = farm_site.root
    for name in ("index.html", "search.html", "index.json", "search-index.js", "alerts.atom",
                 "site.json"):
        assert (root / name).is_file(), name
    for folder, expected in (("devices", 3), ("nights", 10), ("builds", 2)):
        assert len(list((root / folder).glob("*.html"))) == expected, folder
    assert list((root / "configs").glob("*.html"))
    assert (root / paths.device_page(GONE_SERIAL)).is_file()
    assert (root / paths.night_page("2026-01-14")).is_file()


def test_every_relative_link_resolves_and_nothing_is_fetched(farm_site: Site) -> None:
    root = farm_site.root
    pages = farm_site.html_pages()
    assert len(pages) > 20
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert len(text.encode()) < MAX_PAGE_BYTES, page
        for ref in parse(text).refs:
            parts = urlsplit(ref)
            assert not parts.scheme and not parts.netloc, f"{page}: external {ref}"
            target = (page.parent / parts.path).resolve()
            assert target.is_file(), f"{page.relative_to(root)} links to missing {ref}"
            assert root.resolve() in target.parents


def test_index_json_lists_every_page(farm_site: Site) -> None:
    index = json.loads(farm_site.read("index.json"))
    listed = [e["path"] for kind in ("devices", "configs", "builds", "nights")
              for e in index[kind]]
    assert len(listed) == len(set(listed))
    for path in listed:
        assert (farm_site.root / path).is_file(), path
    assert {d["serial"] for d in index["devices"]} == {"SYN0000", HOT_SERIAL, GONE_SERIAL}
    script = farm_site.read("search-index.js")
    assert script.startswith("window.HARNESS_SITE_INDEX = ")
    assert "<" not in script and ">" not in script


def test_hostile_names_are_escaped_everywhere(farm_site: Site) -> None:
    for page in farm_site.html_pages():
        text = page.read_text(encoding="utf-8")
        assert "<script>alert(1)" not in text, page
        assert "<b>x</b>" not in text, page
    index = farm_site.read("index.html")
    assert "Pixel &lt;script&gt;alert(1)&lt;/script&gt;" in index
    assert "Galaxy $x$ &amp; S23" in index
    text = " ".join(parse(farm_site.read(paths.device_page(HOT_SERIAL))).text)
    assert HOSTILE[1] in text  # shown as characters, not markup
    feed = ET.fromstring(farm_site.read("alerts.atom"))
    assert feed.tag.endswith("feed")


def _entries(site: Site) -> list[dict[str, str]]:
    ns = {"a": "http://www.w3.org/2005/Atom"}
    feed = ET.fromstring(site.read("alerts.atom"))
    out = []
    for entry in feed.findall("a:entry", ns):
        link = entry.find("a:link", ns)
        out.append({"id": entry.findtext("a:id", "", ns),
                    "title": entry.findtext("a:title", "", ns),
                    "href": "" if link is None else link.get("href", ""),
                    "content": entry.findtext("a:content", "", ns)})
    return out


def test_planted_regression_on_index_config_page_and_feed(farm_site: Site) -> None:
    index = farm_site.read("index.html")
    changes = index.split('id="changes"')[1].split("</section>")[0]
    assert "b4100 → b4101" in changes and "harness bisect" in changes
    builds = index.split('id="builds"')[1].split("</section>")[0]
    assert "b4101 vs baseline b4100" in builds and 'class="regression"' in builds
    assert "95% CI" in builds
    good, bad = (hashlib.sha1(b.encode()).hexdigest() for b in ("b4100", "b4101"))
    config_pages = [p for p in (farm_site.root / "configs").glob("*.html")  # their commits
                    if f"--good {good} --bad {bad}" in p.read_text(encoding="utf-8")]
    assert config_pages, "no configuration page shows the change point's bisect line"
    page = config_pages[0].read_text(encoding="utf-8")
    assert "harness bisect --source" in page and 'stroke-dasharray' in page
    entries = _entries(farm_site)
    assert any(e["title"].startswith("Build b4101: ") and "regressions against b4100" in e["title"]
               for e in entries)
    change = [e for e in entries if e["title"].startswith("Change point:")]
    assert change and any("b4100 -> b4101" in e["title"] for e in change)
    assert all((farm_site.root / e["href"]).is_file() for e in entries)
    assert len({e["id"] for e in entries}) == len(entries)


def test_missing_phone_and_hot_battery_are_flagged(farm_site: Site) -> None:
    alerts = farm_site.read("index.html").split('id="alerts"')[1].split("</section>")[0]
    assert "missing 2 nights" in alerts and "(SYN0002)" in alerts
    assert "battery temperature trends up" in alerts and f"({HOT_SERIAL})" in alerts
    assert alerts.count("battery temperature trends up") == 1
    assert "°C over its last 10 nights" in alerts  # the ten nights the store has, not 14
    gone = farm_site.read(paths.device_page(GONE_SERIAL))
    assert "missing 2 nights" in gone.split('id="flags"')[1].split("</ul>")[0]
    hot = farm_site.read(paths.device_page(HOT_SERIAL))
    assert "battery temperature trends up" in hot.split('id="flags"')[1].split("</ul>")[0]
    calm = farm_site.read(paths.device_page("SYN0000"))
    assert 'id="flags"' not in calm


def test_throttled_nights_are_marks_not_line_points(farm_site: Site) -> None:
    pages = [p.read_text(encoding="utf-8") for p in (farm_site.root / "configs").glob("*.html")]
    assert any("<title>throttled " in p for p in pages)
    assert all("<polyline" in p for p in pages)


def test_night_page_shows_missing_phone_and_comparison(farm_site: Site) -> None:
    night = farm_site.read(paths.night_page("2026-01-13"))
    assert "Missing phones" in night and "(SYN0002)" in night.split("Missing phones")[1]
    assert "vs previous night 2026-01-12" in night


def test_paths_are_stable_and_safe() -> None:
    hostile = "../../etc/<passwd> & \u00e9"
    page = paths.device_page(hostile)
    assert page == paths.device_page(hostile)
    assert page.startswith("devices/") and page.count("/") == 1 and ".." not in page
    assert all(c.isalnum() or c in "._-/" for c in page)
    assert paths.device_page("a/b") != paths.device_page("a_b")
    assert paths.relative("configs/x.html", "devices/y.html") == "../devices/y.html"
    assert paths.relative("index.html", "devices/y.html") == "devices/y.html"


def test_page_sizes_are_small(farm_site: Site) -> None:
    sizes = [p.stat().st_size for p in Path(farm_site.root).rglob("*") if p.is_file()]
    assert max(sizes) < MAX_PAGE_BYTES
