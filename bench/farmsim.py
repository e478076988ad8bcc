"""Figure 17: a 200-phone farm, simulated (issue 50, item 4).

A real farm's control path on this host: the scheduler is ``harness farm scheduler`` on TLS, the
driver is ``harness.farm.driver.execute_farm`` (planning, one job per phone at a time, retries,
the grace period, the store writes), the workers run ``harness.farm.job.run_job`` (the phone's
lease, the artifact fetch into the host's cache, the report). Only the phone and its engine are
stand-ins (``bench.farmsim_phone``): a trial sleeps for a duration drawn from real trials of our
own store (``bench/data/farmsim-durations.json``, times ``factor``). Each simulated host is one
process holding its phones' Dask workers (``bench.farmsim_host``): one worker per phone, as the
farm has, but not one process per phone.

Faults: phones lost for good mid-trial (their trial in flight ``device_lost``, the rest not run),
phones unplugged mid-trial and plugged back (the job runs again on the new worker), one host
killed (its process group, SIGKILL) and started again after ``host_back_s``, and slow pushes.
A second session (``--resume`` of the same run) then runs what the first left; after it every
planned trial must be in the store exactly once.

Measured: makespan against the ideal (the critical path: the busiest phone's push and trials),
the scheduler's CPU and memory (its /proc), the driver's CPU, store writes per second and the
largest part-file count of a night, lost and duplicated trials.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.common import ROOT, Figure
from bench.farmsim_phone import SimConfig, trial_seconds

DURATIONS = ROOT / "bench" / "data" / "farmsim-durations.json"
HARNESS = str(Path(sys.executable).parent / "harness")
MATRIX = """\
name: farmsim
axes:
  build: [simbuild]
  model: [tiny]
  quant: [{quants}]
  n_ctx: [256]
  threads: [{threads}]
models:
  tiny: {{ladder: tiny}}
workload: {{n_prompt: 32, n_gen: 16}}
repetitions: {reps}
output_check: false
cooldown: {{max_thermal_status: 6, max_temperature_c: 95, min_battery_pct: 0, max_wait_s: 1}}
timeout: {{trial_s: 600}}
"""


@dataclass(frozen=True)
class Scenario:
    """One simulated farm and its faults; seconds are the stand-in's (already scaled)."""

    phones: int
    hosts: int
    quants: tuple[str, ...] = ("Q8_0", "Q4_K_M")
    threads: tuple[int, ...] = (1, 2, 4)
    reps: int = 3
    factor: float = 1.0  # stand-in seconds per real second of the drawn durations
    push_s: float = 2.0  # a phone's first preparation (its push); slow phones x slow_factor
    slow_push: int = 0  # phones with a slow link
    slow_factor: float = 10.0
    lose: int = 0  # phones lost for good mid-trial
    unplug: int = 0  # phones unplugged mid-trial, back after unplug_s
    unplug_s: float = 2.0
    host_lost: bool = False  # one host killed mid-run ...
    host_kill_at: float = 0.4  # ... at this share of the ideal makespan
    host_back_s: float = 5.0  # ... and started again this much later
    grace_s: float = 30.0  # the driver's wait for a phone's worker
    lease_ttl_s: float = 20.0
    resume: bool = True  # a second session runs what the first left (reads the night's parts)

    @property
    def cells(self) -> int:
        return len(self.quants) * len(self.threads)


QUICK = Scenario(phones=200, hosts=10, threads=(1,), reps=2, slow_push=10, lose=4, unplug=4,
                 host_lost=True, resume=False)
FULL = replace(QUICK, hosts=20, threads=(1, 2, 4), reps=3, resume=True)


# -- pure parts -----------------------------------------------------------------------------------
def spans(rows: Sequence[tuple[str, str, float]]) -> list[float]:
    """Seconds from one trial's start to the next one's on the same phone in the same run: what
    a phone is busy per trial, the harness's time around the engine included (pure).
    ``rows`` are (run_id, serial, started_at as epoch seconds)."""
    by_phone: dict[tuple[str, str], list[float]] = {}
    for run_id, serial, at in rows:
        by_phone.setdefault((run_id, serial), []).append(at)
    found = []
    for starts in by_phone.values():
        starts.sort()
        found += [b - a for a, b in itertools.pairwise(starts) if b > a]
    return sorted(round(s, 3) for s in found)


def fault_plan(scenario: Scenario, hosts: dict[str, list[str]],
               trials_per_phone: int) -> dict[str, Any]:
    """Which phones lose, unplug and push slowly, and at which trial; which host dies (pure:
    spread by position, the same for the same scenario)."""
    serials = [s for phones in hosts.values() for s in phones]
    victim = sorted(hosts)[-1] if scenario.host_lost and len(hosts) > 1 else None
    spared = [s for s in serials if victim is None or s not in hosts[victim]]
    step = max(1, len(spared) // max(1, scenario.lose + scenario.unplug))
    chosen = spared[::step][:scenario.lose + scenario.unplug]
    at = max(1, trials_per_phone // 2)
    slow_step = max(1, len(serials) // max(1, scenario.slow_push))
    return {"lose_at": {s: at for s in chosen[:scenario.lose]},
            "unplug_at": {s: at - 1 for s in chosen[scenario.lose:]},
            "slow_push": serials[1::slow_step][:scenario.slow_push], "host": victim}


def ideal_makespan(per_phone: dict[str, list[str]], durations: Sequence[float], factor: float,
                   push_s: dict[str, float]) -> tuple[float, float]:
    """(critical path: the busiest phone's push and trials, total work / phones) (pure)."""
    work = {s: push_s.get(s, 0.0) + sum(trial_seconds(t, durations, factor) for t in ids)
            for s, ids in per_phone.items()}
    return max(work.values()), sum(work.values()) / len(work)


def account(planned: set[str], stored: Sequence[str], not_run: int = 0) -> dict[str, int]:
    """Lost (planned, neither stored nor among the ``not_run`` the driver reported for a later
    ``--resume``), duplicated (stored twice) and unplanned trials (pure)."""
    counts = Counter(stored)
    return {"planned": len(planned), "stored": len(counts), "not_run": not_run,
            "lost": len(planned - set(counts)) - not_run,
            "duplicated": sum(n - 1 for n in counts.values() if n > 1),
            "unplanned": len(set(counts) - planned)}


def session_rows(planned: dict[str, list[str]], serials: Sequence[str],
                 stored: Any) -> dict[str, list[str | None]]:
    """Each of ``serials``' planned trials, in plan order: its stored outcome, None when it is
    not in ``stored`` (a frame of trial_id, outcome) (pure)."""
    outcome = dict(zip(stored["trial_id"], stored["outcome"], strict=True))
    return {s: [outcome.get(t) for t in planned[s]] for s in serials}


def night_parts(root: Path) -> dict[str, int]:
    """The largest number of part files one night (one date= folder) holds, per table."""
    found: dict[str, int] = {}
    for table in ("trials", "samples"):
        nights = [len(list(d.glob("part-*.parquet"))) for d in (root / table).glob("date=*")]
        found[table] = max(nights, default=0)
    return found


def hosts_of(phones: int, hosts: int) -> dict[str, list[str]]:
    """Serials spread over hosts: h00 holds sim-0000, sim-0010, ... (pure)."""
    names = [f"h{i:02d}" for i in range(hosts)]
    out: dict[str, list[str]] = {n: [] for n in names}
    for index in range(phones):
        out[names[index % hosts]].append(f"sim-{index:04d}")
    return out


# -- the processes -------------------------------------------------------------------------------
@dataclass
class ProcStat:
    """CPU seconds and resident memory of one pid, sampled while the run goes."""

    pid: int
    cpu0: float = 0.0
    cpu_s: float = 0.0
    peak_rss: int = 0
    series: list[tuple[float, float, int]] = field(default_factory=list)

    def read(self) -> tuple[float, int]:
        tick = os.sysconf("SC_CLK_TCK")
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        rss = int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * os.sysconf(
            "SC_PAGE_SIZE")
        return (int(fields[11]) + int(fields[12])) / tick, rss

    def start(self) -> None:
        self.cpu0, self.peak_rss = self.read()

    def sample(self, now: float) -> None:
        cpu, rss = self.read()
        self.cpu_s, self.peak_rss = cpu - self.cpu0, max(self.peak_rss, rss)
        self.series.append((round(now, 2), round(self.cpu_s, 2), rss))


@contextlib.contextmanager
def sampling(stats: Sequence[ProcStat], every_s: float = 1.0) -> Iterator[None]:
    stop = threading.Event()
    start = time.monotonic()
    for stat in stats:
        stat.start()

    def loop() -> None:
        while not stop.wait(every_s):
            for stat in stats:
                with contextlib.suppress(OSError):
                    stat.sample(time.monotonic() - start)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        for stat in stats:
            with contextlib.suppress(OSError):
                stat.sample(time.monotonic() - start)


def _stop(process: subprocess.Popen[bytes], group: bool = False) -> None:
    """SIGTERM (its group when it leads one we started), then SIGKILL; reaps it."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM) if group else process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL) if group else process.kill()
        process.wait(timeout=20)


class SimFarm:
    """The scheduler and the simulated hosts of one scenario, all stopped by their pids."""

    def __init__(self, work: Path, config: dict[str, Any]) -> None:
        self.work = work
        self.config = config
        self.config_path = work / "farmsim.json"
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.hosts: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.work / log, "ab") as out:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def start_scheduler(self, tls: Path) -> str:
        address_file = self.work / "scheduler.json"
        self.scheduler = self._spawn(
            [HARNESS, "farm", "scheduler", "--host", "127.0.0.1", "--port", "0",
             "--scheduler-file", str(address_file), "--tls", str(tls)], "scheduler.log")
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError, ValueError, KeyError):
                return str(json.loads(address_file.read_text())["address"])
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.work / "scheduler.log").read_text()[-2000:])
            time.sleep(0.1)

    def start_host(self, host: str) -> None:
        ready = Path(self.config["sim"]["state"]) / f"{host}.ready"
        ready.unlink(missing_ok=True)
        self.hosts[host] = self._spawn([sys.executable, "-m", "bench.farmsim_host",
                                        str(self.config_path), host], f"host-{host}.log")

    def wait_ready(self, hosts: Sequence[str], timeout: float = 240) -> None:
        state = Path(self.config["sim"]["state"])
        deadline = time.monotonic() + timeout
        while not all((state / f"{h}.ready").exists() for h in hosts):
            dead = [h for h in hosts if self.hosts[h].poll() is not None]
            if dead or time.monotonic() > deadline:
                log = (self.work / f"host-{(dead or list(hosts))[0]}.log").read_text()
                raise RuntimeError(f"simulated host(s) {dead or hosts} not ready: {log[-2000:]}")
            time.sleep(0.2)

    def kill_host(self, host: str) -> None:
        """The host lost: SIGKILL to the process group of the host process we started."""
        process = self.hosts[host]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)

    def close(self) -> None:
        for process in self.hosts.values():
            _stop(process, group=True)
        if self.scheduler is not None:
            _stop(self.scheduler, group=True)


# -- one scenario ---------------------------------------------------------------------------------
def load_durations(path: Path = DURATIONS) -> tuple[float, ...]:
    return tuple(float(s) for s in json.loads(path.read_text())["seconds"])


def _materials(work: Path, scenario: Scenario) -> tuple[Path, Path, Path]:
    """(the farm's certificates, the builds root with a stand-in build, the matrix)."""
    from harness.artifacts.builds import import_build
    from harness.artifacts.testmodels import ensure_ladder
    from harness.farm.security import init_farm

    tls = work / "tls"
    init_farm(tls)
    ensure_ladder("tiny")
    tools = work / "simbuild" / "bin"
    tools.mkdir(parents=True)
    (tools / "llama-bench").write_text("#!/bin/sh\necho 'stand-in: never run' >&2; exit 1\n")
    (tools / "llama-bench").chmod(0o755)
    builds = work / "builds"
    import_build(tools.parent, builds, "simbuild", abi="arm64-v8a")
    matrix = work / "farmsim.yaml"
    matrix.write_text(MATRIX.format(quants=", ".join(scenario.quants),
                                    threads=", ".join(str(t) for t in scenario.threads),
                                    reps=scenario.reps))
    return tls, builds, matrix


def _planned(matrix: Path, builds: Path, run_id: str,
             serials: Sequence[str]) -> dict[str, list[str]]:
    """Each phone's planned trial ids, as the driver plans them."""
    from harness.run import adaptive
    from harness.run.order import interleave
    from harness.run.runner import RunOptions, prepare

    prepared = prepare(matrix, RunOptions(Path("/nonexistent"), builds))
    cells = adaptive.planned_cells(prepared.cells, prepared.matrix.adaptive)
    return {s: [t.trial_id for t in interleave(cells, run_id, s)] for s in serials}


class _Events:
    """The driver's events, counted by kind (and the phones each kind named)."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, kind: str, serial: str, details: dict[str, Any]) -> None:
        with self.lock:
            self.kinds[str(kind)] += 1


def _host_fault(farm: SimFarm, host: str | None, at_s: float, back_s: float,
                log: list[dict[str, Any]]) -> threading.Thread:
    def act() -> None:
        time.sleep(at_s)
        farm.kill_host(host)  # type: ignore[arg-type]
        log.append({"host": host, "killed_at_s": round(at_s, 2)})
        time.sleep(back_s)
        farm.start_host(host)  # type: ignore[arg-type]
        log.append({"host": host, "restarted_at_s": round(at_s + back_s, 2)})

    thread = threading.Thread(target=act, daemon=True)
    if host is not None:
        thread.start()
    return thread


@dataclass
class _Session:
    """The first session's summary and what was measured around it."""

    summary: Any
    events: _Events
    host_log: list[dict[str, Any]]
    scheduler: ProcStat
    driver: ProcStat
    hosts: list[ProcStat]  # the hosts that were not killed
    load: float


def _first_session(farm: SimFarm, run: dict[str, Any], scenario: Scenario,
                   critical_guess: float) -> _Session:
    """The run itself, the scheduler and the driver sampled, the host fault injected."""
    from harness.farm.driver import execute_farm

    assert farm.scheduler is not None
    scheduler, driver = ProcStat(farm.scheduler.pid), ProcStat(os.getpid())
    hosts = [ProcStat(p.pid) for h, p in farm.hosts.items() if h != run["faults"]["host"]]
    events, host_log = _Events(), list[dict[str, Any]]()
    load = os.getloadavg()[0]
    with sampling([scheduler, driver, *hosts]):
        fault = _host_fault(farm, run["faults"]["host"], scenario.host_kill_at * critical_guess,
                            scenario.host_back_s, host_log)
        summary = execute_farm(run["matrix"], run["address"], run["options"], run["serials"],
                               on_event=events, grace_s=scenario.grace_s, tls=run["tls"])
    fault.join()
    return _Session(summary, events, host_log, scheduler, driver, hosts, load)


def _rows(results: Path, files: Sequence[Path]) -> dict[str, list[str]]:
    """trial_id and outcome of the trials in ``files`` (read once: a night of 1,600 parts
    takes minutes to read on a loaded 2-core host)."""
    from harness import store

    table = store.read_arrow(results, "trials", files, columns=["trial_id", "outcome"])
    return {c: [str(v) for v in table.column(c).to_pylist()] for c in ("trial_id", "outcome")}


def _timed_reads(results: Path, run_id: str,
                 files: Sequence[Path]) -> tuple[dict[str, list[str]], dict[str, float]]:
    """The first session's trials (two columns), and how long that read and a resume's first
    read (``store_io.finished_trials``: the trial ids of every part of the run) take."""
    from harness.run import store_io

    clock = time.monotonic()
    rows = _rows(results, files)
    read_s = {"two_columns_s": time.monotonic() - clock}
    clock = time.monotonic()
    store_io.finished_trials(results, run_id)
    read_s["resume_read_s"] = time.monotonic() - clock
    return rows, read_s


def simulate(work: Path, scenario: Scenario) -> dict[str, Any]:
    """Run ``scenario`` once (then a resume of the same run); every figure's raw data."""
    from harness import store
    from harness.farm.driver import execute_farm
    from harness.farm.security import FarmTLS
    from harness.run.runner import RunOptions
    from harness.run.session import new_run_id

    work.mkdir(parents=True, exist_ok=True)
    tls, builds, matrix = _materials(work, scenario)
    durations = load_durations()
    hosts = hosts_of(scenario.phones, scenario.hosts)
    serials = [s for phones in hosts.values() for s in phones]
    faults = fault_plan(scenario, hosts, scenario.cells * scenario.reps)
    sim = SimConfig(durations, scenario.factor, work / "phones", scenario.push_s,
                    frozenset(faults["slow_push"]), scenario.slow_factor, faults["lose_at"],
                    faults["unplug_at"], scenario.unplug_s)
    push = {s: scenario.push_s * (scenario.slow_factor if s in sim.slow_push else 1.0)
            for s in serials}
    results = work / "results"
    run: dict[str, Any] = {
        "matrix": matrix, "serials": serials, "faults": faults, "tls": FarmTLS(tls, "driver"),
        "options": RunOptions(results, builds, lease_ttl_s=scenario.lease_ttl_s)}
    farm = SimFarm(work, {})
    try:
        run["address"] = farm.start_scheduler(tls)
        farm.config = {"scheduler": run["address"], "tls": str(tls), "work": str(work),
                       "hosts": hosts, "sim": sim.to_json()}
        farm.config_path.write_text(json.dumps(farm.config))
        started = time.monotonic()
        for host in hosts:
            farm.start_host(host)
        farm.wait_ready(list(hosts))
        startup_s = time.monotonic() - started
        guess = _planned(matrix, builds, new_run_id(), serials)  # to time the host's loss
        first = _first_session(farm, run, scenario,
                               ideal_makespan(guess, durations, scenario.factor, push)[0])
        run_id = first.summary.run.run_id
        parts = {t: len(store.run_files(results, t, run_id)) for t in ("trials", "samples")}
        planned = _planned(matrix, builds, run_id, serials)
        first_files = store.run_files(results, "trials", run_id)
        after_first, read_s = _timed_reads(results, run_id, first_files)
        resume = execute_farm(matrix, run["address"], run["options"], serials, run_id=run_id,
                              grace_s=scenario.grace_s, tls=run["tls"]) if scenario.resume else None
    finally:
        farm.close()
    critical, mean_work = ideal_makespan(planned, durations, scenario.factor, push)
    watched = [*faults["lose_at"], *faults["unplug_at"], *hosts.get(faults["host"] or "", [])]
    later = sorted(set(store.run_files(results, "trials", run_id)) - set(first_files))
    stored = {k: after_first[k] + _rows(results, later)[k] for k in after_first}
    summary = first.summary
    not_run = sum(d.not_run for d in summary.run.devices)
    return {
        "scenario": scenario.__dict__ | {"quants": list(scenario.quants),
                                         "threads": list(scenario.threads)},
        "run_id": run_id, "faults": faults, "host_fault": first.host_log,
        "startup_s": round(startup_s, 1), "load_1min_before": round(first.load, 2),
        "makespan_s": summary.run.wall_s, "ideal_critical_s": critical,
        "ideal_mean_s": mean_work, "resume_s": resume.run.wall_s if resume else None,
        "first": {"outcomes": dict(summary.run.outcomes()), "not_run": not_run,
                  "duplicates_skipped": summary.duplicates_skipped, "jobs": len(summary.jobs),
                  "events": dict(first.events.kinds)},
        "resume": {"outcomes": dict(resume.run.outcomes()),
                   "not_run": sum(d.not_run for d in resume.run.devices)} if resume else None,
        "account": account({t for ids in planned.values() for t in ids},
                           list(stored["trial_id"]), 0 if resume else not_run),
        "outcomes_stored": dict(Counter(stored["outcome"])),
        "first_session_rows": session_rows(planned, watched, after_first),
        "parts_first": parts, "night_parts": night_parts(results), "reads": read_s,
        "scheduler": {"cpu_s": first.scheduler.cpu_s, "peak_rss": first.scheduler.peak_rss,
                      "series": first.scheduler.series},
        "driver": {"cpu_s": first.driver.cpu_s, "peak_rss": first.driver.peak_rss},
        "hosts": {"count": len(first.hosts), "phones_each": scenario.phones // scenario.hosts,
                  "cpu_s": [h.cpu_s for h in first.hosts],
                  "peak_rss": [h.peak_rss for h in first.hosts]},
    }


# -- the figure ------------------------------------------------------------------------------------
def figures(data: dict[str, Any]) -> list[Figure]:
    sc = data["scenario"]
    n, hosts = sc["phones"], sc["hosts"]
    acc = data["account"]
    bad = acc["lost"] + acc["duplicated"] + acc["unplanned"]
    span = data["makespan_s"]
    ratio = span / data["ideal_critical_s"]
    sched, drv = data["scheduler"], data["driver"]
    writes = data["parts_first"]["trials"] + data["parts_first"]["samples"]
    first = data["first"]
    head = f"17 farm sim ({n} phones, {hosts} hosts)"
    return [
        Figure(f"{head}: trials lost or duplicated", bad, "", f"{acc['planned']} planned, "
               f"{acc['stored']} stored once" + (" after the resume" if data["resume"] else
                                                 f", {acc['not_run']} reported not run")
               + f"; lost {acc['lost']}, duplicated {acc['duplicated']}", "0", bad == 0,
               f"faults: {sc['lose']} phones lost, {sc['unplug']} unplugged and back, "
               f"{'1 host killed and back' if data['faults']['host'] else 'no host'}, "
               f"{sc['slow_push']} slow pushes; first session: "
               f"{first['outcomes'].get('device_lost', 0)} device_lost, {first['not_run']} "
               f"not run, {first['duplicates_skipped']} duplicates skipped"),
        Figure(f"{head}: makespan / ideal", ratio, "ratio",
               f"makespan {span:.1f} s, critical path {data['ideal_critical_s']:.1f} s "
               f"(mean phone {data['ideal_mean_s']:.1f} s)", "-", None,
               f"trial durations from our store x {sc['factor']:g}; push {sc['push_s']:g} s "
               f"(slow x {sc['slow_factor']:g}); grace {sc['grace_s']:g} s"),
        Figure(f"{head}: scheduler CPU", sched["cpu_s"] / span, "cores",
               f"{sched['cpu_s']:.1f} CPU s over {span:.1f} s", "-", None,
               f"driver (execute_farm + store writes) {drv['cpu_s'] / span:.2f} cores; "
               f"start-up of the workers {data['startup_s']:.0f} s"),
        Figure(f"{head}: scheduler memory (peak RSS)", sched["peak_rss"] / 2**20, "MiB", "-",
               "-", None, f"driver peak RSS {drv['peak_rss'] / 2**20:.0f} MiB"),
        Figure(f"{head}: store writes per second", writes / span, "parts/s",
               f"{writes} part files in {span:.1f} s "
               f"({data['parts_first']['trials'] / span:.1f} trials/s)", "-", None,
               "one trials part and one samples part per trial, written by the driver"),
        Figure(f"{head}: largest part-file count per night", max(data["night_parts"].values()),
               "files", ", ".join(f"{k} {v}" for k, v in data["night_parts"].items()), "-",
               None, "one night = one date= folder of the store"),
        Figure(f"{head}: a resume's first read of the run's trials", data["reads"]["resume_read_s"],
               "s", f"{data['parts_first']['trials']} parts, their trial ids "
               "(store_io.finished_trials)", "-", None,
               f"trial_id and outcome only: {data['reads']['two_columns_s']:.1f} s"),
    ]


def measure(work: Path, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    data = simulate(work / "farmsim", QUICK if quick else FULL)
    return figures(data), data


def write_durations(stores: Sequence[Path], out: Path = DURATIONS) -> list[float]:
    """The duration sample from our own stores' trials (``python -m bench.farmsim STORE...``)."""
    from harness import store

    rows: list[tuple[str, str, float]] = []
    for root in stores:
        frame = store.read_table(root, "trials", columns=["run_id", "device_serial",
                                                            "started_at"])
        rows += [(str(r), str(s), t.timestamp()) for r, s, t in
                 zip(frame["run_id"], frame["device_serial"], frame["started_at"], strict=True)]
    seconds = spans(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "what": "seconds from a trial's start to the next trial's start on the same phone in "
                "the same run (engine and the harness's time around it)",
        "source": [str(s) for s in stores], "seconds": seconds}, indent=1) + "\n")
    return seconds


if __name__ == "__main__":
    print(len(write_durations([Path(a) for a in sys.argv[1:]])), "durations")
