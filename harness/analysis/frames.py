"""From the results store to per-cell groups of samples: the one place trials become arrays.

Why a separate step: ``compare``, ``history`` and ``recommend`` must agree on which trials
count. A trial counts when its outcome is ``ok`` and its metric is not null; a throttled trial is
left out by default (its speed says more about the phone's temperature than about the build)
but counted, so verdicts can say how many were dropped. A trial whose cell did not take effect on
the phone (``config_not_applied``: its CPU mask was ignored, fewer threads ran) is always left
out and counted: it measured some other configuration than the one it is labelled with. A *cell*
here is one device (serial) and one ``config_id`` (the cell without its build), which is what
pairs two builds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.errors import ConfigError, StoreError
from harness.store import read_table

#: Canonical short metric names (as gates and ``compare.METRIC_HIGHER_IS_BETTER`` spell them)
#: and the trials column each one reads.
METRIC_COLUMNS: dict[str, str] = {
    "tg_tps": "tg_tps",
    "pp_tps": "pp_tps",
    "ttft_ms": "ttft_ms",
    "peak_pss": "peak_pss_bytes",
    "peak_rss": "peak_rss_bytes",
}
_ALIASES: dict[str, str] = {
    "tg": "tg_tps",
    "pp": "pp_tps",
    "ttft": "ttft_ms",
    "peak_pss_bytes": "peak_pss",
    "peak_rss_bytes": "peak_rss",
    "pss": "peak_pss",
    "rss": "peak_rss",
}
DEFAULT_METRICS = ("tg_tps", "pp_tps", "peak_pss")

#: Columns that describe a configuration, used for its human label.
CONFIG_COLUMNS = (
    "model_name", "quant", "n_ctx", "type_k", "type_v", "threads", "affinity", "flash_attn",
    "n_prompt", "n_gen", "n_depth", "mmap",
)


def metric_name(name: str) -> str:
    """The canonical short name of a metric or alias (``peak_pss_bytes`` -> ``peak_pss``)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in METRIC_COLUMNS:
        known = ", ".join([*METRIC_COLUMNS, *sorted(_ALIASES)])
        raise ConfigError(f"unknown metric {name!r}; known: {known}")
    return key


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
    return frame


def config_label(row: Mapping[str, object]) -> str:
    """A short label of a configuration, e.g. ``tiny Q4_K_M ctx512 kv=q8_0 t4``."""
    k, v = row.get("type_k"), row.get("type_v")
    kv = k if k == v else f"{k}/{v}"
    depth = row.get("n_depth")
    depth_text = f"/d{depth}" if depth and not pd.isna(depth) else ""
    return (
        f"{row.get('model_name')} {row.get('quant')} ctx{row.get('n_ctx')} kv={kv} "
        f"t{row.get('threads')} p{row.get('n_prompt')}/g{row.get('n_gen')}{depth_text}"
    )


@dataclass(frozen=True)
class CellKey:
    """One device and one configuration; ``str`` gives the form gate messages print."""

    device: str
    config_id: str

    def __str__(self) -> str:
        return f"{self.device}/{self.config_id}"


@dataclass(frozen=True)
class SampleGroup:
    """The usable values of one build on one cell, per canonical metric name."""

    key: CellKey
    build_id: str
    label: str
    values: Mapping[str, np.ndarray] = field(default_factory=dict)
    n_trials: int = 0  # every trial of the cell and build, whatever its outcome
    n_ok: int = 0
    n_throttled_excluded: int = 0
    outcomes: Mapping[str, int] = field(default_factory=dict)
    n_not_applied_excluded: int = 0  # ok trials whose affinity/threads did not take effect
    cpu_emulation: str | None = None  # the emulator of a virtual phone's CPU, None when native


def not_applied(frame: pd.DataFrame) -> pd.Series:
    """True for trials flagged ``config_not_applied`` (older stores have no such column)."""
    if "config_not_applied" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["config_not_applied"].notna()


def usable(frame: pd.DataFrame, include_throttled: bool = False) -> pd.DataFrame:
    """Trials with outcome ``ok``, applied as asked (and, by default, not throttled)."""
    ok = frame[(frame["outcome"] == "ok") & ~not_applied(frame)]
    if include_throttled:
        return ok
    return ok[~ok["throttled"].fillna(False).astype(bool)]


def _group(key: CellKey, build: str, rows: pd.DataFrame, metrics: Sequence[str],
           include_throttled: bool) -> SampleGroup:
    ok = rows[rows["outcome"] == "ok"]
    flagged = not_applied(ok)
    throttled = ok["throttled"].fillna(False).astype(bool) & ~flagged
    kept = ok[~flagged] if include_throttled else ok[~throttled & ~flagged]
    values = {
        m: kept[METRIC_COLUMNS[m]].dropna().to_numpy(dtype=np.float64) for m in metrics
    }
    return SampleGroup(
        key=key,
        build_id=build,
        label=config_label(rows.iloc[0].to_dict()),
        values=values,
        n_trials=len(rows),
        n_ok=len(ok),
        n_throttled_excluded=0 if include_throttled else int(throttled.sum()),
        outcomes={str(k): int(v) for k, v in rows["outcome"].value_counts().items()},
        cpu_emulation=_emulation(rows),
        n_not_applied_excluded=int(flagged.sum()),
    )


def _emulation(rows: pd.DataFrame) -> str | None:
    if "cpu_emulation" not in rows:
        return None
    named = sorted({str(v) for v in rows["cpu_emulation"].dropna()})
    return ",".join(named) or None


def build_groups(frame: pd.DataFrame, build: str, metrics: Sequence[str] = DEFAULT_METRICS,
                 *, include_throttled: bool = False) -> dict[CellKey, SampleGroup]:
    """Every (device, config) cell measured with ``build``, with its usable values."""
    rows = frame[frame["build_id"] == build]
    groups: dict[CellKey, SampleGroup] = {}
    for (serial, config), cell in rows.groupby(["device_serial", "config_id"], sort=True):
        key = CellKey(str(serial), str(config))
        groups[key] = _group(key, build, cell, metrics, include_throttled)
    return groups


def paired_groups(frame: pd.DataFrame, baseline: str, candidate: str,
                  metrics: Sequence[str] = DEFAULT_METRICS, *, include_throttled: bool = False,
                  ) -> dict[CellKey, tuple[SampleGroup, SampleGroup]]:
    """Cells measured with both builds: (baseline group, candidate group), sorted by key.

    A ConfigError names the builds the store does hold when either build is absent, since a
    typo would otherwise compare nothing and pass every gate.
    """
    builds = set(frame["build_id"].dropna().unique())
    for name, what in ((baseline, "--baseline"), (candidate, "--candidate")):
        if name not in builds:
            known = ", ".join(sorted(builds)) or "none"
            raise ConfigError(f"{what} {name!r}: no trials of that build (builds: {known})")
    base = build_groups(frame, baseline, metrics, include_throttled=include_throttled)
    cand = build_groups(frame, candidate, metrics, include_throttled=include_throttled)
    # an emulated CPU's speed is never compared with a native one, even under one serial
    return {k: (base[k], cand[k]) for k in sorted(base, key=str)
            if k in cand and base[k].cpu_emulation == cand[k].cpu_emulation}


def nights(frame: pd.DataFrame) -> pd.Series:
    """The night (UTC calendar date of ``started_at``) of each trial."""
    started = pd.to_datetime(frame["started_at"], utc=True)
    return started.dt.strftime("%Y-%m-%d")
