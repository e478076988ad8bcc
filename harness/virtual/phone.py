"""The running phone behind the ADB daemon: its processes, memory, heat, power and faults.

One asyncio task ticks every ``TICK_S``: it finds the phone's processes (see procs.py), charges
their CPU time to the thermal model and the battery (power.py), runs the phone's memory rules,
rewrites the generated /proc and /sys files (a GPU's among them, gpu.py), and applies fault
requests. A second task duty-cycles SIGSTOP/SIGCONT over the phone's processes while the
thermal status asks for it.
Neither spins: both sleep between steps, and the throttle task idles when the phone is cool.

Memory, as on a stock phone (VIRTUAL_PHONE.md, "Android fidelity"). With the ``cgroup`` memory
model (harness.virtual.cgroups) the host kernel enforces it: the phone's processes live in a
memory cgroup with the phone's limit, its background apps hold real memory there
(harness.virtual.balloons), clean file pages are reclaimed and read back from the phone's own
throttled disk, and when nothing is left to reclaim the kernel's OOM killer takes the apps
first, then the largest process; the daemon only reads what happened (the tick, and a pidfd per
app) and logs lmkd's lines for the apps. With the ``simulated`` model the footprint is the RSS
of the phone's processes (file pages included) plus simulated apps, checked every tick: over the
limit, the clean file pages the phone's processes map from its own files are paged out first
(reclaim.py: an mmap'd model bigger than the phone then pages, as with the cgroup model), then
lmkd kills apps, highest oom_score_adj first, then the largest process is SIGKILLed.
Either way the engine's kill leaves nothing a shell can read (user builds have no kernel lines
in logcat), or, if the profile makes system_server the victim, the phone reboots. Killed apps
restart a few seconds after the pressure is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fnmatch
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.units import MIB
from harness.virtual import balloons, cgroups, formats, logstore, procs, reclaim, thermal
from harness.virtual import gpu as gpumodel
from harness.virtual import power as powermodel
from harness.virtual.config import (
    CHARGING,
    DEEP_IDLE_STATES,
    PLUG_TYPES,
    STAY_ON_ALL,
    PhoneConfig,
    PowerConfig,
)
from harness.virtual.sandbox import STOPPED_WHY, TOOLS, Sandbox, write_atomic
from harness.virtual.userland import (
    NO_SMAPS_ROLLUP,
    exec_env,
    install_userland,
    resolve_userland,
)

TICK_S = 0.25
HOST_CPUS = frozenset(os.sched_getaffinity(0))  # phone cpu ids are host cpu ids
UPTIME_S = 0.02  # /proc/uptime is rewritten this often: the kernel's shows centiseconds
THROTTLE_PERIOD_S = 0.1
LMKD_PID = 612
ZYGOTE_PID = 689
SYSTEM_SERVER_PID = 1042
ON_OFF = ("on", "off")
FAULT_KINDS = ("drop", "hang", "crash", "disk-full", "disk-ok", "thermal", "thermal-release",
               "battery-saver", "charging", "screen", "doze", "clear")
# the values a fault takes, where they are words
FAULT_VALUES: dict[str, tuple[str, ...]] = {
    "battery-saver": ON_OFF, "charging": CHARGING, "screen": ON_OFF, "doze": DEEP_IDLE_STATES}
REFRESH_IGNORE_S = 5.0
APP_RESTART_S = 3.0  # killed apps come back this long after the memory pressure is gone,
APP_FIT = 0.9  # and only while they fit under this share of the limit
RECLAIM_AT = 0.9  # footprint share of the limit from which the kernel reclaims (PSI "some")
REBOOT_S = 2.0  # a rebooting phone refuses connections this long
REAP_WAIT_S = 5.0  # an app killed before another waits this long for its exit to be seen
KILLED_GRACE_S = 2.0  # a SIGKILLed process still freeing its memory is not counted again
RECLAIM_MARGIN = 16  # simulated reclaim frees what is over the limit and 1/16 of it more
HELD = ("RssFile", "RssAnon", "VmSwap")  # what the simulated reclaim weighs, per process
RECLAIM_PROGRESS_KB = 256  # a reclaim round that freed this much defers the kills to the next
# the simulated model's memory rule runs this often between ticks while a shell runs: a kernel
# acts the moment memory runs out, and a fast engine maps a whole model within one 0.25 s tick
GUARD_S = 0.02
LOG_TRIM_BYTES = 256 * 1024  # the log file is trimmed to its rings after growing this much
LOG_MAX_BYTES = 1_000_000  # power.log / thermal.log keep their newest half past this
POWER_LOG = "power.log"  # truth for tests: "<uptime_s> <load_w> <charging 0|1>" per tick
STATUS_LOG = "thermal.log"  # "<uptime_s> <status>" whenever the model's status changes
LMKD_REASON = "min watermark is breached"
# With the cgroup model and system_server as the OOM victim, a stand-in holds 1% of the limit
# (at least SYSTEM_SERVER_KB) at the kernel score 990, the bottom of the apps' (balloons.py):
# with that memory it outweighs any engine that fits the limit, so the kernel takes it before
# the engine and (apps of a few MB and up) after the apps.
SYSTEM_SERVER_ADJ = 990
SYSTEM_SERVER_KB = 1024


@dataclass
class Faults:
    hang_next: bool = False
    crash_next: bool = False
    disk_full: bool = False
    refuse_until: float = 0.0


@dataclass
class App:
    """A simulated background app: memory in the phone's accounting, no host process."""

    name: str
    uid: int
    adj: int
    rss_kb: int
    pid: int = 0  # 0 while killed


@dataclass
class PowerState:
    screen_on: bool
    charging: str
    battery_saver: bool
    doze: str
    stay_on_setting: int  # settings global stay_on_while_plugged_in

    @classmethod
    def from_config(cls, power: PowerConfig) -> PowerState:
        return cls(power.screen_on, power.charging, power.battery_saver, power.doze,
                   STAY_ON_ALL if power.stay_awake else 0)


@dataclass
class Pressure:
    """/proc/pressure/memory: stall totals (us) and their decaying averages (%)."""

    some_us: float = 0.0
    full_us: float = 0.0
    some_avg: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    full_avg: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    def step(self, dt: float, some: float, full: float) -> None:
        """``some``/``full``: the share of ``dt`` some/all tasks stalled on memory."""
        self.some_us += some * dt * 1e6
        self.full_us += full * dt * 1e6
        for i, window in enumerate((10.0, 60.0, 300.0)):
            decay = math.exp(-dt / window)
            self.some_avg[i] = self.some_avg[i] * decay + 100 * some * (1 - decay)
            self.full_avg[i] = self.full_avg[i] * decay + 100 * full * (1 - decay)

    def text(self) -> str:
        return formats.pressure(self.some_avg, int(self.some_us), self.full_avg,
                                int(self.full_us))


def _on(value: object) -> bool:
    word = str(value).lower()
    if word not in ("on", "off", "1", "0", "true", "false"):
        raise ValueError(f"expected on or off, got {value!r}")
    return word in ("on", "1", "true")


def _alive(pid: int) -> bool:
    """The process runs (an exited one waiting to be reaped has let go of its GPU memory)."""
    stat = procs.read_stat(pid)
    return stat is not None and stat.state not in ("Z", "X")


@dataclass
class Phone:
    sandbox: Sandbox
    config: PhoneConfig
    faults: Faults = field(default_factory=Faults)
    sessions: set[int] = field(default_factory=set)
    on_drop: Callable[[], None] = lambda: None
    # the daemon's event loop: call back when the pidfd given turns readable (its process
    # ended), so an app the kernel killed is logged at once, not at the next tick
    watch_exit: Callable[[int, Callable[[], None]], None] | None = None
    _ignore: set[int] = field(default_factory=set)
    _ignore_at: float = 0.0
    _cpu: dict[int, int] = field(default_factory=dict)
    _members: list[procs.ProcStat] = field(default_factory=list)
    _written: dict[Path, str] = field(default_factory=dict)
    _last_tick: float = field(default_factory=time.monotonic)
    shell_env: dict[str, str] = field(default_factory=dict)  # set at boot
    on_stop: Callable[[], None] | None = None  # the daemon's own stop (set by it)
    apps: list[App] = field(default_factory=list)
    pressure: Pressure = field(default_factory=Pressure)
    _killed: dict[int, float] = field(default_factory=dict)  # pid -> when the OOM killer hit
    _pressure_at: float = 0.0  # when the footprint last passed the limit
    _booted_at: float = field(default_factory=time.monotonic)
    _log_trim_at: int = LOG_TRIM_BYTES
    _busy_cores: float = 0.0  # CPU seconds the phone burned in the last tick per second
    _demand: list[float] = field(default_factory=list)  # runnable samples since the last tick
    _tick_dt: float = 0.0
    _interval_start: float = 0.0  # monotonic time the last tick's interval began
    _logged_status: int | None = None  # the thermal status thermal.log last recorded
    _log_bytes: dict[str, int] = field(default_factory=dict)
    # the cgroup model: the kernel's counts at the last reading, and the processes that hold
    # the live apps' memory (and system_server's, when the profile makes it the OOM victim)
    _anon_kb: int = 0
    _refaults: int | None = None  # None until the first reading: what came before is not ours
    _oom_kills: int | None = None
    _balloons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _system_server: subprocess.Popen[bytes] | None = None
    _reap_blocked_at: float | None = None  # an app seen dead waits for one killed before it
    # the GPU (a profile's gpu: key): each non-service process's CPU ticks in the last tick,
    # from which the GPU's load is modelled (harness.virtual.gpu)
    _spent: dict[int, int] = field(default_factory=dict)
    # the simulated model reclaims clean file pages before it kills (reclaim.py), where allowed
    _can_reclaim: bool = False
    _reclaim_logged: float = 0.0

    def __post_init__(self) -> None:
        self.groups = (cgroups.PhoneCgroups.from_json(self.config.cgroups)
                       if self.config.memory_model == "cgroup" else None)
        self._can_reclaim = self.groups is None and reclaim.capable() is None
        self.params = thermal.ThermalParams.from_profile(self.config.thermal)
        self.thermal = thermal.ThermalState(die_c=self.params.ambient_c)
        self.power = PowerState.from_config(self.config.android.power)
        self.power_params = powermodel.PowerParams.from_profile(self.config.power_model)
        self.battery = powermodel.initial_battery(self.power_params, self.config.battery_level,
                                                  self.power.charging)
        apps = self.config.android.apps(self.config.limit_mb)
        self.apps = [App(a.name, 10101 + 23 * i, a.adj, a.rss_mb * 1024)
                     for i, a in enumerate(apps)]

    # ----- sessions and processes -------------------------------------------------------------
    def stop_if_refused(self) -> None:
        """A shell could not join the phone's cgroups (execshim.c left why): the phone stops,
        rather than run anything outside its memory limit."""
        if self.on_stop is not None and (self.sandbox.state / STOPPED_WHY).exists():
            self.on_stop()

    def register_session(self, sid: int) -> None:
        self.sessions.add(sid)
        self._ignore.clear()  # the leader may have been scanned before it was registered
        self._write_sessions()

    def _write_sessions(self) -> None:
        text = "".join(f"{s}\n" for s in sorted(self.sessions))
        write_atomic(self.sandbox.state / "sessions", text)

    def members(self) -> list[procs.ProcStat]:
        return list(self._members)

    def signal_all(self, sig: int) -> None:
        for stat in self._members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(stat.pid, sig)

    def kill_everything(self) -> None:
        """At shutdown: no process of the phone survives it, none is left stopped."""
        self._members = procs.session_members(self.sessions, set())
        for sid in self.sessions:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sid, signal.SIGKILL)
        self.signal_all(signal.SIGKILL)
        if self.groups is not None:  # a process that left the sessions (setsid) is still here
            self._stop_balloons()
            for pid in cgroups.procs(self.groups.memory):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    # ----- boot and the tick -----------------------------------------------------------------
    def boot(self) -> None:
        self.sandbox.create()
        if self.config.python:
            self.sandbox.write_python()
        install_userland(self.sandbox.bin, resolve_userland(self.config.shell), keep=set(TOOLS))
        rules = self.config.android
        self.shell_env = {**self.sandbox.shell_env(),
                          **exec_env(self.sandbox.root, self.config.abi, rules.denied(),
                                     rules.smaps_rollup, rules.affinity,
                                     self.groups.procs_files if self.groups else (),
                                     rules.others_denied())}
        if self.groups is not None:
            # a shell that cannot join the cgroups says why there, and the phone stops
            self.shell_env["HARNESS_PHONE_STOP"] = str(self.sandbox.state / STOPPED_WHY)
        (self.sandbox.state / STOPPED_WHY).unlink(missing_ok=True)
        if self.config.gpu is not None and not (self.config.gpu_layer_dir
                                                and self.config.vulkan_icd):
            self.config = gpumodel.provision_gpu(self.config)  # a config made without start
        gpumodel.prepare_folders(self.config, self.sandbox.root, self.sandbox.state)
        self.shell_env.update(gpumodel.shell_environment(self.config, self.sandbox.root,
                                                         self.sandbox.state))
        (self.sandbox.state / "config.json").write_text(self.config.to_json())
        for stale in self.sandbox.control.glob("*.json"):
            stale.unlink()
        self._write_sessions()
        self._write_static_sysfs()
        self._start_system("booted")
        self.tick()

    def _start_system(self, how: str) -> None:
        """What every boot does: a new boot id, uptime from zero, apps started, power as set."""
        self._booted_at = time.monotonic()
        (self.sandbox.state / "boot_time").write_text(f"{time.time():.3f}")
        self._put(self.sandbox.root / "proc/sys/kernel/random/boot_id", f"{uuid.uuid4()}\n")
        self.pressure = Pressure()
        self._killed.clear()
        for name in (POWER_LOG, STATUS_LOG):  # uptime restarts: so do its logs
            write_atomic(self.sandbox.state / name, "")
            self._log_bytes[name] = 0
        self._logged_status = None
        self._write_power()
        self._write_faults()
        model = self.config.props.get("ro.product.model")
        logstore.append(self.sandbox.state, "main", "I", "init", 1,
                        f"virtual phone {self.config.name} ({model}) {how}")
        for app in self.apps:
            app.pid = 0
        self._restart_apps(0, self.config.limit_mb * 1024)
        self._write_apps()
        if self.groups is not None and self.config.android.oom_victim == "system_server":
            self._system_server = balloons.spawn(
                self.groups.procs_files[0], SYSTEM_SERVER_ADJ,
                max(SYSTEM_SERVER_KB, self.config.limit_mb * 1024 // 100))
            if self._system_server is not None:
                self._on_exit(self._system_server.pid, self._system_server_died)

    def _system_server_died(self) -> None:
        if self._system_server is not None and balloons.killed(self._system_server):
            self._system_server = None
            self.reboot()  # the kernel took system_server: the phone restarts

    def reboot(self) -> None:
        """system_server died: every process of the phone goes, every connection drops, and
        the phone comes back ``REBOOT_S`` later with a new boot id and an empty log."""
        self.signal_sessions(signal.SIGCONT)
        self.kill_everything()
        self.sessions.clear()
        self._members = []
        self._write_sessions()
        self.faults.refuse_until = max(self.faults.refuse_until, time.monotonic() + REBOOT_S)
        self.on_drop()
        logstore.clear(self.sandbox.state)
        props = self.sandbox.state / "setprops.json"
        with contextlib.suppress(OSError, ValueError):
            kept = {k: v for k, v in json.loads(props.read_text()).items()
                    if k.startswith("persist.")}
            props.write_text(json.dumps(kept))
        self._start_system("rebooted (system_server was killed)")

    def tick(self) -> None:
        now = time.monotonic()
        self._interval_start = self._last_tick
        dt, self._last_tick = now - self._last_tick, now
        if now - self._ignore_at > REFRESH_IGNORE_S:
            self._ignore.clear()
            self._ignore_at = now
        self._members = procs.session_members(self.sessions, self._ignore)
        cpu_ticks = 0
        seen: dict[int, int] = {}
        for stat in self._members:
            seen[stat.pid] = stat.cpu_ticks
            cpu_ticks += stat.cpu_ticks - self._cpu.get(stat.pid, 0)
        if self.config.gpu is not None:
            self._spent = {s.pid: s.cpu_ticks - self._cpu.get(s.pid, 0)
                           for s in self._members}
        self._cpu = seen
        live_sessions = {s.session for s in self._members}
        if self.sessions - live_sessions:
            self.sessions &= live_sessions | self._recent_sessions()
            self._write_sessions()
        # The work the phone's processes ask for heats it, not what the host granted them: on
        # a loaded host a thread waits for a CPU (still runnable) that a phone would give it,
        # so heat and power do not depend on what else the host runs. Stopped (throttled)
        # threads ask for nothing.
        # The throttle task samples that demand every period (a share of it while it stops
        # them), so one instant per tick does not decide a whole tick's heat and power.
        samples, self._demand = self._demand, []
        demand = sum(samples) / len(samples) if samples else self._runnable()
        cpu_s = max(cpu_ticks / procs.CLOCK_TICKS, demand * dt)
        self.thermal = thermal.step(self.thermal, self.params, cpu_s, dt)
        self._busy_cores, self._tick_dt = (cpu_s / dt if dt > 0 else 0.0), max(0.0, dt)
        self._memory(dt, now)
        self._apply_faults()
        self._write_dynamic_files()
        if logstore.size(self.sandbox.state) > self._log_trim_at:
            logstore.trim(self.sandbox.state, self.config.android.logcat_ring_lines)
            self._log_trim_at = logstore.size(self.sandbox.state) + LOG_TRIM_BYTES

    def _core_weight(self, allowed: str) -> float:
        """What a runnable thread costs in heat and power, in big cores: a thread pinned inside
        one cluster costs that cluster's capacity / 1024 (a little core draws less); one free
        to run anywhere is where a busy thread goes, on a big core (1.0)."""
        cpus = procs.allowed_cpus(allowed)
        if not cpus or cpus >= HOST_CPUS:  # not pinned: the host's every CPU is allowed
            return 1.0
        for index, _first, members in self._cpus():
            if cpus <= set(members):
                return min(1.0, self.config.clusters[index].capacity / 1024)
        return 1.0

    def _recent_sessions(self) -> set[int]:
        # a session whose leader has not been scanned yet must not be forgotten
        return {s for s in self.sessions if procs.read_stat(s) is not None}

    # ----- memory ------------------------------------------------------------------------------
    def footprint_kb(self) -> int:
        """What the phone cannot reclaim. With the cgroup model, its anonymous memory as the
        kernel counts it (the live apps' balloons included); simulated, the RSS of its processes
        (less those the OOM killer just hit), file pages included, plus the live apps."""
        if self.groups is not None:
            return self._anon_kb
        used = sum(s.rss_kb for s in self._members
                   if s.pid not in self._killed)
        return used + sum(a.rss_kb for a in self.apps if a.pid)

    def _memory(self, dt: float, now: float) -> None:
        self._killed = {p: t for p, t in self._killed.items() if now - t < KILLED_GRACE_S}
        if self.groups is not None:
            self._memory_cgroup(dt, now)
            return
        limit = self.config.limit_mb * 1024
        footprint = self.footprint_kb()
        reclaiming = footprint > RECLAIM_AT * limit
        progress = False
        if footprint > limit and self._can_reclaim and self._reclaim_can_help(footprint, limit):
            # as a kernel does before its OOM killer: clean file pages go first (reclaim.py)
            freed = self._reclaim_file_pages(footprint - limit)
            # a kernel kills only when reclaim makes no progress: an engine that faults its
            # mapped weights back as fast as they go (a loaded host) thrashes, it is not killed
            progress = freed >= RECLAIM_PROGRESS_KB
            if now - self._reclaim_logged >= 1.0:  # daemon.log: at most a line a second
                self._reclaim_logged = now
                print(f"simulated reclaim: {footprint} kB > limit {limit} kB, {freed} kB of "
                      "file pages (and anonymous to zram) paged out; " + ", ".join(
                          f"{s.comm}[{s.pid}] {s.rss_kb} kB" for s in self._members),
                      file=sys.stderr, flush=True)
            footprint -= freed
        over = footprint > limit
        self.pressure.step(dt, 1.0 if over else 0.2 if reclaiming else 0.0, 0.5 if over else 0.0)
        if over:
            self._pressure_at = now
            if not progress and self._lmkd(footprint, limit) > limit:
                self._out_of_memory(now)
        elif now - self._pressure_at >= APP_RESTART_S:
            self._restart_apps(footprint, limit)

    def guard(self) -> None:
        """The simulated model's memory rule on fresh readings, between ticks (``GUARD_S``):
        with four checks a second an engine mapped 169 MB on a 128 MB phone and finished
        before one saw it. Only the rule's reclaim and kills run here; the tick keeps the rest
        (pressure over time, restarting apps)."""
        if self.groups is not None or not self.sessions:
            return
        self._members = procs.session_members(self.sessions, self._ignore)
        if self.footprint_kb() > self.config.limit_mb * 1024:
            self._memory(0.0, time.monotonic())

    def _held_kb(self) -> dict[str, int]:
        """The kB of RssFile, RssAnon and VmSwap the phone's processes hold (one read of each
        one's status: this runs every 20 ms while the phone is over its limit)."""
        held = dict.fromkeys(HELD, 0)
        for s in self._members:
            if s.pid in self._killed:
                continue
            text = procs.read_text(f"/proc/{s.pid}/status")
            for key in HELD:
                held[key] += reclaim.status_kb(text, key) or 0
        return held

    def _swap_room_kb(self, held: dict[str, int]) -> int:
        """What the phone's zram can still take (0 without zram)."""
        if not self.config.zram:
            return 0
        return max(0, self.config.zram_mb * 1024 - held["VmSwap"])

    def _reclaim_can_help(self, footprint: int, limit: int) -> bool:
        """Whether the file pages the phone's processes hold (and, with zram, the anonymous
        memory its zram can still take) could bring it under its limit: what is left over the
        limit (anonymous memory: an engine that read its weights in) is out of memory at once,
        as a kernel finds when reclaim cannot reach it."""
        held = self._held_kb()
        anon = min(self._swap_room_kb(held), held["RssAnon"])
        return footprint - held["RssFile"] - anon <= limit

    def _reclaim_file_pages(self, need_kb: int) -> int:
        """Page out the phone's processes' clean file pages (their mapped files under the
        phone's root) until ``need_kb`` are gone, then, on a phone with zram, their anonymous
        memory to it; the kB that went."""
        pids = [s.pid for s in self._members if s.pid not in self._killed]
        limit = self.config.limit_mb * 1024
        margin = limit // RECLAIM_MARGIN  # as kswapd frees up to its high watermark
        step = max(need_kb + margin, limit // RECLAIM_MARGIN)
        try:
            freed = reclaim.reclaim(pids, str(self.sandbox.root.resolve()), need_kb + margin,
                                    step_kb=step)
            room = self._swap_room_kb(self._held_kb()) if freed < need_kb + margin else 0
            if room:
                freed += reclaim.reclaim(pids, None, min(room, need_kb + margin - freed),
                                         step_kb=step)
            return freed
        except OSError as error:  # not allowed after all: kill as before, and say so once
            self._can_reclaim = False
            print(f"simulated reclaim off: {error}", file=sys.stderr, flush=True)
            return 0

    # ----- memory by the host kernel (cgroup model) ---------------------------------------------
    def _memory_cgroup(self, dt: float, now: float) -> None:
        """The kernel reclaims and kills; the tick reads what it did: the phone's anonymous
        memory, its refaults (thrashing), its OOM kills, and which apps those took."""
        assert self.groups is not None
        stat = cgroups.read_stat(self.groups.memory)
        self._anon_kb = cgroups.anon_bytes(stat) // 1024
        used_kb = self._anon_kb + cgroups.cache_bytes(stat) // 1024
        refaults = cgroups.refaults(stat)
        thrashing = self._refaults is not None and refaults > self._refaults
        kills = cgroups.oom_kills(self.groups.memory)
        oom = self._oom_kills is not None and kills > self._oom_kills
        self._refaults, self._oom_kills = refaults, kills
        if self._system_server is not None and balloons.killed(self._system_server):
            self._system_server_died()
            return
        self._reap_apps()
        limit = self.config.limit_mb * 1024
        reclaiming = used_kb >= RECLAIM_AT * limit
        self.pressure.step(dt, 1.0 if oom else 0.5 if thrashing else 0.2 if reclaiming else 0.0,
                           0.5 if oom else 0.25 if thrashing else 0.0)
        if oom:
            self._pressure_at = now
        elif now - self._pressure_at >= APP_RESTART_S and self._restart_apps(
                self.footprint_kb(), limit):
            self._anon_kb = cgroups.anon_bytes(cgroups.read_stat(self.groups.memory)) // 1024

    def _reap_apps(self) -> None:
        """Apps whose balloon the kernel's OOM killer took: lmkd's lines, in the order it
        would have killed them (highest oom_score_adj first).

        The kernel takes the highest score first, and an app's balloon outscores every app
        below it (``balloons.kill_order``), so an app seen dead while one above it still runs
        means that one was killed first and has not finished exiting: the oom reaper frees a
        victim's memory at once, the kernel can take the next app before the first one has run
        its exit, and on a loaded host the second exit may be seen first. Its line waits for
        the first one's (at most ``REAP_WAIT_S``; the tick looks again), so logcat never shows
        a kill order the kernel did not follow."""
        live = sorted((a for a in self.apps if a.pid and a.name in self._balloons),
                      key=lambda a: balloons.kill_order(a.adj, a.rss_kb))
        dead = [balloons.killed(self._balloons[a.name]) for a in live]
        gone = [a for a, d in zip(live, dead, strict=True) if d]
        # the first app in the kernel's order still running while one after it is gone
        last = max((i for i, d in enumerate(dead) if d), default=-1)
        exiting = next((i for i in range(last) if not dead[i]), None)
        if exiting is None:
            self._reap_blocked_at = None
        else:
            now = time.monotonic()
            self._reap_blocked_at = self._reap_blocked_at or now
            if now - self._reap_blocked_at < REAP_WAIT_S:
                gone = live[:exiting]
            else:  # it was not killed after all: log what went
                self._reap_blocked_at = None
        for app in sorted(gone, key=lambda a: (-a.adj, -a.rss_kb)):
            del self._balloons[app.name]
            self._kill_app(app)
        if gone:
            self._write_apps()

    def _start_balloon(self, app: App) -> int:
        """A live app's memory, for real (cgroup model): its balloon's pid, 0 if no room."""
        assert self.groups is not None
        process = balloons.spawn(self.groups.procs_files[0], balloons.kernel_adj(app.adj),
                                 app.rss_kb)
        if process is None:
            return 0
        self._balloons[app.name] = process
        self._on_exit(process.pid, self._reap_apps)
        return process.pid

    def _on_exit(self, pid: int, then: Callable[[], None]) -> None:
        if self.watch_exit is None:
            return  # the tick looks
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        self.watch_exit(fd, then)

    def _stop_balloons(self) -> None:
        for process in [*self._balloons.values(), *filter(None, [self._system_server])]:
            balloons.stop(process)
        self._balloons.clear()
        self._system_server = None

    def _lmkd(self, footprint: int, limit: int) -> int:
        """lmkd kills apps, highest oom_score_adj first, until the footprint fits."""
        for app in sorted((a for a in self.apps if a.pid), key=lambda a: (-a.adj, -a.rss_kb)):
            if footprint <= limit:
                break
            self._kill_app(app)
            footprint -= app.rss_kb
        self._write_apps()
        return footprint

    def _kill_app(self, app: App) -> None:
        """One lmkd kill, with the lines a phone's logcat shows for it."""
        state = self.sandbox.state
        line = formats.lmkd_kill_line(self.config.sdk, app.name, app.pid, app.rss_kb, 0,
                                      LMKD_REASON, uid=app.uid, adj=app.adj)
        logstore.append(state, "main", "I", "lowmemorykiller", LMKD_PID, line)
        logstore.append(state, "main", "I", "Zygote", ZYGOTE_PID,
                        f"Process {app.pid} exited due to signal 9 (Killed)")
        logstore.append(state, "system", "I", "ActivityManager", SYSTEM_SERVER_PID,
                        f"Process {app.name} (pid {app.pid}) has died: cch CEM")
        app.pid = 0

    def _out_of_memory(self, now: float) -> None:
        """The kernel's OOM killer: nothing in logcat, the shell sees SIGKILL (137)."""
        if self.config.android.oom_victim == "system_server":
            self.reboot()
            return
        candidates = [s for s in self._members
                      if s.pid not in self._killed]
        if not candidates:
            return
        victim = max(candidates, key=lambda s: s.rss_kb)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim.pid, signal.SIGKILL)
        self._killed[victim.pid] = now

    def _restart_apps(self, footprint: int, limit: int) -> bool:
        """Start the killed apps that fit again (lowest oom_score_adj first); True if any."""
        started = False
        for app in sorted((a for a in self.apps if not a.pid), key=lambda a: a.adj):
            if footprint + app.rss_kb > APP_FIT * limit:
                continue
            app.pid = self._start_balloon(app) if self.groups is not None else self._free_pid()
            if not app.pid:
                continue
            footprint += app.rss_kb
            started = True
            logstore.append(self.sandbox.state, "system", "I", "ActivityManager",
                            SYSTEM_SERVER_PID, f"Start proc {app.pid}:{app.name}/"
                            f"u0a{app.uid - 10000} for service {{{app.name}/.SyncService}}")
        if started:
            self._write_apps()
        return started

    def _free_pid(self) -> int:
        """A pid no host process has: one the host used already, so it is not handed out soon."""
        try:
            last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
        except (OSError, ValueError):
            last = 30000
        taken = {a.pid for a in self.apps}
        low = max(300, last - 20000)
        for _ in range(200):
            pid = random.randrange(low, max(low + 1, last))
            if pid not in taken and not os.path.exists(f"/proc/{pid}"):
                return pid
        return last + 5000

    def _write_apps(self) -> None:
        write_atomic(self.sandbox.state / "apps.json",
                     json.dumps([asdict(a) for a in self.apps]))

    # ----- faults ---------------------------------------------------------------------------
    def _apply_faults(self) -> None:
        for request in sorted(self.sandbox.control.glob("*.json")):
            try:
                data = json.loads(request.read_text())
            except (OSError, ValueError):
                continue  # half written: next tick
            request.unlink(missing_ok=True)
            try:
                self.apply_fault(str(data.get("kind")), data.get("value"))
            except (TypeError, ValueError) as error:
                logstore.append(self.sandbox.state, "main", "W", "harness-sim", 1,
                                f"bad fault request {data!r}: {error}")

    def apply_fault(self, kind: str, value: object = None) -> None:
        if kind == "drop":
            seconds = float(value) if isinstance(value, int | float | str) and value != "" else 0.0
            self.faults.refuse_until = time.monotonic() + seconds
            self.on_drop()
        elif kind == "hang":
            self.faults.hang_next = True
        elif kind == "crash":
            self.faults.crash_next = True
        elif kind == "disk-full":
            self.faults.disk_full = True
        elif kind == "disk-ok":
            self.faults.disk_full = False
        elif kind == "thermal" and isinstance(value, int | str):
            self.thermal = thermal.ThermalState(self.thermal.die_c, max(0, min(6, int(value))))
        elif kind == "thermal-release":
            self.thermal = thermal.ThermalState(self.thermal.die_c, None)
        elif kind in ("battery-saver", "charging", "screen", "doze", "stay-on"):
            self._power_fault(kind, value)
        elif kind == "clear":
            self.faults = Faults()
            self.thermal = thermal.ThermalState(self.thermal.die_c, None)
            self.power = PowerState.from_config(self.config.android.power)
            self._write_power()
        self._write_faults()

    def _power_fault(self, kind: str, value: object) -> None:
        """Battery saver, charger, screen and doze, as a user or the platform would change them;
        ``stay-on`` is what ``settings put global stay_on_while_plugged_in N`` asks for."""
        word = str(value)
        if kind == "battery-saver":
            self.power.battery_saver = _on(value)
        elif kind == "charging":
            if word not in CHARGING:
                raise ValueError(f"charging is one of {', '.join(CHARGING)}, not {word!r}")
            self.power.charging = word
        elif kind == "screen":
            self.power.screen_on = _on(value)
        elif kind == "doze":
            if word.upper() not in DEEP_IDLE_STATES:
                raise ValueError(f"doze is one of {', '.join(DEEP_IDLE_STATES)}, not {word!r}")
            self.power.doze = word.upper()
        elif kind == "stay-on":
            self.power.stay_on_setting = int(word) & STAY_ON_ALL
        self._write_power()

    def _write_power(self) -> None:
        state = {**asdict(self.power), "plug_type": PLUG_TYPES[self.power.charging],
                 "level": self.battery.level(self.power_params)}
        write_atomic(self.sandbox.state / "power.json", json.dumps(state, sort_keys=True))

    def _write_faults(self) -> None:
        state = {"hang_next": self.faults.hang_next, "crash_next": self.faults.crash_next,
                 "disk_full": self.faults.disk_full,
                 "thermal_forced": self.thermal.forced_status, "power": asdict(self.power)}
        write_atomic(self.sandbox.state / "faults.json", json.dumps(state))

    def take_command_fault(self) -> str | None:
        """'hang' or 'crash' once for the next shell command, if armed."""
        if self.faults.hang_next:
            self.faults.hang_next = False
            self._write_faults()
            return "hang"
        if self.faults.crash_next:
            self.faults.crash_next = False
            self._write_faults()
            return "crash"
        return None

    def read_error(self, device_path: str) -> int:
        """The errno a read of this device path, which exists, fails with for the shell user,
        or 0 (sync's side of the rules execshim.c enforces in the shell)."""
        path = os.path.normpath("/" + device_path.lstrip("/"))
        rules = self.config.android
        if not rules.smaps_rollup and any(fnmatch.fnmatchcase(path, g) for g in NO_SMAPS_ROLLUP):
            return errno.ENOENT
        if any(fnmatch.fnmatchcase(path, g) for g in rules.denied()):
            return errno.EACCES
        return 0

    def storage_bytes(self) -> int:
        return 0 if self.faults.disk_full else self.config.storage_mb * MIB

    # ----- throttling -------------------------------------------------------------------------
    def status(self) -> int:
        return self.thermal.status(self.params)

    def signal_sessions(self, sig: int) -> None:
        """``sig`` to every process of the phone, including one started since the last tick.

        The member list is refreshed only every tick (0.25 s), longer than a whole trial of a
        tiny model on a loaded host: a throttle that signalled only the listed members let such
        a trial run unthrottled. Each shell is a session leader whose jobs stay in its process
        group, so signalling the groups reaches them at once; the listed members cover the few
        that moved to another group.
        """
        for sid in list(self.sessions):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sid, sig)
        self.signal_all(sig)

    def _runnable(self) -> float:
        """Big cores' worth of the phone's threads running or waiting for a CPU right now."""
        cores = sum(c.cores for c in self.config.clusters)
        asked = [self._core_weight(mask) for s in self._members
                 for mask in procs.runnable_threads(s.pid)]
        return min(float(cores), sum(asked))

    def _sample_demand(self, share: float) -> None:
        with contextlib.suppress(OSError):
            self._demand.append(self._runnable() * share)

    async def throttle_loop(self) -> None:
        while True:
            fraction = thermal.duty(self.status())
            if fraction <= 0 or not (self.sessions or self._members):
                if self._members:
                    self._sample_demand(1.0)
                await asyncio.sleep(THROTTLE_PERIOD_S)
                continue
            self.signal_sessions(signal.SIGSTOP)
            try:
                await asyncio.sleep(THROTTLE_PERIOD_S * fraction)
            finally:
                self.signal_sessions(signal.SIGCONT)
            self._sample_demand(1 - fraction)  # they may run for this share of the period
            await asyncio.sleep(THROTTLE_PERIOD_S * (1 - fraction))

    # ----- generated files --------------------------------------------------------------------
    def _put(self, path: Path, text: str) -> None:
        if self._written.get(path) != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
            self._written[path] = text

    def _cpus(self) -> list[tuple[int, int, list[int]]]:
        """(cluster index, first cpu, cpus) per cluster, little first as kernels number them."""
        result, first = [], 0
        for index, cluster in enumerate(self.config.clusters):
            cpus = list(range(first, first + cluster.cores))
            result.append((index, first, cpus))
            first += cluster.cores
        return result

    def _write_static_sysfs(self) -> None:
        root = self.sandbox.root
        cores = []
        total = sum(c.cores for c in self.config.clusters)
        offline = set(self.config.android.offline_cpus)
        for index, _first, cpus in self._cpus():
            cluster = self.config.clusters[index]
            for cpu in cpus:
                if cpu not in offline:  # /proc/cpuinfo lists online cpus only
                    cores.append(formats.CpuCore(cpu, cluster.part, cluster.capacity))
                base = root / "sys/devices/system/cpu" / f"cpu{cpu}"
                self._put(base / "cpu_capacity", f"{cluster.capacity}\n")
                self._put(base / "online", "0\n" if cpu in offline else "1\n")
                freq = base / "cpufreq"
                self._put(freq / "cpuinfo_max_freq", f"{cluster.max_khz}\n")
                self._put(freq / "cpuinfo_min_freq", f"{cluster.min_khz}\n")
                self._put(freq / "related_cpus", " ".join(map(str, cpus)) + "\n")
                self._put(freq / "scaling_governor", "schedutil\n")
        for name in ("possible", "present"):
            self._put(root / "sys/devices/system/cpu" / name, f"0-{total - 1}\n")
        self._put(root / "sys/devices/system/cpu/online",
                  formats.cpu_list(set(range(total)) - offline) + "\n")
        self._put(root / "sys/devices/system/cpu/offline",
                  (formats.cpu_list(offline) if offline else "") + "\n")
        self._put(root / "proc/cpuinfo", formats.cpuinfo(cores))

    def reported_status(self) -> int:
        """The Thermal Status the framework reports: the model's, unless the build never
        reports one (stuck at 0, as on many Samsung/Xiaomi builds) or its HAL cannot (a 1.0
        HAL has no throttling severity, a HAL that is not ready gives nothing)."""
        rules = self.config.android
        if rules.thermal_status_stuck or rules.thermal_hal != "2.0":
            return 0
        return self.status()

    def thermal_snapshot(self) -> dict[str, object]:
        status = self.status()
        reported = self.reported_status()
        die = self.thermal.die_c
        skin = self.thermal.skin_c(self.params)
        battery = self.thermal.battery_c(self.params)
        temps = [
            {"name": "cpu-big", "type": 0, "value": round(die, 1), "status": reported},
            {"name": "cpu-little", "type": 0, "value": round(die - 2.0, 1), "status": reported},
            {"name": "skin", "type": 3, "value": round(skin, 1), "status": reported},
            {"name": "battery", "type": 2, "value": round(battery, 1), "status": 0},
        ]
        steps = 0 if status < 2 else status - 1
        cooling = [{"name": f"thermal-cpufreq-{first}", "type": 2, "value": steps}
                   for _, first, _ in self._cpus()]
        return {"status": status, "reported_status": reported,
                "hal": self.config.android.thermal_hal,
                "forced": self.thermal.forced_status is not None and reported == status,
                "die_c": die, "skin_c": skin, "battery_c": battery, "temperatures": temps,
                "cooling": cooling, "thresholds": list(self.params.thresholds_c)}

    def _write_dynamic_files(self) -> None:
        root = self.sandbox.root
        snapshot = self.thermal_snapshot()
        status = int(str(snapshot["status"]))
        self._put(self.sandbox.state / "thermal.json", json.dumps(snapshot, sort_keys=True))
        zones = root / "sys/class/thermal"
        temperatures: list[dict[str, Any]] = snapshot["temperatures"]  # type: ignore[assignment]
        for index, temp in enumerate(temperatures):
            self._put(zones / f"thermal_zone{index}" / "type", f"{temp['name']}\n")
            self._put(zones / f"thermal_zone{index}" / "temp", f"{round(temp['value'] * 1000)}\n")
        if self.config.gpu is not None:
            self._write_gpu(zones / f"thermal_zone{len(temperatures)}", status)
        busy = bool(self._members) and any(s.state == "R" for s in self._members)
        big, big_khz = self._big_cluster(), 0
        for index, first, cpus in self._cpus():
            cluster = self.config.clusters[index]
            cap = thermal.capped_khz(cluster.max_khz, cluster.min_khz, status)
            current = cap if busy else cluster.min_khz
            if index == big:
                big_khz = current
            self._put(zones / f"cooling_device{index}" / "type", f"thermal-cpufreq-{first}\n")
            self._put(zones / f"cooling_device{index}" / "cur_state",
                      f"{0 if status < 2 else status - 1}\n")
            for cpu in cpus:
                freq = root / "sys/devices/system/cpu" / f"cpu{cpu}" / "cpufreq"
                self._put(freq / "scaling_max_freq", f"{cap}\n")
                self._put(freq / "scaling_cur_freq", f"{current}\n")
                self._put(freq / "cpuinfo_cur_freq", f"{current}\n")  # root's: mode 0400
        up = time.monotonic() - self._booted_at
        self._log_status(status, up)
        self._step_battery(big_khz / 1e6, status, self.thermal.battery_c(self.params))
        available = max(0, self.config.limit_mb * 1024 - self.footprint_kb())
        self._put(root / "proc/meminfo", formats.proc_meminfo(self.config.ram_mb * 1024, available))
        self._put(root / "proc/pressure/memory", self.pressure.text())
        self.write_uptime()

    def _write_gpu(self, zone: Path, status: int) -> None:
        """The GPU's part of the tick: kgsl's folders of exited processes go, and a readable GPU
        shows its modelled load, clock and thermal cap (kgsl-3d0) and a ``gpuss-0`` zone that
        follows the die."""
        gpu = self.config.gpu
        assert gpu is not None
        root, state = self.sandbox.root, self.sandbox.state
        gpumodel.sweep(root, state, _alive)
        if not gpu.readable:
            return
        held = gpumodel.holders(state / gpumodel.REPORTS)
        nodes = gpumodel.gpu_nodes(gpu, gpumodel.busy_percent(self._spent, held.keys()), status)
        for rel, text in gpumodel.device_files(nodes).items():
            self._put(root / gpumodel.KGSL_DEVICE / rel, text)
            if rel.startswith("devfreq/"):  # the same device in the devfreq class
                self._put(root / gpumodel.DEVFREQ_DEVICE / rel.partition("/")[2], text)
        self._put(zone / "type", f"{gpumodel.ZONE_TYPE}\n")
        self._put(zone / "temp", f"{round(self.thermal.die_c * 1000)}\n")
        self._put(state / "gpu.json", json.dumps(
            {**asdict(nodes), "holders": {str(p): b for p, b in sorted(held.items())}},
            sort_keys=True))

    def write_uptime(self) -> None:
        """/proc/uptime in centiseconds, as a kernel shows it. The tick rewrites it, and so does
        a faster task (``UPTIME_S``): the harness stamps launches and power readings with it."""
        up = time.monotonic() - self._booted_at
        online = sum(c.cores for c in self.config.clusters) - len(self.config.android.offline_cpus)
        self._put(self.sandbox.root / "proc/uptime", f"{up:.2f} {up * online * 0.9:.2f}\n")

    async def uptime_loop(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.write_uptime()
            await asyncio.sleep(UPTIME_S)

    # ----- battery and truth logs ---------------------------------------------------------------
    def _big_cluster(self) -> int:
        """The cluster whose clock the power model uses: the highest capacity (the last such)."""
        clusters = self.config.clusters
        return max(range(len(clusters)), key=lambda i: (clusters[i].capacity, i))

    def _step_battery(self, f_ghz: float, status: int, battery_c: float) -> None:
        """Charge the last tick's load to the battery, write the fuel gauge's files and the
        truth line (its uptime is the start of the interval the power was drawn over)."""
        params, charging = self.power_params, self.power.charging
        watts = powermodel.load_power_w(params, self._busy_cores, f_ghz)
        self.battery = powermodel.step_battery(self.battery, params, watts, charging,
                                               self._tick_dt, status >= powermodel.OVERHEAT_STATUS)
        supply = self.sandbox.root / "sys/class/power_supply"
        for rel, text in powermodel.supply_files(self.battery, params, charging,
                                                 battery_c).items():
            self._put(supply / rel, text)
        charge_ma = params.charge_ma.get(charging, 0.0) if charging != "none" else 0.0
        self._put(self.sandbox.state / "battery.json", json.dumps({
            "level": self.battery.level(params), "status": self.battery.status,
            "status_code": powermodel.STATUS_CODES[self.battery.status],
            "charge_counter_uah": round(self.battery.charge_uah),
            "voltage_mv": round(self.battery.voltage_v * 1000),
            "current_ua": round(self.battery.battery_a * 1e6),
            "max_charging_ua": round(charge_ma * 1000), "temperature_c": battery_c,
        }, sort_keys=True))
        since = max(0.0, self._interval_start - self._booted_at)
        self._append_log(POWER_LOG, powermodel.power_log_line(since, watts, charging != "none"))

    def _log_status(self, status: int, uptime: float) -> None:
        if status != self._logged_status:
            self._logged_status = status
            self._append_log(STATUS_LOG, powermodel.status_log_line(uptime, status))

    def _append_log(self, name: str, line: str) -> None:
        path = self.sandbox.state / name
        with path.open("a") as log:
            log.write(line)
        size = self._log_bytes.get(name, 0) + len(line)
        if size > LOG_MAX_BYTES:
            kept = powermodel.trim_log(path.read_text(), LOG_MAX_BYTES // 2)
            write_atomic(path, kept)
            size = len(kept)
        self._log_bytes[name] = size
