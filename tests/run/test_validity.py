"""The validity gates (harness.run.validity), the bandwidth probe's parser and frames' rule."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pytest

from harness.analysis.frames import usable, usable_mask
from harness.cell import Cell
from harness.errors import ConfigError
from harness.matrix import Requirements
from harness.profiles import parse_profile
from harness.records import ModelMeta, TrialIds, TrialRecord, new_trial
from harness.run import bandwidth as probe
from harness.run.validity import (
    BANDWIDTH_MARGIN,
    CACHE_BYTES,
    CACHE_FACTOR,
    Bandwidth,
    bad_rates,
    check,
    config_not_applied,
    faster_than_memory,
    needs_bandwidth,
    peak_below_weights,
    requirements_unmet,
    token_counts,
    validate,
)
from harness.units import MIB

MODEL = 300 * MIB  # bigger than the caches
BW = Bandwidth(50.0, "profile flagship-16gb")


def trial(outcome: str = "ok", *, mmap: bool = True, n_prompt: int = 32, n_gen: int = 16,
          n_depth: int = 0, file_bytes: int | None = MODEL, **measured: Any) -> TrialRecord:
    cell = Cell(build="b1", model="m", quant="Q8_0", n_ctx=512, type_k="f16", type_v="f16",
                threads=4, affinity="all", flash_attn="auto", mmap=mmap, n_batch=512,
                n_ubatch=512, n_prompt=n_prompt, n_gen=n_gen, n_depth=n_depth)
    ids = TrialIds("r1", "r1/j/0", "j", "serial-1", 0)
    values: dict[str, Any] = {"pp_tps": 500.0, "tg_tps": 40.0, "ttft_ms": 64.0}
    values.update(measured)
    return new_trial(ids, cell, outcome, started_at=datetime(2025, 1, 1, tzinfo=UTC),
                     model=ModelMeta(file_bytes=file_bytes), **values)


def records(*rows: dict[str, Any]) -> str:
    return json.dumps(list(rows))


# --- gate 1: rates ------------------------------------------------------------------------------

@pytest.mark.parametrize(("column", "value", "shown"), [
    ("tg_tps", 0.0, "tg_tps=0"), ("tg_tps", -3.0, "tg_tps=-3"),
    ("tg_tps", math.inf, "tg_tps=inf"), ("tg_tps", -math.inf, "tg_tps=-inf"),
    ("pp_tps", math.nan, "pp_tps=nan"), ("ttft_ms", 0.0, "ttft_ms=0"),
])
def test_an_impossible_rate_is_named_with_its_value(column: str, value: float,
                                                     shown: str) -> None:
    measured: dict[str, Any] = {column: value}
    assert bad_rates(trial(**measured)) == f"impossible rate: {shown}"


def test_several_bad_rates_are_one_reason_and_sane_ones_pass() -> None:
    assert bad_rates(trial(pp_tps=0.0, tg_tps=math.nan)) == \
        "impossible rate: pp_tps=0, tg_tps=nan"
    assert bad_rates(trial()) is None


def test_a_rate_the_cell_does_not_measure_or_that_is_missing_is_not_checked() -> None:
    assert bad_rates(trial(n_gen=0, tg_tps=0.0)) is None  # a prompt-only cell
    assert bad_rates(trial(n_prompt=0, pp_tps=0.0, ttft_ms=-1.0)) is None
    assert bad_rates(trial(tg_tps=None, pp_tps=None, ttft_ms=None)) is None


# --- gate 2: bandwidth --------------------------------------------------------------------------

def test_a_decode_faster_than_the_memory_allows_names_the_figures() -> None:
    # 300 MiB a token at 50 GB/s x 2: at most about 333 tok/s
    assert faster_than_memory(trial(tg_tps=300.0), BW) is None
    reason = faster_than_memory(trial(tg_tps=400.0), BW)
    assert reason == ("decode faster than memory: 400 tok/s x 300.0 MiB of weights = 125.8 GB/s "
                      "> 2 x 50.0 GB/s (profile flagship-16gb) = 100.0 GB/s")


def test_weights_that_fit_in_the_caches_get_the_cache_allowance() -> None:
    small = 4 * MIB
    limit_tps = BANDWIDTH_MARGIN * CACHE_FACTOR * BW.gbps * 1e9 / small  # about 190 000 tok/s
    assert faster_than_memory(trial(file_bytes=small, tg_tps=0.9 * limit_tps), BW) is None
    reason = faster_than_memory(trial(file_bytes=small, tg_tps=1.1 * limit_tps), BW)
    assert reason is not None and f"x {CACHE_FACTOR:g} (weights <= 64 MiB fit in the caches)" \
        in reason and reason.endswith("= 800.0 GB/s")
    at_edge = trial(file_bytes=CACHE_BYTES, tg_tps=1.1 * limit_tps * small / CACHE_BYTES)
    assert faster_than_memory(at_edge, BW) is not None


def test_the_bandwidth_gate_needs_a_figure_a_size_and_a_possible_rate() -> None:
    fast = 1e6
    assert faster_than_memory(trial(tg_tps=fast), None) is None
    assert faster_than_memory(trial(tg_tps=fast, file_bytes=None), BW) is None
    assert faster_than_memory(trial(tg_tps=fast, file_bytes=0), BW) is None
    assert faster_than_memory(trial(tg_tps=fast), Bandwidth(0.0, "nothing")) is None
    assert faster_than_memory(trial(tg_tps=math.inf), BW) is None  # gate 1's
    assert faster_than_memory(trial(tg_tps=None), BW) is None
    assert faster_than_memory(trial(tg_tps=fast, n_gen=0), BW) is None


def test_a_probe_is_worth_running_only_for_an_ok_trial_with_a_decode_to_check() -> None:
    assert needs_bandwidth(trial())
    assert not needs_bandwidth(trial("crashed"))
    assert not needs_bandwidth(trial(tg_tps=None))
    assert not needs_bandwidth(trial(tg_tps=0.0))
    assert not needs_bandwidth(trial(file_bytes=None))


# --- gate 3: peak with mmap off -----------------------------------------------------------------

def test_a_peak_below_the_weights_with_mmap_off_is_flagged() -> None:
    low = trial(mmap=False, vm_hwm_bytes=100 * MIB, peak_rss_bytes=90 * MIB)
    assert peak_below_weights(low) == ("peak below the weights with mmap off: 100.0 MiB < 0.8 x "
                                       "300.0 MiB model file")
    assert peak_below_weights(trial(mmap=False, vm_hwm_bytes=320 * MIB)) is None
    # the sampled RSS counts when it is the larger of the two
    assert peak_below_weights(trial(mmap=False, vm_hwm_bytes=100 * MIB,
                                    peak_rss_bytes=250 * MIB)) is None


def test_the_peak_gate_needs_mmap_off_a_vm_hwm_and_a_file_size() -> None:
    assert peak_below_weights(trial(mmap=True, vm_hwm_bytes=10 * MIB)) is None
    assert peak_below_weights(trial(mmap=False, peak_rss_bytes=10 * MIB)) is None  # sampled only
    assert peak_below_weights(trial(mmap=False, vm_hwm_bytes=10 * MIB, file_bytes=None)) is None


# --- gate 4: token counts -----------------------------------------------------------------------

def test_llama_bench_records_of_the_cells_counts_pass() -> None:
    bench = records({"n_prompt": 32, "n_gen": 0, "n_depth": 0},
                    {"n_prompt": 0, "n_gen": 16, "n_depth": 0})
    assert token_counts(trial(engine_record=bench)) is None
    one = records({"n_prompt": 32, "n_gen": 16, "n_depth": 0})  # a YAML engine's single record
    assert token_counts(trial(engine_record=one)) is None


def test_other_token_counts_than_the_cells_are_named() -> None:
    short = records({"n_prompt": 32, "n_gen": 0}, {"n_prompt": 0, "n_gen": 8})
    assert token_counts(trial(engine_record=short)) == (
        "token counts differ: engine ran n_gen=8, the cell asks n_gen=16")
    deep = records({"n_prompt": 32, "n_gen": 16, "n_depth": 128})
    assert token_counts(trial(engine_record=deep)) == (
        "token counts differ: engine ran n_depth=128, the cell asks n_depth=0")
    no_gen = records({"n_prompt": 32, "n_gen": 0})
    assert token_counts(trial(engine_record=no_gen)) == (
        "token counts differ: engine ran no test of n_gen=16 (its records say n_gen=0)")


@pytest.mark.parametrize("raw", [None, "", "not json", "42", '"text"', "[1, 2]",
                                 records({"n_prompt": "32", "n_gen": True}),
                                 records({"pp": 500.0}), records({"n_gen": 16.5})])
def test_records_without_counts_do_not_fire(raw: str | None) -> None:
    assert token_counts(trial(engine_record=raw)) is None


def test_a_single_record_object_and_integral_floats_are_read() -> None:
    assert token_counts(trial(engine_record=json.dumps({"n_prompt": 32.0, "n_gen": 16}))) is None
    assert token_counts(trial(engine_record=json.dumps({"n_prompt": 64}))) is not None


# --- gates 5 and 6 ------------------------------------------------------------------------------

def test_a_config_the_trial_runner_saw_not_applied_is_invalid_with_its_reason() -> None:
    flagged = trial(config_not_applied="4 threads asked, at most 1 ran")
    assert config_not_applied(flagged) == "config not applied: 4 threads asked, at most 1 ran"
    assert config_not_applied(trial()) is None


def test_a_recorded_phone_state_out_of_the_requirements_is_invalid() -> None:
    require = Requirements(charging=True, battery_saver=False, screen_on=True, doze=False)
    state: dict[str, Any] = {"charging": False, "battery_saver": True, "screen_on": True,
                             "doze_state": "IDLE"}
    assert requirements_unmet(trial(**state), require) == (
        "phone state out of the run's requirements: the battery was not charging, the run "
        "requires charging: true; battery saver was on, the run requires battery_saver: "
        "false; the phone was in Doze, the run requires doze: false")
    met: dict[str, Any] = {"charging": True, "battery_saver": False, "screen_on": True,
                           "doze_state": "ACTIVE"}
    assert requirements_unmet(trial(**met), require) is None


def test_requirements_without_a_recorded_state_or_a_requirement_do_not_fire() -> None:
    assert requirements_unmet(trial(charging=None), Requirements(charging=True)) is None
    assert requirements_unmet(trial(charging=False), Requirements()) is None
    assert requirements_unmet(trial(charging=False), None) is None


# --- all of them --------------------------------------------------------------------------------

def test_validate_joins_every_failing_gate_and_marks_sane_trials_valid() -> None:
    bad = trial(tg_tps=0.0, mmap=False, vm_hwm_bytes=MIB,
                engine_record=records({"n_prompt": 32, "n_gen": 8}),
                config_not_applied="4 threads asked, at most 2 ran")
    checked = validate(bad, Requirements(), BW)
    assert checked.outcome == "ok" and checked.valid is False
    assert checked.invalid_reason is not None
    parts = checked.invalid_reason.split("; ")
    assert [p.split(":")[0] for p in parts] == [
        "impossible rate", "peak below the weights with mmap off", "token counts differ",
        "config not applied"]
    good = validate(trial(), Requirements(charging=True), BW)
    assert good.valid is True and good.invalid_reason is None
    assert check(trial(), None, None) == []


def test_other_outcomes_are_not_checked() -> None:
    crashed = validate(trial("crashed", tg_tps=0.0))
    assert crashed.valid is None and crashed.invalid_reason is None


def test_a_trial_with_nothing_measured_passes_rather_than_crashing() -> None:
    empty = trial(pp_tps=None, tg_tps=None, ttft_ms=None, file_bytes=None, mmap=False,
                  engine_record=None)
    assert validate(empty, Requirements(charging=True, doze=True), BW).valid is True


# --- frames: the rule of which trials count ------------------------------------------------------

def _frame(rows: list[TrialRecord]) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in rows])


def test_usable_leaves_out_invalid_trials_and_keeps_unchecked_ones() -> None:
    rows = [validate(trial(tg_tps=40.0)), validate(trial(tg_tps=0.0)),
            trial(tg_tps=41.0),  # an older store: never checked (valid null)
            validate(trial("crashed"))]
    frame = _frame(rows)
    assert usable_mask(frame).tolist() == [True, False, True, False]
    assert usable(frame)["tg_tps"].tolist() == [40.0, 41.0]
    assert usable_mask(frame.drop(columns=["valid"])).tolist() == [True, True, True, False]


def test_sample_groups_count_the_invalid_trials_they_left_out() -> None:
    from harness.analysis.frames import build_groups

    rows = [validate(trial(tg_tps=40.0)), validate(trial(tg_tps=-1.0)),
            validate(trial(config_not_applied="2 threads asked, at most 1 ran"))]
    (group,) = build_groups(_frame(rows), "b1", ["tg_tps"]).values()
    assert group.values["tg_tps"].tolist() == [40.0]
    assert (group.n_ok, group.n_invalid_excluded, group.n_not_applied_excluded) == (3, 1, 1)


# --- the bandwidth probe and the profile key ------------------------------------------------------

TOYBOX = ("@@harness:t0\n1700000000000000000\n@@harness:dd\n1024+0 records in\n"
          "1024+0 records out\n1073741824 bytes (1.0 G) copied, 0.104 s, 9.6 G/s\n"
          "@@harness:t1\n1700000000200000000\n")
BUSYBOX = ("@@harness:t0\n1796218012880189103\n@@harness:dd\n1024+0 records in\n"
           "1024+0 records out\n@@harness:t1\n1796218012923776506\n")


def test_the_probe_prefers_dds_own_figures_and_falls_back_to_the_clock() -> None:
    assert probe.parse_probe(TOYBOX, 1024) == (1073741824, 0.104)
    copied, seconds = probe.parse_probe(BUSYBOX, 1024) or (0, 0.0)
    assert copied == 1024 * MIB and seconds == pytest.approx(0.043587403)
    gnu = TOYBOX.replace("(1.0 G) copied, 0.104 s, 9.6 G/s", "(1.1 GB, 1.0 GiB) copied, "
                         "0.0966 s, 11.1 GB/s")
    assert probe.parse_probe(gnu, 1024) == (1073741824, 0.0966)


@pytest.mark.parametrize("text", [
    "", "@@harness:dd\ndd: not found\n",
    BUSYBOX.replace("1024+0 records out", "512+0 records out"),  # cut short
    BUSYBOX.replace("1796218012923776506", "%N"),  # a date without nanoseconds
    BUSYBOX.replace("1796218012923776506", "1796218012880189103"),  # no time passed
])
def test_a_probe_that_cannot_be_timed_gives_no_figure(text: str) -> None:
    assert probe.parse_probe(text, 1024) is None


class _Phone:
    """A device whose dd copies at 40 GB/s and whose clock is read around it."""

    def __init__(self, gbps: float = 40.0, fail: bool = False) -> None:
        self.gbps, self.fail = gbps, fail
        self.counts: list[int] = []

    def shell(self, cmd: str, timeout: float | None = None) -> Any:
        from harness.device.base import ShellResult
        from harness.errors import DeviceError

        if self.fail:
            raise DeviceError("gone")
        count = int(cmd.split("count=")[1].split()[0])
        self.counts.append(count)
        ns = int(count * MIB / self.gbps)
        text = (f"@@harness:t0\n1000\n@@harness:dd\n{count}+0 records out\n"
                f"@@harness:t1\n{1000 + ns}\n")
        return ShellResult(0, text, "")


def test_measure_grows_a_too_short_copy_and_names_its_figures() -> None:
    phone = _Phone()
    found = probe.measure(phone)  # type: ignore[arg-type]
    assert found is not None and found.gbps == pytest.approx(40.0, rel=1e-3)
    assert phone.counts[0] == probe.PROBE_MIB and len(phone.counts) == 2
    assert found.source.startswith(f"measured: dd {phone.counts[-1]} MiB in 0.")
    assert probe.measure(_Phone(fail=True)) is None  # type: ignore[arg-type]


PROFILE: dict[str, Any] = {
    "name": "p", "props": {k: "x" for k in (
        "ro.product.model", "ro.product.manufacturer", "ro.product.name", "ro.product.device",
        "ro.soc.model", "ro.board.platform", "ro.build.version.release",
        "ro.build.version.sdk", "ro.product.cpu.abi")},
    "ram_mb": 8192, "available_mb": 4096, "storage_free_mb": 1000,
    "clusters": [{"name": "big", "cores": 4, "max_khz": 2000000, "capacity": 1024}],
}


def test_a_profile_may_state_its_memory_bandwidth() -> None:
    assert parse_profile(PROFILE, "p.yaml").memory_bandwidth_gbps is None
    assert parse_profile({**PROFILE, "memory_bandwidth_gbps": 51.2},
                         "p.yaml").memory_bandwidth_gbps == 51.2
    with pytest.raises(ConfigError, match=r"p\.yaml: key 'memory_bandwidth_gbps' must be "
                                          r"a positive number"):
        parse_profile({**PROFILE, "memory_bandwidth_gbps": 0}, "p.yaml")


def test_the_profile_of_the_phones_model_gives_the_figure(tmp_path: Any) -> None:
    import yaml

    data = {**PROFILE, "memory_bandwidth_gbps": 68.3}
    data["props"] = {**PROFILE["props"], "ro.product.model": "Pixel 9"}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    found = probe.from_profile("Pixel 9", tmp_path)
    assert found == Bandwidth(68.3, "profile p")
    assert probe.from_profile("Other", tmp_path) is None
    assert probe.from_profile(None, tmp_path) is None
