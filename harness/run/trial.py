"""One trial on one device: pre-flight, gate, launch, sample, collect, classify.

The engine runs in the foreground of one adb shell (``harness.run.watch``). Before it, one
reading of the phone's conditions (``harness.run.preflight``) is checked against the run's
requirements and polled by the cooldown gate; after it, one read collects the watcher's files,
the lmkd lines and the memory pressure the trial left, and ``classify`` decides the outcome from
that evidence. A trial whose device went away is explained later, once it is back
(``explain_loss``: did it reboot?).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness.android.battery import is_charging, parse_battery
from harness.android.gpumem import parse_gpumem
from harness.android.kernel import parse_boot_id, parse_memory_pressure, parse_uptime
from harness.android.lmkd import parse_lmkd_kill
from harness.android.meminfo import parse_meminfo
from harness.android.readerrors import parse_read_errors
from harness.artifacts.devicetools import pagecache_command, parse_residency
from harness.cell import Cell
from harness.device.base import Device
from harness.engines.base import (
    TTFT_PROMPT,
    Engine,
    EngineOutput,
    Measurement,
    affinity_mask,
    output_file,
)
from harness.engines.devices import Capability, device_problem
from harness.engines.llamalog import EngineMemoryLog, parse_memory_log
from harness.errors import DeviceError, EngineError, HarnessError, NotRunError
from harness.knobs import CPU_DEVICE
from harness.matrix import EnergyPolicy, Requirements
from harness.paging_predict import maps_weights
from harness.records import (
    BuildMeta,
    DeviceMeta,
    ModelMeta,
    Outcome,
    SampleRecord,
    TrialRecord,
    new_trial,
)
from harness.run import energy as power
from harness.run import ondevice, paging_measure, sustained
from harness.run.affinity import AffinityCheck, check_applied, parse_readback
from harness.run.cooldown import CooldownPolicy, GateResult, wait_until_ready
from harness.run.deploy import DEVICE_ROOT
from harness.run.laps import Laps
from harness.run.launchfacts import ALWAYS, Idle, Timing, headline, measured, rep_seconds
from harness.run.offload import (
    accelerator_memory,
    engine_offload,
    gpu_throttled,
    offload_not_applied,
)
from harness.run.ondevice import Tick
from harness.run.order import TrialSpec
from harness.run.outcome import Observation, Verdict, classify
from harness.run.paging_measure import Point
from harness.run.preflight import (
    BOOT_ID,
    Baseline,
    Conditions,
    conditions_command,
    conditions_from_output,
    lmkd_lines,
    rebooted,
    unmet_requirement,
)
from harness.run.probe import split_sections, state_command, state_from_output
from harness.run.state import (
    DeviceState,
    hottest,
    peak,
    throttled_during,
    worst_status,
)
from harness.run.watch import (
    dumpsys_memory,
    dumpsys_unreadable,
    launch_command,
    watcher_memory,
    watcher_threads,
)
from harness.units import KIB

__all__ = [  # the launch line and its readers live in harness.run.watch; kept importable here
    "TrialContext", "TrialPolicy", "TrialRunner", "dumpsys_memory", "launch_command",
    "watcher_memory",
]

CALIBRATION_REPS = 3  # a sustained cell's calibration launch: its fastest repetition but
# the first (which may still fill caches) counts, so a host busier while calibrating than
# while measuring makes the launch longer than its duration, never shorter
SUSTAINED_OVERRUN = 5  # a sustained launch may take this many times its duration (throttled)
MAX_UNREADABLE = 12  # reasons kept per trial (a phone can deny dozens of thermal zones)
GPU_DUMPSYS_S = 1.0  # a device cell's dumpsys meminfo, on phones without kgsl nodes
ENGINE_FILE = "engine_file"  # the section of the after-read holding the engine's own file
CALIBRATION_MARK = "@@harness:calibration-file"
TAIL_LINES = 8  # the last lines of the output kept as a failed trial's evidence
# The after-read's reading of the phone's conditions serves as the next trial's pre-flight
# reading (and the gate's first poll) when that trial starts within this many seconds with
# nothing run on the phone in between (the worker says so: ``forget_reading``); the gate itself
# polls every 2 s
REUSE_S = 1.0
EVIDENCE_ERRORS = "evidence_errors"  # the after-read's section of its evidence reads' stderr


@dataclass(frozen=True)
class TrialContext:
    """Everything about a trial that is not the cell: where things are, what they are."""

    engine: Engine
    binary: str  # engine binary on the device
    lib_dir: str | None  # LD_LIBRARY_PATH on the device
    model: str  # model file on the device
    cpu_mask: str | None  # affinity resolved against the device's cores
    big_cpu: int  # a cpu of the biggest cluster, for frequency readings
    memory_limit_bytes: int | None
    predicted_peak_bytes: int | None
    device_meta: DeviceMeta
    build_meta: BuildMeta
    model_meta: ModelMeta
    predicted_kv_bytes: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # more of the engine's environment
    pagecache: str | None = None  # the page-cache tool on the device (devicetools), if pushed
    prompt_file: str | None = None  # a prompt of n_prompt tokens on the device, if asked
    predicted_paging_tg_tps: float | None = None  # the plan's storage-bound decode speed
    capability: Capability | None = None  # the build's devices on this phone (None: not asked)
    predicted_accelerator_bytes: int | None = None  # the predictor's split of the peak
    predicted_host_bytes: int | None = None  # with driver_host_bytes
    driver_host_bytes: int | None = None  # the build's drivers on this phone (its probe)


@dataclass(frozen=True)
class TrialPolicy:
    cooldown: CooldownPolicy
    timeout_s: float
    sample_interval_s: float = 0.5  # <= 0: no sampling at all (to measure its cost)
    fast_start_s: float = 2.0  # sample quickly at first: short trials still get samples
    state_interval_s: float = 2.0
    # the framework's thermal status (dumpsys thermalservice, a fork on the phone) during the
    # trial; 0: only before and after it (throttling still shows as capped clocks meanwhile)
    status_interval_s: float = 0.0
    dumpsys_interval_s: float = 0.0  # dumpsys meminfo <pid> during the trial; 0: never
    throttle_status: int = 1  # a status above this during the trial marks it throttled
    require: Requirements = field(default_factory=Requirements)
    energy: EnergyPolicy = field(default_factory=EnergyPolicy)


@dataclass(frozen=True)
class Findings:
    """What a trial learnt beyond the engine's numbers (the schema-3 columns)."""

    conditions: Conditions | None = None  # the last reading before the launch
    gate: GateResult | None = None
    applied: AffinityCheck | None = None
    unreadable: tuple[str, ...] = ()
    engine_log: EngineMemoryLog | None = None  # llama.cpp's own memory figures (schema 4)
    measured: Mapping[str, Any] = field(default_factory=dict)  # schema-6 columns, computed


@dataclass(frozen=True)
class _Ran:
    """How one launch of the engine went, as the host saw it."""

    exit_code: int | None
    stdout: str
    stderr: str
    lost: bool  # the transport failed (not our watchdog): the device was lost mid-trial
    timed_out: bool
    wall: float
    launched_at: datetime


@dataclass
class _After:
    """What the launch left on the phone, read once the engine is gone."""

    ticks: list[Tick] = field(default_factory=list)
    pid: int | None = None
    after: dict[str, str] = field(default_factory=dict)  # the sections of _after_command
    errors: str = ""  # its stderr: the files it could not read
    reasons: dict[str, None] = field(default_factory=dict)  # why dumpsys said nothing
    sampled: ondevice.Sampled = field(default_factory=ondevice.Sampled)
    gone: bool = False  # the device went away before its evidence could be read


@dataclass(frozen=True)
class _Started:
    """What ``explain_loss`` needs of a trial whose device went away."""

    trial_id: str
    workdir: str
    baseline: Baseline
    memory_limit_bytes: int | None


def _trial_dir(spec: TrialSpec) -> str:
    digest = hashlib.sha256(spec.trial_id.encode()).hexdigest()[:16]
    return f"{DEVICE_ROOT}/trials/{digest}"


def _runs_known(engine: Engine, measurements: list[Measurement], reps: int,
                ) -> list[Measurement]:
    """A tool that prints only its means (MNN's ``mean ± sd``) does not print over how many
    runs: the harness asked for ``reps`` of them, so that is the aggregate's n."""
    if not getattr(engine, "aggregate_only", False):
        return measurements
    return [m if m.aggregate_n is not None else dataclasses.replace(m, aggregate_n=reps)
            for m in measurements]


def _argv(ctx: TrialContext, cell: Cell) -> list[str]:
    """The engine's command line; a prompt file only to an engine that asked for one."""
    if ctx.prompt_file is None:
        return ctx.engine.argv(cell, ctx.binary, ctx.model, ctx.cpu_mask)
    argv: Any = ctx.engine.argv  # the generic engine's argv takes the prompt file's path
    return list(argv(cell, ctx.binary, ctx.model, ctx.cpu_mask, prompt_file=ctx.prompt_file))


def _tail(stderr: str, output: EngineOutput, parsed: bool) -> str:
    """A failed trial's evidence: stderr's last lines; with nothing parsed, also the last lines
    of stdout and of the engine's file, labelled (what the adapter could not read)."""
    tail = "\n".join(stderr.strip().splitlines()[-TAIL_LINES:])
    if parsed:
        return tail
    rest = EngineOutput(output.stdout, "", output.file).tail(TAIL_LINES)
    return "\n".join(part for part in (tail, rest) if part)


def _check_engine_report(records: Sequence[Any], spec: TrialSpec) -> str | None:
    """The engine's own account of what it ran, against the cell; a difference is a mismatch.

    Engines beyond llama.cpp report the tokens they processed (``prompt_tokens``,
    ``generated_tokens``): a prompt of another length, or a generation that stopped early (an
    end-of-sequence token), measured other work than the cell's. Where the model ran is not
    read here: llama-bench's ``n_gpu_layers``/``devices`` only echo its flags, so the log is
    checked instead (``harness.run.offload.offload_not_applied``, into ``config_not_applied``).
    """
    cell = spec.cell
    wanted = {"n_threads": cell.threads, "type_k": cell.type_k, "type_v": cell.type_v,
              "prompt_tokens": cell.n_prompt, "generated_tokens": cell.n_gen}
    for record in records:
        data = record.as_dict()
        for key, value in wanted.items():
            got = data.get(key)
            if got is not None and got != value:
                return f"asked {key}={value}, engine ran {key}={got}"
    return None


def _new_kills(before: Baseline, after_text: str, pid: int | None) -> tuple[str | None,
                                                                               tuple[str, ...]]:
    """(the lmkd line naming the engine, lines of the other processes lmkd killed) of the trial."""
    engine: str | None = None
    others: list[str] = []
    for line in lmkd_lines(after_text):
        kill = parse_lmkd_kill(line)
        if kill is None or line in before.lmkd_lines:
            continue
        if pid is not None and kill.pid == pid:
            engine = line
        else:
            others.append(line)
    return engine, tuple(others)


def _pressure_growth(before: Baseline, after_text: str) -> int | None:
    after = parse_memory_pressure(after_text)
    if before.pressure is None or after is None:
        return None
    if before.pressure.full_total_us is None or after.full_total_us is None:
        return None
    return max(after.full_total_us - before.pressure.full_total_us, 0)


def _reasons(groups: Iterable[Iterable[str]]) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for group in groups:
        found.update(dict.fromkeys(group))
    return tuple(found)


def _unreadable_text(reasons: Sequence[str]) -> str | None:
    if not reasons:
        return None
    shown = "; ".join(sorted(reasons)[:MAX_UNREADABLE])
    more = len(reasons) - MAX_UNREADABLE
    return f"{shown}; and {more} more" if more > 0 else shown


class TrialRunner:
    """Runs trials on one device; the clock is injectable for tests of the timing logic."""

    def __init__(self, device: Device, policy: TrialPolicy,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.device = device
        self.policy = policy
        self.clock = clock
        self._started: _Started | None = None
        self._reps: dict[str, int] = {}  # sustained repetitions per cell, from its calibration
        self.laps = Laps(clock)  # where the last trial's time went (harness.run.laps)
        # the last after-read's conditions: (host clock, big cpu, reading); see REUSE_S
        self._reading: tuple[float, int, Conditions] | None = None

    def forget_reading(self) -> None:
        """Something else ran on the phone: the next trial reads its conditions afresh."""
        self._reading = None

    def _fresh_conditions(self, big_cpu: int) -> Conditions:
        """The pre-flight reading: the last after-read's when it is fresh (``REUSE_S``), else
        one read now. Either is used once."""
        kept, self._reading = self._reading, None
        if kept is not None and kept[1] == big_cpu and self.clock() - kept[0] <= REUSE_S:
            return kept[2]
        return self.read_conditions(big_cpu)

    def read_state(self, big_cpu: int) -> DeviceState:
        result = self.device.shell(state_command(big_cpu), timeout=30)
        return state_from_output(result.stdout, result.stderr)

    def read_conditions(self, big_cpu: int) -> Conditions:
        result = self.device.shell(conditions_command(big_cpu), timeout=60)
        return conditions_from_output(result.stdout, result.stderr)

    def gate(self, big_cpu: int, first: Conditions | None = None,
             ) -> tuple[GateResult, Conditions | None]:
        """Wait until the phone is cool; the gate's result and its last reading of conditions.

        ``first`` (already read for the requirement check) is the gate's first poll.
        """
        latest: list[Conditions | None] = [first]
        unused = [first] if first is not None else []

        def read() -> DeviceState:
            conditions = unused.pop() if unused else self.read_conditions(big_cpu)
            latest[0] = conditions
            return conditions.state

        return wait_until_ready(read, self.policy.cooldown), latest[0]

    def _refused(self, unmet: str) -> Verdict:
        return Verdict(Outcome.PRECONDITION_FAILED, f"phone {self.device.serial}: {unmet}")

    def run(self, spec: TrialSpec, ctx: TrialContext) -> tuple[TrialRecord, list[SampleRecord]]:
        started_at = datetime.now(UTC)
        self.laps.start()
        unsupported = ctx.engine.supports(spec.cell) or device_problem(
            spec.cell.compute_device, ctx.capability, self.device.serial)
        if unsupported:
            self._reading = None
            return self._record(spec, ctx, started_at,
                                Verdict(Outcome.UNSUPPORTED, unsupported), [], None), []
        first = self._fresh_conditions(ctx.big_cpu)
        self.laps.lap("preflight")
        unmet = unmet_requirement(self.policy.require, first.preflight)
        if unmet:  # not waited for: a phone in battery saver does not leave it by cooling
            return self._record(spec, ctx, started_at, self._refused(unmet), [], None,
                                findings=Findings(first, None, None, first.state.unreadable)), []
        if spec.cell.sustained_s:  # calibrated before the gate, so its heat is waited out
            self._sustained_reps(spec, ctx, _trial_dir(spec))
        gate, conditions = self.gate(ctx.big_cpu, first)
        conditions = conditions or first
        self.laps.lap("cooldown")
        unmet = unmet_requirement(self.policy.require, conditions.preflight)
        if unmet:  # it changed while the gate waited
            return self._record(spec, ctx, started_at, self._refused(unmet), [], None,
                                findings=Findings(conditions, gate, None,
                                                  conditions.state.unreadable)), []
        return self._launch(spec, ctx, started_at, gate, conditions)

    def _launch(self, spec: TrialSpec, ctx: TrialContext, started_at: datetime,
                gate: GateResult, conditions: Conditions,
                ) -> tuple[TrialRecord, list[SampleRecord]]:
        workdir = _trial_dir(spec)
        baseline = conditions.baseline
        limit = (baseline.mem_available_kb * KIB if baseline.mem_available_kb
                 else ctx.memory_limit_bytes)
        self._started = _Started(spec.trial_id, workdir, baseline, limit)
        # One trial is one repetition: the engine runs the cell once, the run repeats trials.
        # A sustained trial is one launch of back-to-back repetitions filling its duration.
        reps = self._sustained_reps(spec, ctx, workdir) if spec.cell.sustained_s else 1
        once = dataclasses.replace(spec.cell, repetitions=reps)
        argv = _argv(ctx, once)
        # repetitions counted at the cool phone's speed take longer once it throttles
        timeout_s = self.policy.timeout_s + SUSTAINED_OVERRUN * spec.cell.sustained_s
        idle = self._idle_power() if self.policy.energy.enabled else Idle()

        rates = self._rates(ctx, power=self.policy.energy.enabled and bool(idle.readings),
                            gpu=spec.cell.compute_device != CPU_DEVICE)
        ran = self._run_engine(workdir, launch_command(workdir, argv, ctx.lib_dir, rates, ctx.env,
                                                       cache_prelude(ctx, spec.cell.cache)),
                               timeout_s)
        exit_code, stdout, stderr, lost, wall = (ran.exit_code, ran.stdout, ran.stderr, ran.lost,
                                                 ran.wall)
        self.laps.lap("launch")
        found = self._read_after(workdir, wall, ctx, lost)
        self.laps.lap("evidence")
        ticks, pid, after, sampled = found.ticks, found.pid, found.after, found.sampled
        # an engine that failed, then the phone gone before its evidence was read: what took the
        # phone (a reboot: the kernel's OOM killer took system_server, and the engine with it)
        # decides, so the trial is the device's loss, explained once it is back
        lost = lost or (found.gone and exit_code != 0)
        output = EngineOutput(stdout, stderr, after.get(ENGINE_FILE)
                              if output_file(ctx.engine) else None)
        try:
            records = ctx.engine.parse(output)
        except EngineError as error:
            records, stderr = [], f"{stderr}\n{error}"
        measurements = _runs_known(ctx.engine, ctx.engine.measure(records), reps)
        counter_end = self._counter_reading() if idle.counters and not lost else None
        timing = Timing.read(after, wall, idle, counter_end)
        extra, extra_samples = measured(spec.cell, measurements, timing, ran.launched_at,
                                        self.policy.energy.enabled,
                                        conditions.preflight.charging,
                                        ondevice.throttle_report(sampled.ticks))
        engine_log = parse_memory_log(stderr)
        verdict = classify(_observation(ran, lost, ticks, after, pid, baseline, limit,
                                        len(measurements),
                                        _tail(stderr, output, bool(measurements)),
                                        _check_engine_report(records, spec)))
        gpu = _gpu_columns(spec.cell, sampled, ticks)
        storage = _storage_columns(spec, ctx, ticks, timing, headline(measurements, spec.cell),
                                   after.get("cache", ""), engine_log,
                                   verdict.outcome == Outcome.OK)
        readback = parse_readback(watcher_threads(after.get("mem", "")), after.get("aff", ""))
        applied = check_applied(affinity_mask(spec.cell, ctx.cpu_mask), spec.cell.threads,
                                readback) if after else None
        unreadable = _reasons([
            conditions.state.unreadable, parse_read_errors(found.errors), found.reasons,
            *(t.state.unreadable for t in ticks if t.state),
            *(t.memory.unreadable for t in ticks if t.memory), sampled.unreadable])
        trial = self._record(spec, ctx, started_at, verdict, ticks, wall,
                             headline(measurements, spec.cell),
                             json.dumps([r.as_dict() for r in records]) if records else None,
                             Findings(conditions, gate, applied, unreadable, engine_log,
                                      {**(extra if verdict.outcome == Outcome.OK else
                                          {k: v for k, v in extra.items() if k in ALWAYS}),
                                       "sampler_cpu_s": sampled.sampler_cpu_s,
                                       "engine_cpu_s": sampled.engine_cpu_s, **storage,
                                       **engine_offload(records, engine_log), **gpu}))
        samples = self._samples(spec, ticks)
        samples += [_sample(spec, **row) for row in extra_samples]
        self.laps.lap("classify")
        if timing.t0 is not None and timing.t1 is not None and ran.exit_code is not None:
            # the engine's own run, on the phone's clock, out of the launch's wall time
            self.laps.seconds["engine"] = max(0.0, timing.t1 - timing.t0)
        return trial, sorted(samples, key=lambda r: r.t_ms)

    def _run_engine(self, workdir: str, command: str, timeout_s: float) -> _Ran:
        """The launch: one adb shell in the foreground, a watchdog that kills the engine by its
        pid file at ``timeout_s``; nothing else goes over adb while the engine runs."""
        timed_out = threading.Event()

        def watchdog() -> None:
            timed_out.set()
            with contextlib.suppress(HarnessError):  # a lost device ends the launch anyway
                self.device.shell(f"kill -9 $(cat {shlex.quote(workdir + '/pid')})",
                                  timeout=30)

        timer = threading.Timer(timeout_s, watchdog)
        launched_at = datetime.now(UTC)
        start = self.clock()
        timer.start()
        lost = False
        exit_code: int | None = None
        stdout = stderr = ""
        try:
            result = self.device.shell(command, timeout=timeout_s + 60)
            exit_code, stdout, stderr = result.exit_code, result.stdout, result.stderr
        except NotRunError:
            # the launch's shell never opened (the phone went offline since the reading before
            # it): nothing ran, so the trial is not lost; the worker waits for the phone and
            # tries the trial again, as after a failed pre-flight read (``_attempt``)
            raise
        except DeviceError as error:
            # A command our watchdog gave up on is a timeout; any other transport failure
            # (connection dropped, adb server gone) means the device was lost mid-trial.
            lost = not timed_out.is_set()
            stderr = str(error)
        finally:
            timer.cancel()
        return _Ran(exit_code, stdout, stderr, lost, timed_out.is_set(), self.clock() - start,
                    launched_at)

    def _read_after(self, workdir: str, wall: float, ctx: TrialContext, lost: bool) -> _After:
        """What the launch left on the phone (pid, the sampler's file, the watcher's peaks, the
        dumpsys outputs, the lmkd and pressure readings), and the state it left the phone in."""
        found = _After()
        if lost:
            return found
        try:
            done = self.device.shell(
                _after_command(workdir, output_file(ctx.engine), ctx.big_cpu), timeout=60)
            found.after = split_sections(done.stdout)
            found.errors = found.after.pop(EVIDENCE_ERRORS, "")
            # the state the trial left the phone in (heat shows after the work), read in the
            # same shell as the evidence, and the next trial's pre-flight reading (REUSE_S)
            left = conditions_from_output(done.stdout, done.stderr)
            self._reading = (self.clock(), ctx.big_cpu, left)
            pid_text = found.after.get("pid", "").strip()
            found.pid = int(pid_text) if pid_text.isdigit() else None
            found.sampled = ondevice.parse(found.after.get("smp", ""),
                                           _first_number(found.after.get("t0", "")),
                                           found.after.get("err", ""), found.after.get("dm", ""))
            found.ticks.extend(found.sampled.ticks)
            for t_ms, text in found.sampled.dumpsys:
                found.reasons.update(dict.fromkeys(dumpsys_unreadable(text)))
                if (memory := dumpsys_memory(text)) is not None:
                    found.ticks.append(Tick(t_ms, memory, None))
            watched = watcher_memory(found.after.get("mem", ""))
            if watched is not None:
                found.ticks.append(Tick(int(wall * 1000), watched, None))
            found.ticks.append(Tick(int(wall * 1000), None, left.state))
        except DeviceError:  # the engine's end was seen; only the evidence is missing
            found.gone = True
            with contextlib.suppress(HarnessError):
                found.ticks.append(Tick(int(wall * 1000), None, self.read_state(ctx.big_cpu)))
        return found

    def _rates(self, ctx: TrialContext, power: bool, gpu: bool = False) -> ondevice.Rates | None:
        """The on-device sampler's rates from the policy; None: no sampling at all. A cell on
        a device also reads ``dumpsys meminfo`` where the phone has no kgsl nodes."""
        policy = self.policy
        if policy.sample_interval_s <= 0:
            return None
        return ondevice.Rates(memory_s=policy.sample_interval_s, state_s=policy.state_interval_s,
                              status_s=policy.status_interval_s,
                              dumpsys_s=policy.dumpsys_interval_s, fast_s=policy.fast_start_s,
                              big_cpu=ctx.big_cpu, power=power,
                              gpu_dumpsys_s=GPU_DUMPSYS_S if gpu else 0.0)

    def _sustained_reps(self, spec: TrialSpec, ctx: TrialContext, workdir: str) -> int:
        """How many repetitions fill the cell's duration: one calibration launch per cell."""
        cell = spec.cell
        if cell.cell_id in self._reps:
            return self._reps[cell.cell_id]
        twice = dataclasses.replace(cell, repetitions=CALIBRATION_REPS)
        argv = _argv(ctx, twice)
        rep_s = float("nan")
        folder = shlex.quote(workdir + "-calibrate")
        name = output_file(ctx.engine)
        # the tool's own file, after a mark, on stdout; the trial's folder goes either way
        read_file = f"; echo {CALIBRATION_MARK}; cat {folder}/{shlex.quote(name)}" if name else ""
        try:
            result = self.device.shell(
                f"({launch_command(workdir + '-calibrate', argv, ctx.lib_dir, None, ctx.env)})"
                f"{read_file}; rm -rf {folder}",
                timeout=self.policy.timeout_s + 60)
            stdout, _, written = result.stdout.partition(f"{CALIBRATION_MARK}\n")
            found = ctx.engine.measure(ctx.engine.parse(
                EngineOutput(stdout, result.stderr, written if name else None)))
            timed = [t for m in (found[1:] or found)  # the fastest after the first
                     if math.isfinite(t := rep_seconds(m, cell))]
            if timed:
                rep_s = min(timed)
        except (DeviceError, EngineError):
            pass  # the measured launch will fail the same way and say why
        reps = sustained.repetitions_for(cell.sustained_s, rep_s)
        self._reps[cell.cell_id] = reps
        return reps

    def _idle_power(self) -> Idle:
        """The phone's draw just before the launch: power_supply readings, else two charge
        counter readings of ``dumpsys battery`` ``idle_s`` apart."""
        interval = 0.1
        count = max(2, round(self.policy.energy.idle_s / interval))
        with contextlib.suppress(HarnessError):
            text = self.device.shell(power.reading_command(count, interval),
                                     timeout=60 + count * interval).stdout
            readings = power.parse_readings(text)
            if len(readings) >= 2:
                return Idle(readings=tuple(readings))
        first = self._counter_reading()
        if first is None:
            return Idle(unreadable=True)
        with contextlib.suppress(HarnessError):
            self.device.shell(f"sleep {self.policy.energy.idle_s:g}",
                              timeout=60 + self.policy.energy.idle_s)
        second = self._counter_reading()
        if second is None:
            return Idle(unreadable=True)
        return Idle(counters=(first, second))

    def _counter_reading(self) -> power.CounterReading | None:
        with contextlib.suppress(HarnessError):
            found = split_sections(self.device.shell(
                "echo @@harness:uptime; cat /proc/uptime; echo @@harness:battery; "
                "dumpsys battery", timeout=30).stdout)
            uptime = parse_uptime(found.get("uptime", ""))
            battery = parse_battery(found.get("battery", ""))
            if uptime is None or battery is None or battery.charge_counter_uah is None \
                    or battery.voltage_mv is None:
                return None
            return power.CounterReading(uptime, battery.charge_counter_uah, battery.voltage_mv,
                                        bool(is_charging(battery.status, battery.plugged)))
        return None

    def explain_loss(self, trial: TrialRecord) -> TrialRecord:
        """A lost trial, once its device is back: did the phone reboot (a new boot id)?

        The trial's folder survives a reboot, so the watcher's peak is still there; with a
        reboot the outcome stays ``device_lost``, with the reboot and the memory evidence
        recorded. Anything unreadable leaves the trial as it was.
        """
        started = self._started
        if started is None or started.trial_id != trial.trial_id \
                or trial.outcome != Outcome.DEVICE_LOST:
            return trial
        folder = shlex.quote(started.workdir)
        try:
            found = split_sections(self.device.shell(
                f"echo @@harness:boot_id; cat {BOOT_ID}; echo @@harness:uptime; cat /proc/uptime; "
                f"echo @@harness:mem; cat {folder}/mem 2>/dev/null; rm -rf {folder}",
                timeout=30).stdout)
        except HarnessError:
            return trial
        again = rebooted(started.baseline, parse_boot_id(found.get("boot_id", "")),
                         parse_uptime(found.get("uptime", "")))
        watched = watcher_memory(found.get("mem", ""))
        hwm = watched.vm_hwm_kb * KIB if watched and watched.vm_hwm_kb else None
        top = max((v for v in (hwm, trial.peak_rss_bytes, trial.vm_hwm_bytes) if v),
                  default=None)
        verdict = classify(Observation(exit_code=None, device_lost=True, rebooted=bool(again),
                                       peak_rss_bytes=top,
                                       memory_limit_bytes=started.memory_limit_bytes))
        return dataclasses.replace(
            trial, error=verdict.error, evidence=verdict.evidence or trial.evidence,
            oom_signals=",".join(verdict.signals) or None, boot_id_changed=again,
            vm_hwm_bytes=max(v for v in (hwm, trial.vm_hwm_bytes, 0) if v is not None) or None)

    def _samples(self, spec: TrialSpec, ticks: Sequence[Tick]) -> list[SampleRecord]:
        out = []
        for tick in ticks:
            m, s = tick.memory, tick.state
            out.append(SampleRecord(
                run_id=spec.run_id, trial_id=spec.trial_id, t_ms=tick.t_ms,
                pss_bytes=_bytes(m.pss_kb) if m else None,
                rss_bytes=_bytes(m.rss_kb) if m else None,
                swap_bytes=_bytes(m.swap_kb) if m else None,
                pss_anon_bytes=_bytes(m.pss_anon_kb) if m else None,
                pss_file_bytes=_bytes(m.pss_file_kb) if m else None,
                thermal_status=s.thermal_status if s else None,
                max_temp_c=s.max_temp_c if s else None,
                big_cur_khz=s.big_cur_khz if s else None,
                big_max_khz=s.big_max_khz if s else None,
                battery_level=s.battery_level if s else None,
                battery_temp_c=s.battery_temp_c if s else None,
                source=m.source if m else None,
                major_faults=m.major_faults if m else None,
                read_bytes=m.read_bytes if m else None,
                gpu_cur_khz=tick.gpu.cur_khz if tick.gpu else None,
                gpu_max_khz=tick.gpu.max_khz if tick.gpu else None,
                gpu_busy_pct=tick.gpu.busy_pct if tick.gpu else None,
                gpu_temp_c=s.max_gpu_temp_c if s else None,
                accelerator_memory_bytes=m.gpu_bytes if m else None,
                swap_in_bytes=m.swap_in_bytes if m else None,
            ))
        return out

    def _record(self, spec: TrialSpec, ctx: TrialContext, started_at: datetime,
                verdict: Verdict, ticks: Sequence[Tick], wall: float | None,
                measurement: Measurement | None = None, engine_record: str | None = None,
                findings: Findings = Findings()) -> TrialRecord:
        cell = spec.cell
        mems = [t.memory for t in ticks if t.memory]
        states = [t.state for t in ticks if t.state]
        ok = verdict.outcome == Outcome.OK and measurement is not None
        gate = findings.gate
        conditions = findings.conditions
        start_state = gate.state if gate else None
        pre = conditions.preflight if conditions else None
        base = conditions.baseline if conditions else None
        applied = findings.applied
        log = findings.engine_log
        return new_trial(
            spec, cell, verdict.outcome, started_at=started_at, device=ctx.device_meta,
            build=ctx.build_meta, model=ctx.model_meta, wall_s=wall,
            affinity=ctx.cpu_mask or cell.affinity, error=verdict.error,
            pp_tps=measurement.prompt_tps if ok and measurement else None,
            tg_tps=measurement.gen_tps if ok and measurement else None,
            ttft_ms=(measurement.ttft_s * 1000 if ok and measurement
                     and measurement.ttft_s is not None else None),
            **_engine_columns(measurement if ok else None, measurement),
            peak_pss_bytes=_bytes(peak([m.pss_kb for m in mems])),
            peak_rss_bytes=_bytes(peak([m.rss_kb for m in mems])),
            peak_swap_bytes=_bytes(peak([m.swap_kb for m in mems])),
            vm_hwm_bytes=_bytes(peak([m.vm_hwm_kb for m in mems])),
            peak_pss_anon_bytes=_bytes(peak([m.pss_anon_kb for m in mems])),
            peak_pss_file_bytes=_bytes(peak([m.pss_file_kb for m in mems])),
            predicted_peak_bytes=ctx.predicted_peak_bytes,
            max_temp_c=hottest(states),
            max_thermal_status=worst_status(states),
            # a capped GPU clock throttles what runs on the GPU
            throttled=throttled_during(states, self.policy.throttle_status) or bool(
                cell.compute_device != CPU_DEVICE and findings.measured.get("gpu_throttled")),
            cooldown_waited_s=gate.waited_s if gate else None,
            start_thermal_status=start_state.thermal_status if start_state else None,
            start_temp_c=start_state.max_temp_c if start_state else None,
            battery_level=start_state.battery_level if start_state else None,
            battery_temp_c=start_state.battery_temp_c if start_state else None,
            evidence=verdict.evidence, engine_record=engine_record,
            oom_signals=",".join(verdict.signals) or None,
            boot_id=base.boot_id if base else None,
            # a launched trial that kept its device did not reboot; a lost one is explained later
            boot_id_changed=(False if wall is not None and verdict.outcome != Outcome.DEVICE_LOST
                             and base is not None and base.boot_id else None),
            start_mem_available_bytes=_bytes(base.mem_available_kb) if base else None,
            applied_affinity=applied.applied_affinity if applied else None,
            affinity_applied=applied.affinity_applied if applied else None,
            threads_seen=applied.threads_seen if applied else None,
            # only a measurement can be mislabelled: a failed trial keeps its own outcome
            config_not_applied=_not_applied(cell, applied, log) if ok else None,
            cooldown_source=gate.source if gate else None,
            cooldown_unmet=gate.reason if gate and not gate.ready else None,
            screen_on=pre.screen_on if pre else None,
            stay_awake=pre.stay_awake if pre else None,
            charging=pre.charging if pre else None,
            charge_source=pre.charge_source if pre else None,
            battery_saver=pre.battery_saver if pre else None,
            doze_state=pre.doze_state if pre else None,
            unreadable=_unreadable_text(findings.unreadable),
            swa_full=cell.swa_full,
            predicted_kv_bytes=ctx.predicted_kv_bytes,
            kv_reported_bytes=log.kv_bytes if log else None,
            repack_reported_bytes=log.repack_bytes if log else None,
            compute_reported_bytes=log.compute_bytes if log else None,
            predicted_accelerator_bytes=ctx.predicted_accelerator_bytes,
            predicted_host_bytes=ctx.predicted_host_bytes,
            driver_host_bytes=ctx.driver_host_bytes,
            **findings.measured,
        )


def _not_applied(cell: Cell, applied: AffinityCheck | None,
                 log: EngineMemoryLog | None) -> str | None:
    """What of the cell did not take effect: its affinity or threads as the phone read them
    back, its offload as the engine's log tells it (``harness.run.offload``)."""
    said = [applied.not_applied if applied else None, offload_not_applied(cell, log)]
    return "; ".join(s for s in said if s) or None


def _engine_columns(ok: Measurement | None, any_: Measurement | None) -> dict[str, Any]:
    """What the engine says of its own figures: an aggregate's n and spread and what its TTFT
    counts (an ok trial's), its own load time and peak memory (whatever the outcome)."""
    columns: dict[str, Any] = {
        "engine_aggregate_n": ok.aggregate_n if ok else None,
        "pp_tps_sd": ok.prompt_tps_sd if ok else None,
        "tg_tps_sd": ok.gen_tps_sd if ok else None,
        "ttft_definition": (ok.ttft_definition or TTFT_PROMPT) if ok and ok.ttft_s is not None
        else None,
    }
    if any_ is not None:
        columns["engine_load_ms"] = any_.load_s * 1000 if any_.load_s is not None else None
        columns["engine_peak_bytes"] = any_.peak_bytes
    return columns


def _gpu_columns(cell: Cell, sampled: ondevice.Sampled, ticks: Sequence[Tick]) -> dict[str, Any]:
    """Accelerator memory (the phone's report), the host's rest, and the GPU's heat and clocks.

    A CPU cell has accelerator memory only where the phone can say it (kgsl: 0 when the engine
    allocated nothing there); a device cell whose phone cannot say it is "unreadable", never 0.
    """
    memories = [t.memory for t in ticks if t.memory is not None and t.memory.source ==
                ondevice.SOURCE]
    reports = [info for _, text in sampled.dumpsys if (info := parse_meminfo(text)) is not None]
    hwm = peak([t.memory.vm_hwm_kb for t in ticks if t.memory is not None])
    gpumem = [snapshot.process_bytes(pid) if (snapshot := parse_gpumem(text)) else None
              for _, pid, text in sampled.gpumem]
    found = accelerator_memory(memories, sampled.kgsl, reports, sampled.gpu_peak_bytes,
                          sampled.gpu_peak_mapped_bytes, hwm, gpumem)
    on_device = cell.compute_device != CPU_DEVICE
    states = [t.gpu for t in ticks if t.gpu is not None]
    zones = [s.max_gpu_temp_c for s in (t.state for t in ticks if t.state) if s.max_gpu_temp_c
             is not None]
    gpu_errors = [r for r in sampled.unreadable if "kgsl" in r]
    columns: dict[str, Any] = {
        "max_gpu_temp_c": max(zones) if zones else None,
        "gpu_throttled": gpu_throttled(states),
        "gpu_unreadable": "; ".join(gpu_errors) if on_device and gpu_errors else None,
    }
    if found.device_bytes is None and not on_device:
        return columns  # a CPU cell on a phone that cannot tell: nothing to say
    return {**columns, "accelerator_memory_bytes": found.device_bytes,
            "accelerator_memory_source": found.source, "host_memory_bytes": found.host_bytes}


def _after_command(workdir: str, engine_file: str | None = None, big_cpu: int = 0) -> str:
    """The evidence a trial leaves, and the phone's conditions after it, in one shell.

    ``conditions_command`` starts its system-service queries; meanwhile the evidence is read:
    the pid, the watcher's files (its end stamp t1 may lag the engine's exit by a round, so
    the sampler is woken through its FIFO first, then waited for up to 1 s), the file the
    engine wrote its results to (if it names one), with their stderr in its own section
    (``EVIDENCE_ERRORS``); then the trial's folder goes. The conditions are the state the trial
    left the phone in, lmkd's lines and memory pressure (the trial's end, against its
    baseline), and the next trial's pre-flight reading (``REUSE_S``).
    """
    folder = shlex.quote(workdir)
    errors = shlex.quote(f"{workdir}.err")
    written = (f"echo @@harness:{ENGINE_FILE}; cat {folder}/{shlex.quote(engine_file)} "
               "2>/dev/null; " if engine_file else "")
    evidence = (
            f"echo @@harness:pid; cat {folder}/pid; "
            f"echo @@harness:t0; cat {folder}/t0 2>/dev/null; "
            f"echo @@harness:t1; cat {folder}/t1 2>/dev/null; "
            f"echo @@harness:pwr; cat {folder}/pwr 2>/dev/null; "
            f"echo @@harness:mem; cat {folder}/mem 2>/dev/null; "
            f"echo @@harness:aff; cat {folder}/aff 2>/dev/null; "
            f"echo @@harness:smp; cat {folder}/smp 2>/dev/null; "
            f"echo @@harness:err; cat {folder}/err 2>/dev/null; "
            f"echo @@harness:dm; cat {folder}/dm.txt 2>/dev/null; "
            f"echo @@harness:cache; cat {folder}/cache 2>/dev/null; {written}")
    # without a writable place for its stderr, the evidence's errors go with the conditions'
    read = (f"[ -p {folder}/nap ] && echo w 1<>{folder}/nap; "
            f"i=0; while [ -f {folder}/mem ] && [ ! -f {folder}/t1 ] && [ $i -lt 50 ]; do "
            "sleep 0.02; i=$((i+1)); done; "
            f"if true 2>{errors}; then {{ {evidence} }} 2>{errors}; "
            f"echo @@harness:{EVIDENCE_ERRORS}; cat {errors}; else {evidence} fi; "
            f"rm -rf {folder} {errors}")
    return conditions_command(big_cpu, meanwhile=read)  # the services answer meanwhile


def cache_prelude(ctx: TrialContext, cache: str) -> str:
    """What the launch does to the model's page cache first (evict for cold, read for warm),
    then how much of the model is resident, into the trial's ``cache`` file; "" without the
    page-cache tool on the device."""
    if ctx.pagecache is None:
        return ""
    action = {"cold": "evict", "warm": "warm"}.get(cache, "resident")
    return f"{pagecache_command(ctx.pagecache, action, [ctx.model])} > cache 2>&1"


def _storage_columns(spec: TrialSpec, ctx: TrialContext, ticks: Sequence[Tick],
                     timing: Timing, rates: Measurement | None, cache_text: str,
                     log: EngineMemoryLog, ok: bool) -> dict[str, Any]:
    """The schema-8 columns: the model's residency at the launch, the engine's load time and
    its storage reads and faults (kept whatever the outcome: a killed engine's reads are
    evidence), and whether it paged while decoding (only an ``ok`` trial decoded)."""
    found = parse_residency(cache_text)
    points = [Point(t.t_ms, t.memory.major_faults, t.memory.read_bytes,
                    t.memory.swap_in_bytes, t.memory.swap_kb)
              for t in ticks if t.memory is not None
              and (t.memory.major_faults is not None or t.memory.read_bytes is not None)]
    end_ms = ((timing.t1 - timing.t0) * 1000
              if timing.t0 is not None and timing.t1 is not None else None)
    cell = spec.cell
    result = paging_measure.analyse(points, end_ms, 0 if cell.sustained_s else cell.n_gen,
                            rates.gen_tps if rates else None, ctx.model_meta.file_bytes,
                            ctx.device_meta.storage_read_mb_s, maps_weights(cell))
    columns = {**result.columns(), "paging": result.paging if ok else None,
               "paging_unknown": result.unknown if ok else None}
    resident = found[0].resident_bytes if found else None
    cache, why = paging_measure.cache_outcome(cell.cache or None, resident,
                                              ctx.model_meta.file_bytes, cache_text)
    if why is not None:
        columns.update(cache=cache, cache_error=why)
    return {"cache_resident_bytes": resident,
            "load_ms": log.load_ms, **columns,
            "predicted_paging_tg_tps": ctx.predicted_paging_tg_tps}


def _first_number(text: str) -> float | None:
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def _sample(spec: TrialSpec, **values: Any) -> SampleRecord:
    """A sample row of a series (power, sustained rate): only time and its own value set."""
    empty: dict[str, Any] = dict.fromkeys(("pss_bytes", "rss_bytes", "swap_bytes", "pss_anon_bytes",
                           "pss_file_bytes", "thermal_status", "max_temp_c", "big_cur_khz",
                           "big_max_khz", "battery_level", "battery_temp_c", "source",
                           "major_faults", "read_bytes", "swap_in_bytes"))
    fields: dict[str, Any] = {"run_id": spec.run_id, "trial_id": spec.trial_id, **empty, **values}
    return SampleRecord(**fields)


def _bytes(kb: int | None) -> int | None:
    return None if kb is None else kb * KIB


def _observation(ran: _Ran, lost: bool, ticks: Sequence[Tick], after: Mapping[str, str],
                 pid: int | None, baseline: Baseline, limit: int | None, complete: int,
                 tail: str, mismatch: str | None) -> Observation:
    """What ``classify`` decides a trial's outcome from: the launch's end, the memory the
    engine reached, the killer's lines and the pressure that grew while it ran."""
    mems = [t.memory for t in ticks if t.memory]
    top = peak([*(m.rss_kb for m in mems), *(m.vm_hwm_kb for m in mems)])
    engine_line, app_kills = _new_kills(baseline, after.get("lmkd", ""), pid)
    return Observation(
        exit_code=ran.exit_code,
        timed_out=ran.timed_out,
        device_lost=lost,
        lmk_line=engine_line,
        peak_rss_bytes=None if top is None else top * KIB,
        memory_limit_bytes=limit,
        complete_records=complete,
        expected_records=1,
        stderr_tail=tail,
        mismatch=mismatch,
        pressure_full_us=_pressure_growth(baseline, after.get("pressure", "")),
        lmkd_app_kills=app_kills,
    )
