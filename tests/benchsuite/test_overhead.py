"""bench/overhead.py's pure parts: each shell of the trial path named, trials split, laps summed."""

from __future__ import annotations

from bench.overhead import breakdown, gaps, per_trial, phone_engine_seconds, shell_kind
from harness.run.bandwidth import probe_command
from harness.run.preflight import conditions_command
from harness.run.probe import state_command
from harness.run.trial import _after_command
from harness.run.watch import launch_command

WORKDIR = "/data/local/tmp/harness/trials/0123"


def test_each_command_of_the_trial_path_is_named_by_its_text() -> None:
    assert shell_kind(launch_command(WORKDIR, ["/b/llama-bench", "-m", "m"], None)) == "launch"
    assert shell_kind(_after_command(WORKDIR)) == "evidence"
    assert shell_kind(conditions_command(0)) == "conditions"
    assert shell_kind(state_command(0)) == "state"
    assert shell_kind(probe_command(1024)) == "bandwidth"
    assert shell_kind("echo ok") == "other"


def test_the_engines_time_is_its_t0_t1_stamps_and_none_without_both() -> None:
    assert phone_engine_seconds("@@harness:t0\n10.25\n@@harness:t1\n11.00\n") == 0.75
    assert phone_engine_seconds("@@harness:t0\n10.25\n@@harness:t1\n") is None


def test_shells_go_to_the_trial_whose_span_they_started_in() -> None:
    events = [(0.0, "trial", "s", {}), (1.0, "done", "s", {"outcome": "ok", "timings": {}}),
              (1.1, "trial", "s", {}), (2.0, "done", "s", {"outcome": "ok"})]
    calls = [(0.1, 0.5, "launch", None), (0.7, 0.2, "evidence", 0.45),
             (1.2, 0.4, "launch", None), (1.7, 0.1, "evidence", 0.35), (1.9, 0.05, "other", None)]
    first, second = per_trial(events, calls)
    assert (first["round_trips"], second["round_trips"]) == (2, 3)
    assert first["engine_s"] == 0.45 and second["shells"] == {
        "launch": 0.4, "evidence": 0.1, "other": 0.05}
    assert gaps([first, second]) == [1.2 - 0.6]


def test_the_breakdown_takes_the_engines_own_time_out_of_the_launch() -> None:
    rows = [{"timings": {"preflight": 0.1, "launch": 0.9, "engine": 0.8, "evidence": 0.2}},
            {"timings": {"preflight": 0.3, "launch": 1.0, "engine": 0.9, "evidence": 0.1}}]
    found = breakdown(rows)
    assert list(found) == ["preflight", "launch", "evidence"]  # the trial's order
    assert found == {"preflight": 0.2, "launch": 0.1, "evidence": 0.15}
