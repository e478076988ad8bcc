"""Paging and storage, per device and candidate: what a model bigger than the phone costs.

One row per (device, config, build, engine) whose trials say something about storage: ran by paging
(``paging``), asked for a cold or warm page cache (``cache``), or loaded otherwise than by mmap
(``load_mode``). Medians over its trials: what stayed resident against the model file, faults and
bytes read from storage per generated token, the decode speed measured against the plan's prediction
(made before the trial, from the model and the storage speed), the storage read rate measured while
decoding (bytes per token x tokens per second, pages swapped back in from zram left out: they count
as reads but are not the model's) against the storage's speed, the load time, and how much of the
model was in the page cache at the launch. No figure is set against one derived from itself. Pure:
the report and scripts read the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analysis.sustained import candidate_groups, column, median
from harness.knobs import load_mode_of
from harness.labels import config_label
from harness.run.paging_measure import file_reads
from harness.units import MB

SHOWN = ("paging", "cache", "load_mode", "read_bytes", "paging_unknown")


@dataclass(frozen=True)
class PagingRow:
    device: str  # serial
    config_id: str
    build_id: str
    engine: str
    label: str
    model: str
    quant: str
    load_mode: str
    cache: str  # cold, warm or "" (as found)
    trials: int
    ok: int
    paging: int  # ok trials labelled paging
    killed: int  # oom_killed trials
    file_bytes: float | None
    resident_bytes: float | None  # the engine's peak resident set (VmHWM; else sampled PSS)
    resident_share: float | None  # of the file
    cache_share: float | None  # of the file in the page cache at the launch
    load_ms: float | None
    read_bytes_per_token: float | None
    faults_per_token: float | None
    tg_tps: float | None
    storage_mb_s: float | None
    read_mb_s: float | None  # storage read rate while decoding: file bytes/token x tok/s
    predicted_tg_tps: float | None  # the plan's storage-bound decode speed (before the trial)
    # of read_bytes_per_token, pages back from zram (the phone's swap-ins); None: not read
    swap_in_bytes_per_token: float | None = None
    unknown: int = 0  # ok trials whose label the phone's swap-ins decide (paging_unknown)
    unknown_reason: str = ""  # the first of those trials' reasons, with its figures


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _row(key: tuple[str, ...], group: pd.DataFrame) -> PagingRow:
    ok = group[group["outcome"] == "ok"]
    first = group.iloc[0].to_dict()
    size = median(column(group, "model_file_bytes"))
    read = median(column(ok, "read_bytes_per_token"))
    swap_in = median(column(ok, "swap_in_bytes_per_token"))
    file_read = file_reads(read, swap_in)  # a swap-in is a block read, not the model's
    speed = median(column(group, "storage_read_mb_s"))
    tg = median(column(ok, "tg_tps"))
    # the kernel's high-water mark never under-reads (a trial shorter than the sampler's rollup
    # interval has a PSS from before the model was mapped); it counts shared libraries too
    resident = median(column(ok, "vm_hwm_bytes").fillna(column(ok, "peak_pss_bytes")))
    cached = median(column(group, "cache_resident_bytes"))
    mode = first.get("load_mode")
    load_mode = load_mode_of(bool(first.get("mmap", True)), mode if isinstance(mode, str) else "")
    cache = first.get("cache")
    reasons = column(ok, "paging_unknown").dropna().astype(str)
    return PagingRow(
        device=key[0], config_id=key[1], build_id=key[2], engine=key[3],
        label=config_label(first), model=str(first.get("model_name")),
        quant=str(first.get("quant")), load_mode=load_mode,
        cache=cache if isinstance(cache, str) else "", trials=len(group), ok=len(ok),
        paging=int((column(ok, "paging").astype(object) == True).sum()),  # noqa: E712
        killed=int((group["outcome"] == "oom_killed").sum()),
        file_bytes=size, resident_bytes=resident, resident_share=_share(resident, size),
        cache_share=_share(cached, size), load_ms=median(column(ok, "load_ms")),
        read_bytes_per_token=read, faults_per_token=median(column(ok, "major_faults_per_token")),
        tg_tps=tg, storage_mb_s=speed,
        read_mb_s=file_read * tg / MB if file_read is not None and tg else None,
        predicted_tg_tps=median(column(group, "predicted_paging_tg_tps")),
        swap_in_bytes_per_token=swap_in, unknown=len(reasons),
        unknown_reason=str(reasons.iloc[0]) if len(reasons) else "")


def paging_table(trials: pd.DataFrame) -> tuple[PagingRow, ...]:
    """The candidates whose trials paged, set their page cache or their load mode."""
    if trials.empty or not any(name in trials for name in SHOWN):
        return ()
    paging = column(trials, "paging").astype(object) == True  # noqa: E712 - nullable
    cache = column(trials, "cache").astype(object).isin(("cold", "warm"))
    mode = column(trials, "load_mode").astype(object).isin(("none", "dio", "mlock",
                                                            "mmap+mlock"))
    unknown = column(trials, "paging_unknown").notna()
    wanted = (paging | unknown | cache | mode).to_numpy()
    if not wanted.any():
        return ()
    rows = [_row(key, group) for key, group in candidate_groups(trials, wanted)]
    return tuple(sorted(rows, key=lambda r: (r.device, r.model, r.quant, r.load_mode,
                                             r.cache, r.build_id, r.engine)))
