"""Which configuration for this device: measured evidence first, predictions clearly marked.

A *candidate* is a whole configuration: the config's knobs, the build and the engine that ran it
(the same knobs measured with a release build and with a slower one are two candidates, and the
pick names which one it is). A candidate is eligible when, on this device, none of its trials was
killed by the low-memory killer, its worst measured peak plus the reserve fits the available
memory, at most ``max_throttled_fraction`` of its successful trials throttled, and (when a bound
is given) its KL divergence is within ``max_quality_loss``: the weight file's KL against the
ladder's F16 plus, for a quantised KV cache, the KL that KV type costs at the nearest measured
depth not above the config's n_ctx (``kv_loss.KvEvidence.loss``, summed by
``kv_loss.combined_kl``); a KV type that was not measured leaves the bound unprovable.
Which trials count is ``frames.usable``'s rule. Eligible measured candidates are ranked by the
objective (median of the unthrottled trials); cells the plan predicts to fit but that were never
measured follow, marked ``predicted``, ranked by predicted peak (there is no measured speed to
rank them by). The peak is the *worst* trial's, not the median: the low-memory killer acts on
the worst case; per trial it is the larger of the sampled PSS and the kernel's high-water mark
(VmHWM), which a trial shorter than the sampling interval cannot slip past, or its host plus
accelerator memory (its unreadable share predicted: ``offload_peak``). When nothing is
eligible, ``knobs.suggest`` says which knob to turn first.

A candidate whose trials ran by paging their weights from storage (``paging``: its mmap'd model
did not fit, harness.run.paging_measure) is checked against the memory by what must stay
resident (its anonymous peak), not its mapped pages, which the kernel reclaims, and is ranked
after every candidate that fits unless ``allow_paging``; its pick names the bytes a token reads
and the storage-bound speed. Planned cells that run by paging (``runs_by_paging``) follow the
planned ones that fit the same way, ranked by their predicted storage-bound speed.

Two objectives rank other figures than speed, and only the candidates that have them:
``sustained_tg`` ranks sustained workloads (``sustained_s`` > 0, part of the config) by the
median ``sustained_tg_tps`` of their trials, throttled ones included since heating up is what
they measure (and a sustained trial's throttling never rejects a candidate); ``energy`` ranks by
the lowest median ``tg_j_per_token`` over the counted trials whose energy is valid. An eligible
candidate without the figure is not ranked but listed in ``unranked`` with the reason (a burst
workload; energy invalid: charging ...); likewise the speed objectives leave sustained
workloads to ``sustained_tg``. Which trials count per candidate is ``sustained.counted``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from harness.analysis.candidates import (
    PAGING,
    Groups,
    Outputs,
    Trials,
    groups_of,
    has_column_values,
    medians,
    outputs,
    paging_flags,
    peaks,
    trial_masks,
)
from harness.analysis.energy_table import EnergyFigures, energy_of
from harness.analysis.frames import engine_column, invalid, not_applied, records
from harness.analysis.knobs import Suggestion, suggest
from harness.analysis.kv_loss import KvEvidence, KvLoss, KvType, combined_kl
from harness.analysis.offload_peak import WorstPeak
from harness.analysis.phonemem import PhoneMemory, resolve_device
from harness.analysis.quality import QualityScore
from harness.analysis.sustained import SustainedFigures, column, figures, sustained_mask
from harness.budget import fit
from harness.knobs import CPU_DEVICE, gpu_layers_text, offload_of
from harness.knobs import default as knob_default
from harness.labels import config_labels
from harness.metrics import objective as metric_of
from harness.paging_predict import PagingPrediction
from harness.run.paging_measure import file_reads
from harness.units import MB, mib

Objective = Literal["tg_tps", "pp_tps", "ttft", "sustained_tg", "energy"]
SCHEMA_VERSION = 9  # 2: a pick is a (config, build, engine) candidate; pareto lists candidates
#                     3: objectives sustained_tg and energy, their figures on picks, unranked
#                     4: paging picks (paging, read_bytes_per_token, storage_bound_tg_tps)
#                     5: the KV cache's quality loss on picks (kv_kl, kv_depth)
#                     6: storage_bound_tg_tps is always the plan's prediction (never derived
#                        from the measured reads); read_mb_s: the measured read rate
#                     7: the output check's state on picks (output_check), the
#                        output_unchecked rejection (--require-output-check)
#                     8: device_memory on picks (a device's unreadable share is predicted)
#                     9: device_memory is named accelerator_memory (the phone is the device)
#: What identifies a candidate: (config_id, build_id, engine).
CandidateKey = tuple[str, str, str]


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
    build_id: str
    engine: str
    n_trials: int
    kl: float | None
    top1: float | None
    pareto: bool
    explanation: str
    sustained_s: float | None = None  # a sustained workload's duration (None: a burst one)
    sustained_tg_tps: float | None = None  # medians of the counted sustained trials
    steady_state_ratio: float | None = None
    time_to_throttle_s: float | None = None  # median over the trials that throttled
    tg_j_per_token: float | None = None  # medians over the trials whose energy is valid
    pp_j_per_token: float | None = None
    paging: bool = False  # its weights page from storage (measured, or planned runs_by_paging)
    read_bytes_per_token: float | None = None  # storage bytes per generated token (median)
    # the plan's storage-bound decode speed (made before any trial, from the model and the
    # storage speed), for measured and planned picks alike
    storage_bound_tg_tps: float | None = None
    read_mb_s: float | None = None  # the storage read rate measured while decoding
    kv_kl: float | None = None  # the KV type's KL at kv_depth (0 for f16; None: not measured)
    kv_depth: int | None = None  # the measured depth kv_kl comes from
    compute_device: str = knob_default("compute_device")  # where the model runs (none: the CPU)
    n_gpu_layers: int = knob_default("n_gpu_layers")  # layers on that device (-1: all)
    # the output check of its counted trials: checked (all matched the reference), error (the
    # check failed: no verdict), unchecked (not run for them), not_run (a predicted pick)
    output_check: str = "not_run"
    # its peak's device share: read (the phone's), predicted (unreadable: the predictor's
    # share stands for it), unknown (neither); None: no trial on a device, or a predicted pick
    accelerator_memory: str | None = None

    @property
    def candidate(self) -> CandidateKey:
        return (self.config_id, self.build_id, self.engine)


@dataclass(frozen=True)
class Rejected:
    config_id: str
    label: str
    reason_code: str  # oom_killed | over_budget | no_ok_trial | not_applied | invalid |
    #                   throttled | quality | quality_unknown | predicted_over_budget |
    #                   predicted_unsupported | output_unchecked
    reason: str
    build_id: str | None = None
    engine: str | None = None


@dataclass(frozen=True)
class Unranked:
    """An eligible candidate the objective cannot rank: it lacks the figure, and why."""

    config_id: str
    label: str
    build_id: str
    engine: str
    reason_code: str  # burst_only | sustained_only | sustained_not_measured |
    #                   energy_not_measured | energy_invalid
    reason: str


@dataclass(frozen=True)
class Recommendation:
    device: str
    objective: str
    available_bytes: int | None
    reserve_bytes: int
    max_quality_loss: float | None
    picks: tuple[Pick, ...]
    pareto: tuple[CandidateKey, ...]  # the measured picks on the speed/memory front
    rejected: tuple[Rejected, ...]
    suggestion: Suggestion | None
    notes: tuple[str, ...] = ()
    unranked: tuple[Unranked, ...] = ()  # eligible, but without the objective's figure
    count: int | None = None  # picks before ``recommend(limit=...)`` kept the best (None: all)

    @property
    def fitting(self) -> int:
        """How many picks there are, whether or not ``picks`` holds them all."""
        return len(self.picks) if self.count is None else self.count

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
            "picks": [_flat(p) for p in self.picks],
            "pareto": [{"config_id": c, "build_id": b, "engine": e} for c, b, e in self.pareto],
            "rejected": [asdict(r) for r in self.rejected],
            "unranked": [asdict(u) for u in self.unranked],
            "suggestion": asdict(self.suggestion) if self.suggestion else None,
            "notes": list(self.notes),
        }


def _flat(pick: Pick) -> dict[str, Any]:
    """``asdict`` of a pick, whose fields are all scalars, without its deep copies (10,000
    picks of a farm's phone took seconds)."""
    return {f.name: getattr(pick, f.name) for f in dataclasses.fields(pick)}


def _median(values: pd.Series) -> float | None:
    arr = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=np.float64)
    return float(np.median(arr)) if arr.size else None


def _int(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        or value is pd.NA else int(value)


@dataclass(frozen=True)
class _Measured:
    row: dict[str, Any]  # trial columns of the configuration plus label / config_id / engine
    speeds: dict[str, float | None]  # every objective's figure, and the sustained ones
    peak: int | None
    n_trials: int
    sustained: SustainedFigures | None = None  # set for a sustained workload
    energy: EnergyFigures | None = None  # None: energy never measured
    paging: Paging | None = None  # set when its weights paged from storage
    output: tuple[str, str | None] = ("unchecked", None)  # output_state: (state, reason)
    worst: WorstPeak | None = None  # its peak, and whether its device share was read

    @property
    def key(self) -> CandidateKey:
        return (str(self.row["config_id"]), str(self.row["build_id"]), str(self.row["engine"]))


def _reject(row: Mapping[str, Any], code: str, reason: str) -> Rejected:
    return Rejected(str(row["config_id"]), str(row["label"]), code, reason,
                    str(row["build_id"]), str(row["engine"]))


@dataclass(frozen=True)
class Paging:
    """What a candidate that pages its weights reads, and the speed storage allows it."""

    read_bytes_per_token: float | None
    storage_mb_s: float | None
    predicted_tg_tps: float | None  # the plan's storage-bound decode speed, before the trial
    read_mb_s: float | None  # measured while decoding: bytes per token x tokens per second


def paging_of(ok: pd.DataFrame) -> Paging | None:
    """The candidate's paging, when most of its trials were labelled paging (else None)."""
    if "paging" not in ok or ok.empty:
        return None
    labels = ok["paging"].dropna()
    if labels.empty or labels.astype(bool).mean() <= 0.5:
        return None
    read = _median(ok["read_bytes_per_token"]) if "read_bytes_per_token" in ok else None
    # pages back from zram are reads too, not the model's weights
    read = file_reads(read, _median(ok["swap_in_bytes_per_token"])
                      if "swap_in_bytes_per_token" in ok else None)
    speed = _median(ok["storage_read_mb_s"]) if "storage_read_mb_s" in ok else None
    predicted = (_median(ok["predicted_paging_tg_tps"]) if "predicted_paging_tg_tps" in ok
                 else None)
    tg = _median(ok["tg_tps"]) if "tg_tps" in ok else None
    return Paging(read, speed, predicted, read * tg / MB if read and tg else None)


def _worst_anon_peak(ok: pd.DataFrame) -> int | None:
    """What a paging candidate must keep resident: its anonymous memory (PSS), at its worst."""
    if "peak_pss_anon_bytes" not in ok:
        return None
    peaks = ok["peak_pss_anon_bytes"].dropna()
    return _int(peaks.max()) if not peaks.empty else None


def output_state(ok: pd.DataFrame) -> tuple[str, str | None]:
    """The output check of a candidate's counted trials (a mismatch makes a trial invalid, so
    none is left here): ``checked`` when every one matched the reference, ``error`` when a
    check failed for some (no verdict), else ``unchecked``; with the stored reason."""
    states, details = column(ok, "output_check"), column(ok, "output_check_detail")
    if len(ok) and (states == "match").all():
        return "checked", None
    for state in ("error", "not_checked"):
        picked = details[states == state].dropna()
        if len(picked):
            return ("error" if state == "error" else "unchecked"), str(picked.iloc[0])
    if (states == "error").any():
        return "error", None
    return "unchecked", "no output check stored for its trials"


def _unranked(m: _Measured, objective: str) -> Unranked | None:
    """Why the objective cannot rank an eligible candidate, if it cannot."""
    code, reason = "", ""
    if objective == "sustained_tg":
        if m.sustained is None:
            code, reason = "burst_only", ("no sustained trial: a burst workload (a cell with "
                                          "sustained_s measures it)")
        elif m.speeds["sustained_tg_tps"] is None:
            code, reason = "sustained_not_measured", "its sustained trials hold no sustained rate"
    elif objective == "energy":
        if m.energy is None:
            code, reason = "energy_not_measured", "energy not measured"
        elif not m.energy.ok:
            code, reason = "energy_invalid", (f"energy invalid: {m.energy.reason}"
                                              if m.energy.invalid_reasons else
                                              "no valid joules per generated token")
    elif m.sustained is not None:
        code, reason = "sustained_only", (f"a sustained workload ({m.sustained.sustained_s:g} s):"
                                          " ranked by --objective sustained_tg")
    if not code:
        return None
    row = m.row
    return Unranked(str(row["config_id"]), str(row["label"]), str(row["build_id"]),
                    str(row["engine"]), code, reason)


def kv_loss_of(row: Mapping[str, Any], score: QualityScore | None,
               kv: KvEvidence) -> KvLoss | None:
    """What the config's KV cache costs, looked up by its weight file (the trials' sha256, or
    the weight score's for a planned cell)."""
    sha = row.get("model_sha256")
    if not isinstance(sha, str) or not sha:
        sha = score.sha256 if score is not None else None
    return kv.loss(sha, str(row["type_k"]), str(row["type_v"]), int(row["n_ctx"]))


def _quality_rejection(row: Mapping[str, Any], quality: Mapping[tuple[str, str], QualityScore],
                       max_loss: float | None, kv: KvEvidence) -> Rejected | None:
    if max_loss is None:
        return None
    score = quality.get((str(row["model_name"]), str(row["quant"])))
    if score is None:
        return _reject(row, "quality_unknown",
                       "quality not measured (run `harness quality`), so the bound cannot hold")
    loss = kv_loss_of(row, score, kv)
    if loss is None:
        kv_type = KvType(str(row["type_k"]), str(row["type_v"])).label
        return _reject(row, "quality_unknown",
                       f"KV cache {kv_type} quality not measured at this model (run `harness "
                       f"quality --kv {kv_type} --depth {int(row['n_ctx'])}`), so the bound "
                       "cannot hold")
    total = combined_kl(score.kl, loss)
    if total > max_loss:
        kv_part = "" if loss.depth is None else f" + {loss.describe()} = {total:.4g}"
        return _reject(row, "quality",
                       f"KL {score.kl:.4g} (weights){kv_part} > max quality loss {max_loss:g}")
    return None


def _sustained_text(m: _Measured) -> str:
    s = m.sustained
    if s is None:
        return ""
    ratio = f"steady state {s.steady_state_ratio:.0%} of the initial rate" \
        if s.steady_state_ratio is not None else "steady state unknown"
    throttle = (f"throttled after {s.time_to_throttle_s:.0f} s in {s.throttled_trials} of "
                f"{s.trials} trials" if s.time_to_throttle_s is not None else "never throttled")
    return f" ({ratio}, {throttle}, {s.sustained_s:g} s runs)"


def _paging_text(paging: Paging | None, measured_tg: float | None) -> str:
    if paging is None:
        return ""
    read = (f"{mib(paging.read_bytes_per_token)} read from storage per token"
            if paging.read_bytes_per_token else "storage reads per token not measured")
    rate = ""
    if paging.read_mb_s is not None and paging.storage_mb_s:
        rate = (f", read at {paging.read_mb_s:.0f} MB/s while decoding of the storage's "
                f"{paging.storage_mb_s:g} MB/s")
    plan = ""
    if paging.predicted_tg_tps is not None:
        plan = f"; the plan predicted {paging.predicted_tg_tps:.2f} tok/s before the trials"
        if measured_tg:
            plan += f", {measured_tg:.2f} measured"
    return f"runs by paging its weights: {read}{rate}{plan}"


def _explain(m: _Measured | None, peak: int | None, headroom: int | None, score: QualityScore |
             None, objective: str, pareto: bool, reserve: int, kv: KvLoss | None = None,
             kv_label: str = "f16") -> str:
    parts = []
    if m is not None:
        ranked_by = metric_of(objective)
        value = m.speeds.get(ranked_by.column)
        text = (f"{ranked_by.title} {ranked_by.text(value)} measured" if value is not None
                else f"{ranked_by.title} not measured")
        if objective == "sustained_tg":
            text += _sustained_text(m)
        elif objective == "energy" and value is not None and m.energy is not None:
            text += (f" (idle subtracted, median of {m.energy.valid} trials with valid energy"
                     f"{', ' + m.energy.source if m.energy.source else ''})")
        parts.append(text)
    else:
        parts.append("predicted to fit, not measured: run it to know its speed")
    if m is not None and m.paging is not None:
        parts.append(_paging_text(m.paging, m.speeds.get("tg_tps")))
    if peak is not None:
        kind = ("resident peak (anonymous)" if m is not None and m.paging is not None
                else "peak" if m is not None else "predicted peak")
        room = f", {mib(headroom)} headroom after the {mib(reserve)} reserve" \
            if headroom is not None else ""
        parts.append(f"{kind} {mib(peak)}{room}")
    parts.append(f"quality KL {score.kl:.3g}, top-1 {score.top1:.0%}" if score
                 else "quality not measured")
    if kv is not None and kv.depth is not None:
        parts.append(f"{kv.describe()}"
                     + (f" (KL {combined_kl(score.kl, kv):.3g} in all)" if score else ""))
    elif kv is None:
        parts.append(f"KV {kv_label} quality not measured")
    if pareto:
        parts.append("on the speed/memory Pareto front")
    return "; ".join(parts)


def _device_rows(trials: pd.DataFrame, device: str, builds: Sequence[str],
                 engines: Sequence[str]) -> pd.DataFrame:
    """The device's trials (by serial or device model) of the named builds and engines, with
    the engine column filled."""
    rows = trials[(trials["device_serial"] == device) | (trials["device_model"] == device)]
    rows = rows.assign(engine=engine_column(rows).to_numpy())
    if builds:
        rows = rows[rows["build_id"].isin(list(builds))]
    if engines:
        rows = rows[rows["engine"].isin(list(engines))]
    return rows


def device_frames(trials: pd.DataFrame, names: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Each name's trials as ``_device_rows`` selects them (serial or device model), the
    columns compared once as codes: what ``recommend`` of one name reads of ``trials``."""
    found: dict[str, np.ndarray] = {name: np.zeros(len(trials), dtype=bool) for name in names}
    for name_column in ("device_serial", "device_model"):
        codes, values = pd.factorize(trials[name_column])
        for at, value in enumerate(values):
            if value in found:
                found[value] |= codes == at
    return {name: trials[mask] for name, mask in found.items()}


def _scope_note(device: str, builds: Sequence[str], engines: Sequence[str]) -> str:
    which = "".join(f" and {what} {', '.join(names)}" for what, names in
                    (("build", builds), ("engine", engines)) if names)
    return f"no trials for device {device!r}{which}"


def _ranked(measured: list[_Measured], objective: str,
            allow_paging: bool = False) -> list[_Measured]:
    """Best objective first (ties: smaller peak, then config, build and engine); candidates
    that page their weights after those that fit, unless ``allow_paging``."""
    ranked_by = metric_of(objective)
    key = ranked_by.column
    sign = -1.0 if ranked_by.higher_is_better else 1.0
    return sorted(measured, key=lambda m: (m.paging is not None and not allow_paging,
                                           m.speeds.get(key) is None,
                                           sign * (m.speeds.get(key) or 0.0),
                                           m.peak if m.peak is not None else 0, m.key))


@dataclass
class _Assessed:
    """Every candidate of a device, assessed: ranked, rejected (why), or not rankable."""

    measured: list[_Measured] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    unranked: list[Unranked] = field(default_factory=list)
    memory_rejects: list[dict[str, Any]] = field(default_factory=list)  # for ``suggest``
    seen: set[CandidateKey] = field(default_factory=set)

    def add(self, assessed: tuple[_Measured | None, Rejected | None, int | None],
            first: Mapping[str, Any], objective: str) -> None:
        """File one candidate's assessment; ``first`` is its first trial's row."""
        m, rej, over = assessed
        if m is not None and (why := _unranked(m, objective)) is not None:
            self.unranked.append(why)
        elif m is not None:
            self.measured.append(m)
        elif rej is not None:
            self.rejected.append(rej)
            if rej.reason_code in ("over_budget", "oom_killed"):
                self.memory_rejects.append({**first, "config_id": rej.config_id,
                                            "label": rej.label, "over_bytes": over})


def _no_ok_trial(row: Mapping[str, Any], rows: pd.DataFrame) -> Rejected:
    """A candidate none of whose trials succeeded: each outcome with its count."""
    counts = rows["outcome"].astype(str).value_counts()
    outcomes = ", ".join(f"{k} {v}" for k, v in counts.items())
    return _reject(row, "no_ok_trial", f"no successful trial ({outcomes})")


def _unapplied(row: Mapping[str, Any], rows: pd.DataFrame, n_ok: int) -> Rejected:
    """A candidate none of whose successful trials counts: invalid, or not applied as asked."""
    ok = rows[rows["outcome"] == "ok"]
    failed_gates = ok[invalid(ok)]
    if len(failed_gates) and not not_applied(ok).all():
        reasons = failed_gates.get("invalid_reason", pd.Series(dtype=object)).dropna()
        why = str(reasons.iloc[0]) if len(reasons) else "a validity gate failed"
        return _reject(row, "invalid", f"none of the {n_ok} successful trials is valid "
                                       f"({why})")
    return _reject(row, "not_applied", f"none of the {n_ok} successful trials ran as "
                                       "configured (affinity or threads not applied)")


@dataclass(frozen=True)
class _Bulk:
    """A device's candidates aggregated at once (``candidates``): what ``_assess`` reads."""

    rows: pd.DataFrame
    groups: Groups
    trials: Trials
    records: list[dict[str, Any]]  # each candidate's first trial, as ``_assess`` reads its row
    counts: dict[str, np.ndarray]  # n, ok, oom, applied, burst, hot
    peaks: np.ndarray
    states: list[str | None]
    paging: np.ndarray
    anon: np.ndarray
    speeds: dict[str, np.ndarray]  # medians over the counted trials
    paged: dict[str, np.ndarray]  # medians over the applied trials (paging figures)
    outputs: Outputs
    sustained: np.ndarray  # has a counted sustained trial
    energy: np.ndarray  # has a counted trial whose energy was measured
    labels: list[str]  # each candidate's config_label


def _bulk(rows: pd.DataFrame) -> _Bulk:
    groups = groups_of(rows)
    t = trial_masks(rows, groups)
    every = np.ones(len(rows), dtype=bool)
    counts = {"n": groups.count(every), "ok": groups.count(t.ok), "oom": groups.count(t.oom),
              "applied": groups.count(t.applied), "burst": groups.count(t.burst),
              "hot": groups.count(t.hot)}
    worst, states = peaks(rows, groups, t.applied)
    paging = paging_flags(rows, groups, t.applied)
    anon = (groups.reduce(pd.to_numeric(rows["peak_pss_anon_bytes"], errors="coerce"),
                          t.applied, "max") if "peak_pss_anon_bytes" in rows
            else np.full(len(groups), np.nan))
    pages = t.applied & paging[np.maximum(groups.codes, 0)] & (groups.codes >= 0)
    firsts = rows.iloc[groups.order[groups.starts[:-1]]]
    first_rows = records(firsts)
    return _Bulk(rows, groups, t, first_rows, counts, worst, states, paging, anon,
                 medians(rows, groups, t.counted, ("tg_tps", "pp_tps", "ttft_ms")),
                 medians(rows, groups, pages, PAGING), outputs(rows, groups, t.counted),
                 groups.count(t.counted & sustained_mask(rows).to_numpy()) > 0,
                 has_column_values(rows, groups, t.counted, "energy_valid"),
                 config_labels(firsts, first_rows))


def _number(values: np.ndarray | None, g: int) -> float | None:
    return None if values is None or np.isnan(values[g]) else float(values[g])


def _bulk_health(b: _Bulk, g: int, row: Mapping[str, Any],
                 max_throttled: float) -> Rejected | None:
    """``_health`` of candidate ``g`` from the counts (its rows only for the rare messages
    that list them)."""
    c = {name: int(values[g]) for name, values in b.counts.items()}
    if c["oom"]:
        return _reject(row, "oom_killed", f"killed by the low-memory killer in {c['oom']} of "
                                          f"{c['n']} trials")
    if not c["ok"]:
        return _no_ok_trial(row, b.rows.iloc[b.groups.positions(g)])
    if not c["applied"]:
        return _unapplied(row, b.rows.iloc[b.groups.positions(g)], c["ok"])
    if c["burst"] and c["hot"] / c["burst"] > max_throttled:
        return _reject(row, "throttled", f"{c['hot']} of {c['burst']} trials throttled")
    return None


def _bulk_paging(b: _Bulk, g: int) -> Paging | None:
    if not b.paging[g]:
        return None
    read = _number(b.paged.get("read_bytes_per_token"), g)
    read = file_reads(read, _number(b.paged.get("swap_in_bytes_per_token"), g)
                      if "swap_in_bytes_per_token" in b.paged else None)
    tg = _number(b.paged.get("tg_tps"), g)
    return Paging(read, _number(b.paged.get("storage_read_mb_s"), g),
                  _number(b.paged.get("predicted_paging_tg_tps"), g),
                  read * tg / MB if read and tg else None)


def _bulk_output(b: _Bulk, g: int) -> tuple[str, str | None]:
    """``output_state`` of candidate ``g``'s counted trials."""
    o = b.outputs
    if o.all_match[g]:
        return "checked", None
    if o.error_detail[g] >= 0:
        return "error", o.details[int(o.error_detail[g])]
    if o.unchecked_detail[g] >= 0:
        return "unchecked", o.details[int(o.unchecked_detail[g])]
    if o.any_error[g]:
        return "error", None
    return "unchecked", "no output check stored for its trials"


def _bulk_measured(b: _Bulk, g: int, row: dict[str, Any], peak: int | None) -> _Measured:
    """``_measured``: the medians of the counted trials, and the sustained and energy figures
    of the candidates that have them (from their counted rows, by ``sustained.figures`` and
    ``energy_table.energy_of``, the report's tables' own rules)."""
    key = b.groups.keys[g]
    speeds = {k: _number(b.speeds.get(k), g) for k in ("tg_tps", "pp_tps", "ttft_ms")}
    full = (str(b.records[g]["device_serial"]), *key)
    sustained = energy = None
    if b.sustained[g] or b.energy[g]:
        where = b.groups.positions(g)
        chosen = b.rows.iloc[where[b.trials.counted[where]]]
        sustained = figures(full, chosen) if b.sustained[g] else None
        energy = energy_of(full, chosen, str(row["label"])) if b.energy[g] else None
    speeds["sustained_tg_tps"] = sustained.sustained_tg_tps if sustained else None
    speeds["steady_state_ratio"] = sustained.steady_state_ratio if sustained else None
    speeds["time_to_throttle_s"] = sustained.time_to_throttle_s if sustained else None
    speeds["tg_j_per_token"] = energy.tg_j_per_token if energy and energy.ok else None
    speeds["pp_j_per_token"] = energy.pp_j_per_token if energy and energy.valid else None
    return _Measured(row, speeds, peak, int(b.counts["n"][g]), sustained, energy)


@dataclass(frozen=True)
class _Bounds:
    """What a candidate is held against: memory, throttling, quality, the output check."""

    available: int | None
    reserve: int
    max_throttled: float
    quality: Mapping[tuple[str, str], QualityScore]
    max_loss: float | None
    kv: KvEvidence
    require_check: bool


def _assess(b: _Bulk, g: int, bounds: _Bounds,
            ) -> tuple[_Measured | None, Rejected | None, int | None]:
    """Candidate ``g``: (eligible measurement, or rejection; bytes over budget when rejected
    for memory)."""
    key = b.groups.keys[g]
    row = dict(b.records[g])
    row.update(config_id=key[0], build_id=key[1], engine=key[2], label=b.labels[g])
    unhealthy = _bulk_health(b, g, row, bounds.max_throttled)
    if unhealthy is not None:
        return None, unhealthy, None
    paging = _bulk_paging(b, g)
    worst = WorstPeak(_int(_number(b.peaks, g)), b.states[g])
    peak = _int(_number(b.anon, g)) if paging is not None else worst.bytes
    what = f"worst measured peak ({worst.says})" if worst.says else "worst measured peak"
    verdict = fit(peak, bounds.available, bounds.reserve, what) \
        if bounds.available is not None and peak is not None else None
    if verdict is not None and not verdict.fits:
        return None, _reject(row, "over_budget", verdict.reason), verdict.over_bytes
    rejected = _quality_rejection(row, bounds.quality, bounds.max_loss, bounds.kv)
    if rejected:
        return None, rejected, None
    checked, why = _bulk_output(b, g)
    if bounds.require_check and checked != "checked":
        return None, _reject(row, "output_unchecked", (
            f"its output was not checked ({'the check failed: ' if checked == 'error' else ''}"
            f"{why or 'no reason stored'}) and --require-output-check is on")), None
    return dataclasses.replace(_bulk_measured(b, g, row, peak), paging=paging,
                               output=(checked, why), worst=worst), None, None


def _assess_all(rows: pd.DataFrame, objective: str, *, available: int | None, reserve: int,
                max_throttled: float, quality: Mapping[tuple[str, str], QualityScore],
                max_loss: float | None, kv: KvEvidence, require_check: bool) -> _Assessed:
    """Every (config, build, engine) candidate of ``rows``, aggregated in bulk, then each
    through ``_assess`` in ``groupby`` order."""
    out = _Assessed()
    if rows.empty:
        return out
    b = _bulk(rows)
    bounds = _Bounds(available, reserve, max_throttled, quality, max_loss, kv, require_check)
    for g, ckey in enumerate(b.groups.keys):
        out.seen.add(ckey)
        out.add(_assess(b, g, bounds), b.records[g], objective)
    return out


def _pareto(points: Sequence[tuple[CandidateKey, float, int]]) -> set[CandidateKey]:
    """Candidates not dominated in (speed higher better, peak lower better): a point is
    dominated by a faster one at no larger peak, or an equally fast one at a smaller peak."""
    if not points:
        return set()
    speed = np.array([s for _, s, _ in points], dtype=np.float64)
    peak = np.array([p for _, _, p in points], dtype=np.int64)
    unique, at = np.unique(speed, return_inverse=True)
    top = np.iinfo(np.int64).max
    least = np.full(len(unique), top, dtype=np.int64)
    np.minimum.at(least, at, peak)  # the smallest peak at each speed
    from_here = np.minimum.accumulate(least[::-1])[::-1]  # at this speed or faster
    faster = np.append(from_here[1:], top)
    dominated = (faster[at] <= peak) | (least[at] < peak)
    return {points[int(i)][0] for i in np.flatnonzero(~dominated)}


def _measured_picks(measured: Sequence[_Measured], objective: str, available: int | None,
                    reserve: int, scores: Mapping[tuple[str, str], QualityScore],
                    kv: KvEvidence, limit: int | None = None) -> list[Pick]:
    """The ranked measured candidates as picks (the best ``limit``), each marked if on the
    speed/memory front of them all."""
    ranked_by = metric_of(objective)
    key_name = ranked_by.column
    sign = -1.0 if ranked_by.higher_is_better else 1.0
    front = _pareto([(m.key, -sign * (m.speeds[key_name] or 0.0), m.peak)
                     for m in measured if m.speeds.get(key_name) is not None
                     and m.peak is not None])
    picks: list[Pick] = []
    for m in measured[:limit]:
        picks.append(_pick(len(picks) + 1, m.row, m, m.peak, available, reserve, scores,
                           objective, m.key in front, kv))
    return picks


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
    builds: Sequence[str] = (),
    engines: Sequence[str] = (),
    max_throttled_fraction: float = 0.5,
    allow_paging: bool = False,
    kv_quality: KvEvidence | None = None,
    require_output_check: bool = False,
    limit: int | None = None,
) -> Recommendation:
    """Rank the (config, build, engine) candidates of ``device`` (a serial or a ``device_model``).

    ``limit`` makes only the best ``limit`` picks (the report shows a few of a farm phone's
    ten thousand; ``count`` says how many there are); the ranking is the same.

    ``require_output_check`` keeps only candidates whose counted trials all passed the output
    check: the others are rejected (``output_unchecked``), planned cells are left out.

    ``builds`` / ``engines`` keep only the candidates of those builds / engines (default: all).
    ``predictions`` are ``harness.plan.PlannedCell`` objects; a planned cell whose candidate was
    measured on this device is ignored (evidence wins). ``available_bytes`` None means only OOM
    evidence counts.
    """
    metric_of(objective)  # a ConfigError naming the objectives
    scores = quality or {}
    kv = kv_quality or KvEvidence()
    notes: list[str] = []
    rows = _device_rows(trials, device, builds, engines)
    if rows.empty:
        notes.append(_scope_note(device, builds, engines))
    if available_bytes is None:
        notes.append("available memory unknown: only low-memory-killer evidence was used")
    found = _assess_all(rows, objective, available=available_bytes, reserve=reserve_bytes,
                        max_throttled=max_throttled_fraction, quality=scores,
                        max_loss=max_quality_loss, kv=kv, require_check=require_output_check)
    measured, rejected, unranked, seen = (found.measured, found.rejected, found.unranked,
                                          found.seen)
    measured = _ranked(measured, objective, allow_paging)
    pages = sum(m.paging is not None for m in measured)
    if pages and not allow_paging and pages < len(measured):
        notes.append(f"{pages} of {len(measured)} configs run by paging their weights from "
                     "storage: ranked after those that fit (--allow-paging ranks them by speed "
                     "with the others)")
    picks = _measured_picks(measured, objective, available_bytes, reserve_bytes, scores, kv,
                            limit)
    planned = [p for p in predictions or () if (not builds or p.cell.build in builds)
               and (not engines or p.cell.engine in engines) and _plannable(p, objective)]
    if require_output_check and planned:
        notes.append(f"{len(planned)} planned configs left out: never run, so their output was "
                     "never checked (--require-output-check)")
        planned = []
    predicted_picks = _predicted(planned, seen, available_bytes, reserve_bytes, scores,
                                 max_quality_loss, rejected, kv)
    count = len(measured) + len(predicted_picks)
    for row, peak in sorted(predicted_picks, key=_predicted_order)[
            :None if limit is None else max(0, limit - len(picks))]:
        picks.append(_pick(len(picks) + 1, row, None, peak, available_bytes, reserve_bytes,
                           scores, objective, False, kv))
    suggestion = None if count or unranked else suggest(
        found.memory_rejects, [{**m.row, "peak_bytes": m.peak} for m in measured
                               if m.peak is not None],
        available=available_bytes, reserve=reserve_bytes)
    notes.extend(_unranked_notes(objective, measured, unranked))
    return Recommendation(device, objective, available_bytes, reserve_bytes, max_quality_loss,
                          tuple(picks), tuple(p.candidate for p in picks if p.pareto),
                          tuple(rejected), suggestion, tuple(notes), tuple(unranked),
                          None if limit is None else count)


def _predicted_order(entry: tuple[dict[str, Any], int]) -> tuple[bool, float, int]:
    """Planned picks: those that fit by their peak, then those that page, fastest first."""
    row, peak = entry
    paging = row.get("paging")
    if isinstance(paging, PagingPrediction):
        return (True, -(paging.tg_tps or 0.0), peak)
    return (False, 0.0, peak)


def _plannable(planned: Any, objective: str) -> bool:
    """Whether a planned cell's workload is one the objective ranks (sustained or burst)."""
    if objective == "energy":
        return True
    sustained = bool(getattr(planned.cell, "sustained_s", 0) or 0)
    return sustained == (objective == "sustained_tg")


def _unranked_notes(objective: str, measured: Sequence[_Measured],
                    unranked: Sequence[Unranked]) -> list[str]:
    if not unranked:
        return []
    counts: dict[str, int] = {}
    for u in unranked:
        counts[u.reason_code] = counts.get(u.reason_code, 0) + 1
    what = {"burst_only": "without sustained trials",
            "sustained_only": "of sustained workloads",
            "sustained_not_measured": "whose sustained trials hold no rate",
            "energy_not_measured": "without an energy measurement",
            "energy_invalid": "whose energy is invalid (reasons listed)"}
    text = ", ".join(f"{n} {what.get(code, code)}" for code, n in sorted(counts.items()))
    lead = "nothing ranked" if not measured else f"{len(measured)} ranked"
    return [f"{lead} by {objective}; not ranked for it: {text}"]


def cached_scores(trials: pd.DataFrame) -> dict[tuple[str, str], QualityScore]:
    """(model, quant) -> the quality ``harness quality`` cached for the trials' model files."""
    from harness.analysis.quality import (
        cached_quality_files,
        load_quality_files,
        quality_for_trials,
    )

    return quality_for_trials(trials, load_quality_files(cached_quality_files()))


def cached_kv_evidence(cache_dir: Path | None = None) -> KvEvidence:
    """Every KV cell ``harness quality --kv`` cached beside the models."""
    from harness.analysis.kv_loss_measure import cached_kv_cells

    return KvEvidence(cached_kv_cells(cache_dir))


def recommend_device(
    trials: pd.DataFrame,
    name: str,
    *,
    reserve_bytes: int,
    memory_bytes: int | None = None,
    devices_dir: Path | None = None,
    predictions_for: Callable[[int | None], Sequence[Any] | None] | None = None,
    **options: Any,
) -> tuple[Recommendation, PhoneMemory]:
    """What ``harness recommend --device NAME`` answers, and where its memory figure came from.

    ``name`` is a serial in the store or a device profile; the available memory is resolved by
    ``phonemem.resolve_device`` (``memory_bytes`` first). ``predictions_for`` maps that memory
    to planned cells (``--matrix``). ``options`` are ``recommend``'s keyword arguments.
    """
    target = resolve_device(trials, name, memory_bytes, devices_dir)
    predictions = predictions_for(target.available_bytes) if predictions_for else None
    rec = recommend(trials, target.device, reserve_bytes=reserve_bytes,
                    available_bytes=target.available_bytes, predictions=predictions, **options)
    return rec, target


def _pick(rank: int, row: Mapping[str, Any], m: _Measured | None, peak: int | None,
          available: int | None, reserve: int, scores: Mapping[tuple[str, str], QualityScore],
          objective: str, pareto: bool, kv: KvEvidence) -> Pick:
    score = scores.get((str(row["model_name"]), str(row["quant"])))
    kv_loss = kv_loss_of(row, score, kv)
    headroom = available - reserve - peak if available is not None and peak is not None else None
    speeds = m.speeds if m else {}
    seconds = m.sustained.sustained_s if m and m.sustained else None
    planned = row.get("paging") if isinstance(row.get("paging"), PagingPrediction) else None
    paging = m.paging if m else None
    explanation = _explain(m, peak, headroom, score, objective, pareto, reserve, kv_loss,
                           KvType(str(row["type_k"]), str(row["type_v"])).label)
    device, layers = _offload_of(row)
    worst = m.worst if m else None
    says = worst.says if worst else None
    if device != CPU_DEVICE:
        explanation = (f"on {device} with n_gpu_layers {gpu_layers_text(layers)}"
                       f"{f' ({says})' if says else ''}; {explanation}")
    checked, why = m.output if m else ("not_run", None)
    if m is not None:
        explanation += ("; output checked against the reference" if checked == "checked"
                        else f"; output check failed, no verdict: {why}" if checked == "error"
                        else f"; output not checked: {why}")
    if planned is not None:
        explanation = f"{_planned_paging_text(planned)}; {explanation}"
    return Pick(
        rank=rank, config_id=str(row["config_id"]), label=str(row["label"]),
        model=str(row["model_name"]), quant=str(row["quant"]), n_ctx=int(row["n_ctx"]),
        type_k=str(row["type_k"]), type_v=str(row["type_v"]), threads=int(row["threads"]),
        tg_tps=speeds.get("tg_tps"), pp_tps=speeds.get("pp_tps"),
        ttft_ms=speeds.get("ttft_ms"), peak_bytes=peak, headroom_bytes=headroom,
        source="measured" if m else "predicted", build_id=str(row["build_id"]),
        engine=str(row["engine"]), n_trials=m.n_trials if m else 0,
        kl=score.kl if score else None, top1=score.top1 if score else None, pareto=pareto,
        explanation=explanation,
        sustained_s=seconds, sustained_tg_tps=speeds.get("sustained_tg_tps"),
        steady_state_ratio=speeds.get("steady_state_ratio"),
        time_to_throttle_s=speeds.get("time_to_throttle_s"),
        tg_j_per_token=speeds.get("tg_j_per_token"), pp_j_per_token=speeds.get("pp_j_per_token"),
        paging=paging is not None or planned is not None,
        read_bytes_per_token=(paging.read_bytes_per_token if paging
                              else float(planned.read_per_token) if planned else None),
        storage_bound_tg_tps=(paging.predicted_tg_tps if paging
                              else planned.tg_tps if planned else None),
        read_mb_s=paging.read_mb_s if paging else None,
        kv_kl=kv_loss.kl if kv_loss else None, kv_depth=kv_loss.depth if kv_loss else None,
        compute_device=device, n_gpu_layers=layers, output_check=checked,
        accelerator_memory=worst.accelerator_memory if worst else None,
    )


def _offload_of(row: Mapping[str, Any]) -> tuple[str, int]:
    """A candidate's device and layers (a store or a plan from before the knobs: the CPU)."""
    return offload_of(row)


def _planned_paging_text(paging: PagingPrediction) -> str:
    speed = (f", storage-bound {paging.tg_tps:.2f} tok/s at {paging.storage_mb_s:g} MB/s"
             if paging.tg_tps and paging.storage_mb_s else "")
    return (f"predicted to run by paging its weights: "
            f"{mib(paging.read_per_token)} read from storage per token{speed}")


def _predicted(predictions: Sequence[Any], seen: set[CandidateKey], available: int | None,
               reserve: int, scores: Mapping[tuple[str, str], QualityScore],
               max_loss: float | None, rejected: list[Rejected], kv: KvEvidence,
               ) -> list[tuple[dict[str, Any], int]]:
    """Planned candidates not measured here that are predicted to fit: (row, predicted peak)."""
    out: list[tuple[dict[str, Any], int]] = []
    done: set[CandidateKey] = set()
    for planned in predictions:
        cell = planned.cell
        key = (cell.config_id, cell.build, cell.engine)
        if key in seen or key in done:
            continue
        done.add(key)
        row = {"config_id": cell.config_id, "label": cell.label(), "model_name": cell.model,
               "quant": cell.quant, "n_ctx": cell.n_ctx, "type_k": cell.type_k,
               "type_v": cell.type_v, "threads": cell.threads, "build_id": cell.build,
               "engine": cell.engine}
        named = {**row, "label": f"{cell.label()} (predicted)"}
        if planned.prediction is None or planned.reason_code not in (
                "fits", "over_budget", "runs_by_paging"):
            rejected.append(_reject(named, "predicted_unsupported", planned.reason))
            continue
        peak = int(planned.prediction.total)
        if planned.reason_code == "runs_by_paging" and planned.paging is not None:
            row["paging"] = planned.paging  # what must stay resident is what has to fit
            peak = int(planned.paging.resident)
        verdict = fit(peak, available, reserve, "predicted peak") if available is not None \
            else None
        if verdict is not None and not verdict.fits:
            rejected.append(_reject(named, "predicted_over_budget", verdict.reason))
            continue
        quality_reject = _quality_rejection(named, scores, max_loss, kv)
        if quality_reject:
            rejected.append(quality_reject)
            continue
        out.append((row, peak))
    return out
