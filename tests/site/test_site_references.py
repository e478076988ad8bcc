"""A reference build run every night beside the build under test (`--baseline`), and what a
change point offers to bisect."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from harness.cli import main
from harness.site import paths
from harness.site.build import build_site
from harness.site.model import bisect_advice
from harness.testing.synthstore import SynthSpec, write_synthetic_store

TESTED = SynthSpec(devices=2, nights=6, reps=3, quants=("Q4_0",), kv_types=("f16",),
                   builds=("b1", "b2"), regressed_build="b2", regression=0.3)
REFERENCE = SynthSpec(devices=2, nights=6, reps=3, quants=("Q4_0",), kv_types=("f16",),
                      builds=("release",), regressed_build=None, seed=3)


def _store(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    write_synthetic_store(root, TESTED)
    write_synthetic_store(root, REFERENCE)
    return root


def _tables(site: Path) -> list[str]:
    return [p.read_text(encoding="utf-8").split("<h2>Nights</h2>")[1]
            for p in sorted((site / "configs").glob("*.html"))]


def _trials(table: str) -> list[int]:
    """The trials column of a configuration page's table of nights."""
    return [int(n) for n in re.findall(
        r'<td>b\d</td><td class="n">[^<]*</td><td class="n">(\d+)</td>', table)]


def test_a_reference_build_stays_out_of_the_lines_and_is_every_builds_baseline(
        tmp_path: Path) -> None:
    results = _store(tmp_path)
    mixed, kept = tmp_path / "mixed", tmp_path / "site"
    build_site(results, mixed, recommend=False)
    assert {n for t in _tables(mixed) for n in _trials(t)} == {6}  # without: both builds' 3+3
    build_site(results, kept, recommend=False, references=("release",))
    tables = _tables(kept)
    assert {n for t in tables for n in _trials(t)} == {3}
    assert tables and not any("<td>release</td>" in t for t in tables)
    assert all("<td>b1</td>" in t and "<td>b2</td>" in t for t in tables)
    b2 = (kept / paths.build_page("b2")).read_text(encoding="utf-8")
    assert "b2 vs baseline release" in b2
    release = (kept / paths.build_page("release")).read_text(encoding="utf-8")
    assert "no baseline" in release
    index = (kept / "index.html").read_text(encoding="utf-8")
    changes = index.split('id="changes"')[1].split("</section>")[0]
    assert "b1 → b2" in changes
    assert json.loads((kept / "site.json").read_text())["references"] == ["release"]
    again = build_site(results, kept, recommend=False)  # None: the site's own references
    assert again.written == ()


def test_baseline_option_of_site_build(tmp_path: Path) -> None:
    results, site = _store(tmp_path), tmp_path / "site"
    done = CliRunner().invoke(main, ["site", "build", "--results", str(results), "-o",
                                     str(site), "--baseline", "release", "--no-recommend"])
    assert done.exit_code == 0, done.output
    assert json.loads((site / "site.json").read_text())["references"] == ["release"]


def test_bisect_advice_between_commits_and_when_there_is_nothing_to_bisect() -> None:
    line = bisect_advice("b1", "b2", ("aaa111", "bbb222"), "llama-bench", "c1", "SER 1")
    assert line["bisect"] == ("harness bisect --source LLAMA_CPP_CHECKOUT --good aaa111 "
                              "--bad bbb222 --cell c1 --results RESULTS --devices 'SER 1'")
    assert line["bisect_note"] is None
    tags = bisect_advice("b4100", "b4101", (None, "bbb222"), "llama-bench", "c1", "S")
    assert tags["bisect"] is not None and "--good b4100 --bad b4101" in tags["bisect"]
    same = bisect_advice("fast", "slow", ("0c1e57098bba43ac", "0c1e57098bba43ac"),
                         "llama-bench", "c1", "S")
    assert same["bisect"] is None
    assert same["bisect_note"] is not None and "same llama.cpp commit (0c1e57098bba)" in \
        same["bisect_note"]
    other = bisect_advice("a", "b", ("1", "2"), "mnn-llm-bench", "c1", "S")
    assert other["bisect"] is None and "mnn-llm-bench" in str(other["bisect_note"])
    # build ids that are no revision (a farm's names for its builds): a note, not a command
    named = bisect_advice("host-release", "host-slow", (None, None), "llama-bench", "c1", "S")
    assert named["bisect"] is None
    assert "build host-release is not a revision git knows" in str(named["bisect_note"])
    half = bisect_advice("b4100", "host-slow", (None, "bbb222"), "llama-bench", "c1", "S")
    assert half["bisect"] is None and "host-slow" in str(half["bisect_note"])


def test_a_build_id_reused_every_night_is_bisected_between_its_nights_commits(
        tmp_path: Path) -> None:
    """A farm that calls tonight's build `nightly` every night: the change point's builds are
    `nightly` on both sides, and its bisect line names the two nights' commits."""
    root = tmp_path / "results"
    write_synthetic_store(root, TESTED)
    for part in (root / "trials").glob("date=*/*.parquet"):
        table = pq.read_table(part)
        index = table.schema.get_field_index("build_id")
        table = table.set_column(index, table.schema.field(index),
                                 pa.array(["nightly"] * table.num_rows, pa.string()))
        pq.write_table(table, part)
    site = tmp_path / "site"
    build_site(root, site, recommend=False)
    good, bad = (hashlib.sha1(b.encode()).hexdigest() for b in ("b1", "b2"))
    changes = (site / "index.html").read_text(encoding="utf-8").split(
        'id="changes"')[1].split("</section>")[0]
    assert "nightly → nightly" in changes
    assert f"--good {good} --bad {bad}" in changes
