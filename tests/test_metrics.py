"""The metric registry: every metric reads a stored column, names and aliases never clash, and
compare, recommend, the matrix and the CLI take their facts from it."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from harness.analysis import frames, recommend
from harness.analysis.compare import higher_is_better
from harness.errors import ConfigError
from harness.metrics import ADAPTIVE_METRICS, METRICS, OBJECTIVES, metric, objective
from harness.records import TrialRecord


def test_every_metric_reads_a_trial_column_and_every_name_is_unique() -> None:
    columns = {f.name for f in dataclasses.fields(TrialRecord)}
    assert all(m.column in columns for m in METRICS)
    names = [n for m in METRICS for n in (m.name, *m.aliases)]
    assert len(names) == len(set(names))


def test_names_aliases_and_case_resolve_to_one_metric() -> None:
    assert metric("TTFT").name == "ttft_ms" and metric(" pss ").column == "peak_pss_bytes"
    assert frames.metric_name("peak_rss_bytes") == "peak_rss"
    assert higher_is_better("ttft") is False and higher_is_better("tg") is True
    with pytest.raises(ConfigError, match="unknown metric 'tps'; known: tg_tps"):
        metric("tps")
    with pytest.raises(ConfigError, match="unknown metric 'energy'"):
        frames.metric_name("energy")  # not a per-trial figure compare can test


def test_recommend_objectives_and_adaptive_metrics_come_from_the_registry() -> None:
    assert tuple(OBJECTIVES) == typing.get_args(recommend.Objective)
    assert objective("energy").column == "tg_j_per_token"
    assert not objective("ttft").higher_is_better
    assert set(ADAPTIVE_METRICS) <= set(frames.METRIC_COLUMNS)
    with pytest.raises(ConfigError, match="objective 'speed': use one of tg_tps"):
        objective("speed")


def test_a_value_reads_with_its_unit() -> None:
    assert metric("tg_tps").text(20.06) == "20.1 tok/s"
    assert metric("energy").text(0.01234) == "0.0123 J per generated token"
