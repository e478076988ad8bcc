"""What each page of the site shows, computed from the trials frame once per build.

Pure: ``SiteModel`` reads a trials frame (``frames.load_trials``) and answers, per page, a plain
JSON-ready dict (``index``, ``device``, ``config``, ``night``, ``build``). A page's dict is all
its template reads, so the digest of the dict decides whether the page must be written again
(``build``). The two costly figures, comparisons (``harness compare``'s rule) and device
recommendations (``harness recommend``'s), are not part of those dicts: they are keyed by a
digest of their input rows and computed through a ``Memo`` (a cache the build keeps on disk), so
a morning computes only the comparisons whose rows changed.

Rules the pages show:

* a **night** is the UTC date of ``started_at`` (``frames.nights``); the store's nights are the
  dates with any trial;
* a phone is **missing** when the store has nights after its last one; missing for
  ``MISSING_FLAG_NIGHTS`` (2) or more nights is flagged on the index and its page;
* a phone's **battery temperature trends up** when the least-squares slope of its nightly
  median ``battery_temp_c`` over its last ``TREND_NIGHTS`` nights is at least
  ``TREND_SLOPE_C`` per night and the fitted rise over that window at least ``TREND_RISE_C``;
* a configuration's line joins its nightly medians of usable trials (``trend.nightly_history``:
  ok, valid, applied, not throttled); throttled trials' medians and nights with invalid trials
  are drawn as separate marks, never joined into the line;
* a **build's baseline** is the build first seen before it (by night, then name); a night is
  compared with the previous night (each night's main build, engine by engine).
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from harness.analysis.ab import BuildComparison, compare_builds
from harness.analysis.frames import engine_column, invalid, nights, throttled, usable_mask
from harness.analysis.trend import Series, nightly_history
from harness.records import FAILED
from harness.site import paths

SCHEMA_VERSION = 1
METRICS = ("tg_tps", "pp_tps")
STRIP_NIGHTS = 30
MISSING_FLAG_NIGHTS = 2
MISSING_LOOKBACK = 7
TREND_NIGHTS = 14
TREND_SLOPE_C = 0.1
TREND_RISE_C = 1.0
FLAGGED_SHOWN = 50
_NARROW = ("run_id", "trial_id", "cell_id", "config_id", "device_serial", "device_model",
           "device_manufacturer", "device_soc", "device_sdk", "device_ram_bytes", "build_id",
           "engine", "night", "outcome", "error", "throttled", "valid", "tg_tps", "pp_tps",
           "battery_temp_c", "max_temp_c", "started_at", "_usable", "_throttled", "_invalid",
           "_ok", "_failed")
_ROW_COLUMNS = ("trial_id", "device_serial", "config_id", "build_id", "engine", "outcome",
                "throttled", "valid", "tg_tps", "pp_tps", "battery_temp_c", "max_temp_c")


class Memo(Protocol):
    """A store of computed JSON values by key (the build keeps one on disk)."""

    def get(self, key: str, compute: Callable[[], Any]) -> Any: ...


class DictMemo:
    """A ``Memo`` in memory (tests, one-off builds)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self.values:
            self.values[key] = compute()
        return self.values[key]


def digest(value: Any) -> str:
    """SHA-256 of ``value`` as canonical JSON."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str,
                      allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rows_digest(rows: pd.DataFrame) -> str:
    """SHA-256 of the rows' identifying and measured columns (their order does not matter)."""
    cols = [c for c in _ROW_COLUMNS if c in rows.columns]
    if rows.empty:
        return hashlib.sha256(b"empty").hexdigest()
    hashed = pd.util.hash_pandas_object(rows[cols], index=False).to_numpy()
    return hashlib.sha256(np.sort(hashed).tobytes()).hexdigest()


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _round(value: Any, digits: int = 4) -> float | None:
    number = _num(value)
    return None if number is None else round(number, digits)


@dataclass(frozen=True)
class DeviceFacts:
    serial: str
    name: str
    manufacturer: str
    soc: str
    sdk: str
    ram_bytes: int | None
    first_night: str
    last_night: str
    missing_nights: int  # store nights after its last one

    @property
    def display(self) -> str:
        return f"{self.name} ({self.serial})" if self.name and self.name != self.serial \
            else self.serial


def _first(values: pd.Series) -> str:
    kept = values.dropna()
    return str(kept.iloc[0]) if not kept.empty else ""


def battery_trend(temps: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(slope °C per night, fitted rise over the window) of the last ``TREND_NIGHTS`` values."""
    window = [t for t in temps if t is not None][-TREND_NIGHTS:]
    if len(window) < 5:
        return None, None
    x = np.arange(len(window), dtype=np.float64)
    slope = float(np.polyfit(x, np.asarray(window, dtype=np.float64), 1)[0])
    return slope, slope * (len(window) - 1)


def trend_flagged(slope: float | None, rise: float | None) -> bool:
    return slope is not None and rise is not None and slope >= TREND_SLOPE_C \
        and rise >= TREND_RISE_C


def flagged_json(result: BuildComparison, title: str) -> dict[str, Any]:
    """A comparison as the pages show it: counts and the regression/improvement cells."""
    flagged = []
    for cell in result.worst_first():
        c = cell.comparison
        if c.verdict not in ("regression", "improvement"):
            continue
        flagged.append({
            "device": cell.key.device, "config_id": cell.key.config_id, "label": cell.label,
            "engine": result.candidate_engine, "metric": cell.metric, "verdict": c.verdict,
            "ratio": _round(c.ratio), "ci_low": _round(c.ci_low), "ci_high": _round(c.ci_high),
            "n_baseline": int(c.n_baseline), "n_candidate": int(c.n_candidate),
            "p_adjusted": _round(c.p_adjusted, 6),
            "median_baseline": _round(cell.median_baseline),
            "median_candidate": _round(cell.median_candidate)})
    return {"title": title, "baseline": result.baseline, "candidate": result.candidate,
            "engine": result.candidate_engine, "verdicts": result.verdict_counts(),
            "flagged": flagged}


def bisect_line(good: str, bad: str, cell_id: str, serial: str) -> str:
    """A copy-ready ``harness bisect`` command for one change point (every value quoted)."""
    q = shlex.quote
    return (f"harness bisect --source LLAMA_CPP_CHECKOUT --good {q(good)} --bad {q(bad)} "
            f"--cell {q(cell_id)} --results RESULTS --devices {q(serial)}")


class SiteModel:
    """Every page's data from one trials frame; see the module docstring."""

    def __init__(self, frame: pd.DataFrame, memo: Memo | None = None,
                 recommend: Callable[[pd.DataFrame, str], dict[str, Any]] | None = None,
                 extras: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.memo: Memo = memo or DictMemo()
        self.extras = extras or {}  # per night: its copied report and alert document
        self._recommend = recommend
        night = nights(frame).to_numpy()
        full = frame.assign(night=night, engine=engine_column(frame).astype(str).to_numpy())
        full["_usable"] = usable_mask(full).to_numpy()
        full["_throttled"] = throttled(full).to_numpy()
        full["_invalid"] = invalid(full).to_numpy()
        full["_ok"] = (full["outcome"] == "ok").to_numpy()
        full["_failed"] = full["outcome"].isin(list(FAILED)).to_numpy()
        self.full = full  # every column: what comparisons read
        self.frame = full[[c for c in _NARROW if c in full.columns]]  # what pages read
        self.nights: list[str] = sorted(str(n) for n in pd.unique(self.frame["night"].dropna()))
        self.latest = self.nights[-1]
        self.history: dict[str, list[Series]] = {m: nightly_history(frame, m) for m in METRICS}
        self.devices = self._devices()
        self._by_device = {str(k): g for k, g in
                           self.frame.groupby("device_serial", sort=True, observed=True)}
        self._by_night = {str(k): g for k, g in
                          self.frame.groupby("night", sort=True, observed=True)}
        self._night_rows = {str(k): v for k, v in
                            self.frame.groupby("night", observed=True).indices.items()}
        self.builds = self._build_order()

    # --- shared facts -----------------------------------------------------------------------

    def _devices(self) -> dict[str, DeviceFacts]:
        out = {}
        index = {n: i for i, n in enumerate(self.nights)}
        for serial, rows in self.frame.groupby("device_serial", sort=True, observed=True):
            seen = sorted(str(n) for n in pd.unique(rows["night"].dropna()))
            ram = rows["device_ram_bytes"].dropna() if "device_ram_bytes" in rows else None
            out[str(serial)] = DeviceFacts(
                serial=str(serial), name=_first(rows["device_model"]),
                manufacturer=_first(rows.get("device_manufacturer", pd.Series(dtype=object))),
                soc=_first(rows.get("device_soc", pd.Series(dtype=object))),
                sdk=_first(rows.get("device_sdk", pd.Series(dtype=object))),
                ram_bytes=int(ram.max()) if ram is not None and not ram.empty else None,
                first_night=seen[0], last_night=seen[-1],
                missing_nights=len(self.nights) - 1 - index[seen[-1]])
        return out

    def _build_order(self) -> list[str]:
        firsts = self.frame.groupby("build_id", observed=True)["night"].min()
        return [str(b) for b, _ in sorted(firsts.items(), key=lambda kv: (str(kv[1]),
                                                                           str(kv[0])))]

    def baseline_of(self, build: str) -> str | None:
        i = self.builds.index(build)
        return self.builds[i - 1] if i > 0 else None

    def device_link(self, serial: str) -> dict[str, str]:
        facts = self.devices.get(serial)
        return {"serial": serial, "name": facts.display if facts else serial,
                "path": paths.device_page(serial)}

    def _series_keys(self) -> dict[tuple[str, str, str], dict[str, Series]]:
        keys: dict[tuple[str, str, str], dict[str, Series]] = {}
        for metric, series in self.history.items():
            for s in series:
                keys.setdefault((s.device, s.config_id, s.engine), {})[metric] = s
        return keys

    @property
    def series(self) -> dict[tuple[str, str, str], dict[str, Series]]:
        if not hasattr(self, "_series"):
            self._series = self._series_keys()
        return self._series

    def config_link(self, serial: str, config_id: str, engine: str) -> str | None:
        if (serial, config_id, engine) not in self.series:
            return None
        return paths.config_page(serial, config_id, engine)

    # --- comparisons (memoised by the digest of their rows) ----------------------------------

    def _compare(self, base: pd.DataFrame, cand: pd.DataFrame, base_label: str,
                 cand_label: str, title: str) -> list[dict[str, Any]]:
        """Per engine both sides ran: compare's verdicts of ``cand`` against ``base``."""
        key = "compare-" + digest([rows_digest(base), rows_digest(cand), base_label, cand_label,
                                   title, list(METRICS), SCHEMA_VERSION])

        def compute() -> list[dict[str, Any]]:
            out = []
            for engine in sorted(set(base["engine"]) & set(cand["engine"])):
                frame = pd.concat([base[base["engine"] == engine].assign(build_id=base_label),
                                   cand[cand["engine"] == engine].assign(build_id=cand_label)])
                result = compare_builds(frame, base_label, cand_label, METRICS,
                                        baseline_engine=engine, candidate_engine=engine)
                out.append(flagged_json(result, title))
            return out

        value: list[dict[str, Any]] = self.memo.get(key, compute)
        return [self._decorated(c) for c in value]

    def _decorated(self, comparison: dict[str, Any]) -> dict[str, Any]:
        """A memoised comparison with the site's names and links for its cells."""
        flagged = []
        for f in comparison["flagged"]:
            link = self.device_link(f["device"])
            flagged.append({**f, "device_name": link["name"], "device_path": link["path"],
                            "config_path": self.config_link(f["device"], f["config_id"],
                                                            f["engine"])})
        return {**comparison, "flagged": flagged}

    def build_comparison(self, build: str) -> list[dict[str, Any]]:
        baseline = self.baseline_of(build)
        if baseline is None:
            return []
        f = self.full
        return self._compare(f[f["build_id"] == baseline], f[f["build_id"] == build],
                             baseline, build, f"{build} vs baseline {baseline}")

    def _main_build(self, rows: pd.DataFrame) -> str:
        counts = rows["build_id"].astype(str).value_counts()
        return str(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0])

    def night_comparison(self, night: str) -> list[dict[str, Any]]:
        i = self.nights.index(night)
        if i == 0:
            return []
        prev = self.nights[i - 1]
        now_rows = self.full.iloc[self._night_rows[night]]
        prev_rows = self.full.iloc[self._night_rows[prev]]
        now_build, prev_build = self._main_build(now_rows), self._main_build(prev_rows)
        return self._compare(prev_rows[prev_rows["build_id"] == prev_build],
                             now_rows[now_rows["build_id"] == now_build],
                             f"{prev_build}@{prev}", f"{now_build}@{night}",
                             f"{night} vs previous night {prev}")

    def recommendation(self, serial: str) -> dict[str, Any]:
        if self._recommend is None:
            return {"picks": [], "note": "recommendations not computed"}
        rows = self._by_device[serial]
        key = "recommend-" + digest([rows_digest(rows), SCHEMA_VERSION])
        value: dict[str, Any] = self.memo.get(key, lambda: self._recommend(self.full, serial)
                                              if self._recommend else {})
        return value

    # --- flags ------------------------------------------------------------------------------

    def device_nights(self, serial: str) -> list[dict[str, Any]]:
        rows = self._by_device[serial]
        per = rows.groupby("night", sort=True, observed=True).agg(
            trials=("_ok", "size"), failed=("_failed", "sum"), throttled=("_throttled", "sum"),
            invalid=("_invalid", "sum"), battery=("battery_temp_c", "median"),
            temp=("max_temp_c", "median"))
        out = []
        for night in self.nights:
            if night not in per.index:
                out.append({"night": night, "present": False})
                continue
            r = per.loc[night]
            out.append({"night": night, "present": True, "trials": int(r["trials"]),
                        "failed": int(r["failed"]), "throttled": int(r["throttled"]),
                        "invalid": int(r["invalid"]),
                        "throttled_share": _round(r["throttled"] / max(r["trials"], 1), 4),
                        "battery_temp_c": _round(r["battery"], 2),
                        "max_temp_c": _round(r["temp"], 2)})
        return out

    def device_flags(self, serial: str,
                     night_rows: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, str]]:
        facts = self.devices[serial]
        flags = []
        if facts.missing_nights >= MISSING_FLAG_NIGHTS:
            flags.append({"kind": "missing", "text": f"missing {facts.missing_nights} nights "
                          f"(last seen {facts.last_night})"})
        elif facts.missing_nights:
            flags.append({"kind": "missing-one", "text": f"missing tonight (last seen "
                          f"{facts.last_night})"})
        night_rows = night_rows if night_rows is not None else self.device_nights(serial)
        slope, rise = battery_trend([r.get("battery_temp_c") for r in night_rows
                                     if r["present"]])
        if trend_flagged(slope, rise):
            flags.append({"kind": "battery", "text": f"battery temperature trends up: "
                          f"{slope:+.2f} °C/night, +{rise:.1f} °C over its last "
                          f"{TREND_NIGHTS} nights"})
        return flags

    # --- pages ------------------------------------------------------------------------------

    def strip(self, night_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
        out = []
        for r in night_rows[-STRIP_NIGHTS:]:
            if not r["present"]:
                out.append({"state": "absent", "tip": f"{r['night']}: no trials"})
                continue
            state = "bad" if r["failed"] else "warn" if r["throttled"] or r["invalid"] else "ok"
            out.append({"state": state, "tip": (
                f"{r['night']}: {r['trials']} trials, {r['failed']} failed, "
                f"{r['throttled']} throttled, {r['invalid']} invalid")})
        return out

    def device(self, serial: str) -> dict[str, Any]:
        facts = self.devices[serial]
        night_rows = self.device_nights(serial)
        slope, rise = battery_trend([r.get("battery_temp_c") for r in night_rows
                                     if r["present"]])
        configs = []
        for (dev, config_id, engine), by_metric in sorted(self.series.items()):
            if dev != serial:
                continue
            s = by_metric.get("tg_tps") or next(iter(by_metric.values()))
            configs.append({
                "label": s.label, "config_id": config_id, "engine": engine,
                "path": paths.config_page(serial, config_id, engine),
                "last_night": s.points[-1].night, "last_median": _round(s.points[-1].median),
                "changes": sum(len(x.changes) for x in by_metric.values())})
        return {
            "kind": "device", "serial": serial, "name": facts.name, "display": facts.display,
            "manufacturer": facts.manufacturer, "soc": facts.soc, "sdk": facts.sdk,
            "ram_bytes": facts.ram_bytes, "first_night": facts.first_night,
            "last_night": facts.last_night, "missing_nights": facts.missing_nights,
            "flags": self.device_flags(serial, night_rows), "nights": night_rows,
            "trend": {"slope": _round(slope), "rise": _round(rise)},
            "configs": configs, "recommendation": self.recommendation(serial),
        }

    def _cell_ids(self) -> dict[tuple[str, str, str, str], str]:
        if not hasattr(self, "_cells"):
            first = self.frame.drop_duplicates(["device_serial", "config_id", "engine",
                                                "build_id"])
            self._cells = {(str(d), str(c), str(e), str(b)): str(i) for d, c, e, b, i in zip(
                first["device_serial"], first["config_id"], first["engine"], first["build_id"],
                first["cell_id"], strict=True)}
        return self._cells

    def config(self, key: tuple[str, str, str]) -> dict[str, Any]:
        serial, config_id, engine = key
        by_metric = self.series[key]
        rows = self._by_device[serial]
        rows = rows[(rows["config_id"] == config_id) & (rows["engine"] == engine)]
        axis = sorted(str(n) for n in pd.unique(rows["night"].dropna()))
        pos = {n: i for i, n in enumerate(axis)}
        per = rows.groupby("night", sort=True, observed=True).agg(
            trials=("_ok", "size"), failed=("_failed", "sum"), throttled=("_throttled", "sum"),
            invalid=("_invalid", "sum"), usable=("_usable", "sum"))
        metrics = []
        cells = self._cell_ids()
        for metric, s in by_metric.items():
            values: list[float | None] = [None] * len(axis)
            builds: list[str | None] = [None] * len(axis)
            for p in s.points:
                values[pos[p.night]] = _round(p.median)
                builds[pos[p.night]] = p.build
            column = metric  # METRICS are their own columns
            hot = rows[rows["_ok"] & rows["_throttled"] & ~rows["_invalid"]]
            hot_medians = hot.groupby("night", observed=True)[column].median().dropna()
            bad = rows[rows["_ok"] & rows["_invalid"]]
            bad_medians = bad.groupby("night", observed=True)[column].median().dropna()
            changes = [{
                "index": pos[c.night_after], "night_before": c.night_before,
                "night_after": c.night_after, "build_before": c.build_before,
                "build_after": c.build_after, "magnitude": _round(c.magnitude),
                "before_mean": _round(c.before_mean), "after_mean": _round(c.after_mean),
                "p_value": _round(c.p_value, 12), "describe": c.describe(metric),
                "bisect": bisect_line(c.build_before, c.build_after,
                                      cells.get((serial, config_id, engine, c.build_after),
                                                config_id), serial),
                "build_path": paths.build_page(c.build_after),
            } for c in s.changes]
            metrics.append({
                "metric": metric, "values": values, "builds": builds,
                "throttled": [[pos[str(n)], _round(v)] for n, v in hot_medians.items()],
                "invalid": [[pos[str(n)], _round(v)] for n, v in bad_medians.items()],
                "changes": changes})
        counts = rows.groupby(["night", "build_id"], observed=True).size().reset_index(name="n")
        counts = counts.sort_values(["night", "n", "build_id"], ascending=[True, False, True])
        main = dict(zip(counts.drop_duplicates("night")["night"].astype(str),
                        counts.drop_duplicates("night")["build_id"].astype(str), strict=True))
        tg = next((m["values"] for m in metrics if m["metric"] == "tg_tps"), [None] * len(axis))
        table = [{"night": n, "trials": int(t), "usable": int(u), "failed": int(f),
                  "throttled": int(h), "invalid": int(v), "build": main.get(n, ""),
                  "tg_tps": tg[pos[n]]}
                 for n, t, u, f, h, v in zip(per.index.astype(str), per["trials"], per["usable"],
                                             per["failed"], per["throttled"], per["invalid"],
                                             strict=True)]
        label = next(iter(by_metric.values())).label
        return {"kind": "config", "device": self.device_link(serial), "config_id": config_id,
                "engine": engine, "label": label, "nights": axis, "metrics": metrics,
                "table": table}

    def night(self, night: str) -> dict[str, Any]:
        rows = self._by_night[night]
        i = self.nights.index(night)
        present = sorted(str(s) for s in pd.unique(rows["device_serial"]))
        window = self.nights[max(0, i - MISSING_LOOKBACK):i]
        seen = set()
        for n in window:
            seen |= {str(s) for s in pd.unique(self._by_night[n]["device_serial"])}
        missing = [self.device_link(s) for s in sorted(seen - set(present))]
        failed = rows[rows["_failed"]]
        failures = []
        for (serial, config_id, engine, outcome), group in failed.groupby(
                ["device_serial", "config_id", "engine", "outcome"], sort=True, observed=True):
            failures.append({
                "device": self.device_link(str(serial)), "config_id": str(config_id),
                "engine": str(engine), "outcome": str(outcome), "trials": len(group),
                "builds": sorted(str(b) for b in pd.unique(group["build_id"])),
                "error": _first(group["error"]) if "error" in group else "",
                "path": self.config_link(str(serial), str(config_id), str(engine))})
        outcomes = {str(k): int(v) for k, v in rows["outcome"].value_counts().sort_index().items()}
        return {
            "kind": "night", "night": night, "runs": sorted(str(r) for r in
                                                            pd.unique(rows["run_id"])),
            "trials": len(rows), "outcomes": outcomes,
            "throttled": int(rows["_throttled"].sum()), "invalid": int(rows["_invalid"].sum()),
            "builds": [{"build": str(b), "path": paths.build_page(str(b))}
                       for b in sorted(pd.unique(rows["build_id"].astype(str)))],
            "devices": [self.device_link(s) for s in present], "missing": missing,
            "failures": failures, "comparison": self.night_comparison(night),
            "previous": paths.night_page(self.nights[i - 1]) if i else None,
            "report": None, "alerts": None, **self.extras.get(night, {}),
        }

    def build(self, build: str) -> dict[str, Any]:
        rows = self.frame[self.frame["build_id"] == build]
        ran = sorted(str(n) for n in pd.unique(rows["night"]))
        baseline = self.baseline_of(build)
        return {
            "kind": "build", "build": build,
            "engines": sorted(str(e) for e in pd.unique(rows["engine"])),
            "trials": len(rows), "first_night": ran[0], "last_night": ran[-1],
            "nights": [{"night": n, "path": paths.night_page(n)} for n in ran[-STRIP_NIGHTS:]],
            "nights_total": len(ran),
            "devices": [self.device_link(str(s)) for s in sorted(pd.unique(rows["device_serial"]))],
            "baseline": baseline,
            "baseline_path": paths.build_page(baseline) if baseline else None,
            "comparison": self.build_comparison(build),
        }

    def change_points(self, since: str) -> list[dict[str, Any]]:
        """Every change point whose first night is ``since`` or later, largest first."""
        out = []
        cells = self._cell_ids()
        for metric, series in self.history.items():
            for s in series:
                for c in s.changes:
                    if c.night_after < since:
                        continue
                    out.append({
                        "device": self.device_link(s.device), "config_id": s.config_id,
                        "label": s.label, "engine": s.engine, "metric": metric,
                        "night_before": c.night_before, "night_after": c.night_after,
                        "build_before": c.build_before, "build_after": c.build_after,
                        "magnitude": _round(c.magnitude), "describe": c.describe(metric),
                        "path": paths.config_page(s.device, s.config_id, s.engine),
                        "bisect": bisect_line(c.build_before, c.build_after,
                                              cells.get((s.device, s.config_id, s.engine,
                                                         c.build_after), s.config_id),
                                              s.device)})
        return sorted(out, key=lambda c: (-abs(c["magnitude"] or 0), c["device"]["serial"],
                                          c["label"], c["metric"]))

    def index(self) -> dict[str, Any]:
        latest = self.night(self.latest)
        since = self.nights[max(0, len(self.nights) - STRIP_NIGHTS)]
        devices = []
        for serial in self.devices:
            night_rows = self.device_nights(serial)
            devices.append({**self.device_link(serial),
                            "flags": self.device_flags(serial, night_rows),
                            "strip": self.strip(night_rows)})
        latest_builds = [b["build"] for b in latest["builds"]]
        builds = [c for b in latest_builds for c in self.build_comparison(b)]
        return {
            "kind": "index", "latest": self.latest, "night": latest,
            "night_path": paths.night_page(self.latest),
            "strip_nights": self.nights[-STRIP_NIGHTS:], "devices": devices,
            "flagged_devices": [d for d in devices if d["flags"]],
            "change_points": self.change_points(since)[:FLAGGED_SHOWN],
            "build_comparisons": builds,
            "builds": [{"build": b, "path": paths.build_page(b)} for b in self.builds[-10:]],
            "nights": [{"night": n, "path": paths.night_page(n)}
                       for n in reversed(self.nights[-STRIP_NIGHTS:])],
        }

    def search_index(self) -> dict[str, Any]:
        """The JSON index the search box filters (and tools can read): every page by kind."""
        return {
            "schema_version": SCHEMA_VERSION, "latest_night": self.latest,
            "devices": [{"name": f.display, "serial": f.serial, "soc": f.soc,
                         "path": paths.device_page(f.serial), "last_night": f.last_night,
                         "missing_nights": f.missing_nights} for f in self.devices.values()],
            "configs": [{"name": f"{self.devices[d].display} · {next(iter(m.values())).label}"
                         + ("" if e == "llama-bench" else f" · {e}"),
                         "serial": d, "config_id": c, "engine": e,
                         "path": paths.config_page(d, c, e)}
                        for (d, c, e), m in sorted(self.series.items())],
            "builds": [{"name": b, "path": paths.build_page(b)} for b in self.builds],
            "nights": [{"name": n, "path": paths.night_page(n)} for n in self.nights],
        }


def recommend_json(frame: pd.DataFrame, serial: str) -> dict[str, Any]:
    """``harness recommend --device SERIAL`` with its defaults, as the device page shows it."""
    from harness.analysis.recommend import recommend_device
    from harness.budget import DEFAULT_RESERVE_BYTES
    from harness.errors import HarnessError

    try:
        rec, memory = recommend_device(frame, serial, reserve_bytes=DEFAULT_RESERVE_BYTES)
    except HarnessError as error:
        return {"picks": [], "note": str(error)}
    picks = [{"rank": p.rank, "label": p.label, "config_id": p.config_id, "build": p.build_id,
              "engine": p.engine, "tg_tps": _round(p.tg_tps), "pp_tps": _round(p.pp_tps),
              "peak_bytes": p.peak_bytes, "headroom_bytes": p.headroom_bytes,
              "source": p.source, "explanation": p.explanation} for p in rec.picks[:10]]
    return {"picks": picks, "note": memory.source, "rejected": len(rec.rejected),
            "more": max(0, len(rec.picks) - 10)}
