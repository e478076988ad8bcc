"""What each page of the site shows, computed from the trials frame once per build.

Pure: ``SiteModel`` reads a trials frame (``frames.load_trials``) and answers, per page, a plain
JSON-ready dict (``index``, ``device``, ``config``, ``night``, ``build``). A page's dict is all
its template reads, so the digest of the dict decides whether the page must be written again
(``build``). The two costly figures, comparisons (``harness compare``'s rule) and device
recommendations (``harness recommend``'s), are not part of those dicts: they are keyed by a
digest of their input rows and computed through a ``Memo`` (a cache the build keeps on disk), so
a morning computes only the comparisons whose rows changed.

Rules the pages show:

* a **night** is its run's: the UTC date of the run's earliest trial (``frames.nights``), so a
  run across midnight is one night; the store's nights are the nights with any trial;
* a phone is **missing** when the store has nights after its last one; missing for
  ``MISSING_FLAG_NIGHTS`` (2) or more nights is flagged on the index and its page;
* a phone's **battery temperature trends up** when the least-squares slope of its nightly
  median ``battery_temp_c`` over its last ``TREND_NIGHTS`` nights is at least
  ``TREND_SLOPE_C`` per night and the fitted rise over that window at least ``TREND_RISE_C``;
* a configuration's line joins its nightly medians of usable trials (``trend.nightly_history``:
  ok, valid, applied, not throttled); throttled trials' medians and nights with invalid trials
  are drawn as separate marks, never joined into the line;
* a **reference build** (``references``: run every night beside the build under test,
  ``harness nightly --baseline``'s) is kept out of the lines and of a night's main build unless
  nothing else ran; it is every other build's baseline, compared on the nights that build ran;
* without references, a **build's baseline** is the build first seen before it (by night, then
  name); a night is compared with the previous night (each night's main build, engine by
  engine);
* a change point offers ``harness bisect`` between its builds' llama.cpp commits, or says why
  there is nothing to bisect (one commit on both sides, another engine): ``bisect_advice``;
* a device's **recommendation** is ``harness recommend --device SERIAL --build BUILD`` for the
  main build of its latest night (what it would run today), the command shown with it.

Scale: every figure comes from ``tables``' aggregates (one group-by each over the whole frame),
change points are remembered per series by its points, comparisons and recommendations by the
digest of their rows. A night's comparison is computed for the newest ``COMPARED_NIGHTS``
nights; an older night shows the one computed on its own morning when the memo holds it (a
site built every night holds them all), and says so when it does not.
"""

from __future__ import annotations

import hashlib
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.ab import compare_builds
from harness.analysis.frames import GROUP_READS
from harness.analysis.trend import Change, NightPoint, Series, changes_of, nightly_history
from harness.labels import CONFIG_COLUMNS, config_label
from harness.site import paths, tables
from harness.site.bisect import bisect_advice
from harness.site.facts import (
    TREND_NIGHTS,
    DeviceFacts,
    battery_trend,
    flagged_json,
    rounded,
    trend_flagged,
)
from harness.site.memo import SCHEMA_VERSION, DictMemo, Memo, code_key, digest
from harness.site.tables import METRICS

#: What ``nightly_history`` reads of the trials besides a metric and the configuration.
HISTORY_READS = ("device_serial", "config_id", "engine", "build_id", "started_at", "run_id",
                 "outcome", "throttled", "valid", "config_not_applied")
COMPARED_NIGHTS = 30
TABLE_NIGHTS = 120  # a configuration page's table: its newest nights (the chart has them all)
STRIP_NIGHTS = 30
MISSING_FLAG_NIGHTS = 2
MISSING_LOOKBACK = 7
FLAGGED_SHOWN = 50
#: The trial columns the site reads (pages, comparisons, change points); a recommendation
#: reads its own rows whole (``recommend_json``).
COLUMNS: tuple[str, ...] = tuple(dict.fromkeys((
    "run_id", "trial_id", "cell_id", "config_id", "device_serial", "device_model",
    "device_manufacturer", "device_soc", "device_sdk", "device_ram_bytes", "build_id",
    "build_commit",
    "engine", "outcome", "error", "throttled", "valid", "tg_tps", "pp_tps", "battery_temp_c",
    "max_temp_c", "started_at", "engine_aggregate_n", "invalid_reason", *GROUP_READS,
    *CONFIG_COLUMNS)))
_ROW_COLUMNS = ("trial_id", "device_serial", "config_id", "build_id", "engine", "outcome",
                "throttled", "valid", "tg_tps", "pp_tps", "battery_temp_c", "max_temp_c")


class SiteModel:
    """Every page's data from one trials frame; see the module docstring.

    ``recommend(serial, build, nights)`` answers a device's recommendation (``recommend_json``
    over that device's rows of the build, read whole from the nights the build ran); it is
    called only when the memo lacks the answer.
    """

    def __init__(self, frame: pd.DataFrame, memo: Memo | None = None,
                 recommend: Callable[[str, str, list[str]], dict[str, Any]] | None = None,
                 extras: Mapping[str, Mapping[str, Any]] | None = None,
                 references: Sequence[str] = ()) -> None:
        self.memo: Memo = memo or DictMemo()
        self.extras = extras or {}  # per night: its copied report and alert document
        self._recommend = recommend
        self.references = tuple(dict.fromkeys(references))
        self.frame = tables.prepare(frame, self.references)
        self.nights: list[str] = sorted(str(n) for n in pd.unique(self.frame["night"].dropna()))
        self.latest = self.nights[-1]
        self._config_nights = tables.config_nights(self.frame)
        self._config_rows = tables.split(self._config_nights, tables.SERIES)
        self._device_nights = tables.device_nights(self.frame)
        self._device_rows = tables.split(self._device_nights, ["device_serial"])
        self._night_facts = tables.night_facts(self.frame)
        self._failures = tables.failures(self.frame)
        self._failure_rows = tables.split(self._failures, ["night"])
        self._build_facts = tables.build_facts(self.frame)
        self._night_rows = {str(k): v for k, v in
                            self.frame.groupby("night", observed=True).indices.items()}
        self._build_rows = {str(k): v for k, v in
                            self.frame.groupby("build_id", observed=True).indices.items()}
        self._device_trials = {str(k): v for k, v in
                               self.frame.groupby("device_serial", observed=True).indices.items()}
        self.devices = self._devices()
        self.builds = self._build_order()
        self._digest_rows = self.frame[[c for c in _ROW_COLUMNS if c in self.frame]]
        self._row_hashes: np.ndarray | None = None
        self._build_ids = self.frame["build_id"].astype(str).to_numpy(dtype=object)
        self._refs = self.frame["_ref"].to_numpy(dtype=bool)
        self._commits_at: dict[tuple[str, str], str | None] = {}
        self._commit_ids: np.ndarray | None = None
        self._night_ids = self.frame["night"].to_numpy(dtype=object)
        self._recommend_keys: dict[str, tuple[str, str]] = {}
        self._build_comparisons: dict[str, list[dict[str, Any]]] = {}
        self._night_cache: dict[str, dict[str, Any]] = {}
        self._device_night_cache: dict[str, list[dict[str, Any]]] = {}

    # --- shared facts -----------------------------------------------------------------------

    def _remembered_changes(self, points: Sequence[NightPoint]) -> list[Change]:
        """A series' change points, remembered by its points (most series of a new morning
        gained a night, but a phone that did not run keeps its answer)."""
        key = "changes-" + digest([[p.night, p.median, p.n, p.build] for p in points],
                                  code_key())

        def compute() -> list[dict[str, Any]]:
            return [{**c.__dict__, "p_value": c.p_value if math.isfinite(c.p_value) else None}
                    for c in changes_of(points)]

        stored: list[dict[str, Any]] = self.memo.get(key, compute)
        return [Change(**{**c, "p_value": math.nan if c["p_value"] is None else c["p_value"]})
                for c in stored]

    def _devices(self) -> dict[str, DeviceFacts]:
        index = {n: i for i, n in enumerate(self.nights)}
        grouped = self.frame.groupby("device_serial", observed=True, sort=True)
        texts = {c: grouped[c].first() for c in ("device_model", "device_manufacturer",
                                                  "device_soc", "device_sdk") if c in self.frame}
        ram = grouped["device_ram_bytes"].max() if "device_ram_bytes" in self.frame else None
        seen = self._device_nights.groupby("device_serial", observed=True)["night"].agg(
            ["min", "max"])

        def text(column: str, serial: str) -> str:
            value = texts[column].get(serial) if column in texts else None
            return "" if value is None or pd.isna(value) else str(value)

        out = {}
        for serial in sorted(self._device_trials):
            most = ram.get(serial) if ram is not None else None
            last = str(seen.at[serial, "max"])
            out[serial] = DeviceFacts(
                serial=serial, name=text("device_model", serial),
                manufacturer=text("device_manufacturer", serial),
                soc=text("device_soc", serial), sdk=text("device_sdk", serial),
                ram_bytes=None if most is None or pd.isna(most) else int(most),
                first_night=str(seen.at[serial, "min"]), last_night=last,
                missing_nights=len(self.nights) - 1 - index[last])
        return out

    def _build_order(self) -> list[str]:
        firsts = {b: f["nights"][0] for b, f in self._build_facts.iterrows()}
        return [b for b, _ in sorted(firsts.items(), key=lambda kv: (kv[1], kv[0]))]

    def nights_of(self, build: str) -> list[str]:
        """The nights ``build`` ran, oldest first."""
        return list(self._build_facts.at[build, "nights"])

    def baseline_of(self, build: str) -> str | None:
        """The first reference build that ran (none for a reference itself); without
        references, the build first seen before ``build``."""
        ran = [r for r in self.references if r in self._build_rows]
        if ran:
            return ran[0] if build not in self.references else None
        i = self.builds.index(build)
        return self.builds[i - 1] if i > 0 else None

    def commit_at(self, build: str, night: str) -> str | None:
        """The llama.cpp commit ``build``'s trials of ``night`` recorded, when they recorded
        exactly one (a build id a farm reuses every night, such as ``nightly``, is a new commit
        each night)."""
        key = (build, night)
        if key not in self._commits_at:
            found: set[str] = set()
            if build in self._build_rows and "build_commit" in self.frame:
                if self._commit_ids is None:  # on first use: most builds have no change point
                    self._commit_ids = self.frame["build_commit"].to_numpy(dtype=object)
                at = self._build_rows[build]
                values = self._commit_ids[at[self._night_ids[at] == night]]
                found = {str(v) for v in values if isinstance(v, str) and v}
            self._commits_at[key] = found.pop() if len(found) == 1 else None
        return self._commits_at[key]

    def bisect(self, serial: str, config_id: str, engine: str,
               change: Change) -> dict[str, str | None]:
        """``bisect_advice`` for one change point of a series."""
        cell = self._cell_ids().get((serial, config_id, engine, change.build_after), config_id)
        commits = (self.commit_at(change.build_before, change.night_before),
                   self.commit_at(change.build_after, change.night_after))
        return bisect_advice(change.build_before, change.build_after, commits, engine, cell,
                             serial)

    def device_link(self, serial: str) -> dict[str, str]:
        facts = self.devices.get(serial)
        return {"serial": serial, "name": facts.display if facts else serial,
                "path": paths.device_page(serial)}

    @property
    def history(self) -> dict[str, list[Series]]:
        """Per metric, ``harness history``'s series (computed on first use: the build starts
        the recommendations first, so they run beside it)."""
        if not hasattr(self, "_history"):
            reads = [c for c in dict.fromkeys((*HISTORY_READS, "night", *CONFIG_COLUMNS))
                     if c in self.frame]
            self._history = {m: nightly_history(self.frame[[*reads, m]], m,
                                                exclude_builds=self.references,
                                                find_changes=self._remembered_changes)
                             for m in METRICS}
        return self._history

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

    def config_name(self, config_id: str) -> str:
        """A configuration's label (``tiny Q4_K_M ctx512 ...``), from its first trial; a
        configuration that never ran ok is named so too, not by its hash."""
        if not hasattr(self, "_config_names"):
            columns = [c for c in CONFIG_COLUMNS if c in self.frame]
            first = self.frame.drop_duplicates("config_id")
            self._config_names = {str(c): config_label(row) for c, row in zip(
                first["config_id"], first[columns].to_dict("records"), strict=True)}
        return self._config_names.get(config_id, config_id)

    def config_link(self, serial: str, config_id: str, engine: str) -> str | None:
        if (serial, config_id, engine) not in self.series:
            return None
        return paths.config_page(serial, config_id, engine)

    # --- comparisons (memoised by the digest of their rows) ----------------------------------

    def _rows_digest(self, at: np.ndarray) -> str:
        """SHA-256 of the trials at positions ``at`` (their identifying and measured columns,
        ``_ROW_COLUMNS``; their order does not matter), from each row's hash computed once for
        the whole frame."""
        if self._row_hashes is None:
            self._row_hashes = pd.util.hash_pandas_object(self._digest_rows,
                                                          index=False).to_numpy()
        if len(at) == 0:
            return hashlib.sha256(b"empty").hexdigest()
        return hashlib.sha256(np.sort(self._row_hashes[at]).tobytes()).hexdigest()

    def _compare(self, base_at: np.ndarray, cand_at: np.ndarray, base_label: str,
                 cand_label: str, title: str, compute_missing: bool = True
                 ) -> list[dict[str, Any]] | None:
        """Per engine both sides ran: compare's verdicts of the trials at positions ``cand_at``
        against those at ``base_at`` (None when ``compute_missing`` is off and the memo lacks
        them). Rows are taken whole only when the memo lacks the answer."""
        digests = [self._rows_digest(at) for at in (base_at, cand_at)]
        key = "compare-" + digest([*digests, base_label, cand_label, title, list(METRICS)],
                                  code_key())

        def compute() -> list[dict[str, Any]]:
            base, cand = self.frame.iloc[base_at], self.frame.iloc[cand_at]
            out = []
            for engine in sorted(set(base["engine"]) & set(cand["engine"])):
                frame = pd.concat([base[base["engine"] == engine].assign(build_id=base_label),
                                   cand[cand["engine"] == engine].assign(build_id=cand_label)])
                result = compare_builds(frame, base_label, cand_label, METRICS,
                                        baseline_engine=engine, candidate_engine=engine)
                out.append(flagged_json(result, title))
            return out

        value: list[dict[str, Any]] | None = self.memo.get(key, compute) if compute_missing \
            else self.memo.peek(key)
        return None if value is None else [self._decorated(c) for c in value]

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
        if build not in self._build_comparisons:
            baseline = self.baseline_of(build)
            self._build_comparisons[build] = [] if baseline is None else self._compare(
                self._baseline_rows(baseline, build), self._build_rows[build], baseline, build,
                f"{build} vs baseline {baseline}") or []
        return self._build_comparisons[build]

    def _baseline_rows(self, baseline: str, build: str) -> np.ndarray:
        """A reference build's trials of the nights ``build`` ran (all of them when it ran
        none of those nights): what ``harness nightly`` compares a night's build with, and the
        same rows every morning once ``build`` stops running. Another baseline: all its trials."""
        at = self._build_rows[baseline]
        if baseline not in self.references:
            return at
        same = at[np.isin(self._night_ids[at], self.nights_of(build))]
        return same if len(same) else at

    def night_comparison(self, night: str) -> list[dict[str, Any]] | None:
        """The night against the previous one ([] for the first night; None when the night is
        older than the ``COMPARED_NIGHTS`` newest and its comparison was never computed)."""
        i = self.nights.index(night)
        if i == 0:
            return []
        prev = self.nights[i - 1]
        now_build = str(self._night_facts.at[night, "main_build"])
        prev_build = str(self._night_facts.at[prev, "main_build"])
        now_at, prev_at = self._night_rows[night], self._night_rows[prev]
        builds = self._build_ids
        return self._compare(prev_at[builds[prev_at] == prev_build],
                             now_at[builds[now_at] == now_build],
                             f"{prev_build}@{prev}", f"{now_build}@{night}",
                             f"{night} vs previous night {prev}",
                             compute_missing=i >= len(self.nights) - COMPARED_NIGHTS)

    def today_build(self, serial: str) -> str:
        """The main build of the device's latest night (what it would run today): the most
        trials, ties to the alphabetically first (``tables.main_builds``' rule), counted over
        the positions' build ids, not a copy of the phone's rows."""
        at = self._device_trials[serial]
        last = at[self._night_ids[at] == self.devices[serial].last_night]
        tested = last[~self._refs[last]]  # a reference build only when nothing else ran
        builds, counts = np.unique(self._build_ids[tested if len(tested) else last],
                                   return_counts=True)
        return str(builds[int(np.argmax(counts))])  # sorted: the first maximum is alphabetical

    def _recommend_key(self, serial: str) -> tuple[str, str]:
        if serial not in self._recommend_keys:  # asked twice: missing ones, then the page
            build = self.today_build(serial)
            at = self._device_trials[serial]
            self._recommend_keys[serial] = build, "recommend-" + digest(
                [self._rows_digest(at[self._build_ids[at] == build]), build], code_key())
        return self._recommend_keys[serial]

    def recommendations_missing(self) -> list[tuple[str, str, str]]:
        """(serial, build, memo key) of every device page's recommendation the memo lacks."""
        if self._recommend is None:
            return []
        out = []
        for serial in self.devices:
            build, key = self._recommend_key(serial)
            if self.memo.peek(key) is None:
                out.append((serial, build, key))
        return out

    def recommendation(self, serial: str) -> dict[str, Any]:
        if self._recommend is None:
            return {"picks": [], "note": "recommendations not computed", "command": None}
        build, key = self._recommend_key(serial)
        recommend = self._recommend
        value: dict[str, Any] = self.memo.get(
            key, lambda: recommend(serial, build, self.nights_of(build)))
        command = (f"harness recommend --device {shlex.quote(serial)} "
                   f"--build {shlex.quote(build)}")
        return {**value, "command": command}

    # --- flags ------------------------------------------------------------------------------

    def device_nights(self, serial: str) -> list[dict[str, Any]]:
        if serial in self._device_night_cache:
            return self._device_night_cache[serial]
        per = self._device_nights.iloc[self._device_rows[(serial,)]]
        present = {str(n): (int(t), int(f), int(h), int(v), b, m) for n, t, f, h, v, b, m in zip(
            per["night"], per["trials"], per["failed"], per["throttled"], per["invalid"],
            per["battery"], per["temp"], strict=True)}
        out: list[dict[str, Any]] = []
        for night in self.nights:
            if night not in present:
                out.append({"night": night, "present": False})
                continue
            trials, failed, hot, bad, battery, temp = present[night]
            out.append({"night": night, "present": True, "trials": trials, "failed": failed,
                        "throttled": hot, "invalid": bad,
                        "throttled_share": rounded(hot / max(trials, 1), 4),
                        "battery_temp_c": rounded(battery, 2), "max_temp_c": rounded(temp, 2)})
        self._device_night_cache[serial] = out
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
        temps = [r.get("battery_temp_c") for r in night_rows if r["present"]]
        slope, rise = battery_trend(temps)
        if trend_flagged(slope, rise):
            window = min(TREND_NIGHTS, sum(t is not None for t in temps))
            flags.append({"kind": "battery", "text": f"battery temperature trends up: "
                          f"{slope:+.2f} °C/night, +{rise:.1f} °C over its last "
                          f"{window} nights"})
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
                "last_night": s.points[-1].night, "last_median": rounded(s.points[-1].median),
                "changes": sum(len(x.changes) for x in by_metric.values())})
        return {
            "kind": "device", "serial": serial, "name": facts.name, "display": facts.display,
            "manufacturer": facts.manufacturer, "soc": facts.soc, "sdk": facts.sdk,
            "ram_bytes": facts.ram_bytes, "first_night": facts.first_night,
            "last_night": facts.last_night, "missing_nights": facts.missing_nights,
            "flags": self.device_flags(serial, night_rows), "nights": night_rows,
            "trend": {"slope": rounded(slope), "rise": rounded(rise)},
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
        per = self._config_nights.iloc[self._config_rows[key]]
        axis = [str(n) for n in per["night"]]
        pos = {n: i for i, n in enumerate(axis)}
        metrics = []
        for metric, s in by_metric.items():
            values: list[float | None] = [None] * len(axis)
            builds: list[str | None] = [None] * len(axis)
            for p in s.points:
                values[pos[p.night]] = rounded(p.median)
                builds[pos[p.night]] = p.build
            marks = {}
            for kind in ("hot", "bad"):
                column = f"{kind}_{metric}"
                medians = per[column].to_numpy(dtype=np.float64, na_value=np.nan) \
                    if column in per else np.full(len(axis), np.nan)
                marks[kind] = [[int(i), rounded(medians[i])] for i in
                               np.flatnonzero(~np.isnan(medians))]
            changes = [{
                "index": pos[c.night_after], "night_before": c.night_before,
                "night_after": c.night_after, "build_before": c.build_before,
                "build_after": c.build_after, "magnitude": rounded(c.magnitude),
                "before_mean": rounded(c.before_mean), "after_mean": rounded(c.after_mean),
                "p_value": rounded(c.p_value, 12), "describe": c.describe(metric),
                **self.bisect(serial, config_id, engine, c),
                "build_path": paths.build_page(c.build_after),
            } for c in s.changes]
            metrics.append({"metric": metric, "values": values, "builds": builds,
                            "throttled": marks["hot"], "invalid": marks["bad"],
                            "changes": changes})
        tg = next((m["values"] for m in metrics if m["metric"] == "tg_tps"), [None] * len(axis))
        table = [{"night": n, "trials": int(t), "usable": int(u), "failed": int(f),
                  "throttled": int(h), "invalid": int(v), "build": str(b), "tg_tps": tg[i]}
                 for i, (n, t, u, f, h, v, b) in enumerate(zip(
                     axis, per["trials"], per["usable"], per["failed"], per["throttled"],
                     per["invalid"], per["build"], strict=True))]
        label = next(iter(by_metric.values())).label
        return {"kind": "config", "device": self.device_link(serial), "config_id": config_id,
                "engine": engine, "label": label, "nights": axis, "metrics": metrics,
                "table": table[-TABLE_NIGHTS:], "older_nights": max(0, len(table) - TABLE_NIGHTS)}

    def night(self, night: str) -> dict[str, Any]:
        if night in self._night_cache:
            return self._night_cache[night]
        facts = self._night_facts.loc[night]
        i = self.nights.index(night)
        present = list(facts["devices"])
        window = self.nights[max(0, i - MISSING_LOOKBACK):i]
        seen: set[str] = set()
        for n in window:
            seen |= set(self._night_facts.at[n, "devices"])
        missing = [self.device_link(s) for s in sorted(seen - set(present))]
        failures = []
        rows = self._failures.iloc[self._failure_rows.get((night,), np.array([], dtype=int))]
        for serial, config_id, engine, outcome, trials, builds, error in zip(
                rows["device_serial"], rows["config_id"], rows["engine"], rows["outcome"],
                rows["trials"], rows["builds"], rows["error"], strict=True):
            failures.append({
                "device": self.device_link(str(serial)), "config_id": str(config_id),
                "label": self.config_name(str(config_id)),
                "engine": str(engine), "outcome": str(outcome), "trials": int(trials),
                "builds": list(builds), "error": "" if pd.isna(error) else str(error),
                "path": self.config_link(str(serial), str(config_id), str(engine))})
        comparison = self.night_comparison(night)
        data = {
            "kind": "night", "night": night, "runs": list(facts["runs"]),
            "trials": int(facts["trials"]), "outcomes": dict(facts["outcomes"]),
            "throttled": int(facts["throttled"]), "invalid": int(facts["invalid"]),
            "builds": [{"build": b, "path": paths.build_page(b)} for b in facts["builds"]],
            "devices": [self.device_link(s) for s in present], "missing": missing,
            "failures": failures, "comparison": comparison or [],
            "comparison_note": None if comparison is not None else (
                f"Not compared: only the newest {COMPARED_NIGHTS} nights are compared when "
                "their comparison was not kept from an earlier build (a site built every "
                "night keeps each night's)."),
            "previous": paths.night_page(self.nights[i - 1]) if i else None,
            "report": None, "alerts": None, **self.extras.get(night, {}),
        }
        self._night_cache[night] = data
        return data

    def build(self, build: str) -> dict[str, Any]:
        facts = self._build_facts.loc[build]
        ran = list(facts["nights"])
        baseline = self.baseline_of(build)
        return {
            "kind": "build", "build": build, "engines": list(facts["engines"]),
            "trials": int(facts["trials"]), "first_night": ran[0], "last_night": ran[-1],
            "nights": [{"night": n, "path": paths.night_page(n)} for n in ran[-STRIP_NIGHTS:]],
            "nights_total": len(ran),
            "devices": [self.device_link(s) for s in facts["devices"]],
            "baseline": baseline,
            "baseline_path": paths.build_page(baseline) if baseline else None,
            "comparison": self.build_comparison(build),
        }

    def change_points(self, since: str) -> list[dict[str, Any]]:
        """Every change point whose first night is ``since`` or later, largest first."""
        out = []
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
                        "magnitude": rounded(c.magnitude), "describe": c.describe(metric),
                        "path": paths.config_page(s.device, s.config_id, s.engine),
                        **self.bisect(s.device, s.config_id, s.engine, c)})
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


def recommend_json(frame: pd.DataFrame, serial: str, build: str) -> dict[str, Any]:
    """``harness recommend --device SERIAL --build BUILD`` with its other defaults, as the
    device page shows it (``frame``: the store's trials, or at least the device's of BUILD)."""
    from harness.analysis.recommend import recommend_device
    from harness.budget import DEFAULT_RESERVE_BYTES
    from harness.errors import HarnessError

    try:
        rec, memory = recommend_device(frame, serial, reserve_bytes=DEFAULT_RESERVE_BYTES,
                                       builds=(build,))
    except HarnessError as error:
        return {"picks": [], "note": str(error)}
    picks = [{"rank": p.rank, "label": p.label, "config_id": p.config_id, "build": p.build_id,
              "engine": p.engine, "tg_tps": rounded(p.tg_tps), "pp_tps": rounded(p.pp_tps),
              "peak_bytes": p.peak_bytes, "headroom_bytes": p.headroom_bytes,
              "source": p.source, "explanation": p.explanation} for p in rec.picks[:10]]
    return {"picks": picks, "note": memory.source, "rejected": len(rec.rejected),
            "more": max(0, len(rec.picks) - 10)}
