"""The running phone behind the ADB daemon: its processes, memory killer, heat and faults.

One asyncio task ticks every ``TICK_S``: it finds the phone's processes (see procs.py), charges
their CPU time to the thermal model, kills the largest one when their footprint passes the
memory limit, rewrites the generated /proc and /sys files, and applies fault requests. A second
task duty-cycles SIGSTOP/SIGCONT over the phone's processes while the thermal status asks for it.
Neither spins: both sleep between steps, and the throttle task idles when the phone is cool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.virtual import formats, logstore, procs, thermal
from harness.virtual.config import PhoneConfig
from harness.virtual.sandbox import TOOLS, Sandbox, write_atomic
from harness.virtual.userland import exec_env, install_userland, resolve_userland

TICK_S = 0.25
THROTTLE_PERIOD_S = 0.1
LMKD_PID = 612
FAULT_KINDS = ("drop", "hang", "crash", "disk-full", "disk-ok", "thermal", "thermal-release",
               "clear")
REFRESH_IGNORE_S = 5.0


@dataclass
class Faults:
    hang_next: bool = False
    crash_next: bool = False
    disk_full: bool = False
    refuse_until: float = 0.0


@dataclass
class Phone:
    sandbox: Sandbox
    config: PhoneConfig
    faults: Faults = field(default_factory=Faults)
    sessions: set[int] = field(default_factory=set)
    on_drop: Callable[[], None] = lambda: None
    _ignore: set[int] = field(default_factory=set)
    _ignore_at: float = 0.0
    _cpu: dict[int, int] = field(default_factory=dict)
    _members: list[procs.ProcStat] = field(default_factory=list)
    _written: dict[Path, str] = field(default_factory=dict)
    _last_tick: float = field(default_factory=time.monotonic)
    shell_env: dict[str, str] = field(default_factory=dict)  # set at boot

    def __post_init__(self) -> None:
        self.params = thermal.ThermalParams.from_profile(self.config.thermal)
        self.thermal = thermal.ThermalState(die_c=self.params.ambient_c)

    # ----- sessions and processes -------------------------------------------------------------
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

    # ----- the tick ------------------------------------------------------------------------
    def boot(self) -> None:
        self.sandbox.create()
        install_userland(self.sandbox.bin, resolve_userland(self.config.shell), keep=set(TOOLS))
        self.shell_env = {**self.sandbox.shell_env(),
                          **exec_env(self.sandbox.root, self.config.abi)}
        (self.sandbox.state / "config.json").write_text(self.config.to_json())
        (self.sandbox.state / "boot_time").write_text(f"{time.time():.3f}")
        for stale in self.sandbox.control.glob("*.json"):
            stale.unlink()
        self._write_sessions()
        self._write_static_sysfs()
        model = self.config.props.get("ro.product.model")
        logstore.append(self.sandbox.state, "main", "I", "init", 1,
                        f"virtual phone {self.config.name} ({model}) booted")
        self.tick()

    def tick(self) -> None:
        now = time.monotonic()
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
        self._cpu = seen
        live_sessions = {s.session for s in self._members}
        if self.sessions - live_sessions:
            self.sessions &= live_sessions | self._recent_sessions()
            self._write_sessions()
        self.thermal = thermal.step(self.thermal, self.params, cpu_ticks / procs.CLOCK_TICKS, dt)
        self._low_memory_killer()
        self._apply_faults()
        self._write_dynamic_files()

    def _recent_sessions(self) -> set[int]:
        # a session whose leader has not been scanned yet must not be forgotten
        return {s for s in self.sessions if procs.read_stat(s) is not None}

    def _low_memory_killer(self) -> None:
        limit_kb = self.config.limit_mb * 1024
        if sum(s.rss_kb for s in self._members) <= limit_kb:
            return
        victim = max(self._members, key=lambda s: s.rss_kb)
        status = formats.kb_fields(procs.read_text(f"/proc/{victim.pid}/status"))
        try:
            os.kill(victim.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self._members.remove(victim)
        line = formats.lmkd_kill_line(self.config.sdk, victim.comm, victim.pid, victim.rss_kb,
                                      status.get("VmSwap", 0), "min watermark is breached")
        logstore.append(self.sandbox.state, "main", "I", "lowmemorykiller", LMKD_PID, line)

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
        elif kind == "clear":
            self.faults = Faults()
            self.thermal = thermal.ThermalState(self.thermal.die_c, None)
        self._write_faults()

    def _write_faults(self) -> None:
        state = {"hang_next": self.faults.hang_next, "crash_next": self.faults.crash_next,
                 "disk_full": self.faults.disk_full,
                 "thermal_forced": self.thermal.forced_status}
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

    def storage_bytes(self) -> int:
        return 0 if self.faults.disk_full else self.config.storage_mb * 1024 * 1024

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

    async def throttle_loop(self) -> None:
        while True:
            fraction = thermal.duty(self.status())
            if fraction <= 0 or not (self.sessions or self._members):
                await asyncio.sleep(THROTTLE_PERIOD_S)
                continue
            self.signal_sessions(signal.SIGSTOP)
            try:
                await asyncio.sleep(THROTTLE_PERIOD_S * fraction)
            finally:
                self.signal_sessions(signal.SIGCONT)
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
        for index, _first, cpus in self._cpus():
            cluster = self.config.clusters[index]
            for cpu in cpus:
                cores.append(formats.CpuCore(cpu, cluster.part, cluster.capacity))
                base = root / "sys/devices/system/cpu" / f"cpu{cpu}"
                self._put(base / "cpu_capacity", f"{cluster.capacity}\n")
                self._put(base / "online", "1\n")
                freq = base / "cpufreq"
                self._put(freq / "cpuinfo_max_freq", f"{cluster.max_khz}\n")
                self._put(freq / "cpuinfo_min_freq", f"{cluster.min_khz}\n")
                self._put(freq / "related_cpus", " ".join(map(str, cpus)) + "\n")
                self._put(freq / "scaling_governor", "schedutil\n")
        for name in ("possible", "present", "online"):
            self._put(root / "sys/devices/system/cpu" / name, f"0-{total - 1}\n")
        self._put(root / "proc/cpuinfo", formats.cpuinfo(cores))

    def thermal_snapshot(self) -> dict[str, object]:
        status = self.status()
        die = self.thermal.die_c
        skin = self.thermal.skin_c(self.params)
        battery = self.thermal.battery_c(self.params)
        temps = [
            {"name": "cpu-big", "type": 0, "value": round(die, 1), "status": status},
            {"name": "cpu-little", "type": 0, "value": round(die - 2.0, 1), "status": status},
            {"name": "skin", "type": 3, "value": round(skin, 1), "status": status},
            {"name": "battery", "type": 2, "value": round(battery, 1), "status": 0},
        ]
        steps = 0 if status < 2 else status - 1
        cooling = [{"name": f"thermal-cpufreq-{first}", "type": 2, "value": steps}
                   for _, first, _ in self._cpus()]
        return {"status": status, "forced": self.thermal.forced_status is not None,
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
        busy = bool(self._members) and any(s.state == "R" for s in self._members)
        for index, first, cpus in self._cpus():
            cluster = self.config.clusters[index]
            cap = thermal.capped_khz(cluster.max_khz, cluster.min_khz, status)
            current = cap if busy else cluster.min_khz
            self._put(zones / f"cooling_device{index}" / "type", f"thermal-cpufreq-{first}\n")
            self._put(zones / f"cooling_device{index}" / "cur_state",
                      f"{0 if status < 2 else status - 1}\n")
            for cpu in cpus:
                freq = root / "sys/devices/system/cpu" / f"cpu{cpu}" / "cpufreq"
                self._put(freq / "scaling_max_freq", f"{cap}\n")
                self._put(freq / "scaling_cur_freq", f"{current}\n")
        used_kb = sum(s.rss_kb for s in self._members)
        available = max(0, self.config.limit_mb * 1024 - used_kb)
        self._put(root / "proc/meminfo", formats.proc_meminfo(self.config.ram_mb * 1024, available))
