"""Incremental builds: nothing changed writes nothing; a new night writes only what it
touched; every write is atomic and the manifest names every page."""

from __future__ import annotations

import json
from pathlib import Path

from sitefixtures import later

from harness.site import paths
from harness.site.build import MANIFEST, build_site
from harness.testing.synthstore import SynthSpec, write_synthetic_store

SPEC = SynthSpec(devices=2, nights=6, reps=3, quants=("Q4_0",), kv_types=("f16",))


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in root.rglob("*") if p.is_file()}


def test_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    store, site = tmp_path / "results", tmp_path / "site"
    write_synthetic_store(store, SPEC)
    first = build_site(store, site, recommend=False)
    assert first.written and not first.unchanged
    before = _snapshot(site)
    again = build_site(store, site, recommend=False)
    assert again.written == ()
    assert set(again.unchanged) == set(first.written)
    assert _snapshot(site) == before  # not even the manifest or the cache was rewritten
    assert not list(site.rglob("*.tmp"))


def test_a_new_night_writes_only_the_pages_it_touched(tmp_path: Path) -> None:
    store, site = tmp_path / "results", tmp_path / "site"
    write_synthetic_store(store, SPEC)
    first = build_site(store, site, recommend=False)
    old_nights = [paths.night_page(f"2026-01-{5 + i:02d}") for i in range(SPEC.nights)]
    write_synthetic_store(store, later(SPEC, nights=1))
    second = build_site(store, site, recommend=False)
    written = set(second.written)
    new_night = paths.night_page("2026-01-11")
    assert new_night in written
    assert {"index.html", "index.json", "search-index.js", "alerts.atom"} <= written
    assert not written & set(old_nights), "an earlier night's page was rewritten"
    assert paths.build_page("b4100") in second.unchanged  # the old build did not run again
    assert "search.html" in second.unchanged
    assert len(second.written) < len(first.written)
    manifest = json.loads((site / MANIFEST).read_text())
    assert manifest["generator"] == "harness site"
    assert set(manifest["pages"]) == set(second.written) | set(second.unchanged)
    assert all((site / p).is_file() for p in manifest["pages"])


def test_a_page_deleted_by_hand_is_written_again(tmp_path: Path) -> None:
    store, site = tmp_path / "results", tmp_path / "site"
    write_synthetic_store(store, SPEC)
    build_site(store, site, recommend=False)
    (site / "index.html").unlink()
    again = build_site(store, site, recommend=False)
    assert again.written == ("index.html",)


def test_reports_and_alert_documents_are_linked_from_their_night(tmp_path: Path) -> None:
    store, site, reports = tmp_path / "results", tmp_path / "site", tmp_path / "reports"
    write_synthetic_store(store, SPEC)
    reports.mkdir()
    (reports / "nightly-2026-01-10.html").write_text("<html>full report</html>")
    doc = {"counts": {"regressions": 1}, "regressions": [
        {"comparison": "<script>x</script>", "device": "SYN0000", "label": "cfg",
         "metric": "tg_tps", "ratio": 0.9, "ci_low": 0.88, "ci_high": 0.93}]}
    (reports / "nightly-2026-01-10-alerts.json").write_text(json.dumps(doc))
    build_site(store, site, reports=reports, recommend=False)
    page = (site / paths.night_page("2026-01-10")).read_text()
    assert 'href="../reports/nightly-2026-01-10.html"' in page
    assert 'href="../alerts/nightly-2026-01-10-alerts.json"' in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>x" not in page
    assert (site / "reports/nightly-2026-01-10.html").read_text() == "<html>full report</html>"
    again = build_site(store, site, reports=reports, recommend=False)
    assert again.written == ()
