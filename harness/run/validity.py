"""Validity gates: whether an ``ok`` trial's figures are physically possible for its cell.

An engine that exits 0 with a full record can still have measured nothing real: a rate of zero,
infinity or NaN, a decode faster than the phone's memory can deliver the weights, a resident peak
below the weights' size although the weights had to be read into memory (mmap off), other token
counts than the cell asked for, a CPU mask or thread count that did not take effect, or a phone
that was not in the state the run requires. Each gate is a small pure function of the trial
record (and the run's requirements, the phone's memory bandwidth) returning its reason with the
figures, or None. A gate without its data does not fire: absent is not impossible. The last gate
is the output check's (``harness.run.outputcheck``): a build whose greedy continuation does not
agree with the reference computes fast nonsense, so its speed is no measurement either.

``validate`` runs every gate on an ``ok`` trial before it is stored: passing trials get
``valid=True``, failing ones keep outcome ``ok`` with ``valid=False`` and every failing gate's
reason, "; "-joined, in ``invalid_reason``; ``harness.analysis.frames.usable_mask`` leaves them
out of every verdict, comparison, gate and recommendation. Other outcomes stay ``valid=None``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.android.power import DOZING_STATES
from harness.engines.derived import number
from harness.matrix import Requirements
from harness.records import Outcome, TrialRecord
from harness.run import outputcheck
from harness.units import MIB

#: A decode may reach this multiple of the memory bandwidth before it is impossible. Why not 1:
#: the model file overstates the bytes a token reads (an untied input-embedding table is read one
#: row per token, a third of a small model's file), a profile's figure is nominal and the copy
#: test runs on one core while a decode reads on several; a real decode reaches at most about
#: 0.8 of the memory's bandwidth, so only a result beyond twice it is impossible, not fast.
BANDWIDTH_MARGIN = 2.0
#: Weights up to this size can stay in the caches between tokens (a phone's L3 and system cache
#: reach 16-24 MiB; the x86 hosts that run virtual phones have 32 MiB of L3 and more), so the
#: tiny test models are read at cache speed, not at the memory's.
CACHE_BYTES = 64 * MIB
#: For weights that fit in the caches, the limit is this many times higher: caches serve reads
#: several times faster than DRAM (L2/L3 over all cores: 4-10x). The tiny models' real decodes
#: on virtual phones stay far below (docs/analysis.md "Validity gates" gives the figures).
CACHE_FACTOR = 8.0
#: With mmap off the engine copies the weights into its own memory, so its resident peak is at
#: least their size. 0.8 of the file leaves room for the GGUF header and vocabulary, which are
#: part of the file but not necessarily of the tensors kept resident.
PEAK_FRACTION = 0.8
#: The token-count keys of an engine's raw record (llama-bench's, llama-cpp-python's, and a
#: YAML engine's when it prints them).
COUNT_KEYS = ("n_prompt", "n_gen", "n_depth")


@dataclass(frozen=True)
class Bandwidth:
    """The phone's memory bandwidth and where the figure came from (quoted in the reason)."""

    gbps: float  # 1e9 bytes per second
    source: str  # "profile flagship-16gb", "measured: dd 4096 MiB in 0.081 s", ...

    def __str__(self) -> str:
        return f"{self.gbps:.1f} GB/s ({self.source})"


def _impossible_rate(value: float) -> bool:
    return math.isnan(value) or math.isinf(value) or value <= 0


def _show(value: float) -> str:
    return f"{value:g}"


def bad_rates(trial: TrialRecord) -> str | None:
    """Gate 1: a zero, negative, infinite or NaN rate (pp and TTFT when the cell has a prompt,
    tg when it generates)."""
    checked: list[tuple[str, Any]] = []
    if trial.n_prompt > 0:
        checked += [("pp_tps", trial.pp_tps), ("ttft_ms", trial.ttft_ms)]
    if trial.n_gen > 0:
        checked.append(("tg_tps", trial.tg_tps))
    bad = [f"{name}={_show(v)}" for name, raw in checked
           if (v := number(raw)) is not None and _impossible_rate(v)]
    return f"impossible rate: {', '.join(bad)}" if bad else None


def faster_than_memory(trial: TrialRecord, bandwidth: Bandwidth | None) -> str | None:
    """Gate 2: each generated token reads every weight once, so tg_tps x the weights' bytes
    cannot exceed the memory's bandwidth (by more than ``BANDWIDTH_MARGIN``; more for weights
    small enough to stay in the caches)."""
    tg = number(trial.tg_tps)
    weights = trial.model_file_bytes
    if bandwidth is None or bandwidth.gbps <= 0 or not weights or weights <= 0:
        return None
    if tg is None or _impossible_rate(tg) or trial.n_gen <= 0:
        return None  # gate 1's
    cached = weights <= CACHE_BYTES
    limit = BANDWIDTH_MARGIN * bandwidth.gbps * (CACHE_FACTOR if cached else 1.0)
    needed = tg * weights / 1e9
    if needed <= limit:
        return None
    allowance = (f" x {CACHE_FACTOR:g} (weights <= {CACHE_BYTES // MIB} MiB fit in the caches)"
                 if cached else "")
    return (f"decode faster than memory: {_show(tg)} tok/s x {weights / MIB:.1f} MiB of weights "
            f"= {needed:.1f} GB/s > {BANDWIDTH_MARGIN:g} x {bandwidth}{allowance} "
            f"= {limit:.1f} GB/s")


def peak_below_weights(trial: TrialRecord) -> str | None:
    """Gate 3: with mmap off the weights are copied into the engine's memory, so its peak
    (VmHWM, or the sampled RSS when larger) is at least ``PEAK_FRACTION`` of the file. Only with
    VmHWM known: a sampled RSS alone can miss a short trial's peak."""
    weights = trial.model_file_bytes
    if trial.mmap or not weights or trial.vm_hwm_bytes is None:
        return None
    peak = max(v for v in (trial.vm_hwm_bytes, trial.peak_rss_bytes) if v is not None)
    floor = PEAK_FRACTION * weights
    if peak >= floor:
        return None
    return (f"peak below the weights with mmap off: {peak / MIB:.1f} MiB < {PEAK_FRACTION:g} x "
            f"{weights / MIB:.1f} MiB model file")


def _records(engine_record: str | None) -> list[dict[str, Any]]:
    if not engine_record:
        return []
    try:
        data = json.loads(engine_record)
    except (TypeError, ValueError):
        return []
    if isinstance(data, dict):
        data = [data]
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value)


def token_counts(trial: TrialRecord) -> str | None:
    """Gate 4: the engine's own record says it ran other token counts than the cell.

    llama-bench and llama-cpp-python print one record per test (the prompt test has n_gen 0,
    the generation test n_prompt 0); a YAML engine may print both counts in one record. So a
    count may be 0 or the cell's, the depth must be the cell's, and a cell that asks for prompt
    (or generated) tokens needs a record that ran exactly that many when the records say.
    """
    records = _records(trial.engine_record)
    wanted = {"n_prompt": trial.n_prompt, "n_gen": trial.n_gen, "n_depth": trial.n_depth}
    wrong: dict[str, None] = {}
    for key in COUNT_KEYS:
        ran = [c for r in records if (c := _count(r.get(key))) is not None]
        if not ran:
            continue
        allowed = {wanted[key]} if key == "n_depth" else {0, wanted[key]}
        others = sorted({c for c in ran if c not in allowed})
        if others:
            shown = ", ".join(str(c) for c in others)
            wrong[f"engine ran {key}={shown}, the cell asks {key}={wanted[key]}"] = None
        elif key != "n_depth" and wanted[key] > 0 and wanted[key] not in ran:
            wrong[f"engine ran no test of {key}={wanted[key]} (its records say "
                  f"{key}={', '.join(str(c) for c in sorted(set(ran)))})"] = None
    return f"token counts differ: {'; '.join(wrong)}" if wrong else None


def config_not_applied(trial: TrialRecord) -> str | None:
    """Gate 5: the trial runner saw the cell's affinity or thread count not take effect."""
    return f"config not applied: {trial.config_not_applied}" if trial.config_not_applied else None


# what a recorded pre-launch state is called in a reason: (true, false)
_STATE_WORDS = {
    "screen_on": ("the screen was on", "the screen was off"),
    "stay_awake": ("stay-awake was on", "stay-awake was off"),
    "charging": ("the battery was charging", "the battery was not charging"),
    "battery_saver": ("battery saver was on", "battery saver was off"),
    "doze": ("the phone was in Doze", "the phone was not in Doze"),
}


def _recorded_state(trial: TrialRecord, key: str) -> bool | None:
    if key == "doze":
        return None if trial.doze_state is None else trial.doze_state in DOZING_STATES
    value = getattr(trial, key, None)
    return None if value is None else bool(value)


def requirements_unmet(trial: TrialRecord, require: Requirements | None) -> str | None:
    """Gate 6: the phone's recorded state (the last reading before the launch) is not what the
    run requires. An unread state does not fire here (the pre-launch check already refuses a
    phone whose required state it cannot read)."""
    if require is None:
        return None
    unmet = []
    for key, wanted in require.items():
        have = _recorded_state(trial, key)
        if have is not None and have != wanted:
            unmet.append(f"{_STATE_WORDS[key][0 if have else 1]}, the run requires "
                         f"{key}: {str(wanted).lower()}")
    return f"phone state out of the run's requirements: {'; '.join(unmet)}" if unmet else None


def output_mismatch(trial: TrialRecord) -> str | None:
    """Gate 7: the build's greedy continuation of the check prompt did not agree with the
    reference on the same model file (``output_check`` mismatch); not checked does not fire."""
    return outputcheck.invalid_reason(trial.output_check, trial.output_reference,
                                      trial.output_check_detail)


Gate = Callable[[TrialRecord, Requirements | None, Bandwidth | None], str | None]
#: Every gate, in the order their reasons are joined.
GATES: tuple[tuple[str, Gate], ...] = (
    ("rates", lambda t, r, b: bad_rates(t)),
    ("bandwidth", lambda t, r, b: faster_than_memory(t, b)),
    ("peak", lambda t, r, b: peak_below_weights(t)),
    ("token_counts", lambda t, r, b: token_counts(t)),
    ("config_not_applied", lambda t, r, b: config_not_applied(t)),
    ("requirements", lambda t, r, b: requirements_unmet(t, r)),
    ("output", lambda t, r, b: output_mismatch(t)),
)


def check(trial: TrialRecord, require: Requirements | None = None,
          bandwidth: Bandwidth | None = None) -> list[str]:
    """The reasons of every gate the trial fails, in ``GATES`` order; [] when it passes."""
    return [reason for _, gate in GATES if (reason := gate(trial, require, bandwidth))]


def needs_bandwidth(trial: TrialRecord) -> bool:
    """Whether the bandwidth gate has something to check (so a probe is worth running)."""
    tg = number(trial.tg_tps)
    return (trial.outcome == Outcome.OK and trial.n_gen > 0 and bool(trial.model_file_bytes)
            and tg is not None and not _impossible_rate(tg))


def validate(trial: TrialRecord, require: Requirements | None = None,
             bandwidth: Bandwidth | None = None) -> TrialRecord:
    """The trial with ``valid`` and ``invalid_reason`` set: an ``ok`` one checked by every gate,
    any other left unchecked (``valid=None``)."""
    if trial.outcome != Outcome.OK:
        return dataclasses.replace(trial, valid=None, invalid_reason=None)
    reasons = check(trial, require, bandwidth)
    return dataclasses.replace(trial, valid=not reasons,
                               invalid_reason="; ".join(reasons) if reasons else None)

