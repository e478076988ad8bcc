"""Which configuration for this device: measured evidence first, predictions clearly marked.

A configuration is eligible when, on this device, no trial of it was killed by the low-memory
killer, its worst measured peak plus the reserve fits the available memory, at most
``max_throttled_fraction`` of its successful trials throttled, and (when a bound is given) its
KL divergence against the ladder's reference is within ``max_quality_loss``. Eligible measured
configurations are ranked by the objective (median of the unthrottled trials); cells the plan
predicts to fit but that were never measured follow, marked ``predicted``, ranked by predicted
peak (there is no measured speed to rank them by). The peak is the *worst* trial's PSS, not the
median: the low-memory killer acts on the worst case. When nothing is eligible, ``knobs.suggest``
says which knob to turn first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from harness.analysis.frames import config_label
from harness.analysis.knobs import Suggestion, suggest
from harness.analysis.quality import QualityScore
from harness.errors import ConfigError

Objective = Literal["tg_tps", "pp_tps", "ttft"]
OBJECTIVE_COLUMNS: dict[str, str] = {"tg_tps": "tg_tps", "pp_tps": "pp_tps", "ttft": "ttft_ms"}
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Pick:
    rank: int
    config_id: str
    label: str
    model: str
    quant: str
    n_ctx: int
    type_k: str
    type_v: str
    threads: int
    tg_tps: float | None
    pp_tps: float | None
    ttft_ms: float | None
    peak_bytes: int | None
    headroom_bytes: int | None  # available - reserve - peak
    source: Literal["measured", "predicted"]
    build_id: str | None
    n_trials: int
    kl: float | None
    top1: float | None
    pareto: bool
    explanation: str


@dataclass(frozen=True)
class Rejected:
    config_id: str
    label: str
    reason_code: str  # oom_killed | over_budget | no_ok_trial | throttled | quality |
    #                   quality_unknown | predicted_over_budget | predicted_unsupported
    reason: str


@dataclass(frozen=True)
class Recommendation:
    device: str
    objective: str
    available_bytes: int | None
    reserve_bytes: int
    max_quality_loss: float | None
    picks: tuple[Pick, ...]
    pareto: tuple[str, ...]  # config_ids of the measured picks on the speed/memory front
    rejected: tuple[Rejected, ...]
    suggestion: Suggestion | None
    notes: tuple[str, ...] = ()

    @property
    def best(self) -> Pick | None:
        return self.picks[0] if self.picks else None

    @property
    def budget_bytes(self) -> int | None:
        return None if self.available_bytes is None else self.available_bytes - self.reserve_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION, "device": self.device,
            "objective": self.objective, "available_bytes": self.available_bytes,
            "reserve_bytes": self.reserve_bytes, "budget_bytes": self.budget_bytes,
            "max_quality_loss": self.max_quality_loss,
            "picks": [asdict(p) for p in self.picks], "pareto": list(self.pareto),
            "rejected": [asdict(r) for r in self.rejected],
            "suggestion": asdict(self.suggestion) if self.suggestion else None,
            "notes": list(self.notes),
        }


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _median(values: pd.Series) -> float | None:
    arr = values.dropna().to_numpy(dtype=np.float64)
    return float(np.median(arr)) if arr.size else None


def _int(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        or value is pd.NA else int(value)


def _latest_build(rows: pd.DataFrame) -> pd.DataFrame:
    latest = rows.sort_values("started_at").iloc[-1]["build_id"]
    return rows[rows["build_id"] == latest]


@dataclass(frozen=True)
class _Measured:
    row: dict[str, Any]  # trial columns of the configuration plus label / config_id
    speeds: dict[str, float | None]
    peak: int | None
    n_trials: int
    build: str


def _assess(config_id: str, rows: pd.DataFrame, *, available: int | None, reserve: int,
            max_throttled: float, quality: Mapping[tuple[str, str], QualityScore],
            max_loss: float | None) -> tuple[_Measured | None, Rejected | None, int | None]:
    """(eligible measurement, or rejection; bytes over budget when rejected for memory)."""
    row = rows.iloc[0].to_dict()
    label = config_label(row)
    row.update(config_id=config_id, label=label)
    n = len(rows)
    ooms = int((rows["outcome"] == "oom_killed").sum())
    ok = rows[rows["outcome"] == "ok"]
    if ooms:
        return None, Rejected(config_id, label, "oom_killed",
                              f"killed by the low-memory killer in {ooms} of {n} trials"), None
    if ok.empty:
        outcomes = ", ".join(f"{k} {v}" for k, v in rows["outcome"].value_counts().items())
        return None, Rejected(config_id, label, "no_ok_trial",
                              f"no successful trial ({outcomes})"), None
    throttled = ok["throttled"].fillna(False).astype(bool)
    if throttled.mean() > max_throttled:
        return None, Rejected(config_id, label, "throttled",
                              f"{int(throttled.sum())} of {len(ok)} trials throttled"), None
    peaks = ok["peak_pss_bytes"].dropna()
    if peaks.empty:
        peaks = ok["peak_rss_bytes"].dropna()
    peak = _int(peaks.max()) if not peaks.empty else None
    if available is not None and peak is not None and peak + reserve > available:
        over = peak + reserve - available
        return None, Rejected(config_id, label, "over_budget",
                              f"peak {_mib(peak)} + reserve {_mib(reserve)} > available "
                              f"{_mib(available)}"), over
    rejected = _quality_rejection(config_id, label, row, quality, max_loss)
    if rejected:
        return None, rejected, None
    cool = ok[~throttled] if (~throttled).any() else ok
    speeds = {k: _median(cool[c]) for k, c in
              (("tg_tps", "tg_tps"), ("pp_tps", "pp_tps"), ("ttft_ms", "ttft_ms"))}
    return _Measured(row, speeds, peak, n, str(row["build_id"])), None, None


def _quality_rejection(config_id: str, label: str, row: Mapping[str, Any],
                       quality: Mapping[tuple[str, str], QualityScore],
                       max_loss: float | None) -> Rejected | None:
    if max_loss is None:
        return None
    score = quality.get((str(row["model_name"]), str(row["quant"])))
    if score is None:
        return Rejected(config_id, label, "quality_unknown",
                        "quality not measured (run `harness quality`), so the bound cannot hold")
    if score.kl > max_loss:
        return Rejected(config_id, label, "quality",
                        f"KL {score.kl:.4g} > max quality loss {max_loss:g}")
    return None


def _pareto(points: Sequence[tuple[str, float, int]]) -> set[str]:
    """Config ids not dominated in (speed higher better, peak lower better)."""
    front = set()
    for cid, speed, peak in points:
        dominated = any(
            s >= speed and p <= peak and (s > speed or p < peak) for c, s, p in points if c != cid
        )
        if not dominated:
            front.add(cid)
    return front


def _explain(m: _Measured | None, peak: int | None, headroom: int | None, score: QualityScore |
             None, objective: str, pareto: bool, reserve: int) -> str:
    parts = []
    if m is not None:
        key = "ttft_ms" if objective == "ttft" else objective
        value = m.speeds.get(key)
        unit = "ms" if objective == "ttft" else "tok/s"
        name = "TTFT" if objective == "ttft" else objective
        parts.append(f"{name} {value:.1f} {unit} measured" if value is not None
                     else f"{name} not measured")
    else:
        parts.append("predicted to fit, not measured: run it to know its speed")
    if peak is not None:
        kind = "peak" if m is not None else "predicted peak"
        room = f", {_mib(headroom)} headroom after the {_mib(reserve)} reserve" \
            if headroom is not None else ""
        parts.append(f"{kind} {_mib(peak)}{room}")
    parts.append(f"quality KL {score.kl:.3g}, top-1 {score.top1:.0%}" if score
                 else "quality not measured")
    if pareto:
        parts.append("on the speed/memory Pareto front")
    return "; ".join(parts)


def recommend(
    trials: pd.DataFrame,
    device: str,
    *,
    reserve_bytes: int,
    available_bytes: int | None,
    objective: str = "tg_tps",
    max_quality_loss: float | None = None,
    quality: Mapping[tuple[str, str], QualityScore] | None = None,
    predictions: Sequence[Any] | None = None,
    build: str | None = None,
    max_throttled_fraction: float = 0.5,
) -> Recommendation:
    """Rank the configurations of ``device`` (a serial, or a ``device_model`` name).

    ``predictions`` are ``harness.plan.PlannedCell`` objects; cells whose config was measured on
    this device are ignored (evidence wins). Each config's trials are those of ``build``, or of
    the latest build that measured it. ``available_bytes`` None means only OOM evidence counts.
    """
    if objective not in OBJECTIVE_COLUMNS:
        raise ConfigError(f"objective {objective!r}: use one of {', '.join(OBJECTIVE_COLUMNS)}")
    scores = quality or {}
    notes: list[str] = []
    rows = trials[(trials["device_serial"] == device) | (trials["device_model"] == device)]
    if build is not None:
        rows = rows[rows["build_id"] == build]
    if rows.empty:
        which = f" and build {build!r}" if build else ""
        notes.append(f"no trials for device {device!r}{which}")
    if available_bytes is None:
        notes.append("available memory unknown: only low-memory-killer evidence was used")
    measured: list[_Measured] = []
    rejected: list[Rejected] = []
    memory_rejects: list[dict[str, Any]] = []
    for config_id, config_rows in rows.groupby("config_id", sort=True):
        chosen = config_rows if build is not None else _latest_build(config_rows)
        m, rej, over = _assess(str(config_id), chosen, available=available_bytes,
                               reserve=reserve_bytes, max_throttled=max_throttled_fraction,
                               quality=scores, max_loss=max_quality_loss)
        if m is not None:
            measured.append(m)
        elif rej is not None:
            rejected.append(rej)
            if rej.reason_code in ("over_budget", "oom_killed"):
                r = chosen.iloc[0].to_dict()
                memory_rejects.append({**r, "config_id": rej.config_id, "label": rej.label,
                                       "over_bytes": over})
    key = "ttft_ms" if objective == "ttft" else objective
    sign = 1.0 if objective == "ttft" else -1.0
    measured.sort(key=lambda m: (m.speeds.get(key) is None, sign * (m.speeds.get(key) or 0.0),
                                 m.peak if m.peak is not None else 0))
    front = _pareto([(m.row["config_id"], -sign * (m.speeds[key] or 0.0), m.peak)
                     for m in measured if m.speeds.get(key) is not None and m.peak is not None])
    picks: list[Pick] = []
    for m in measured:
        picks.append(_pick(len(picks) + 1, m.row, m, m.peak, available_bytes, reserve_bytes,
                           scores, objective, m.row["config_id"] in front))
    seen = set(rows["config_id"])
    predicted_picks = _predicted(predictions or (), seen, available_bytes, reserve_bytes,
                                 scores, max_quality_loss, rejected)
    for row, peak in sorted(predicted_picks, key=lambda rp: rp[1]):
        picks.append(_pick(len(picks) + 1, row, None, peak, available_bytes, reserve_bytes,
                           scores, objective, False))
    fitting = [{**m.row, "peak_bytes": m.peak} for m in measured if m.peak is not None]
    suggestion = None if picks else suggest(memory_rejects, fitting)
    return Recommendation(device, objective, available_bytes, reserve_bytes, max_quality_loss,
                          tuple(picks), tuple(p.config_id for p in picks if p.pareto),
                          tuple(rejected), suggestion, tuple(notes))


def _pick(rank: int, row: Mapping[str, Any], m: _Measured | None, peak: int | None,
          available: int | None, reserve: int, scores: Mapping[tuple[str, str], QualityScore],
          objective: str, pareto: bool) -> Pick:
    score = scores.get((str(row["model_name"]), str(row["quant"])))
    headroom = available - reserve - peak if available is not None and peak is not None else None
    speeds = m.speeds if m else {}
    return Pick(
        rank=rank, config_id=str(row["config_id"]), label=str(row["label"]),
        model=str(row["model_name"]), quant=str(row["quant"]), n_ctx=int(row["n_ctx"]),
        type_k=str(row["type_k"]), type_v=str(row["type_v"]), threads=int(row["threads"]),
        tg_tps=speeds.get("tg_tps"), pp_tps=speeds.get("pp_tps"),
        ttft_ms=speeds.get("ttft_ms"), peak_bytes=peak, headroom_bytes=headroom,
        source="measured" if m else "predicted", build_id=m.build if m else row.get("build_id"),
        n_trials=m.n_trials if m else 0, kl=score.kl if score else None,
        top1=score.top1 if score else None, pareto=pareto,
        explanation=_explain(m, peak, headroom, score, objective, pareto, reserve),
    )


def _predicted(predictions: Sequence[Any], seen: set[str], available: int | None, reserve: int,
               scores: Mapping[tuple[str, str], QualityScore], max_loss: float | None,
               rejected: list[Rejected]) -> list[tuple[dict[str, Any], int]]:
    """Planned cells not measured here that are predicted to fit: (row, predicted peak)."""
    out: list[tuple[dict[str, Any], int]] = []
    done: set[str] = set()
    for planned in predictions:
        cell = planned.cell
        if cell.config_id in seen or cell.config_id in done:
            continue
        done.add(cell.config_id)
        row = {"config_id": cell.config_id, "label": cell.label(), "model_name": cell.model,
               "quant": cell.quant, "n_ctx": cell.n_ctx, "type_k": cell.type_k,
               "type_v": cell.type_v, "threads": cell.threads, "build_id": cell.build}
        label = f"{cell.label()} (predicted)"
        if planned.prediction is None or planned.reason_code not in ("fits", "over_budget"):
            rejected.append(Rejected(cell.config_id, label, "predicted_unsupported",
                                     planned.reason))
            continue
        peak = int(planned.prediction.total)
        if available is not None and peak + reserve > available:
            rejected.append(Rejected(cell.config_id, label, "predicted_over_budget",
                                     f"predicted peak {_mib(peak)} + reserve {_mib(reserve)} > "
                                     f"available {_mib(available)}"))
            continue
        quality_reject = _quality_rejection(cell.config_id, label, row, scores, max_loss)
        if quality_reject:
            rejected.append(quality_reject)
            continue
        out.append((row, peak))
    return out
