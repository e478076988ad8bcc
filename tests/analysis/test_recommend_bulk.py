"""recommend's bulk assessment against the per-candidate one it replaced, on random stores.

``harness.testing.recommend_reference`` keeps the per-candidate pandas assessment (and the
pairwise Pareto front) as they were; every field of every assessed candidate, and of every pick,
rejection and unranked entry of whole recommendations, must be the same to the bit.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.analysis import recommend as rec_module
from harness.analysis.kv_loss import EngineBuild, KvCell, KvEvidence
from harness.analysis.quality import QualityScore
from harness.analysis.recommend import _assess_all, _device_rows, _pareto, recommend
from harness.store import read_table
from harness.testing import recommend_reference as reference

from .factory import cell, trial, write

GIB = 1 << 30
OUTCOMES = ("ok", "ok", "ok", "ok", "ok", "ok", "oom_killed", "crashed", "timeout")
OBJECTIVES = ("tg_tps", "pp_tps", "ttft", "sustained_tg", "energy")


def _maybe(rng: np.random.Generator, value: Any, p: float = 0.25) -> Any:
    return None if rng.random() < p else value


def _gpu(rng: np.random.Generator, mode: str) -> dict[str, Any]:
    """An offload trial's memory columns: its device share read, unreadable (predicted), or
    neither (``mode``), its host share sometimes unknown."""
    return {"accelerator_memory_bytes": int(rng.integers(1, 900)) << 20 if mode == "read"
            else None,
            "predicted_accelerator_bytes": int(rng.integers(1, 900)) << 20
            if mode == "predicted" else None,
            "host_memory_bytes": _maybe(rng, int(rng.integers(200, 3000)) << 20, 0.4)}


def _paging(rng: np.random.Generator) -> dict[str, Any]:
    return {"paging": _maybe(rng, bool(rng.random() < 0.7), 0.3),
            "read_bytes_per_token": _maybe(rng, float(rng.integers(1, 4000)) * 1e5),
            "swap_in_bytes_per_token": _maybe(rng, float(rng.integers(0, 50)) * 1e5),
            "storage_read_mb_s": _maybe(rng, float(rng.integers(100, 2000))),
            "predicted_paging_tg_tps": _maybe(rng, float(rng.random() * 5)),
            "peak_pss_anon_bytes": _maybe(rng, int(rng.integers(100, 2000)) << 20)}


def _energy(rng: np.random.Generator) -> dict[str, Any]:
    valid = bool(rng.random() < 0.6)
    return {"energy_valid": valid, "energy_source": "power_supply",
            "energy_invalid_reason": None if valid else _maybe(rng, "charging", 0.3),
            "tg_j_per_token": float(rng.random()) if valid else None,
            "pp_j_per_token": _maybe(rng, float(rng.random() / 10)) if valid else None}


def _output(rng: np.random.Generator) -> dict[str, Any]:
    state = rng.choice(["match", "match", "error", "not_checked", "none"])
    if state == "none":
        return {}
    detail = None if state == "match" else _maybe(rng, f"{state} {int(rng.integers(9))}", 0.4)
    return {"output_check": str(state), "output_check_detail": detail}


def _trial_fields(rng: np.random.Generator, gpu: str | None, sustained: bool) -> dict[str, Any]:
    """One trial's random outcome, figures, flags and optional evidence."""
    outcome = str(rng.choice(OUTCOMES))
    ok = outcome == "ok"
    tg = float(np.round(rng.lognormal(2.5, 0.5), int(rng.integers(0, 3))))
    f: dict[str, Any] = {
        "outcome": outcome, "tg_tps": _maybe(rng, tg, 0.1) if ok else None,
        "pp_tps": _maybe(rng, float(rng.lognormal(5, 0.3)), 0.1) if ok else None,
        "ttft_ms": _maybe(rng, float(rng.lognormal(4, 0.3))) if ok else None,
        "peak_pss_bytes": _maybe(rng, int(rng.integers(200, 6000)) << 20, 0.1),
        "vm_hwm_bytes": _maybe(rng, int(rng.integers(200, 6000)) << 20, 0.5),
        "peak_rss_bytes": _maybe(rng, int(rng.integers(200, 6000)) << 20, 0.3),
        "throttled": bool(rng.random() < 0.3),
        "valid": _maybe(rng, bool(rng.random() < 0.85), 0.3),
        "config_not_applied": "threads" if rng.random() < 0.08 else None}
    if f["valid"] is False:
        f["invalid_reason"] = _maybe(rng, "decode faster than memory", 0.3)
    if sustained and ok:
        f.update(sustained_tg_tps=_maybe(rng, tg * 0.8), steady_state_ratio=_maybe(rng, 0.8),
                 time_to_throttle_s=_maybe(rng, float(rng.integers(5, 60)), 0.5))
    if gpu is not None:
        f.update(_gpu(rng, gpu))
    for chance, extra in ((0.3, _paging), (0.4, _energy), (0.7, _output)):
        if rng.random() < chance:
            f.update(extra(rng))
    return f


def _store(tmp_path: Path, seed: int) -> pd.DataFrame:
    """Three phones (two of one model), two builds, two engines, random cells and trials."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(24):
        on_gpu = rng.random() < 0.4
        gpu = str(rng.choice(["read", "read", "predicted", "unknown"])) if on_gpu else None
        sustained = rng.random() < 0.2
        c = cell(quant=str(rng.choice(["Q4_0", "Q8_0", "Q2_K"])),
                 n_ctx=int(rng.choice([512, 2048, 8192])), threads=int(rng.choice([2, 4])),
                 type_k=str(rng.choice(["f16", "q8_0", "q4_0"])),
                 build=str(rng.choice(["b1", "b2"])),
                 engine=str(rng.choice(["llama-bench", "llama-cli"])),
                 sustained_s=60.0 if sustained else 0.0,
                 compute_device="vulkan" if on_gpu else "none",
                 n_gpu_layers=-1 if on_gpu else 0)
        for serial in rng.choice(["SER1", "SER2", "SER3"], size=int(rng.integers(1, 4)),
                                 replace=False):
            model = "Pixel Test" if serial != "SER3" else "Galaxy Test"
            for rep in range(int(rng.integers(1, 7))):
                records.append(trial(c, serial=str(serial), rep=rep + 10 * i,
                                     device_model=model, sustained_s=c.sustained_s,
                                     **_trial_fields(rng, gpu, sustained)))
    write(tmp_path, records)
    return read_table(tmp_path, "trials")


def _plain(value: Any) -> Any:
    """A value made comparable to the bit: floats as their hex (NaN as one token), with the
    type's name, so 1 and 1.0 differ."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,
                {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float | np.floating):
        return (type(value).__name__, "nan" if math.isnan(value) else float(value).hex())
    if value is None or value is pd.NA or value is pd.NaT:
        return repr(value)
    return (type(value).__name__, repr(value))


def _bounds(rng: np.random.Generator) -> dict[str, Any]:
    return {"available": [None, 3 * GIB, 6 * GIB][int(rng.integers(3))],
            "reserve": int(rng.integers(0, 3)) * (GIB // 2),
            "max_throttled": float(rng.choice([0.0, 0.5, 1.0])),
            "max_loss": [None, 0.01, 1.0][int(rng.integers(3))],
            "require_check": bool(rng.random() < 0.3)}


QUALITY = {("tiny", "Q8_0"): QualityScore("Q8_0", "ab" * 32, 0.004, 0.05, 0.97, 64, "F16"),
           ("tiny", "Q4_0"): QualityScore("Q4_0", "ab" * 32, 0.02, 0.2, 0.9, 64, "F16")}
KV = KvEvidence(tuple(
    KvCell(quant="Q8_0", sha256="ab" * 32, kv=kv, type_k=kv, type_v=kv, depth=depth,
           window=256, kl=kl, kl_max=kl * 4, top1=0.9, ppl=12.0, gen_tokens=256,
           repeated_4gram=0.1, longest_loop=3, text="t@1",
           build=EngineBuild("0.3.36", "0c1e570", "CPU", kv_rotation=True),
           measured_at="2026-12-04T10:00:00+00:00")
    for kv, depth, kl in (("q8_0", 512, 0.001), ("q8_0", 4096, 0.004))))


@pytest.mark.parametrize("seed", [1, 2])
def test_the_bulk_assessment_matches_the_per_candidate_one_field_by_field(
        tmp_path: Path, seed: int) -> None:
    frame = _store(tmp_path, seed)
    rng = np.random.default_rng(seed + 100)
    assessed = 0
    for device in ("SER1", "SER3", "Pixel Test", "nobody"):
        rows = _device_rows(frame, device, (), ())
        for objective in OBJECTIVES:
            b = _bounds(rng)
            args = {"available": b["available"], "reserve": b["reserve"],
                    "max_throttled": b["max_throttled"], "quality": QUALITY,
                    "max_loss": b["max_loss"], "kv": KV, "require_check": b["require_check"]}
            bulk = _assess_all(rows, objective, **args)
            old = reference._assess_all(rows, objective, **args)
            assert _plain(bulk) == _plain(old), (device, objective, b)
            assessed += len(old.seen)
    assert assessed > 100  # the stores hold real candidates to compare, not empty scopes


def _codes(found: Any) -> set[str]:
    return {r.reason_code for r in found.rejected} | {u.reason_code for u in found.unranked}


def test_the_random_stores_reach_every_rejection_and_unranked_reason(tmp_path: Path) -> None:
    """The comparison above is only as good as what the random stores exercise."""
    reached: set[str] = set()
    states: set[Any] = set()
    for seed in (1, 2, 3):
        rows = _device_rows(_store(tmp_path / str(seed), seed), "Pixel Test", (), ())
        for objective in OBJECTIVES:
            for require_check, max_loss, available in ((False, None, 3 * GIB),
                                                       (True, 0.01, 8 * GIB)):
                found = reference._assess_all(
                    rows, objective, available=available, reserve=0, max_throttled=0.5,
                    quality=QUALITY, max_loss=max_loss, kv=KV, require_check=require_check)
                reached |= _codes(found)
                states |= {(m.output[0], m.paging is not None, m.worst.accelerator_memory
                            if m.worst else None) for m in found.measured}
    assert {"oom_killed", "over_budget", "throttled", "quality", "quality_unknown",
            "output_unchecked", "burst_only", "sustained_only", "energy_not_measured",
            "energy_invalid"} <= reached
    assert {s[0] for s in states} >= {"checked", "error", "unchecked"}
    assert any(s[1] for s in states) and len({s[2] for s in states} - {None}) >= 2


@pytest.mark.parametrize("seed", [1, 2])
def test_whole_recommendations_match_the_per_candidate_ones(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = _store(tmp_path, seed)
    cases = [(device, objective, available, paging)
             for device in ("SER1", "Pixel Test", "SER3") for objective in OBJECTIVES
             for available, paging in ((None, False), (3 * GIB, True), (6 * GIB, False))]

    def answers() -> list[Any]:
        return [_plain(recommend(frame, device, reserve_bytes=GIB // 2,
                                 available_bytes=available, objective=objective,
                                 quality=QUALITY, kv_quality=KV,
                                 allow_paging=paging).to_json())
                for device, objective, available, paging in cases]

    bulk = answers()
    monkeypatch.setattr(rec_module, "_assess_all", reference._assess_all)
    monkeypatch.setattr(rec_module, "_pareto", reference._pareto)
    assert bulk == answers()
    assert sum(len(a["picks"]) for a in bulk) > 20


@pytest.mark.parametrize("seed", range(5))
def test_the_sorted_pareto_front_is_the_pairwise_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    points = [(("c", str(i), "e"), float(rng.integers(0, 8)) / 2, int(rng.integers(0, 6)))
              for i in range(int(rng.integers(0, 60)))]
    assert _pareto(points) == reference._pareto(points)


def test_a_limit_makes_only_the_best_picks_and_counts_them_all(tmp_path: Path) -> None:
    """The report asks for the few picks it shows (``limit``): the same first picks, the same
    rejections, notes and suggestion, and the count of every pick."""
    frame = _store(tmp_path, 3)
    seen = 0
    for device in ("SER1", "Pixel Test", "SER3"):
        for objective in OBJECTIVES:
            args = {"reserve_bytes": GIB // 2, "available_bytes": 3 * GIB,
                    "objective": objective, "quality": QUALITY, "kv_quality": KV}
            whole = recommend(frame, device, **args)
            best = recommend(frame, device, limit=2, **args)
            assert best.picks == whole.picks[:2]
            assert best.fitting == whole.fitting == len(whole.picks)
            assert (best.rejected, best.unranked, best.notes, best.suggestion) == (
                whole.rejected, whole.unranked, whole.notes, whole.suggestion)
            seen += len(whole.picks) > 2
    assert seen >= 3  # phones with more picks than the limit
