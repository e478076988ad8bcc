"""The LiteRT-LM adapter: argv for CPU and GPU cells, the BenchmarkInfo block as absl logs it on
stderr (one turn, several turns, several iterations, the older layout), peak memory, truncation
and the cells it refuses.

The samples are composed from the tool's format strings (runtime/engine/io_types.cc
``operator<<(ostream&, const BenchmarkInfo&)``, runtime/engine/litert_lm_lib.cc
``LogBenchmarkInfo``/``LogMemoryUsage``, runtime/executor/llm_executor_settings.cc); absl puts
its prefix on the first line of each log message only. One block is the tool's own, from a public
issue (tests/engines/data/litert_lm_issue1396.txt, its source on its first line).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from harness.cell import Cell
from harness.engines.base import TTFT_FIRST_DECODE, EngineOutput
from harness.engines.litert_lm import (
    LITERT_LM,
    LITERT_LM_ADVANCED,
    LiteRtLm,
    LiteRtLmRecord,
    duration_seconds,
    parse_output,
    record_from_dict,
    strip_prefix,
)
from harness.errors import EngineError

CELL = Cell(
    build="litert-0.9", model="gemma3-1b", quant="q4", n_ctx=512, type_k="f16", type_v="f16",
    threads=4, affinity="all", flash_attn="auto", mmap=True, n_batch=512, n_ubatch=512,
    n_prompt=128, n_gen=32, repetitions=1, engine="litert-lm",
)
GPU_CELL = dataclasses.replace(CELL, compute_device="gpu", n_gpu_layers=-1)

PREAMBLE = """\
I0723 17:45:57.000100    4321 litert_lm_lib.cc:494] Choose backend: cpu
I0723 17:45:57.000200    4321 litert_lm_lib.cc:647] executor_settings: backend: CPU
backend_config:
kv_increment_size: 16
prefill_chunk_size: -1
number_of_threads: 4
enable_ynnpack: 0

max_tokens: 160
I0723 17:45:57.000300    4321 litert_lm_lib.cc:735] Creating engine
I0723 17:45:58.000400    4321 litert_lm_lib.cc:885] Creating conversation
I0723 17:45:58.000500    4321 litert_lm_lib.cc:895] Running single-turn conversation
"""

# One iteration, one turn, as a build from 2026-03 on logs it (Init Total, TTFT, tokenizer turns).
BLOCK = """\
I0723 17:45:58.123456    4321 litert_lm_lib.cc:418] BenchmarkInfo:
  Init Phases (6):
    - Init Conversation: 4.75 ms
    - Init Executor: 812.35 ms
    - Init LLM metadata: 3.10 ms
    - Init Model assets: 12.48 ms
    - Init Tokenizer: 25.01 ms
    - Init Total: 861.20 ms
--------------------------------------------------
  Time to first token: 0.44 s
--------------------------------------------------
  Prefill Turns (Total 1 turns):
    Prefill Turn 1: Processed 128 tokens in 385.123456ms duration.
      Prefill Speed: 332.36 tokens/sec.
--------------------------------------------------
  Decode Turns (Total 1 turns):
    Decode Turn 1: Processed 32 tokens in 1.6s duration.
      Decode Speed: 20.00 tokens/sec.
--------------------------------------------------
  TextToTokenIds Turns (Total 1 turns):
    Turn 1: 1.234ms, 128 tokens
--------------------------------------------------
--------------------------------------------------
"""

PEAK = """\
I0723 17:45:59.000001    4321 litert_lm_lib.cc:463] Peak system ram usage: 1234.5MB.
I0723 17:45:59.000301    4321 litert_lm_lib.cc:466] Peak private footprint: 1100.25MB.
"""

# Two turns in one block (a multi-turn conversation), in the layout before 2025-09-12: no TTFT
# line, "(Total: N)" headers, a "Total init time" line after the phases.
OLD_TWO_TURNS = """\
I0612 10:00:01.000000   777 litert_lm_main.cc:190] BenchmarkInfo:
  Init Phases (5):
    - Executor: 900.00 ms
    - LLM metadata: 2.00 ms
    - Model assets: 10.00 ms
    - Session: 3.00 ms
    - Tokenizer: 20.00 ms
    Total init time: 935.00 ms
--------------------------------------------------
  Prefill Turns (Total: 2):
    Prefill Turn 1: Processed 64 tokens in 200ms duration.
      Prefill Speed: 320.00 tokens/sec.
    Prefill Turn 2: Processed 16 tokens in 80ms duration.
      Prefill Speed: 200.00 tokens/sec.
--------------------------------------------------
  Decode Turns (Total: 2):
    Decode Turn 1: Processed 10 tokens in 500ms duration.
      Decode Speed: 20.00 tokens/sec.
    Decode Turn 2: Processed 8 tokens in 1m0.5s duration.
      Decode Speed: 0.13 tokens/sec.
--------------------------------------------------
--------------------------------------------------
"""


def _iteration(prefill: str, prefill_tps: str, decode: str, decode_tps: str, peak: str) -> str:
    return f"""\
I0723 17:46:00.000000    4321 litert_lm_lib.cc:418] BenchmarkInfo:
  Init Phases (2):
    - Init Conversation: 5.00 ms
    - Init Total: 800.00 ms
--------------------------------------------------
  Time to first token: 0.30 s
--------------------------------------------------
  Prefill Turns (Total 1 turns):
    Prefill Turn 1: Processed 128 tokens in {prefill} duration.
      Prefill Speed: {prefill_tps} tokens/sec.
--------------------------------------------------
  Decode Turns (Total 1 turns):
    Decode Turn 1: Processed 32 tokens in {decode} duration.
      Decode Speed: {decode_tps} tokens/sec.
--------------------------------------------------
  TextToTokenIds Turns (Total 1 turns):
    Turn 1: 1ms, 128 tokens
--------------------------------------------------
--------------------------------------------------
I0723 17:46:01.000000    4321 litert_lm_lib.cc:463] Peak system ram usage: {peak}MB.
I0723 17:46:01.000100    4321 litert_lm_lib.cc:466] Peak private footprint: 900MB.
"""


THREE_ITERATIONS = PREAMBLE + "".join((
    _iteration("256ms", "500.00", "1.6s", "20.00", "1000"),
    _iteration("200ms", "640.00", "1.28s", "25.00", "1024.5"),
    _iteration("160ms", "800.00", "1s", "32.00", "1100"),
))


def test_argv_cpu_cell() -> None:
    assert LITERT_LM.argv(CELL, "/d/bin/litert_lm_main", "/d/m/gemma.litertlm") == [
        "/d/bin/litert_lm_main", "--model_path=/d/m/gemma.litertlm", "--backend=cpu",
        "--num_cpu_threads=4", "--benchmark", "--benchmark_prefill_tokens=128",
        "--benchmark_decode_tokens=32", "--async=false", "--report_peak_memory_footprint",
    ]


def test_argv_gpu_cell_has_no_thread_flag() -> None:
    assert LITERT_LM_ADVANCED.argv(GPU_CELL, "/d/bin/litert_lm_advanced_main", "/d/m.litertlm") \
        == ["/d/bin/litert_lm_advanced_main", "--model_path=/d/m.litertlm", "--backend=gpu",
            "--benchmark", "--benchmark_prefill_tokens=128", "--benchmark_decode_tokens=32",
            "--async=false", "--report_peak_memory_footprint"]


def test_argv_npu_and_iterations_for_several_repetitions() -> None:
    cell = dataclasses.replace(CELL, compute_device="npu", n_gpu_layers=-1, repetitions=5)
    argv = LITERT_LM_ADVANCED.argv(cell, "b", "m")
    assert "--backend=npu" in argv
    assert argv[-1] == "--num_iterations=5"


def test_argv_without_iterations_refuses_several_repetitions() -> None:
    with pytest.raises(EngineError, match="num_iterations"):
        LITERT_LM.argv(dataclasses.replace(CELL, repetitions=3), "b", "m")


def test_argv_refuses_an_unsupported_cell() -> None:
    with pytest.raises(EngineError, match="KV cache type"):
        LITERT_LM.argv(dataclasses.replace(CELL, type_k="q8_0", type_v="q8_0"), "b", "m")


def test_instances_name_their_binaries() -> None:
    assert (LITERT_LM.name, LITERT_LM.binary_name) == ("litert-lm", "litert_lm_main")
    assert (LITERT_LM_ADVANCED.name, LITERT_LM_ADVANCED.binary_name) == (
        "litert-lm-advanced", "litert_lm_advanced_main")
    assert not LITERT_LM.aggregate_only and not LITERT_LM_ADVANCED.aggregate_only


def test_one_turn_block_with_log_prefixes_and_peak_memory() -> None:
    records = LITERT_LM.parse(EngineOutput(stdout="", stderr=PREAMBLE + BLOCK + PEAK))
    assert len(records) == 1
    record = records[0]
    assert isinstance(record, LiteRtLmRecord)
    data = record.as_dict()
    assert data["prompt_tokens"] == 128 and data["generated_tokens"] == 32
    assert data["n_threads"] == 4
    assert data["init_phases_ms"]["Init Total"] == 861.20
    assert data["time_to_first_token_s"] == 0.44
    assert data["peak_private_footprint_mb"] == 1100.25
    assert record.raw.startswith("I0723 17:45:58.123456")
    [m] = LITERT_LM.measure(records)
    assert (m.rep, m.aggregate_n) == (0, None)
    assert m.prompt_tps == 332.36 and m.gen_tps == 20.0
    # the tool's formula on the printed durations: prefill + one mean decode step
    assert m.ttft_s == pytest.approx(0.385123456 + 1.6 / 32)
    assert m.ttft_definition == TTFT_FIRST_DECODE
    assert m.load_s == pytest.approx(0.8612)  # Init Total, not the sum of the phases
    assert m.peak_bytes == round(1234.5 * 1024 * 1024)  # the tool's MB is KiB / 1024


def test_peak_memory_absent() -> None:
    [m] = LITERT_LM.measure(LITERT_LM.parse(EngineOutput("", PREAMBLE + BLOCK)))
    assert m.peak_bytes is None
    assert m.gen_tps == 20.0


def test_several_turns_are_repetitions_in_the_older_layout() -> None:
    records = parse_output(OLD_TWO_TURNS)
    assert [(r.iteration, r.turn) for r in records] == [(0, 0), (0, 1)]
    assert [r.n_threads for r in records] == [None, None]  # no CPU config logged here
    first, second = LITERT_LM.measure(records)
    assert (first.rep, second.rep) == (0, 1)
    assert (first.prompt_tps, first.gen_tps) == (320.0, 20.0)
    assert (second.prompt_tps, second.gen_tps) == (200.0, 0.13)
    assert first.ttft_s == pytest.approx(0.2 + 0.5 / 10)
    assert second.ttft_s == pytest.approx(0.08 + 60.5 / 8)
    assert first.load_s == pytest.approx(0.935)  # the older "Total init time" line
    assert first.aggregate_n is None and second.aggregate_n is None


def test_iterations_are_repetitions_each_with_its_peak() -> None:
    records = LITERT_LM_ADVANCED.parse(EngineOutput("", THREE_ITERATIONS))
    measurements = LITERT_LM_ADVANCED.measure(records)
    assert [m.rep for m in measurements] == [0, 1, 2]
    assert [m.prompt_tps for m in measurements] == [500.0, 640.0, 800.0]
    assert [m.gen_tps for m in measurements] == [20.0, 25.0, 32.0]
    assert [m.aggregate_n for m in measurements] == [None, None, None]
    assert [m.peak_bytes for m in measurements] == [
        1000 * 1024 * 1024, round(1024.5 * 1024 * 1024), 1100 * 1024 * 1024]
    assert measurements[2].ttft_s == pytest.approx(0.16 + 1.0 / 32)
    assert all(m.load_s == pytest.approx(0.8) for m in measurements)


def test_no_summary_block_exists_so_nothing_is_an_aggregate() -> None:
    # LiteRT-LM prints no median or mean over iterations: each block is one repetition
    measurements = LITERT_LM_ADVANCED.measure(parse_output(THREE_ITERATIONS))
    assert len(measurements) == 3
    assert all(m.aggregate_n is None and m.prompt_tps_sd is None for m in measurements)


def test_output_on_stdout_only_gives_nothing() -> None:
    assert LITERT_LM.parse(EngineOutput(stdout=BLOCK + PEAK, stderr="")) == []
    assert LITERT_LM.parse(EngineOutput(stdout="The tallest building is ...\n",
                                        stderr=PREAMBLE)) == []


def test_plain_text_is_the_whole_output() -> None:
    assert len(LITERT_LM.parse(BLOCK)) == 1


def test_truncated_block_keeps_complete_iterations() -> None:
    cut = THREE_ITERATIONS.index("Decode Speed: 32.00")
    records = parse_output(THREE_ITERATIONS[:cut + len("Decode Speed: 3")])
    assert [r.iteration for r in records] == [0, 1]
    # cut before the decode section: that block gives nothing
    assert parse_output(BLOCK[:BLOCK.index("  Decode Turns")]) == []


def test_truncated_second_turn_is_dropped() -> None:
    cut = OLD_TWO_TURNS.index("    Decode Turn 2")
    assert [r.turn for r in parse_output(OLD_TWO_TURNS[:cut])] == [0]


def test_a_zero_speed_is_no_speed() -> None:
    text = BLOCK.replace("Decode Speed: 20.00", "Decode Speed: 0.00")
    [m] = LITERT_LM.measure(parse_output(text))
    assert m.gen_tps is None and m.prompt_tps == 332.36


def test_ttft_falls_back_to_the_printed_line() -> None:
    text = BLOCK.replace("in 1.6s duration", "in inf duration")
    [m] = LITERT_LM.measure(parse_output(text))
    assert m.ttft_s == 0.44 and m.ttft_definition == TTFT_FIRST_DECODE


def test_records_round_trip_through_their_dicts() -> None:
    [record] = parse_output(PREAMBLE + BLOCK + PEAK)
    again = record_from_dict(record.as_dict(), record.raw)
    assert again == record
    assert LITERT_LM.measure([again]) == LITERT_LM.measure([record])


def test_log_prefix_and_durations() -> None:
    assert strip_prefix("I0000 00:00:1712345678.123456  1234 file.cc:123] BenchmarkInfo:") \
        == "BenchmarkInfo:"
    assert strip_prefix("    - Init Total: 1.00 ms") == "- Init Total: 1.00 ms"
    assert duration_seconds("1h2m3.5s") == pytest.approx(3723.5)
    assert duration_seconds("523.1ms") == pytest.approx(0.5231)
    assert duration_seconds("12us") == pytest.approx(12e-6)
    assert duration_seconds("0") == 0.0
    assert duration_seconds("inf") is None
    assert duration_seconds("1.5") is None


@pytest.mark.parametrize(("change", "words"), [
    ({"type_k": "q8_0"}, "no KV cache type flag"),
    ({"type_v": "q4_0", "flash_attn": "on"}, "no KV cache type flag"),
    ({"flash_attn": "on"}, "flash_attn on"),
    ({"n_depth": 256, "n_ctx": 1024}, "n_depth 256"),
    ({"swa_full": True}, "swa_full true"),
    ({"affinity": "big"}, "affinity big"),
    ({"mmap": False}, "load_mode none"),
    ({"load_mode": "mlock", "mmap": False}, "load_mode mlock"),
    ({"cache": "cold"}, "cache cold"),
    ({"n_gen": 0}, "n_gen 0"),
    ({"n_prompt": 1024}, "needs 1056 tokens of context"),
    ({"compute_device": "gpu"}, "n_gpu_layers 0 (a partial offload)"),
    ({"compute_device": "gpu", "n_gpu_layers": 10}, "n_gpu_layers 10"),
    ({"compute_device": "BLAS"}, "no backend for device BLAS"),
    ({"n_gpu_layers": -1}, "device none runs every layer on the CPU"),
])
def test_supports_refuses_what_it_cannot_honour(change: dict[str, Any], words: str) -> None:
    reason = LITERT_LM_ADVANCED.supports(dataclasses.replace(CELL, **change))
    assert reason is not None and words in reason


def test_supports_plain_cells_and_sustained_only_with_iterations() -> None:
    assert LITERT_LM.supports(CELL) is None
    assert LITERT_LM.supports(GPU_CELL) is None
    sustained = dataclasses.replace(CELL, sustained_s=60.0)
    assert LITERT_LM_ADVANCED.supports(sustained) is None
    reason = LITERT_LM.supports(sustained)
    assert reason is not None and "--num_iterations" in reason
    assert LiteRtLm(binary_name="litert_lm_main").supports(sustained) == reason


@pytest.mark.parametrize(("device", "word"), [
    ("Vulkan0", "gpu"), ("GPUOpenCL", "gpu"), ("OpenCL0", "gpu"), ("HTP0", "npu")])
def test_a_llama_cpp_device_name_is_refused_with_litert_s_word(device: str, word: str) -> None:
    """--backend=gpu is LiteRT's own delegate: filed as Vulkan0 it would sit with llama.cpp's."""
    cell = dataclasses.replace(CELL, compute_device=device, n_gpu_layers=-1)
    reason = LITERT_LM_ADVANCED.supports(cell)
    assert reason is not None and f"name the device {word}" in reason and device in reason
    with pytest.raises(EngineError, match="LiteRT's own"):
        LITERT_LM_ADVANCED.argv(cell, "b", "m")
    own = dataclasses.replace(cell, compute_device=word)
    assert LITERT_LM_ADVANCED.supports(own) is None
    assert f"--backend={word}" in LITERT_LM_ADVANCED.argv(own, "b", "m")


def test_the_block_of_a_run_that_recorded_no_turns() -> None:
    """The tool's own print (a build that ran no inference): init phases, no turn, no record."""
    text = (Path(__file__).parent / "data" / "litert_lm_issue1396.txt").read_text()
    assert parse_output(text) == []
    assert LITERT_LM.measure(LITERT_LM.parse(EngineOutput("", text))) == []
