"""One trial on one device: gate, launch, sample, collect, classify.

The engine runs in the foreground of one adb shell (shell protocol v2 gives its exit status,
137 for SIGKILL); its own shell writes its pid to a file first and then ``exec``s the engine, so
the sampler and the timeout watchdog address the engine process itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from harness.android.lmkd import parse_lmkd_kills
from harness.android.meminfo import parse_meminfo
from harness.device.base import Device
from harness.engines.base import Engine, Measurement
from harness.errors import DeviceError, EngineError, HarnessError
from harness.records import SampleRecord, TrialRecord
from harness.run.cooldown import CooldownPolicy, GateResult, wait_until_ready
from harness.run.deploy import DEVICE_ROOT
from harness.run.order import TrialSpec
from harness.run.outcome import Observation, Outcome, classify
from harness.run.probe import memory_from_output, split_sections, state_command, state_from_output
from harness.run.sampler import Sampler, Tick
from harness.run.state import (
    DeviceState,
    ProcessMemory,
    hottest,
    peak,
    throttled_during,
    worst_status,
)

KIB = 1024


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
    device_meta: dict[str, Any]  # serial, model, manufacturer, soc, sdk, ram_bytes
    build_meta: dict[str, Any]  # engine, version, commit, abi
    model_meta: dict[str, Any]  # sha256, n_params, file_bytes


@dataclass(frozen=True)
class TrialPolicy:
    cooldown: CooldownPolicy
    timeout_s: float
    sample_interval_s: float = 0.5  # <= 0: no sampling at all (to measure its cost)
    fast_start_s: float = 2.0  # sample quickly at first: short trials still get samples
    state_interval_s: float = 2.0
    throttle_status: int = 1  # a status above this during the trial marks it throttled


def _trial_dir(spec: TrialSpec) -> str:
    digest = hashlib.sha256(spec.trial_id.encode()).hexdigest()[:16]
    return f"{DEVICE_ROOT}/trials/{digest}"


# An on-device watcher of the engine's /proc status, started by the launching shell just before it
# becomes the engine (the shell's $$, passed as $1, is the engine's pid after exec). Shell
# builtins only, except one `sleep` per round (every 10 ms for the first 100 rounds, while loading
# and the first graph set the peak, then every `watch_s`), so it costs little. It keeps the
# kernel's peak (VmHWM) and the largest VmRSS it saw in the file `mem`, so even a sub-second
# trial, too short for samples over adb, has its peak. A zombie's status has no Vm lines: the
# last values stay. It ends when the engine's /proc entry does, i.e. once adbd has reaped it.
_WATCH = (
    "m=0; h=0; n=0; while [ -d /proc/$1 ]; do "
    "while read -r k v u; do case $k in VmHWM:) h=$v;; "
    "VmRSS:) [ \"$v\" -gt \"$m\" ] && m=$v;; esac; done < /proc/$1/status; "
    "echo \"$h $m\" > mem; n=$((n+1)); "
    "if [ $n -lt 100 ]; then sleep 0.01; else sleep {interval}; fi; done"
)


def launch_command(workdir: str, argv: Sequence[str], lib_dir: str | None,
                   watch_s: float | None = 0.05) -> str:
    """The shell line that records its pid and becomes the engine (every word quoted).

    Written for Android's mksh as much as for dash: the watcher is its own ``sh -c`` started
    from a brace group, with its streams on /dev/null, after the set-up has finished. mksh keeps
    copies of the shell's stdout/stderr (fds 10/11) in a backgrounded and-list or subshell; a
    watcher holding them would keep adbd's stream open after the engine exits, adbd reaps only
    at EOF, and the engine would stay a zombie the watcher waits for, forever.
    """
    env = ["env", f"LD_LIBRARY_PATH={lib_dir}"] if lib_dir else []
    words = " ".join(shlex.quote(word) for word in [*env, *argv])
    folder = shlex.quote(workdir)
    setup = f"mkdir -p {folder} && cd {folder} && echo $$ > pid || exit 1"
    if not watch_s:
        return f"{setup}; exec {words}"
    script = shlex.quote(_WATCH.format(interval=float(watch_s)))
    watcher = f"{{ sh -c {script} watch $$ > /dev/null 2>&1 < /dev/null & }}"
    return f"{setup}; {watcher}; exec {words}"


def dumpsys_command(workdir: str) -> str:
    pid_file = shlex.quote(f"{workdir}/pid")
    return f"p=$(cat {pid_file} 2>/dev/null); [ -n \"$p\" ] && dumpsys meminfo \"$p\""


def dumpsys_memory(text: str) -> ProcessMemory | None:
    """Android's own account of the engine (TOTAL PSS/RSS/SWAP), a cross-check of procfs."""
    info = parse_meminfo(text)
    if info is None or info.pss_kb is None:
        return None
    return ProcessMemory(pss_kb=info.pss_kb, rss_kb=info.rss_kb, swap_kb=info.swap_pss_kb,
                         source="dumpsys")


def watcher_memory(text: str) -> ProcessMemory | None:
    """The watcher's `mem` file: "<VmHWM kB> <largest VmRSS kB>"."""
    parts = text.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or parts[0] == "0":
        return None
    return ProcessMemory(rss_kb=int(parts[1]), vm_hwm_kb=int(parts[0]), source="device-watch")


def memory_read_command(workdir: str) -> str:
    pid_file = shlex.quote(f"{workdir}/pid")
    return (
        f"p=$(cat {pid_file} 2>/dev/null); [ -n \"$p\" ] || exit 0; "
        "echo @@harness:rollup; cat /proc/$p/smaps_rollup 2>/dev/null; "
        "echo @@harness:status; cat /proc/$p/status 2>/dev/null"
    )


def _check_engine_report(records: Sequence[Any], spec: TrialSpec) -> str | None:
    """The engine's own account of what it ran, against the cell; a difference is a mismatch."""
    cell = spec.cell
    wanted = {"n_threads": cell.threads, "type_k": cell.type_k, "type_v": cell.type_v}
    for record in records:
        data = record.as_dict()
        for key, value in wanted.items():
            got = data.get(key)
            if got is not None and got != value:
                return f"asked {key}={value}, engine ran {key}={got}"
    return None


def _lmk_line(logcat: str, pid: int | None) -> str | None:
    if pid is None:
        return None
    for line in logcat.splitlines():
        kills = parse_lmkd_kills(line)
        if kills and kills[0].pid == pid:
            return line.strip()
    return None


class TrialRunner:
    """Runs trials on one device; the clock is injectable for tests of the timing logic."""

    def __init__(self, device: Device, policy: TrialPolicy,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.device = device
        self.policy = policy
        self.clock = clock

    def read_state(self, big_cpu: int) -> DeviceState:
        return state_from_output(self.device.shell(state_command(big_cpu), timeout=30).stdout)

    def gate(self, big_cpu: int) -> GateResult:
        return wait_until_ready(lambda: self.read_state(big_cpu), self.policy.cooldown)

    def run(self, spec: TrialSpec, ctx: TrialContext) -> tuple[TrialRecord, list[SampleRecord]]:
        started_at = datetime.now(UTC)
        unsupported = ctx.engine.supports(spec.cell)
        if unsupported:
            return self._record(spec, ctx, started_at, Outcome("unsupported", unsupported),
                                None, [], None, None), []
        gate = self.gate(ctx.big_cpu)
        workdir = _trial_dir(spec)
        # One trial is one repetition: the engine runs the cell once, the run repeats trials.
        once = dataclasses.replace(spec.cell, repetitions=1)
        argv = ctx.engine.argv(once, ctx.binary, ctx.model, ctx.cpu_mask)
        sampler = Sampler(
            read_memory=lambda: memory_from_output(
                self.device.shell(memory_read_command(workdir), timeout=30).stdout),
            read_state=lambda: self.read_state(ctx.big_cpu),
            interval_s=self.policy.sample_interval_s,
            state_interval_s=self.policy.state_interval_s,
            fast_start_s=self.policy.fast_start_s,
            read_extra=lambda: dumpsys_memory(
                self.device.shell(dumpsys_command(workdir), timeout=30).stdout),
        )
        timed_out = threading.Event()

        def watchdog() -> None:
            timed_out.set()
            with contextlib.suppress(HarnessError):  # a lost device ends the launch anyway
                self.device.shell(f"kill -9 $(cat {shlex.quote(workdir + '/pid')})",
                                  timeout=30)

        timer = threading.Timer(self.policy.timeout_s, watchdog)
        start = self.clock()
        if self.policy.sample_interval_s > 0:
            sampler.start()
        timer.start()
        lost = False
        exit_code: int | None = None
        stdout = stderr = ""
        try:
            watch = 0.05 if self.policy.sample_interval_s > 0 else None
            result = self.device.shell(launch_command(workdir, argv, ctx.lib_dir, watch),
                                       timeout=self.policy.timeout_s + 60)
            exit_code, stdout, stderr = result.exit_code, result.stdout, result.stderr
        except DeviceError as error:
            # A command our watchdog gave up on is a timeout; any other transport failure
            # (connection dropped, adb server gone) means the device was lost mid-trial.
            lost = not timed_out.is_set()
            stderr = str(error)
        finally:
            timer.cancel()
            ticks = sampler.stop()
        wall = self.clock() - start
        if not lost:  # the state the trial left the phone in: heat shows after the work
            with contextlib.suppress(HarnessError):
                ticks.append(Tick(int(wall * 1000), None, self.read_state(ctx.big_cpu)))
        pid: int | None = None
        logcat = ""
        if not lost:
            try:
                after = split_sections(self.device.shell(
                    f"echo @@harness:pid; cat {shlex.quote(workdir + '/pid')}; "
                    f"echo @@harness:mem; cat {shlex.quote(workdir + '/mem')} 2>/dev/null; "
                    "echo @@harness:logcat; logcat -d 2>/dev/null | "
                    "grep -i -e lowmemorykiller -e 'out of memory' | tail -n 50; "
                    f"rm -rf {shlex.quote(workdir)}", timeout=60).stdout)
                pid_text = after.get("pid", "").strip()
                pid = int(pid_text) if pid_text.isdigit() else None
                logcat = after.get("logcat", "")
                watched = watcher_memory(after.get("mem", ""))
                if watched is not None:
                    ticks.append(Tick(int(wall * 1000), watched, None))
            except DeviceError:  # the engine's end was seen; only the evidence is missing
                pass
        try:
            records = ctx.engine.parse(stdout)
        except EngineError as error:
            records, stderr = [], f"{stderr}\n{error}"
        measurements = ctx.engine.measure(records)
        peak_rss = peak([t.memory.rss_kb for t in ticks if t.memory])
        outcome = classify(Observation(
            exit_code=exit_code,
            timed_out=timed_out.is_set(),
            device_lost=lost,
            lmk_line=_lmk_line(logcat, pid),
            peak_rss_bytes=None if peak_rss is None else peak_rss * KIB,
            memory_limit_bytes=ctx.memory_limit_bytes,
            complete_records=len(measurements),
            expected_records=1,
            stderr_tail="\n".join(stderr.strip().splitlines()[-8:]),
            mismatch=_check_engine_report(records, spec),
        ))
        trial = self._record(spec, ctx, started_at, outcome, gate, ticks, wall,
                             measurements[0] if measurements else None,
                             json.dumps([r.as_dict() for r in records]) if records else None)
        return trial, self._samples(spec, ticks)

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
            ))
        return out

    def _record(self, spec: TrialSpec, ctx: TrialContext, started_at: datetime,
                outcome: Outcome, gate: GateResult | None, ticks: Sequence[Tick],
                wall: float | None, measurement: Measurement | None = None,
                engine_record: str | None = None) -> TrialRecord:
        cell = spec.cell
        mems = [t.memory for t in ticks if t.memory]
        states = [t.state for t in ticks if t.state]
        ok = outcome.outcome == "ok" and measurement is not None
        start_state = gate.state if gate else None
        return TrialRecord(
            run_id=spec.run_id, trial_id=spec.trial_id, job_id=spec.job_id,
            cell_id=cell.cell_id, config_id=cell.config_id, rep=spec.rep,
            started_at=started_at, wall_s=wall,
            device_serial=spec.serial,
            device_model=ctx.device_meta.get("model"),
            device_manufacturer=ctx.device_meta.get("manufacturer"),
            device_soc=ctx.device_meta.get("soc"),
            device_sdk=ctx.device_meta.get("sdk"),
            device_ram_bytes=ctx.device_meta.get("ram_bytes"),
            build_id=cell.build,
            build_engine=ctx.build_meta.get("engine"),
            build_version=ctx.build_meta.get("version"),
            build_commit=ctx.build_meta.get("commit"),
            build_abi=ctx.build_meta.get("abi"),
            model_name=cell.model, model_sha256=ctx.model_meta.get("sha256"), quant=cell.quant,
            model_n_params=ctx.model_meta.get("n_params"),
            model_file_bytes=ctx.model_meta.get("file_bytes"),
            n_ctx=cell.n_ctx, n_prompt=cell.n_prompt, n_gen=cell.n_gen, n_depth=cell.n_depth,
            type_k=cell.type_k, type_v=cell.type_v, flash_attn=cell.flash_attn,
            threads=cell.threads, affinity=ctx.cpu_mask or cell.affinity, mmap=cell.mmap,
            n_batch=cell.n_batch, n_ubatch=cell.n_ubatch,
            outcome=outcome.outcome, error=outcome.error,
            pp_tps=measurement.prompt_tps if ok and measurement else None,
            tg_tps=measurement.gen_tps if ok and measurement else None,
            ttft_ms=(measurement.ttft_s * 1000 if ok and measurement
                     and measurement.ttft_s is not None else None),
            peak_pss_bytes=_bytes(peak([m.pss_kb for m in mems])),
            peak_rss_bytes=_bytes(peak([m.rss_kb for m in mems])),
            peak_swap_bytes=_bytes(peak([m.swap_kb for m in mems])),
            vm_hwm_bytes=_bytes(peak([m.vm_hwm_kb for m in mems])),
            peak_pss_anon_bytes=_bytes(peak([m.pss_anon_kb for m in mems])),
            peak_pss_file_bytes=_bytes(peak([m.pss_file_kb for m in mems])),
            predicted_peak_bytes=ctx.predicted_peak_bytes,
            max_temp_c=hottest(states),
            max_thermal_status=worst_status(states),
            throttled=throttled_during(states, self.policy.throttle_status),
            cooldown_waited_s=gate.waited_s if gate else None,
            start_thermal_status=start_state.thermal_status if start_state else None,
            start_temp_c=start_state.max_temp_c if start_state else None,
            battery_level=start_state.battery_level if start_state else None,
            battery_temp_c=start_state.battery_temp_c if start_state else None,
            evidence=outcome.evidence, engine_record=engine_record,
            device_abi=ctx.device_meta.get("abi"),
            cpu_emulation=ctx.device_meta.get("cpu_emulation"),
        )


def _bytes(kb: int | None) -> int | None:
    return None if kb is None else kb * KIB
