"""The cooldown gate waits on heat and battery, with a fake clock."""

from __future__ import annotations

from dataclasses import dataclass

from harness.run.cooldown import Assessment, assess, not_ready_reason, wait_until_ready
from harness.run.state import DeviceState, throttled_during


@dataclass(frozen=True)
class Policy:
    max_thermal_status: int = 0
    max_temperature_c: float | None = 40.0
    min_battery_pct: int | None = 20
    max_wait_s: float = 60.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_reasons_name_the_first_unmet_condition() -> None:
    policy = Policy()
    assert not_ready_reason(DeviceState(0, 35.0, 80), policy) is None
    assert not_ready_reason(DeviceState(2, 35.0, 80), policy) == "thermal status 2 > 0"
    assert "temperature 45.0" in (not_ready_reason(DeviceState(0, 45.0, 80), policy) or "")
    assert not_ready_reason(DeviceState(0, 30.0, 10), policy) == "battery 10% < 20%"


def test_unknown_readings_do_not_block() -> None:
    assert not_ready_reason(DeviceState(), Policy()) is None


def test_gate_waits_until_the_phone_cools_and_records_the_wait() -> None:
    clock = FakeClock()
    temps = iter([50.0, 45.0, 39.0])
    result = wait_until_ready(lambda: DeviceState(0, next(temps), 90), Policy(),
                              poll_s=5.0, clock=clock, sleep=clock.sleep)
    assert result.ready
    assert result.waited_s == 10.0
    assert result.state.max_temp_c == 39.0


def test_gate_gives_up_after_the_maximum_wait_with_the_reason() -> None:
    clock = FakeClock()
    result = wait_until_ready(lambda: DeviceState(3, 60.0, 90), Policy(max_wait_s=12.0),
                              poll_s=5.0, clock=clock, sleep=clock.sleep)
    assert not result.ready
    assert result.waited_s == 12.0
    assert result.reason == "thermal status 3 > 0"


def test_throttled_when_status_rises_or_big_cores_are_capped() -> None:
    cool = DeviceState(0, 30.0, big_max_khz=3000, big_hw_max_khz=3000)
    assert not throttled_during([cool, cool], max_thermal_status=1)
    assert throttled_during([cool, DeviceState(2)], max_thermal_status=1)
    capped = DeviceState(0, 30.0, big_max_khz=2000, big_hw_max_khz=3000)
    assert throttled_during([cool, capped], max_thermal_status=1)


def test_a_hot_skin_holds_the_gate_even_when_the_status_is_stuck_at_zero() -> None:
    stuck = DeviceState(0, None, 80, surface_temp_c=46.0, surface_source="sysfs")
    verdict = assess(stuck, Policy())
    assert verdict.source == "sysfs"
    assert verdict.reason == "skin/battery temperature 46.0 °C > 40.0 °C (sysfs)"
    battery_only = DeviceState(0, None, 80, 46.0, surface_temp_c=46.0,
                               surface_source="dumpsys_battery")
    assert assess(battery_only, Policy()).source == "dumpsys_battery"


def test_skin_and_battery_come_before_the_hottest_sensor() -> None:
    # a CPU die at 55 °C right after work, skin already back to 35 °C: the phone is cool
    state = DeviceState(0, 55.0, 80, surface_temp_c=35.0, surface_source="hal")
    assert assess(state, Policy()) == Assessment(None, "hal")
    # a HAL without skin or battery sensors: its hottest sensor decides, as before
    assert assess(DeviceState(0, 45.0, 80), Policy()).source == "hal_hottest"
    assert assess(DeviceState(3, 30.0, 80), Policy()).source == "thermal_status"
    assert assess(DeviceState(), Policy()) == Assessment(None, None)


def test_the_gate_records_the_source_that_held_it() -> None:
    clock = FakeClock()
    hot = DeviceState(0, None, 80, surface_temp_c=45.0, surface_source="sysfs")
    result = wait_until_ready(lambda: hot, Policy(max_wait_s=4.0), poll_s=2.0, clock=clock,
                              sleep=clock.sleep)
    assert (result.ready, result.source) == (False, "sysfs")
    assert result.reason is not None and "45.0 °C" in result.reason
