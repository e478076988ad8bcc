"""One device's part of a run: plan its trials, push what they need, run them, hand each on.

The local backend (``harness.run.runner``) runs one ``DeviceWorker`` per device in a thread; the
farm backend (``harness.farm.job``) drives one per worker process, job by job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import knobs, store
from harness.artifacts.builds import Build
from harness.artifacts.devicetools import ensure_pagecache
from harness.artifacts.gguf_info import ModelInfo, file_sha256
from harness.artifacts.ladder import default_cache_root as cache_root
from harness.budget import available_memory
from harness.cell import DEVICE_PYTHON_BUILD, Cell
from harness.device.base import Device, DeviceFacts
from harness.device.lease import DeviceBusyError, DeviceLease
from harness.engines import Engine, LlamaBench, PyBench, get_engine
from harness.engines.devices import (
    Capability,
    capability_from_output,
    list_devices_command,
    peak_watched,
)
from harness.engines.llama_bench import dialect_from_help
from harness.errors import BuildError, ConfigError, DeviceError, DeviceLostError, HarnessError
from harness.memory import ModelCard
from harness.plan import PlannedCell, build_repack, plan_cells
from harness.profiles import storage_speed
from harness.records import (
    AdaptiveRecord,
    BuildMeta,
    DeviceMeta,
    ModelMeta,
    SampleRecord,
    TrialRecord,
)
from harness.run import adaptive, bandwidth, outputcheck, reference, store_io
from harness.run.deploy import (
    DEVICE_ROOT,
    Artifact,
    Ledger,
    PushReport,
    build_artifacts,
    build_digest,
    ensure_artifacts,
    model_remote_path,
)
from harness.run.events import Event, Kind
from harness.run.laps import Laps
from harness.run.modelfiles import model_folder, prompt_artifact
from harness.run.order import TrialSpec, interleave
from harness.run.pyruntime import (
    PythonRuntime,
    bench_files,
    parse_probe,
    probe_command,
    remote_folder,
)
from harness.run.session import DeviceSummary, Prepared, RunOptions
from harness.run.trial import TrialContext, TrialPolicy, TrialRunner
from harness.run.validity import Bandwidth, needs_bandwidth, validate
from harness.run.watch import launch_line
from harness.units import KIB

Sink = Callable[[TrialRecord, Sequence[SampleRecord]], None]  # where each finished trial goes


def _mask(cpus: Sequence[int]) -> str | None:
    return hex(sum(1 << c for c in cpus)) if cpus else None


def _meta_device(facts: DeviceFacts) -> DeviceMeta:
    return DeviceMeta(model=facts.model, manufacturer=facts.manufacturer, soc=facts.soc,
                      sdk=facts.android_sdk,
                      ram_bytes=facts.total_ram_kb * 1024 if facts.total_ram_kb else None,
                      abi=facts.abi, cpu_emulation=facts.cpu_emulation,
                      memory_model=facts.memory_model,
                      storage_read_mb_s=storage_speed(facts), gpu_emulated=facts.gpu_emulated)



def abi_refusal(build: Build, facts: DeviceFacts) -> str | None:
    """Why the device cannot execute the build, or None when it can (or cannot tell)."""
    wanted = build.manifest.abi
    runs = facts.abis or ((facts.abi,) if facts.abi else ())
    if not runs or not wanted or wanted in runs:
        return None
    return (f"build {build.name} is {wanted}; {facts.serial} executes only "
            f"{', '.join(runs)}: build for its ABI (harness build llama.cpp --abi {runs[0]})")


def engine_binary(engine: Engine) -> str:
    """The file under a build's bin/ that an engine runs (llama-bench, or a generic engine's)."""
    return str(getattr(engine, "binary_name", "llama-bench"))


def _setup(spec: TrialSpec) -> tuple[str, str]:
    """What runs a trial's cell: its engine and its build."""
    return spec.cell.engine, spec.cell.build


def _bench_artifacts() -> tuple[list[Artifact], str]:
    """The llama-cpp-python bench's modules, and the folder (PYTHONPATH) they land in."""
    files = [(path, rel, file_sha256(path)) for path, rel in bench_files()]
    folder = remote_folder([f"{rel}:{sha}" for _, rel, sha in files])
    return [Artifact(path, sha, f"{folder}/{rel}") for path, rel, sha in files], folder



def jobs_of(trials: Sequence[TrialSpec]) -> list[list[TrialSpec]]:
    """Consecutive trials of one ``job_id``, order kept: the unit both backends schedule."""
    jobs: list[list[TrialSpec]] = []
    for spec in trials:
        if jobs and jobs[-1][0].job_id == spec.job_id:
            jobs[-1].append(spec)
        else:
            jobs.append([spec])
    return jobs


CheckKey = tuple[str, str, str, outputcheck.CheckKnobs]  # engine, build, model on the phone, knobs


@dataclass(frozen=True)
class Probed:
    """What a run learnt by probing its phone that holds while the phone keeps its boot: the
    memory bandwidth, and per build content (``build_digest``) its ``--list-devices`` answer
    and the output checks that matched (a mismatch or an error is asked again next run)."""

    bandwidth: tuple[Bandwidth, ...]  # empty: not measured yet, or no figure to be had
    capabilities: Mapping[str, tuple[str, Capability]]  # build -> (its digest, the answer)
    checks: Mapping[CheckKey, tuple[str, outputcheck.Verdict]]  # -> (build digest, verdict)


@dataclass(frozen=True)
class _Ready:
    """A device after ``prepare_jobs``: its plan, its pushed artefacts, its trial runner."""

    planned: Mapping[str, PlannedCell]
    runnable_ids: frozenset[str]
    contexts: Mapping[str, TrialContext] | None  # None: the push failed
    runner: TrialRunner
    todo_count: int



class DeviceWorker:
    """Everything one device does in a run, in order.

    The local backend calls ``run`` (one thread per device); the farm backend calls
    ``prepare_jobs`` once per worker process and ``run_job`` per job, with a ``sink`` that
    collects the trials for the driver instead of writing them.
    """

    def __init__(self, device: Device, prepared: Prepared, run_id: str, options: RunOptions,
                 done: set[str], on_event: Event, sink: Sink | None = None,
                 ledger: Ledger | None = None) -> None:
        self.device = device
        self.ledger = ledger  # files verified on the phone before this run (the farm's)
        self.prepared = prepared
        self.run_id = run_id
        self.options = options
        self.done = done
        self.on_event = on_event
        self.sink: Sink = sink or (
            lambda trial, samples: store_io.append(options.results, run_id, trial, samples))
        # the local backend writes the store itself; a farm worker's caller ships its records
        self._local_store = options.results if sink is None else None
        self.decision_sink: Callable[[AdaptiveRecord], object] = (
            (lambda found: store.write_part(options.results, "adaptive", [found], run_id))
            if sink is None else (lambda found: None))
        self.adaptive_policy = prepared.matrix.adaptive
        self._values: dict[str, list[float]] = {}  # metric values per cell, run order
        self._throttled: dict[str, list[bool]] = {}  # and whether each trial was throttled
        self.summary = DeviceSummary(device.serial)
        self.busy: DeviceBusyError | None = None
        self._ready: _Ready | None = None
        # (engine, build) -> why this device cannot run it (the build's ABI, no Python ...)
        self._refused: dict[tuple[str, str], str] = {}
        self._python: PythonRuntime | None = None
        self._model: str | None = None  # ro.product.model, to find the phone's profile
        # the phone's memory bandwidth for the validity gates: looked up (profile) or measured
        # once per run, at the first trial that needs it; None inside: no figure to be had
        self._bandwidth: list[Bandwidth | None] | None = None
        # output check verdicts per (engine, build, model file on the device, compute device,
        # offloaded layers), made once
        self._checks: dict[CheckKey, outputcheck.Verdict] = {}
        # each llama.cpp build's devices on this phone, asked once (--list-devices)
        self._capabilities: dict[str, Capability] = {}
        # set when the run is stopped (Ctrl-C, SIGTERM): no trial starts and nothing more is
        # stored (a trial ending now may have been cut by the stop; --resume runs it again)
        self.stop = threading.Event()

    def _emit(self, kind: str, **details: Any) -> None:
        self.on_event(kind, self.device.serial, details)

    def plan(self, facts: DeviceFacts) -> dict[str, PlannedCell]:
        available = available_memory(
            live=(facts.available_ram_kb or 0) * KIB, live_from=self.device.serial,
            ram_bytes=(facts.total_ram_kb or 0) * KIB).bytes or 0
        planned = plan_cells(self.prepared.cells, self.prepared.models, available,
                             self.options.reserve_bytes,
                             self.prepared.matrix.timeout.trial_s,
                             repack=build_repack(self.prepared.builds),
                             storage_mb_s=storage_speed(facts))
        return {p.cell.cell_id: p for p in planned}

    def run(self) -> DeviceSummary:
        try:
            with DeviceLease(self.device, self.run_id, self.options.lease_ttl_s):
                self._run()
        except DeviceBusyError as error:  # another harness drives this phone: touch nothing
            self.summary.error = str(error)
            self.busy = error
            self._emit(Kind.FAILED, error=str(error))
        except DeviceLostError as error:
            self.summary.error = str(error)
            self._emit(Kind.LOST, error=str(error))
        except HarnessError as error:
            self.summary.error = str(error)
            self._emit(Kind.FAILED, error=str(error))
        return self.summary

    def _run(self) -> None:
        index = 0
        for job in self.prepare_jobs():
            if self.stop.is_set():
                return
            self.run_job(job, index)
            index += len(job)

    def prepare_jobs(self, facts: DeviceFacts | None = None) -> list[list[TrialSpec]]:
        """Plan this device's trials and push what the runnable ones need; its jobs, in order.
        ``facts``: the device's, when the caller has them fresh (else read here)."""
        facts = facts or self.device.facts()
        self._model = facts.model
        self.summary.memory_model = facts.memory_model
        planned = self.plan(facts)
        trials = interleave(adaptive.planned_cells(self.prepared.cells, self.adaptive_policy),
                            self.run_id, self.device.serial)
        todo = [t for t in trials if t.trial_id not in self.done]
        self._refused = self._refusals(facts, todo)
        for key in sorted({_setup(t) for t in todo} & set(self._refused)):
            self._emit(Kind.ABI_MISMATCH, error=self._refused[key])
        runnable = [t for t in todo if _setup(t) not in self._refused
                    and (self.options.no_skip or planned[t.cell.cell_id].feasible)]
        self._emit(Kind.PLANNED, total=len(trials), todo=len(todo), runnable=len(runnable))
        contexts = self._deploy(runnable, planned, facts)
        runner = TrialRunner(self.device, TrialPolicy(
            cooldown=self.prepared.matrix.cooldown,
            timeout_s=self.prepared.matrix.timeout.trial_s,
            sample_interval_s=self.options.sample_interval_s,
            status_interval_s=self.options.status_interval_s,
            dumpsys_interval_s=self.options.dumpsys_interval_s,
            throttle_status=self.prepared.matrix.cooldown.max_thermal_status,
            require=self.prepared.matrix.require,
            energy=self.prepared.matrix.energy,
        ))
        self._ready = _Ready(planned, frozenset(t.trial_id for t in runnable), contexts, runner,
                             len(todo))
        self._prefill_values()
        return jobs_of(todo)

    def _refusals(self, facts: DeviceFacts,
                  todo: Sequence[TrialSpec]) -> dict[tuple[str, str], str]:
        """Why this device cannot run some (engine, build) pairs at all, before any push."""
        refused: dict[tuple[str, str], str] = {}
        for engine, build in sorted({_setup(t) for t in todo}):
            if build == DEVICE_PYTHON_BUILD:
                runtime = self._python_runtime()
                if isinstance(runtime, str):
                    refused[(engine, build)] = runtime
            elif why := abi_refusal(self.prepared.builds[build], facts):
                refused[(engine, build)] = why
        return refused

    def _python_runtime(self) -> PythonRuntime | str:
        if self._python is None:
            found = parse_probe(self.device.shell(probe_command(), timeout=60).stdout,
                                self.device.serial)
            if isinstance(found, str):
                return found
            self._python = found
        return self._python

    def run_job(self, job: Sequence[TrialSpec], first_index: int = 0) -> None:
        """One job's trials in order, each handed to the sink as it ends.

        A device gone for good raises DeviceLostError after its trial in flight was recorded.
        """
        if self._ready is None:
            raise RuntimeError("run_job before prepare_jobs")
        self._run_trials(job, first_index)
        runnable = {s.cell.cell_id for s in job if s.trial_id in self._ready.runnable_ids}
        pair = adaptive.pairing(job, self.prepared.cells, self.adaptive_policy, runnable)
        if pair is not None and self._ready.contexts is not None:
            self._adapt(job, pair, first_index + len(job))

    def _adapt(self, job: Sequence[TrialSpec], pair: adaptive.Pairing, index: int) -> None:
        """Rounds of the baseline and each open candidate until the rule settles each one."""
        policy = self.adaptive_policy
        assert policy is not None and self._ready is not None
        rep = adaptive.first_free_rep(job, self.done)
        open_ids = [c.cell_id for c in pair.candidates]
        while True:
            decisions = adaptive.judge(pair, self._values, policy, self._throttled)
            for cell in pair.candidates:
                decision = decisions[cell.cell_id]
                if cell.cell_id in open_ids and decision.settled:
                    open_ids.remove(cell.cell_id)
                    spent = len(self._values.get(cell.cell_id, ()))
                    found = adaptive.record(pair, cell, decision, policy, self.run_id,
                                            self.device.serial, spent)
                    self.summary.adaptive.append(found)
                    self.decision_sink(found)
                    self._emit(Kind.ADAPTIVE, candidate=cell.build, baseline=pair.baseline.build,
                               label=cell.label(), step=decision.step, reason=decision.reason,
                               repetitions=spent)
            if not open_ids:
                return
            added = adaptive.next_round(pair, open_ids, self.run_id, self.device.serial, rep)
            self._ready = dataclasses.replace(
                self._ready, todo_count=self._ready.todo_count + len(added),
                runnable_ids=self._ready.runnable_ids | {t.trial_id for t in added})
            self._run_trials(added, index)
            index += len(added)
            rep += 1

    def _prefill_values(self) -> None:
        """A resumed local adaptive run: the values its earlier sessions stored count too."""
        policy = self.adaptive_policy
        if policy is None or not self.done or self._local_store is None:
            return
        frame = store.read_table(self._local_store, "trials")
        if frame.empty:
            return
        mine = frame[(frame["run_id"] == self.run_id)
                     & (frame["device_serial"] == self.device.serial)]
        self._values = adaptive.values_from_frame(mine, policy.metric)
        self._throttled = adaptive.throttled_from_frame(mine)

    def _run_trials(self, job: Sequence[TrialSpec], first_index: int) -> None:
        assert self._ready is not None
        serial = self.device.serial
        planned, runnable_ids, contexts, runner = (
            self._ready.planned, self._ready.runnable_ids, self._ready.contexts,
            self._ready.runner)
        for index, spec in enumerate(job, start=first_index):
            if self.stop.is_set():
                return
            plan = planned[spec.cell.cell_id]
            self._emit(Kind.TRIAL, index=index, total=self._ready.todo_count,
                       label=spec.cell.label(), build=spec.cell.build,
                       runs_on=spec.cell.setup_label(), trial_id=spec.trial_id)
            laps: Laps | None = None
            if spec.trial_id in runnable_ids and contexts is not None:
                ctx = contexts[spec.cell.cell_id]
                checking = time.monotonic()
                verdict = self._output_verdict(spec.cell, ctx)
                checked = time.monotonic() - checking  # once per run and cell: its first trial
                trial, samples = self._attempt(runner, spec, ctx, plan)
                laps = runner.laps
                laps.seconds["output_check"] = checked
                trial = dataclasses.replace(trial, **verdict.columns())
                if trial.outcome == "device_lost":
                    if not self._device_back():
                        self._store(trial, samples)
                        self.summary.not_run = self._ready.todo_count - index - 1
                        raise DeviceLostError(
                            f"gone for more than {self.options.reconnect_s:.0f} s; "
                            f"{self.summary.not_run} trials not run (finish them with --resume)",
                            serial)
                    trial = runner.explain_loss(trial)  # back: did it reboot?
            elif contexts is None and spec.trial_id in runnable_ids:
                trial, samples = store_io.push_failed_trial(spec, plan, self.summary.error), []
            elif _setup(spec) in self._refused:
                outcome = ("unsupported" if spec.cell.build == DEVICE_PYTHON_BUILD
                           else "abi_mismatch")
                trial, samples = store_io.bare_trial(
                    spec, outcome, self._refused[_setup(spec)],
                    plan.prediction.total if plan.prediction else None), []
            else:
                trial, samples = store_io.skipped_trial(spec, plan), []
            self._store(trial, samples, laps)

    def _attempt(self, runner: TrialRunner, spec: TrialSpec, ctx: TrialContext,
                 plan: PlannedCell) -> tuple[TrialRecord, list[Any]]:
        """One trial. A device that fails before its engine starts (the gate's reads, or a
        launch whose shell never opened) is waited for and the trial tried once more, so a
        blip never costs a measurement."""
        for attempt in (1, 2):
            try:
                return runner.run(spec, ctx)
            except DeviceError:
                if attempt == 2 or not self._device_back():
                    break
        return store_io.lost_trial(spec, plan), []

    def _output_verdict(self, cell: Cell, ctx: TrialContext) -> outputcheck.Verdict:
        """The output check of this cell's (engine, build, model file) on its compute device
        with its offloaded layers, run before its first trial on this phone and reused for
        the rest (``harness.run.outputcheck``): a backend that computes wrong tokens fails
        the check of its own cells only."""
        knobs = outputcheck.CheckKnobs.of(cell)
        key = (cell.engine, cell.build, ctx.model, knobs)
        if key not in self._checks:
            if self._ready is not None:  # the check runs on the phone: conditions change
                self._ready.runner.forget_reading()
            self._checks[key] = self._check_output(cell, ctx, knobs)
            verdict = self._checks[key]
            self._emit(Kind.OUTPUT_CHECK, build=cell.build, model=cell.model, quant=cell.quant,
                       device=cell.compute_device, n_gpu_layers=cell.n_gpu_layers,
                       knobs=knobs.text(), status=verdict.status.value, detail=verdict.detail)
        return self._checks[key]

    def _check_output(self, cell: Cell, ctx: TrialContext,
                      knobs: outputcheck.CheckKnobs) -> outputcheck.Verdict:
        policy = self.prepared.matrix.output_check
        if not policy.enabled:
            return outputcheck.not_checked("output_check is off in the matrix")
        if not isinstance(ctx.engine, LlamaBench):
            return outputcheck.not_checked(
                f"engine {ctx.engine.name} has no greedy generator to check its output with")
        build = self.prepared.builds[cell.build]
        if not any(f.path == f"bin/{outputcheck.GENERATOR}" for f in build.manifest.files):
            return outputcheck.not_checked(
                f"build {build.name} has no bin/{outputcheck.GENERATOR} (made before the output "
                "check ran with each trial's settings, or its llama.h is too old for it; rebuild "
                "it with harness build)")
        model = self.prepared.models[(cell.model, cell.quant)]
        if not isinstance(model, ModelInfo) or ctx.model_meta.sha256 is None:
            return outputcheck.not_checked(f"model {cell.model} {cell.quant} has no file")
        try:
            ref = reference.greedy_reference(Path(model.path), ctx.model_meta.sha256,
                                             policy.prompt, policy.tokens, type_k=knobs.type_k,
                                             type_v=knobs.type_v,
                                             flash_attn=knobs.reference_flash)
        except (HarnessError, OSError, ValueError, RuntimeError) as error:
            return outputcheck.Verdict(outputcheck.Status.ERROR,
                                       detail=f"no reference: {error}")
        generator = f"{ctx.binary.rsplit('/', 1)[0]}/{outputcheck.GENERATOR}"
        command = outputcheck.generator_command(generator, ctx.model, policy.prompt,
                                                policy.tokens, ctx.lib_dir, ctx.env, knobs)
        try:
            result = self.device.shell(command, timeout=self.prepared.matrix.timeout.trial_s)
        except DeviceError as error:
            return outputcheck.Verdict(outputcheck.Status.ERROR, ref.identity,
                                       detail=f"{outputcheck.GENERATOR} did not finish: {error}")
        verdict = outputcheck.judge(ref, result.exit_code, result.stdout, result.stderr,
                                    policy.min_agree)
        return dataclasses.replace(verdict, detail=f"{verdict.detail} ({knobs.text()})")

    def _device_back(self) -> bool:
        """Whether the device answers again within ``reconnect_s``.

        adb reconnects a dropped TCP device by itself; a restarted adb server knows none of them,
        so a ``host:port`` serial is also connected again explicitly.
        """
        if self.stop.is_set():
            return False
        deadline = time.monotonic() + self.options.reconnect_s
        self._emit(Kind.RECONNECTING, seconds=self.options.reconnect_s)
        while True:
            with contextlib.suppress(Exception):
                _reattach(self.device.serial)
                if self.device.shell("echo ok", timeout=5).stdout.strip() == "ok":
                    self._emit(Kind.RECONNECTED)
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(1.0)

    def _memory_bandwidth(self) -> Bandwidth | None:
        """The profile's figure, else one copy test on the phone (both asked once a run)."""
        if self._bandwidth is None:
            if self._ready is not None:  # a copy test may run on the phone: conditions change
                self._ready.runner.forget_reading()
            found = bandwidth.from_profile(self._model) or bandwidth.measure(self.device)
            self._bandwidth = [found]
        return self._bandwidth[0]

    def validated(self, trial: TrialRecord) -> TrialRecord:
        """The trial through the validity gates (``harness.run.validity``) before it is stored:
        an ``ok`` one gets ``valid`` and, when it fails, ``invalid_reason``."""
        figure = self._memory_bandwidth() if needs_bandwidth(trial) else None
        return validate(trial, self.prepared.matrix.require, figure)

    def _store(self, trial: TrialRecord, samples: Sequence[Any], laps: Laps | None = None,
               ) -> None:
        if self.stop.is_set():
            return
        if laps is not None:
            laps.lap("classify")  # the worker's part: the output verdict's columns, a loss
        trial = self.validated(trial)
        if laps is not None:
            laps.lap("validity")  # the gates, and the bandwidth probe once per run
        self.sink(trial, samples)
        timings = {}
        if laps is not None:
            laps.lap("store")
            timings = {"timings": laps.rounded()}
        if self.adaptive_policy is not None:
            self._values.setdefault(trial.cell_id, []).append(
                adaptive.value_of(trial, self.adaptive_policy.metric))
            self._throttled.setdefault(trial.cell_id, []).append(trial.throttled)
        self.summary.outcomes[trial.outcome] += 1
        if trial.outcome == "precondition_failed":  # the phone and the requirement it failed
            self._emit(Kind.PRECONDITION_FAILED, error=trial.error)
        self._emit(Kind.DONE, outcome=trial.outcome, tg_tps=trial.tg_tps, pp_tps=trial.pp_tps,
                   **timings)

    def _push(self, artifacts: Sequence[Artifact]) -> PushReport:
        return ensure_artifacts(
            self.device, artifacts,
            progress=lambda name, done, total: self._emit(
                "push", name=name, done=done, total=total), ledger=self.ledger)

    def _engine_files(self, cell: Cell, engine: Engine) -> tuple[list[Artifact], dict[str, Any]]:
        """What one engine needs on the device for a cell, and where (binary, lib_dir, env)."""
        if isinstance(engine, PyBench):
            runtime = self._python_runtime()
            assert not isinstance(runtime, str)  # refused cells never reach the push
            files, folder = _bench_artifacts()
            return files, {"binary": runtime.path, "lib_dir": None,
                           "env": {"PYTHONPATH": folder}}
        build = self.prepared.builds[cell.build]
        files, binary, lib_dir = build_artifacts(build, engine_binary(engine))
        return files, {"binary": binary, "lib_dir": lib_dir, "env": {}}

    def _model_files(self, cell: Cell, engine: Engine,
                     ) -> tuple[list[Artifact], str, ModelMeta]:
        """What the cell's engine is given of its model: the GGUF file, or the folder of the
        same weights in the engine's own format (``models.NAME.engines``)."""
        model = self.prepared.models[(cell.model, cell.quant)]
        source = self.prepared.matrix.models[cell.model]
        own = source.engine_path(cell.engine, cell.quant)
        n_params = model.n_params if isinstance(model, ModelInfo | ModelCard) else None
        if own is not None:
            found = model_folder(own, f"models.{cell.model}.engines.{cell.engine}",
                                 getattr(engine, "model_files", ()))
            return (list(found.artifacts), found.remote,
                    ModelMeta(sha256=found.sha256, n_params=n_params, file_bytes=found.size,
                              file=own.name, converted_from=source.converted_from))
        if not isinstance(model, ModelInfo):
            raise ConfigError(f"model {cell.model} {cell.quant} has no file to run")
        sha = file_sha256(model.path)
        artifact = Artifact(Path(model.path), sha, model_remote_path(sha, Path(model.path).name))
        return ([artifact], artifact.remote,
                ModelMeta(sha256=sha, n_params=model.n_params, file_bytes=model.file_size,
                          file=Path(model.path).name))

    def _build_meta(self, cell: Cell, facts: DeviceFacts) -> BuildMeta:
        if cell.build == DEVICE_PYTHON_BUILD:
            version = self._python.llama_cpp_version if self._python else None
            return BuildMeta(engine="llama-cpp-python", version=version, abi=facts.abi)
        manifest = self.prepared.builds[cell.build].manifest
        return BuildMeta(engine=manifest.engine, version=manifest.version,
                         commit=manifest.commit, abi=manifest.abi)

    def _pagecache_tool(self, facts: DeviceFacts,
                        runnable: Sequence[TrialSpec]) -> Artifact | None:
        """The page-cache tool for this phone's ABI (model residency at every launch, and the
        cache knob's evict and warm). Without it trials still run, with no residency figure;
        cells with a cache knob cannot, and the device says why."""
        try:
            if facts.abi is None:
                raise BuildError("the device does not say its ABI (ro.product.cpu.abi)")
            local = ensure_pagecache(facts.abi)
        except BuildError as error:
            if any(t.cell.cache for t in runnable):
                raise ConfigError(f"{self.device.serial}: cells with a cache knob need the "
                                  f"page-cache tool on the phone: {error}") from error
            return None
        sha = file_sha256(local)
        return Artifact(local, sha, f"{DEVICE_ROOT}/tools/{sha}/pagecache", executable=True)

    def _deploy(self, runnable: Sequence[TrialSpec], planned: Mapping[str, PlannedCell],
                facts: DeviceFacts) -> dict[str, TrialContext] | None:
        """Push what the runnable trials need; None when the push failed (disk full ...)."""
        artifacts: dict[str, Artifact] = {}
        contexts: dict[str, TrialContext] = {}
        big = facts.big_cpus or tuple(range(facts.cpu_count or 1))
        device_meta = _meta_device(facts)
        tool = self._pagecache_tool(facts, runnable)
        if tool is not None:
            artifacts[tool.remote] = tool
        for spec in runnable:
            cell = spec.cell
            if cell.cell_id in contexts:
                continue
            engine = get_engine(cell.engine)
            if isinstance(engine, PyBench) and self._python is not None:
                engine = PyBench(gpu_offload=self._python.gpu_offload)
            if isinstance(engine, LlamaBench) and cell.build in self.prepared.builds:
                engine = dataclasses.replace(
                    engine, gpu_backends=self.prepared.builds[cell.build].manifest.backends)
            engine_files, where = self._engine_files(cell, engine)
            model_files, model_remote, model_meta = self._model_files(cell, engine)
            extra = list(model_files)
            prompt = None
            if getattr(engine, "wants_prompt_file", False):
                prompt = prompt_artifact(cell.n_prompt, cache_root() / "prompts")
                extra.append(prompt)
            for artifact in [*engine_files, *extra]:
                artifacts[artifact.remote] = artifact
            env = dict(where["env"])
            if hasattr(engine, "environment"):
                env.update(engine.environment(where["binary"], model_remote))
            prediction = planned[cell.cell_id].prediction
            contexts[cell.cell_id] = TrialContext(
                engine=engine, binary=where["binary"], lib_dir=where["lib_dir"],
                env=env, model=model_remote,
                prompt_file=prompt.remote if prompt is not None else None,
                cpu_mask=_mask(big) if cell.affinity == "big" else None,
                big_cpu=max(big),
                memory_limit_bytes=(facts.available_ram_kb or 0) * 1024 or None,
                predicted_peak_bytes=prediction.total if prediction else None,
                predicted_kv_bytes=prediction.kv if prediction else None,
                device_meta=device_meta,
                build_meta=self._build_meta(cell, facts),
                model_meta=model_meta,
                pagecache=tool.remote if tool is not None else None,
                predicted_paging_tg_tps=(planned[cell.cell_id].paging_tg_tps),
                predicted_accelerator_bytes=prediction.device if prediction else None,
                predicted_host_bytes=prediction.host if prediction else None,
            )
        try:
            try:
                report = self._push(list(artifacts.values()))
            except DeviceError as error:
                # adb reports a connection cut mid-push as a bare sync error: once the device
                # answers again, push once more (what arrived intact is reused)
                if not self._device_back():
                    raise DeviceLostError(f"gone during the push ({error})",
                                          self.device.serial) from error
                report = self._push(list(artifacts.values()))
        except DeviceLostError:
            raise
        except (DeviceError, OSError) as error:
            self.summary.error = f"push failed: {error}"
            self._emit(Kind.PUSH_FAILED, error=str(error))
            return None
        self.summary.bytes_pushed += report.bytes_pushed
        self._emit(Kind.PUSHED, bytes=report.bytes_pushed, files=report.files_pushed,
                   reused=report.files_reused)
        return self._with_capabilities(contexts, runnable)

    def _with_capabilities(self, contexts: dict[str, TrialContext],
                           runnable: Sequence[TrialSpec]) -> dict[str, TrialContext]:
        """Ask each llama.cpp build whose cells want a device, or that has a device backend,
        which devices it has here; what its drivers hold (the probe's peak) goes into every
        prediction of its cells, CPU cells included: a GPU build loads its drivers whatever the
        cell asks."""
        wanted = {t.cell.cell_id: t.cell.build for t in runnable
                  if isinstance(contexts[t.cell.cell_id].engine, LlamaBench)
                  and (t.cell.compute_device != knobs.CPU_DEVICE
                       or self._has_backends(t.cell.build))}
        for cell_id, build in sorted(wanted.items()):
            ctx = contexts[cell_id]
            if build not in self._capabilities:
                self._capabilities[build] = self._list_devices(build, ctx)
                found = self._capabilities[build]
                self._emit(Kind.DEVICES, build=build, devices=list(found.names()),
                           error=found.unknown, driver_bytes=found.driver_bytes)
            contexts[cell_id] = with_driver(_with_dialect(ctx, self._capabilities[build]),
                                            self._capabilities[build])
        return contexts

    def probed(self) -> Probed:
        """What this run probed on the phone, for a later run's ``reuse``."""
        digests = {name: build_digest(build) for name, build in self.prepared.builds.items()}
        return Probed(
            bandwidth=tuple(b for b in self._bandwidth or () if b is not None),  # found
            capabilities={b: (digests[b], c) for b, c in self._capabilities.items()
                          if b in digests},
            checks={k: (digests[k[1]], v) for k, v in self._checks.items()
                    if k[1] in digests and v.status == outputcheck.Status.MATCH})

    def reuse(self, probed: Probed) -> None:
        """Take an earlier run's probes of this phone (same boot) for the builds whose content
        is unchanged, before ``prepare_jobs``."""
        digests = {name: build_digest(build) for name, build in self.prepared.builds.items()}
        if probed.bandwidth:
            self._bandwidth = list(probed.bandwidth)
        self._capabilities.update({b: c for b, (d, c) in probed.capabilities.items()
                                   if digests.get(b) == d})
        self._checks.update({k: v for k, (d, v) in probed.checks.items()
                             if digests.get(k[1]) == d})

    def _has_backends(self, build: str) -> bool:
        """Whether a build has a device backend compiled in (its manifest says so)."""
        found = self.prepared.builds.get(build)
        return found is not None and bool(found.manifest.backends)

    def _list_devices(self, build: str, ctx: TrialContext) -> Capability:
        command = peak_watched(launch_line(list_devices_command(ctx.binary), ctx.lib_dir,
                                           ctx.env))
        try:
            result = self.device.shell(command, timeout=120)
        except DeviceError as error:
            return Capability(build, unknown=f"--list-devices did not finish: {error}")
        return capability_from_output(build, result.exit_code, result.stdout, result.stderr)


def _with_dialect(ctx: TrialContext, capability: Capability) -> TrialContext:
    """A llama-bench too old for --list-devices is too old for -dev too: its context's adapter
    takes the flags its usage lists, so a device cell, and a CPU cell of a build with a GPU
    backend, are unsupported with the reason (``LlamaBench.supports``) instead of launched."""
    if capability.usage is None or not isinstance(ctx.engine, LlamaBench):
        return ctx
    engine = dataclasses.replace(ctx.engine, dialect=dialect_from_help(capability.usage))
    return dataclasses.replace(ctx, engine=engine)


def with_driver(ctx: TrialContext, capability: Capability) -> TrialContext:
    """The context with its build's capability, and its drivers' memory (when the probe read
    it) added to the predicted peak and host share (``MemoryPrediction.driver``)."""
    driver = capability.driver_bytes
    if not driver:
        return dataclasses.replace(ctx, capability=capability, driver_host_bytes=driver)
    return dataclasses.replace(
        ctx, capability=capability, driver_host_bytes=driver,
        predicted_peak_bytes=None if ctx.predicted_peak_bytes is None
        else ctx.predicted_peak_bytes + driver,
        predicted_host_bytes=None if ctx.predicted_host_bytes is None
        else ctx.predicted_host_bytes + driver)


def _reattach(serial: str) -> None:
    """``adb connect`` a network serial (``host:port``); USB devices come back by themselves."""
    host, _, port = serial.rpartition(":")
    if host and port.isdigit():
        from harness.device.adb import adb_client

        adb_client().connect(serial, timeout=5)

