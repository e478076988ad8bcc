"""Data preparation: exact counts against a synthetic store whose contents are known."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness import store
from harness.errors import ConfigError, StoreError
from harness.records import FAILED, NOT_ATTEMPTED
from harness.report import ReportOptions, build_report_data
from harness.report.data import prepare
from harness.report.load import load_trials
from harness.report.model import ReportData
from harness.testing.synthstore import SynthSpec, SynthSummary, write_synthetic_store


def _raw(root: Path) -> pd.DataFrame:
    """The trials as written, read straight with pyarrow (independent of the report's loader)."""
    return pq.read_table(root / "trials").to_pandas()


def test_summary_counts_equal_what_was_written(
    synth_store: tuple[Path, SynthSummary], report_data: ReportData, synth_spec: SynthSpec
) -> None:
    _, written = synth_store
    summary = report_data.summary
    assert summary.trials == written.trials == synth_spec.trials == 3 * 12 * 3 * 12
    assert {o.name: o.trials for o in summary.outcomes} == written.outcomes
    failed = sum(n for outcome, n in written.outcomes.items() if outcome in FAILED)
    ruled_out = sum(n for outcome, n in written.outcomes.items() if outcome in NOT_ATTEMPTED)
    assert summary.failures_total == failed
    assert summary.not_attempted == ruled_out
    assert failed + ruled_out == written.trials - written.outcomes["ok"]
    assert {f.outcome for f in summary.failures} >= {"oom_killed", "crashed", "timeout"}
    assert [d.trials for d in summary.devices] == [12 * 3 * 12] * 3
    assert [(b.name, b.trials) for b in summary.builds] == [("b4100", 648), ("b4101", 648)]
    assert summary.runs == written.run_ids
    assert [(m.name, m.detail) for m in summary.models] == [
        ("qwen2.5-1.5b-instruct", "Q4_0, Q4_K_M, Q8_0")]


def test_heatmap_cell_is_the_median_of_good_trials(
    synth_store: tuple[Path, SynthSummary], report_data: ReportData
) -> None:
    raw = _raw(synth_store[0])
    assert report_data.heatmap_build == "b4101"
    # 3 devices × 2 KV types × 2 metrics, each quant (fewest bits first) × n_ctx
    assert len(report_data.heatmaps) == 12
    first = report_data.heatmaps[0]
    assert first.rows == ("Q4_0", "Q4_K_M", "Q8_0") and first.cols == (512, 2048)
    serial = first.device.rsplit(" · ", 1)[1]
    want = raw[(raw.device_serial == serial) & (raw.build_id == "b4101") & (raw.outcome == "ok")
               & ~raw.throttled & (raw.quant == "Q8_0") & (raw.n_ctx == 2048)
               & (raw.type_k == first.kv)][first.metric].median()
    assert first.values[2][1] == pytest.approx(want)


def test_comparison_finds_the_injected_regression(report_data: ReportData) -> None:
    c = report_data.comparison
    assert (c.baseline, c.candidate) == ("b4100", "b4101")
    counts = dict(c.counts)
    assert sum(counts["tg_tps"].values()) == 36  # 3 devices × 12 configs, all paired
    assert counts["tg_tps"]["regression"] >= 32 and counts["tg_tps"]["improvement"] == 0
    assert counts["peak_pss"]["regression"] == 0
    assert c.rows[0].verdict == "regression"
    assert (c.baseline_engine, c.candidate_engine) == ("llama-bench", "llama-bench")


def test_history_puts_the_step_at_the_night_the_build_changed(report_data: ReportData) -> None:
    history = report_data.history
    assert history.series_checked == 36
    at_switch = [m for _, _, m in history.changes if m.night == "2026-01-11"]
    assert len(at_switch) >= 24
    assert all(m.magnitude < 0 and (m.build_before, m.build_after) == ("b4100", "b4101")
               for m in at_switch)
    assert len(history.series) == 6 and history.series[0].change_points


def test_recommendations_are_recommends_picks_for_every_device(
    synth_store: tuple[Path, SynthSummary], report_data: ReportData
) -> None:
    df = prepare(load_trials(synth_store[0]))
    killed = df[df["outcome"] == "oom_killed"]
    assert len(report_data.recommendations) == 3 and not killed.empty
    rejected = 0
    for device in report_data.recommendations:
        picks = [r.pick for r in device.items]
        speeds = [p.tg_tps for p in picks]
        assert picks and speeds == sorted(speeds, reverse=True)
        assert [p.rank for p in picks] == list(range(1, len(picks) + 1))
        # every pick names its whole configuration and has a measured worst peak that fits
        assert all(p.source == "measured" and p.peak_bytes and p.headroom_bytes
                   and p.headroom_bytes > 0 and p.build_id in ("b4100", "b4101")
                   and p.engine == "llama-bench" for p in picks)
        assert "60% of total RAM" in device.memory_source
        oom = killed[killed["device_serial"] == device.serial]
        bad = set(zip(oom["config_id"].astype(str), oom["build_id"].astype(str), strict=True))
        assert not bad & {(p.config_id, p.build_id) for p in picks}
        rejected += len(bad)
    assert rejected  # the low-memory killer's evidence had something to exclude


def test_timelines_cover_a_throttled_trial_and_each_failure(
    report_data: ReportData, synth_spec: SynthSpec
) -> None:
    outcomes = {t.outcome for t in report_data.timelines}
    assert {"oom_killed", "crashed", "timeout"} <= outcomes
    assert any(t.throttled and max(s or 0 for s in t.thermal_status) >= 2
               for t in report_data.timelines)
    assert all(len(t.t_s) == synth_spec.samples_per_trial for t in report_data.timelines)


def test_run_and_since_select_by_path_and_row(synth_store: tuple[Path, SynthSummary]) -> None:
    root, written = synth_store
    one = build_report_data(ReportOptions(root, run_id=written.run_ids[0]))
    assert one.summary.trials == 108 and one.summary.runs == (written.run_ids[0],)
    assert one.comparison.baseline is None and "1 build" in one.comparison.note
    late = load_trials(root, since=date(2026, 1, 14))
    assert len(late) == 3 * 108 and late["started_at"].min() >= pd.Timestamp("2026-01-14", tz="UTC")


def test_named_builds_must_exist(synth_store: tuple[Path, SynthSummary]) -> None:
    with pytest.raises(ConfigError, match=r"--candidate 'b9999'.*builds: b4100, b4101"):
        build_report_data(ReportOptions(synth_store[0], candidate="b9999"))


def test_empty_store_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "trials").mkdir()
    with pytest.raises(StoreError, match="no trials in"):
        build_report_data(ReportOptions(tmp_path))
    with pytest.raises(StoreError, match="no results store"):
        build_report_data(ReportOptions(tmp_path / "absent"))


def test_corrupt_part_skipped_and_missing_column_reads_null(tmp_path: Path) -> None:
    root = tmp_path / "results"
    written = write_synthetic_store(root, SynthSpec(devices=1, nights=2, reps=2))
    part = sorted((root / "trials").glob("date=*/part-*.parquet"))[0]
    table = pq.read_table(part)
    pq.write_table(table.drop_columns(["max_temp_c"]), part)  # an older file
    folder = part.parent
    (folder / "part-broken-0.parquet").write_bytes(b"not parquet at all")
    mark = store.skip_mark()
    df = load_trials(root)
    assert len(df) == written.trials
    assert df["max_temp_c"].isna().sum() == table.num_rows
    assert [p.path.name for p in store.skipped_since(mark)] == ["part-broken-0.parquet"]


def test_plain_string_parts_concatenate_with_dictionary_parts(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_synthetic_store(root, SynthSpec(devices=1, nights=2, reps=2))
    part = sorted((root / "trials").glob("date=*/part-*.parquet"))[0]
    table = pq.read_table(part)
    # a writer that does not dictionary-encode (pyarrow then reads these columns plainly)
    pq.write_table(table, part, use_dictionary=False)
    df = load_trials(root)
    assert df["build_id"].dtype == "category" and set(df["build_id"]) == {"b4100", "b4101"}


def _versioned(path: Path, version: int, drop: tuple[str, ...] = ()) -> None:
    table = pq.read_table(path)
    table = table.drop_columns([c for c in drop if c in table.column_names])
    meta = {**(table.schema.metadata or {}), b"harness.schema_version": str(version).encode()}
    pq.write_table(table.replace_schema_metadata(meta), path)


def test_old_parts_go_through_the_stores_migration(tmp_path: Path) -> None:
    """A schema-4 part has no engine column: its trials were llama-bench's, as for read_table;
    a part of a newer schema is refused as the store refuses it."""
    from analysis.factory import cell, trial, write

    from harness.store import SCHEMA_VERSION, read_table

    root = tmp_path / "results"
    write(root, [trial(cell(build="old"))], run_id="r1")
    write(root, [trial(cell(build="py", engine="llama-cpp-python"), run_id="r2")], run_id="r2")
    part = next((root / "trials").glob("date=*/part-r1-*.parquet"))
    _versioned(part, 4, drop=("engine",))
    frame = load_trials(root)
    assert sorted(frame["engine"].astype(str)) == ["llama-bench", "llama-cpp-python"]
    assert sorted(frame["engine"].astype(str)) == sorted(read_table(root, "trials")["engine"])
    _versioned(part, SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=rf"{part.name}.*upgrade harness"):
        load_trials(root)
