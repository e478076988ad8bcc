"""The ExecuTorch llama_main adapter: argv, both PyTorchObserver key sets, the stderr summary.

The outputs below are composed from the tool's format strings (pytorch/executorch
extension/llm/runner/stats.h ``stats_to_json_string`` and ``print_report``, text_llm_runner.cpp's
RSS log, llama/main.cpp's threadpool log, runtime/platform/default/posix.cpp's log prefix);
the RSS tests also read stderr the runner printed, from public READMEs (tests/engines/data/
executorch_*.txt, each citing its source on its first line).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.cell import Cell
from harness.engines.base import (
    TTFT_PROMPT,
    EngineOutput,
    Measurement,
    prompt_text,
    support_problem,
)
from harness.engines.executorch import ExecutorchLlama, seq_len
from harness.errors import EngineError

CELL = Cell(
    build="et-1", model="llama-3.2-1b-xnnpack", quant="8da4w", n_ctx=512, type_k="f16",
    type_v="f16", threads=4, affinity="all", flash_attn="auto", mmap=True, n_batch=2048,
    n_ubatch=512, n_prompt=4, n_gen=32, repetitions=1, engine="executorch-llama",
)
ENGINE = ExecutorchLlama()
BIN = "/data/local/tmp/bench/builds/et-1/bin/llama_main"
PTE = "/data/local/tmp/bench/models/llama-3.2-1b-xnnpack/model.pte"

# Newest report (stats.h since 776ba0ccd0): the rates first, execution stamps, no GPU keys.
# prefill: 64 tokens over 123 ms (printed with the stream's 6 significant digits: 520.325, the
# unrounded quotient is 520.3252...); decode: 32 tokens over 1600 ms = 20.
NEW_JSON = (
    'PyTorchObserver {"prefill_token_per_sec":520.325,"decode_token_per_sec":20,'
    '"prompt_tokens":64,"generated_tokens":32,"model_load_start_ms":1717000000000,'
    '"model_load_end_ms":1717000001500,"inference_start_ms":1717000002000,'
    '"inference_end_ms":1717000003723,"model_execution_start_ms":1717000003672,'
    '"model_execution_end_ms":1717000003721,"prompt_eval_end_ms":1717000002123,'
    '"first_token_ms":1717000002123,"aggregate_sampling_time_ms":14,'
    '"aggregate_model_execution_time_ms":1690,"SCALING_FACTOR_UNITS_PER_SECOND":1000}'
)
# Oldest report (stats.h at 7a034522c8, and llama2/runner/runner.cpp before it): stamps only.
OLD_JSON = (
    'PyTorchObserver {"prompt_tokens":64,"generated_tokens":32,'
    '"model_load_start_ms":1717000000000,"model_load_end_ms":1717000001250,'
    '"inference_start_ms":1717000002000,"inference_end_ms":1717000003760,'
    '"prompt_eval_end_ms":1717000002160,"first_token_ms":1717000002160,'
    '"aggregate_sampling_time_ms":12,"SCALING_FACTOR_UNITS_PER_SECOND":1000}'
)
# The echoed prompt and the greedy continuation precede the report on stdout.
ECHO = "the the the the the the the the the the the the the the the the the\n"

LOG = "I 00:00:{s:02d}.{us:06d} executorch:{where}] {msg}"


def log(msg: str, where: str = "stats.h:161", s: int = 3, us: int = 101100) -> str:
    return LOG.format(s=s, us=us, where=where, msg=msg)


THREADS_LINE = log("Resetting threadpool with num threads = 4", "main.cpp:159", 0, 512)
RSS_LINE = log("RSS after finishing text generation: 1234.500000 MiB (0 if unsupported)",
               "text_llm_runner.cpp:236")
# print_report's summary for OLD_JSON's stamps (posix PAL: stderr, one prefix per message).
SUMMARY = "\n".join([
    log("\tPrompt Tokens: 64    Generated Tokens: 32"),
    log("\tModel Load Time:\t\t1.250000 (seconds)"),
    log("\tTotal inference time:\t\t1.760000 (seconds)\t\t Rate: \t18.181818 (tokens/second)"),
    log("\t\tPrompt evaluation:\t0.160000 (seconds)\t\t Rate: \t400.000000 (tokens/second)"),
    log("\t\tGenerated 32 tokens:\t1.600000 (seconds)\t\t Rate: \t20.000000 (tokens/second)"),
    log("\tTime to first generated token:\t0.160000 (seconds)"),
    log("\tSampling time over 96 tokens:\t0.012000 (seconds)"),
])


def test_argv_for_a_typical_cell() -> None:
    assert ENGINE.name == "executorch-llama"
    assert ENGINE.binary_name == "llama_main"
    assert ENGINE.argv(CELL, BIN, PTE) == [
        BIN,
        f"--model_path={PTE}",
        "--tokenizer_path=/data/local/tmp/bench/models/llama-3.2-1b-xnnpack/tokenizer.model",
        "--prompt=the the the the",
        "--seq_len=37",
        "--cpu_threads=4",
        "--temperature=0",
        "--warmup",
        "--ignore_eos",
    ]


def test_argv_for_an_older_build_with_a_bos_and_a_json_tokenizer() -> None:
    engine = ExecutorchLlama(tokenizer="tokenizer.json", warmup=False, ignore_eos=False,
                             prompt_bos=1)
    cell = dataclasses.replace(CELL, threads=2, n_gen=16)
    assert engine.argv(cell, "llama_main", "model.pte") == [
        "llama_main", "--model_path=model.pte", "--tokenizer_path=tokenizer.json",
        "--prompt=the the the", "--seq_len=21", "--cpu_threads=2", "--temperature=0",
    ]


def test_argv_ignores_repetitions_one_generation_per_launch() -> None:
    many = dataclasses.replace(CELL, repetitions=5)
    assert ENGINE.argv(many, BIN, PTE) == ENGINE.argv(CELL, BIN, PTE)


def test_prompt_and_seq_len() -> None:
    assert prompt_text(3) == "the the the"
    # n_prompt + n_gen + 1: the token sampled from the prefill is not a decode step
    assert seq_len(dataclasses.replace(CELL, n_prompt=128, n_gen=64)) == 193


def test_argv_refuses_an_unsupported_cell_and_a_cpu_mask() -> None:
    with pytest.raises(EngineError, match=r"baked into the exported \.pte"):
        ENGINE.argv(dataclasses.replace(CELL, compute_device="Vulkan0"), BIN, PTE)
    with pytest.raises(EngineError, match="cannot pin"):
        ENGINE.argv(CELL, BIN, PTE, cpu_mask="0xf0")


def test_new_report_uses_the_printed_rates() -> None:
    out = EngineOutput(ECHO + NEW_JSON + "\n", "\n".join([THREADS_LINE, RSS_LINE, SUMMARY]))
    records = ENGINE.parse(out)
    assert len(records) == 1
    data = records[0].as_dict()
    assert records[0].raw == NEW_JSON
    assert data["prompt_tokens"] == 64
    assert data["generated_tokens"] == 32
    assert data["n_threads"] == 4
    assert data["rss_peak_mib"] == 1234.5
    assert data["aggregate_model_execution_time_ms"] == 1690
    [m] = ENGINE.measure(records)
    assert m.rep == 0 and m.aggregate_n is None
    assert m.prompt_tps == 520.325  # the printed figure, not 64 / 0.123
    assert m.gen_tps == 20
    assert m.ttft_s == pytest.approx(0.123)
    assert m.ttft_definition == TTFT_PROMPT
    assert m.load_s == pytest.approx(1.5)
    assert m.peak_bytes == 1234.5 * 1024 * 1024 == 1294467072


def test_old_report_derives_the_figures_from_the_stamps() -> None:
    [m] = ENGINE.measure(ENGINE.parse(ECHO + OLD_JSON + "\n"))
    # prefill: 2160 - 2000 = 160 ms for 64 tokens -> 64 / 0.160 = 400 tokens/s
    assert m.prompt_tps == pytest.approx(400.0)
    # decode: 3760 - 2160 = 1600 ms for 32 tokens -> 32 / 1.6 = 20 tokens/s
    assert m.gen_tps == pytest.approx(20.0)
    # first token: 2160 - 2000 = 160 ms; load: 1717000001250 - 1717000000000 ms = 1.25 s
    assert m.ttft_s == pytest.approx(0.16)
    assert m.load_s == pytest.approx(1.25)
    assert m.ttft_definition == TTFT_PROMPT
    assert m.peak_bytes is None  # no RSS line, no GPU keys


def test_a_zero_ms_interval_gives_no_rate() -> None:
    same = OLD_JSON.replace('"prompt_eval_end_ms":1717000002160',
                            '"prompt_eval_end_ms":1717000002000')
    same = same.replace('"first_token_ms":1717000002160', '"first_token_ms":1717000002000')
    [m] = ENGINE.measure(ENGINE.parse(same))
    assert m.prompt_tps is None  # stats.h leaves prefill_token_per_sec out over 0 ms
    assert m.gen_tps == pytest.approx(32 / 1.76)
    assert m.ttft_s == 0.0


def test_gpu_peak_is_the_peak_when_no_rss_line() -> None:
    gpu = NEW_JSON.replace('"SCALING', '"gpu_total_bytes":8589934592,'
                           '"gpu_free_before_load_bytes":8000000000,"gpu_peak_usage_mb":512,'
                           '"SCALING')
    [m] = ENGINE.measure(ENGINE.parse(gpu))
    assert m.peak_bytes == 512 * 1024 * 1024


def test_stderr_summary_is_the_fallback() -> None:
    out = EngineOutput(ECHO, "\n".join([THREADS_LINE, RSS_LINE, SUMMARY]))
    records = ENGINE.parse(out)
    assert len(records) == 1
    data = records[0].as_dict()
    assert data["prompt_tokens"] == 64 and data["generated_tokens"] == 32
    assert data["n_threads"] == 4
    assert data["sampling_tokens"] == 96
    assert records[0].raw.count("\n") == 6
    [m] = ENGINE.measure(records)
    assert m == Measurement(0, 400.0, 20.0, 0.16, ttft_definition=TTFT_PROMPT, load_s=1.25,
                            peak_bytes=round(1234.5 * 1024 * 1024))


def test_summary_rate_over_no_time_is_none() -> None:
    # builds before d3064101e9 divided by 0 ms and printed inf
    inf = SUMMARY.replace("\t0.160000 (seconds)\t\t Rate: \t400.000000",
                          "\t0.000000 (seconds)\t\t Rate: \tinf")
    [m] = ENGINE.measure(ENGINE.parse(EngineOutput("", inf)))
    assert m.prompt_tps is None
    assert m.gen_tps == 20.0


def test_a_truncated_summary_is_dropped() -> None:
    cut = "\n".join(SUMMARY.splitlines()[:4])  # ends after "Prompt evaluation"
    assert ENGINE.parse(EngineOutput("", SUMMARY + "\n" + cut)) != []
    assert len(ENGINE.parse(EngineOutput("", SUMMARY + "\n" + cut))) == 1
    assert ENGINE.parse(EngineOutput("", cut)) == []


def test_two_reports_are_two_repetitions() -> None:
    stderr = "\n".join([THREADS_LINE, RSS_LINE, SUMMARY, THREADS_LINE,
                        RSS_LINE.replace("1234.5", "1300.0"), SUMMARY])
    out = EngineOutput(ECHO + NEW_JSON + "\n" + ECHO + OLD_JSON + "\n", stderr)
    records = ENGINE.parse(out)
    # ru_maxrss is the process's peak so far: the launch's largest line is its peak
    assert [r.as_dict()["rss_peak_mib"] for r in records] == [1300.0, 1300.0]
    first, second = ENGINE.measure(records)
    assert (first.rep, second.rep) == (0, 1)
    assert first.prompt_tps == 520.325
    assert second.prompt_tps == pytest.approx(400.0)
    assert first.aggregate_n is None and second.aggregate_n is None


def test_a_truncated_report_line_is_dropped() -> None:
    cut = OLD_JSON[: len(OLD_JSON) // 2]
    records = ENGINE.parse(ECHO + NEW_JSON + "\n" + ECHO + cut)
    assert len(records) == 1
    assert records[0].raw == NEW_JSON


def test_a_truncated_only_report_falls_back_to_the_summary() -> None:
    out = EngineOutput(ECHO + OLD_JSON[:40], SUMMARY)
    [m] = ENGINE.measure(ENGINE.parse(out))
    assert m.prompt_tps == 400.0


def test_nothing_parseable_is_empty() -> None:
    assert ENGINE.parse("") == []
    assert ENGINE.parse(EngineOutput(
        ECHO, log("Failed to load /x/tokenizer.model as a Tiktoken, Sentencepiece or Llama2.c "
                  "tokenizer, make sure the artifact is one of these types", "runner.cpp:75")
    )) == []
    assert ENGINE.parse("PyTorchObserver [1, 2]\nPyTorchObserver {\"prompt_tokens\":") == []
    assert ENGINE.measure([]) == []


def test_supports_a_plain_cpu_cell() -> None:
    assert ENGINE.supports(CELL) is None
    assert ENGINE.supports(dataclasses.replace(CELL, repetitions=5)) is None
    assert ENGINE.aggregate_only is False
    assert ENGINE.output_file is None


@pytest.mark.parametrize(("change", "reason"), [
    ({"compute_device": "Vulkan0"},
     "ExecuTorch's backend (XNNPACK, Vulkan, QNN) is baked into the exported .pte, so device "
     "Vulkan0 cannot be chosen at run time: the engine axis here is the artifact; cross the "
     "model axis with one .pte per backend instead"),
    ({"compute_device": "HTP0", "n_gpu_layers": -1}, "device HTP0 cannot be chosen"),
    ({"n_gpu_layers": 4}, "n_gpu_layers 4 cannot be asked of llama_main"),
    ({"type_k": "q8_0", "type_v": "q8_0", "flash_attn": "on"}, "KV cache dtype is baked"),
    ({"type_k": "f32", "type_v": "f32"}, "kv f32/f32 cannot be chosen"),
    ({"swa_full": True}, "sliding-window cache layout is baked"),
    ({"sustained_s": 60.0}, "one generation per launch"),
    ({"n_depth": 128}, "n_depth is 128"),
    ({"flash_attn": "on"}, "flash_attn on cannot be asked"),
    ({"affinity": "big"}, "affinity big needs 'all'"),
    ({"load_mode": "mmap+mlock"}, "load mode mmap+mlock cannot"),
    ({"mmap": False}, "load mode none cannot"),
    ({"cache": "cold"}, "the cold cache knob is not honoured"),
    ({"n_prompt": 0}, "at least one token"),
])
def test_supports_reasons(change: dict[str, object], reason: str) -> None:
    got = ENGINE.supports(dataclasses.replace(CELL, **change))  # type: ignore[arg-type]
    assert got is not None and reason in got


def test_supports_shares_the_context_rule() -> None:
    big = dataclasses.replace(CELL, n_prompt=500, n_gen=64)
    problem = support_problem(ENGINE, big)
    assert problem is not None and problem[0] == "workload_exceeds_ctx"


def test_the_bos_counts_in_the_prompt() -> None:
    engine = ExecutorchLlama(prompt_bos=1)
    reason = engine.supports(dataclasses.replace(CELL, n_prompt=1))
    assert reason is not None and "besides its 1 BOS" in reason
    assert "--prompt=the" in engine.argv(dataclasses.replace(CELL, n_prompt=2), BIN, PTE)


DATA = Path(__file__).parent / "data"
MIB = 1024 * 1024


def test_the_largest_rss_line_is_the_peak_not_the_first() -> None:
    """Two generations in one process, each ending with its RSS line: 6940 MiB, then 8039."""
    stderr = (DATA / "executorch_lora_readme_069b4a6.txt").read_text()
    (m,) = ENGINE.measure(ENGINE.parse(EngineOutput(ECHO + NEW_JSON + "\n", stderr)))
    assert m.peak_bytes == round(8039.152344 * MIB)


def test_a_run_without_its_end_of_generation_line_keeps_its_earlier_rss_lines() -> None:
    """Loading 1393.6 MiB, prefill 1468.1 MiB, and no 'finishing text generation' line."""
    stderr = (DATA / "executorch_lora_readme_277d196.txt").read_text()
    (record,) = ENGINE.parse(EngineOutput(ECHO + NEW_JSON + "\n", stderr))
    assert record.as_dict()["rss_peak_mib"] == 1468.085938
    (m,) = ENGINE.measure([record])
    assert m.peak_bytes == round(1468.085938 * MIB)
