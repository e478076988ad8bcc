"""The two record types the results store holds: trials and samples.

Frozen dataclasses, one per row. Their fields are the store's columns, in order; the Parquet schema
in ``harness.store`` is derived from these annotations, so records and schema cannot drift apart.
Byte quantities end in ``_bytes``, rates in ``_tps`` (tokens per second), times say their unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from harness.cell import Cell


class Outcome(StrEnum):
    """How a trial ended: exactly one per trial, stored as its value (``Outcome.OK == "ok"``)."""

    OK = "ok"
    OOM_KILLED = "oom_killed"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    DEVICE_LOST = "device_lost"
    SKIPPED_INFEASIBLE = "skipped_infeasible"
    UNSUPPORTED = "unsupported"
    ENGINE_MISMATCH = "engine_mismatch"
    PUSH_FAILED = "push_failed"
    ABI_MISMATCH = "abi_mismatch"  # the build is of an ABI the phone cannot execute: not pushed
    PRECONDITION_FAILED = "precondition_failed"  # the phone failed the matrix's ``require``


OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)
#: Outcomes of a trial that ran (or tried to) and failed: what the report's "What changed", the
#: nightly alert and every other reader call a failure, in Outcome's order.
FAILED: tuple[str, ...] = tuple(o.value for o in (
    Outcome.OOM_KILLED, Outcome.CRASHED, Outcome.TIMEOUT, Outcome.DEVICE_LOST,
    Outcome.PUSH_FAILED))
#: Outcomes of a trial never attempted: the plan, the engine, the build's ABI or the phone's
#: state ruled it out before anything ran. Neither ok nor failed.
NOT_ATTEMPTED: tuple[str, ...] = tuple(o.value for o in (
    Outcome.SKIPPED_INFEASIBLE, Outcome.UNSUPPORTED, Outcome.ENGINE_MISMATCH,
    Outcome.ABI_MISMATCH, Outcome.PRECONDITION_FAILED))


@dataclass(frozen=True)
class TrialRecord:
    run_id: str
    trial_id: str  # f"{run_id}/{job_id}/{rep}", unique in the store
    job_id: str  # device serial + cell_id: one (device, cell) pair of a run
    cell_id: str
    config_id: str  # cell without build and engine: pairs builds (or engines) for comparisons
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
    # outcome and measurements (what a trial that never ran has not: None)
    outcome: str  # an Outcome's value
    error: str | None = None
    pp_tps: float | None = None
    tg_tps: float | None = None
    ttft_ms: float | None = None
    peak_pss_bytes: int | None = None
    peak_rss_bytes: int | None = None
    peak_swap_bytes: int | None = None
    vm_hwm_bytes: int | None = None
    peak_pss_anon_bytes: int | None = None
    peak_pss_file_bytes: int | None = None
    predicted_peak_bytes: int | None = None
    max_temp_c: float | None = None
    max_thermal_status: int | None = None
    throttled: bool = False
    cooldown_waited_s: float | None = None
    start_thermal_status: int | None = None
    start_temp_c: float | None = None
    battery_level: int | None = None
    battery_temp_c: float | None = None
    evidence: str | None = None  # lowmemorykiller line, signal, last stderr lines
    engine_record: str | None = None  # the engine's raw record (JSON text), kept as reported
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
    # why the cell's affinity/threads or its offload (the engine's log) did not take effect
    config_not_applied: str | None = None
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
    # added in schema 5 (older parts are migrated on read: they were all llama-bench's)
    engine: str | None = None  # the engine adapter that ran the cell (Engine.name)
    # added in schema 6 (older parts read them as null)
    valid: bool | None = None  # an ok trial passed the validity gates; None: not checked
    invalid_reason: str | None = None  # which gate failed, with its figures ("; "-joined)
    launched_at: datetime | None = None  # host clock just before the measured engine launch
    launch_uptime_s: float | None = None  # the phone's /proc/uptime at that launch (its clock)
    sustained_s: float | None = None  # the cell's sustained duration (None: a burst cell)
    sustained_reps: int | None = None  # back-to-back repetitions the sustained launch ran
    time_to_throttle_s: float | None = None  # lasting drop below 90% of the start (sustained.py)
    steady_state_ratio: float | None = None  # median of the last fifth / initial median
    sustained_tg_tps: float | None = None  # median generation rate of the last fifth
    energy_source: str | None = None  # power_supply, dumpsys or monitor:<name>
    energy_units: str | None = None  # units and sign detected, e.g. "current_now uA, ..."
    energy_valid: bool | None = None  # None: energy not measured
    energy_invalid_reason: str | None = None  # why no figure: charging, too coarse, ...
    idle_power_w: float | None = None  # measured just before the launch
    pp_power_w: float | None = None  # mean power above idle during prefill
    tg_power_w: float | None = None  # mean power above idle during decode
    pp_j_per_token: float | None = None  # joules per prompt token, idle subtracted
    tg_j_per_token: float | None = None  # joules per generated token, idle subtracted
    energy_samples: int | None = None  # power readings inside the prefill and decode windows
    pp_start_ms: int | None = None  # the prefill and decode windows, ms since launched_at
    pp_end_ms: int | None = None
    tg_start_ms: int | None = None
    tg_end_ms: int | None = None
    # added in schema 7 (older parts read them as null): the on-device sampler's cost
    sampler_cpu_s: float | None = None  # its CPU time on the phone, its children's included
    engine_cpu_s: float | None = None  # the engine's, at the sampler's last reading of it
    # added in schema 8 (older parts read them as null): models bigger than the phone's RAM
    memory_model: str | None = None  # a virtual phone's: cgroup (the kernel's) or simulated
    storage_read_mb_s: float | None = None  # the phone's storage read speed, where known
    load_mode: str | None = None  # how the engine was asked to load: mmap, none, dio, ...
    cache: str | None = None  # the cell's page-cache knob: cold, warm (None: as found)
    cache_resident_bytes: int | None = None  # the model file's page-cache residency at launch
    # why ``cache`` is "unknown": the knob's evict or read-in failed or did not take (schema 12)
    cache_error: str | None = None
    major_faults: int | None = None  # the engine's major page faults over the trial
    read_bytes: int | None = None  # bytes the engine read from storage (/proc/PID/io)
    read_bytes_per_token: float | None = None  # storage bytes per generated token, decoding
    major_faults_per_token: float | None = None
    load_ms: float | None = None  # the engine's load time (llama.cpp: until its first batch)
    paging: bool | None = None  # decoding read the weights from storage (see run.paging_measure)
    predicted_paging_tg_tps: float | None = None  # the planner's storage-bound decode speed
    # added in schema 9 (older parts read them as null: not checked): the output check
    # (harness.run.outputcheck), once per build, model file and phone, copied to each trial
    output_check: str | None = None  # match, mismatch, not_checked, error
    output_agreement: float | None = None  # share of the reference's greedy tokens reproduced
    output_agreed_tokens: int | None = None  # reference tokens reproduced before a difference
    output_reference_tokens: int | None = None  # tokens the reference generated
    output_reference: str | None = None  # what the continuation was compared with
    output_check_detail: str | None = None  # what differed, or why not checked / the error
    # added in schema 10 (older parts read it as null): when, in seconds since the launch, the
    # phone first reported throttling in the trial's samples (big cores capped, or a thermal
    # status of MODERATE and above); it locates a sustained series' lasting drop
    throttle_reported_s: float | None = None
    # added in schema 11 (older parts read them as null: the CPU, no offload, nothing read):
    # where the model ran (harness.knobs) and what the engine and the phone said about it
    compute_device: str | None = None  # the cell's device knob: none (CPU only), Vulkan0, ...
    n_gpu_layers: int | None = None  # the cell's offloaded layers (-1: all)
    gpu_info: str | None = None  # the engine's account of the build's GPUs (llama-bench gpu_info)
    devices_used: str | None = None  # the devices the engine says the test used
    gpu_driver: str | None = None  # the backend's own line about the device and its driver
    offloaded_layers: int | None = None  # layers the engine reports it put on the device
    model_layers: int | None = None  # of that many (llama.cpp counts the output layer)
    gpu_emulated: str | None = None  # e.g. "lavapipe": a software GPU, never a phone's speed
    # schema 16 renamed device_* to accelerator_* (the phone is the device): store.RENAMED
    accelerator_memory_bytes: int | None = None  # peak GPU/NPU memory the phone reported
    accelerator_memory_source: str | None = None  # where from, or "unreadable: <why>"
    host_memory_bytes: int | None = None  # peak process memory less its accelerator buffers
    device_reported_bytes: int | None = None  # llama.cpp's non-CPU buffers (model+KV+compute)
    predicted_accelerator_bytes: int | None = None  # the predictor's accelerator share
    predicted_host_bytes: int | None = None  # the predictor's host share
    max_gpu_temp_c: float | None = None  # the hottest GPU zone during the trial
    gpu_throttled: bool | None = None  # the GPU's clock was capped below its maximum
    gpu_unreadable: str | None = None  # why the GPU's nodes could not be read (None: read)
    # added in schema 13 (older parts read them as null: not read): the phone's swap-ins during
    # the trial (/proc/vmstat pswpin, every process's), which read_bytes also counts; paging is
    # decided on what is left (harness.run.paging_measure)
    swap_in_bytes: int | None = None
    swap_in_bytes_per_token: float | None = None  # while decoding
    # added in schema 14 (older parts read them as null: one repetition, llama.cpp's TTFT, no
    # figure of the engine's own): engines beyond llama.cpp (harness.engines)
    engine_aggregate_n: int | None = None  # the rates are the engine's summary over n runs
    pp_tps_sd: float | None = None  # the engine's own spread over those n (aggregates only)
    tg_tps_sd: float | None = None
    ttft_definition: str | None = None  # what ttft_ms counts (harness.engines.base.TTFT_*)
    engine_load_ms: float | None = None  # the engine's own load/init time, as it reported it
    engine_peak_bytes: int | None = None  # the engine's own peak memory figure
    model_file: str | None = None  # the model file's name as the engine was given it
    model_converted_from: str | None = None  # models.NAME.converted_from, for its own format
    # added in schema 15 (older parts read it as null): why ``paging`` is null for a trial that
    # decoded, with its figures: the phone's swap-ins (another process's too) decide the label
    paging_unknown: str | None = None
    # the values of the knobs declared in harness.knobs alone (no column of their own): JSON,
    # name -> value (None: every knob has its column; older parts read it as null)
    knobs: str | None = None
    # added in schema 15 (older parts read it as null: not measured): what a GPU build's drivers
    # hold in its process on this phone, CPU cells included (its --list-devices probe's VmHWM
    # less a CPU-only probe's; harness.engines.devices), part of predicted_host_bytes
    driver_host_bytes: int | None = None


class TrialIdentity(Protocol):
    """Who a trial is in the store (``harness.run.order.TrialSpec`` is one, ``TrialIds`` too)."""

    @property
    def run_id(self) -> str: ...
    @property
    def trial_id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def serial(self) -> str: ...
    @property
    def rep(self) -> int: ...


@dataclass(frozen=True)
class TrialIds:
    run_id: str
    trial_id: str
    job_id: str
    serial: str
    rep: int


@dataclass(frozen=True)
class DeviceMeta:
    """The phone a trial ran on, as the ``device_*`` columns (and ``cpu_emulation``,
    ``memory_model``, ``storage_read_mb_s``) hold it."""

    model: str | None = None
    manufacturer: str | None = None
    soc: str | None = None
    sdk: int | None = None
    ram_bytes: int | None = None
    abi: str | None = None  # ro.product.cpu.abi
    cpu_emulation: str | None = None
    memory_model: str | None = None  # a virtual phone's: cgroup or simulated
    storage_read_mb_s: float | None = None  # the phone's storage read speed, where known
    gpu_emulated: str | None = None  # a virtual phone's software GPU (e.g. "lavapipe")


@dataclass(frozen=True)
class BuildMeta:
    """The engine build that ran a trial (the ``build_*`` columns; ``build_id`` is the cell's)."""

    engine: str | None = None
    version: str | None = None
    commit: str | None = None
    abi: str | None = None


@dataclass(frozen=True)
class ModelMeta:
    """The model file a trial ran (``model_name`` and ``quant`` are the cell's)."""

    sha256: str | None = None
    n_params: int | None = None
    file_bytes: int | None = None
    file: str | None = None  # the file's name as the engine was given it (x.gguf, config.json)
    converted_from: str | None = None  # what an engine's own format was made from (matrix)


def new_trial(ids: TrialIdentity, cell: Cell, outcome: str, *,
              started_at: datetime | None = None, device: DeviceMeta | None = None,
              build: BuildMeta | None = None, model: ModelMeta | None = None,
              **measured: Any) -> TrialRecord:
    """The one way a trial row is made: identity from ``ids``, the cell's columns from ``cell``,
    device, build and model from their parts (unknown: None), and ``measured`` the rest.

    ``outcome`` must be an ``Outcome`` (or its value); ``started_at`` defaults to now. A keyword
    in ``measured`` overrides what the cell says (the trial runner stores the resolved CPU mask
    as ``affinity``).
    """
    device = device or DeviceMeta()
    build = build or BuildMeta()
    model = model or ModelMeta()
    columns: dict[str, Any] = {
        "run_id": ids.run_id, "trial_id": ids.trial_id, "job_id": ids.job_id,
        "cell_id": cell.cell_id, "config_id": cell.config_id, "rep": ids.rep,
        "started_at": started_at or datetime.now(UTC), "wall_s": None,
        "device_serial": ids.serial, "device_model": device.model,
        "device_manufacturer": device.manufacturer, "device_soc": device.soc,
        "device_sdk": device.sdk, "device_ram_bytes": device.ram_bytes,
        "build_id": cell.build, "build_engine": build.engine, "build_version": build.version,
        "build_commit": build.commit, "build_abi": build.abi,
        "model_sha256": model.sha256,
        "model_n_params": model.n_params, "model_file_bytes": model.file_bytes,
        "model_file": model.file, "model_converted_from": model.converted_from,
        **cell.row(),  # every knob of the configuration, as harness.labels reads them
        "outcome": Outcome(outcome).value,
        "device_abi": device.abi, "cpu_emulation": device.cpu_emulation,
        "memory_model": device.memory_model, "storage_read_mb_s": device.storage_read_mb_s,
        "gpu_emulated": device.gpu_emulated, "engine": cell.engine,
    }
    return TrialRecord(**(columns | measured))


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
    # added in schema 6 (older parts read them as null)
    power_w: float | None = None  # battery draw (positive: from the battery), idle included
    tg_tps: float | None = None  # a sustained trial's generation rate of the repetition ending here
    # added in schema 8: the engine's paging so far (cumulative since its start)
    major_faults: int | None = None
    read_bytes: int | None = None
    # added in schema 11: the GPU beside the CPU (None: no GPU node read)
    gpu_cur_khz: int | None = None  # kgsl gpuclk (Hz on the phone, stored in kHz)
    gpu_max_khz: int | None = None  # kgsl max_gpuclk: below the top clock when capped
    gpu_busy_pct: float | None = None  # kgsl gpu_busy_percentage
    gpu_temp_c: float | None = None  # the gpu thermal zone
    accelerator_memory_bytes: int | None = None  # the process's GPU memory (dumpsys / kgsl)
    # added in schema 13: the phone's swap-ins so far (cumulative, every process's)
    swap_in_bytes: int | None = None


@dataclass(frozen=True)
class EnergyRecord:
    """Energy of a trial from another source than the phone's gauge (an external power monitor,
    ``harness energy join``); where a trial has one, it replaces the trial's own energy columns.
    """

    run_id: str
    trial_id: str
    joined_at: datetime
    energy_source: str  # monitor:<name>
    energy_valid: bool
    energy_invalid_reason: str | None = None
    energy_units: str | None = None
    idle_power_w: float | None = None
    pp_power_w: float | None = None
    tg_power_w: float | None = None
    pp_j_per_token: float | None = None
    tg_j_per_token: float | None = None
    energy_samples: int | None = None


@dataclass(frozen=True)
class AdaptiveRecord:
    """Why an adaptive A/B comparison stopped (``adaptive:`` matrices, harness.run.adaptive):
    one row per run, phone, configuration and candidate build."""

    run_id: str
    serial: str
    config_id: str
    metric: str
    baseline_build: str
    candidate_build: str
    baseline_cell_id: str
    candidate_cell_id: str
    step: str  # regression, improvement, same (no change of that size), unstable (the cap)
    reason: str  # the rule's own sentence: where it stopped and on which bound
    n_baseline: int  # usable values of each side
    n_candidate: int
    repetitions: int  # trials each side ran (failed ones included)
    ratio: float | None  # candidate over baseline (trimmed log means)
    llr_regression: float | None
    llr_improvement: float | None
    effect: float
    alpha: float
    beta: float
    max_repetitions: int
    decided_at: datetime
