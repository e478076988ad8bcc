"""The noise floor: robust CV per cell, minimum detectable change, noise grew, gate notes, CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from harness.analysis.ab import canonical_gates, compare_builds
from harness.analysis.noise import (
    DEFAULT_ALPHA,
    NoiseGrowth,
    min_detectable_change,
    noise_floors,
    noise_grew,
    robust_cv,
)
from harness.records import TrialRecord

from .factory import START, cell, noisy, run_analysis, trial, write

DAY = timedelta(days=1)


def frame(records: Sequence[TrialRecord]) -> pd.DataFrame:
    return pd.DataFrame([dataclasses.asdict(r) for r in records])


def exact(centre: float, cv: float, n: int) -> list[float]:
    """Lognormal values at evenly spaced normal quantiles: a sample whose spread is ``cv``."""
    z = NormalDist().inv_cdf
    return [centre * math.exp(cv * z((i + 0.5) / n)) for i in range(n)]


def night(values: Sequence[float], days: int, run_id: str | None = None, build: str = "b1",
          serial: str = "SER1") -> list[TrialRecord]:
    c = cell(build=build)
    run = run_id or f"r{days}"
    return [trial(c, run_id=run, serial=serial, rep=i, tg_tps=v, started_at=START + days * DAY)
            for i, v in enumerate(values)]


# --- robust CV ------------------------------------------------------------------------------

def test_the_cv_of_a_synthetic_series_matches_the_one_generated() -> None:
    rng = np.random.default_rng(7)
    records = [r for d in range(10) for r in night(noisy(rng, 20.0, 40, cv=0.03), d)]
    floors = noise_floors(frame(records), ["tg_tps"])
    assert len(floors) == 1
    f = floors[0]
    # a MAD is 37% efficient: 7 nights of 40 put the estimate within about ±20% (99.9%)
    assert f.cv == pytest.approx(0.03, rel=0.2)
    assert (f.nights, f.samples, f.trials, f.reps) == (7, 7, 280, 40)  # the last 7 nights
    assert (f.first_night, f.last_night) == ("2026-03-04", "2026-03-10")


def test_the_cv_per_night_ignores_a_level_shift_and_an_outlier() -> None:
    rng = np.random.default_rng(8)
    records = [r for d in range(6)
               for r in night(noisy(rng, 20.0 * (0.8 if d >= 3 else 1.0), 40, cv=0.02), d)]
    records[0] = dataclasses.replace(records[0], tg_tps=2.0)  # one repetition went wrong
    floor = noise_floors(frame(records), ["tg_tps"])[0]
    assert floor.cv == pytest.approx(0.02, rel=0.2)
    assert math.isnan(robust_cv([1.0])) and robust_cv([5.0, 5.0, 5.0]) == 0.0


def test_throttled_trials_and_short_nights_do_not_count() -> None:
    records = night(exact(20.0, 0.02, 6), 0) + night([20.0, 30.0], 1)
    records[0] = dataclasses.replace(records[0], throttled=True)
    floor = noise_floors(frame(records), ["tg_tps"])[0]
    assert (floor.nights, floor.trials) == (1, 5)


# --- minimum detectable change --------------------------------------------------------------

def test_the_minimum_detectable_change_follows_the_normal_formula() -> None:
    z = NormalDist().inv_cdf
    expected = math.expm1((z(1 - DEFAULT_ALPHA / 2) + z(0.8)) * 0.03 * math.sqrt(2 / 10))
    assert min_detectable_change(0.03, 10) == pytest.approx(expected)
    assert min_detectable_change(0.03, 10) == pytest.approx(0.0383, abs=5e-4)
    assert min_detectable_change(0.03, 10, power=0.95) > min_detectable_change(0.03, 10)
    assert min_detectable_change(0.03, 5, n_other=20) > min_detectable_change(0.03, 10)


@pytest.mark.parametrize("n", [2, 5, 10, 30])
def test_the_minimum_detectable_change_shrinks_as_one_over_sqrt_n(n: int) -> None:
    for power in (0.8, 0.95):
        small = math.log1p(min_detectable_change(0.04, n, power=power))
        large = math.log1p(min_detectable_change(0.04, 4 * n, power=power))
        assert small / large == pytest.approx(2.0)


def test_reps_override_the_cells_own_count() -> None:
    records = [r for d in range(3) for r in night(exact(20.0, 0.03, 5), d)]
    own, ten = (noise_floors(frame(records), ["tg_tps"], reps=r)[0] for r in (None, 10))
    assert (own.reps, ten.reps) == (5, 10)
    assert ten.mdc_80 < own.mdc_80 < own.mdc_95


# --- noise grew -----------------------------------------------------------------------------

def _grew(tonight_cv: float) -> tuple[NoiseGrowth, ...]:
    history = [r for d in range(6) for r in night(exact(20.0, 0.02, 10), d)]
    tonight = night(exact(20.0, tonight_cv, 10), 6, run_id="tonight")
    return noise_grew(frame([*history, *tonight]), "tonight", ["tg_tps"])


def test_noise_grew_fires_on_a_doubled_cv() -> None:
    (g,) = _grew(0.04)
    assert (g.device, g.metric, g.n_tonight) == ("SER1", "tg_tps", 10)
    assert g.ratio == pytest.approx(2.0, rel=0.05) and g.cv_history == pytest.approx(0.02, 0.1)
    assert g.p_value < 0.01 and g.f_statistic == pytest.approx(4.0, rel=0.1)
    assert (g.history_nights, g.history_trials) == (6, 60)


def test_noise_grew_is_silent_on_the_same_noise_and_without_history() -> None:
    assert _grew(0.02) == ()
    assert _grew(0.028) == ()  # 1.4 times: not notably above
    alone = frame(night(exact(20.0, 0.05, 10), 0, run_id="tonight"))
    assert noise_grew(alone, "tonight", ["tg_tps"]) == ()


def test_noise_grew_ignores_a_tiny_cv_and_later_nights() -> None:
    history = [r for d in range(6) for r in night(exact(20.0, 0.0005, 10), d)]
    tonight = night(exact(20.0, 0.002, 10), 6, run_id="tonight")
    assert noise_grew(frame([*history, *tonight]), "tonight", ["tg_tps"]) == ()
    later = [r for d in range(7, 10) for r in night(exact(20.0, 0.01, 10), d)]
    loud = night(exact(20.0, 0.04, 10), 6, run_id="tonight")
    assert noise_grew(frame([*later, *loud]), "tonight", ["tg_tps"]) == ()  # no history before


# --- gate notes -----------------------------------------------------------------------------

def _ab_frame(cv: float, reps: int) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    return frame([trial(cell(build=b), run_id=b, rep=i, tg_tps=v)
                  for b in ("base", "cand") for i, v in enumerate(noisy(rng, 20.0, reps, cv))])


def test_a_gate_below_the_noise_floor_gets_a_note_and_keeps_its_verdict() -> None:
    trials = _ab_frame(0.05, 5)
    tight = compare_builds(trials, "base", "cand", ["tg_tps"], canonical_gates(["tg_tps:-2%"]))
    loose = compare_builds(trials, "base", "cand", ["tg_tps"], canonical_gates(["tg_tps:-30%"]))
    bare = compare_builds(trials, "base", "cand", ["tg_tps"])
    (gate,) = tight.gates
    assert gate.note is not None and "tg_tps:-2% is below the noise floor of SER1/" in gate.note
    assert "5/5 repetitions" in gate.note and "verdict is unchanged" in gate.note
    assert loose.gates[0].note is None
    assert tight.cells == bare.cells == loose.cells
    assert tight.to_json()["gates"][0]["note"] == gate.note
    assert loose.to_json()["gates"][0]["note"] is None


# --- the CLI --------------------------------------------------------------------------------

run = run_analysis


def _store(root: Path) -> None:
    for d in range(3):
        write(root, night(exact(20.0, 0.03, 5), d), run_id=f"r{d}", when=START + d * DAY)


def test_noise_json_lists_the_cv_and_detectable_change_per_cell(tmp_path: Path) -> None:
    _store(tmp_path)
    result = run("noise", "--results", str(tmp_path), "--reps", "10", "--metric", "tg_tps",
                 "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema_version"] == 1 and doc["reps"] == 10
    (c,) = doc["cells"]
    assert (c["device"], c["metric"], c["nights"], c["reps"]) == ("SER1", "tg_tps", 3, 10)
    assert c["cv"] == pytest.approx(0.03, rel=0.1)
    assert c["mdc_80"] == pytest.approx(min_detectable_change(c["cv"], 10))
    text = run("noise", "--results", str(tmp_path), "--device", "SER1")
    assert text.exit_code == 0, text.output
    assert "MDC 80%" in text.output and text.output.endswith("3 cells with a noise floor "
                                                              "(a night needs at least 3 usable "
                                                              "trials)\n")


def test_a_gate_note_is_printed_by_compare(tmp_path: Path) -> None:
    write(tmp_path, [trial(cell(build=b), rep=i, tg_tps=v) for b in ("base", "cand")
                     for i, v in enumerate(exact(20.0, 0.05, 5))])
    result = run("compare", "--results", str(tmp_path), "--baseline", "base", "--candidate",
                 "cand", "--metric", "tg_tps", "--gate", "tg_tps:-2%")
    assert result.exit_code == 0, result.output
    assert "note: tg_tps:-2% is below the noise floor of SER1/" in result.output


@pytest.mark.parametrize(("args", "line"), [
    (["--reps", "0"], "Error: --reps 0: give at least 1 repetition per side"),
    (["--nights", "0"], "Error: --nights 0: give at least 1 night"),
    (["--device", "nope"], "Error: --device 'nope': no trials of that phone (serials: SER1)"),
    (["--metric", "speed"], "Error: unknown metric 'speed'"),
])
def test_noise_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str],
                                               line: str) -> None:
    _store(tmp_path)
    result = run("noise", "--results", str(tmp_path), *args)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith(line)


def test_noise_on_a_folder_without_a_store_exits_2(tmp_path: Path) -> None:
    result = run("noise", "--results", str(tmp_path))
    assert result.exit_code == 2 and "no results store here" in result.output
