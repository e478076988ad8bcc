"""Fault injection on virtual phones during real runs: each fault hits a chosen moment.

For each fault: the trial it hits gets the right outcome and evidence, the other phone finishes its
work, and the store holds every trial the run (plus ``--resume`` where one is needed) finished,
exactly once. Each test adds a row to the fault table printed at the end of the session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build
from harness.cli import main
from harness.errors import HarnessError
from harness.run.runner import RunOptions, RunSummary, execute
from harness.testing.adbserver import AdbServer, adb_binary
from harness.virtual.control import list_phones
from reliability.faultkit import (
    Events,
    Injector,
    audit,
    device_of,
    dump,
    engine_pids,
    expected_trials,
    once,
    wait_for,
    write_matrix,
)

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def run(matrix: Path, phones: list[Any], results: Path, build: Build, events: Events,
        run_id: str | None = None, **options: Any) -> RunSummary:
    opts = RunOptions(results=results, builds=build.path.parent, **options)
    return execute(matrix, [device_of(p.serial) for p in phones], opts, run_id=run_id,
                   on_event=events)


def by_phone(results: Path, serial: str) -> pd.DataFrame:
    trials = store.read_table(results, "trials")
    return trials[trials["device_serial"] == serial].sort_values("started_at")


def finish(row: Any, results: Path, matrix: Path, run_id: str, phones: list[Any]) -> None:
    """Audit the store into the fault-table row and assert nothing was lost or duplicated."""
    found = audit(results, run_id, expected_trials(matrix, run_id, [p.serial for p in phones]))
    row.lost, row.duplicated, row.trials = found.lost, found.duplicated, found.rows
    assert (found.lost, found.duplicated) == (0, 0), found


def outcomes(summary: RunSummary, serial: str) -> dict[str, int]:
    return dict(next(d for d in summary.devices if d.serial == serial).outcomes)


@pytest.fixture
def two_phones(virtual_phones: Any) -> list[Any]:
    return list(virtual_phones(2))


# --- connection drops ---


def test_drop_during_model_push_reconnects_and_pushes_the_rest(
    two_phones: list[Any], tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any
) -> None:
    row = fault_row("connection dropped during a model push (phone returns)")
    hit, other = two_phones
    events = Events()
    hook = once(lambda kind, serial, d: kind == "push" and serial == hit.serial
                and d["name"].endswith(".gguf") and 2 * d["done"] >= d["total"]
                and (hit.fault("drop", 0) or True))
    events.hooks.append(hook)
    matrix = write_matrix(tmp_path)
    summary = run(matrix, two_phones, tmp_path / "r", host_build, events)
    row.injected = hook.fired.is_set()
    assert row.injected
    assert "reconnecting" in events.kinds(hit.serial), dump(events, hit.serial)
    assert outcomes(summary, hit.serial) == {"ok": 3}
    assert outcomes(summary, other.serial) == {"ok": 3}
    assert not list(hit.root.rglob("*.part"))  # no half file looks complete
    finish(row, tmp_path / "r", matrix, summary.run_id, two_phones)


def test_drop_during_a_trial_records_device_lost_and_goes_on(
    two_phones: list[Any], tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any
) -> None:
    row = fault_row("connection dropped during a trial (phone returns)")
    hit, other = two_phones
    events = Events()
    injector = Injector(
        lambda: events.kinds(hit.serial).count("done") >= 1 and engine_pids(hit.root),
        lambda pids: hit.fault("drop", 0))
    matrix = write_matrix(tmp_path)
    summary = run(matrix, two_phones, tmp_path / "r", host_build, events)
    row.injected = injector.join()
    assert outcomes(summary, hit.serial) == {"ok": 2, "device_lost": 1}
    lost = by_phone(tmp_path / "r", hit.serial).query("outcome == 'device_lost'").iloc[0]
    assert "went away" in lost["error"]
    assert "stream closed" in lost["evidence"]  # the transport's own words
    assert outcomes(summary, other.serial) == {"ok": 3}
    # the engine the dropped shell ran is gone with it (adbd kills a closed stream's process)
    wait_for(lambda: not engine_pids(hit.root), timeout=10)
    finish(row, tmp_path / "r", matrix, summary.run_id, two_phones)


def test_drop_between_trials_is_waited_out_and_costs_no_trial(
    two_phones: list[Any], tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any
) -> None:
    row = fault_row("connection dropped between trials (phone returns)")
    hit, other = two_phones
    events = Events()
    hook = once(lambda kind, serial, d: kind == "done" and serial == hit.serial
                and (hit.fault("drop", 0) or True))
    events.hooks.append(hook)
    matrix = write_matrix(tmp_path)
    summary = run(matrix, two_phones, tmp_path / "r", host_build, events)
    row.injected = hook.fired.is_set()
    assert row.injected
    assert "reconnected" in events.kinds(hit.serial)
    assert outcomes(summary, hit.serial) == {"ok": 3}
    assert outcomes(summary, other.serial) == {"ok": 3}
    finish(row, tmp_path / "r", matrix, summary.run_id, two_phones)


def test_phone_that_never_returns_stops_only_its_jobs_and_resume_finishes_them(
    two_phones: list[Any], tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any
) -> None:
    row = fault_row("connection dropped, phone gone past the reconnect wait; --resume")
    hit, other = two_phones
    events = Events()
    injector = Injector(lambda: engine_pids(hit.root), lambda pids: hit.fault("drop", 8))
    matrix = write_matrix(tmp_path)
    results = tmp_path / "r"
    summary = run(matrix, two_phones, results, host_build, events, reconnect_s=2)
    row.injected = injector.join()
    lost = next(d for d in summary.devices if d.serial == hit.serial)
    assert dict(lost.outcomes) == {"device_lost": 1}
    assert lost.not_run == 2 and lost.error and "--resume" in lost.error
    assert outcomes(summary, other.serial) == {"ok": 3}
    # the phone comes back later (adb reconnects it, or is told to); resume runs the rest
    wait_for(lambda: _answers(hit.serial), timeout=60, poll=1)
    again = run(matrix, two_phones, results, host_build, Events(), run_id=summary.run_id)
    assert outcomes(again, hit.serial) == {"ok": 2}
    assert outcomes(again, other.serial) == {}
    finish(row, results, matrix, summary.run_id, two_phones)


def _answers(serial: str) -> bool:
    try:
        # -H 127.0.0.1: fail rather than start a server when the private one is down
        subprocess.run([adb_binary(), "-H", "127.0.0.1", "connect", serial],
                       capture_output=True, timeout=10, env=os.environ, check=False)
        return device_of(serial).shell("echo ok", timeout=5).stdout.strip() == "ok"
    except HarnessError:
        return False


# --- the engine dies ---


@pytest.mark.parametrize(("sig", "name"), [("SEGV", "SIGSEGV"), ("ABRT", "SIGABRT")])
def test_engine_killed_by_a_signal_is_crashed_with_the_signal_named(
    two_phones: list[Any], tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any,
    sig: str, name: str,
) -> None:
    row = fault_row(f"engine {name} during a trial")
    hit, other = two_phones
    events = Events()
    injector = Injector(
        lambda: events.kinds(hit.serial).count("done") >= 1 and engine_pids(hit.root),
        lambda pids: device_of(hit.serial).shell(f"kill -{sig} {pids[0]}"))
    matrix = write_matrix(tmp_path)
    summary = run(matrix, two_phones, tmp_path / "r", host_build, events)
    row.injected = injector.join()
    assert outcomes(summary, hit.serial) == {"ok": 2, "crashed": 1}
    crashed = by_phone(tmp_path / "r", hit.serial).query("outcome == 'crashed'").iloc[0]
    assert crashed["error"] == f"killed by {name}"
    assert pd.isna(crashed["tg_tps"])  # no measurement is stored for a crashed trial
    assert outcomes(summary, other.serial) == {"ok": 3}
    finish(row, tmp_path / "r", matrix, summary.run_id, two_phones)


def test_engine_hung_past_the_timeout_is_killed_and_recorded_timeout(
    two_phones: list[Any], tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any
) -> None:
    row = fault_row("engine hangs past the trial timeout (SIGSTOP)")
    hit, other = two_phones
    events = Events()
    injector = Injector(
        lambda: events.kinds(hit.serial).count("done") >= 1 and engine_pids(hit.root),
        lambda pids: device_of(hit.serial).shell(f"kill -STOP {pids[0]}"))
    matrix = write_matrix(tmp_path, timeout=8)
    summary = run(matrix, two_phones, tmp_path / "r", host_build, events)
    row.injected = injector.join()
    assert outcomes(summary, hit.serial) == {"ok": 2, "timeout": 1}
    hung = by_phone(tmp_path / "r", hit.serial).query("outcome == 'timeout'").iloc[0]
    assert hung["error"] == "killed after the trial time limit"
    assert not engine_pids(hit.root)  # the watchdog's SIGKILL reaches a stopped process
    assert outcomes(summary, other.serial) == {"ok": 3}
    finish(row, tmp_path / "r", matrix, summary.run_id, two_phones)


def test_engine_over_the_phone_memory_is_oom_killed_by_the_kernel_with_its_evidence(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any
) -> None:
    """The stock path: no app left for lmkd to kill, the kernel's OOM killer takes the engine
    and says nothing a shell can read; exit 137, the peak and the memory stall remain."""
    row = fault_row("engine OOM-killed by the kernel (no lmkd line names it)")
    profile = yaml.safe_load((REPO / "devices" / "budget-4gb.yaml").read_text())
    profile.update(name="budget-no-apps", android={"background_apps": []})
    (tmp_path / "budget-no-apps.yaml").write_text(yaml.safe_dump(profile))
    (small,) = virtual_phones(1, profile=str(tmp_path / "budget-no-apps.yaml"), ram_mb=28)
    (other,) = virtual_phones(1)
    phones = [small, other]
    matrix = write_matrix(tmp_path, n_ctx=[8192, 512], n_gen=16, reps=1)
    text = matrix.read_text().replace("n_depth: 0", "n_depth: fill")
    matrix.write_text(text)
    summary = run(matrix, phones, tmp_path / "r", host_build, Events(), no_skip=True,
                  reserve_bytes=0)
    row.injected = True  # the phone's own kernel is the fault
    assert outcomes(summary, small.serial) == {"oom_killed": 1, "ok": 1}
    killed = by_phone(tmp_path / "r", small.serial).query("outcome == 'oom_killed'").iloc[0]
    assert killed["n_ctx"] == 8192
    signals = killed["oom_signals"].split(",")
    assert "sigkill" in signals and not {"lmkd_named_engine", "lmkd_killed_apps"} & set(signals)
    assert {"vm_hwm_near_available", "memory_pressure"} & set(signals), signals
    assert "exit 137 (SIGKILL) without a timeout" in killed["evidence"]
    assert "lowmemorykiller" not in killed["evidence"]
    assert outcomes(summary, other.serial) == {"ok": 2}
    finish(row, tmp_path / "r", matrix, summary.run_id, phones)


# --- storage and heat ---


def test_disk_full_during_model_push_fails_that_phones_jobs_only(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any
) -> None:
    row = fault_row("device disk fills during the model push")
    # 12 MB: the 11 MB llama-bench fits, the model's bytes run out of space halfway; the output
    # check's harness-generate is pushed with it, so its size (whole MiB, rounded up) is added
    simple = sum(f.size for f in host_build.manifest.files if f.path == "bin/harness-generate")
    (full,) = virtual_phones(1, storage_mb=12 + -(-simple // 2**20))
    (other,) = virtual_phones(1)
    phones = [full, other]
    matrix = write_matrix(tmp_path)
    events = Events()
    summary = run(matrix, phones, tmp_path / "r", host_build, events)
    row.injected = any(k == "push" and s == full.serial and d["name"].endswith(".gguf")
                       for k, s, d in events.seen)
    assert outcomes(summary, full.serial) == {"push_failed": 3}
    failed = by_phone(tmp_path / "r", full.serial)
    # the error names the push and the file (adbutils drops the device's own reason, "No space
    # left on device", from a sync FAIL: see docs/reliability.md)
    assert failed["error"].str.contains("push failed").all()
    assert failed["error"].str.contains("harness-tiny-Q8_0.gguf").all()
    assert not [p for p in full.root.rglob("*") if ".part" in p.name]  # nothing half-pushed
    assert outcomes(summary, other.serial) == {"ok": 3}
    finish(row, tmp_path / "r", matrix, summary.run_id, phones)


def test_heat_spike_during_a_trial_and_a_phone_that_never_cools(
    two_phones: list[Any], tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any
) -> None:
    row = fault_row("thermal EMERGENCY during a trial, then SEVERE that never cools")
    hot, other = two_phones
    events = Events()
    injector = Injector(lambda: engine_pids(hot.root), lambda pids: hot.fault("thermal", 5))
    events.hooks.append(once(lambda kind, serial, d: kind == "done" and serial == hot.serial
                             and (hot.fault("thermal", 3) or True)))
    matrix = write_matrix(tmp_path, n_gen=768, max_wait=2)
    summary = run(matrix, two_phones, tmp_path / "r", host_build, events)
    row.injected = injector.join()
    assert outcomes(summary, hot.serial) == {"ok": 3}
    trials = by_phone(tmp_path / "r", hot.serial)
    first, rest = trials.iloc[0], trials.iloc[1:]
    assert first["throttled"] and first["max_thermal_status"] == 5
    # the gate waited its max_wait_s, gave up, and recorded the state the trial started in
    assert (rest["cooldown_waited_s"] >= 2).all()
    assert (rest["start_thermal_status"] == 3).all() and rest["throttled"].all()
    cool = by_phone(tmp_path / "r", other.serial)
    assert not cool["throttled"].any() and (cool["outcome"] == "ok").all()
    finish(row, tmp_path / "r", matrix, summary.run_id, two_phones)


# --- the adb server and the harness itself ---


def test_adb_server_killed_and_restarted_mid_run(
    two_phones: list[Any], adb_server: AdbServer, tmp_path: Path, host_build: Build,
    tiny_ladder: Any, fault_row: Any,
) -> None:
    row = fault_row("adb server killed and restarted mid-run")
    hit = two_phones[0]
    real_adb = adb_binary()
    restarted: list[subprocess.Popen[bytes]] = []

    def restart(_: Any) -> None:
        # while it is down the harness gets refusals: it never starts a server itself (adbutils'
        # client would, and the session's leak check fails the run if anything does)
        adb_server.process.send_signal(signal.SIGKILL)
        adb_server.process.wait(timeout=10)
        time.sleep(1.0)  # the outage's length (the fault itself), not a wait for anything
        log = open(adb_server.home / "adb-server-2.log", "ab")  # noqa: SIM115
        restarted.append(subprocess.Popen(
            [real_adb, "-P", str(adb_server.port), "nodaemon", "server"],
            env={**os.environ, **adb_server.env},
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        log.close()

    events = Events()
    injector = Injector(
        lambda: events.kinds(hit.serial).count("done") >= 1 and engine_pids(hit.root), restart)
    matrix = write_matrix(tmp_path)
    try:
        summary = run(matrix, two_phones, tmp_path / "r", host_build, events)
        row.injected = injector.join()
        for phone in two_phones:
            got = outcomes(summary, phone.serial)
            assert set(got) <= {"ok", "device_lost"} and sum(got.values()) == 3, got
            assert "reconnected" in events.kinds(phone.serial)
        assert outcomes(summary, hit.serial).get("device_lost") == 1  # the trial in flight
        finish(row, tmp_path / "r", matrix, summary.run_id, two_phones)
    finally:
        for process in restarted:  # stop the server this test started, by its pid
            process.terminate()
            process.wait(timeout=10)


def test_harness_sigkilled_mid_run_then_resumed(
    two_phones: list[Any], sim_env: Path, tmp_path: Path, host_build: Build, tiny_ladder: Any,
    fault_row: Any,
) -> None:
    row = fault_row("harness process SIGKILLed mid-run; --resume")
    results = tmp_path / "r"
    matrix = write_matrix(tmp_path, reps=4)
    serials = ",".join(p.serial for p in two_phones)
    args = ["run", str(matrix), "--devices", serials, "--results", str(results),
            "--builds", str(host_build.path.parent), "--json"]
    log = (tmp_path / "harness.log").open("wb")
    process = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()",
                                *args], stdout=log, stderr=subprocess.STDOUT, env=os.environ)
    try:
        wait_for(lambda: len(store.part_files(results, "trials")) >= 3
                 and any(engine_pids(p.root) for p in two_phones), timeout=120)
        process.send_signal(signal.SIGKILL)
        row.injected = True
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        log.close()
    assert process.returncode == -signal.SIGKILL
    (meta,) = (results / "runs").glob("*.json")
    run_id = json.loads(meta.read_text())["run_id"]
    before = len(store.run_files(results, "trials", run_id))
    # the engine the killed harness left running dies with its adb stream
    wait_for(lambda: not any(engine_pids(p.root) for p in two_phones), timeout=15)
    resumed = CliRunner().invoke(main, ["run", "--resume", run_id, *args[2:]])
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout)
    assert sum(summary["trials_by_outcome"].values()) == 8 - before
    assert set(summary["trials_by_outcome"]) == {"ok"}
    assert all(p.running for p in list_phones(two_phones[0].home))
    finish(row, results, matrix, run_id, two_phones)
