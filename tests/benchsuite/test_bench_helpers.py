"""Pure helpers of the benchmark suite (bench/): pairing, ratios, efficiency, memory errors."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.common import Figure, Timeline, median_ci
from bench.farm import cpu_ceiling, efficiency
from bench.gpusampler import figure as gpu_figure
from bench.gpusampler import gpu_readings
from bench.interleave import Block
from bench.memory import cell_errors, figure
from bench.push import pair_order
from bench.run import markdown, table
from bench.sampler import engine_seconds, overheads, ratios, round_arms
from harness.run.offload import KGSL_SOURCE


def test_round_arms_rotate_so_every_arm_takes_every_position() -> None:
    firsts = {round_arms(i, ten_hz=True, direct=True)[0] for i in range(4)}
    assert firsts == {"default", "none", "10hz", "direct"}
    assert round_arms(1, ten_hz=False, direct=False) == ["none", "default"]


def test_push_pairs_alternate_which_method_goes_first() -> None:
    assert [pair_order(i)[0] for i in range(4)] == ["harness", "adb", "harness", "adb"]


def test_ratios_pair_arms_within_a_round_and_skip_failed_trials() -> None:
    rows = [
        {"round": 0, "arm": "default", "tg_tps": 90.0, "outcome": "ok"},
        {"round": 0, "arm": "none", "tg_tps": 100.0, "outcome": "ok"},
        {"round": 1, "arm": "default", "tg_tps": 50.0, "outcome": "crashed"},
        {"round": 1, "arm": "none", "tg_tps": 100.0, "outcome": "ok"},
        {"round": 2, "arm": "none", "tg_tps": 80.0, "outcome": "ok"},
        {"round": 2, "arm": "default", "tg_tps": 80.0, "outcome": "ok"},
    ]
    assert ratios(rows, "default") == [0.9, 1.0]


def test_overhead_is_the_span_minus_the_bare_engine_of_the_same_round() -> None:
    rows = [
        {"round": 0, "arm": "default", "span_s": 3.0, "outcome": "ok"},
        {"round": 0, "arm": "direct", "wall_s": 2.25},
        {"round": 1, "arm": "default", "span_s": 9.0, "outcome": "ok"},  # no direct run
    ]
    assert overheads(rows) == [0.75]


def test_engine_seconds_sums_llama_bench_samples() -> None:
    record = '[{"samples_ns": [1000000000, 500000000]}, {"samples_ns": [250000000]}]'
    assert engine_seconds(record) == pytest.approx(1.75)
    assert engine_seconds(None) is None


def test_efficiency_is_one_phone_makespan_over_n() -> None:
    eff = efficiency({1: [10.0, 12.0], 2: [11.0], 4: [22.0, 22.0]})
    assert eff == {1: 1.0, 2: pytest.approx(1.0), 4: pytest.approx(0.5)}


def test_cpu_ceiling_counts_engine_threads_against_cores() -> None:
    assert cpu_ceiling(2, cores=2) == 1.0
    assert cpu_ceiling(4, cores=2) == 0.5
    assert cpu_ceiling(2, cores=2, threads=2) == 0.5


def test_timeline_spans_pair_trial_and_done_per_device() -> None:
    timeline = Timeline()
    timeline.events = [(1.0, "trial", "a", {}), (1.5, "trial", "b", {}),
                       (4.0, "done", "a", {"tg_tps": 5.0}), (5.0, "done", "b", {})]
    spans = timeline.trial_spans()
    assert [(s["serial"], s["span_s"]) for s in spans] == [("a", 3.0), ("b", 3.5)]
    assert spans[0]["tg_tps"] == 5.0


def test_median_ci_brackets_the_median() -> None:
    low, high = median_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert low <= 3.0 <= high and low < high


def _trials(rows: list[tuple[str, str, int | None]]) -> pd.DataFrame:
    return pd.DataFrame([
        {"cell_id": cell, "trial_id": f"{cell}/{i}", "outcome": outcome, "model_name": "m",
         "quant": "Q8_0", "n_ctx": 256, "type_k": "f16", "threads": 2,
         "predicted_peak_bytes": 100, "peak_rss_bytes": hwm, "vm_hwm_bytes": hwm}
        for i, (cell, outcome, hwm) in enumerate(rows)])


def test_memory_error_uses_the_largest_peak_since_samples_only_under_read() -> None:
    errors = cell_errors(_trials([("a", "ok", 50), ("a", "ok", 95), ("a", "crashed", 200)]))
    assert errors.loc[0, "hwm"] == 95
    assert errors.loc[0, "error_hwm"] == pytest.approx(5 / 95)


def test_memory_figure_fails_on_a_bad_cell_and_names_unmeasured_ones() -> None:
    errors = cell_errors(_trials([("a", "ok", 98), ("b", "ok", 80), ("c", "ok", None)]))
    row = figure("smoke", errors)
    assert row.met is False
    assert row.value == pytest.approx(25.0)
    assert "1/3 within" in row.note and "1 cell(s) got no memory sample" in row.note


def test_table_and_markdown_show_every_figure_with_its_verdict() -> None:
    rows = [Figure("1 sampler: x", 0.98, "ratio", "0.9-1.0 (n=10)", ">= 0.99", False),
            Figure("6 detector: y", None, "%", "-", "(info)", None)]
    text = table(rows)
    assert "0.980" in text and "NO" in text and "n/a" in text
    md = markdown(rows, {"1": "3.1-3.4"}, "quick")
    assert "| 1 sampler: x | 0.980 | 0.9-1.0 (n=10) | >= 0.99 | NO | 3.1-3.4 |" in md


def test_paging_figure_is_the_worst_cell_and_needs_four_within() -> None:
    from bench import paging

    trials = pd.DataFrame({
        "model_name": ["bench", "bench", "moe"], "outcome": ["ok", "ok", "ok"],
        "tg_tps": [0.8, 0.9, 2.0], "predicted_paging_tg_tps": [0.79, 0.79, 2.6],
        "paging": [True, True, True], "read_bytes_per_token": [120 * 2**20, 126 * 2**20, 3e7]})
    rows = paging.cell_rows(trials, 100.0)
    assert [(r["model"], r["paging"]) for r in rows] == [("bench", 2), ("moe", 1)]
    assert [r["measured_tg_tps"] for r in rows] == pytest.approx([0.85, 2.0])
    assert rows[0]["read_mib_per_token"] == 123.0
    two = paging.figure(rows)
    assert two.value == pytest.approx(30.0) and two.met is False  # 2 cells, 4 wanted
    assert "2/2 within" in two.note and "moe at 100 MB/s" in two.note
    four = paging.figure(rows + paging.cell_rows(trials, 50.0))
    assert four.met is True
    far = paging.figure([{**rows[1], "predicted_tg_tps": 3.0}, *rows[:1], *rows, *rows])
    assert far.met is False and "+50%" in far.spread


def _gpu_blocks(on_rate: float) -> list[Block]:
    rates = [10.0, on_rate, 10.0, 10.0, 10.0]  # off, default, off, placebo, off
    return [Block(i, arm, rate, rate, 0.0, None) for i, (arm, rate)
            in enumerate(zip("ndnzn", rates, strict=True))]


def test_gpu_sampler_figure_counts_only_when_the_sampler_read_the_gpu() -> None:
    trials = pd.DataFrame([{"trial_id": "t1", "outcome": "ok", "accelerator_memory_bytes": 41 << 20,
                            "accelerator_memory_source": KGSL_SOURCE}])
    samples = pd.DataFrame({"trial_id": ["t1", "t1", "t0"],
                            "gpu_cur_khz": [680000, None, 680000]})
    read = gpu_readings(trials, samples)
    assert read["gpu_clock_samples"] == 1 and read["outcome"] == "ok"
    fine = gpu_figure(_gpu_blocks(9.95), read)
    assert fine.value == pytest.approx(0.995) and fine.met is True
    assert gpu_figure(_gpu_blocks(9.5), read).met is False  # a 5% cost misses the target
    # the same rates, but no GPU node was read by the trial: the row does not count
    unread = {**read, "gpu_clock_samples": 0}
    assert gpu_figure(_gpu_blocks(9.95), unread).met is False
    assert gpu_figure(_gpu_blocks(9.95), {**read, "accelerator_memory_source":
                                          "unreadable: no kgsl"}).met is False
