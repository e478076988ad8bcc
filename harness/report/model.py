"""The plain data a report is rendered from: frozen dataclasses of strings, numbers and tuples.

Why a separate layer: data preparation (pandas) and rendering (jinja2, matplotlib) are tested
apart, and the template sees only these values, never a DataFrame. Every string here may come from
the store (a device name, an error line) and is escaped by the template, never trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from harness.analysis.offload_table import OffloadRow
from harness.analysis.paging_table import PagingRow
from harness.analysis.recommend import Pick
from harness.analysis.validity_table import OutputChecks

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
    engines: tuple[CountRow, ...] = ()  # trials per engine (the engine that ran them)
    output: OutputChecks = field(default_factory=OutputChecks)  # states over the ok trials
    not_attempted: int = 0  # trials ruled out before they ran (unsupported, skipped): no failure


@dataclass(frozen=True)
class Refusal:
    """What a phone would not let the shell read, and in how many trials (a trial's
    ``unreadable``: ``thermal_zone0/temp: Permission denied``)."""

    device: str
    what: str
    trials: int


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
    memory_model: str = ""  # a virtual phone's: cgroup or simulated ("": a real phone)


@dataclass(frozen=True)
class Conditions:
    rows: tuple[ConditionRow, ...]
    total: int  # (device, config) pairs in scope; rows holds the first ones, flagged first
    recorded: bool  # any trial carries pre-flight or read-back columns
    refused: tuple[Refusal, ...] = ()  # per device, what the shell could not read


@dataclass(frozen=True)
class Heatmap:
    """Median throughput over a quant (rows) × n_ctx (columns) grid; None where unmeasured."""

    device: str
    kv: str
    metric: str
    rows: tuple[str, ...]
    cols: tuple[int, ...]
    values: tuple[tuple[Number, ...], ...]
    # the interquartile range of the trials each median is of (None: fewer than 2 trials)
    low: tuple[tuple[Number, ...], ...] = ()
    high: tuple[tuple[Number, ...], ...] = ()
    # the knobs off the grid that differ within the report, this table's values of them (e.g.
    # "no-mmap fa=on"): configurations that differ in them are never one median
    variant: str = ""

    def spread(self, row: int, col: int) -> tuple[float, float] | None:
        """(25th, 75th percentile) of a cell, or None when not known."""
        if not self.low or not self.high:
            return None
        lo, hi = self.low[row][col], self.high[row][col]
        return None if lo is None or hi is None else (lo, hi)


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
class KvQualityRow:
    """One KV cache cell (harness quality --kv): a KV type at a depth against f16 KV there."""

    model: str
    quant: str
    kv: str
    depth: int
    kl: float
    kl_max: float
    top1: float
    ppl: float
    repeated_4gram: float  # the median over its continuations
    longest_loop: int
    gen_tokens: int
    build: str  # the engine build and rotation setting: rows of two builds are never compared
    text: str
    places: int = 1  # continuations generated (one per place in the text)
    looping: int = 0  # of them, those that loop (harness.analysis.kv_loss)


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
class CellFloor:
    """A compared cell's noise floor at the repetitions the comparison had
    (``analysis.noise``): the smallest change it finds with ``power`` at ``alpha``."""

    cv: Number  # robust CV; None: fewer than ``min_nights`` nights of history
    nights: int  # nights the CV rests on (0: none with enough usable trials)
    mdc: Number  # minimum detectable change at n_baseline/n_candidate, a fraction
    n_baseline: int
    n_candidate: int
    power: float
    alpha: float
    min_nights: int
    band: float  # the verdict's noise band (``Policy.noise``)
    verdict: str = ""

    @property
    def enough(self) -> bool:
        return self.cv is not None and self.mdc is not None

    @property
    def blind(self) -> bool:
        """No verdict was reached and the cell could not have seen a change of the band."""
        return self.verdict == "unstable" and self.mdc is not None and self.mdc > self.band

    @property
    def reps(self) -> str:
        if self.n_baseline == self.n_candidate:
            return f"{self.n_baseline} repetitions"
        return f"{self.n_baseline}/{self.n_candidate} repetitions"

    @property
    def text(self) -> str:
        """One line for people, e.g. "this cell cannot see changes below 4.1% with 10
        repetitions (80% power, alpha 0.05; robust CV 2.3% over 7 nights)"."""
        if self.cv is None or self.mdc is None:
            return (f"no noise floor yet: fewer than {self.min_nights} nights of history "
                    f"({self.nights} so far)")
        line = (f"this cell cannot see changes below {self.mdc:.1%} with {self.reps} "
                f"({self.power:.0%} power, alpha {self.alpha:g}; robust CV {self.cv:.1%} over "
                f"{self.nights} nights)")
        if self.blind:
            line += (f"; no verdict, and it could not have seen a ±{self.band:.0%} change")
        return line


@dataclass(frozen=True)
class ComparisonRow:
    """One cell and metric of ``harness.analysis.ab.compare_builds``, labelled for people."""

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
    serial: str = ""  # the device serial and config_id the cell is keyed by in `compare --json`
    config_id: str = ""
    floor: CellFloor | None = None  # None: the report computed no floor (an old caller)


@dataclass(frozen=True)
class ComparisonSection:
    baseline: str | None  # builds of the two sides
    candidate: str | None
    note: str  # why there is no comparison, or how the samples were chosen
    counts: tuple[tuple[str, dict[str, int]], ...] = ()  # per metric: verdict → cells
    rows: tuple[ComparisonRow, ...] = ()  # all cells, worst first
    shown: int = 40
    baseline_engine: str | None = None
    candidate_engine: str | None = None

    @property
    def baseline_side(self) -> str:
        return f"{self.baseline} [{self.baseline_engine}]" if self.baseline else ""

    @property
    def candidate_side(self) -> str:
        return f"{self.candidate} [{self.candidate_engine}]" if self.candidate else ""


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
    """One pick of ``harness.analysis.recommend.recommend`` with the report's label of its
    configuration."""

    config: str
    pick: Pick


@dataclass(frozen=True)
class DeviceRecommendations:
    """What ``harness recommend --device SERIAL`` answers for one device of the report."""

    device: str
    items: tuple[Recommendation, ...]  # every pick, best first (the template shows ``shown``)
    serial: str = ""
    memory_source: str = ""
    rejected: int = 0
    suggestion: str | None = None
    notes: tuple[str, ...] = ()
    shown: int = 5
    fitting: int | None = None  # picks in all (``items`` may hold only the best); None: items

    @property
    def count(self) -> int:
        return len(self.items) if self.fitting is None else self.fitting


@dataclass(frozen=True)
class EngineRow:
    """One device and config measured by several engines: each side's medians, and each engine
    comparison's (ratio, verdict) per metric (None where the cell was not compared)."""

    device: str
    config: str
    figures: tuple[tuple[Number, Number, Number] | None, ...]  # per side: tg, pp, peak PSS
    verdicts: tuple[tuple[tuple[float, str] | None, ...], ...]  # per comparison, per metric


@dataclass(frozen=True)
class EngineSection:
    """Engines side by side (shown only when the scope holds more than one engine)."""

    engines: tuple[str, ...] = ()
    sides: tuple[str, ...] = ()  # "build [engine]" per figures column
    comparisons: tuple[str, ...] = ()  # "candidate vs baseline" per verdict column group
    metrics: tuple[str, ...] = ()  # the metrics of each comparison's verdict columns
    rows: tuple[EngineRow, ...] = ()
    notes: tuple[str, ...] = ()
    shown: int = 60

    @property
    def present(self) -> bool:
        return len(self.engines) > 1


@dataclass(frozen=True)
class SustainedRow:
    """One device and (config, build, engine)'s sustained trials (``analysis.sustained``)."""

    config: str
    build: str
    engine: str
    sustained_s: float
    trials: int
    sustained_tg_tps: Number
    steady_state_ratio: Number
    throttled_trials: int
    time_to_throttle_s: Number  # median over the trials that throttled
    max_thermal_status: int | None


@dataclass(frozen=True)
class SustainedLine:
    """One sustained trial's generation rate per repetition; ``series`` numbers its candidate
    (the row of the device's table it belongs to), which gives it its colour."""

    label: str
    series: int
    t_s: tuple[float, ...]
    tg_tps: tuple[float, ...]


@dataclass(frozen=True)
class SustainedDevice:
    device: str
    rows: tuple[SustainedRow, ...]
    lines: tuple[SustainedLine, ...]  # at most a few trials per candidate


@dataclass(frozen=True)
class SustainedSection:
    """Shown only when the scope holds sustained trials."""

    devices: tuple[SustainedDevice, ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.devices)


@dataclass(frozen=True)
class EnergyRow:
    """One device and (config, build, engine)'s energy (``analysis.energy_table``): the numbers
    are None unless some trial's energy is valid; ``reason`` says why the others have none."""

    device: str
    config: str
    build: str
    engine: str
    measured: int
    valid: int
    pp_j_per_token: Number
    tg_j_per_token: Number
    idle_power_w: Number
    source: str
    units: str
    reason: str  # "" when every measured trial is valid

    @property
    def ok(self) -> bool:
        return self.valid > 0 and self.tg_j_per_token is not None


@dataclass(frozen=True)
class EnergySection:
    """Shown only when the scope holds trials whose energy was measured."""

    rows: tuple[EnergyRow, ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.rows)


@dataclass(frozen=True)
class PagingSection:
    """Shown only when the scope holds trials that paged, set their page cache or load mode
    (``analysis.paging_table``; rows carry the report's device and config labels)."""

    rows: tuple[PagingRow, ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.rows)


@dataclass(frozen=True)
class OffloadSection:
    """Shown only when the scope holds cells on a GPU/NPU or phones that reported device
    memory (``analysis.offload_table``; rows carry the report's device and config labels)."""

    rows: tuple[OffloadRow, ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.rows)


@dataclass(frozen=True)
class InvalidRow:
    """A device and (config, build, engine) with ok trials that failed a validity gate."""

    device: str
    config: str
    build: str
    engine: str
    checked: int
    invalid: int
    reasons: tuple[tuple[str, int], ...]  # gate text -> trials
    tg_tps: float | None = None  # the invalid trials' median speeds: visible, never ranked
    pp_tps: float | None = None


@dataclass(frozen=True)
class ValiditySection:
    """Shown only when the scope holds trials the validity gates or the output check saw."""

    checked: int = 0
    invalid: int = 0
    rows: tuple[InvalidRow, ...] = ()
    shown: int = 60
    output: OutputChecks = field(default_factory=OutputChecks)  # states over the ok trials

    @property
    def present(self) -> bool:
        return self.checked > 0 or self.output.stored > 0


@dataclass(frozen=True)
class MetricChangeItem:
    """A regressed or improved cell of the build comparison, labelled."""

    config: str
    metric: str
    ratio: float
    ci_low: float
    ci_high: float
    median_baseline: float
    median_candidate: float
    floor: CellFloor | None = None


@dataclass(frozen=True)
class FailureItem:
    """A cell whose newest trial failed after an earlier ok one."""

    config: str
    build: str
    outcome: str
    started_at: datetime
    last_ok: datetime
    error: str


@dataclass(frozen=True)
class MissingItem:
    """A cell with trials on earlier nights and none on the latest."""

    config: str
    last_night: str
    trials: int


@dataclass(frozen=True)
class PhoneChangeRow:
    device: str
    regressions: tuple[MetricChangeItem, ...] = ()
    improvements: tuple[MetricChangeItem, ...] = ()
    failures: tuple[FailureItem, ...] = ()
    missing: tuple[MissingItem, ...] = ()
    absent: bool = False  # no trial at all on the latest night


@dataclass(frozen=True)
class ChangesSection:
    """What changed, per phone (``harness.analysis.changes.what_changed``), labelled; only the
    phones with a change are in ``phones``, the others are named in ``unchanged``."""

    latest_night: str | None = None
    previous_night: str | None = None
    compared: str = ""  # "candidate against baseline" of the build comparison, "" when none
    note: str = ""  # why there was no comparison
    phones: tuple[PhoneChangeRow, ...] = ()
    unchanged: tuple[str, ...] = ()
    shown: int = 8  # items per phone and kind
    blind: int = 0  # compared cells with no verdict whose noise floor is above the band
    band: float = 0.03

    @property
    def nothing_changed(self) -> bool:
        return not self.phones


@dataclass(frozen=True)
class FloorRow:
    """One cell and metric's noise floor (``analysis.noise.noise_floors``), labelled."""

    config: str  # the config's label (with the engine when the scope holds several)
    metric: str
    cv: Number  # robust CV; None: fewer than the section's ``min_nights`` nights of history
    nights: int  # nights the CV rests on (0: no night with enough usable trials)
    trials: int  # usable trials in those nights
    reps: int  # repetitions per night the cell ran (the median size of its samples)
    mdc: Number  # minimum detectable change at ``reps`` per side, the section's power
    mdc_95: Number
    serial: str = ""
    config_id: str = ""
    engine: str = ""

    @property
    def enough(self) -> bool:
        return self.cv is not None


@dataclass(frozen=True)
class FloorPhone:
    device: str
    rows: tuple[FloorRow, ...]  # by config, then metric
    serial: str = ""


@dataclass(frozen=True)
class NoiseFloorSection:
    """Per phone, each cell's noise floor over its recent nights (``harness noise``'s figures,
    at the repetitions each cell ran)."""

    phones: tuple[FloorPhone, ...] = ()
    nights_back: int = 7
    min_nights: int = 3
    power: float = 0.80
    alpha: float = 0.05
    shown: int = 40  # rows per phone

    @property
    def present(self) -> bool:
        return bool(self.phones)

    def to_json(self) -> list[dict[str, object]]:
        """The ``noise_floor`` list of ``harness report --json``: one entry per cell and metric
        (``cv``/``mdc_80``/``mdc_95`` null where the cell lacks history)."""
        return [{"device": p.serial, "device_label": p.device, "config_id": r.config_id,
                 "config": r.config, "engine": r.engine, "metric": r.metric, "cv": r.cv,
                 "nights": r.nights, "trials": r.trials, "reps": r.reps, "mdc_80": r.mdc,
                 "mdc_95": r.mdc_95, "enough_history": r.enough,
                 "min_nights": self.min_nights, "alpha": self.alpha}
                for p in self.phones for r in p.rows]


@dataclass(frozen=True)
class ReportData:
    title: str
    scope: str  # "run X", "since D" or "whole store"
    generated_at: datetime
    summary: Summary
    heatmap_build: str | None  # the side whose trials the heatmaps and memory cells show
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
    kv_quality: tuple[KvQualityRow, ...] = ()
    heatmap_engine: str | None = None
    engines: EngineSection = field(default_factory=EngineSection)
    sustained: SustainedSection = field(default_factory=SustainedSection)
    energy: EnergySection = field(default_factory=EnergySection)
    validity: ValiditySection = field(default_factory=ValiditySection)
    paging: PagingSection = field(default_factory=PagingSection)
    changes: ChangesSection = field(default_factory=ChangesSection)
    noise: NoiseFloorSection = field(default_factory=NoiseFloorSection)
    offload: OffloadSection = field(default_factory=OffloadSection)
    # store parts the reads left out (harness.store.SkippedPart.line): the banner at the top
    skipped_parts: tuple[str, ...] = ()

