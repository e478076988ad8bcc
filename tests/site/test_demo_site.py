"""The demo's dashboard: `harness demo` ends with the site of its store, its report linked as
the report of the store's latest night (the pieces the demo calls, on a small store)."""

from __future__ import annotations

from pathlib import Path

from harness.demo import DemoPaths, build_demo_site
from harness.site import paths as site_paths
from harness.testing.synthstore import SynthSpec, write_synthetic_store


def test_the_demo_site_links_the_demo_report_as_its_latest_nights(tmp_path: Path) -> None:
    demo = DemoPaths(tmp_path)
    write_synthetic_store(demo.results, SynthSpec(devices=2, nights=2, reps=3,
                                                  quants=("Q4_0",), kv_types=("f16",)))
    demo.report.parent.mkdir(parents=True)
    demo.report.write_text("<!doctype html><title>demo report</title>", encoding="utf-8")
    index = build_demo_site(demo)
    assert index == tmp_path / "reports" / "demo-site" / "index.html" and index.is_file()
    nights = sorted(p.name for p in (demo.site / "nights").glob("*.html"))
    latest = nights[-1].removesuffix(".html")
    copied = demo.site / "reports" / f"nightly-{latest}.html"
    assert copied.read_text(encoding="utf-8") == demo.report.read_text(encoding="utf-8")
    page = (demo.site / site_paths.night_page(latest)).read_text(encoding="utf-8")
    assert f"reports/nightly-{latest}.html" in page
    first = (demo.site / site_paths.night_page(nights[0].removesuffix(".html"))).read_text(
        encoding="utf-8")
    assert "reports/nightly-" not in first  # only the night the demo's report is of
