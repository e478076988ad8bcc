"""Figure 17's simulated farm (bench/farmsim.py) at test size: ten stand-in phones on two
simulated hosts, a real scheduler on TLS and the farm's driver and job function; one phone lost
for good mid-trial, one unplugged and plugged back, one host killed and started again, one slow
push. Nothing may be lost or stored twice, and each fault must be handled the farm's way."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.farmsim import (
    Scenario,
    account,
    fault_plan,
    hosts_of,
    ideal_makespan,
    session_rows,
    simulate,
    spans,
)
from bench.farmsim_phone import trial_seconds

SMALL = Scenario(phones=10, hosts=2, threads=(1,), reps=2, factor=0.05, push_s=0.2,
                 slow_push=1, lose=1, unplug=1, unplug_s=0.5, host_lost=True,
                 host_kill_at=0.3, host_back_s=0.5, grace_s=60.0)


def test_ten_phones_lose_one_phone_and_one_host_and_nothing_is_lost_or_doubled(
        tmp_path: Path) -> None:
    data = simulate(tmp_path, SMALL)
    trials = 4  # 2 quants x 1 thread count x 2 repetitions per phone
    assert data["account"] == {"planned": 10 * trials, "stored": 10 * trials, "not_run": 0,
                               "lost": 0, "duplicated": 0, "unplanned": 0}
    faults, rows = data["faults"], data["first_session_rows"]
    (lost, at), = faults["lose_at"].items()
    # the lost phone: its trial in flight device_lost, the rest of the job not run until resumed
    assert rows[lost][:at] == ["ok"] * at
    assert rows[lost][at] == "device_lost"
    assert rows[lost][at + 1:] == [None] * (trials - at - 1)
    assert data["first"]["outcomes"] == {"ok": 10 * trials - (trials - at), "device_lost": 1}
    assert data["resume"]["outcomes"] == {"ok": trials - at - 1}
    # the unplugged phone's job ran again on its new worker; the killed host's phones' jobs
    # waited for the host to come back and ran there: every trial ok in the first session
    (unplugged, _), = faults["unplug_at"].items()
    host_phones = hosts_of(SMALL.phones, SMALL.hosts)[faults["host"]]
    for serial in [unplugged, *host_phones]:
        assert rows[serial] == ["ok"] * trials, serial
    assert [e.get("host") for e in data["host_fault"]] == [faults["host"]] * 2
    assert data["first"]["events"]["job"] > data["first"]["jobs"]  # jobs that ran twice
    assert data["first"]["duplicates_skipped"] == 0


def test_spans_are_per_phone_and_run() -> None:
    rows = [("r1", "a", 10.0), ("r1", "a", 12.5), ("r1", "b", 11.0), ("r1", "a", 11.0),
            ("r2", "a", 20.0), ("r1", "b", 14.0)]
    assert spans(rows) == [1.0, 1.5, 3.0]


def test_account_counts_missing_doubled_and_foreign_trials() -> None:
    assert account({"a", "b", "c"}, ["a", "a", "b", "x"]) == {
        "planned": 3, "stored": 3, "not_run": 0, "lost": 1, "duplicated": 1, "unplanned": 1}
    # a trial the driver reported not run (for --resume) is not lost
    assert account({"a", "b", "c"}, ["a", "b"], not_run=1)["lost"] == 0


def test_ideal_is_the_busiest_phone_with_its_push() -> None:
    durations = (1.0, 2.0, 3.0)
    plan = {"a": ["t1", "t2"], "b": ["t3"]}
    work = {s: sum(trial_seconds(t, durations, 2.0) for t in ids) for s, ids in plan.items()}
    critical, mean = ideal_makespan(plan, durations, 2.0, {"b": 10.0})
    assert critical == max(work["a"], work["b"] + 10.0)
    assert mean == (work["a"] + work["b"] + 10.0) / 2


def test_faults_spare_the_killed_host_and_hit_distinct_phones() -> None:
    scenario = Scenario(phones=200, hosts=10, slow_push=10, lose=4, unplug=4, host_lost=True)
    hosts = hosts_of(200, 10)
    plan = fault_plan(scenario, hosts, 18)
    hit = [*plan["lose_at"], *plan["unplug_at"]]
    assert len(set(hit)) == 8 and not set(hit) & set(hosts[plan["host"]])
    assert len(set(plan["slow_push"])) == 10


def test_session_rows_say_which_trials_a_session_stored() -> None:
    stored = pd.DataFrame({"trial_id": ["t1", "t3"], "outcome": ["ok", "device_lost"]})
    assert session_rows({"a": ["t1", "t2", "t3"]}, ["a"], stored) == {
        "a": ["ok", None, "device_lost"]}
