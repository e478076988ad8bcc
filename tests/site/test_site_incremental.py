"""Incremental builds: nothing changed writes nothing; a new night writes only what it
touched; every write is atomic and the manifest names every page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sitefixtures import later

from harness.site import build, model, paths
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


def test_old_nights_keep_the_comparison_of_their_own_morning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the newest COMPARED_NIGHTS nights are compared at a build: a first build over a
    longer history says so on the older nights, while a site built every morning keeps each
    night's comparison from the morning it was the newest."""
    monkeypatch.setattr(model, "COMPARED_NIGHTS", 2)
    store, daily, late = tmp_path / "results", tmp_path / "daily", tmp_path / "late"
    first_nights = SynthSpec(devices=2, nights=2, reps=3, quants=("Q4_0",), kv_types=("f16",))
    write_synthetic_store(store, first_nights)
    build_site(store, daily, recommend=False)  # mornings 1 and 2 (as one: two nights, both new)
    for i in range(3):
        write_synthetic_store(store, later(first_nights, nights=1, seed=20 + i)
                              if i == 0 else later(later(first_nights, nights=i), nights=1,
                                                   seed=20 + i))
        build_site(store, daily, recommend=False)
    build_site(store, late, recommend=False)  # the same five nights, built once
    second = paths.night_page("2026-01-06")  # the second night: three nights older than now
    assert "Not compared: only the newest 2 nights" in (late / second).read_text()
    kept = (daily / second).read_text()
    assert "Not compared" not in kept and "2026-01-06 vs previous night 2026-01-05" in kept
    newest = paths.night_page("2026-01-09")
    assert (late / newest).read_text() == (daily / newest).read_text()


def test_recommendations_from_the_build_process_pool_are_the_ones_made_inline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large store's build computes its recommendations in a process beside the rest: the
    device pages are the same bytes as when each is computed inline, and name the command."""
    store = tmp_path / "results"
    write_synthetic_store(store, SPEC)
    inline = build_site(store, tmp_path / "inline")
    monkeypatch.setattr(build, "POOL_FROM_TRIALS", 0)
    pooled = build_site(store, tmp_path / "pooled")
    assert sorted(pooled.written) == sorted(inline.written)
    devices = sorted((tmp_path / "inline" / "devices").glob("*.html"))
    assert devices
    for page in devices:
        text = page.read_text(encoding="utf-8")
        assert text == (tmp_path / "pooled" / "devices" / page.name).read_text(encoding="utf-8")
        assert "harness recommend --device SYN000" in text and " --build b410" in text


def test_a_memo_made_by_other_code_is_not_served(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo keys carry the harness's source hash: a fix to the analysis recomputes every
    remembered answer (change points, comparisons) instead of serving the old ones."""
    store, site = tmp_path / "results", tmp_path / "site"
    write_synthetic_store(store, SPEC)
    build_site(store, site, recommend=False)
    cache = site / build.CACHE
    before = {p.name for p in cache.glob("*.json")}
    assert any(n.startswith("changes-") for n in before)
    assert any(n.startswith("compare-") for n in before)
    # the same code: every answer is served from the memo
    build_site(store, site, recommend=False)
    assert {p.name for p in cache.glob("*.json")} == before
    monkeypatch.setattr(model, "code_key", lambda: "analysis-fixed")
    calls = []
    real = model.changes_of
    monkeypatch.setattr(model, "changes_of", lambda points: calls.append(1) or real(points))
    build_site(store, site, recommend=False)
    after = {p.name for p in cache.glob("*.json")}
    assert calls, "no change point was computed again"
    assert not before & after  # none of the old answers is kept, or served
