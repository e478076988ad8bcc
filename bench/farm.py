"""Item 3: the same matrix on 1, 2 and 4 virtual phones (local backend: one thread per phone).

Every phone runs every cell of the matrix (phones are measured, not shared out), so perfect
scaling means N phones finish in the time one does: efficiency(N) = makespan(1) / makespan(N).
The cells use one engine thread each, so the engine needs N cores for N phones: the ceiling is
min(1, cores / (N × threads)). Phones are warmed first (the artefacts pushed), so no run pays a
first push; the counts are run in a rotating order when there are several rounds.

The same matrix then runs on the Dask backend (a scheduler and one agent on this host, one worker
per phone, its artifact cache under the work folder): there each job reports its set-up (artifact
fetch into the host's cache, the device lease, preparing the phone: facts, plan, push) apart from
its trials, so farm efficiency is given both ways, by makespan and by engine time only. The first
dask run is the cold one (everything fetched and pushed) and is reported on its own; the later
runs find each phone's prepared state kept on its worker (``harness.farm.phonestate``), as a
farm's nightly runs do. Each dask run's time is broken down for its busiest phone into set-up,
trials and the rest (the driver's own set-up, scheduling, writing the store).

The cells use one engine thread each (farm.yaml), so 2 phones run 2 engine threads on this
host's 2 cores: they fit, with the virtual phones' own shells, the workers and the driver
sharing the same cores (what the engine-only figure then shows is that sharing, not set-up).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common import MATRICES, Figure, Lab, Timeline

MATRIX = MATRICES / "farm.yaml"
WARM = MATRICES / "farm-warm.yaml"
COUNTS = (1, 2, 4)
THREADS = 1  # engine threads per cell in farm.yaml


def cpu_ceiling(phones: int, cores: int, threads: int = THREADS) -> float:
    """The best efficiency a CPU-bound engine can reach on this host (pure, tested)."""
    return min(1.0, cores / (phones * threads))


def count_order(index: int) -> list[int]:
    shift = index % len(COUNTS)
    return list(COUNTS[shift:] + COUNTS[:shift])


def efficiency(makespans: dict[int, list[float]]) -> dict[int, float]:
    """Median makespan on 1 phone over the median on N (pure, tested)."""
    one = statistics.median(makespans[1])
    return {n: one / statistics.median(spans) for n, spans in makespans.items()}


def job_split(jobs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A dask run's time per phone split into set-up and trials (pure, tested).

    ``jobs`` are a FarmSummary's job rows (``setup_s``, ``trials_s``, ``serial``). The engine
    span is the busiest phone's trial time: what the makespan would be with free set-up.
    """
    per_phone: dict[str, float] = {}
    for job in jobs:
        per_phone[job["serial"]] = per_phone.get(job["serial"], 0.0) + job["trials_s"]
    setup = [job["setup_s"] for job in jobs]
    total = sum(setup) + sum(per_phone.values())
    return {"engine_span_s": max(per_phone.values(), default=0.0),
            "setup_median_s": statistics.median(setup) if setup else 0.0,
            "setup_total_s": sum(setup), "setup_share": sum(setup) / total if total else 0.0,
            "phone_states": sorted(str(job.get("phone_state", "")) for job in jobs)}


def breakdown(jobs: Sequence[dict[str, Any]], makespan: float) -> dict[str, Any]:
    """The run's makespan for its busiest phone (most set-up + trial time): its set-up, its
    trials and the rest (driver set-up, scheduling, store writes); its trials split by their
    laps (``harness.run.laps``, summed per job): ``engine_s`` the engines' own runs on the
    phone's clock, ``phases`` every lap (pre-flight, launch, evidence, ...) (pure, tested)."""
    per_phone: dict[str, tuple[float, float]] = {}
    laps: dict[str, dict[str, float]] = {}
    for job in jobs:
        setup, trials = per_phone.get(job["serial"], (0.0, 0.0))
        per_phone[job["serial"]] = (setup + job["setup_s"], trials + job["trials_s"])
        phases = laps.setdefault(job["serial"], {})
        for phase, seconds in (job.get("laps") or {}).items():
            phases[phase] = phases.get(phase, 0.0) + seconds
    busiest = max(per_phone, key=lambda s: sum(per_phone[s]), default=None)
    setup, trials = per_phone[busiest] if busiest is not None else (0.0, 0.0)
    phases = laps.get(busiest, {}) if busiest is not None else {}
    return {"setup_s": setup, "trials_s": trials, "rest_s": max(0.0, makespan - setup - trials),
            "engine_s": phases.get("engine", 0.0), "phases": phases}


@contextlib.contextmanager
def dask_farm(work: Path) -> Iterator[str]:
    """A scheduler and one agent on 127.0.0.1 for the lab's adb server, on TLS with
    certificates made for it in ``work/tls``; stopped by pid."""
    from harness.farm.security import init_farm

    harness = str(Path(sys.executable).parent / "harness")
    work.mkdir(parents=True, exist_ok=True)
    tls = work / "tls"
    if not (tls / "ca.pem").is_file():
        init_farm(tls)
    address_file = work / "scheduler.json"
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(work / log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    try:
        start([harness, "farm", "scheduler", "--host", "127.0.0.1", "--port", "0",
               "--scheduler-file", str(address_file), "--tls", str(tls)], "scheduler.log")
        deadline = time.monotonic() + 60
        while not address_file.is_file():
            if time.monotonic() > deadline:
                raise RuntimeError((work / "scheduler.log").read_text())
            time.sleep(0.1)
        time.sleep(0.1)
        address = json.loads(address_file.read_text())["address"]
        start([harness, "farm", "agent", "--scheduler", address, "--name", "lab",
               "--listen-host", "127.0.0.1", "--poll", "0.3", "--no-soc-tag",
               "--cache", str(work / "cache"), "--log-dir", str(work / "logs"),
               "--tls", str(tls)], "agent.log")
        yield address
    finally:
        for proc in reversed(procs):  # the agent first: it stops its workers by pid
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=20)


def _driver_tls(work: Path) -> Any:
    from harness.farm.security import FarmTLS

    return FarmTLS(work / "tls", "driver")


def _wait_for_workers(address: str, serials: set[str], work: Path,
                      timeout: float = 120) -> None:
    from distributed import Client

    from harness.farm.naming import farm_phones

    with Client(address, timeout="20s", set_as_default=False,
                security=_driver_tls(work).security()) as client:
        deadline = time.monotonic() + timeout
        while not serials <= set(farm_phones(client.scheduler_info()["workers"])):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no farm worker for some of {sorted(serials)}")
            time.sleep(0.3)


def measure_dask(lab: Lab, counts: Sequence[int], rounds: int) -> dict[str, Any]:
    """The matrix on the Dask backend: cold run first, then ``rounds`` rotating rounds."""
    from harness.farm.driver import execute_farm
    from harness.run.runner import RunOptions

    serials = [p.serial for p in lab.phones[:max(counts)]]
    results = lab.work / "farm-dask-results"
    runs: list[dict[str, Any]] = []
    with dask_farm(lab.work / "dask") as address:
        _wait_for_workers(address, set(serials), lab.work / "dask")

        def one(phones: int, kind: str, index: int) -> None:
            load = os.getloadavg()[0]
            summary = execute_farm(MATRIX, address, RunOptions(results, lab.builds),
                                   serials[:phones], tls=_driver_tls(lab.work / "dask"))
            data = summary.to_json()
            runs.append({"round": index, "kind": kind, "phones": phones,
                         "makespan_s": summary.run.wall_s,
                         "outcomes": dict(summary.run.outcomes()),
                         "bytes_served": summary.bytes_served, "jobs": data["jobs"],
                         "load_1min_before": load,
                         "breakdown": breakdown(data["jobs"], summary.run.wall_s),
                         **job_split(data["jobs"])})

        one(max(counts), "cold", -1)
        for index in range(rounds):
            shift = index % len(counts)
            for phones in list(counts[shift:]) + list(counts[:shift]):
                one(phones, "warm", index)
    return {"runs": runs}


def _median_breakdown(runs: Sequence[dict[str, Any]]) -> str:
    parts = {key: statistics.median([r["breakdown"].get(key, 0.0) for r in runs])
             for key in ("setup_s", "trials_s", "engine_s", "rest_s")}
    return (f"busiest phone per run: set-up {parts['setup_s']:.2f} s, trials "
            f"{parts['trials_s']:.2f} s (the engines' own runs {parts['engine_s']:.2f} s), rest "
            f"{parts['rest_s']:.2f} s (driver, scheduling, store)")


def dask_figures(runs: Sequence[dict[str, Any]], counts: Sequence[int],
                 cores: int) -> list[Figure]:
    warm = [r for r in runs if r["kind"] == "warm"]
    cold = next((r for r in runs if r["kind"] == "cold"), None)

    def median_of(key: str, n: int) -> float:
        return statistics.median([r[key] for r in warm if r["phones"] == n])

    figures = []
    for n in counts[1:]:
        ceiling = cpu_ceiling(n, cores)
        fits = ceiling >= 1.0
        target = ">= 0.85" if fits else f"n/a: ceiling {ceiling:.2f}"
        make = median_of("makespan_s", 1) / median_of("makespan_s", n)
        engine = median_of("engine_span_s", 1) / median_of("engine_span_s", n)
        share = 100 * median_of("setup_share", n)
        threads = (f"{THREADS} engine thread per phone: {n * THREADS} on {cores} cores, with "
                   "the phones' shells, the workers and the driver")
        figures.append(Figure(
            f"3 farm (dask): efficiency, {n} phones", make, "ratio",
            f"makespan {median_of('makespan_s', 1):.1f} s -> {median_of('makespan_s', n):.1f} s",
            target, make >= 0.85 if fits else None,
            _median_breakdown([r for r in warm if r["phones"] == n])))
        own = {k: statistics.median([r["breakdown"].get("engine_s", 0.0) for r in warm
                                     if r["phones"] == k]) for k in (1, n)}
        figures.append(Figure(
            f"3 farm (dask): engine-only efficiency, {n} phones", engine, "ratio",
            f"busiest phone's trials {median_of('engine_span_s', 1):.1f} s -> "
            f"{median_of('engine_span_s', n):.1f} s", target, engine >= 0.85 if fits else None,
            f"set-up left out; of the trials, the engines' own runs {own[1]:.2f} s -> "
            f"{own[n]:.2f} s; {threads}"))
        figures.append(Figure(
            f"3 farm (dask): set-up share of job time, {n} phones", share, "%",
            f"median per job {median_of('setup_median_s', n):.2f} s", "<= 15%", share <= 15,
            "set-up: artifact check, lease, the phone's kept state checked (boot id, files' "
            "stat), plan; kept from the cold run"))
    if cold is not None:
        fetched = sum(j["bytes_fetched"] for j in cold["jobs"])
        figures.append(Figure(
            "3 farm (dask): cold run set-up per job", cold["setup_median_s"], "s",
            f"{cold['phones']} phones, {fetched / 2**20:.1f} MiB fetched once into the host's "
            "cache", "-", None,
            f"warm runs fetched {sum(r['bytes_served'] for r in warm)} B in all"))
    return figures


def _scheduler_file_address(path: Path) -> str | None:
    try:
        return str(json.loads(path.read_text())["address"])
    except (OSError, ValueError, KeyError):
        return None


def measure_two_hosts(lab: Lab, rounds: int) -> dict[str, Any]:
    """The matrix on a farm of two hosts, each in its own network namespace with one of the
    lab's phones plugged in (``harness.testing.netns``), everything on TLS: the scheduler and
    the driver (``harness run --backend dask`` as a command) in a third namespace. A cold run
    first, then ``rounds`` rounds of 1 phone (on h1) and 2 phones (one per host), rotating."""
    from harness.farm.security import init_farm
    from harness.testing import netns

    problem = netns.netns_unavailable()
    if problem:
        return {"skipped": problem}
    harness = str(Path(sys.executable).parent / "harness")
    work = lab.work / "two-hosts"
    work.mkdir(parents=True, exist_ok=True)
    tls = work / "tls"
    if not (tls / "ca.pem").is_file():
        init_farm(tls)
    lab.ensure_phones(2)
    serials = [p.serial for p in lab.phones[:2]]
    runs: list[dict[str, Any]] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with netns.lab_network(["h1", "h2"], work / "net") as net:
        for serial, host in zip(serials, ("h1", "h2"), strict=True):
            net.connect_phone(serial, host)
        address_file = work / "scheduler.json"
        address_file.unlink(missing_ok=True)
        net.popen("ctl", [harness, "farm", "scheduler", "--host", net.address("ctl"), "--port",
                          "0", "--scheduler-file", str(address_file), "--tls", str(tls)],
                  env=env, log=work / "scheduler.log")
        deadline = time.monotonic() + 60
        while (address := _scheduler_file_address(address_file)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError((work / "scheduler.log").read_text())
            time.sleep(0.2)
        for host in ("h1", "h2"):
            net.popen(host, [harness, "farm", "agent", "--scheduler", address, "--name", host,
                             "--listen-host", net.address(host), "--poll", "0.3",
                             "--no-soc-tag", "--tls", str(tls),
                             "--cache", str(work / f"cache-{host}"),
                             "--log-dir", str(work / f"logs-{host}")],
                      env={**env, **net.adb_server(host).env}, log=work / f"agent-{host}.log")

        def one(phones: int, kind: str, index: int) -> None:
            out = work / f"run-{len(runs)}.json"
            done = net.run("ctl", [harness, "run", str(MATRIX), "--backend", "dask",
                                   "--scheduler", address, "--tls", str(tls),
                                   "--devices", ",".join(serials[:phones]), "--results",
                                   str(work / "results"), "--builds", str(lab.builds),
                                   "--json"], env=env, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"two-host run failed: {done.stderr[-2000:]}")
            out.write_text(done.stdout)
            data = json.loads(done.stdout)
            runs.append({"round": index, "kind": kind, "phones": phones,
                         "makespan_s": data["wall_s"], "outcomes": data["trials_by_outcome"],
                         "bytes_served": data["artifact_bytes_served"], "jobs": data["jobs"],
                         "security": data["farm_security"], **job_split(data["jobs"])})

        deadline = time.monotonic() + 120
        while True:  # the cold run doubles as the wait for both hosts' workers
            try:
                one(2, "cold", -1)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
        for index in range(rounds):
            for phones in ((1, 2) if index % 2 == 0 else (2, 1)):
                one(phones, "warm", index)
    return {"runs": runs}


def two_host_figures(data: dict[str, Any]) -> list[Figure]:
    if "skipped" in data:
        return [Figure("3 farm (dask, 2 hosts): efficiency, 2 phones", None, "ratio", "-",
                       ">= 0.85", None, f"not measured: {data['skipped']}")]
    warm = [r for r in data["runs"] if r["kind"] == "warm"]

    def median_of(key: str, n: int) -> float:
        return statistics.median([r[key] for r in warm if r["phones"] == n])

    make = median_of("makespan_s", 1) / median_of("makespan_s", 2)
    engine = median_of("engine_span_s", 1) / median_of("engine_span_s", 2)
    return [
        Figure("3 farm (dask, 2 hosts): efficiency, 2 phones", make, "ratio",
               f"makespan {median_of('makespan_s', 1):.1f} s -> "
               f"{median_of('makespan_s', 2):.1f} s", ">= 0.85", make >= 0.85,
               "one phone per host, each host in its own network namespace, all on TLS; "
               "the driver is `harness run --backend dask` beside the scheduler"),
        Figure("3 farm (dask, 2 hosts): engine-only efficiency, 2 phones", engine, "ratio",
               f"busiest phone's trials {median_of('engine_span_s', 1):.1f} s -> "
               f"{median_of('engine_span_s', 2):.1f} s", ">= 0.85", engine >= 0.85,
               "set-up left out"),
    ]


def measure(lab: Lab, quick: bool) -> tuple[list[Figure], dict[str, Any]]:
    rounds = 2 if quick else 3
    cores = os.cpu_count() or 1
    devices = lab.devices(max(COUNTS))
    results = lab.work / "farm-results"
    warm = lab.run(WARM, devices, results)
    runs: list[dict[str, Any]] = []
    for index in range(rounds):
        for count in count_order(index):
            timeline = Timeline()
            load = os.getloadavg()[0]
            summary = lab.run(MATRIX, devices[:count], results, timeline=timeline)
            spans = timeline.trial_spans()
            runs.append({"round": index, "phones": count, "makespan_s": summary.wall_s,
                         "load_1min_before": load,
                         "outcomes": dict(summary.outcomes()),
                         "bytes_pushed": sum(d.bytes_pushed for d in summary.devices),
                         "tg_tps": [s["tg_tps"] for s in spans],
                         "trial_span_s": [s["span_s"] for s in spans]})
    makespans: dict[int, list[float]] = {n: [] for n in COUNTS}
    for run in runs:
        makespans[run["phones"]].append(run["makespan_s"])
    eff = efficiency(makespans)
    tg = {n: statistics.median([t for r in runs if r["phones"] == n for t in r["tg_tps"] if t])
          for n in COUNTS}
    figures = []
    for n in COUNTS[1:]:
        ceiling = cpu_ceiling(n, cores)
        fits = ceiling >= 1.0
        figures.append(Figure(
            f"3 farm: efficiency, {n} phones", eff[n], "ratio",
            f"makespan {statistics.median(makespans[1]):.1f} s -> "
            f"{statistics.median(makespans[n]):.1f} s",
            ">= 0.85" if fits else f"n/a: ceiling {ceiling:.2f}",
            eff[n] >= 0.85 if fits else None,
            f"tg {tg[1]:.0f} -> {tg[n]:.0f} tok/s per phone; {n} engine threads on "
            f"{cores} cores" + ("" if fits else " (CPU-bound engine: cores limit it)")))
    dask_counts = COUNTS[:2] if quick else COUNTS
    dask = measure_dask(lab, dask_counts, rounds)
    figures += dask_figures(dask["runs"], dask_counts, cores)
    two_hosts = measure_two_hosts(lab, rounds)
    figures += two_host_figures(two_hosts)
    return figures, {"two_hosts": two_hosts, "rounds": rounds, "cores": cores, "runs": runs,
                     "warm_bytes_pushed": sum(d.bytes_pushed for d in warm.devices),
                     "efficiency": {str(k): v for k, v in eff.items()},
                     "median_tg_tps": {str(k): v for k, v in tg.items()},
                     "dask": {"counts": list(dask_counts), **dask}}
