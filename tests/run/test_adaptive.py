"""Adaptive repetitions, the pure parts: which cells take part, the rounds added, the values that
count, the matrix key, and the sequential verdict replacing the fixed-n one in comparisons."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from analysis.factory import cell, trial, write

from harness import store
from harness.analysis.ab import compare_builds, load_sequential
from harness.errors import ConfigError
from harness.matrix import AdaptivePolicy, parse_matrix
from harness.run import adaptive
from harness.run.order import TrialSpec, interleave

POLICY = AdaptivePolicy(baseline="base", min_repetitions=5, max_repetitions=12)
BASE, CAND, OTHER = cell(build="base"), cell(build="cand"), cell(build="other")


def specs(cells: list, run: str = "r1") -> list[TrialSpec]:
    return interleave(adaptive.planned_cells(cells, POLICY), run, "SER1")


def test_compared_configurations_start_with_min_repetitions_others_keep_theirs() -> None:
    lone = cell(build="cand", n_ctx=1024, repetitions=2)  # no baseline of its configuration
    planned = adaptive.planned_cells([BASE, CAND, lone], POLICY)
    assert [c.repetitions for c in planned] == [5, 5, 2]
    assert adaptive.planned_cells([BASE, CAND], None) == [BASE, CAND]


def test_pairing_takes_the_runnable_cells_of_the_job_configuration() -> None:
    job = specs([BASE, CAND, OTHER])
    pair = adaptive.pairing(job, [BASE, CAND, OTHER], POLICY)
    assert pair is not None and pair.baseline == BASE and pair.candidates == (CAND, OTHER)
    only = adaptive.pairing(job, [BASE, CAND, OTHER], POLICY, {BASE.cell_id, OTHER.cell_id})
    assert only is not None and only.candidates == (OTHER,)
    assert adaptive.pairing(job, [BASE, CAND], POLICY, {CAND.cell_id}) is None  # no baseline
    assert adaptive.pairing(job, [BASE, CAND], None) is None


def test_rounds_alternate_their_order_and_skip_settled_candidates() -> None:
    pair = adaptive.Pairing(BASE, (CAND, OTHER))
    even = adaptive.next_round(pair, [CAND.cell_id, OTHER.cell_id], "r1", "SER1", 6)
    odd = adaptive.next_round(pair, [OTHER.cell_id], "r1", "SER1", 7)
    assert [s.cell.build for s in even] == ["base", "cand", "other"]
    assert [s.cell.build for s in odd] == ["other", "base"]
    assert {s.rep for s in even} == {6} and {s.rep for s in odd} == {7}


def test_added_rounds_never_reuse_a_stored_trial_id() -> None:
    job = specs([BASE, CAND])  # reps 0..4
    assert adaptive.first_free_rep(job, set()) == 5
    done = {f"r1/SER1/{CAND.cell_id}/9", f"r1/SER1/{BASE.cell_id}/8", "r2/SER1/x/40"}
    assert adaptive.first_free_rep(job[-2:], done) == 10


def test_only_trials_that_ran_and_passed_give_a_value() -> None:
    ok = trial(BASE, tg_tps=20.0)
    assert adaptive.value_of(ok, "tg_tps") == 20.0
    for bad in (replace(ok, outcome="oom_killed", tg_tps=None), replace(ok, valid=False),
                replace(ok, config_not_applied="1 thread seen"), replace(ok, tg_tps=0.0)):
        assert math.isnan(adaptive.value_of(bad, "tg_tps"))
    # throttled trials count: the rule trims them as the slow outliers they are
    assert adaptive.value_of(replace(ok, throttled=True), "tg_tps") == 20.0


def _loop(drop: float, cv: float, seed: int) -> tuple[str, int]:
    """The runner's loop on simulated values: rounds until the rule settles."""
    rng = np.random.default_rng(seed)
    pair = adaptive.Pairing(BASE, (CAND,))
    values: dict[str, list[float]] = {BASE.cell_id: [], CAND.cell_id: []}
    while True:
        if len(values[BASE.cell_id]) >= POLICY.min_repetitions:
            decision = adaptive.judge(pair, values, POLICY)[CAND.cell_id]
            if decision.settled:
                return decision.step, len(values[CAND.cell_id])
        values[BASE.cell_id].append(20 * rng.lognormal(0, cv))
        values[CAND.cell_id].append(20 * (1 - drop) * rng.lognormal(0, cv))


def test_clear_cases_stop_early_and_noise_reaches_the_cap_as_unstable() -> None:
    assert _loop(0.30, 0.02, 1) == ("regression", 5)
    assert _loop(0.0, 0.005, 2) == ("same", 5)
    step, reps = _loop(0.03, 0.08, 3)
    assert (step, reps) == ("unstable", 12)


def test_the_matrix_key_is_checked_and_has_documented_defaults() -> None:
    data = {"name": "t", "axes": {"build": ["a", "b"], "model": ["tiny"], "quant": ["Q8_0"],
                                  "n_ctx": [512]},
            "models": {"tiny": {"ladder": "tiny"}}, "workload": {"n_prompt": 8, "n_gen": 8}}
    assert parse_matrix(data, "m.yaml").adaptive is None
    policy = parse_matrix({**data, "adaptive": {"baseline": "a"}}, "m.yaml").adaptive
    assert policy == AdaptivePolicy("a", "tg_tps", 0.05, 0.01, 0.05, 5, 30)
    cases = [({"baseline": "c"}, "m.yaml: adaptive.baseline: \"c\" must be one of at least two "
                                 "builds in axes.build (builds: a, b)"),
             ({}, "m.yaml: adaptive: missing key 'baseline'"),
             ({"baseline": "a", "effect": 1.5}, "m.yaml: adaptive.effect: 1.5 is out of range"),
             ({"baseline": "a", "max_repetitions": 3}, "m.yaml: adaptive.max_repetitions: 3 is "
                                                       "out of range"),
             ({"baseline": "a", "metric": "peak"}, "m.yaml: adaptive.metric: unknown metric"),
             ({"baseline": "a", "pairs": 3}, "m.yaml: adaptive.pairs: unknown key")]
    for raw, message in cases:
        with pytest.raises(ConfigError) as error:
            parse_matrix({**data, "adaptive": raw}, "m.yaml")
        assert str(error.value).startswith(message), str(error.value)


def _decision(run_id: str, step: str) -> adaptive.AdaptiveRecord:
    from harness.analysis.sequential import Decision

    found = Decision(step, "stopped at n=6: log-likelihood ratio 5.10 crossed the upper bound "
                           "4.55 (ratio 0.9600)", 6, 6, 0.96, 5.1, -9.0)  # type: ignore[arg-type]
    record = adaptive.record(adaptive.Pairing(BASE, (CAND,)), CAND, found,
                             replace(POLICY, baseline="base"), run_id, "SER1", 6)
    return record


def test_a_settled_adaptive_run_gives_its_verdict_to_compare(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    start = datetime(2026, 3, 1, tzinfo=UTC)
    # 12 pairs of a 5% drop at 3% noise, judged by the rule as still open at its cap
    rows = [trial(c, run_id="r1", rep=i, started_at=start + timedelta(minutes=i),
                  tg_tps=20 * f * rng.lognormal(0, 0.03))
            for i in range(12) for c, f in ((BASE, 1.0), (CAND, 0.95))]
    write(tmp_path, rows, "r1")
    store.write_part(tmp_path, "adaptive", [_decision("r1", "unstable")], "r1")
    trials = store.read_table(tmp_path, "trials")
    plain = compare_builds(trials, "base", "cand", ("tg_tps",))
    ruled = compare_builds(trials, "base", "cand", ("tg_tps",),
                           sequential=load_sequential(tmp_path))
    (before,), (after,) = plain.cells, ruled.cells
    assert before.comparison.verdict == "regression"
    assert after.comparison.verdict == "unstable"
    assert after.comparison.reason.startswith("sequential rule (run r1, 6 repetitions per side)")
    assert after.comparison.causes == ("sequential", "cap_reached")
    # trials of another run in the comparison: the decision no longer covers them
    write(tmp_path, [trial(CAND, run_id="r2", rep=0, tg_tps=19.0)], "r2")
    mixed = compare_builds(store.read_table(tmp_path, "trials"), "base", "cand", ("tg_tps",),
                           sequential=load_sequential(tmp_path))
    assert "sequential" not in mixed.cells[0].comparison.causes
    assert load_sequential(tmp_path / "none") is None


def test_a_verdict_on_mostly_throttled_trials_is_not_accepted() -> None:
    pair = adaptive.Pairing(BASE, (CAND,))
    values = {BASE.cell_id: [20.0, 20.1, 19.9, 20.0, 20.2], CAND.cell_id: [15.0] * 5}
    hot = {BASE.cell_id: [False] * 5, CAND.cell_id: [True, True, True, False, False]}
    assert adaptive.judge(pair, values, POLICY)[CAND.cell_id].step == "regression"
    held = adaptive.judge(pair, values, POLICY, hot)[CAND.cell_id]
    assert held.step == "continue"
    assert held.reason.endswith("not accepted: more than half of cand's trials were throttled")
    at_cap = {k: v * 3 for k, v in values.items()}
    hot_cap = {k: v * 3 for k, v in hot.items()}
    assert adaptive.judge(pair, at_cap, POLICY, hot_cap)[CAND.cell_id].step == "unstable"
