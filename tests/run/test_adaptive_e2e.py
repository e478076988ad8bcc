"""Adaptive repetitions on a virtual phone with real builds: the slow build is settled as a
regression at the first look, an A/A pair is never called a change, and each stop is stored
with its reason and used by ``harness compare``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build, copy_build
from harness.cli import main
from harness.device import get_device
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

CAP = 14
MATRIX = f"""
name: adaptive
axes:
  build: [host-release, host-slow, host-release-again]
  model: [bench]
  quant: [Q8_0]
  n_ctx: [512]
  kv: [f16]
  threads: [1]
models:
  bench: {{ladder: bench}}
workload: {{n_prompt: 16, n_gen: 64}}
repetitions: 2
adaptive: {{baseline: host-release, min_repetitions: 5, max_repetitions: {CAP}}}
cooldown: {{max_thermal_status: 6, max_temperature_c: 99, min_battery_pct: 0, max_wait_s: 1}}
timeout: {{trial_s: 120}}
"""


def test_pairs_are_added_until_each_candidate_is_settled(
        virtual_phones, tmp_path: Path, host_build: Build, slow_build: Build,
        bench_ladder: dict[str, Path]) -> None:
    (phone,) = virtual_phones(1)
    root = host_build.path.parent
    copy_build(host_build, root, "host-release-again")
    matrix = tmp_path / "adaptive.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    events: list[dict] = []
    summary = execute(matrix, [get_device(phone.serial)], RunOptions(results=results,
                                                                     builds=root),
                      on_event=lambda kind, serial, d: events.append(d) if kind == "adaptive"
                      else None)

    decisions = {r["candidate_build"]: r for r in
                 store.read_table(results, "adaptive").to_dict("records")}
    assert set(decisions) == {"host-slow", "host-release-again"}
    slow, same = decisions["host-slow"], decisions["host-release-again"]
    # a fraction of the speed: settled before the cap (at the first look, n = 5, when the host
    # is quiet; a loaded host widens the spread and it takes a few more pairs)
    assert slow["step"] == "regression", slow
    assert 5 <= slow["repetitions"] < CAP and slow["ratio"] < 0.8
    assert "crossed the upper bound" in slow["reason"]
    # the same binary twice: never a change; either "same" or, on a noisy host, the cap
    assert same["step"] in ("same", "unstable"), same
    assert same["step"] == "same" or same["repetitions"] == CAP
    assert 0.8 < same["ratio"] < 1.25

    trials = store.read_table(results, "trials")
    per_build = trials.groupby("build_id").size().to_dict()
    # min_repetitions replaced the matrix's 2; the baseline ran as long as any pair was open
    assert per_build["host-slow"] == slow["repetitions"]
    assert per_build["host-release-again"] == same["repetitions"]
    assert per_build["host-release"] == max(slow["repetitions"], same["repetitions"])
    assert dict(summary.outcomes()) == {"ok": sum(per_build.values())}
    assert len(trials["trial_id"].unique()) == len(trials)
    assert {e["candidate"] for e in events} == {"host-slow", "host-release-again"}
    (device,) = summary.to_json()["devices"]
    assert {a["candidate"]: a["step"] for a in device["adaptive"]} == {
        "host-slow": "regression", "host-release-again": same["step"]}

    # compare uses the sequential verdict for the trials of that run, and says so
    out = CliRunner().invoke(main, ["compare", "--baseline", "host-release", "--candidate",
                                    "host-slow", "--results", str(results), "--metric",
                                    "tg_tps", "--json"])
    (cell,) = json.loads(out.stdout)["cells"]
    assert cell["verdict"] == "regression"
    assert cell["reason"].startswith("sequential rule (run "), cell["reason"]
    assert "sequential" in cell["causes"]
