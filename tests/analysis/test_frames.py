"""Trials become per-cell groups: which trials count, how throttled ones are counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.frames import (
    CellKey,
    build_groups,
    load_trials,
    metric_name,
    paired_groups,
    parse_metrics,
    usable,
)
from harness.errors import ConfigError, StoreError
from harness.store import read_table

from .factory import cell, trial, write


@pytest.mark.parametrize(("alias", "name"), [
    ("peak_pss", "peak_pss"), ("peak_pss_bytes", "peak_pss"), ("tg", "tg_tps"),
    ("TG_TPS", "tg_tps"), ("ttft", "ttft_ms"), ("peak_rss_bytes", "peak_rss"),
])
def test_metric_aliases_resolve_to_canonical_names(alias: str, name: str) -> None:
    assert metric_name(alias) == name


def test_unknown_metric_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown metric 'tokens'.*tg_tps"):
        metric_name("tokens")


def test_parse_metrics_keeps_order_and_drops_duplicates() -> None:
    assert parse_metrics("tg_tps, peak_pss,tg") == ("tg_tps", "peak_pss")


def test_throttled_and_failed_trials_are_excluded_and_counted(tmp_path: Path) -> None:
    c = cell()
    write(tmp_path, [
        trial(c, rep=0, tg_tps=20.0), trial(c, rep=1, tg_tps=21.0),
        trial(c, rep=2, tg_tps=12.0, throttled=True),
        trial(c, rep=3, tg_tps=None, pp_tps=None, outcome="crashed"),
    ])
    frame = read_table(tmp_path, "trials")
    group = build_groups(frame, "b1", ["tg_tps"])[CellKey("SER1", c.config_id)]
    assert sorted(group.values["tg_tps"]) == [20.0, 21.0]
    assert (group.n_trials, group.n_ok, group.n_throttled_excluded) == (4, 3, 1)
    assert group.outcomes == {"ok": 3, "crashed": 1}
    kept = build_groups(frame, "b1", ["tg_tps"], include_throttled=True)
    assert sorted(kept[CellKey("SER1", c.config_id)].values["tg_tps"]) == [12.0, 20.0, 21.0]


def test_trials_whose_cell_did_not_take_effect_are_excluded_and_counted(tmp_path: Path) -> None:
    """A CPU mask the phone ignored measured another configuration: never in a verdict."""
    c = cell(affinity="0x2")
    write(tmp_path, [
        trial(c, rep=0, tg_tps=20.0, affinity_applied=True, applied_affinity="1"),
        trial(c, rep=1, tg_tps=31.0, affinity_applied=False, applied_affinity="0-1",
              config_not_applied="affinity 0x2 (CPUs 1) requested, threads ran on CPUs 0-1"),
        trial(c, rep=2, tg_tps=12.0, throttled=True),
    ])
    frame = read_table(tmp_path, "trials")
    for include_throttled, kept in ((False, [20.0]), (True, [12.0, 20.0])):
        group = build_groups(frame, "b1", ["tg_tps"], include_throttled=include_throttled)[
            CellKey("SER1", c.config_id)]
        assert sorted(group.values["tg_tps"]) == kept
        assert group.n_not_applied_excluded == 1
    assert list(usable(frame)["tg_tps"]) == [20.0]
    assert build_groups(frame, "b1", ["tg_tps"])[
        CellKey("SER1", c.config_id)].n_throttled_excluded == 1


def test_pairs_only_cells_measured_with_both_builds(tmp_path: Path) -> None:
    write(tmp_path, [
        trial(cell(build="a")), trial(cell(build="b")),
        trial(cell(build="a", quant="Q8_0")),  # only the baseline measured this config
        trial(cell(build="b"), serial="SER2"),  # only the candidate ran on SER2
    ])
    pairs = paired_groups(read_table(tmp_path, "trials"), "a", "b")
    assert list(pairs) == [CellKey("SER1", cell().config_id)]
    base, cand = pairs[CellKey("SER1", cell().config_id)]
    assert (base.build_id, cand.build_id) == ("a", "b")
    assert base.label == "tiny Q4_K_M ctx512 kv=f16 t4 fa=auto p32/g16 b256/ub128"


def test_an_emulated_cpu_is_never_paired_with_a_native_one(tmp_path: Path) -> None:
    """A virtual arm64 phone (qemu) reused the serial of a native phone: no verdict between
    them; two emulated runs still pair with each other."""
    write(tmp_path, [
        trial(cell(build="a")), trial(cell(build="b"), cpu_emulation="qemu-aarch64"),
        trial(cell(build="a", quant="Q8_0"), cpu_emulation="qemu-aarch64"),
        trial(cell(build="b", quant="Q8_0"), cpu_emulation="qemu-aarch64"),
    ])
    pairs = paired_groups(read_table(tmp_path, "trials"), "a", "b")
    assert list(pairs) == [CellKey("SER1", cell(quant="Q8_0").config_id)]
    base, cand = pairs[CellKey("SER1", cell(quant="Q8_0").config_id)]
    assert base.cpu_emulation == cand.cpu_emulation == "qemu-aarch64"


def test_an_absent_build_names_the_builds_the_store_holds(tmp_path: Path) -> None:
    write(tmp_path, [trial(cell(build="a")), trial(cell(build="b"))])
    with pytest.raises(ConfigError, match=r"--candidate 'c'.*builds: a, b"):
        paired_groups(read_table(tmp_path, "trials"), "a", "c")


def test_a_folder_without_a_store_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no results store"):
        load_trials(tmp_path)


def test_a_missing_engine_reads_llama_bench_and_sides_pair_build_and_engine(
        tmp_path: Path) -> None:
    from harness.analysis.frames import Side, engine_column, sides

    write(tmp_path, [trial(cell(build="a"), engine=None),
                     trial(cell(build="p", engine="llama-cpp-python"), rep=1)])
    frame = read_table(tmp_path, "trials")
    assert frame["engine"].isna().sum() == 1  # written as null by an old writer
    assert list(engine_column(frame)) == ["llama-bench", "llama-cpp-python"]
    assert sides(frame) == [Side("a", "llama-bench"), Side("p", "llama-cpp-python")]
    assert list(engine_column(frame.drop(columns=["engine"]))) == ["llama-bench"] * 2


def test_recent_keeps_the_newest_usable_trials_and_counts_throttled_among_them(
        tmp_path: Path) -> None:
    """--recent 10: per side and cell the 10 newest usable trials, and only the throttled ones
    newer than the 10th (not every throttled trial of the store)."""
    from datetime import timedelta

    import numpy as np

    from harness.analysis.ab import compare_builds

    from .factory import START

    rng = np.random.default_rng(1)
    records = []
    for build, level, every, day in (("base", 10.0, 4, 0), ("cand", 9.2, 2, 5)):
        c = cell(build=build)
        for i in range(40):
            records.append(trial(c, rep=i, started_at=START + timedelta(days=day, hours=i),
                                 throttled=i % every == 0,
                                 tg_tps=float(level * rng.lognormal(0, 0.01))))
    write(tmp_path, records)
    frame = read_table(tmp_path, "trials")
    result = compare_builds(frame, "base", "cand", ["tg_tps"], recent=10)
    (one,) = result.cells
    c = one.comparison
    assert (c.n_baseline, c.n_candidate) == (10, 10)
    assert (c.throttled_baseline, c.throttled_candidate) == (3, 9)
    assert c.verdict == "regression" and result.to_json()["recent"] == 10
    everything = compare_builds(frame, "base", "cand", ["tg_tps"]).cells[0].comparison
    assert (everything.n_baseline, everything.throttled_candidate) == (30, 20)
