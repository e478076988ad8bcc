"""A realistic synthetic results store, written fast enough to test the report at farm scale.

Why it exists: the report, ``compare`` and ``history`` must be exercised on stores far larger than
a test run can make (a year of nights on a farm is a million trials and ten million samples), and
their tests need known answers (an injected regression, throttled trials, a few failures). Every
column is generated with numpy for one night at a time and written with pyarrow straight into the
store's layout and schema (``harness.store.SCHEMAS``), one trials part and one samples part per
night, so readers see exactly what ``harness run`` writes, only in larger part files.

The model of a trial is deliberately simple: throughput is a product of device speed, bits per
weight, context length, KV precision and build factors with lognormal noise; throttled trials run
about 30% slower; memory is weights + KV cache + compute buffers, measured a little above the
prediction; a small fraction of trials ends ``oom_killed``, ``crashed`` or ``timeout``.

Optional, all off by default (so a default store is what it always was, draw for draw): the
first ``sustained_configs`` configs also get one sustained trial per device, build and night,
with its throughput series in the samples (fast phones throttle part-way and settle lower);
``energy`` fills the energy columns (the first device's first config is always "charging", a
tenth of the other trials have too few power readings, the rest are valid) and the samples'
``power_w``; ``validity`` marks ok trials valid, a fraction ``invalid_rate`` of them invalid
with impossible speeds and ``invalid_reason``. These draw from their own generator.
``absent_last_night`` drops the last N devices' trials of the last night after they are drawn
(a phone that stopped reporting: missing data).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.store import SCHEMAS
from harness.units import GIB

BITS_PER_WEIGHT = {
    "Q2_K": 2.6, "Q3_K_M": 3.9, "Q4_0": 4.5, "Q4_K_M": 4.8, "Q5_K_M": 5.7, "Q6_K": 6.6,
    "Q8_0": 8.5, "F16": 16.0,
}
KV_BYTES = {"f16": 2.0, "q8_0": 1.0625, "q4_0": 0.5625}
_PHONES = (  # (model, manufacturer, soc, ram GiB, speed factor)
    ("Pixel 8", "Google", "Tensor G3", 8, 1.0),
    ("Galaxy S23", "samsung", "SM8550", 8, 1.25),
    ("Redmi Note 12", "Xiaomi", "SM6225", 6, 0.45),
    ("OnePlus 12", "OnePlus", "SM8650", 16, 1.4),
    ("Galaxy A54", "samsung", "Exynos 1380", 8, 0.6),
    ("Pixel 7a", "Google", "Tensor G2", 8, 0.85),
)
Schedule = Literal["sequential", "interleaved"]
ROW_GROUP_ROWS = 1_048_576  # rows per Parquet row group of a part file


@dataclass(frozen=True)
class SynthSpec:
    """Shape of the synthetic store.

    ``schedule``: ``sequential`` runs one build per night, the builds taking turns in contiguous
    blocks of nights (a nightly farm moving from one build to the next, so history sees a step);
    ``interleaved`` runs every build every night. Trials = devices × configs × reps × nights
    (× builds when interleaved); configs = quants × n_ctx × kv_types × threads.
    """

    devices: int = 3
    builds: tuple[str, ...] = ("b4100", "b4101")
    regressed_build: str | None = "b4101"
    regression: float = 0.08  # fractional tg_tps drop of the regressed build (pp drops half)
    quants: tuple[str, ...] = ("Q4_0", "Q4_K_M", "Q8_0")
    n_ctx: tuple[int, ...] = (512, 2048)
    kv_types: tuple[str, ...] = ("f16", "q8_0")
    threads: tuple[int, ...] = (4,)
    reps: int = 3
    nights: int = 6
    schedule: Schedule = "sequential"
    samples_per_trial: int = 10
    throttle_rate: float = 0.05
    fail_rate: float = 0.005  # oom_killed + crashed + timeout, besides one of each forced
    cv: float = 0.03
    device_names: tuple[str, ...] | None = None  # device_model overrides (hostile-name tests)
    model: str = "qwen2.5-1.5b-instruct"
    n_params: int = 1_540_000_000
    start: date = date(2026, 1, 5)
    seed: int = 7
    sustained_configs: int = 0  # the first N configs also run a sustained trial per night
    sustained_s: float = 120.0
    sustained_points: int = 20  # repetitions (series points) per sustained trial
    energy: bool = False
    charging_reason: str = "charging: USB power contaminates the reading"
    coarse_reason: str = "decode window 0.4 s holds 2 power readings (need 5)"
    validity: bool = False
    invalid_rate: float = 0.03
    invalid_reason: str = "tg_tps 2,400 tok/s above the plausible 500 for this model"
    absent_last_night: int = 0  # the last N devices run nothing on the last night (missing data)

    @property
    def configs(self) -> int:
        return len(self.quants) * len(self.n_ctx) * len(self.kv_types) * len(self.threads)

    @property
    def builds_per_night(self) -> int:
        return len(self.builds) if self.schedule == "interleaved" else 1

    @property
    def sustained_trials(self) -> int:
        return (self.devices * min(self.sustained_configs, self.configs) * self.nights
                * self.builds_per_night)

    @property
    def trials(self) -> int:
        per_night = self.devices * self.configs * self.reps
        return per_night * self.nights * self.builds_per_night + self.sustained_trials


@dataclass(frozen=True)
class SynthSummary:
    """What was written: counts the tests compare the report's data preparation against."""

    trials: int
    samples: int
    outcomes: dict[str, int]
    throttled: int
    files: int
    bytes: int
    run_ids: tuple[str, ...] = field(default_factory=tuple)
    sustained: int = 0  # sustained trials
    invalid: int = 0  # ok trials marked invalid (validity)
    energy_invalid: int = 0  # trials with energy_valid False


@dataclass(frozen=True)
class _Grid:
    """Per-config axes as arrays, indexed by config number."""

    quant: np.ndarray
    n_ctx: np.ndarray
    kv: np.ndarray
    threads: np.ndarray
    config_id: np.ndarray


def _grid(spec: SynthSpec) -> _Grid:
    q, c, k, t = np.meshgrid(
        np.arange(len(spec.quants)), np.arange(len(spec.n_ctx)), np.arange(len(spec.kv_types)),
        np.arange(len(spec.threads)), indexing="ij",
    )
    quant = np.asarray(spec.quants)[q.ravel()]
    n_ctx = np.asarray(spec.n_ctx, dtype=np.int64)[c.ravel()]
    kv = np.asarray(spec.kv_types)[k.ravel()]
    threads = np.asarray(spec.threads, dtype=np.int64)[t.ravel()]
    ids = np.asarray([
        f"{spec.model}:{qq}:c{cc}:{kk}:t{tt}" for qq, cc, kk, tt in zip(quant, n_ctx, kv, threads,
                                                                        strict=True)
    ])
    return _Grid(quant, n_ctx, kv, threads, ids)


def _predicted_bytes(spec: SynthSpec, grid: _Grid) -> np.ndarray:
    bpw = np.array([BITS_PER_WEIGHT.get(q, 5.0) for q in grid.quant])
    kv_bytes = np.array([KV_BYTES.get(k, 2.0) for k in grid.kv])
    weights = spec.n_params * bpw / 8
    kv_cache = grid.n_ctx * 28 * 2 * 256 * kv_bytes  # layers × (K, V) × kv width × bytes
    compute = 48e6 + 300e6 * grid.n_ctx / 4096
    return (weights + kv_cache + compute + 80e6).astype(np.int64)


@dataclass(frozen=True)
class _Night:
    """One night's trial rows: which device, config, build and repetition each row is."""

    dev: np.ndarray
    cfg: np.ndarray
    bld: np.ndarray
    rep: np.ndarray
    phones: list[tuple[str, str, str, int, float]]
    names: list[str]
    serials: np.ndarray
    ram: np.ndarray
    speed: np.ndarray
    run_id: str
    day0: datetime

    @property
    def n(self) -> int:
        return int(self.dev.size)


def _night_rows(spec: SynthSpec, grid: _Grid, night: int, builds: list[int]) -> _Night:
    d_n, c_n, r_n = spec.devices, grid.quant.size, spec.reps
    dev, cfg, bld, rep = (a.ravel() for a in np.meshgrid(
        np.arange(d_n), np.arange(c_n), np.asarray(builds), np.arange(r_n), indexing="ij"))
    phones = [_PHONES[i % len(_PHONES)] for i in range(d_n)]
    names = [spec.device_names[i % len(spec.device_names)] if spec.device_names else p[0]
             for i, p in enumerate(phones)]
    day = spec.start + timedelta(days=night)
    return _Night(
        dev=dev, cfg=cfg, bld=bld, rep=rep, phones=phones, names=names,
        serials=np.asarray([f"SYN{i:04d}" for i in range(d_n)]),
        ram=np.asarray([p[3] * GIB for p in phones], dtype=np.int64),
        speed=np.asarray([p[4] for p in phones]), run_id=f"night-{day:%Y%m%d}",
        day0=datetime.combine(day, datetime.min.time(), UTC))


@dataclass(frozen=True)
class _Speeds:
    throttled: np.ndarray
    slow: np.ndarray
    noise_tg: np.ndarray
    tg: np.ndarray
    pp: np.ndarray


def _speeds(spec: SynthSpec, grid: _Grid, rows: _Night, is_regressed: np.ndarray,
            rng: np.random.Generator) -> _Speeds:
    """Decode and prefill throughput of each row: device × bits × context × KV × threads ×
    build, throttled rows about 30% slower, lognormal noise."""
    n, cfg, speed = rows.n, rows.cfg, rows.speed[rows.dev]
    bpw = np.array([BITS_PER_WEIGHT.get(q, 5.0) for q in grid.quant])[cfg]
    ctx = grid.n_ctx[cfg]
    kv_q = (grid.kv[cfg] != "f16")
    thr_factor = np.minimum(grid.threads[cfg], 6) / 4.0
    throttled = rng.random(n) < spec.throttle_rate
    noise_tg = rng.lognormal(0.0, spec.cv, n)
    noise_pp = rng.lognormal(0.0, spec.cv, n)
    slow = np.where(throttled, 0.7, 1.0)
    tg = (speed * 60.0 / bpw * (1 - 0.04 * np.log2(ctx / 512)) * np.where(kv_q, 0.97, 1.0)
          * thr_factor ** 0.5 * np.where(is_regressed, 1 - spec.regression, 1.0) * slow
          * noise_tg)
    pp = (speed * 420.0 * np.where(np.char.startswith(grid.quant[cfg], "Q4_0"), 1.2, 1.0)
          * (1 - 0.06 * np.log2(ctx / 512)) * thr_factor * slow * noise_pp
          * np.where(is_regressed, 1 - spec.regression / 2, 1.0))
    return _Speeds(throttled, slow, noise_tg, tg, pp)


_FAILURES = (
    ("oom_killed", "killed by the low-memory killer",
     "lowmemorykiller: Kill 'llama-bench' (4242), uid 2000, oom_score_adj 0, to free {} kB"),
    ("crashed", "engine exited with signal 11 (SIGSEGV)",
     "ggml_backend_cpu: segmentation fault in ggml_vec_dot_q4_K_q8_K (peak {} kB)"),
    ("timeout", "no result within 900 s", "last stderr: llama_decode: n_past = {} kB"),
)


def _outcomes(spec: SynthSpec, rows: _Night, predicted: np.ndarray, peak_pss: np.ndarray,
              order: np.ndarray, force_failures: bool, rng: np.random.Generator,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(outcome, error, evidence) of each row: big cells on small phones fail more often."""
    n = rows.n
    outcome = np.full(n, "ok", dtype=object)
    pressure = np.clip(predicted / (rows.ram[rows.dev] * 0.55), 0, 2)
    fail = rng.random(n) < spec.fail_rate * pressure
    kinds = rng.choice(np.asarray(["oom_killed", "crashed", "timeout"], dtype=object), n,
                       p=[0.6, 0.25, 0.15])
    outcome[fail] = kinds[fail]
    if force_failures and n >= 3:
        outcome[order[:3]] = ["oom_killed", "crashed", "timeout"]
    error = np.full(n, None, dtype=object)
    evidence = np.full(n, None, dtype=object)
    for kind, err, ev in _FAILURES:
        hit = outcome == kind
        error[hit] = err
        evidence[hit] = [ev.format(v // 1024) for v in peak_pss[hit]]
    return outcome, error, evidence


def _thermals(grid: _Grid, rows: _Night, sp: _Speeds, rng: np.random.Generator,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(max temperature, max thermal status, wall seconds) of each row."""
    n, cfg, speed = rows.n, rows.cfg, rows.speed[rows.dev]
    ctx = grid.n_ctx[cfg]
    bpw = np.array([BITS_PER_WEIGHT.get(q, 5.0) for q in grid.quant])[cfg]
    max_temp = 39 + 4 * speed + 3 * (ctx / 4096) + rng.normal(0, 1.2, n)
    max_temp = np.where(sp.throttled, np.maximum(max_temp, 47) + rng.uniform(0, 4, n), max_temp)
    thermal = np.where(sp.throttled, 2 + (rng.random(n) < 0.3), (max_temp > 44).astype(np.int64))
    wall = 20 + 200 / speed * bpw / 4.5 * (ctx / 2048) ** 0.5 * np.where(sp.throttled, 1.4, 1)
    return max_temp, thermal, wall


def _join(*parts: object, sep: str) -> pa.Array:
    return pc.binary_join_element_wise(*(pa.array(p) for p in parts), sep)


def _identity_columns(spec: SynthSpec, grid: _Grid, rows: _Night, started: np.ndarray,
                      ) -> dict[str, object]:
    """The columns that say which trial a row is: ids, phone, build, model and knobs."""
    n, dev, cfg, bld, rep = rows.n, rows.dev, rows.cfg, rows.bld, rows.rep
    build_ids = np.asarray(spec.builds)
    # each build its own (made-up) llama.cpp commit, as tagged releases have
    commits = np.asarray([hashlib.sha1(b.encode()).hexdigest() for b in spec.builds])
    bpw = np.array([BITS_PER_WEIGHT.get(q, 5.0) for q in grid.quant])[cfg]
    serial = rows.serials[dev]
    return {
        "run_id": np.full(n, rows.run_id),
        "trial_id": _join(np.full(n, rows.run_id), serial, grid.config_id[cfg], build_ids[bld],
                          rep.astype(str), sep="/"),
        "job_id": _join(serial, grid.config_id[cfg], sep="/"),
        "cell_id": _join(grid.config_id[cfg], build_ids[bld], sep="@"),
        "config_id": grid.config_id[cfg], "rep": rep, "started_at": started,
        "device_serial": serial, "device_model": np.asarray(rows.names, dtype=object)[dev],
        "device_manufacturer": np.asarray([p[1] for p in rows.phones], dtype=object)[dev],
        "device_soc": np.asarray([p[2] for p in rows.phones], dtype=object)[dev],
        "device_sdk": np.full(n, 34), "device_ram_bytes": rows.ram[dev],
        "build_id": build_ids[bld], "build_engine": np.full(n, "llama.cpp"),
        "build_version": build_ids[bld], "build_commit": commits[bld],
        "build_abi": np.full(n, "arm64-v8a"), "model_name": np.full(n, spec.model),
        "model_sha256": np.full(n, "ab" * 32), "quant": grid.quant[cfg],
        "model_n_params": np.full(n, spec.n_params),
        "model_file_bytes": (spec.n_params * bpw / 8).astype(np.int64),
        "n_ctx": grid.n_ctx[cfg], "n_prompt": np.full(n, 256), "n_gen": np.full(n, 64),
        "n_depth": np.zeros(n, np.int64), "type_k": grid.kv[cfg], "type_v": grid.kv[cfg],
        "flash_attn": np.full(n, "auto"), "threads": grid.threads[cfg],
        "affinity": np.full(n, "big"), "mmap": np.ones(n, bool), "n_batch": np.full(n, 2048),
        "n_ubatch": np.full(n, 512),
    }


def _night_table(spec: SynthSpec, grid: _Grid, night: int, builds: list[int],
                 rng: np.random.Generator, force_failures: bool) -> tuple[pa.Table, pa.Table]:
    """Trials and samples of one night, every column a vectorised draw."""
    rows = _night_rows(spec, grid, night, builds)
    n, cfg = rows.n, rows.cfg
    spacing = min(20.0, 20 * 3600 / n)
    order = rng.permutation(n)  # A/B interleaved run order within the night
    started = np.datetime64(rows.day0.replace(tzinfo=None) + timedelta(hours=1), "us") + (
        order * spacing * 1e6).astype("timedelta64[us]")
    is_regressed = np.asarray(spec.builds)[rows.bld] == spec.regressed_build
    sp = _speeds(spec, grid, rows, is_regressed, rng)
    predicted = _predicted_bytes(spec, grid)[cfg]
    peak_pss = (predicted * rng.lognormal(0.02, 0.02, n)).astype(np.int64)
    outcome, error, evidence = _outcomes(spec, rows, predicted, peak_pss, order,
                                         force_failures, rng)
    ok = outcome == "ok"
    max_temp, thermal, wall = _thermals(grid, rows, sp, rng)
    f = lambda v: np.where(ok, v, np.nan)  # noqa: E731 - no measurement when the trial failed
    ok_pss = np.where(outcome == "timeout", peak_pss, np.where(ok, peak_pss, -1))
    columns: dict[str, object] = {
        **_identity_columns(spec, grid, rows, started), "wall_s": wall,
        "outcome": outcome, "error": error, "pp_tps": f(sp.pp), "tg_tps": f(sp.tg),
        "ttft_ms": f(256 / sp.pp * 1000),
        "peak_pss_bytes": pa.array(ok_pss, mask=ok_pss < 0),
        "peak_rss_bytes": pa.array((ok_pss * 1.06).astype(np.int64), mask=ok_pss < 0),
        "peak_swap_bytes": pa.array(np.zeros(n, np.int64), mask=ok_pss < 0),
        "predicted_peak_bytes": predicted, "max_temp_c": max_temp,
        "max_thermal_status": thermal, "throttled": sp.throttled,
        "cooldown_waited_s": rng.exponential(20, n), "start_thermal_status": np.zeros(n, np.int64),
        "start_temp_c": max_temp - 6, "battery_level": rng.integers(60, 100, n),
        "battery_temp_c": 30 + rng.normal(0, 1, n), "evidence": evidence,
    }
    trials = _as_table("trials", columns, n)
    samples = _samples(spec, trials, peak_pss, predicted, sp.throttled, max_temp, wall, rng)
    if not (spec.sustained_configs or spec.energy or spec.validity):
        return trials, samples
    extra = np.random.default_rng([spec.seed, night, 6])  # the default stream stays untouched
    if spec.sustained_configs:
        chosen = np.flatnonzero((cfg < spec.sustained_configs) & (rows.rep == 0))
        base_tg = sp.tg[chosen] / sp.slow[chosen] / sp.noise_tg[chosen]
        more_trials, more_samples = _sustained(spec, trials, chosen, base_tg,
                                               rows.speed[rows.dev[chosen]], rows.day0, extra)
        trials = pa.concat_tables([trials, more_trials])
        samples = pa.concat_tables([samples, more_samples])
    if spec.validity:
        trials = _validity(spec, trials, extra)
    if spec.energy:
        trials, samples = _energy(spec, trials, samples, extra)
    return trials, samples


def _set(table: pa.Table, name: str, values: object, mask: np.ndarray | None = None) -> pa.Table:
    """``table`` with column ``name`` replaced (``mask``: True where null)."""
    field_ = table.schema.field(name)
    array = pa.array(values, type=field_.type, mask=mask, from_pandas=True)
    return table.set_column(table.schema.get_field_index(name), field_, array)


def _series_figures(tps: np.ndarray, t_s: np.ndarray) -> tuple[float | None, float, float]:
    """(time to throttle, steady-state ratio, sustained rate) of one series, close to the
    runner's definitions: the initial median is that of the first max(3, 5%) points, the
    sustained rate the median of the last fifth, throttling the first point below 90% of the
    initial median (the synthetic series are smooth, so no confirmation window is needed)."""
    head = max(3, int(np.ceil(0.05 * tps.size)))
    initial = float(np.median(tps[:head]))
    last = float(np.median(tps[-max(1, tps.size // 5):]))
    below = np.flatnonzero(tps < 0.9 * initial)
    return (float(t_s[below[0]]) if below.size else None), last / initial, last


def _sustained(spec: SynthSpec, burst: pa.Table, chosen: np.ndarray, base_tg: np.ndarray,
               speed: np.ndarray, day0: datetime, rng: np.random.Generator,
               ) -> tuple[pa.Table, pa.Table]:
    """One sustained trial per chosen burst row (its device, config and build): the throughput
    of each repetition, falling to about 70% after a throttle onset on phones of speed >= 1."""
    n, p = chosen.size, spec.sustained_points
    trials = burst.take(pa.array(chosen))
    suffix = f":s{spec.sustained_s:g}"
    config = pc.binary_join_element_wise(trials.column("config_id"), pa.array([suffix] * n), "")
    build = trials.column("build_id")
    run_id = trials.column("run_id")
    serial = trials.column("device_serial")
    t_s = np.arange(1, p + 1) * spec.sustained_s / p
    onset = rng.uniform(0.3, 0.6, n) * spec.sustained_s
    hot = speed >= 1.0
    drop = np.where(hot[:, None] & (t_s[None, :] > onset[:, None]),
                    1 - 0.3 * (1 - np.exp(-(t_s[None, :] - onset[:, None]) / 15)), 1.0)
    tps = base_tg[:, None] * drop * rng.lognormal(0.0, 0.01, (n, p))
    stats = [_series_figures(row, t_s) for row in tps]
    throttle = np.array([np.nan if s[0] is None else s[0] for s in stats])
    throttled = ~np.isnan(throttle)
    started = np.datetime64(day0.replace(tzinfo=None) + timedelta(hours=22), "us") + (
        np.arange(n) * spec.sustained_s * 1.5e6).astype("timedelta64[us]")
    ids = pc.binary_join_element_wise(run_id, serial, config, build, pa.array(["0"] * n), "/")
    updates: dict[str, object] = {
        "trial_id": ids, "config_id": config,
        "job_id": pc.binary_join_element_wise(serial, config, "/"),
        "cell_id": pc.binary_join_element_wise(config, build, "@"),
        "started_at": started, "launched_at": started, "wall_s": np.full(n, spec.sustained_s + 8),
        "outcome": np.full(n, "ok", dtype=object), "error": np.full(n, None, dtype=object),
        "evidence": np.full(n, None, dtype=object), "tg_tps": tps.mean(axis=1),
        "throttled": throttled, "max_thermal_status": np.where(throttled, 3, 1),
        "max_temp_c": np.where(throttled, 48.0, 42.0) + rng.normal(0, 0.5, n),
        "sustained_s": np.full(n, spec.sustained_s), "sustained_reps": np.full(n, p),
        "time_to_throttle_s": throttle,
        "steady_state_ratio": np.array([s[1] for s in stats]),
        "sustained_tg_tps": np.array([s[2] for s in stats]),
    }
    for name, values in updates.items():
        if isinstance(values, pa.ChunkedArray | pa.Array):
            field_ = trials.schema.field(name)
            trials = trials.set_column(trials.schema.get_field_index(name), field_,
                                       values.cast(field_.type))
        else:
            arr = np.asarray(values)
            trials = _set(trials, name, arr, np.isnan(arr) if arr.dtype.kind == "f" else None)
    idx = np.repeat(np.arange(n), p)
    peak = np.asarray(trials.column("peak_pss_bytes").fill_null(0))[idx]
    hot_point = (np.tile(t_s, n) > np.repeat(onset, p)) & hot[idx]
    columns: dict[str, object] = {
        "run_id": trials.column("run_id").take(pa.array(idx)),
        "trial_id": trials.column("trial_id").take(pa.array(idx)),
        "t_ms": (np.tile(t_s, n) * 1000).astype(np.int64) + 5000,
        "pss_bytes": peak, "rss_bytes": (peak * 1.06).astype(np.int64),
        "thermal_status": np.where(hot_point, 3, 1), "max_temp_c": 40 + 8 * hot_point,
        "source": np.full(idx.size, "smaps_rollup"), "tg_tps": tps.ravel(),
    }
    return trials, _as_table("samples", columns, idx.size)


def _validity(spec: SynthSpec, trials: pa.Table, rng: np.random.Generator) -> pa.Table:
    """Ok trials valid, a fraction ``invalid_rate`` invalid with an impossible speed."""
    ok = np.asarray(pc.equal(trials.column("outcome"), "ok"))
    bad = ok & (rng.random(trials.num_rows) < spec.invalid_rate)
    tg = np.asarray(trials.column("tg_tps").to_numpy(zero_copy_only=False), dtype=np.float64)
    trials = _set(trials, "tg_tps", np.where(bad, tg * 40, tg), np.isnan(tg))
    trials = _set(trials, "valid", ok & ~bad, ~ok)
    return _set(trials, "invalid_reason", _text_where(bad, spec.invalid_reason), ~bad)


def _text_where(mask: np.ndarray, text: str, into: np.ndarray | None = None) -> np.ndarray:
    """An object array holding ``text`` where ``mask`` is True (``into``'s values, or None,
    elsewhere)."""
    out = np.full(mask.size, None, dtype=object) if into is None else into.copy()
    out[mask] = text
    return out


def _energy(spec: SynthSpec, trials: pa.Table, samples: pa.Table,
            rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    """Energy of every ok trial: valid, charging (the first device's first config) or too few
    readings (a tenth of the rest); the samples' battery draw of the measured trials."""
    n = trials.num_rows
    ok = np.asarray(pc.equal(trials.column("outcome"), "ok"))
    serial = np.asarray(trials.column("device_serial").to_pylist(), dtype=object)
    config = np.asarray(trials.column("config_id").to_pylist(), dtype=object)
    first = str(config[0]).split(":s")[0] if n else ""
    charging = ok & (serial == "SYN0000") & np.array([str(c).split(":s")[0] == first
                                                      for c in config], dtype=bool)
    coarse = ok & ~charging & (rng.random(n) < 0.1)
    valid = ok & ~charging & ~coarse
    tg = np.asarray(trials.column("tg_tps").to_numpy(zero_copy_only=False), dtype=np.float64)
    pp = np.asarray(trials.column("pp_tps").to_numpy(zero_copy_only=False), dtype=np.float64)
    idle = rng.uniform(0.6, 1.0, n)
    tg_w = 1.6 * rng.lognormal(0.0, 0.08, n)
    pp_w = 3.2 * rng.lognormal(0.0, 0.08, n)
    reason = _text_where(charging, spec.charging_reason, _text_where(coarse, spec.coarse_reason))
    numbers = {"idle_power_w": idle, "tg_power_w": tg_w, "pp_power_w": pp_w,
               "tg_j_per_token": tg_w / tg, "pp_j_per_token": pp_w / pp}
    for name, values in numbers.items():
        keep = ok if name == "idle_power_w" else valid  # idle is read even when charging
        trials = _set(trials, name, np.where(keep, values, np.nan), ~keep)
    texts = {"energy_source": "power_supply",
             "energy_units": "current_now uA, negative while discharging; voltage_now uV"}
    for name, text in texts.items():
        trials = _set(trials, name, _text_where(ok, text), ~ok)
    trials = _set(trials, "energy_valid", valid, ~ok)
    trials = _set(trials, "energy_invalid_reason", reason, ~(charging | coarse))
    trials = _set(trials, "energy_samples", np.where(valid, 24, 2), ~ok)
    where = np.asarray(pc.index_in(samples.column("trial_id"), trials.column("trial_id")))
    draw = np.where(ok, idle + tg_w, np.nan)[where]
    return trials, _set(samples, "power_w", draw, np.isnan(draw))


def _without_devices(spec: SynthSpec, trials: pa.Table, samples: pa.Table
                     ) -> tuple[pa.Table, pa.Table]:
    """The night without the trials (and samples) of the last ``absent_last_night`` devices;
    filtered after drawing, so every other number of the store is unchanged."""
    gone = [f"SYN{i:04d}" for i in range(max(0, spec.devices - spec.absent_last_night),
                                          spec.devices)]
    keep = pc.invert(pc.is_in(trials.column("device_serial"), pa.array(gone)))
    trials = trials.filter(keep)
    return trials, samples.filter(pc.is_in(samples.column("trial_id"), trials.column("trial_id")))


def _as_table(name: str, columns: dict[str, object], n: int) -> pa.Table:
    schema = SCHEMAS[name]
    arrays = []
    for f in schema:
        value = columns.get(f.name)
        if value is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(value, pa.Array | pa.ChunkedArray):
            arrays.append(value.cast(f.type))
        else:
            arr = np.asarray(value)
            mask = None
            if arr.dtype.kind == "f" and pa.types.is_floating(f.type):
                mask = np.isnan(arr)
            arrays.append(pa.array(arr, type=f.type, mask=mask, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)


def _samples(spec: SynthSpec, trials: pa.Table, peak: np.ndarray, predicted: np.ndarray,
             throttled: np.ndarray, max_temp: np.ndarray, wall: np.ndarray,
             rng: np.random.Generator) -> pa.Table:
    """A thermal and memory timeline per trial: memory ramps to its peak, heat builds up."""
    s = spec.samples_per_trial
    n = trials.num_rows
    idx = np.repeat(np.arange(n), s)
    frac = np.tile(np.linspace(0.0, 1.0, s), n)
    pss = (peak[idx] * (0.25 + 0.75 * (1 - np.exp(-6 * frac)) / (1 - np.exp(-6)))).astype(np.int64)
    start_temp = max_temp[idx] - 6
    temp = start_temp + (max_temp[idx] - start_temp) * frac + rng.normal(0, 0.2, idx.size)
    hot = throttled[idx] & (frac >= 0.5)
    status = np.where(hot, 2, 0) + (frac > 0.8) * hot
    big_max = np.full(idx.size, 3_000_000)
    columns: dict[str, object] = {
        "run_id": trials.column("run_id").take(pa.array(idx)),
        "trial_id": trials.column("trial_id").take(pa.array(idx)),
        "t_ms": (frac * wall[idx] * 1000).astype(np.int64),
        "pss_bytes": pss, "rss_bytes": (pss * 1.06).astype(np.int64),
        "swap_bytes": np.zeros(idx.size, np.int64),
        "pss_anon_bytes": (pss * 0.3).astype(np.int64),
        "pss_file_bytes": (pss * 0.7).astype(np.int64),
        "thermal_status": status, "max_temp_c": temp,
        "big_cur_khz": np.where(hot, 1_800_000, 3_000_000), "big_max_khz": big_max,
        "battery_level": np.full(idx.size, 80), "battery_temp_c": 30 + frac * 2,
        "source": np.full(idx.size, "smaps_rollup"),
    }
    del predicted
    return _as_table("samples", columns, idx.size)


def _write(root: Path, name: str, table: pa.Table, run_id: str, day: date) -> Path:
    folder = root / name / f"date={day:%Y-%m-%d}"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"part-{run_id}-000000000000-{uuid.uuid4().hex[:8]}"
    tmp, final = folder / f".{stem}.parquet.tmp", folder / f"{stem}.parquet"
    if name == "trials":  # a row group per phone: a read of one phone decodes only its rows
        with pq.ParquetWriter(tmp, table.schema, compression="snappy") as writer:
            for start, length in _runs(table.column("device_serial")):
                writer.write_table(table.slice(start, length))
    else:
        pq.write_table(table, tmp, compression="snappy", row_group_size=ROW_GROUP_ROWS)
    os.replace(tmp, final)
    return final


def _runs(column: pa.ChunkedArray) -> list[tuple[int, int]]:
    """(start, length) of each run of equal values in ``column``."""
    values = column.to_numpy(zero_copy_only=False)
    if not len(values):
        return []
    edges = [0, *(np.flatnonzero(values[1:] != values[:-1]) + 1).tolist(), len(values)]
    return [(a, b - a) for a, b in pairwise(edges)]


def write_synthetic_store(root: Path, spec: SynthSpec | None = None, *,
                          only_nights: range | None = None) -> SynthSummary:
    """Write ``spec``'s store under ``root`` (which may already hold other runs); deterministic.

    ``only_nights`` writes those nights only (the others are drawn and dropped, so every night
    is the same draw as in the whole store): a store written with ``range(0, N - 1)`` and then
    ``range(N - 1, N)`` is the store of N nights, one night late (the site's incremental bench).
    The summary counts what was written.
    """
    spec = spec or SynthSpec()
    if spec.regressed_build is not None and spec.regressed_build not in spec.builds:
        raise ValueError(f"regressed_build {spec.regressed_build!r} is not one of {spec.builds}")
    rng = np.random.default_rng(spec.seed)
    grid = _grid(spec)
    outcomes: Counter[str] = Counter()
    trials_n = samples_n = throttled = files = size = sustained = invalid = energy_invalid = 0
    runs = []
    for night in range(spec.nights):
        if spec.schedule == "interleaved":
            builds = list(range(len(spec.builds)))
        else:
            builds = [night * len(spec.builds) // spec.nights]
        trials, samples = _night_table(spec, grid, night, builds, rng, force_failures=night == 0)
        if spec.absent_last_night and night == spec.nights - 1:
            trials, samples = _without_devices(spec, trials, samples)
        if only_nights is not None and night not in only_nights:
            continue
        day = spec.start + timedelta(days=night)
        run_id = trials.column("run_id")[0].as_py()
        runs.append(run_id)
        for name, table in (("samples", samples), ("trials", trials)):
            size += _write(root, name, table, run_id, day).stat().st_size
            files += 1
        outcomes.update(trials.column("outcome").to_pylist())
        throttled += int(pc.sum(trials.column("throttled")).as_py() or 0)
        trials_n += trials.num_rows
        samples_n += samples.num_rows
        sustained += int(pc.sum(pc.is_valid(trials.column("sustained_s"))).as_py() or 0)
        invalid += int(pc.sum(pc.equal(trials.column("valid"), False)).as_py() or 0)
        energy_invalid += int(pc.sum(pc.equal(trials.column("energy_valid"),
                                              False)).as_py() or 0)
    return SynthSummary(trials_n, samples_n, dict(outcomes), throttled, files, size, tuple(runs),
                        sustained, invalid, energy_invalid)
