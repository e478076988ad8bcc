"""Energy per token and sustained series: the pure parts (harness.run.energy, .sustained,
.launchfacts), each rule with the figures it must give."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from harness.cell import Cell
from harness.engines.base import Measurement
from harness.run import energy, ondevice, sustained
from harness.run.launchfacts import Idle, Timing, headline, measured
from harness.run.ondevice import Tick
from harness.run.state import DeviceState

CELL = Cell(build="b", model="tiny", quant="Q8_0", n_ctx=512, type_k="f16", type_v="f16",
            threads=1, affinity="all", flash_attn="auto", mmap=True, n_batch=256, n_ubatch=128,
            n_prompt=64, n_gen=128)


def readings(start: float, stop: float, step: float, current: float, volts_uv: float = 4.0e6,
             status: str = "Discharging") -> list[energy.Reading]:
    out, t = [], start
    while t <= stop + 1e-9:
        out.append(energy.Reading(round(t, 3), current, volts_uv, status))
        t += step
    return out


def test_parse_skips_lines_with_a_field_it_could_not_read() -> None:
    text = "10.00 -500000 4000000 Discharging\n10.05  4000000 Discharging\n10.10 x 1 y\n" \
           "10.15 -510000 4000000 Discharging\n"
    parsed = energy.parse_readings(text)
    assert [r.uptime_s for r in parsed] == [10.0, 10.15]
    assert parsed[0].status == "Discharging"


@pytest.mark.parametrize(("current", "volts", "text", "expected_w"), [
    (-500_000, 4.0e6, "current_now uA, negative while discharging; voltage_now uV", 2.0),
    (500_000, 4.0e6, "current_now uA, positive while discharging; voltage_now uV", 2.0),
    (500, 4.0e6, "current_now mA, positive while discharging; voltage_now uV", 2.0),
    (-500, 4000, "current_now mA, negative while discharging; voltage_now mV", 2.0),
])
def test_units_and_sign_are_detected_from_the_readings(current: float, volts: float, text: str,
                                                       expected_w: float) -> None:
    sample = [energy.Reading(1.0, current, volts, "Discharging")]
    units = energy.detect_units(sample)
    assert units is not None and units.text == text
    assert energy.watts(sample[0], units) == pytest.approx(expected_w)


def test_readings_of_no_known_unit_give_none() -> None:
    assert energy.detect_units([energy.Reading(1.0, 5, 12, "Discharging")]) is None


def test_joules_per_token_subtract_the_idle_draw() -> None:
    idle = readings(0.0, 1.0, 0.1, -250_000)  # 1 W
    decode = readings(5.0, 7.0, 0.05, -750_000)  # 3 W: 2 W above idle for 2 s
    windows = [energy.Window("decode", 5.0, 7.0, 100)]
    result = energy.from_readings(idle, decode, windows)
    assert result.valid and result.reason is None
    assert result.idle_w == pytest.approx(1.0)
    assert result.tg_power_w == pytest.approx(2.0)
    assert result.tg_j_per_token == pytest.approx(2.0 * 2.0 / 100)
    assert result.pp_j_per_token is None


def test_a_charging_phone_gives_no_figure_but_the_reason() -> None:
    idle = readings(0.0, 1.0, 0.1, 250_000, status="Charging")
    decode = readings(5.0, 7.0, 0.05, 100_000, status="Charging")
    result = energy.from_readings(idle, decode, [energy.Window("decode", 5.0, 7.0, 100)])
    assert not result.valid and result.tg_j_per_token is None
    assert result.reason is not None and "charging" in result.reason
    plugged = energy.from_readings(readings(0, 1, 0.1, -250_000), readings(5, 7, 0.05, -750_000),
                                   [energy.Window("decode", 5.0, 7.0, 100)],
                                   charging_before=True)
    assert not plugged.valid


def test_a_window_too_short_for_the_gauge_is_invalid_with_its_figures() -> None:
    result = energy.from_readings(readings(0, 1, 0.1, -250_000), readings(5, 5.2, 0.1, -750_000),
                                  [energy.Window("decode", 5.0, 5.2, 16)])
    assert not result.valid
    assert result.reason == ("the decode window (0.20 s) holds 3 power reading(s) (need 5): too "
                             "short for the gauge")


def test_windows_are_counted_back_from_the_exit() -> None:
    windows = energy.windows_from_timings(end_s=20.0, pp_s=1.0, tg_s=4.0, n_prompt=64,
                                          n_gen=128, gap_s=0.5)
    assert windows == [energy.Window("decode", 16.0, 20.0, 128),
                       energy.Window("prefill", 14.5, 15.5, 64)]


def test_a_charge_counter_that_barely_moved_is_too_coarse() -> None:
    idle = (energy.CounterReading(0.0, 2_000_000, 4000, False),
            energy.CounterReading(2.0, 2_000_000, 4000, False))
    launch = (idle[-1], energy.CounterReading(4.0, 1_999_000, 4000, False))
    result = energy.from_counter(idle, launch, [energy.Window("decode", 3.0, 4.0, 64)])
    assert not result.valid and result.reason is not None and "too coarse" in result.reason


def test_a_fine_charge_counter_gives_energy_above_idle() -> None:
    # idle: 1 uAh/s at 4 V = 14.4 mW; launch: 101 uAh in 10 s
    idle = (energy.CounterReading(0.0, 2_000_101, 4000, False),
            energy.CounterReading(10.0, 2_000_091, 4000, False))
    launch = (idle[-1], energy.CounterReading(20.0, 1_999_990, 4000, False))
    result = energy.from_counter(idle, launch, [energy.Window("decode", 15.0, 20.0, 100)])
    assert result.valid
    per_s_w = 3.6e-3 * 4.0
    assert result.idle_w == pytest.approx(1 * per_s_w)
    assert result.tg_power_w == pytest.approx(10.1 * per_s_w - 1 * per_s_w)
    assert result.tg_j_per_token == pytest.approx(result.tg_power_w * 5 / 100)


def test_repetitions_fill_the_duration() -> None:
    assert sustained.repetitions_for(60, 0.5) == 120
    assert sustained.repetitions_for(1, 2.0) == sustained.MIN_REPS
    assert sustained.repetitions_for(60, float("nan")) == sustained.MIN_REPS


def test_series_points_end_where_their_repetitions_end() -> None:
    points = sustained.series([10.0, 10.0, 5.0], [1.0, 1.0, 2.0], end_s=10.0)
    assert [(p.t_s, p.tps) for p in points] == [(7.0, 10.0), (8.0, 10.0), (10.0, 5.0)]


def test_time_to_throttle_needs_the_dip_to_hold_and_the_ratio_uses_the_last_fifth() -> None:
    rates = [100.0] * 10 + [60.0] + [100.0] * 4 + [70.0] * 10
    points = [sustained.Point(float(i + 1), r) for i, r in enumerate(rates)]
    summary = sustained.summarise(points)
    assert summary.time_to_throttle_s == 16.0  # the lone dip at 11 s is noise
    assert summary.steady_state_ratio == pytest.approx(0.7)
    assert summary.sustained_tps == pytest.approx(70.0)
    steady = sustained.summarise([sustained.Point(float(i), 100.0) for i in range(20)])
    assert steady.time_to_throttle_s is None and steady.steady_state_ratio == 1.0


def test_a_sustained_launch_stores_its_series_and_a_burst_one_does_not() -> None:
    cell = Cell(**{**CELL.__dict__, "n_prompt": 0, "sustained_s": 30.0})
    reps = [Measurement(i, None, 100.0 if i < 10 else 50.0, None) for i in range(20)]
    timing = Timing(t0=100.0, t1=130.0, readings=(), idle=Idle())
    when = datetime(2026, 12, 2, tzinfo=UTC)
    columns, rows = measured(cell, reps, timing, when, energy_enabled=False)
    assert columns["sustained_reps"] == 20 and columns["launched_at"] == when
    assert columns["steady_state_ratio"] == pytest.approx(0.5)
    assert rows[-1] == {"t_ms": 30_000, "tg_tps": 50.0}
    assert len(rows) == 20 and rows[0]["t_ms"] < rows[1]["t_ms"]
    head = headline(reps, cell)
    assert head is not None and head.gen_tps == pytest.approx(75.0)
    burst, burst_rows = measured(CELL, reps[:1], timing, when, energy_enabled=False)
    assert "sustained_reps" not in burst and burst_rows == []


def test_energy_columns_and_power_samples_of_a_launch() -> None:
    reps = [Measurement(0, 640.0, 64.0, 0.1)]  # prefill 0.1 s, decode 2 s
    idle = Idle(readings=tuple(readings(90.0, 91.0, 0.1, -250_000)))
    during = tuple(readings(100.0, 103.0, 0.05, -750_000))
    timing = Timing(t0=100.0, t1=103.0, readings=during, idle=idle)
    columns, rows = measured(CELL, reps, timing, datetime.now(UTC), energy_enabled=True)
    assert columns["energy_valid"] is True and columns["energy_source"] == "power_supply"
    assert columns["tg_start_ms"] == 1000 and columns["tg_end_ms"] == 3000
    assert columns["tg_j_per_token"] == pytest.approx(2.0 * 2.0 / 128)
    # the 0.1 s prefill window holds 2 readings: no honest figure for it, and the trial says so
    assert columns["energy_invalid_reason"] is None or "prefill" in columns[
        "energy_invalid_reason"]
    assert any(r.get("power_w") == pytest.approx(1.0) and r["t_ms"] < 0 for r in rows)


def test_a_stepwise_gauge_read_unevenly_is_averaged_over_time() -> None:
    # 1 W until 1.0 s, then 3 W: read often in the first part, rarely in the second
    timed = [(0.0, 1.0), (0.1, 1.0), (0.2, 1.0), (0.3, 1.0), (0.4, 1.0), (1.0, 3.0), (1.9, 3.0)]
    assert energy.time_average(timed, 0.0, 2.0) == pytest.approx(2.0)  # a plain mean says 1.57
    assert energy.time_average(timed, 0.5, 1.5) == pytest.approx(2.0)  # held from 0.4 s
    assert energy.time_average(timed, -1.0, -0.5) is None


def test_a_stall_the_phone_recovers_from_is_not_its_throttle() -> None:
    """A busy host stalls the engine for ~1.2 s early on (6 slow points, more than the confirming
    window); the phone throttles for good later: the onset is the later, lasting drop."""
    rates = [100.0] * 30 + [60.0] * 6 + [100.0] * 20 + [70.0] * 60
    points = [sustained.Point(0.25 * (i + 1), r) for i, r in enumerate(rates)]
    assert sustained.summarise(points).time_to_throttle_s == 0.25 * 57
    # a throttle in two stages counts from its first (both below the threshold)
    staged = [100.0] * 30 + [80.0] * 20 + [50.0] * 40
    points = [sustained.Point(float(i + 1), r) for i, r in enumerate(staged)]
    assert sustained.summarise(points).time_to_throttle_s == 31.0
    # a throttle that oscillates once it began still begins at its first slow stretch
    wobbly = [100.0] * 20 + ([60.0] * 6 + [95.0] * 3) * 8
    points = [sustained.Point(float(i + 1), r) for i, r in enumerate(wobbly)]
    assert sustained.summarise(points).time_to_throttle_s == 21.0


def test_the_step_is_where_the_log_rate_drops_most() -> None:
    assert sustained.step_index([10.0] * 7 + [5.0] * 3) == 7
    assert sustained.step_index([5.0] * 4 + [10.0] * 4) is None  # a rise is no drop
    assert sustained.step_index([3.0]) is None


def test_the_phones_report_dates_the_throttle_a_loaded_host_would_move() -> None:
    """The phone throttles at 21 s (to 80%); a burst of host load at 41 s cuts the rate further
    after six points back at speed: the rate alone dates the throttle to the burst. The phone's
    readings (calm at 19.5 s, capped at 21.5 s) date it to where it began."""
    rates = [100.0] * 20 + [80.0] * 14 + [95.0] * 6 + [40.0] * 40
    points = [sustained.Point(float(i + 1), r) for i, r in enumerate(rates)]
    assert sustained.summarise(points).time_to_throttle_s == 41.0
    report = sustained.Report(at_s=21.5, calm_s=19.5)
    assert sustained.summarise(points, report).time_to_throttle_s == 21.0
    # the host slowed the engine by 15% at 8 s, before the phone throttled at 21 s: against the
    # start the rate says 8 s; against the rate just before the calm reading, 21 s
    loaded = [100.0] * 7 + [85.0] * 13 + [60.0] * 30
    points = [sustained.Point(float(i + 1), r) for i, r in enumerate(loaded)]
    assert sustained.summarise(points).time_to_throttle_s == 8.0
    assert sustained.summarise(points, report).time_to_throttle_s == 21.0
    # capped from the first reading on (not a throttle that began here), or no slow point after
    # the calm reading: the rate alone decides
    assert sustained.summarise(points, sustained.Report(0.5)).time_to_throttle_s == 8.0
    assert sustained.summarise(points, sustained.Report(49.5, 48.5)).time_to_throttle_s == 8.0
    # the report never invents a throttle the rate does not show
    steady = [sustained.Point(float(i + 1), 100.0) for i in range(40)]
    assert sustained.summarise(steady, report).time_to_throttle_s is None


def test_the_phones_first_throttling_reading_and_the_one_before() -> None:
    cool = DeviceState(thermal_status=1, big_max_khz=2_400_000, big_hw_max_khz=2_400_000)
    capped = DeviceState(thermal_status=1, big_max_khz=1_600_000, big_hw_max_khz=2_400_000)
    moderate = DeviceState(thermal_status=2)
    ticks = [Tick(500, None, cool), Tick(900, None, None), Tick(2500, None, moderate),
             Tick(1500, None, cool)]
    assert ondevice.throttle_report(ticks) == sustained.Report(2.5, 1.5)
    assert ondevice.throttle_report([*ticks, Tick(2000, None, capped)]) == sustained.Report(2.0,
                                                                                            1.5)
    assert ondevice.throttle_report([Tick(0, None, capped)]) == sustained.Report(0.0)
    # two readings in the same millisecond: the earlier one in the file counts first
    assert ondevice.throttle_report([Tick(7, None, cool), Tick(7, None, capped)]) == \
        sustained.Report(0.007, 0.007)
    assert ondevice.throttle_report(ticks[:2]) is None


def test_a_sustained_launch_dates_its_throttle_by_the_phones_report() -> None:
    cell = Cell(**{**CELL.__dict__, "n_prompt": 0, "sustained_s": 80.0})
    rates = [100.0] * 20 + [80.0] * 14 + [95.0] * 6 + [40.0] * 40
    reps = [Measurement(i, None, r, None) for i, r in enumerate(rates)]
    decode_s = sum(128 / r for r in rates)  # the launch, end to end
    timing = Timing(t0=100.0, t1=100.0 + decode_s, readings=(), idle=Idle())
    when = datetime(2026, 12, 5, tzinfo=UTC)
    began = 128 / 100 * 20 + 128 / 80  # the end of the first slow repetition
    alone, _ = measured(cell, reps, timing, when, energy_enabled=False)
    told, _ = measured(cell, reps, timing, when, energy_enabled=False,
                       throttle=sustained.Report(began + 1.0, began - 2.0))
    assert told["time_to_throttle_s"] == pytest.approx(began)
    assert told["throttle_reported_s"] == pytest.approx(began + 1.0)
    assert alone["time_to_throttle_s"] > began + 128 / 80 * 13
    assert alone["throttle_reported_s"] is None
