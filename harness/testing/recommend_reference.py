"""``recommend``'s assessment as it was before it went bulk: one candidate at a time through
pandas (issue 50). Kept only as the reference ``tests/analysis/test_recommend_bulk.py`` holds
the bulk assessment (``recommend._assess_all``) and the sorted Pareto front against, field by
field; nothing else calls it (at about 7 ms a candidate it took minutes on a farm's year)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from harness.analysis.energy_table import energy_of
from harness.analysis.frames import throttled, usable
from harness.analysis.kv_loss import KvEvidence
from harness.analysis.offload_peak import worst_peak
from harness.analysis.quality import QualityScore
from harness.analysis.recommend import (
    CandidateKey,
    Rejected,
    _Assessed,
    _Measured,
    _median,
    _no_ok_trial,
    _quality_rejection,
    _reject,
    _unapplied,
    _worst_anon_peak,
    output_state,
    paging_of,
)
from harness.analysis.sustained import counted, figures, sustained_mask
from harness.budget import fit
from harness.labels import config_label


def _health(row: Mapping[str, Any], rows: pd.DataFrame, applied: pd.DataFrame,
            max_throttled: float) -> Rejected | None:
    """Why a candidate's trials cannot be trusted to run on this phone, if they cannot."""
    n = len(rows)
    ooms = int((rows["outcome"] == "oom_killed").sum())
    if ooms:
        return _reject(row, "oom_killed", f"killed by the low-memory killer in {ooms} of {n} "
                                          "trials")
    n_ok = int((rows["outcome"] == "ok").sum())
    if not n_ok:
        return _no_ok_trial(row, rows)
    if applied.empty:
        return _unapplied(row, rows, n_ok)
    burst = applied[~sustained_mask(applied)]  # a sustained trial is meant to heat the phone
    hot = throttled(burst)
    if len(burst) and hot.mean() > max_throttled:
        return _reject(row, "throttled", f"{int(hot.sum())} of {len(burst)} trials throttled")
    return None


def _assess(key: CandidateKey, rows: pd.DataFrame, *, available: int | None, reserve: int,
            max_throttled: float, quality: Mapping[tuple[str, str], QualityScore],
            max_loss: float | None, kv: KvEvidence, require_check: bool = False,
            ) -> tuple[_Measured | None, Rejected | None, int | None]:
    """(eligible measurement, or rejection; bytes over budget when rejected for memory)."""
    row = rows.iloc[0].to_dict()
    row.update(config_id=key[0], build_id=key[1], engine=key[2], label=config_label(row))
    applied = usable(rows, include_throttled=True)
    unhealthy = _health(row, rows, applied, max_throttled)
    if unhealthy is not None:
        return None, unhealthy, None
    paging = paging_of(applied)
    worst = worst_peak(applied)
    peak = _worst_anon_peak(applied) if paging is not None else worst.bytes
    what = f"worst measured peak ({worst.says})" if worst.says else "worst measured peak"
    verdict = fit(peak, available, reserve, what) \
        if available is not None and peak is not None else None
    if verdict is not None and not verdict.fits:
        return None, _reject(row, "over_budget", verdict.reason), verdict.over_bytes
    rejected = _quality_rejection(row, quality, max_loss, kv)
    if rejected:
        return None, rejected, None
    chosen = counted(rows)
    checked, why = output_state(chosen)
    if require_check and checked != "checked":
        return None, _reject(row, "output_unchecked", (
            f"its output was not checked ({'the check failed: ' if checked == 'error' else ''}"
            f"{why or 'no reason stored'}) and --require-output-check is on")), None
    return dataclasses.replace(_measured(key, row, rows, peak, chosen), paging=paging,
                               output=(checked, why), worst=worst), None, None


def _measured(key: CandidateKey, row: dict[str, Any], rows: pd.DataFrame,
              peak: int | None, chosen: pd.DataFrame) -> _Measured:
    """An eligible candidate's figures: medians over its counted trials (``chosen``)."""
    speeds = {k: _median(chosen[k]) for k in ("tg_tps", "pp_tps", "ttft_ms")}
    device = str(rows.iloc[0]["device_serial"])
    full = (device, *key)
    sustained = figures(full, chosen)
    energy = energy_of(full, chosen, str(row["label"]))
    speeds["sustained_tg_tps"] = sustained.sustained_tg_tps if sustained else None
    speeds["steady_state_ratio"] = sustained.steady_state_ratio if sustained else None
    speeds["time_to_throttle_s"] = sustained.time_to_throttle_s if sustained else None
    speeds["tg_j_per_token"] = energy.tg_j_per_token if energy and energy.ok else None
    speeds["pp_j_per_token"] = energy.pp_j_per_token if energy and energy.valid else None
    return _Measured(row, speeds, peak, len(rows), sustained, energy)


def _pareto(points: Sequence[tuple[CandidateKey, float, int]]) -> set[CandidateKey]:
    """Candidates not dominated in (speed higher better, peak lower better)."""
    front = set()
    for cid, speed, peak in points:
        dominated = any(
            s >= speed and p <= peak and (s > speed or p < peak) for c, s, p in points if c != cid
        )
        if not dominated:
            front.add(cid)
    return front


def _assess_all(rows: pd.DataFrame, objective: str, *, available: int | None, reserve: int,
                max_throttled: float, quality: Mapping[tuple[str, str], QualityScore],
                max_loss: float | None, kv: KvEvidence, require_check: bool) -> _Assessed:
    """Each (config, build, engine) group of ``rows`` through ``_assess``."""
    out = _Assessed()
    for key, candidate in rows.groupby(["config_id", "build_id", "engine"], sort=True,
                                       observed=True):
        ckey = (str(key[0]), str(key[1]), str(key[2]))
        out.seen.add(ckey)
        out.add(_assess(ckey, candidate, available=available, reserve=reserve,
                        max_throttled=max_throttled, quality=quality, max_loss=max_loss,
                        kv=kv, require_check=require_check),
                candidate.iloc[0].to_dict(), objective)
    return out
