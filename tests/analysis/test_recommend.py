"""recommend(): what is eligible, how picks rank, and which knob to turn when nothing fits."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.knobs import lower_quant
from harness.analysis.kv_loss import EngineBuild, KvCell, KvEvidence
from harness.analysis.quality import QualityScore
from harness.analysis.recommend import recommend
from harness.errors import ConfigError
from harness.memory import MemoryPrediction
from harness.plan import PlannedCell
from harness.store import read_table

from .factory import START, cell, trial, write

GIB = 1 << 30
MIB = 1 << 20


def _frame(tmp_path: Path, records: list) -> pd.DataFrame:
    write(tmp_path, records)
    return read_table(tmp_path, "trials")


def _reps(c, tg: float, peak: int, n: int = 3, **kw):  # type: ignore[no-untyped-def]
    return [trial(c, rep=i, tg_tps=tg, peak_pss_bytes=peak, **kw) for i in range(n)]


def test_ranks_eligible_configs_and_explains_each(tmp_path: Path) -> None:
    fast, slow = cell(quant="Q4_K_M"), cell(quant="Q8_0")
    oom, big, hot = cell(quant="Q2_K"), cell(n_ctx=8192), cell(threads=8)
    records = [
        *_reps(fast, 30.0, 2 * GIB), *_reps(slow, 20.0, 3 * GIB),
        *_reps(oom, 40.0, GIB), trial(oom, rep=9, outcome="oom_killed", tg_tps=None),
        *_reps(big, 50.0, 5 * GIB),
        *_reps(hot, 60.0, GIB, throttled=True), trial(hot, rep=9, tg_tps=60.0),
    ]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=GIB,
                    available_bytes=5 * GIB)
    assert [p.config_id for p in rec.picks] == [fast.config_id, slow.config_id]
    best = rec.picks[0]
    assert (best.rank, best.source, best.tg_tps, best.peak_bytes) == (1, "measured", 30.0,
                                                                      2 * GIB)
    assert best.headroom_bytes == 2 * GIB
    assert best.explanation.startswith("tg_tps 30.0 tok/s measured; peak 2,048 MiB")
    reasons = {r.config_id: r.reason_code for r in rec.rejected}
    assert reasons == {oom.config_id: "oom_killed", big.config_id: "over_budget",
                       hot.config_id: "throttled"}
    assert rec.suggestion is None


def test_the_same_device_model_name_selects_trials_like_a_serial(tmp_path: Path) -> None:
    frame = _frame(tmp_path, _reps(cell(), 30.0, GIB))
    by_model = recommend(frame, "Pixel Test", reserve_bytes=0, available_bytes=None)
    assert len(by_model.picks) == 1
    assert "available memory unknown" in by_model.notes[0]


def test_pareto_front_keeps_only_undominated_speed_memory_points(tmp_path: Path) -> None:
    a, b, c = cell(quant="Q4_K_M"), cell(quant="Q8_0"), cell(quant="Q6_K")
    records = [*_reps(a, 30.0, 2 * GIB), *_reps(b, 20.0, GIB), *_reps(c, 19.0, 3 * GIB)]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=0,
                    available_bytes=8 * GIB)
    # c is slower and bigger than both
    assert set(rec.pareto) == {(a.config_id, "b1", "llama-bench"),
                               (b.config_id, "b1", "llama-bench")}
    assert "Pareto" in rec.picks[0].explanation


def test_ttft_objective_ranks_lowest_first(tmp_path: Path) -> None:
    a, b = cell(quant="Q4_K_M"), cell(quant="Q8_0")
    records = [*_reps(a, 30.0, GIB, ttft_ms=90.0), *_reps(b, 20.0, GIB, ttft_ms=40.0)]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=0, available_bytes=None,
                    objective="ttft")
    assert [p.config_id for p in rec.picks] == [b.config_id, a.config_id]
    with pytest.raises(ConfigError, match="objective 'speed'"):
        recommend(_frame(tmp_path / "x", records), "SER1", reserve_bytes=0,
                  available_bytes=None, objective="speed")


def test_quality_bound_rejects_lossy_and_unmeasured_quants(tmp_path: Path) -> None:
    good, lossy, unknown = cell(quant="Q8_0"), cell(quant="Q2_K"), cell(quant="Q4_0")
    records = [*_reps(good, 10.0, GIB), *_reps(lossy, 30.0, GIB), *_reps(unknown, 25.0, GIB)]
    quality = {
        ("tiny", "Q8_0"): QualityScore("Q8_0", "x", 0.001, 0.01, 0.98, 64, "F16"),
        ("tiny", "Q2_K"): QualityScore("Q2_K", "y", 0.2, 0.9, 0.4, 64, "F16"),
    }
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=0, available_bytes=None,
                    max_quality_loss=0.05, quality=quality)
    assert [p.config_id for p in rec.picks] == [good.config_id]
    assert rec.picks[0].kl == 0.001 and rec.picks[0].top1 == 0.98
    codes = {r.config_id: r.reason_code for r in rec.rejected}
    assert codes == {lossy.config_id: "quality", unknown.config_id: "quality_unknown"}


def _planned(c, total: int, code: str = "fits") -> PlannedCell:  # type: ignore[no-untyped-def]
    prediction = MemoryPrediction(weights=total, kv=0, compute=0, overhead=0, n_ctx=c.n_ctx,
                                  n_ubatch=c.n_ubatch, flash_attn=True, weights_source="gguf")
    return PlannedCell(c, prediction, 0, code == "fits", code, "why", 1.0)


def test_unmeasured_planned_cells_follow_measured_ones_marked_predicted(tmp_path: Path) -> None:
    measured, small, huge = cell(quant="Q8_0"), cell(quant="Q4_0"), cell(quant="F16")
    frame = _frame(tmp_path, _reps(measured, 10.0, GIB))
    rec = recommend(frame, "SER1", reserve_bytes=GIB, available_bytes=4 * GIB,
                    predictions=[_planned(measured, GIB), _planned(small, GIB // 2),
                                 _planned(huge, 6 * GIB, "over_budget")])
    assert [(p.config_id, p.source) for p in rec.picks] == [
        (measured.config_id, "measured"), (small.config_id, "predicted")]
    assert rec.picks[1].tg_tps is None
    assert rec.picks[1].explanation.startswith("predicted to fit, not measured")
    assert [r.reason_code for r in rec.rejected] == ["predicted_over_budget"]


@pytest.mark.parametrize(("overrides", "stored", "knob", "text"), [
    # halving a 4 GiB cache saves 2 GiB of the 1 GiB needed
    ({"n_ctx": 4096}, {"predicted_kv_bytes": 4 * GIB}, "n_ctx",
     "lower n_ctx from 4096 to 2048 (the KV cache shrinks in proportion) (saves about 2,048 MiB)"),
    # no room in the context; q8_0 keeps 17/32 of a 2.5 GiB f16 cache: 1.17 GiB saved
    ({"n_ctx": 256, "type_k": "f16", "type_v": "f16"}, {"predicted_kv_bytes": 5 * GIB // 2},
     "kv", "KV cache as q8_0 instead of f16"),
    # Q8_0 to Q6_K of an 8 GiB file saves about 1.8 GiB
    ({"n_ctx": 256, "type_k": "q4_0", "type_v": "q4_0", "quant": "Q8_0"},
     {"model_file_bytes": 8 * GIB}, "quant", "quantise the weights to Q6_K instead of Q8_0"),
    ({"n_ctx": 256, "type_k": "q4_0", "type_v": "q4_0", "quant": "IQ1_S"}, {}, "model",
     "use a smaller model than tiny (1.0B parameters)"),
    # every knob has room, none closes the gap alone: say so, with what each saves
    ({"n_ctx": 4096}, {"predicted_kv_bytes": 512 << 20}, "model",
     "no knob closes the gap alone (n_ctx: 256 MiB; kv: 240 MiB; quant: 26 MiB); use a "
     "smaller model than tiny"),
    # no prediction stored: the first knob with room, saying its saving is not known
    ({"n_ctx": 4096}, {}, "n_ctx", "lower n_ctx from 4096 to 2048 (the KV cache shrinks in "
     "proportion) (what it saves is not known"),
])
def test_nothing_fits_names_the_first_knob_that_closes_the_gap(
        tmp_path: Path, overrides: dict, stored: dict, knob: str, text: str) -> None:
    c = cell(**overrides)
    rec = recommend(_frame(tmp_path, _reps(c, 10.0, 3 * GIB, **stored)), "SER1",
                    reserve_bytes=GIB, available_bytes=3 * GIB)
    assert rec.picks == ()
    assert rec.suggestion is not None
    assert rec.suggestion.knob == knob
    assert "needs 1,024 MiB less" in rec.suggestion.text
    assert text in rec.suggestion.text, rec.suggestion.text


def test_a_reserve_above_the_free_memory_is_named_not_a_knob(tmp_path: Path) -> None:
    """The demo's small-RAM phone: 128 MB free against the default 512 MiB reserve. No knob can
    make room; a KV type for a 1 MiB cache must not be offered."""
    c = cell(n_ctx=512, type_k="f16", type_v="f16")
    rec = recommend(_frame(tmp_path, _reps(c, 10.0, 60 << 20, predicted_kv_bytes=1 << 20)),
                    "SER1", reserve_bytes=512 << 20, available_bytes=128 << 20)
    assert rec.picks == () and rec.suggestion is not None
    assert rec.suggestion.knob == "reserve"
    assert "the reserve (512 MiB) is at least the phone's free memory (128 MiB)" in (
        rec.suggestion.text)
    assert "lower --reserve" in rec.suggestion.text and "q8_0" not in rec.suggestion.text


def test_a_faster_config_over_budget_yields_to_a_slower_one_that_fits(tmp_path: Path) -> None:
    long, short = cell(n_ctx=8192), cell(n_ctx=1024)
    records = [*_reps(long, 12.0, 4 * GIB), *_reps(short, 11.0, GIB)]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=GIB,
                    available_bytes=int(2.5 * GIB))
    assert [p.config_id for p in rec.picks] == [short.config_id]
    assert [r.reason for r in rec.rejected] == [
        "worst measured peak 4,096 MiB > budget 1,536 MiB (2,560 MiB available - 1,024 MiB "
        "reserve)"]


def test_recommend_plan_and_run_share_one_reserve_and_one_fit_test(tmp_path: Path) -> None:
    """A peak just over the budget is over it for plan (predicted) and recommend (measured)
    alike, at the one default reserve every command uses."""
    from click.testing import CliRunner

    from harness.budget import DEFAULT_RESERVE_BYTES, fit
    from harness.cli.analysis import recommend_command
    from harness.cli.run import run_command
    from harness.run.session import RunOptions

    assert RunOptions(tmp_path).reserve_bytes == DEFAULT_RESERVE_BYTES
    for command in (recommend_command, run_command):
        [reserve] = [o for o in command.params if o.name == "reserve"]
        assert reserve.default == f"{DEFAULT_RESERVE_BYTES >> 20}MiB"
    available = 3 * GIB
    budget = available - DEFAULT_RESERVE_BYTES
    over, just = cell(n_ctx=4096), cell(n_ctx=2048)
    records = [*_reps(over, 12.0, budget + 1), *_reps(just, 11.0, budget)]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=DEFAULT_RESERVE_BYTES,
                    available_bytes=available)
    assert [p.config_id for p in rec.picks] == [just.config_id]
    assert [r.reason for r in rec.rejected] == [
        fit(budget + 1, available, DEFAULT_RESERVE_BYTES, "worst measured peak").reason]
    assert not fit(budget + 1, available, DEFAULT_RESERVE_BYTES).fits
    assert fit(budget, available, DEFAULT_RESERVE_BYTES).fits
    assert CliRunner().invoke(recommend_command, ["--help"]).exit_code == 0


def test_knob_suggestion_uses_measured_evidence(tmp_path: Path) -> None:
    from harness.analysis.knobs import suggest

    row = {"config_id": "c", "label": "tiny Q8_0 ctx8192", "model_name": "tiny", "quant": "Q8_0",
           "type_k": "f16", "type_v": "f16", "n_ctx": 8192, "n_prompt": 32, "n_gen": 16,
           "over_bytes": 100 * MIB}
    fitting = [{**row, "n_ctx": 2048, "peak_bytes": GIB}]
    found = suggest([row], fitting)
    assert found is not None
    assert found.text == ("tiny Q8_0 ctx8192 needs 100 MiB less: lower n_ctx from 8192 to 2048 "
                          "(measured on this device: peak 1,024 MiB, which fits)")


def test_quant_ladder_steps_down_one_rung() -> None:
    assert lower_quant("Q4_K_M") == "Q4_K_S"
    assert lower_quant("q8_0") == "Q6_K"
    assert lower_quant("weird") is None


def test_one_cell_at_two_builds_recommends_the_fast_build_and_names_it(tmp_path: Path) -> None:
    """The same configuration measured with the release build and, later, with a build 4.7x
    slower: the pick is the release build's measurement, and it says so (the old rule took each
    config's latest build and recommended the cell at the slow build's speed, unnamed)."""
    release, slow = cell(build="release"), cell(build="slow")
    later = START + timedelta(hours=2)
    records = [*_reps(release, 47.0, GIB),
               *[trial(slow, rep=i, tg_tps=10.0, peak_pss_bytes=GIB, started_at=later)
                 for i in range(3)]]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=GIB,
                    available_bytes=4 * GIB)
    assert [(p.config_id, p.build_id, p.engine, p.tg_tps) for p in rec.picks] == [
        (release.config_id, "release", "llama-bench", 47.0),
        (slow.config_id, "slow", "llama-bench", 10.0)]
    doc = rec.to_json()
    assert [(p["build_id"], p["engine"]) for p in doc["picks"]] == [
        ("release", "llama-bench"), ("slow", "llama-bench")]
    assert doc["pareto"] == [{"config_id": release.config_id, "build_id": "release",
                              "engine": "llama-bench"}]
    only_slow = recommend(_frame(tmp_path / "again", records), "SER1", reserve_bytes=GIB,
                          available_bytes=4 * GIB, builds=["slow"])
    assert [(p.build_id, p.tg_tps) for p in only_slow.picks] == [("slow", 10.0)]


def test_engines_are_candidates_of_their_own_and_can_be_chosen(tmp_path: Path) -> None:
    bench = cell(build="release")
    python = cell(build="device-python", engine="llama-cpp-python")
    assert bench.config_id == python.config_id
    records = [*_reps(bench, 30.0, GIB),
               *_reps(python, 25.0, GIB, engine="llama-cpp-python"),
               trial(python, rep=9, outcome="oom_killed", tg_tps=None, serial="SER1",
                     engine="llama-cpp-python", run_id="run2")]
    frame = _frame(tmp_path, records)
    rec = recommend(frame, "SER1", reserve_bytes=0, available_bytes=None)
    assert [(p.build_id, p.engine) for p in rec.picks] == [("release", "llama-bench")]
    assert [(r.build_id, r.engine, r.reason_code) for r in rec.rejected] == [
        ("device-python", "llama-cpp-python", "oom_killed")]
    only = recommend(frame, "SER1", reserve_bytes=0, available_bytes=None,
                     engines=["llama-cpp-python"])
    assert only.picks == () and len(only.rejected) == 1
    none = recommend(frame, "SER1", reserve_bytes=0, available_bytes=None, engines=["mlc"])
    assert none.notes[0] == "no trials for device 'SER1' and engine mlc"


def test_trials_whose_config_did_not_apply_never_make_a_pick(tmp_path: Path) -> None:
    c = cell(affinity="0x2")
    records = [trial(c, rep=i, tg_tps=30.0, config_not_applied="threads ran on CPUs 0-1")
               for i in range(3)]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=0, available_bytes=None)
    assert rec.picks == ()
    assert [r.reason_code for r in rec.rejected] == ["not_applied"]


# --- objectives sustained_tg and energy -------------------------------------------------------

def _sustained(c, rates: list[float], **kw):  # type: ignore[no-untyped-def]
    """Sustained trials of cell ``c`` (it must have sustained_s): all throttled, as they are
    meant to heat the phone."""
    return [trial(c, rep=i, tg_tps=r * 1.2, sustained_s=c.sustained_s, sustained_reps=20,
                  sustained_tg_tps=r, steady_state_ratio=0.8, time_to_throttle_s=40.0 + i,
                  throttled=True, max_thermal_status=3, peak_pss_bytes=GIB, **kw)
            for i, r in enumerate(rates)]


def _energy(c, joules: list[float | None], reason: str | None = None, **kw):  # type: ignore[no-untyped-def]
    """Burst trials with an energy reading each: valid where a figure is given, else invalid
    with ``reason``."""
    return [trial(c, rep=i, tg_tps=20.0, peak_pss_bytes=GIB, energy_source="power_supply",
                  energy_units="current_now uA", energy_valid=j is not None,
                  energy_invalid_reason=None if j is not None else reason,
                  tg_j_per_token=j, pp_j_per_token=None if j is None else j / 10,
                  idle_power_w=0.8, **kw)
            for i, j in enumerate(joules)]


def test_sustained_objective_ranks_sustained_workloads_and_lists_the_rest(tmp_path: Path) -> None:
    steady, fading = cell(quant="Q4_0", sustained_s=120.0), cell(quant="Q8_0", sustained_s=120.0)
    burst = cell(quant="Q4_K_M")
    records = [*_sustained(steady, [11.0, 12.0, 13.0]), *_sustained(fading, [15.0, 16.0, 30.0]),
               *_reps(burst, 40.0, GIB)]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=0, available_bytes=None,
                    objective="sustained_tg")
    # throttled sustained trials are not rejected; ranked by the median of their rates
    assert [(p.config_id, p.sustained_tg_tps) for p in rec.picks] == [
        (fading.config_id, 16.0), (steady.config_id, 12.0)]
    best = rec.picks[0]
    assert (best.sustained_s, best.steady_state_ratio, best.time_to_throttle_s) == (120.0, 0.8,
                                                                                     41.0)
    assert best.label.endswith("sustained120s")
    assert best.explanation.startswith(
        "sustained tg 16.0 tok/s measured (steady state 80% of the initial rate, throttled "
        "after 41 s in 3 of 3 trials, 120 s runs)")
    assert rec.rejected == ()
    assert [(u.config_id, u.reason_code) for u in rec.unranked] == [(burst.config_id,
                                                                     "burst_only")]
    assert "no sustained trial" in rec.unranked[0].reason
    assert rec.notes[-1] == ("2 ranked by sustained_tg; not ranked for it: 1 without sustained "
                             "trials")
    doc = rec.to_json()
    assert doc["schema_version"] == 9 and doc["objective"] == "sustained_tg"
    assert [p["sustained_tg_tps"] for p in doc["picks"]] == [16.0, 12.0]
    assert doc["unranked"][0]["reason_code"] == "burst_only"


def test_speed_objectives_leave_sustained_workloads_to_their_own(tmp_path: Path) -> None:
    hot, burst = cell(sustained_s=60.0), cell(quant="Q8_0")
    frame = _frame(tmp_path, [*_sustained(hot, [10.0, 10.0]), *_reps(burst, 20.0, GIB)])
    rec = recommend(frame, "SER1", reserve_bytes=0, available_bytes=None)
    assert [p.config_id for p in rec.picks] == [burst.config_id]
    assert [(u.config_id, u.reason_code) for u in rec.unranked] == [(hot.config_id,
                                                                     "sustained_only")]
    assert "--objective sustained_tg" in rec.unranked[0].reason
    only = recommend(frame, "SER1", reserve_bytes=0, available_bytes=None,
                     objective="sustained_tg", builds=["b1"])
    assert [p.config_id for p in only.picks] == [hot.config_id]
    assert only.suggestion is None


def test_no_sustained_trial_ranks_nothing_and_says_so(tmp_path: Path) -> None:
    rec = recommend(_frame(tmp_path, _reps(cell(), 20.0, GIB)), "SER1", reserve_bytes=0,
                    available_bytes=None, objective="sustained_tg")
    assert rec.picks == () and rec.suggestion is None and len(rec.unranked) == 1
    assert "nothing ranked by sustained_tg" in rec.notes[-1]


def test_energy_objective_ranks_lowest_valid_joules_and_lists_invalid_reasons(
        tmp_path: Path) -> None:
    frugal, hungry, charging, unmeasured = (cell(quant=q) for q in ("Q4_0", "Q8_0", "Q6_K",
                                                                    "Q2_K"))
    coarse = "decode window 0.4 s holds 2 power readings (need 5)"
    usb = "charging: USB power contaminates the reading"
    records = [
        *_energy(frugal, [0.5, 0.6, None, 0.7], coarse),  # the invalid one does not count
        *_energy(hungry, [0.9, 1.0, 1.1]),
        *_energy(charging, [None, None], usb),
        *_reps(unmeasured, 50.0, GIB),
    ]
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=0, available_bytes=None,
                    objective="energy")
    assert [(p.config_id, p.tg_j_per_token) for p in rec.picks] == [
        (frugal.config_id, 0.6), (hungry.config_id, 1.0)]
    assert rec.picks[0].pp_j_per_token == pytest.approx(0.06)
    assert rec.picks[0].explanation.startswith(
        "energy 0.6 J per generated token measured (idle subtracted, median of 3 trials with "
        "valid energy, power_supply)")
    why = {u.config_id: (u.reason_code, u.reason) for u in rec.unranked}
    assert why == {
        charging.config_id: ("energy_invalid", f"energy invalid: {usb} (2 of 2 trials)"),
        unmeasured.config_id: ("energy_not_measured", "energy not measured")}
    doc = rec.to_json()
    assert [u["reason"] for u in doc["unranked"]] == [u.reason for u in rec.unranked]
    assert all(p["tg_j_per_token"] is not None for p in doc["picks"])


def test_energy_figures_equal_the_energy_table(tmp_path: Path) -> None:
    from harness.analysis.energy_table import energy_table

    c = cell()
    frame = _frame(tmp_path, _energy(c, [0.4, None, 0.5, 0.9], "too coarse"))
    rec = recommend(frame, "SER1", reserve_bytes=0, available_bytes=None, objective="energy")
    (row,) = energy_table(frame)
    assert (row.device, row.config_id, row.valid, row.measured) == ("SER1", c.config_id, 3, 4)
    assert rec.picks[0].tg_j_per_token == row.tg_j_per_token == 0.5
    assert row.reason == "too coarse (1 of 4 trials)"


def _cli(*args: str):  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from harness.cli import HarnessGroup
    from harness.cli.analysis import recommend_command

    group = HarnessGroup("harness")
    group.add_command(recommend_command)
    return CliRunner().invoke(group, ["recommend", *args])


def test_recommend_command_takes_the_new_objectives(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    hot, frugal = cell(sustained_s=90.0), cell(quant="Q8_0")
    write(tmp_path / "r", [*_sustained(hot, [9.0, 10.0, 11.0]),
                           *_energy(frugal, [None, None], "charging: <b>USB</b>")])
    base = ["--results", str(tmp_path / "r"), "--device", "SER1", "--memory", "8GiB"]
    text = _cli(*base, "--objective", "sustained_tg")
    assert text.exit_code == 0, text.output
    assert "sustained t/s" in text.output and "10.0" in text.output
    assert "not ranked by sustained_tg" in text.output
    assert "1 configs fit, 0 rejected, 1 not ranked by sustained_tg" in text.output
    energy = _cli(*base, "--objective", "energy", "--json")
    assert energy.exit_code == 0, energy.output
    doc = json.loads(energy.output)
    assert doc["picks"] == [] and doc["suggestion"] is None
    reasons = {u["reason_code"]: u["reason"] for u in doc["unranked"]}
    assert reasons == {"energy_invalid": "energy invalid: charging: <b>USB</b> (2 of 2 trials)",
                       "energy_not_measured": "energy not measured"}
    shown = _cli(*base, "--objective", "energy")
    assert "charging: <b>USB</b>" in shown.output  # printed as text, not taken as rich markup
    assert "--objective sustained_tg" in _cli("--help").output
    bad = _cli(*base, "--objective", "joules")
    assert bad.exit_code == 2


def _paging(c, tg: float, n: int = 3):  # type: ignore[no-untyped-def]
    """Trials whose mmap'd weights paged: resident at the phone's limit, little of it anon."""
    return [trial(c, rep=i, tg_tps=tg, peak_pss_bytes=4 * GIB, peak_pss_anon_bytes=GIB // 2,
                  paging=True, read_bytes_per_token=200 * MIB, storage_read_mb_s=1500.0,
                  major_faults=900, predicted_paging_tg_tps=7.5) for i in range(n)]


def test_configs_that_page_rank_after_those_that_fit_unless_allowed(tmp_path: Path) -> None:
    fits, pages = cell(quant="Q4_K_M"), cell(quant="F16")
    frame = _frame(tmp_path, [*_reps(fits, 6.0, 2 * GIB), *_paging(pages, 7.0)])
    # the paging config's mapped pages are not what has to fit: its anonymous peak is
    rec = recommend(frame, "SER1", reserve_bytes=GIB, available_bytes=3 * GIB)
    assert [p.config_id for p in rec.picks] == [fits.config_id, pages.config_id]
    paged = rec.picks[1]
    assert paged.paging and not rec.picks[0].paging
    assert paged.peak_bytes == GIB // 2 and paged.read_bytes_per_token == 200 * MIB
    # the plan's figure, never one derived from the measured reads (as storage speed / bytes
    # per token was until 2026-12-05, so "N% of it measured" was read rate / storage speed)
    assert paged.storage_bound_tg_tps == 7.5
    assert paged.read_mb_s == pytest.approx(200 * MIB * 7.0 / 1e6)
    assert ("runs by paging its weights: 200 MiB read from storage per token, read at 1468 "
            "MB/s while decoding of the storage's 1500 MB/s; the plan predicted 7.50 tok/s "
            "before the trials, 7.00 measured") in paged.explanation, paged.explanation
    assert any("ranked after those that fit" in n for n in rec.notes)
    allowed = recommend(frame, "SER1", reserve_bytes=GIB, available_bytes=3 * GIB,
                        allow_paging=True)
    assert [p.config_id for p in allowed.picks] == [pages.config_id, fits.config_id]
    assert allowed.to_json()["picks"][0]["paging"] is True


def test_planned_cells_that_page_follow_the_planned_ones_that_fit(tmp_path: Path) -> None:
    from harness.paging_predict import PagingPrediction

    measured = cell(quant="Q8_0")
    frame = _frame(tmp_path, _reps(measured, 10.0, GIB))
    small, big = cell(quant="Q4_K_M"), cell(quant="F16")
    prediction = MemoryPrediction(weights=GIB, kv=0, compute=0, overhead=0, n_ctx=512,
                                  n_ubatch=512, flash_attn=True, weights_source="gguf")
    paging = PagingPrediction(resident=256 * MIB, cache=GIB, dense_bytes=3 * GIB,
                              expert_bytes=0, active_expert_bytes=0,
                              read_per_token=3 * GIB, storage_mb_s=1500.0, tg_tps=0.47)
    planned = [
        PlannedCell(big, dataclasses.replace(prediction, weights=4 * GIB), 3 * GIB, True,
                    "runs_by_paging", "runs by paging", 9.0, paging),
        PlannedCell(small, prediction, 3 * GIB, True, "fits", "fits", 3.0),
    ]
    rec = recommend(frame, "SER1", reserve_bytes=0, available_bytes=3 * GIB,
                    predictions=planned)
    assert [p.config_id for p in rec.picks] == [measured.config_id, small.config_id,
                                                big.config_id]
    last = rec.picks[-1]
    assert last.source == "predicted" and last.paging and last.storage_bound_tg_tps == 0.47
    assert last.peak_bytes == 256 * MIB  # what must stay resident
    assert last.explanation.startswith("predicted to run by paging its weights: 3,072 MiB")


def _kv_cell(kv: str, depth: int, kl: float, sha: str = "ab" * 32) -> KvCell:
    build = EngineBuild("0.3.36", "0c1e570", "CPU", kv_rotation=True)
    return KvCell(quant="Q8_0", sha256=sha, kv=kv, type_k=kv, type_v=kv, depth=depth, window=256,
                  kl=kl, kl_max=kl * 4, top1=0.9, ppl=12.0, gen_tokens=256, repeated_4gram=0.1,
                  longest_loop=3, text="pydoc-topics@1", build=build,
                  measured_at="2026-12-04T10:00:00+00:00")


def test_the_quality_bound_counts_the_kv_type_at_the_nearest_depth_below_n_ctx(
        tmp_path: Path) -> None:
    f16 = cell(quant="Q8_0", n_ctx=8192)
    q4_short = cell(quant="Q8_0", n_ctx=2048, type_k="q4_0", type_v="q4_0")
    q4_long = cell(quant="Q8_0", n_ctx=8192, type_k="q4_0", type_v="q4_0")
    q8_long = cell(quant="Q8_0", n_ctx=8192, type_k="q8_0", type_v="q8_0")
    unmeasured = cell(quant="Q8_0", n_ctx=8192, type_k="q5_0", type_v="q5_0")
    records = [*_reps(f16, 10.0, GIB), *_reps(q4_short, 14.0, GIB), *_reps(q4_long, 13.0, GIB),
               *_reps(q8_long, 12.0, GIB), *_reps(unmeasured, 11.0, GIB)]
    weights = {("tiny", "Q8_0"): QualityScore("Q8_0", "ab" * 32, 0.004, 0.05, 0.97, 64, "F16")}
    evidence = KvEvidence((_kv_cell("q4_0", 2048, 0.010), _kv_cell("q4_0", 6144, 0.030),
                           _kv_cell("q8_0", 6144, 0.002)))
    rec = recommend(_frame(tmp_path, records), "SER1", reserve_bytes=0, available_bytes=None,
                    max_quality_loss=0.02, quality=weights, kv_quality=evidence)
    # q4_0 at 2048: 0.004 + 0.010 fits; at 8192 its 6144 figure: 0.004 + 0.030 does not
    assert [p.config_id for p in rec.picks] == [q4_short.config_id, q8_long.config_id,
                                                f16.config_id]
    by_id = {p.config_id: p for p in rec.picks}
    assert (by_id[q4_short.config_id].kv_kl, by_id[q4_short.config_id].kv_depth) == (0.010, 2048)
    assert (by_id[f16.config_id].kv_kl, by_id[f16.config_id].kv_depth) == (0.0, None)
    assert "KV q4_0 0.01 at depth 2048" in by_id[q4_short.config_id].explanation
    rejected = {r.config_id: r for r in rec.rejected}
    assert rejected[q4_long.config_id].reason_code == "quality"
    assert "depth 6144" in rejected[q4_long.config_id].reason
    assert "0.034" in rejected[q4_long.config_id].reason
    assert rejected[unmeasured.config_id].reason_code == "quality_unknown"
    assert "--kv q5_0" in rejected[unmeasured.config_id].reason
    # a looser bound admits the deep q4_0 config, a tighter one only the exact reference
    loose = recommend(_frame(tmp_path / "b", records), "SER1", reserve_bytes=0,
                      available_bytes=None, max_quality_loss=0.05, quality=weights,
                      kv_quality=evidence)
    assert q4_long.config_id in {p.config_id for p in loose.picks}
    tight = recommend(_frame(tmp_path / "c", records), "SER1", reserve_bytes=0,
                      available_bytes=None, max_quality_loss=0.005, quality=weights,
                      kv_quality=evidence)
    assert [p.config_id for p in tight.picks] == [f16.config_id]  # 0.004 + 0.002 > 0.005


def test_each_pick_says_its_output_check_and_require_output_check_drops_the_rest(
        tmp_path: Path) -> None:
    checked, unchecked, errored = cell(quant="Q4_K_M"), cell(quant="Q8_0"), cell(quant="Q6_K")
    records = [
        *_reps(checked, 30.0, GIB, output_check="match"),
        *_reps(unchecked, 40.0, GIB, output_check="not_checked",
               output_check_detail="output_check is off in the matrix"),
        *_reps(errored, 35.0, GIB, output_check="error",
               output_check_detail="harness-generate exited 1: error: cannot load m.gguf"),
    ]
    frame = _frame(tmp_path, records)
    rec = recommend(frame, "SER1", reserve_bytes=GIB, available_bytes=8 * GIB)
    states = {p.config_id: p.output_check for p in rec.picks}
    assert states == {checked.config_id: "checked", unchecked.config_id: "unchecked",
                      errored.config_id: "error"}
    why = {p.config_id: p.explanation for p in rec.picks}
    assert why[checked.config_id].endswith("; output checked against the reference")
    assert why[unchecked.config_id].endswith(
        "; output not checked: output_check is off in the matrix")
    assert why[errored.config_id].endswith(
        "; output check failed, no verdict: harness-generate exited 1: error: cannot load m.gguf")

    strict = recommend(frame, "SER1", reserve_bytes=GIB, available_bytes=8 * GIB,
                       require_output_check=True)
    assert [p.config_id for p in strict.picks] == [checked.config_id]
    dropped = {r.config_id: r for r in strict.rejected}
    assert set(dropped) == {unchecked.config_id, errored.config_id}
    assert {r.reason_code for r in dropped.values()} == {"output_unchecked"}
    assert dropped[errored.config_id].reason == (
        "its output was not checked (the check failed: harness-generate exited 1: error: "
        "cannot load m.gguf) and --require-output-check is on")
    # a store from before the check: every config unchecked, and said so
    legacy = _frame(tmp_path / "old", _reps(cell(quant="Q5_K_M"), 20.0, GIB))
    (pick,) = recommend(legacy, "SER1", reserve_bytes=GIB, available_bytes=8 * GIB).picks
    assert pick.output_check == "unchecked"
    assert pick.explanation.endswith("; output not checked: no output check stored for its "
                                     "trials")
