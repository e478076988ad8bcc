"""Plain data for the report, prepared from the store with pandas (no matplotlib, no HTML).

Why here: a farm store holds millions of rows; every section is bounded (``top``) so a report
stays a readable, few-megabyte file whatever the store's size. Labels are built once per device
and config. Which trials count and every median come from ``harness.analysis`` (``frames``'s
selection and medians; the comparison, history, recommendations and engine table through
``trends``), so the report says what the commands say.
"""

from __future__ import annotations

import itertools
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from harness import store
from harness.analysis.ab import load_sequential
from harness.analysis.changes import what_changed
from harness.analysis.frames import (
    Side,
    best_medians,
    engine_column,
    medians,
    nights,
    thermal_summary,
    usable,
    usable_mask,
)
from harness.analysis.sustained import sustained_mask
from harness.analysis.validity_table import output_checks
from harness.errors import StoreError
from harness.labels import CONFIG_COLUMNS, distinct_labels, knob_text, varied_knobs
from harness.memory import quant_rank
from harness.records import FAILED, NOT_ATTEMPTED, OUTCOMES
from harness.report import floors, trends, workloads
from harness.report.load import find_trial_ids, load_samples, load_trials
from harness.report.model import (
    ConditionRow,
    Conditions,
    CountRow,
    DeviceRecommendations,
    DeviceRow,
    FailureRow,
    Heatmap,
    KvQualityRow,
    MemoryCell,
    QualityRow,
    Refusal,
    ReportData,
    Summary,
    ThermalPoint,
    ThermalRow,
    Timeline,
)

MAX_FAILURES = 50
MAX_THERMAL_POINTS = 3000
MAX_CONDITION_ROWS = 60
# trial column -> (label when true, label when false); other condition columns are shown as is
CONDITION_FLAGS: dict[str, tuple[str, str]] = {
    "screen_on": ("on", "off"), "stay_awake": ("on", "off"),
    "charging": ("charging", "not charging"), "battery_saver": ("on", "off"),
}
CONDITION_TEXTS = ("affinity", "applied_affinity", "threads", "threads_seen", "charge_source",
                   "doze_state", "cooldown_source", "memory_model")
T = TypeVar("T")


@dataclass(frozen=True)
class ReportOptions:
    results: Path
    run_id: str | None = None
    since: date | None = None
    baseline: str | None = None
    candidate: str | None = None
    top: int = 6  # plots per section (devices, history series, timelines)
    title: str = "Benchmark report"
    baseline_engine: str | None = None
    candidate_engine: str | None = None
    recent: int | None = None  # comparisons: each side's newest usable trials per cell (None: all)


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def quant_order(quants: Sequence[str]) -> list[str]:
    """Quants from fewest to most bits; unknown names last, alphabetically."""
    return sorted(quants, key=quant_rank)


def _labelled(codes: np.ndarray, labels: Sequence[str]) -> pd.Categorical:
    """A categorical from integer codes and a label per code (labels may repeat)."""
    categories = sorted(set(labels))
    remap = np.array([categories.index(label) for label in labels] or [0], dtype=np.int64)
    safe = np.where(codes < 0, 0, codes)
    return pd.Categorical.from_codes(np.where(codes < 0, -1, remap[safe]), categories=categories)


def _group_labels(df: pd.DataFrame, columns: list[str], name: Callable[..., str]
                  ) -> pd.Categorical:
    """One label per distinct combination of ``columns``, computed once per combination."""
    grouped = df.groupby(columns, observed=True, sort=True, dropna=False)
    codes = grouped.ngroup().to_numpy()
    keys = grouped.size().index
    labels = [name(*(k if isinstance(k, tuple) else (k,))) for k in keys]
    return _labelled(codes, labels)


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """Add the label and flag columns every section uses; labels are categoricals made once
    per distinct value, never per row (a million rows, a few hundred labels)."""
    df = df.copy(deep=False)
    df["throttled"] = df["throttled"].fillna(False).astype(bool)
    df["ok"] = (df["outcome"] == "ok").to_numpy()
    # a trial whose affinity or thread count did not take effect measured another config
    df["flagged"] = (df["config_not_applied"].notna().to_numpy() if "config_not_applied" in df
                     else np.zeros(len(df), dtype=bool))
    df["good"] = usable_mask(df).to_numpy()  # the commands' rule of which trials count
    df["engine"] = pd.Categorical(engine_column(df))
    firsts = df.groupby("device_serial", observed=True, sort=True)["device_model"].first()
    emulated = (df.groupby("device_serial", observed=True, sort=True)["cpu_emulation"].first()
                if "cpu_emulation" in df else pd.Series(dtype=object))
    gpus = (df.groupby("device_serial", observed=True, sort=True)["gpu_emulated"].first()
            if "gpu_emulated" in df else pd.Series(dtype=object))

    def device_label(serial: object) -> str:
        model = firsts.get(serial)
        label = f"{model} · {serial}" if isinstance(model, str) and model else str(serial)
        emulator, gpu = emulated.get(serial), gpus.get(serial)
        # an emulated CPU's (or GPU's) speed is not a phone's: say so wherever it is named
        if isinstance(emulator, str):
            label = f"{label} · emulated CPU ({emulator})"
        return f"{label} · emulated GPU ({gpu})" if isinstance(gpu, str) else label

    df["device"] = _group_labels(df, ["device_serial"], device_label)
    # one row per config_id, one label each: the knobs that differ within the report are named
    config_cols = [c for c in CONFIG_COLUMNS if c in df]
    per_config = df.groupby("config_id", observed=True, sort=True)[config_cols].first()
    named = distinct_labels({c: row.to_dict() for c, row in per_config.iterrows()})
    df["config"] = _group_labels(df, ["config_id"], lambda c: named[c])
    df["kv"] = _group_labels(df, ["type_k", "type_v"],
                             lambda k, v: str(k) if k == v else f"{k}/{v}")
    night = nights(df)  # the night its run started: a run across midnight is one night
    df["night"] = pd.Categorical(night, categories=sorted(night.dropna().unique()))
    return df


def analysis_frame(raw: pd.DataFrame) -> pd.DataFrame:
    """The trials as ``harness.store.read_table`` gives them to the commands: strings as plain
    objects (the loader's categoricals would change how pandas groups and sorts them)."""
    categorical = [c for c in raw.columns if isinstance(raw[c].dtype, pd.CategoricalDtype)]
    return raw.astype(dict.fromkeys(categorical, object)) if categorical else raw


def labels(df: pd.DataFrame) -> trends.Labels:
    """The report's device and config labels, by serial and config_id (``prepare``'s)."""
    devices = df.groupby("device_serial", observed=True)["device"].first()
    configs = df.groupby("config_id", observed=True)["config"].first()
    return trends.Labels({str(k): str(v) for k, v in devices.items()},
                         {str(k): str(v) for k, v in configs.items()})


def _failure_rows(rows: pd.DataFrame) -> tuple[FailureRow, ...]:
    return tuple(
        FailureRow(r.started_at.to_pydatetime(), str(r.device), str(r.build_id), str(r.config),
                   str(r.outcome), _text(r.error), _text(r.evidence))
        for r in rows.itertuples(index=False))


def summarise(df: pd.DataFrame) -> Summary:
    per_device = df.groupby("device_serial", observed=True).agg(
        device=("device", "first"), soc=("device_soc", "first"),
        ram=("device_ram_bytes", "max"), trials=("ok", "size"), ok=("ok", "sum"))
    devices = tuple(
        DeviceRow(str(s), str(r.device), _text(r.soc),
                  None if pd.isna(r.ram) else int(r.ram), int(r.trials), int(r.ok))
        for s, r in per_device.sort_values("device").iterrows())
    builds = df.groupby("build_id", observed=True)["started_at"].agg(["size", "min", "max"])
    build_rows = tuple(
        CountRow(str(b), int(r["size"]), f"{r['min']:%Y-%m-%d} → {r['max']:%Y-%m-%d}")
        for b, r in builds.sort_values("min").iterrows())
    models = df.groupby("model_name", observed=True)["quant"].agg(
        ["size", lambda q: ", ".join(quant_order([str(x) for x in q.unique()]))])
    model_rows = tuple(CountRow(str(m), int(r.iloc[0]), str(r.iloc[1]))
                       for m, r in models.iterrows())
    counts = df["outcome"].value_counts()
    counts = counts[counts > 0]
    known = [o for o in OUTCOMES if o in counts] + sorted(set(counts.index) - set(OUTCOMES))
    outcomes = tuple(CountRow(o, int(counts[o])) for o in known)
    engines = df.groupby("engine", observed=True)["build_id"].agg(
        ["size", lambda b: ", ".join(sorted({str(x) for x in b.unique()}))])
    engine_rows = tuple(CountRow(str(e), int(r.iloc[0]), str(r.iloc[1]))
                        for e, r in engines.iterrows())
    # what ran, or tried to, and failed: a cell the plan, engine or phone ruled out is not one
    failed = df[df["outcome"].isin(FAILED)]
    listed = failed.nlargest(MAX_FAILURES, "started_at") if len(failed) else failed
    return Summary(
        trials=len(df), runs=tuple(sorted(str(r) for r in df["run_id"].unique())),
        first=df["started_at"].min().to_pydatetime(), last=df["started_at"].max().to_pydatetime(),
        devices=devices, builds=build_rows, models=model_rows, outcomes=outcomes,
        failures=_failure_rows(listed), failures_total=len(failed), engines=engine_rows,
        not_attempted=int(df["outcome"].isin(NOT_ATTEMPTED).sum()),
        output=output_checks(df))


def latest_side(df: pd.DataFrame) -> Side | None:
    """The (build, engine) that ran the newest trial."""
    if df.empty:
        return None
    newest = df.loc[df["started_at"].idxmax()]
    return Side(str(newest["build_id"]), str(newest["engine"]))


def _side(df: pd.DataFrame, side: Side | None) -> pd.DataFrame:
    if side is None:
        return df.iloc[:0]
    return df[(df["build_id"] == side.build) & (df["engine"] == side.engine)]


def top_devices(df: pd.DataFrame, top: int) -> list[str]:
    counts = df.groupby("device", observed=True).size().sort_values(ascending=False)
    return sorted(str(d) for d in counts.index[:top])


def heatmaps(df: pd.DataFrame, side: Side | None, top: int) -> tuple[Heatmap, ...]:
    """Median over usable burst trials per cell, best thread count, per device, KV type and
    metric (a sustained workload's rate is its own section's)."""
    scope = _side(df, side)
    scope = scope[~sustained_mask(scope).to_numpy()]
    good = scope[scope["good"]]
    if good.empty:
        return ()
    out: list[Heatmap] = []
    scope = scope.assign(variant=_variants(scope))
    by = ["device", "kv", "variant", "quant", "n_ctx"]
    variants = sorted(str(v) for v in scope["variant"].unique())
    for metric in ("tg_tps", "pp_tps"):
        med = best_medians(scope, by, "threads", metric)
        iqr = spread(scope, by, "threads", metric)
        for device in top_devices(good, top):
            for kv, variant in itertools.product(sorted(str(k) for k in good["kv"].unique()),
                                                 variants):
                try:
                    grid = med.loc[(device, kv, variant)].unstack("n_ctx")
                except KeyError:
                    continue
                rows = quant_order([str(q) for q in grid.index])
                cols = tuple(sorted(int(c) for c in grid.columns))
                grid = grid.reindex(index=rows, columns=list(cols))
                values = tuple(tuple(None if pd.isna(v) else float(v) for v in r)
                               for r in grid.to_numpy())
                ends = []
                for end in ("low", "high"):
                    part = iqr[end].loc[(device, kv, variant)].unstack("n_ctx").reindex(
                        index=rows, columns=list(cols))
                    ends.append(tuple(tuple(None if pd.isna(v) else float(v) for v in r)
                                      for r in part.to_numpy()))
                out.append(Heatmap(device, kv, metric, tuple(rows), cols, values,
                                   low=ends[0], high=ends[1], variant=variant))
    return tuple(sorted(out, key=lambda h: (h.device, h.metric != "tg_tps", h.kv, h.variant)))


#: The knobs a heatmap lays out (quant x n_ctx), faces (KV) or picks the best of (threads).
GRID_KNOBS = ("quant", "n_ctx", "kv", "threads")


def _variants(frame: pd.DataFrame) -> pd.Series:
    """Per trial: its values of the knobs off the heatmap's grid that differ within ``frame``
    ("" when none does), so configurations that differ in them get heatmaps of their own."""
    config_cols = [c for c in CONFIG_COLUMNS if c in frame]
    per_config = frame.groupby("config_id", observed=True, sort=True)[config_cols].first()
    rows = {c: row.to_dict() for c, row in per_config.iterrows()}
    varied = varied_knobs(list(rows.values()), skip=GRID_KNOBS)
    text = {c: knob_text(row, varied) for c, row in rows.items()}
    return frame["config_id"].astype(object).map(text).astype(object)


def spread(frame: pd.DataFrame, by: Sequence[str], over: str, column: str) -> pd.DataFrame:
    """Per group of ``by``: the 25th (``low``) and 75th (``high``) percentile of ``column`` over
    the usable trials of the value of ``over`` whose median is best (``best_medians``'s choice);
    NaN where that value has fewer than two trials."""
    kept = usable(frame)
    grouped = kept.groupby([*by, over], observed=True, sort=True)[column]
    per = pd.DataFrame({"median": grouped.median(), "low": grouped.quantile(0.25),
                        "high": grouped.quantile(0.75), "n": grouped.count()})
    per = per[per["median"].notna()]
    if per.empty:
        empty = pd.MultiIndex.from_arrays([[] for _ in by], names=list(by))
        return pd.DataFrame({"low": [], "high": []}, index=empty)
    best = per.groupby(level=list(range(len(by))), observed=True)["median"].idxmax()
    chosen = per.loc[list(best)].droplevel(over)
    few = chosen["n"] < 2
    return chosen[["low", "high"]].mask(few)


def memory_cells(df: pd.DataFrame, side: Side | None) -> tuple[MemoryCell, ...]:
    """Median measured peak RSS (the predictor models resident memory: weights + KV + compute
    + overhead) against the prediction, over usable trials, throttled ones included."""
    grouped = medians(_side(df, side), ["device", "config"],
                      ["peak_rss_bytes", "predicted_peak_bytes", "predicted_kv_bytes",
                       "kv_reported_bytes"], include_throttled=True)
    grouped = grouped.dropna(subset=["peak_rss_bytes"])
    return tuple(MemoryCell(str(d), str(c), float(r.peak_rss_bytes),
                            _float(r.predicted_peak_bytes), _float(r.predicted_kv_bytes),
                            _float(r.kv_reported_bytes))
                 for (d, c), r in grouped.iterrows())


def _float(value: Any) -> float | None:
    return None if pd.isna(value) else float(value)


def quality_rows(df: pd.DataFrame, cache_dir: Path | None = None) -> tuple[QualityRow, ...]:
    """The quality of every model file the trials used whose score is cached (harness quality),
    in ladder order, with the trials' median speed and peak beside it."""
    from harness.analysis.quality import cached_quality_files, load_quality_files

    by_sha = load_quality_files(cached_quality_files(cache_dir))
    if not by_sha or "model_sha256" not in df:
        return ()
    keys = ["model_name", "quant", "model_sha256"]
    measured = medians(df, keys, ["tg_tps", "peak_rss_bytes"], include_throttled=True)
    rows = []
    for model, quant, sha in df[keys].dropna().drop_duplicates().itertuples(index=False):
        score = by_sha.get(str(sha))
        if score is None:
            continue
        mine = measured.loc[(model, quant, sha)] if (model, quant, sha) in measured.index \
            else None
        rows.append(QualityRow(
            str(model), str(quant), score.kl, score.kl_max, score.top1, score.ppl,
            score.positions, score.text,
            _float(mine["tg_tps"]) if mine is not None else None,
            _float(mine["peak_rss_bytes"]) if mine is not None else None))
    order = {q: i for i, q in enumerate(quant_order([r.quant for r in rows]))}
    return tuple(sorted(rows, key=lambda r: (r.model, -order[r.quant])))


def kv_quality_rows(df: pd.DataFrame, cache_dir: Path | None = None,
                    ) -> tuple[KvQualityRow, ...]:
    """The cached KV cells (harness quality --kv) of the ladders whose files the trials used,
    per engine build, then weights, depth and KV type (f16, the reference, first)."""
    from harness.analysis.kv_loss_measure import cached_kv_cells

    if "model_sha256" not in df:
        return ()
    models = {str(sha): str(model) for model, sha in
              df[["model_name", "model_sha256"]].dropna().drop_duplicates()
              .itertuples(index=False)}
    rows = []
    for c in cached_kv_cells(cache_dir):
        used = [models[s] for s in (c.sha256, *c.ladder_shas) if s in models]
        if not used:
            continue
        rows.append(KvQualityRow(used[0], c.quant, c.kv, c.depth, c.kl, c.kl_max, c.top1, c.ppl,
                                 c.repeated_4gram, c.longest_loop, c.gen_tokens, c.build.label,
                                 c.text, len(c.runs), c.looping))
    return tuple(sorted(rows, key=lambda r: (r.build, r.model, r.quant, r.depth,
                                             r.kv != "f16", r.kl, r.kv)))


def pick_timeline_trials(df: pd.DataFrame, top: int) -> pd.DataFrame:
    """A few telling trials: the biggest ok peak, the hottest throttled, one of each failure."""
    picks = []
    good = df[df["good"]]
    if not good.empty and good["peak_pss_bytes"].notna().any():
        picks.append(good.loc[[good["peak_pss_bytes"].idxmax()]])
    hot = df[df["throttled"] & df["max_temp_c"].notna()]
    if not hot.empty:
        picks.append(hot.loc[[hot["max_temp_c"].idxmax()]])
    for outcome in ("oom_killed", "crashed", "timeout"):
        rows = df[df["outcome"] == outcome]
        if not rows.empty:
            picks.append(rows.loc[[rows["started_at"].idxmax()]])
    if not picks:
        return df.iloc[:0]
    keys = ["run_id", "device_serial", "config_id", "started_at"]
    return pd.concat(picks).drop_duplicates(keys).head(top)


def _numbers(column: pd.Series) -> tuple[float | None, ...]:
    return tuple(None if pd.isna(v) else float(v) for v in column)


def timelines(root: Path, df: pd.DataFrame, top: int) -> tuple[Timeline, ...]:
    chosen = pick_timeline_trials(df, top).copy()
    chosen["trial_id"] = find_trial_ids(root, chosen)
    chosen = chosen[chosen["trial_id"].notna()]
    samples = load_samples(root, chosen[["run_id", "trial_id"]])
    out = []
    for row in chosen.itertuples(index=False):
        s = samples[samples["trial_id"].astype(str) == str(row.trial_id)].sort_values("t_ms")
        if s.empty:
            continue
        title = f"{row.device} · {row.config} · {row.build_id} · {row.outcome}"
        out.append(Timeline(title, str(row.outcome), bool(row.throttled),
                            tuple(float(t) / 1000 for t in s["t_ms"]), _numbers(s["pss_bytes"]),
                            _numbers(s["thermal_status"]), _numbers(s["max_temp_c"])))
    return tuple(out)


def thermal(df: pd.DataFrame) -> tuple[tuple[ThermalRow, ...], tuple[ThermalPoint, ...], int]:
    rows = thermal_summary(df, ["device"])
    table = tuple(ThermalRow(str(d), int(r.trials), int(r.throttled),
                             _float(r.median_temp_c), _float(r.max_temp_c))
                  for d, r in rows.iterrows())
    temps = df[df["max_temp_c"].notna()]
    hot, cool = temps[temps["throttled"]], temps[~temps["throttled"]]
    hot = hot.sample(n=min(len(hot), MAX_THERMAL_POINTS // 10), random_state=0)
    cool = cool.sample(n=min(len(cool), MAX_THERMAL_POINTS - len(hot)), random_state=0)
    shown = pd.concat([cool, hot])
    points = tuple(ThermalPoint(str(d), t.to_pydatetime(), float(m), bool(h)) for d, t, m, h in zip(
        shown["device"], shown["started_at"], shown["max_temp_c"], shown["throttled"], strict=True))
    return table, points, len(temps)


def _labels(column: pd.Series, name: str) -> pd.Series:
    """Display text per trial for one condition column ("" where it was not read)."""
    if name in CONDITION_FLAGS:
        yes, no = CONDITION_FLAGS[name]
        values = column.astype(object)
        out = pd.Series("", index=column.index, dtype=object)
        out[values.eq(True)] = yes
        out[values.eq(False)] = no
        return out
    text = column.astype(object).where(column.notna(), "")
    return text.map(lambda v: str(int(v)) if isinstance(v, float) else str(v))


def _distinct(keys: pd.DataFrame, labels: pd.Series) -> dict[tuple[str, str], str]:
    """Per (device, config): the one label, or each label with its count when they differ."""
    counts = keys.assign(v=labels.to_numpy()).groupby(
        ["device", "config", "v"], observed=True, sort=False).size()
    found: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for (device, config, value), n in counts.items():
        found.setdefault((str(device), str(config)), []).append((str(value), int(n)))
    out: dict[tuple[str, str], str] = {}
    for key, values in found.items():
        shown = [(v, n) for v, n in values if v] or [("", 0)]
        out[key] = shown[0][0] if len(shown) == 1 else " · ".join(
            f"{v} {n}" for v, n in sorted(shown, key=lambda p: (-p[1], p[0])))
    return out


_MORE = re.compile(r"^and \d+ more$")
_NUMBERED = re.compile(r"\b(thermal_zone|cooling_device|cpu|policy)\d+\b")  # one row for all


def refusals(df: pd.DataFrame) -> tuple[Refusal, ...]:
    """Per device, each thing its shell could not read and in how many trials, most first (a
    trial lists at most a dozen: "and N more" is not a thing; numbered nodes of one kind, the
    thermal zones say, are one row: ``thermal_zone*/temp``)."""
    if "unreadable" not in df:
        return ()
    counts: Counter[tuple[str, str]] = Counter()
    for device, text in zip(df["device"], df["unreadable"], strict=True):
        if isinstance(text, str) and text:
            for what in dict.fromkeys(_NUMBERED.sub(r"\1*", part) for part in text.split("; ")):
                if not _MORE.match(what):
                    counts[(str(device), what)] += 1
    return tuple(Refusal(device, what, n) for (device, what), n in
                 sorted(counts.items(), key=lambda item: (item[0][0], -item[1], item[0][1])))


def conditions(df: pd.DataFrame, limit: int = MAX_CONDITION_ROWS) -> Conditions:
    """Per device and config: the affinity asked for and applied, the threads that ran, and the
    phone's pre-flight state; configs with flagged trials first, then by device and config."""
    present = [c for c in ("applied_affinity", "threads_seen", *CONDITION_FLAGS, "doze_state",
                           "cooldown_source") if c in df]
    recorded = bool(present) and bool(df[present].notna().to_numpy().any())
    per = df.groupby(["device", "config"], observed=True, sort=True).agg(
        trials=("ok", "size"), flagged=("flagged", "sum"))
    refused = refusals(df)
    if per.empty:
        return Conditions((), 0, recorded, refused)
    per = per.sort_values("flagged", ascending=False, kind="stable")
    shown = per.head(limit)
    wanted = set(shown.index)
    keys = df[["device", "config"]]
    rows_in = [k in wanted for k in zip(keys["device"], keys["config"], strict=True)]
    part = df[rows_in]
    part_keys = part[["device", "config"]]
    texts = {name: _distinct(part_keys, _labels(part[name], name)) if name in part else {}
             for name in (*CONDITION_TEXTS, *CONDITION_FLAGS)}
    rows = []
    for (device, config), r in shown.iterrows():
        key = (str(device), str(config))
        rows.append(ConditionRow(
            device=key[0], config=key[1], trials=int(r.trials), flagged=int(r.flagged),
            **{name: texts[name].get(key, "") for name in (*CONDITION_TEXTS, *CONDITION_FLAGS)}))
    return Conditions(tuple(rows), len(per), recorded, refused)


def _timed(timings: dict[str, float], name: str, fn: Callable[[], T]) -> T:
    start = time.perf_counter()
    result = fn()
    timings[name] = round(time.perf_counter() - start, 3)
    return result


def build_report_data(
    options: ReportOptions,
    recommendations: Sequence[DeviceRecommendations] | None = None,
) -> ReportData:
    """Read the store and prepare every section; a StoreError when nothing matches."""
    timings: dict[str, float] = {}
    mark = store.skip_mark()
    raw = _timed(timings, "load", lambda: load_trials(options.results, options.run_id,
                                                      options.since))
    if raw.empty:
        where = (f"run {options.run_id!r}" if options.run_id else
                 f"since {options.since}" if options.since else "the store")
        raise StoreError(f"no trials in {options.results} for {where}; run `harness run` first "
                         "or check --results/--run/--since")
    df = _timed(timings, "prepare", lambda: prepare(raw))
    trials = analysis_frame(raw)
    names = labels(df)
    summary = _timed(timings, "summary", lambda: summarise(df))
    choice = trends.SideChoice(options.baseline, options.candidate, options.baseline_engine,
                               options.candidate_engine, options.recent,
                               load_sequential(options.results))
    comparison, compared = _timed(timings, "compare",
                                  lambda: trends.compared(trials, names, choice))
    several_engines = df["engine"].nunique() > 1
    found = _timed(timings, "noise", lambda: floors.floors(trials))
    comparison = floors.with_floors(comparison, found)
    noise = _timed(timings, "noise_table",
                   lambda: floors.section(trials, names, found, several_engines))
    changed = _timed(timings, "changes", lambda: trends.changes(
        what_changed(trials, compared), names, comparison, several_engines))
    side = (Side(comparison.candidate, comparison.candidate_engine or "")
            if comparison.candidate else latest_side(df))
    maps = _timed(timings, "heatmaps", lambda: heatmaps(df, side, options.top))
    cells = _timed(timings, "memory", lambda: memory_cells(df, side))
    lines = _timed(timings, "timelines", lambda: timelines(options.results, df, options.top))
    rows, points, total = _timed(timings, "thermal", lambda: thermal(df))
    ran_as = _timed(timings, "conditions", lambda: conditions(df))
    scored = _timed(timings, "quality", lambda: quality_rows(df))
    kv_scored = _timed(timings, "kv quality", lambda: kv_quality_rows(df))
    throttled = df[df["throttled"]].nlargest(20, "started_at")
    history = _timed(timings, "history", lambda: trends.history(trials, names, "tg_tps",
                                                                options.top))
    recs = tuple(recommendations) if recommendations is not None else _timed(
        timings, "recommend", lambda: trends.recommendations(trials, names))
    engines = _timed(timings, "engines", lambda: trends.engines(trials, names, options.recent))
    sustained = _timed(timings, "sustained", lambda: workloads.sustained_section(
        options.results, trials, names, options.top))
    energy = _timed(timings, "energy", lambda: workloads.energy_section(trials, names))
    valid = _timed(timings, "validity", lambda: workloads.validity_section(trials, names))
    paged = _timed(timings, "paging", lambda: workloads.paging_section(trials, names))
    offloaded = _timed(timings, "offload", lambda: workloads.offload_section(trials, names))
    scope = (f"run {options.run_id}" if options.run_id else
             f"since {options.since}" if options.since else "whole store")
    return ReportData(
        title=options.title, scope=scope, generated_at=datetime.now(UTC), summary=summary,
        heatmap_build=side.build if side else None, heatmaps=maps, memory_cells=cells,
        timelines=lines,
        thermal_rows=rows, thermal_points=points, thermal_points_total=total,
        throttled_trials=_failure_rows(throttled), comparison=comparison, history=history,
        recommendations=recs, timings=timings, conditions=ran_as, quality=scored,
        kv_quality=kv_scored,
        heatmap_engine=side.engine if side else None, engines=engines, sustained=sustained,
        energy=energy, validity=valid, changes=changed, noise=noise, paging=paged,
        offload=offloaded,
        skipped_parts=tuple(part.line() for part in store.skipped_since(mark)))
