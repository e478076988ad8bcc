"""An external power monitor's CSV joined to trials by time (harness.analysis.monitor and
``harness energy join``): the figures, the honesty rules and bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from harness import store
from harness.analysis.frames import load_trials
from harness.analysis.monitor import join, parse_monitor_csv
from harness.cell import Cell
from harness.cli import main
from harness.errors import ConfigError
from harness.records import Outcome, TrialIds, new_trial

CELL = Cell(build="b", model="tiny", quant="Q8_0", n_ctx=512, type_k="f16", type_v="f16",
            threads=1, affinity="all", flash_attn="auto", mmap=True, n_batch=256, n_ubatch=128,
            n_prompt=64, n_gen=128)
LAUNCH = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


def _store(root: Path) -> None:
    ids = TrialIds("r1", "r1/sim-1/c/0", "sim-1/c", "sim-1", 0)
    trial = new_trial(ids, CELL, Outcome.OK, started_at=LAUNCH - timedelta(seconds=5),
                      launched_at=LAUNCH, pp_start_ms=1000, pp_end_ms=2000, tg_start_ms=2500,
                      tg_end_ms=6500, tg_tps=32.0, pp_tps=64.0, energy_source="power_supply",
                      energy_valid=False, energy_invalid_reason="the phone was charging")
    store.write_part(root, "trials", [trial], "r1")


def _csv(idle_w: float = 1.0, prefill_w: float = 4.0, decode_w: float = 3.0,
         step: float = 0.1) -> str:
    lines = ["timestamp,power_mw"]
    t = LAUNCH.timestamp() - 3.0
    while t < LAUNCH.timestamp() + 8.0:
        offset = t - LAUNCH.timestamp()
        watts = prefill_w if 1.0 <= offset <= 2.0 else decode_w if 2.5 <= offset <= 6.5 \
            else idle_w
        stamp = datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")
        lines.append(f"{stamp},{watts * 1000:.1f}")
        t += step
    return "\n".join(lines) + "\n"


def test_columns_are_read_in_their_units() -> None:
    samples = parse_monitor_csv("unix_s,current_ma,voltage_v\n10,500,4.0\n11,250,4.0\n", "m")
    assert samples.watts == (2.0, 1.0) and samples.times == (10.0, 11.0)
    assert samples.units == "current_ma x voltage_v"


@pytest.mark.parametrize(("text", "message"), [
    ("when,power_w\n1,2\n", "m.csv: no time column (one of timestamp, time, unix_s, epoch_s)"),
    ("time,amps\n1,2\n", "m.csv: no power column"),
    ("time,power_w\n1,x\n", "m.csv: line 2: not a sample"),
    ("time,power_w\n", "m.csv: no samples"),
])
def test_bad_csv_names_the_file_and_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_monitor_csv(text, "m", "m.csv")
    assert str(caught.value).startswith(message)


def test_trials_inside_the_monitor_range_get_joules_per_token(tmp_path: Path) -> None:
    _store(tmp_path)
    records = join(load_trials(tmp_path), parse_monitor_csv(_csv(), "usb"))
    (record,) = records
    assert record.energy_source == "monitor:usb" and record.energy_valid
    assert record.idle_power_w == pytest.approx(1.0)
    # each sample holds until the next: a window's edge is known to one sample (0.1 s)
    edge = {"rel": 0.1 / 1.0}
    assert record.tg_power_w == pytest.approx(2.0, **edge)
    assert record.tg_j_per_token == pytest.approx(2.0 * 4.0 / 128, **edge)
    assert record.pp_j_per_token == pytest.approx(3.0 * 1.0 / 64, **edge)


def test_a_monitor_that_missed_part_of_a_trial_joins_nothing(tmp_path: Path) -> None:
    _store(tmp_path)
    short = "\n".join(_csv().splitlines()[:60])  # ends before the decode window does
    assert join(load_trials(tmp_path), parse_monitor_csv(short, "usb")) == []


def test_join_stores_records_that_replace_the_gauge_everywhere(tmp_path: Path) -> None:
    _store(tmp_path)
    monitor = tmp_path / "monitor.csv"
    monitor.write_text(_csv())
    result = CliRunner().invoke(main, ["energy", "join", str(monitor), "--results",
                                       str(tmp_path), "--name", "usb", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["joined"] == 1
    trials = load_trials(tmp_path)  # what compare, recommend and the report read
    assert trials.loc[0, "energy_source"] == "monitor:usb"
    assert bool(trials.loc[0, "energy_valid"]) and pd.isna(trials.loc[0, "energy_invalid_reason"])
    assert trials.loc[0, "tg_j_per_token"] == pytest.approx(2.0 * 4.0 / 128, rel=0.1 / 4.0)
    from harness.report.load import load_trials as report_trials

    assert report_trials(tmp_path).loc[0, "energy_source"] == "monitor:usb"


def test_join_refuses_bad_input_with_one_line(tmp_path: Path) -> None:
    _store(tmp_path)
    monitor = tmp_path / "monitor.csv"
    monitor.write_text(_csv())
    unknown = CliRunner().invoke(main, ["energy", "join", str(monitor), "--results",
                                        str(tmp_path), "--serial", "nope"])
    assert unknown.exit_code == 2 and "--serial nope: no trials of that phone" in unknown.output
    later = tmp_path / "later.csv"
    later.write_text("unix_s,power_w\n1,1\n2,1\n")
    outside = CliRunner().invoke(main, ["energy", "join", str(later), "--results",
                                        str(tmp_path)])
    assert outside.exit_code == 2 and "no stored trial lies inside its time range" in \
        outside.output
    assert not (tmp_path / "energy").exists()  # nothing was written
