"""The two record types the results store holds: trials and samples.

Frozen dataclasses, one per row. Their fields are the store's columns, in order; the Parquet schema
in ``harness.store`` is derived from these annotations, so records and schema cannot drift apart.
Byte quantities end in ``_bytes``, rates in ``_tps`` (tokens per second), times say their unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

OUTCOMES = (
    "ok",
    "oom_killed",
    "crashed",
    "timeout",
    "device_lost",
    "skipped_infeasible",
    "unsupported",
    "engine_mismatch",
    "push_failed",
    "abi_mismatch",  # the build is of an ABI the phone cannot execute: refused before the push
    "precondition_failed",  # the phone did not meet the matrix's ``require`` (e.g. battery saver)
)


@dataclass(frozen=True)
class TrialRecord:
    run_id: str
    trial_id: str  # f"{run_id}/{job_id}/{rep}", unique in the store
    job_id: str  # device serial + cell_id: one (device, cell) pair of a run
    cell_id: str
    config_id: str  # cell without the build: pairs builds for comparisons
    rep: int
    started_at: datetime
    wall_s: float | None
    # device
    device_serial: str
    device_model: str | None
    device_manufacturer: str | None
    device_soc: str | None
    device_sdk: int | None
    device_ram_bytes: int | None
    # build
    build_id: str
    build_engine: str | None
    build_version: str | None
    build_commit: str | None
    build_abi: str | None
    # model
    model_name: str
    model_sha256: str | None
    quant: str
    model_n_params: int | None
    model_file_bytes: int | None
    # cell
    n_ctx: int
    n_prompt: int
    n_gen: int
    n_depth: int
    type_k: str
    type_v: str
    flash_attn: str
    threads: int
    affinity: str
    mmap: bool
    n_batch: int
    n_ubatch: int
    # outcome and measurements
    outcome: str
    error: str | None
    pp_tps: float | None
    tg_tps: float | None
    ttft_ms: float | None
    peak_pss_bytes: int | None
    peak_rss_bytes: int | None
    peak_swap_bytes: int | None
    vm_hwm_bytes: int | None
    peak_pss_anon_bytes: int | None
    peak_pss_file_bytes: int | None
    predicted_peak_bytes: int | None
    max_temp_c: float | None
    max_thermal_status: int | None
    throttled: bool
    cooldown_waited_s: float | None
    start_thermal_status: int | None
    start_temp_c: float | None
    battery_level: int | None
    battery_temp_c: float | None
    evidence: str | None  # lowmemorykiller line, signal, last stderr lines
    engine_record: str | None  # the engine's raw record (JSON text), kept as reported
    # added in schema 2 (older parts read them as null)
    device_abi: str | None = None  # ro.product.cpu.abi
    cpu_emulation: str | None = None  # e.g. "qemu-aarch64": an emulated CPU, not a phone's speed
    # added in schema 3 (older parts read them as null)
    oom_signals: str | None = None  # memory evidence that fired, comma-separated (OOM_SIGNALS)
    boot_id: str | None = None  # /proc/sys/kernel/random/boot_id when the trial started
    boot_id_changed: bool | None = None  # the phone rebooted during the trial (device_lost only)
    start_mem_available_bytes: int | None = None  # /proc/meminfo MemAvailable at the start
    applied_affinity: str | None = None  # CPUs the engine's threads were allowed, e.g. "4-7"
    affinity_applied: bool | None = None  # applied within the requested mask; None: none asked
    threads_seen: int | None = None  # most threads the engine process had at once
    config_not_applied: str | None = None  # why the cell's affinity/threads did not take effect
    cooldown_source: str | None = None  # what the cooldown gate decided on (COOLDOWN_SOURCES)
    cooldown_unmet: str | None = None  # why the gate was still not satisfied when it gave up
    screen_on: bool | None = None  # pre-flight, before the cooldown gate
    stay_awake: bool | None = None
    charging: bool | None = None  # battery status "charging"
    charge_source: str | None = None  # none, ac, usb, wireless, dock
    battery_saver: bool | None = None
    doze_state: str | None = None  # deep idle state (ACTIVE ... IDLE)
    unreadable: str | None = None  # "thermal_zone1/temp: Permission denied; ...", once a trial
    # added in schema 4 (older parts read them as null)
    swa_full: bool | None = None  # full-size cache for sliding-window layers (cell knob)
    predicted_kv_bytes: int | None = None  # the predictor's KV term for this cell
    kv_reported_bytes: int | None = None  # llama.cpp's own "llama_kv_cache: size" lines, summed
    repack_reported_bytes: int | None = None  # llama.cpp's CPU_REPACK model buffer
    compute_reported_bytes: int | None = None  # llama.cpp's CPU compute buffer (reserved)


@dataclass(frozen=True)
class SampleRecord:
    run_id: str
    trial_id: str
    t_ms: int  # since the trial's engine process started
    pss_bytes: int | None
    rss_bytes: int | None
    swap_bytes: int | None
    pss_anon_bytes: int | None
    pss_file_bytes: int | None
    thermal_status: int | None
    max_temp_c: float | None
    big_cur_khz: int | None
    big_max_khz: int | None
    battery_level: int | None
    battery_temp_c: float | None
    source: str | None  # which reader produced the memory numbers (smaps_rollup, status, dumpsys)
