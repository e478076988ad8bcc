"""A device's (config, build, engine) candidates assessed in bulk: one pass over its trials.

``recommend`` once looked at each candidate's rows through pandas (its usable trials, its peak,
its counted trials, their medians, their output check), which cost milliseconds a candidate and
minutes for a farm's year. Here every per-trial rule (``frames.usable``, ``sustained.counted``,
``offload_peak.worst_peak``'s per-trial peak, ``recommend.output_state``'s states) is taken once
over the whole frame, and every per-candidate figure is an aggregate over group codes: counts by
``np.bincount``, maxima and medians by one ``groupby`` each. The figures are the ones the
per-candidate rules give, to the bit (``tests/analysis/test_recommend_bulk.py`` holds the two
side by side on random stores). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.frames import invalid, not_applied, throttled
from harness.analysis.offload_peak import PREDICTED, READ, UNKNOWN, _numbers, on_device
from harness.analysis.sustained import column, sustained_mask

#: The columns that name a candidate of one device.
KEYS = ("config_id", "build_id", "engine")
SPEEDS = ("tg_tps", "pp_tps", "ttft_ms")
PAGING = ("read_bytes_per_token", "swap_in_bytes_per_token", "storage_read_mb_s",
          "predicted_paging_tg_tps", "tg_tps")


@dataclass(frozen=True)
class Groups:
    """The candidates of a frame: their keys in ``groupby(sort=True)`` order, each row's group
    (-1: a row whose key is null) and each group's rows (positions, in row order)."""

    keys: tuple[tuple[str, str, str], ...]
    codes: np.ndarray
    order: np.ndarray  # row positions, grouped, each group in row order
    starts: np.ndarray  # group g's rows are order[starts[g]:starts[g + 1]]

    def __len__(self) -> int:
        return len(self.keys)

    def positions(self, g: int) -> np.ndarray:
        return self.order[self.starts[g]:self.starts[g + 1]]

    def count(self, mask: np.ndarray) -> np.ndarray:
        """Per group, how many of its rows ``mask`` holds."""
        kept = mask & (self.codes >= 0)
        return np.bincount(self.codes[kept], minlength=len(self.keys)).astype(np.int64)

    def first(self, mask: np.ndarray) -> np.ndarray:
        """Per group, the position of its first row in ``mask`` (-1: none)."""
        out = np.full(len(self.keys), -1, dtype=np.int64)
        where = np.flatnonzero(mask & (self.codes >= 0))
        groups, at = np.unique(self.codes[where], return_index=True)
        out[groups] = where[at]
        return out

    def reduce(self, values: pd.Series | np.ndarray, mask: np.ndarray, how: str) -> np.ndarray:
        """Per group, the ``how`` (``max`` or ``median``, NaN skipped) of ``values`` over its
        rows in ``mask``; NaN for a group without a value."""
        kept = mask & (self.codes >= 0)
        series = pd.Series(np.asarray(values, dtype=np.float64)[kept])
        found = getattr(series.groupby(self.codes[kept]), how)()
        out = np.full(len(self.keys), np.nan)
        out[found.index.to_numpy(dtype=np.int64)] = found.to_numpy(dtype=np.float64)
        return out


def groups_of(rows: pd.DataFrame) -> Groups:
    """The (config, build, engine) groups of ``rows``, in the order ``groupby`` iterates them."""
    grouped = rows.groupby(list(KEYS), sort=True, observed=True)
    numbers = grouped.ngroup().to_numpy(dtype=np.float64)
    codes = np.where(np.isnan(numbers), -1, numbers).astype(np.int64)
    keys = tuple((str(a), str(b), str(c)) for a, b, c in grouped.size().index)
    order = np.argsort(np.where(codes < 0, len(keys), codes), kind="stable")
    starts = np.searchsorted(codes[order], np.arange(len(keys) + 1), side="left")
    starts[-1] = int((codes >= 0).sum())
    return Groups(keys, codes, order, starts)


@dataclass(frozen=True)
class Trials:
    """Per-trial masks of ``frames.usable`` and ``sustained.counted`` over a device's frame."""

    ok: np.ndarray
    oom: np.ndarray
    applied: np.ndarray  # usable, throttled ones included
    burst: np.ndarray  # applied and not sustained
    hot: np.ndarray  # applied burst trials that throttled
    counted: np.ndarray  # what a candidate's medians are taken over


def trial_masks(rows: pd.DataFrame, groups: Groups) -> Trials:
    """The masks, ``counted`` per candidate (its cool burst trials, all applied ones when every
    one of them throttled, and every applied sustained trial)."""
    outcome = rows["outcome"].astype(object)
    ok = (outcome == "ok").to_numpy(dtype=bool)
    oom = (outcome == "oom_killed").to_numpy(dtype=bool)
    applied = ok & ~not_applied(rows).to_numpy() & ~invalid(rows).to_numpy()
    hot = throttled(rows).to_numpy()
    sustained = sustained_mask(rows).to_numpy()
    cool = applied & ~hot & ~sustained
    any_cool = groups.count(cool) > 0
    group_cool = np.where(groups.codes >= 0, any_cool[np.maximum(groups.codes, 0)], False)
    counted = (applied & sustained) | cool | (applied & ~sustained & ~group_cool)
    return Trials(ok, oom, applied, applied & ~sustained, applied & ~sustained & hot, counted)


def peaks(rows: pd.DataFrame, groups: Groups, applied: np.ndarray,
          ) -> tuple[np.ndarray, list[str | None]]:
    """Per candidate ``offload_peak.worst_peak`` of its applied trials: the worst peak (NaN:
    none) and where its device share came from (None: no trial on a device)."""
    process = pd.concat([_numbers(rows, "peak_pss_bytes"), _numbers(rows, "vm_hwm_bytes")],
                        axis=1).max(axis=1, skipna=True)
    asked = on_device(rows).to_numpy(dtype=bool)
    read = _numbers(rows, "accelerator_memory_bytes")
    device = read.where(read.notna() | ~asked, _numbers(rows, "predicted_accelerator_bytes"))
    host = _numbers(rows, "host_memory_bytes")
    host = host.where(host.notna() | ~asked | device.isna(), process)
    per_trial = pd.concat([process, host + device], axis=1).max(axis=1, skipna=True)
    worst = groups.reduce(per_trial, applied, "max")
    fallback = groups.reduce(_numbers(rows, "peak_rss_bytes"), applied, "max")
    worst = np.where(np.isnan(worst), fallback, worst)
    on = groups.count(applied & asked) > 0
    unknown = groups.count(applied & asked & device.isna().to_numpy()) > 0
    predicted = groups.count(applied & asked & read.isna().to_numpy()) > 0
    states = [None if not on[g] else UNKNOWN if unknown[g] else PREDICTED if predicted[g]
              else READ for g in range(len(groups))]
    return worst, states


def paging_flags(rows: pd.DataFrame, groups: Groups, applied: np.ndarray) -> np.ndarray:
    """Per candidate, whether most of its applied trials that carry a paging label paged."""
    if "paging" not in rows:
        return np.zeros(len(groups), dtype=bool)
    labels = rows["paging"].astype(object)
    labelled = labels.notna().to_numpy(dtype=bool)
    paged = labels.where(labelled, False).astype(bool).to_numpy(dtype=bool)
    n = groups.count(applied & labelled)
    yes = groups.count(applied & labelled & paged)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (n > 0) & ~(yes / np.maximum(n, 1) <= 0.5)


def medians(rows: pd.DataFrame, groups: Groups, mask: np.ndarray,
            names: Sequence[str]) -> dict[str, np.ndarray]:
    """Per candidate, the median of each column over its rows in ``mask`` (NaN: none), of the
    columns the frame has."""
    return {name: groups.reduce(pd.to_numeric(rows[name], errors="coerce"), mask, "median")
            for name in names if name in rows}


@dataclass(frozen=True)
class Outputs:
    """Per candidate, ``recommend.output_state``'s inputs over its counted trials."""

    all_match: np.ndarray
    any_error: np.ndarray
    error_detail: np.ndarray  # position of the first error trial with a detail (-1: none)
    unchecked_detail: np.ndarray  # likewise of a not_checked trial
    details: dict[int, str]  # those trials' details, by position


def outputs(rows: pd.DataFrame, groups: Groups, counted: np.ndarray) -> Outputs:
    states = column(rows, "output_check").astype(object)
    detail = column(rows, "output_check_detail").notna().to_numpy(dtype=bool)
    match = (states == "match").to_numpy(dtype=bool)
    error = (states == "error").to_numpy(dtype=bool)
    unchecked = (states == "not_checked").to_numpy(dtype=bool)
    n = groups.count(counted)
    firsts = (groups.first(counted & error & detail), groups.first(counted & unchecked & detail))
    texts = column(rows, "output_check_detail")
    wanted = np.unique(np.concatenate(firsts))
    wanted = wanted[wanted >= 0]
    details = {int(p): str(v) for p, v in zip(wanted, texts.iloc[wanted], strict=True)}
    return Outputs((n > 0) & (groups.count(counted & match) == n),
                   groups.count(counted & error) > 0, *firsts, details)


def has_column_values(rows: pd.DataFrame, groups: Groups, mask: np.ndarray,
                      name: str) -> np.ndarray:
    """Per candidate, whether any of its rows in ``mask`` has a value in ``name``."""
    return groups.count(mask & column(rows, name).notna().to_numpy(dtype=bool)) > 0

