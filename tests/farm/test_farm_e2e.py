"""The farm on one machine: a scheduler, two agents ("hosts") and three virtual phones.

alpha holds two phones, beta one; each host has its own adb server, so a job for beta's phone can
only succeed on beta's worker. The real llama-bench host build runs the tiny model. The tests
share one farm (starting it is most of their cost) and do not depend on each other's order.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import adbutils
import pytest
from click.testing import CliRunner
from conftest import FarmSetup, write_matrix

from harness import store
from harness.artifacts.builds import Build
from harness.cli import main
from harness.device.adb import AdbDevice
from harness.device.lease import DeviceLease
from harness.farm.driver import FarmBusyError, execute_farm
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow


def outcome_key(trials: Any) -> Counter[tuple[str, str, int, str]]:
    return Counter(zip(trials["device_serial"], trials["cell_id"], trials["rep"],
                       trials["outcome"], strict=True))


def test_farm_places_each_job_on_its_phone_and_matches_a_local_run(
    two_hosts: FarmSetup, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path],
) -> None:
    farm, host_of, phones = two_hosts.farm, two_hosts.host_of, two_hosts.phones
    matrix = write_matrix(tmp_path, "placement", ["Q8_0", "Q4_K_M"], reps=2)
    builds = host_build.path.parent

    # the local backend, each phone reached through its own host's adb server
    local_results = tmp_path / "local"
    devices = [AdbDevice(s, adbutils.AdbClient("127.0.0.1", two_hosts.hosts[host_of[s]].port))
               for s in phones]
    execute(matrix, devices, RunOptions(local_results, builds))
    local = store.read_table(local_results, "trials")

    names = farm.wait_for_phones(set(phones))
    assert names == {s: f"{s}@{host_of[s]}" for s in phones}
    results = tmp_path / "farm"
    summary = execute_farm(matrix, farm.scheduler, RunOptions(results, builds), grace_s=30,
                           tls=farm.driver_tls)

    trials = store.read_table(results, "trials")
    samples = store.read_table(results, "samples")
    assert summary.run.outcomes() == Counter(ok=12), json.dumps(summary.to_json())
    assert trials["trial_id"].is_unique and len(trials) == 12
    assert set(samples["trial_id"]) == set(trials["trial_id"])
    # same trials and outcomes as the local run (run ids differ, cells and reps do not)
    assert outcome_key(trials) == outcome_key(local)

    # placement: every job ran on the worker of its own phone, on the host holding the phone
    assert len(summary.jobs) == 6
    for job in summary.jobs:
        assert job.worker == f"{job.serial}@{host_of[job.serial]}"
        assert job.key.startswith(f"{summary.run.run_id}/{job.serial}/")
        assert job.trials == job.written == 2
    # one job at a time per phone, in order
    for serial in phones:
        runs = sorted((j.started, j.finished) for j in summary.jobs if j.serial == serial)
        assert len(runs) == 2
        assert runs[0][1] <= runs[1][0], runs
    # beta's phone really ran through beta's adb server: its facts were read there
    beta = trials[trials["device_serial"] == phones[2]]
    assert beta["device_model"].notna().all() and (beta["tg_tps"] > 0).all()


def test_killed_workers_rerun_the_job_or_lose_only_the_trial_in_flight(
    two_hosts: FarmSetup, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path],
) -> None:
    farm = two_hosts.farm
    back, steady, gone = two_hosts.phones  # alpha restarts dead workers, beta does not
    farm.wait_for_phones(set(two_hosts.phones))
    matrix = write_matrix(tmp_path, "failures", ["Q8_0", "Q4_K_M"], reps=3)
    results = tmp_path / "farm"
    options = RunOptions(results, host_build.path.parent)
    killed: dict[str, int] = {}
    problems: list[BaseException] = []
    lock = threading.Lock()

    def kill_mid_job(kind: str, serial: str, details: dict[str, Any]) -> None:
        # the second trial of the phone's first job has started: kill the worker running it
        if kind != "trial" or serial not in (back, gone) or details.get("index") != 1:
            return
        with lock:
            if serial in killed:
                return
            try:
                farm.kill_worker(int(details["pid"]))
                killed[serial] = int(details["pid"])
            except BaseException as error:  # the handler runs on Dask's thread
                problems.append(error)

    summary = execute_farm(matrix, farm.scheduler, options, on_event=kill_mid_job, grace_s=15,
                           tls=farm.driver_tls)
    assert not problems, problems
    assert set(killed) == {back, gone}

    trials = store.read_table(results, "trials")
    assert trials["trial_id"].is_unique
    assert summary.duplicates_skipped == 0
    by_phone = {s: g.sort_values(["config_id", "rep"]) for s, g in
                trials.groupby("device_serial")}
    devices = {d.serial: d for d in summary.run.devices}

    # alpha restarted the worker; the interrupted job ran again, whole, on the new one
    assert list(by_phone[back]["outcome"]) == ["ok"] * 6
    first_job = next(j for j in summary.jobs if j.serial == back)
    assert first_job.pid != killed[back] and first_job.trials == 3
    assert any(e["event"] == "died" and e["serial"] == back
               for e in farm.agent_events("alpha"))
    # the phone nobody touched ran everything
    assert list(by_phone[steady]["outcome"]) == ["ok"] * 6
    # beta's worker never came back: the trial in flight is device_lost; the rest of the
    # phone's trials are not run, including the one its dead worker had finished but never
    # delivered (a job's trials reach the driver together)
    lost_rows = by_phone[gone]
    assert list(lost_rows["outcome"]) == ["device_lost"]
    assert lost_rows["rep"].iloc[0] == 1  # the second trial of the first job
    assert "no farm worker" in lost_rows["error"].iloc[0]
    assert devices[gone].not_run == 5
    assert devices[back].not_run == devices[steady].not_run == 0

    # beta's agent is restarted (the phone plugged in again); --resume runs what has no row
    farm.stop_agent("beta")
    farm.start_agent("beta", max_restarts=0)
    farm.wait_for_phones({gone})
    result = CliRunner().invoke(main, [
        "run", "--resume", summary.run.run_id, "--backend", "dask", "--scheduler",
        farm.scheduler, "--results", str(results), "--builds", str(host_build.path.parent),
        "--tls", str(farm.tls), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    resumed = json.loads(result.stdout)
    assert resumed["backend"] == "dask" and resumed["run_id"] == summary.run.run_id
    assert resumed["trials_by_outcome"] == {"ok": 5}
    assert {job["worker"] for job in resumed["jobs"]} == {f"{gone}@beta"}
    trials = store.read_table(results, "trials")
    assert len(trials) == 18 and trials["trial_id"].is_unique
    assert Counter(trials["outcome"]) == Counter(ok=17, device_lost=1)


def test_builds_and_models_come_from_the_driver_by_hash_once_per_host(
    two_hosts: FarmSetup, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path],
) -> None:
    farm, phones = two_hosts.farm, two_hosts.phones
    farm.wait_for_phones(set(phones))
    # the model exists only in a folder of the driver's; the jobs name it by sha256
    driver_only = tmp_path / "driver-only"
    driver_only.mkdir()
    model = driver_only / "tiny-Q8_0.gguf"
    shutil.copyfile(tiny_ladder["Q8_0"], model)
    matrix = write_matrix(tmp_path, "fetch", ["Q8_0"], reps=1)
    matrix.write_text(matrix.read_text().replace(
        "tiny: {ladder: tiny}", f"tiny: {{path: '{driver_only}/tiny-{{quant}}.gguf'}}"))
    options = RunOptions(tmp_path / "farm", host_build.path.parent)
    for host in two_hosts.hosts:  # empty caches: another test of this farm may have filled them
        shutil.rmtree(farm.cache(host), ignore_errors=True)
    per_host = model.stat().st_size + sum(f.size for f in host_build.manifest.files)
    sha = hashlib.sha256(model.read_bytes()).hexdigest()

    first = execute_farm(matrix, farm.scheduler, options, grace_s=30, tls=farm.driver_tls)
    assert first.run.outcomes() == Counter(ok=3), json.dumps(first.to_json())
    # each host fetched the files once (its two phones share its cache), into its own folder
    assert first.bytes_served == 2 * per_host
    assert sum(j.bytes_fetched for j in first.jobs) == 2 * per_host
    for host in two_hosts.hosts:
        blob = farm.cache(host) / "sha256" / sha[:2] / sha
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == sha
    assert all(j.setup_s > 0 and j.trials_s > 0 for j in first.jobs)

    second = execute_farm(matrix, farm.scheduler, options, grace_s=30, tls=farm.driver_tls)
    assert second.run.outcomes() == Counter(ok=3)
    assert second.bytes_served == 0  # the second nightly moves nothing
    assert [j.bytes_fetched for j in second.jobs] == [0, 0, 0]

    # a cached copy on alpha goes bad (same size, other bytes): detected, fetched again
    blob = farm.cache("alpha") / "sha256" / sha[:2] / sha
    blob.chmod(0o644)
    with open(blob, "r+b") as handle:
        handle.seek(4096)
        handle.write(b"\0" * 64)
    third = execute_farm(matrix, farm.scheduler, options, grace_s=30, tls=farm.driver_tls)
    assert third.run.outcomes() == Counter(ok=3)
    assert third.bytes_served == model.stat().st_size
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == sha
    fetched = {(j.serial, j.bytes_fetched, j.corrupt_replaced) for j in third.jobs}
    alpha = [s for s in phones if two_hosts.host_of[s] == "alpha"]
    replaced = {s for s, got, names in fetched if names == ("tiny-Q8_0.gguf",)}
    assert len(replaced) == 1 and replaced <= set(alpha)  # one of alpha's workers fetched it
    assert sum(got for _, got, _ in fetched) == model.stat().st_size


def test_a_phone_leased_by_a_local_run_is_skipped_and_its_holder_named(
    two_hosts: FarmSetup, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path],
) -> None:
    farm, phones = two_hosts.farm, two_hosts.phones
    farm.wait_for_phones(set(phones))
    matrix = write_matrix(tmp_path, "leased", ["Q8_0"], reps=1)
    results = tmp_path / "farm"
    leased = phones[2]  # on beta, leased as a local `harness run` would
    device = AdbDevice(leased, adbutils.AdbClient("127.0.0.1", two_hosts.hosts["beta"].port))
    with DeviceLease(device, run="local-nightly"), \
            pytest.raises(FarmBusyError) as caught:
        execute_farm(matrix, farm.scheduler, RunOptions(results, host_build.path.parent),
                     grace_s=30, tls=farm.driver_tls)
    message = str(caught.value)
    assert f"pid {os.getpid()}, run local-nightly" in message and leased in message
    assert "--resume" in message
    summary = caught.value.summary
    devices = {d.serial: d for d in summary.run.devices}
    assert devices[leased].not_run == 1 and not devices[leased].outcomes
    assert "local-nightly" in str(devices[leased].error)
    assert all(devices[s].outcomes == Counter(ok=1) for s in phones[:2])
    refused = [j for j in summary.jobs if j.serial == leased]
    assert len(refused) == 1 and "local-nightly" in str(refused[0].busy)
    assert refused[0].trials == 0
    trials = store.read_table(results, "trials")
    assert leased not in set(trials["device_serial"])
    # the lease released, the phone is free for the farm again
    result = CliRunner().invoke(main, [
        "run", "--resume", summary.run.run_id, "--backend", "dask", "--scheduler",
        farm.scheduler, "--results", str(results), "--builds", str(host_build.path.parent),
        "--tls", str(farm.tls), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["trials_by_outcome"] == {"ok": 1}
