"""The site's aggregates, each one vectorised pass over the trials (pure).

A year of a farm is two million trials; a page must not select its rows from them. Every figure
a page shows is a row of one of these tables, computed once per build by a group-by over the
whole frame and then split by page key (``split``), so building 2,000 configuration pages costs
one group-by, not 2,000.

The frame these read is ``prepare``'s: the trials with ``night`` and ``engine`` filled and the
masks ``_ok``, ``_usable``, ``_throttled``, ``_invalid``, ``_failed`` (``harness.analysis.frames``'
rules) and ``_ref``, the trials of reference builds (a build the farm runs every night beside
the build under test, ``harness nightly --baseline``'s). Main builds follow
``harness.analysis.trend``: the build with the most trials, ties to the alphabetically first,
reference builds only where nothing else ran.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from harness.analysis.frames import engine_column, invalid, nights, throttled, usable_mask
from harness.records import FAILED

SERIES = ["device_serial", "config_id", "engine"]
METRICS = ("tg_tps", "pp_tps")


def prepare(frame: pd.DataFrame, references: Sequence[str] = ()) -> pd.DataFrame:
    """``frame`` with its night, engine and the masks the pages count by, added in place (a
    year of trials is not copied for them)."""
    out = frame
    out["_ref"] = frame["build_id"].isin(list(references)).to_numpy()
    out["night"] = nights(frame).to_numpy()
    out["engine"] = engine_column(frame).astype(str).to_numpy()
    out["_usable"] = usable_mask(out).to_numpy()
    out["_throttled"] = throttled(out).to_numpy()
    out["_invalid"] = invalid(out).to_numpy()
    out["_ok"] = (out["outcome"] == "ok").to_numpy()
    out["_failed"] = out["outcome"].isin(list(FAILED)).to_numpy()
    return out


def main_builds(frame: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """Per group of ``keys``: the build with the most trials (ties: alphabetically first), a
    reference build only when the group ran nothing else."""
    table = frame.groupby([*keys, "build_id"], observed=True, sort=False).agg(
        n=("_ok", "size"), ref=("_ref", "first")).reset_index()
    table = table.sort_values([*keys, "ref", "n", "build_id"],
                              ascending=[True] * len(keys) + [True, False, True])
    first = table.drop_duplicates(list(keys))
    return first.set_index(list(keys))["build_id"].astype(str)


def split(table: pd.DataFrame, keys: Sequence[str]) -> dict[tuple[str, ...], np.ndarray]:
    """Row positions of ``table`` per value of ``keys`` (as text), rows in table order."""
    grouped = table.groupby(list(keys), observed=True, sort=False).indices
    out: dict[tuple[str, ...], np.ndarray] = {}
    for key, pos in grouped.items():
        parts = key if isinstance(key, tuple) else (key,)
        out[tuple(str(p) for p in parts)] = np.sort(pos)
    return out


def config_nights(frame: pd.DataFrame) -> pd.DataFrame:
    """Per series (device, config, engine) and night: trial counts by state, the medians of
    throttled (``hot_*``) and invalid (``bad_*``) trials, and the night's main build, all of the
    builds under test: reference builds are kept out of a configuration's line and table, as
    ``harness nightly``'s history keeps its baseline out."""
    if frame["_ref"].any():
        frame = frame[~frame["_ref"]]
    keys = [*SERIES, "night"]
    per = frame.groupby(keys, observed=True, sort=True).agg(
        trials=("_ok", "size"), failed=("_failed", "sum"), throttled=("_throttled", "sum"),
        invalid=("_invalid", "sum"), usable=("_usable", "sum"))
    metrics = [m for m in METRICS if m in frame]
    ok, hot, bad = frame["_ok"], frame["_throttled"], frame["_invalid"]
    hot_medians = frame[ok & hot & ~bad].groupby(keys, observed=True)[metrics].median()
    bad_medians = frame[ok & bad].groupby(keys, observed=True)[metrics].median()
    per = per.join(hot_medians.add_prefix("hot_")).join(bad_medians.add_prefix("bad_"))
    per = per.join(main_builds(frame, keys).rename("build"))
    return per.reset_index()


def device_nights(frame: pd.DataFrame) -> pd.DataFrame:
    """Per device and night: counts, and the medians of battery and hottest temperature."""
    return frame.groupby(["device_serial", "night"], observed=True, sort=True).agg(
        trials=("_ok", "size"), failed=("_failed", "sum"), throttled=("_throttled", "sum"),
        invalid=("_invalid", "sum"), battery=("battery_temp_c", "median"),
        temp=("max_temp_c", "median")).reset_index()


def lists(frame: pd.DataFrame, key: str, column: str) -> dict[str, list[str]]:
    """Per value of ``key``: the distinct values of ``column`` as sorted text (codes, not a
    Python set per group: a year of trials has two million rows)."""
    key_codes, keys = pd.factorize(frame[key], sort=False)
    codes, values = pd.factorize(frame[column], sort=False)
    valid = (key_codes >= 0) & (codes >= 0)
    width = max(len(values), 1)
    pairs = np.unique(key_codes[valid].astype(np.int64) * width + codes[valid])
    texts = np.asarray([str(v) for v in values], dtype=object)
    out: dict[str, list[str]] = {str(k): [] for k in keys}
    for k, c in zip((pairs // width).tolist(), (pairs % width).tolist(), strict=True):
        out[str(keys[k])].append(texts[c])
    return {k: sorted(v) for k, v in out.items()}


def night_facts(frame: pd.DataFrame) -> pd.DataFrame:
    """Per night: trials, throttled and invalid counts, its runs, builds and devices (sorted
    lists), the count per outcome (a dict, by outcome name) and its main build."""
    grouped = frame.groupby("night", observed=True, sort=True)
    facts = grouped.agg(trials=("_ok", "size"), throttled=("_throttled", "sum"),
                        invalid=("_invalid", "sum"))
    for column, name in (("run_id", "runs"), ("build_id", "builds"),
                         ("device_serial", "devices")):
        found = lists(frame, "night", column)
        facts[name] = [found.get(str(n), []) for n in facts.index]
    counts = frame.groupby(["night", "outcome"], observed=True, sort=True).size()
    outcomes: dict[str, dict[str, int]] = {}
    for (night, outcome), n in counts.items():
        if n:
            outcomes.setdefault(str(night), {})[str(outcome)] = int(n)
    facts["outcomes"] = [outcomes.get(str(n), {}) for n in facts.index]
    facts["main_build"] = main_builds(frame, ["night"]).reindex(facts.index)
    return facts


def failures(frame: pd.DataFrame) -> pd.DataFrame:
    """Failed trials per night, series and outcome: their count, builds and first error."""
    failed = frame[frame["_failed"]]
    keys = ["night", *SERIES, "outcome"]
    if failed.empty:
        return pd.DataFrame(columns=[*keys, "trials", "builds", "error"])
    grouped = failed.groupby(keys, observed=True, sort=True)
    out = grouped.agg(trials=("_ok", "size"))
    out["builds"] = grouped["build_id"].agg(lambda v: sorted({str(b) for b in v.dropna()}))
    out["error"] = grouped["error"].first() if "error" in failed else ""
    return out.reset_index()


def build_facts(frame: pd.DataFrame) -> pd.DataFrame:
    """Per build: its trials, the nights it ran (sorted), its devices and engines."""
    grouped = frame.groupby("build_id", observed=True, sort=True)
    facts = grouped.agg(trials=("_ok", "size"))
    facts.index = facts.index.astype(str)
    for column, name in (("night", "nights"), ("device_serial", "devices"),
                         ("engine", "engines")):
        found = lists(frame, "build_id", column)
        facts[name] = [found.get(b, []) for b in facts.index]
    return facts
