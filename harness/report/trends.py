"""The report's analytic sections: build comparison, nightly history, recommendations, engines.

Each section is the answer of the function the matching command calls, labelled for people:
``ab.compare_builds`` (``harness compare``), ``trend.nightly_history`` (``harness history``),
``recommend.recommend_device`` (``harness recommend``) and ``engines.engine_table``. No statistic,
ranking or trial selection is made here, so the report and the commands cannot disagree; this
module only chooses which sides to compare when the user named none, and maps serials and
config ids to the report's labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from harness.analysis.ab import BuildComparison, compare_builds
from harness.analysis.changes import Changes, MetricChange
from harness.analysis.engines import EngineTable, engine_table
from harness.analysis.frames import Side, resolve_side, sides
from harness.analysis.recommend import (
    cached_kv_evidence,
    cached_scores,
    device_frames,
    recommend_device,
)
from harness.analysis.trend import Series, by_largest_change, nightly_history
from harness.budget import DEFAULT_RESERVE_BYTES
from harness.metrics import DEFAULT_METRICS
from harness.report.model import (
    ChangeMark,
    ChangesSection,
    ComparisonRow,
    ComparisonSection,
    DeviceRecommendations,
    EngineRow,
    EngineSection,
    FailureItem,
    HistorySection,
    HistorySeries,
    MetricChangeItem,
    MissingItem,
    PhoneChangeRow,
    Recommendation,
)

PICKS_SHOWN = 5


@dataclass(frozen=True)
class Labels:
    """The report's names of devices (by serial) and configurations (by config_id)."""

    devices: Mapping[str, str]
    configs: Mapping[str, str]

    def device(self, serial: str) -> str:
        return self.devices.get(serial, serial)

    def config(self, config_id: str) -> str:
        return self.configs.get(config_id, config_id)


@dataclass(frozen=True)
class SideChoice:
    """The sides a report compares: each named by flags, or None (with a note)."""

    baseline: str | None = None
    candidate: str | None = None
    baseline_engine: str | None = None
    candidate_engine: str | None = None
    recent: int | None = None  # as `harness compare --recent`
    sequential: pd.DataFrame | None = None  # the store's adaptive table (ab.load_sequential)


def _by_first_trial(trials: pd.DataFrame, choices: Sequence[Side]) -> list[Side]:
    first = trials.groupby("build_id", observed=True)["started_at"].min()
    return sorted(choices, key=lambda s: (first.get(s.build), s.build))


def pick_sides(trials: pd.DataFrame, choice: SideChoice) -> tuple[Side | None, Side | None, str]:
    """(baseline, candidate, note). Named sides are resolved as ``harness compare`` resolves
    them (a ConfigError when a named build or engine has no trials in scope); one named side is
    paired with the only other build of its engine; none named compares the two builds of the
    one engine that has two, older first."""
    named = [resolve_side(trials, b, e, build_flag=bf, engine_flag=ef) if b or e else None
             for b, e, bf, ef in ((choice.baseline, choice.baseline_engine, "--baseline",
                                   "--baseline-engine"),
                                  (choice.candidate, choice.candidate_engine, "--candidate",
                                   "--candidate-engine"))]
    base, cand = named
    if base and cand:
        return base, cand, "named on the command line"
    known = sides(trials)
    given = base or cand
    if given is not None:
        others = [s for s in known if s.engine == given.engine and s != given]
        if len(others) == 1:
            return (given, others[0], "") if base else (others[0], given, "")
        return None, None, (f"{len(others) + 1} builds of engine {given.engine} in scope; "
                            "pass --baseline and --candidate to compare two of them")
    two = [e for e in sorted({s.engine for s in known})
           if sum(s.engine == e for s in known) == 2]
    if len(two) == 1:
        older, newer = _by_first_trial(trials, [s for s in known if s.engine == two[0]])
        return older, newer, f"the two builds of {two[0]} in scope, older one as baseline"
    builds = len({s.build for s in known})
    return None, None, (f"{builds} build(s) in scope; pass --baseline and --candidate "
                        "to compare two of them")


def _rows(result: BuildComparison, labels: Labels) -> tuple[ComparisonRow, ...]:
    return tuple(
        ComparisonRow(labels.device(c.key.device), labels.config(c.key.config_id), c.metric,
                      c.comparison.ratio, c.comparison.ci_low, c.comparison.ci_high,
                      c.comparison.p_adjusted, c.comparison.cliffs_delta,
                      c.comparison.n_baseline, c.comparison.n_candidate, c.comparison.verdict,
                      c.comparison.reason, c.key.device, c.key.config_id)
        for c in result.worst_first())


def comparison(trials: pd.DataFrame, labels: Labels, choice: SideChoice) -> ComparisonSection:
    """``harness compare`` of the chosen sides, over every cell both measured."""
    return compared(trials, labels, choice)[0]


def compared(trials: pd.DataFrame, labels: Labels, choice: SideChoice,
             ) -> tuple[ComparisonSection, BuildComparison | None]:
    """The comparison section and the ``compare_builds`` result it labels (None: no sides)."""
    base, cand, note = pick_sides(trials, choice)
    if base is None or cand is None:
        return ComparisonSection(None, None, note), None
    result = compare_builds(trials, base.build, cand.build, DEFAULT_METRICS,
                            baseline_engine=base.engine, candidate_engine=cand.engine,
                            recent=choice.recent, sequential=choice.sequential)
    counts = tuple(result.counts_by_metric().items())
    which = (f"the {choice.recent} newest ok, applied, non-throttled trials" if choice.recent
             else "every ok, applied, non-throttled trial")
    note = (f"{note or 'the other build of the named engine'}; the verdicts of `harness compare`: "
            f"{which} of each side per cell (throttled ones counted), Benjamini-Hochberg "
            "adjusted per metric")
    return ComparisonSection(base.build, cand.build, note, counts, _rows(result, labels),
                             baseline_engine=base.engine, candidate_engine=cand.engine), result


def _history_series(s: Series, labels: Labels, several_engines: bool) -> HistorySeries:
    marks = tuple(ChangeMark(c.night_after, c.magnitude, c.p_value, c.build_before,
                             c.build_after) for c in s.changes)
    config = labels.config(s.config_id)
    if several_engines:
        config = f"{config} · {s.engine}"
    return HistorySeries(labels.device(s.device), config, s.metric,
                         tuple(p.night for p in s.points), tuple(p.median for p in s.points),
                         tuple(p.build for p in s.points), marks,
                         tuple(c.index for c in s.changes))


def history(trials: pd.DataFrame, labels: Labels, metric: str, top: int) -> HistorySection:
    """``harness history``'s series (every device x config x engine), largest change first."""
    series = by_largest_change(nightly_history(trials, metric))
    several = len({s.engine for s in series}) > 1
    shown = [_history_series(s, labels, several) for s in series]
    changes = sorted(((h.device, h.config, m) for h in shown for m in h.change_points),
                     key=lambda c: -abs(c[2].magnitude))
    return HistorySection(metric, len(series), tuple(shown[:top]), tuple(changes))


def recommendations(trials: pd.DataFrame, labels: Labels, per_device: int = PICKS_SHOWN,
                    ) -> tuple[DeviceRecommendations, ...]:
    """``harness recommend --device SERIAL`` (its defaults: reserve, memory source, cached
    quality) for every device in scope."""
    scores = cached_scores(trials)
    kv = cached_kv_evidence()
    reserve = DEFAULT_RESERVE_BYTES
    out = []
    serials = sorted(labels.devices, key=labels.device)
    frames = device_frames(trials, serials)  # one pass over a farm's frame, not one a phone
    for serial in serials:
        rec, memory = recommend_device(frames[serial], serial, reserve_bytes=reserve,
                                       quality=scores, kv_quality=kv, limit=per_device)
        items = tuple(Recommendation(labels.config(p.config_id), p) for p in rec.picks)
        suggestion = rec.suggestion.text if rec.suggestion else None
        out.append(DeviceRecommendations(labels.device(serial), items, serial, memory.source,
                                         len(rec.rejected), suggestion, rec.notes, per_device,
                                         rec.fitting))
    return tuple(out)


def _engine_rows(table: EngineTable, labels: Labels) -> tuple[EngineRow, ...]:
    metrics = table.comparisons[0].metrics if table.comparisons else ()
    rows = []
    for row in table.rows:
        figures = tuple(None if f is None else (f.tg_tps, f.pp_tps, f.vm_hwm_bytes)
                        for f in row.figures)
        verdicts = tuple(
            tuple(None if (v := row.verdict(i, m)) is None else (v.ratio, v.verdict)
                  for m in metrics)
            for i in range(len(table.comparisons)))
        rows.append(EngineRow(labels.device(row.device), labels.config(row.config_id), figures,
                              verdicts))
    return tuple(sorted(rows, key=lambda r: (r.device, r.config)))


def engines(trials: pd.DataFrame, labels: Labels, recent: int | None = None) -> EngineSection:
    """``engines.engine_table``: every shared config's figures per side, and the verdicts
    between the two engines when the scope holds two."""
    table = engine_table(trials, recent=recent)
    if not table.shown:
        return EngineSection(table.engines)
    return EngineSection(
        engines=table.engines, sides=tuple(str(s) for s in table.sides),
        comparisons=tuple(f"{c.candidate_side} vs {c.baseline_side}" for c in table.comparisons),
        metrics=table.comparisons[0].metrics if table.comparisons else (),
        rows=_engine_rows(table, labels), notes=table.notes)


def changes(result: Changes, labels: Labels, section: ComparisonSection,
            several_engines: bool) -> ChangesSection:
    """``changes.what_changed``'s answer with the report's labels; phones by label."""
    def config(config_id: str, engine: str) -> str:
        name = labels.config(config_id)
        return f"{name} · {engine}" if several_engines else name

    # each compared cell's noise floor (``floors.with_floors``), shown beside its verdict
    floors = {(r.serial, r.config_id, r.metric): r.floor for r in section.rows}

    def moved(items: Sequence[MetricChange]) -> tuple[MetricChangeItem, ...]:
        return tuple(MetricChangeItem(labels.config(m.config_id), m.metric, m.ratio, m.ci_low,
                                      m.ci_high, m.median_baseline, m.median_candidate,
                                      floors.get((m.device, m.config_id, m.metric)))
                     for m in items)

    rows, unchanged = [], []
    for phone in result.phones:
        device = labels.device(phone.device)
        if not phone.changed:
            unchanged.append(device)
            continue
        rows.append(PhoneChangeRow(
            device, moved(phone.regressions), moved(phone.improvements),
            tuple(FailureItem(config(f.config_id, f.engine), f.build, f.outcome, f.started_at,
                              f.last_ok, f.error) for f in phone.new_failures),
            tuple(MissingItem(config(m.config_id, m.engine), m.last_night, m.trials)
                  for m in phone.missing),
            phone.absent))
    compared = (f"{section.candidate_side} against {section.baseline_side}"
                if section.baseline else "")
    blind = sum(1 for f in floors.values() if f is not None and f.blind)
    return ChangesSection(result.latest_night, result.previous_night, compared,
                          "" if compared else section.note,
                          tuple(sorted(rows, key=lambda r: r.device)), tuple(sorted(unchanged)),
                          blind=blind,
                          band=next((f.band for f in floors.values() if f is not None), 0.03))
