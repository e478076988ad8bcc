"""The llama-bench adapter: argv from a cell, JSONL parsing (also truncated), measurements."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from harness.artifacts.builds import Build, file_sha256
from harness.cell import Cell
from harness.engines import get_engine
from harness.engines.llama_bench import (
    Dialect,
    LlamaBench,
    dialect_from_help,
    measure_records,
    parse_output,
)
from harness.errors import EngineError

DATA = Path(__file__).parent / "data"

CELL = Cell(
    build="host-release", model="tiny", quant="Q4_K_M", n_ctx=512, type_k="f16", type_v="f16",
    threads=2, affinity="all", flash_attn="auto", mmap=True, n_batch=512, n_ubatch=256,
    n_prompt=32, n_gen=16, n_depth=0, repetitions=2,
)


def _line(**fields: object) -> str:
    base: dict[str, object] = {
        "build_commit": "0c1e570", "build_number": 0, "model_type": "llama ?B Q4_K - Medium",
        "model_size": 1407232, "n_threads": 2, "type_k": "f16", "type_v": "f16",
        "n_prompt": 32, "n_gen": 0, "n_depth": 0, "avg_ts": 1000.0,
        "samples_ns": [32_000_000, 16_000_000], "samples_ts": [1000.0, 2000.0],
    }
    base.update(fields)
    return json.dumps(base)


PP = _line()
TG = _line(n_prompt=0, n_gen=16, samples_ns=[160_000_000, 80_000_000], samples_ts=[100.0, 200.0])


def test_argv_maps_every_cell_field_in_the_current_dialect() -> None:
    argv = LlamaBench().argv(CELL, "/data/local/tmp/b/llama-bench", "/data/local/tmp/m.gguf")
    assert argv == [
        "/data/local/tmp/b/llama-bench", "-m", "/data/local/tmp/m.gguf", "-p", "32", "-n", "16",
        "-d", "0", "-b", "512", "-ub", "256", "-t", "2", "-ctk", "f16", "-ctv", "f16",
        "-fa", "auto", "-lm", "mmap", "-dev", "none", "-ngl", "0", "-r", "2", "-o", "jsonl",
        "-v",
    ]


def test_where_the_model_runs_is_always_said_never_llama_bench_s_default() -> None:
    """llama-bench's own default is -ngl -1 on the first device: a CPU cell of a GPU build
    would run on the GPU. Every argv names the device and the layers."""
    cpu = LlamaBench().argv(CELL, "lb", "m.gguf")
    assert cpu[cpu.index("-dev") + 1] == "none" and cpu[cpu.index("-ngl") + 1] == "0"
    gpu = dataclasses.replace(CELL, compute_device="Vulkan0", n_gpu_layers=-1)
    argv = LlamaBench().argv(gpu, "lb", "m.gguf")
    assert argv[argv.index("-dev") + 1] == "Vulkan0" and argv[argv.index("-ngl") + 1] == "-1"
    half = LlamaBench().argv(dataclasses.replace(gpu, n_gpu_layers=2), "lb", "m.gguf")
    assert half[half.index("-ngl") + 1] == "2"


def test_offload_without_a_device_and_device_cells_on_old_builds_are_unsupported() -> None:
    lost = dataclasses.replace(CELL, n_gpu_layers=4)
    assert "device none runs every layer on the CPU" in (LlamaBench().supports(lost) or "")
    old = LlamaBench(Dialect(device=False))
    gpu = dataclasses.replace(CELL, compute_device="Vulkan0", n_gpu_layers=-1)
    assert "has no -dev/--device" in (old.supports(gpu) or "")
    # a CPU cell still runs on an old CPU build, with -ngl 0 and no -dev
    argv = old.argv(CELL, "lb", "m.gguf")
    assert "-dev" not in argv and argv[argv.index("-ngl") + 1] == "0"


def test_an_old_gpu_build_cannot_run_the_cpu() -> None:
    """Without -dev, -ngl 0 on a build with a GPU backend still computes on the device
    (docs/gpu.md measured it; tests/run/test_offload.py has the log): not a CPU cell."""
    old_vulkan = LlamaBench(Dialect(device=False), gpu_backends=("vulkan",))
    said = old_vulkan.supports(CELL) or ""
    assert "has no -dev/--device" in said and "vulkan compiled in" in said
    with pytest.raises(EngineError):
        old_vulkan.argv(CELL, "lb", "m.gguf")
    # a newer build of the same backends names -dev none: the CPU it is
    assert LlamaBench(gpu_backends=("vulkan",)).supports(CELL) is None


def test_argv_in_the_older_dialect_uses_mmp_and_numeric_flash_attention() -> None:
    old = LlamaBench(Dialect(load_mode=False, flash_attn_words=False, depth=False, cpu_mask=True))
    cell = dataclasses.replace(CELL, mmap=False, flash_attn="on")
    argv = old.argv(cell, "lb", "m.gguf")
    assert argv[argv.index("-fa") + 1] == "1"
    assert argv[argv.index("-mmp") + 1] == "0"
    assert "-d" not in argv and "-lm" not in argv
    auto = old.argv(CELL, "lb", "m.gguf")
    assert "-fa" not in auto  # "auto" is the old default: leave it to llama-bench


def test_quantised_v_cache_switches_auto_flash_attention_on() -> None:
    cell = dataclasses.replace(CELL, type_k="q8_0", type_v="q8_0", flash_attn="auto")
    argv = LlamaBench().argv(cell, "lb", "m.gguf")
    assert argv[argv.index("-fa") + 1] == "on"
    assert argv[argv.index("-ctv") + 1] == "q8_0"


def test_quantised_v_cache_with_flash_attention_off_is_unsupported_with_the_reason() -> None:
    cell = dataclasses.replace(CELL, type_v="q4_0", flash_attn="off")
    reason = LlamaBench().supports(cell)
    assert reason is not None and "quantised V cache (q4_0) needs flash attention" in reason
    with pytest.raises(EngineError, match="needs flash attention"):
        LlamaBench().argv(cell, "lb", "m.gguf")
    # a quantised K alone is fine without flash attention
    assert LlamaBench().supports(dataclasses.replace(CELL, type_k="q8_0", flash_attn="off")) is None


def test_workload_larger_than_the_context_is_unsupported() -> None:
    cell = dataclasses.replace(CELL, n_ctx=256, n_prompt=200, n_gen=32, n_depth=64)
    assert LlamaBench().supports(cell) == (
        "the workload needs 296 tokens of context (depth 64 + prompt 200 + gen 32) but n_ctx is 256"
    )


def test_affinity_mask_pins_strictly_and_big_needs_a_resolved_mask() -> None:
    pinned = LlamaBench().argv(dataclasses.replace(CELL, affinity="0xf0"), "lb", "m")
    assert pinned[pinned.index("-C") + 1 :][:3] == ["0xf0", "--cpu-strict", "1"]
    big = dataclasses.replace(CELL, affinity="big")
    with pytest.raises(EngineError, match="resolved to a CPU mask"):
        LlamaBench().argv(big, "lb", "m")
    resolved = LlamaBench().argv(big, "lb", "m", cpu_mask="0xc0")
    assert resolved[resolved.index("-C") + 1] == "0xc0"


def test_dialect_is_read_from_help_text() -> None:
    new = "  -fa, --flash-attn <on|off|auto>\n  -lm, --load-mode <auto|none|mmap>\n" \
          "  -d, --n-depth <n>\n  -C, --cpu-mask <hex,hex>\n"
    new += "  -dev, --device <dev0/dev1/...>\n"
    old = "  -fa, --flash-attn <0|1>\n  -mmp, --mmap <0|1>\n"
    assert dialect_from_help(new) == Dialect()
    assert dialect_from_help(old) == Dialect(False, False, False, False, False)


def test_parse_keeps_key_names_unknown_keys_and_reads_missing_ones_as_none() -> None:
    (record,) = parse_output(_line(use_mmap=True, future_key={"a": 1}))
    assert record.n_prompt == 32 and record.build_commit == "0c1e570"
    assert record.samples_ts == (1000.0, 2000.0)
    assert record.use_mmap is True and record.load_mode is None
    assert record.extra == {"future_key": {"a": 1}}
    assert record.as_dict()["future_key"] == {"a": 1}
    assert record.cpu_info is None and record.stddev_ts is None


def test_truncated_last_line_is_dropped_without_losing_finished_lines() -> None:
    text = PP + "\n" + TG[: len(TG) // 2]  # the process died while printing the tg test
    records = parse_output(text)
    assert [r.kind for r in records] == ["pp"]
    assert records[0].raw == PP


def test_a_broken_line_followed_by_a_good_one_is_an_error() -> None:
    with pytest.raises(EngineError, match="line 1 is not JSON"):
        parse_output(PP[:20] + "\n" + TG + "\n")


def test_log_lines_on_stdout_are_ignored() -> None:
    assert len(parse_output("main: warming up\n" + PP + "\nsome log\n" + TG + "\n")) == 2


def test_measurements_pair_prompt_and_generation_per_repetition() -> None:
    measurements = measure_records(parse_output(PP + "\n" + TG + "\n"))
    assert [(m.rep, m.prompt_tps, m.gen_tps, m.ttft_s) for m in measurements] == [
        (0, 1000.0, 100.0, 0.032),
        (1, 2000.0, 200.0, 0.016),
    ]


def test_measurements_of_a_run_cut_after_the_prompt_test_have_no_generation_figure() -> None:
    measurements = measure_records(parse_output(PP + "\n" + TG[:10]))
    assert [m.gen_tps for m in measurements] == [None, None]
    assert [m.prompt_tps for m in measurements] == [1000.0, 2000.0]


def test_get_engine_knows_the_builtin_names() -> None:
    assert get_engine("llama-bench").name == "llama-bench"
    assert get_engine("llama-cpp-python").name == "llama-cpp-python"


def test_golden_output_of_the_vendored_llama_bench_parses() -> None:
    """tests/engines/data/llama_bench_host.jsonl: real `-o jsonl` output of host-release."""
    records = parse_output((DATA / "llama_bench_host.jsonl").read_text())
    assert [(r.kind, r.n_prompt, r.n_gen) for r in records] == [("pp", 32, 0), ("tg", 0, 16)]
    assert all(r.load_mode == "mmap" and r.use_mmap is None for r in records)
    measurements = measure_records(records)
    assert len(measurements) == 2
    assert all(m.gen_tps and m.prompt_tps and m.ttft_s for m in measurements)
    assert measurements[0].ttft_s == records[0].samples_ns[0] / 1e9


def test_golden_output_cut_inside_the_second_test_keeps_the_first() -> None:
    text = (DATA / "llama_bench_host.jsonl").read_text()
    cut = text[: text.index("\n") + 1 + 300]  # killed while printing the generation test
    (record,) = parse_output(cut)
    assert record.kind == "pp" and record.samples_ts == parse_output(text)[0].samples_ts


@pytest.mark.slow
def test_real_llama_bench_of_the_host_build_runs_and_parses(
    host_build: Build, tiny_ladder: dict[str, Path]
) -> None:
    for entry in host_build.manifest.files:
        assert file_sha256(host_build.path / entry.path) == entry.sha256
    engine = LlamaBench()
    argv = engine.argv(CELL, str(host_build.binary()), str(tiny_ladder["Q4_K_M"]))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    records = engine.parse(result.stdout)
    assert len(records) == 2
    measurements = engine.measure(records)
    assert [m.rep for m in measurements] == [0, 1]
    assert all(m.prompt_tps and m.gen_tps and m.ttft_s for m in measurements)
    first = parse_output(result.stdout)[0]
    assert first.build_commit == (host_build.manifest.commit or "")[:7]
    assert first.model_filename == str(tiny_ladder["Q4_K_M"])


def test_load_mode_is_asked_with_the_build_s_own_flag_and_names() -> None:
    dio = dataclasses.replace(CELL, mmap=False, load_mode="dio")
    argv = LlamaBench().argv(dio, "lb", "m.gguf")
    assert argv[argv.index("-lm") + 1] == "dio"
    locked = dataclasses.replace(CELL, load_mode="mmap+mlock")
    assert LlamaBench().argv(locked, "lb", "m.gguf")[argv.index("-lm") + 1] == "mmap+mlock"
    # an older llama-bench knows only -mmp 0|1: other load modes are unsupported, with a reason
    old = LlamaBench(Dialect(load_mode=False))
    assert old.supports(dataclasses.replace(CELL, mmap=False)) is None
    reason = old.supports(dio)
    assert reason is not None and "no --load-mode" in reason and "dio" in reason
