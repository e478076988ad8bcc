"""The report's analytic sections: build comparison, nightly history, per-device recommendations.

The statistics are ``harness.analysis``'s (compare_many, detect_change_points); this module only
groups the store's rows into their inputs and keeps the outputs bounded. Why the most recent
``max_per_side`` trials per build and cell: a nightly store can hold hundreds of repetitions of a
cell per build, a bootstrap over all of them costs seconds per cell, and the question a report
answers is how the builds compare now, which the recent trials answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable

import numpy as np
import pandas as pd

from harness.analysis.compare import compare_many
from harness.analysis.history import detect_change_points
from harness.errors import ConfigError
from harness.report.model import (
    ChangeMark,
    ComparisonRow,
    ComparisonSection,
    DeviceRecommendations,
    HistorySection,
    HistorySeries,
    Recommendation,
)

COMPARE_METRICS = (("tg_tps", True), ("pp_tps", True), ("peak_pss_bytes", False))
VERDICT_ORDER = ("regression", "unstable", "improvement", "same")
MAX_HISTORY_SERIES = 2000
GIB = float(1 << 30)


def pick_builds(df: pd.DataFrame, baseline: str | None,
                candidate: str | None) -> tuple[str | None, str | None, str]:
    """(baseline, candidate, note); a ConfigError when a named build has no trials in scope."""
    first = df.groupby("build_id", observed=True)["started_at"].min().sort_values()
    builds = [str(b) for b in first.index]
    for flag, name in (("--baseline", baseline), ("--candidate", candidate)):
        if name is not None and name not in builds:
            raise ConfigError(f"{flag} {name!r}: no trials of that build in this report's scope "
                              f"(builds: {', '.join(builds)})")
    if baseline and candidate:
        return baseline, candidate, ""
    if baseline or candidate:
        others = [b for b in builds if b != (baseline or candidate)]
        if len(others) == 1:
            return (baseline, others[0], "") if baseline else (others[0], candidate, "")
    if not (baseline or candidate) and len(builds) == 2:
        return builds[0], builds[1], "the two builds in scope, older one as baseline"
    return None, None, (f"{len(builds)} build(s) in scope; pass --baseline and --candidate "
                        "to compare two of them")


def _badness(row: ComparisonRow, higher_is_better: bool) -> tuple[int, float]:
    ratio = row.ratio if np.isfinite(row.ratio) else 1.0
    return VERDICT_ORDER.index(row.verdict), ratio if higher_is_better else -ratio


def comparison(df: pd.DataFrame, baseline: str | None, candidate: str | None,
               max_per_side: int) -> ComparisonSection:
    """Every (device, config) measured with both builds, per metric, throttled trials excluded
    (and counted), trials whose affinity or threads did not take effect left out."""
    base, cand, note = pick_builds(df, baseline, candidate)
    if base is None or cand is None:
        return ComparisonSection(None, None, note)
    columns = ["device", "config", "started_at", "throttled", *(m for m, _ in COMPARE_METRICS)]
    mask = df["ok"] & df["build_id"].isin([base, cand])
    if "flagged" in df:  # data.prepare adds it
        mask &= ~df["flagged"]
    both = df.loc[mask, columns]
    both["side"] = np.where(df.loc[mask, "build_id"] == base, 0, 1)
    keys = ["device", "config", "side"]
    # newest first, up to max_per_side usable trials per side, and the throttled ones among them
    both = both.sort_values("started_at", ascending=False)
    usable = (~both["throttled"]).astype(np.int64)
    before = both.assign(u=usable).groupby(keys, observed=True)["u"].cumsum() - usable
    window = both[before < max_per_side]
    throttled = window.groupby(keys, observed=True)["throttled"].sum()
    recent = window[~window["throttled"]]
    sides = recent.groupby(["device", "config"], observed=True)["side"].nunique()
    paired = set(sides[sides == 2].index)
    counts: list[tuple[str, dict[str, int]]] = []
    rows: list[ComparisonRow] = []
    for metric, higher in COMPARE_METRICS:
        values = recent.dropna(subset=[metric]).groupby(keys, observed=True)[metric].agg(list)
        groups: dict[Hashable, tuple[list[float], list[float]]] = {}
        thr: dict[Hashable, tuple[int, int]] = {}
        for key in sorted(paired):
            b, c = values.get((*key, 0)), values.get((*key, 1))
            if b is None or c is None:
                continue
            groups[key] = (b, c)
            thr[key] = (int(throttled.get((*key, 0), 0)), int(throttled.get((*key, 1), 0)))
        results = compare_many(groups, higher_is_better=higher, throttled=thr)
        metric_rows = [ComparisonRow(str(k[0]), str(k[1]), metric, r.ratio, r.ci_low, r.ci_high,
                                     r.p_adjusted, r.cliffs_delta, r.n_baseline, r.n_candidate,
                                     r.verdict, r.reason)
                       for k, r in results.items() if isinstance(k, tuple)]
        rows.extend(sorted(metric_rows, key=lambda r, h=higher: _badness(r, h)))  # type: ignore[misc]
        tally = {v: sum(r.verdict == v for r in metric_rows) for v in VERDICT_ORDER}
        counts.append((metric, tally))
    rows.sort(key=lambda r: VERDICT_ORDER.index(r.verdict))
    note = note or "named on the command line"
    note += (f"; up to {max_per_side} most recent non-throttled ok trials per build and cell; "
             "Benjamini-Hochberg adjusted per metric")
    return ComparisonSection(base, cand, note, tuple(counts), tuple(rows))


def history(df: pd.DataFrame, metric: str, top: int) -> HistorySection:
    """Nightly medians per device and config (and build, when builds share nights)."""
    good = df[df["good"] & df[metric].notna()]
    if good.empty:
        return HistorySection(metric, 0, (), ())
    keys = ["device", "config"]
    mixed = good.groupby([*keys, "night"], observed=True)["build_id"].nunique().max() > 1
    if mixed:
        keys.append("build_id")
    nightly = good.groupby([*keys, "night"], observed=True).agg(
        median=(metric, "median"), build=("build_id", "first")).reset_index()
    nightly = nightly.sort_values([*keys, "night"], kind="stable")
    series_id = nightly.groupby(keys, observed=True, sort=False).ngroup().to_numpy()
    starts = np.flatnonzero(np.diff(series_id, prepend=-1) != 0)
    bounds = [*starts.tolist(), len(nightly)][: MAX_HISTORY_SERIES + 1]
    night_text = nightly["night"].astype(str).to_numpy()
    build_text = nightly["build"].astype(str).to_numpy()
    key_text = [nightly[k].astype(str).to_numpy() for k in keys]
    values = nightly["median"].to_numpy(dtype=float)
    checked: list[tuple[float, int, HistorySeries]] = []
    changes: list[tuple[str, str, ChangeMark]] = []
    for a, b in itertools.pairwise(bounds):
        nights = tuple(night_text[a:b])
        medians = values[a:b]
        built = tuple(build_text[a:b])
        found = detect_change_points(medians) if medians.size >= 6 else []
        marks = tuple(ChangeMark(nights[c.index], c.magnitude, c.p_value, built[c.index - 1],
                                 built[c.index]) for c in found)
        device, config = key_text[0][a], " · ".join(k[a] for k in key_text[1:])
        changes.extend((device, config, m) for m in marks)
        series = HistorySeries(device, config, metric, nights, tuple(medians.tolist()),
                               built, marks, tuple(c.index for c in found))
        size = max((abs(m.magnitude) for m in marks), default=0.0)
        checked.append((size, len(nights), series))
    checked.sort(key=lambda s: (-s[0], -s[1], s[2].device, s[2].config))
    changes.sort(key=lambda c: -abs(c[2].magnitude))
    return HistorySection(metric, len(checked), tuple(s for _, _, s in checked[:top]),
                          tuple(changes))


def recommend(df: pd.DataFrame, build: str | None, per_device: int = 5
              ) -> tuple[DeviceRecommendations, ...]:
    """Simple rule until recommend.py exists: per device, the measured configs that never
    failed and did not throttle, fastest generation first, with their peak memory."""
    rows = df[(df["build_id"] == (build or ""))]
    failed = rows[~rows["ok"]].groupby(["device", "config"], observed=True).size()
    bad = set(failed.index)
    good = rows[rows["good"]]
    stats = good.groupby(["device", "config"], observed=True).agg(
        tg=("tg_tps", "median"), pp=("pp_tps", "median"), peak=("peak_pss_bytes", "median"),
        ram=("device_ram_bytes", "max"))
    out = []
    for device, part in stats.groupby(level=0, observed=True):
        part = part[[k not in bad for k in part.index]].sort_values("tg", ascending=False)
        items = []
        for (_, config), r in part.head(per_device).iterrows():
            peak = None if pd.isna(r.peak) else float(r.peak)
            ram = None if pd.isna(r.ram) else float(r.ram)
            head = ram - peak if ram is not None and peak is not None else None
            reason = f"{r.tg:.1f} tok/s generation measured"
            if peak is not None and head is not None and ram:
                reason += (f"; peak {peak / GIB:.2f} GiB leaves {head / GIB:.2f} GiB of "
                           f"{ram / GIB:.0f} GiB")
            items.append(Recommendation(str(config), float(r.tg), None if pd.isna(r.pp)
                                        else float(r.pp), peak, head, "measured", reason))
        out.append(DeviceRecommendations(str(device), tuple(items)))
    return tuple(out)
