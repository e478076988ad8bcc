"""The plain data a report is rendered from: frozen dataclasses of strings, numbers and tuples.

Why a separate layer: data preparation (pandas) and rendering (jinja2, matplotlib) are tested
apart, and the template sees only these values, never a DataFrame. Every string here may come from
the store (a device name, an error line) and is escaped by the template, never trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

Number = float | None


@dataclass(frozen=True)
class DeviceRow:
    serial: str
    label: str  # model (manufacturer), shown in headings
    soc: str
    ram_bytes: int | None
    trials: int
    ok: int


@dataclass(frozen=True)
class CountRow:
    name: str
    trials: int
    detail: str = ""


@dataclass(frozen=True)
class FailureRow:
    started_at: datetime
    device: str
    build: str
    config: str
    outcome: str
    error: str
    evidence: str


@dataclass(frozen=True)
class Summary:
    trials: int
    runs: tuple[str, ...]
    first: datetime | None
    last: datetime | None
    devices: tuple[DeviceRow, ...]
    builds: tuple[CountRow, ...]
    models: tuple[CountRow, ...]
    outcomes: tuple[CountRow, ...]
    failures: tuple[FailureRow, ...]
    failures_total: int


@dataclass(frozen=True)
class ConditionRow:
    """How one configuration actually ran on one device, and the phone's state around it.

    Each state is its one value, or its values with counts when trials differed
    (``on 3 · off 1``); empty when never read (trials stored before schema 3).
    """

    device: str
    config: str
    trials: int
    flagged: int  # ok or not, trials whose affinity/threads did not take effect
    affinity: str  # what the cell asked for (all, big, a mask)
    applied_affinity: str
    threads: str
    threads_seen: str
    screen_on: str
    stay_awake: str
    charging: str
    charge_source: str
    battery_saver: str
    doze_state: str
    cooldown_source: str


@dataclass(frozen=True)
class Conditions:
    rows: tuple[ConditionRow, ...]
    total: int  # (device, config) pairs in scope; rows holds the first ones, flagged first
    recorded: bool  # any trial carries pre-flight or read-back columns


@dataclass(frozen=True)
class Heatmap:
    """Median throughput over a quant (rows) × n_ctx (columns) grid; None where unmeasured."""

    device: str
    kv: str
    metric: str
    rows: tuple[str, ...]
    cols: tuple[int, ...]
    values: tuple[tuple[Number, ...], ...]


@dataclass(frozen=True)
class MemoryCell:
    device: str
    config: str
    measured_bytes: float
    predicted_bytes: float | None
    kv_predicted_bytes: float | None = None  # the predictor's KV term
    kv_reported_bytes: float | None = None  # llama.cpp's own figure (llama-bench -v)

    @property
    def error(self) -> float | None:
        if not self.predicted_bytes:
            return None
        return self.measured_bytes / self.predicted_bytes - 1

    @property
    def kv_error(self) -> float | None:
        if not self.kv_predicted_bytes or not self.kv_reported_bytes:
            return None
        return self.kv_predicted_bytes / self.kv_reported_bytes - 1


@dataclass(frozen=True)
class QualityRow:
    """One model file's quality (harness quality) beside what it measured on the phones."""

    model: str
    quant: str
    kl: float
    kl_max: float
    top1: float
    ppl: float | None
    positions: int
    text: str | None  # None: a seeded token sequence (synthetic ladders)
    tg_tps: float | None  # median of the ok trials
    peak_bytes: float | None  # median measured peak RSS of the ok trials


@dataclass(frozen=True)
class Timeline:
    """One trial's samples: memory over time with the thermal status alongside."""

    title: str
    outcome: str
    throttled: bool
    t_s: tuple[float, ...]
    pss_bytes: tuple[Number, ...]
    thermal_status: tuple[Number, ...]
    temp_c: tuple[Number, ...]


@dataclass(frozen=True)
class ThermalPoint:
    device: str
    started_at: datetime
    max_temp_c: float
    throttled: bool


@dataclass(frozen=True)
class ThermalRow:
    device: str
    trials: int
    throttled: int
    median_temp_c: Number
    max_temp_c: Number


@dataclass(frozen=True)
class ComparisonRow:
    device: str
    config: str
    metric: str
    ratio: float
    ci_low: float
    ci_high: float
    p_adjusted: float
    cliffs_delta: float
    n_baseline: int
    n_candidate: int
    verdict: str
    reason: str


@dataclass(frozen=True)
class ComparisonSection:
    baseline: str | None
    candidate: str | None
    note: str  # why there is no comparison, or how the samples were chosen
    counts: tuple[tuple[str, dict[str, int]], ...] = ()  # per metric: verdict → cells
    rows: tuple[ComparisonRow, ...] = ()  # all cells, worst first
    shown: int = 40


@dataclass(frozen=True)
class ChangeMark:
    night: str
    magnitude: float
    p_value: float
    build_before: str
    build_after: str


@dataclass(frozen=True)
class HistorySeries:
    device: str
    config: str
    metric: str
    nights: tuple[str, ...]
    medians: tuple[float, ...]
    builds: tuple[str, ...]
    change_points: tuple[ChangeMark, ...]
    change_indices: tuple[int, ...]


@dataclass(frozen=True)
class HistorySection:
    metric: str
    series_checked: int
    series: tuple[HistorySeries, ...]  # the ones to plot (top N)
    changes: tuple[tuple[str, str, ChangeMark], ...]  # (device, config, change) for every series


@dataclass(frozen=True)
class Recommendation:
    """One recommended configuration for a device; ``recommend.py`` may supply these instead."""

    config: str
    tg_tps: Number
    pp_tps: Number
    peak_bytes: Number
    headroom_bytes: Number
    source: str  # "measured" or "predicted"
    reason: str


@dataclass(frozen=True)
class DeviceRecommendations:
    device: str
    items: tuple[Recommendation, ...]


@dataclass(frozen=True)
class ReportData:
    title: str
    scope: str  # "run X", "since D" or "whole store"
    generated_at: datetime
    summary: Summary
    heatmap_build: str | None
    heatmaps: tuple[Heatmap, ...]
    memory_cells: tuple[MemoryCell, ...]
    timelines: tuple[Timeline, ...]
    thermal_rows: tuple[ThermalRow, ...]
    thermal_points: tuple[ThermalPoint, ...]
    thermal_points_total: int
    throttled_trials: tuple[FailureRow, ...]
    comparison: ComparisonSection
    history: HistorySection
    recommendations: tuple[DeviceRecommendations, ...]
    timings: dict[str, float] = field(default_factory=dict)
    conditions: Conditions = field(default_factory=lambda: Conditions((), 0, False))
    quality: tuple[QualityRow, ...] = ()
