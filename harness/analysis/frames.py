"""From the results store to per-cell groups of samples: the one place trials become arrays.

Why a separate step: ``compare``, ``history`` and ``recommend`` must agree on which trials
count. A trial counts when its outcome is ``ok`` and its metric is not null; a throttled trial is
left out by default (its speed says more about the phone's temperature than about the build)
but counted, so verdicts can say how many were dropped. A trial whose cell did not take effect on
the phone (``config_not_applied``: its CPU mask was ignored, fewer threads ran) is always left
out and counted: it measured some other configuration than the one it is labelled with. So is a
trial the validity gates failed (``valid`` false, ``harness.run.validity``: an impossible rate, a
decode faster than the phone's memory, a peak below the weights with mmap off, other token
counts than the cell's ...): its figures are not a measurement at all. A *cell*
here is one device (serial) and one ``config_id`` (the cell without its build and engine), which
is what pairs two builds or two engines. A *side* of a comparison is one (build, engine): the
engine that ran a trial is its ``engine`` column, and a missing one reads ``llama-bench`` (stores
from before engines were an axis held nothing else).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.cell import DEFAULT_ENGINE
from harness.errors import ConfigError, StoreError
from harness.knobs import CPU_DEVICE
from harness.labels import config_label
from harness.metrics import DEFAULT_METRICS, METRIC_COLUMNS, metric
from harness.store import read_table


def metric_name(name: str) -> str:
    """The canonical short name of a comparable metric or alias (``peak_pss_bytes`` ->
    ``peak_pss``), from ``harness.metrics``."""
    return metric(name, comparable=True).name


def parse_metrics(text: str | Iterable[str]) -> tuple[str, ...]:
    """``tg_tps,pp_tps,peak_pss`` -> canonical names, in order, without duplicates."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    names = [metric_name(p) for p in parts if p.strip()]
    if not names:
        raise ConfigError("--metric names no metric; e.g. --metric tg_tps,pp_tps,peak_pss")
    return tuple(dict.fromkeys(names))


def load_trials(results: Path) -> pd.DataFrame:
    """Every trial of a store; a StoreError naming the folder when it holds none."""
    if not (results / "trials").is_dir():
        raise StoreError(f"{results}: no results store here (no trials/ folder); "
                         "pass --results DIR or run `harness run` first")
    frame = read_table(results, "trials")
    if frame.empty:
        raise StoreError(f"{results}: the store holds no trials")
    from harness.analysis.monitor import with_stored_energy  # it imports harness.store too

    return with_stored_energy(results, frame)


def load_device_trials(results: Path, serial: str) -> pd.DataFrame:
    """``load_trials`` narrowed to the phone whose serial is ``serial``, read with the filter
    pushed into Parquet; every trial when the store has no such serial (``serial`` may then be
    a device model or a profile: ``phonemem.resolve_device`` decides)."""
    if not (results / "trials").is_dir():
        return load_trials(results)
    frame = read_table(results, "trials", filters=[("device_serial", "=", serial)])
    if frame.empty:
        return load_trials(results)
    from harness.analysis.monitor import with_stored_energy

    return with_stored_energy(results, frame)


@dataclass(frozen=True)
class CellKey:
    """One device and one configuration; ``str`` gives the form gate messages print."""

    device: str
    config_id: str

    def __str__(self) -> str:
        return f"{self.device}/{self.config_id}"


@dataclass(frozen=True, order=True)
class Side:
    """One side of a comparison: a build and the engine that ran it."""

    build: str
    engine: str = DEFAULT_ENGINE

    def __str__(self) -> str:
        return f"{self.build} [{self.engine}]"


@dataclass(frozen=True)
class SampleGroup:
    """The usable values of one side (build, engine) on one cell, per canonical metric name."""

    key: CellKey
    build_id: str
    label: str
    values: Mapping[str, np.ndarray] = field(default_factory=dict)
    n_trials: int = 0  # every trial of the cell and side (its window with recent=N), any outcome
    n_ok: int = 0
    n_throttled_excluded: int = 0
    outcomes: Mapping[str, int] = field(default_factory=dict)
    n_not_applied_excluded: int = 0  # ok trials whose affinity/threads did not take effect
    n_invalid_excluded: int = 0  # ok trials the validity gates failed (and not flagged above)
    cpu_emulation: str | None = None  # a virtual phone's emulators (CPU, and GPU for GPU cells)
    engine: str = DEFAULT_ENGINE

    @property
    def side(self) -> Side:
        return Side(self.build_id, self.engine)


def engine_column(frame: pd.DataFrame) -> pd.Series:
    """The engine of each trial as text; a missing column or value reads ``llama-bench``."""
    if "engine" not in frame:
        return pd.Series(DEFAULT_ENGINE, index=frame.index, dtype=object)
    return frame["engine"].astype(object).where(frame["engine"].notna(), DEFAULT_ENGINE)


def with_engine(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` whose ``engine`` column is filled (missing values read ``llama-bench``)."""
    if "engine" in frame and not frame["engine"].isna().any():
        return frame
    return frame.assign(engine=engine_column(frame))


def sides(frame: pd.DataFrame) -> list[Side]:
    """Every (build, engine) of the trials, sorted."""
    if "engine" in frame:
        unique = frame[["build_id", "engine"]].drop_duplicates()
        engines = unique["engine"].astype(object).where(unique["engine"].notna(), DEFAULT_ENGINE)
    else:
        unique = frame[["build_id"]].drop_duplicates()
        engines = pd.Series(DEFAULT_ENGINE, index=unique.index, dtype=object)
    found = {Side(str(b), str(e)) for b, e in zip(unique["build_id"], engines, strict=True)
             if not pd.isna(b)}
    return sorted(found)


def resolve_side(frame: pd.DataFrame, build: str | None, engine: str | None, *,
                 build_flag: str = "--baseline", engine_flag: str = "--baseline-engine") -> Side:
    """The side a user named: a build and its engine, either one alone when that is unambiguous.

    An engine None means the only engine ``build`` has; a build None means the only build
    ``engine`` has. Anything else is a ConfigError of one line naming what the store holds and
    the flag to pass.
    """
    known = sides(frame)
    if build is None:
        if engine is None:
            raise ConfigError(f"name a side: pass {build_flag} BUILD or {engine_flag} ENGINE")
        return _only_build(known, engine, build_flag, engine_flag)
    return _engine_of(known, build, engine, build_flag, engine_flag)


def _only_build(known: Sequence[Side], engine: str, build_flag: str, engine_flag: str) -> Side:
    builds = sorted({s.build for s in known if s.engine == engine})
    if len(builds) == 1:
        return Side(builds[0], engine)
    if not builds:
        engines = ", ".join(sorted({s.engine for s in known})) or "none"
        raise ConfigError(f"{engine_flag} {engine!r}: no trials of that engine "
                          f"(engines: {engines})")
    raise ConfigError(f"{engine_flag} {engine!r} has trials of several builds "
                      f"({', '.join(builds)}): pass {build_flag} BUILD")


def _engine_of(known: Sequence[Side], build: str, engine: str | None, build_flag: str,
               engine_flag: str) -> Side:
    engines = sorted({s.engine for s in known if s.build == build})
    if not engines:
        builds = ", ".join(sorted({s.build for s in known})) or "none"
        raise ConfigError(f"{build_flag} {build!r}: no trials of that build (builds: {builds})")
    if engine is None:
        if len(engines) > 1:
            raise ConfigError(f"{build_flag} {build!r} has trials of several engines "
                              f"({', '.join(engines)}): pass {engine_flag} ENGINE")
        return Side(build, engines[0])
    if engine not in engines:
        raise ConfigError(f"{engine_flag} {engine!r}: build {build!r} has no trials of that "
                          f"engine (its engines: {', '.join(engines)})")
    return Side(build, engine)


def not_applied(frame: pd.DataFrame) -> pd.Series:
    """True for trials flagged ``config_not_applied`` (older stores have no such column)."""
    if "config_not_applied" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["config_not_applied"].notna()


def invalid(frame: pd.DataFrame) -> pd.Series:
    """True for trials the validity gates failed (``valid`` false); unchecked ones (null, or
    older stores without the column) are not."""
    if "valid" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["valid"].astype("boolean").eq(False).fillna(False).astype(bool)


def throttled(frame: pd.DataFrame) -> pd.Series:
    """True for throttled trials (a missing flag reads False)."""
    return frame["throttled"].astype(object).where(frame["throttled"].notna(), False).astype(bool)


#: The columns ``usable_mask`` reads.
USABLE_COLUMNS = ("outcome", "config_not_applied", "valid", "throttled")


def usable_mask(frame: pd.DataFrame, include_throttled: bool = False) -> pd.Series:
    """The rule of which trials count, as a mask: ``ok``, valid (not failed by a validity gate),
    applied as asked and (by default) not throttled. Every command and the report select trials
    with it."""
    mask = ((frame["outcome"] == "ok").to_numpy() & ~not_applied(frame).to_numpy()
            & ~invalid(frame).to_numpy())
    if not include_throttled:
        mask &= ~throttled(frame).to_numpy()
    return pd.Series(mask, index=frame.index)


def usable(frame: pd.DataFrame, include_throttled: bool = False) -> pd.DataFrame:
    """Trials with outcome ``ok``, valid, applied as asked (and, by default, not throttled)."""
    return frame[usable_mask(frame, include_throttled)]


def medians(frame: pd.DataFrame, by: Sequence[str], columns: Sequence[str], *,
            include_throttled: bool = False) -> pd.DataFrame:
    """Median of each column over the usable trials of each group (NaN where none has one)."""
    kept = usable(frame, include_throttled)
    return kept.groupby(list(by), observed=True, sort=True)[list(columns)].median()


def thermal_summary(frame: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Per group, over every trial whatever its outcome (heat is the phone's, not the
    build's): ``trials``, ``throttled`` (count), ``median_temp_c`` and ``max_temp_c``."""
    hot = frame.assign(_throttled=throttled(frame).to_numpy())
    return hot.groupby(list(by), observed=True, sort=True).agg(
        trials=("_throttled", "size"), throttled=("_throttled", "sum"),
        median_temp_c=("max_temp_c", "median"), max_temp_c=("max_temp_c", "max"))


def best_medians(frame: pd.DataFrame, by: Sequence[str], over: str, column: str) -> pd.Series:
    """Per group of ``by``: the best (highest) median of ``column`` among the values of ``over``
    (e.g. the best thread count of a cell), over usable trials."""
    per = medians(frame, [*by, over], [column])[column]
    return per.groupby(level=list(range(len(by))), observed=True).max()


def side_rows(frame: pd.DataFrame, side: Side) -> pd.DataFrame:
    """The trials of one side: its build, run by its engine."""
    return frame[(frame["build_id"] == side.build) & (engine_column(frame) == side.engine)]


def recent_window(rows: pd.DataFrame, recent: int,
                  include_throttled: bool = False) -> pd.DataFrame:
    """The newest trials of one side and cell up to its ``recent``-th usable one: the usable
    ``recent`` newest, and the throttled or failed ones among them (still counted)."""
    newest = rows.sort_values("started_at", ascending=False, kind="stable")
    counts = usable_mask(newest, include_throttled).to_numpy().astype(np.int64)
    before = np.cumsum(counts) - counts  # usable trials newer than this one
    return newest[before < recent]


#: What a cell's sample group reads of its trials besides the metrics (the label aside): every
#: selection copies only these, not the store's hundred-odd columns.
GROUP_READS = ("device_serial", "config_id", "outcome", "throttled", "valid",
                "config_not_applied", "started_at", "cpu_emulation", "gpu_emulated",
                "compute_device")


def _side_groups(frame: pd.DataFrame, side: Side, metrics: Sequence[str],
                 include_throttled: bool, recent: int | None) -> dict[CellKey, SampleGroup]:
    """Each (device, config) cell of one side, as a sample group: the side's trials are
    selected and their masks computed once, then each cell takes its rows by position."""
    where = np.flatnonzero(((frame["build_id"] == side.build)
                            & (engine_column(frame) == side.engine)).to_numpy())
    wanted = dict.fromkeys([*GROUP_READS, *(METRIC_COLUMNS[m] for m in metrics)])
    narrow = frame[[c for c in wanted if c in frame.columns]].iloc[where].assign(_at=where)
    by = ["device_serial", "config_id"]
    if recent is not None:  # each cell's newest trials only: select them, then group as one
        windows = [recent_window(cell, recent, include_throttled)
                   for _, cell in narrow.groupby(by, sort=True, observed=True)]
        narrow = pd.concat(windows) if windows else narrow.iloc[:0]
    ok = (narrow["outcome"] == "ok").to_numpy()
    flagged = ok & not_applied(narrow).to_numpy()
    failed = ok & invalid(narrow).to_numpy() & ~flagged
    hot = ok & throttled(narrow).to_numpy() & ~flagged & ~failed
    kept = usable_mask(narrow, include_throttled).to_numpy()
    values = {m: narrow[METRIC_COLUMNS[m]].to_numpy(dtype=np.float64, na_value=np.nan)
              for m in metrics}
    # outcomes as codes counted per group (not a value_counts per cell)
    codes, names = pd.factorize(narrow["outcome"].astype(object).to_numpy(), sort=True)
    emulation = _emulation_parts(narrow)
    at = narrow["_at"].to_numpy()
    labels: dict[str, str] = {}  # a configuration's label, made once (config_id hashes it)
    groups: dict[CellKey, SampleGroup] = {}
    grouped = narrow.groupby(by, sort=True, observed=True)
    for (serial, config), positions in grouped.indices.items():
        key = CellKey(str(serial), str(config))
        pos = np.sort(positions)
        use = pos[kept[pos]]
        if key.config_id not in labels:
            labels[key.config_id] = config_label(frame.iloc[int(at[pos[0]])].to_dict())
        counted = np.bincount(codes[pos][codes[pos] >= 0], minlength=len(names))
        groups[key] = SampleGroup(
            key=key,
            build_id=side.build,
            label=labels[key.config_id],
            values={m: v[use][~np.isnan(v[use])] for m, v in values.items()},
            n_trials=len(pos),
            n_ok=int(ok[pos].sum()),
            n_throttled_excluded=0 if include_throttled else int(hot[pos].sum()),
            outcomes={str(names[i]): int(counted[i]) for i in np.argsort(-counted, kind="stable")
                      if counted[i]},
            cpu_emulation=",".join(sorted(set().union(*(emulation[i] for i in pos)))) or None,
            n_not_applied_excluded=int(flagged[pos].sum()),
            n_invalid_excluded=int(failed[pos].sum()),
            engine=side.engine,
        )
    return groups


def _emulation_parts(rows: pd.DataFrame) -> list[frozenset[str]]:
    """Per trial, the emulators its speed came from: a virtual phone's CPU (qemu-aarch64), and
    its GPU (``gpu:lavapipe``) for cells that ran on it; a group names the union of its own."""
    parts: list[frozenset[str]] = [frozenset()] * len(rows)
    if "cpu_emulation" in rows:
        cpu = rows["cpu_emulation"]
        named = cpu.notna().to_numpy()
        texts = cpu.to_numpy(dtype=object)
        for i in np.flatnonzero(named):
            parts[i] = frozenset({str(texts[i])})
    if "gpu_emulated" in rows and "compute_device" in rows:
        on_gpu = (rows["compute_device"].notna() & (rows["compute_device"] != CPU_DEVICE)
                  & rows["gpu_emulated"].notna()).to_numpy()
        gpu = rows["gpu_emulated"].to_numpy(dtype=object)
        for i in np.flatnonzero(on_gpu):
            parts[i] = parts[i] | {f"gpu:{gpu[i]}"}
    return parts


def build_groups(frame: pd.DataFrame, build: str, metrics: Sequence[str] = DEFAULT_METRICS,
                 *, engine: str | None = None, include_throttled: bool = False,
                 recent: int | None = None) -> dict[CellKey, SampleGroup]:
    """Every (device, config) cell measured with ``build`` run by ``engine`` (None: the only
    engine that build has), with its usable values; with ``recent``, only each cell's newest
    trials up to that many usable ones (``recent_window``)."""
    side = resolve_side(frame, build, engine)
    return _side_groups(frame, side, metrics, include_throttled, recent)


def paired_sides(frame: pd.DataFrame, baseline: Side, candidate: Side,
                 metrics: Sequence[str] = DEFAULT_METRICS, *, include_throttled: bool = False,
                 recent: int | None = None,
                 ) -> dict[CellKey, tuple[SampleGroup, SampleGroup]]:
    """Cells measured by both (resolved) sides: (baseline group, candidate group), by key."""
    if recent is not None and recent < 1:
        raise ConfigError(f"--recent {recent}: give at least 1 trial per side and cell")
    base = _side_groups(frame, baseline, metrics, include_throttled, recent)
    cand = _side_groups(frame, candidate, metrics, include_throttled, recent)
    # an emulated CPU's speed is never compared with a native one, even under one serial
    return {k: (base[k], cand[k]) for k in sorted(base, key=str)
            if k in cand and base[k].cpu_emulation == cand[k].cpu_emulation}


def paired_groups(frame: pd.DataFrame, baseline: str, candidate: str,
                  metrics: Sequence[str] = DEFAULT_METRICS, *, include_throttled: bool = False,
                  baseline_engine: str | None = None, candidate_engine: str | None = None,
                  recent: int | None = None,
                  ) -> dict[CellKey, tuple[SampleGroup, SampleGroup]]:
    """Cells measured by both sides: (baseline group, candidate group), sorted by key.

    A ConfigError names the builds (or engines) the store does hold when a side is absent or
    ambiguous, since a typo would otherwise compare nothing and pass every gate.
    """
    base_side = resolve_side(frame, baseline, baseline_engine)
    cand_side = resolve_side(frame, candidate, candidate_engine, build_flag="--candidate",
                             engine_flag="--candidate-engine")
    return paired_sides(frame, base_side, cand_side, metrics,
                        include_throttled=include_throttled, recent=recent)


def nights(frame: pd.DataFrame) -> pd.Series:
    """The night (``YYYY-MM-DD``) of each trial: the UTC date its run started (the run's
    earliest trial in ``frame``), so a nightly run that crosses midnight is one night in
    history, alerts, noise and the dashboard; a trial without a run id is its own date. Take it
    over every trial before filtering: a frame that kept only a run's trials after midnight
    (one phone's, say) would date them to the next day. Vectorised: one floor and one grouped
    minimum, each distinct date formatted once."""
    days = pd.to_datetime(frame["started_at"], utc=True).dt.floor("D")
    if "run_id" in frame.columns and len(frame):
        codes, _ = pd.factorize(frame["run_id"].astype(object), use_na_sentinel=True)
        earliest = days.groupby(codes, sort=False).transform("min")
        days = days.where(codes < 0, earliest)
    codes, unique = pd.factorize(days)
    labels = np.array([f"{d:%Y-%m-%d}" for d in unique] + [None], dtype=object)
    return pd.Series(labels[codes], index=frame.index, dtype=object)

def records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """``frame.to_dict("records")`` (the same Python scalars) column by column: half the time
    for a farm year's 10,400 candidates of 158 columns."""
    names = list(frame.columns)
    values = [frame[n].tolist() for n in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]
